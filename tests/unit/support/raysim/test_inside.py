"""tests/support/raysim/inside.py: the listeners, on loopback in this process (the dispatch on the
local address, resets for IPs that are not live heads, the fault switches)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.support.raysim import inside, serve

IP = "127.0.0.1"


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def sim(clock: Clock) -> AsyncIterator[inside.Inside]:
    part = inside.Inside(
        serve.Behaviour(deploy_delay=2.0), {"dashboard": 0, "serve": 0, "agent": 0}, clock=clock
    )
    await part.start(host=IP)
    try:
        yield part
    finally:
        await part.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    timeout = aiohttp.ClientTimeout(total=10)
    # A fresh connection per request, so a reset is seen by the request that caused it.
    async with aiohttp.ClientSession(
        timeout=timeout, connector=aiohttp.TCPConnector(force_close=True)
    ) as session:
        yield session


def url(sim: inside.Inside, port: str, path: str) -> str:
    return f"http://{IP}:{sim.ports[port]}{path}"


async def refused(session: aiohttp.ClientSession, target: str) -> bool:
    try:
        async with session.get(target) as response:
            await response.read()
    except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError):
        return True
    return False


async def test_an_ip_that_is_not_a_live_head_is_reset(
    sim: inside.Inside, http: aiohttp.ClientSession
) -> None:
    assert await refused(http, url(sim, "dashboard", "/api/gcs_healthz"))
    assert await refused(http, url(sim, "agent", "/api/local_raylet_healthz"))
    sim.set_pods({IP: "uid-1"})
    async with http.get(url(sim, "dashboard", "/api/gcs_healthz")) as response:
        assert (response.status, await response.text()) == (200, "success")
    async with http.get(url(sim, "agent", "/api/local_raylet_healthz")) as response:
        assert (response.status, await response.text()) == (200, "success")
    sim.set_pods({})
    assert await refused(http, url(sim, "dashboard", "/api/gcs_healthz"))


async def test_the_serve_api_and_the_proxy_over_http(
    sim: inside.Inside, http: aiohttp.ClientSession, clock: Clock
) -> None:
    sim.set_pods({IP: "uid-1"})
    apps = url(sim, "dashboard", "/api/serve/applications/")
    async with http.get(apps, params={"api_type": "declarative"}) as response:
        assert await response.json() == serve.empty_status()
    # No Serve yet: no proxy on :8000.
    assert await refused(http, url(sim, "serve", "/-/healthz"))
    async with http.put(apps, json={"applications": [{"name": "x", "route_prefix": "/x"}]}) as r:
        assert r.status == 400
        assert r.content_type == "text/plain"
        assert "import_path" in await r.text()
    config = {"applications": [{"name": "fruit", "route_prefix": "/fruit", "import_path": "f.app"}]}
    async with http.put(apps, json=config) as response:
        assert response.status == 200
        assert await response.read() == b""
    async with http.get(apps) as response:
        assert (await response.json())["applications"]["fruit"]["status"] == "DEPLOYING"
    async with http.get(url(sim, "serve", "/-/healthz")) as response:
        assert (response.status, await response.text()) == (200, "success")
    async with http.get(url(sim, "serve", "/fruit")) as response:
        assert response.status == 404
    clock.now += 2.0
    async with http.get(apps) as response:
        assert (await response.json())["applications"]["fruit"]["status"] == "RUNNING"
    async with http.get(url(sim, "serve", "/fruit/apple")) as response:
        assert (response.status, await response.text()) == (200, "fruit")
    async with http.put(apps, data=b"{not json") as response:
        assert response.status == 400
    async with http.delete(apps) as response:
        assert response.status == 200
    async with http.get(apps) as response:
        assert await response.json() == serve.empty_status()


async def test_a_worker_ip_answers_as_a_serve_proxy_of_its_head_and_nothing_else(
    clock: Clock, http: aiohttp.ClientSession
) -> None:
    worker = "127.0.0.2"  # loopback: any 127/8 address reaches a listener on 0.0.0.0
    part = inside.Inside(
        serve.Behaviour(deploy_delay=0.0), {"dashboard": 0, "serve": 0, "agent": 0}, clock=clock
    )
    await part.start(host="0.0.0.0")
    try:

        def at(ip: str, port: str, path: str) -> str:
            return f"http://{ip}:{part.ports[port]}{path}"

        part.set_pods({IP: "uid-1"}, {worker: IP})
        assert await refused(http, at(worker, "serve", "/-/healthz"))  # no Serve yet
        config = {"applications": [{"name": "a", "route_prefix": "/a", "import_path": "m.app"}]}
        async with http.put(at(IP, "dashboard", "/api/serve/applications/"), json=config) as r:
            assert r.status == 200
        async with http.get(at(worker, "serve", "/a/x")) as response:
            assert (response.status, await response.text()) == (200, "a")
        assert await refused(http, at(worker, "dashboard", "/api/gcs_healthz"))
        assert await refused(http, at(worker, "agent", "/api/local_raylet_healthz"))
        assert part.requests[(worker, "serve", "GET", "/a/x")] == 1
        part.set_pods({}, {worker: IP})  # the head went away: so did its proxies
        assert await refused(http, at(worker, "serve", "/-/healthz"))
        part.set_pods({worker: "uid-2"}, {worker: IP})  # an IP is a head or a proxy, not both
        assert part.proxies == {}
    finally:
        await part.stop()


async def test_a_new_pod_at_the_same_ip_starts_fresh(
    sim: inside.Inside, http: aiohttp.ClientSession
) -> None:
    sim.set_pods({IP: "uid-1"})
    apps = url(sim, "dashboard", "/api/serve/applications/")
    config = {"applications": [{"name": "a", "import_path": "m.app"}]}
    async with http.put(apps, json=config) as response:
        assert response.status == 200
    sim.set_pods({IP: "uid-1"})
    async with http.get(apps) as response:
        assert set((await response.json())["applications"]) == {"a"}
    sim.set_pods({IP: "uid-2"})
    async with http.get(apps) as response:
        assert await response.json() == serve.empty_status()


async def test_fault_switches(
    sim: inside.Inside, http: aiohttp.ClientSession, clock: Clock
) -> None:
    assert sim.fault({"ip": IP, "restart": True})["ok"] is False  # no such head
    sim.set_pods({IP: "uid-1"})
    apps = url(sim, "dashboard", "/api/serve/applications/")
    config = {"applications": [{"name": "a", "route_prefix": "/a", "import_path": "m.app"}]}
    async with http.put(apps, json=config) as response:
        assert response.status == 200
    clock.now += 2.0

    assert sim.fault({"ip": IP, "dashboard_down": True}) == {"ok": True}
    assert await refused(http, apps)
    assert await refused(http, url(sim, "agent", "/api/local_raylet_healthz"))
    async with http.get(url(sim, "serve", "/a")) as response:  # the proxy still serves
        assert await response.text() == "a"
    sim.fault({"ip": IP, "dashboard_down": False})

    sim.fault({"ip": IP, "slow_s": 0.3})
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with http.get(apps) as response:
        assert response.status == 200
    assert loop.time() - started >= 0.3
    with pytest.raises(asyncio.TimeoutError):
        async with http.get(apps, timeout=aiohttp.ClientTimeout(total=0.1)) as response:
            await response.read()
    sim.fault({"ip": IP, "slow_s": 0})

    assert sim.fault({"ip": IP, "unhealthy": "a"}) == {"ok": True, "unhealthy": True}
    async with http.get(apps) as response:
        assert (await response.json())["applications"]["a"]["status"] == "UNHEALTHY"

    assert sim.fault({"ip": IP, "restart": True}) == {"ok": True}
    async with http.get(apps) as response:
        body = await response.json()
    assert body == serve.empty_status()
    assert json.dumps(body)  # plain JSON
    assert await refused(http, url(sim, "serve", "/-/healthz"))
