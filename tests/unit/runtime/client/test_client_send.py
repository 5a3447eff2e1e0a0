"""runtime.client.Client.send: one raw request with the client's credentials, no retry."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web

from runtime.client import client as client_
from tests.unit import helpers


async def test_send_answers_status_and_bytes_without_retrying_or_raising() -> None:
    seen: list[tuple[str, str, dict[str, str], bytes]] = []
    answers = [
        web.Response(status=503, text="backend down"),
        web.Response(status=200, body=b"\x00raw", content_type="application/octet-stream"),
    ]

    async def handle(request: web.Request) -> web.StreamResponse:
        seen.append((request.method, request.path_qs, dict(request.headers), await request.read()))
        return answers.pop(0)

    async with helpers.api_server(handle) as client:
        client.configuration.api_key["BearerToken"] = "Bearer tok"
        down = await client.send("get", "/api/v1/namespaces/n/pods/p:80/proxy/x", query={"a": 1})
        assert (down.status, down.body) == (503, b"backend down")
        assert len(seen) == 1  # a 503 from request() would have been retried
        raw = await client.send(
            "PUT", "/p", body=b"{}", headers={"Content-Type": "application/json", "X-Extra": "1"}
        )
    assert (raw.status, raw.body, raw.content_type) == (200, b"\x00raw", "application/octet-stream")
    method, path_qs, headers, body = seen[1]
    assert (method, path_qs, body) == ("PUT", "/p", b"{}")
    assert headers["Authorization"] == "Bearer tok"
    assert (headers["Content-Type"], headers["X-Extra"]) == ("application/json", "1")
    assert seen[0][:2] == ("GET", "/api/v1/namespaces/n/pods/p:80/proxy/x?a=1")


async def test_send_honours_its_timeout() -> None:
    release = asyncio.Event()

    async def stall(request: web.Request) -> web.StreamResponse:
        await release.wait()
        return web.Response()

    async with helpers.api_server(stall) as client:
        try:
            with pytest.raises(TimeoutError):
                await client.send("GET", "/", client_timeout=aiohttp.ClientTimeout(total=0.2))
        finally:
            release.set()


def test_raw_response_is_exported() -> None:
    assert "RawResponse" in client_.__all__
    assert client_.RawResponse(200, "", b"").status == 200
