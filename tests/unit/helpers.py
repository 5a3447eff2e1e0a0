"""Small helpers for unit tests."""

from __future__ import annotations

import asyncio


async def settle(rounds: int = 20) -> None:
    """Give every ready task a chance to run (no real time passes)."""
    for _ in range(rounds):
        await asyncio.sleep(0)
