"""Small asyncio helpers shared by the runtime's long-running loops."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

__all__ = ["wait_first"]


async def wait_first(*events: asyncio.Event, tasks: Iterable[asyncio.Future[Any]] = ()) -> None:
    """Return as soon as one of ``events`` is set or one of ``tasks`` is done.

    The waiters made for the events are cancelled before returning; ``tasks`` are
    left alone (they belong to the caller).
    """
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait({*waiters, *tasks}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
