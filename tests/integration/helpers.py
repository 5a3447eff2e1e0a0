"""Polling helpers for integration tests, and :func:`bench`: a ``hack/bench`` script run
as its own process, its last line read."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from runtime.client import resources
from runtime.testing import waiting

T = TypeVar("T")

WIDGETS = resources.Resource("test.rayservice.dev", "v1", "Widget", "widgets")
GADGETS = resources.Resource("test.rayservice.dev", "v1", "Gadget", "gadgets")
"""The test kinds (``testdata/crds``) the ``client`` fixture registers."""


ROOT = pathlib.Path(__file__).parents[2]


def bench(script: pathlib.Path, argv: list[str], *, timeout: float) -> dict[str, Any]:
    """Run the benchmark ``script`` with ``argv`` from the repository root; its report, the
    JSON object of its last line, once it exited 0 and reported no ``error`` (else the
    test fails with the error and the tail of stderr)."""
    done = subprocess.run(
        [sys.executable, str(script), *argv],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    lines = done.stdout.strip().splitlines()
    assert lines, f"no output; stderr:\n{done.stderr[-3000:]}"
    report: dict[str, Any] = json.loads(lines[-1])
    assert done.returncode == 0, f"{report.get('error')}\nstderr:\n{done.stderr[-3000:]}"
    assert "error" not in report
    return report


class Leading:
    """A leader-only runnable that notes when it runs (``running``), for manager tests."""

    needs_leader_election = True

    def __init__(self) -> None:
        self.running = asyncio.Event()

    async def start(self, stop: asyncio.Event) -> None:
        self.running.set()
        await stop.wait()


async def eventually(
    check: Callable[[], Awaitable[T | None] | T | None],
    within: float = 30.0,
    what: str = "condition",
) -> T:
    """The kit's :func:`runtime.testing.eventually` (``check()`` until it is truthy;
    its assertions and NotFound are "not yet"), polled every 0.1 s for ``within`` s."""
    return await waiting.eventually(check, within=within, interval=0.1, what=what)


def eventually_sync(check: Callable[[], T | None], within: float = 30.0, what: str = "it") -> T:
    """:func:`eventually` for plain functions."""
    deadline = time.monotonic() + within
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {within} s (last value: {value!r})")
        time.sleep(0.1)


ROOT = pathlib.Path(__file__).parents[2]


def spawn_slow_manager(
    kubeconfig: pathlib.Path, namespace: str, log: pathlib.Path, *args: str
) -> subprocess.Popen[bytes]:
    """Start ``testdata/slow_manager.py`` (``args``: reconcile seconds, shutdown budget),
    its output going to ``log``."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, str(ROOT / "tests/integration/testdata/slow_manager.py"),
             str(kubeconfig), namespace, *args],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
