"""Small helpers for unit tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


async def settle(rounds: int = 20) -> None:
    """Give every ready task a chance to run (no real time passes)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def eventually(
    condition: Callable[[], T | None], within: float = 5.0, what: str = "the condition"
) -> T:
    """Wait (real time, polling every millisecond) until ``condition()`` is truthy and
    return its value; fail the test if it is not within ``within`` seconds. For what
    takes real time (a reconcile timeout, a thread); use :func:`settle` for what only
    needs the loop to turn."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        value = condition()
        if value:
            return value
        if loop.time() >= deadline:
            raise AssertionError(f"{what} not met within {within} s (last value: {value!r})")
        await asyncio.sleep(0.001)
