"""``runtime/_internal/aio.py``: waiting on work unless a stop comes first."""

from __future__ import annotations

import asyncio

import pytest

from runtime._internal import aio


async def test_work_cancelled_from_within_is_an_error_not_a_stop() -> None:
    async def work() -> None:
        raise asyncio.CancelledError  # e.g. a library cancelling the wrong task

    with pytest.raises(RuntimeError, match="cancelled from within"):
        await asyncio.wait_for(aio.wait_unless_stopped(work(), asyncio.Event(), 5, "w"), 5)
