"""tests/support/raysim/inside.py counts the requests each head IP gets (answered or reset), and the
``state`` operation reports them: what the RayService tests and benchmark count with."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.support.raysim import inside, serve

IP = "127.0.0.1"


@pytest.fixture
async def sim() -> AsyncIterator[inside.Inside]:
    part = inside.Inside(
        serve.Behaviour(deploy_delay=0.0), {"dashboard": 0, "serve": 0, "agent": 0}
    )
    await part.start(host=IP)
    try:
        yield part
    finally:
        await part.stop()


async def test_requests_are_counted_by_ip_port_method_and_path(sim: inside.Inside) -> None:
    def url(port: str, path: str) -> str:
        return f"http://{IP}:{sim.ports[port]}{path}"

    async with aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=10), connector=aiohttp.TCPConnector(force_close=True)
    ) as http:
        # No live head at the IP yet: the connection is reset, and counted as such.
        with pytest.raises((aiohttp.ClientOSError, aiohttp.ServerDisconnectedError)):
            async with http.get(url("dashboard", "/api/serve/applications/")) as response:
                await response.read()
        sim.set_pods({IP: "uid-1"})
        config = {"applications": [{"name": "a", "import_path": "m.app"}]}
        for _ in range(2):
            async with http.put(url("dashboard", "/api/serve/applications/"), json=config) as r:
                assert r.status == 200
        async with http.get(url("dashboard", "/api/serve/applications/")) as response:
            assert response.status == 200
        async with http.get(url("serve", "/-/healthz")) as response:
            assert response.status == 200

    counts = dict(sim.requests)
    assert counts.pop((IP, "dashboard", "", "")) >= 1  # aiohttp may dial again after a reset
    assert counts == {
        (IP, "dashboard", "PUT", "/api/serve/applications/"): 2,
        (IP, "dashboard", "GET", "/api/serve/applications/"): 1,
        (IP, "serve", "GET", "/-/healthz"): 1,
    }
