"""Shared fixtures: every async test must leave no asyncio task behind, and a test
against a server leaves no unclosed socket behind."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Iterator

import pytest


@pytest.fixture(autouse=True)
async def _no_leaked_tasks() -> AsyncIterator[None]:
    before = asyncio.all_tasks()
    yield
    for _ in range(3):  # let tasks that are finishing run their last step
        await asyncio.sleep(0)
    current = asyncio.current_task()
    leaked = [t for t in asyncio.all_tasks() - before if t is not current and not t.done()]
    for task in leaked:
        task.cancel()
    if leaked:
        await asyncio.gather(*leaked, return_exceptions=True)
        pytest.fail(f"test left {len(leaked)} asyncio task(s) pending: {leaked}")


@pytest.fixture(autouse=True)
def _collect_garbage_after_server_tests(request: pytest.FixtureRequest) -> Iterator[None]:
    """After an integration or e2e test, collect garbage in its own teardown.

    A socket or transport that such a test leaked in a reference cycle would otherwise
    be finalised whenever the collector next runs - in some later, unrelated test,
    whose report then carries the ``ResourceWarning`` (``filterwarnings = error``).
    Collected here, the warning fails the test that leaked."""
    yield
    if request.node.get_closest_marker("integration") or request.node.get_closest_marker("e2e"):
        gc.collect()
