"""Helpers for the dashboard client's tests: recorded Ray 2.60 answers and a stand-in head.

``recorded(name)`` is a body from ``tests/unit/testdata/ray-2.60/`` (see its README),
``recorded_response(name)`` that answer as Ray sent it. :class:`Head` stands in for a
Ray head (the ``head`` fixture in ``conftest.py`` serves it on 127.0.0.1): a test
queues the answers (``head.answers``), the server records every request (method,
path with query, headers, body) and answers the next queued one.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from tests.unit import helpers

RECORDED = helpers.TESTDATA / "ray-2.60"
ANSWERS: dict[str, dict[str, Any]] = json.loads((RECORDED / "answers.json").read_text())


def recorded(name: str) -> bytes:
    return (RECORDED / name).read_bytes()


def recorded_response(name: str) -> web.Response:
    """The recorded answer as Ray sent it: status, content type and body."""
    meta = ANSWERS[name]
    return web.Response(
        status=meta["status"], body=recorded(name), headers={"Content-Type": meta["content_type"]}
    )


Answer = web.StreamResponse | Callable[[web.Request], Awaitable[web.StreamResponse]]


class Head:
    """A stand-in for a Ray head's HTTP endpoints (dashboard or Serve proxy)."""

    def __init__(self) -> None:
        self.answers: list[Answer] = []
        self.requests: list[dict[str, Any]] = []
        self.release = asyncio.Event()
        """Set at teardown: handlers that stall wait on it, so none outlives the test."""
        self.port = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(
            {
                "method": request.method,
                "path_qs": request.path_qs,
                "headers": dict(request.headers),
                "body": await request.read(),
            }
        )
        if not self.answers:
            return web.Response(status=599, text="the test queued no answer")
        answer = self.answers.pop(0)
        if isinstance(answer, web.StreamResponse):
            return answer
        return await answer(request)

    async def stall(self, request: web.Request) -> web.StreamResponse:
        """An answer that never comes (until teardown)."""
        await self.release.wait()
        return web.Response(status=200, text="{}")

    async def stall_body(self, request: web.Request) -> web.StreamResponse:
        """Headers at once, then a body that never ends (until teardown)."""
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"applications": ')
        await self.release.wait()
        return response
