"""Polling helpers for integration tests."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(
    check: Callable[[], Awaitable[T | None] | T | None],
    within: float = 30.0,
    what: str = "condition",
) -> T:
    """Call ``check()`` (awaiting it if it is async) until it returns something truthy;
    fail after ``within`` s."""
    deadline = time.monotonic() + within
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {within} s (last value: {value!r})")
        await asyncio.sleep(0.1)


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
