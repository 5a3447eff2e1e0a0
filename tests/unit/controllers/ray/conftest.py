"""The ``head`` fixture: a stand-in Ray head on 127.0.0.1 (see ``headserver.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from tests.unit.controllers.ray import headserver


@pytest.fixture
async def head() -> AsyncIterator[headserver.Head]:
    server = headserver.Head()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield server
    finally:
        server.release.set()
        await runner.cleanup()
