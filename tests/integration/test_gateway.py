"""Traefik (``tests/support/gateway.py``) is a real Gateway API implementation on the real
control plane, and it splits traffic by weight.

Two Ray-simulator head pods each serve one Serve application at ``/`` (its answer is the
application's name, so every response says which pod gave it), each behind its own Service.
A Gateway of class ``traefik`` (listener ``http``, HTTP, port 80) turns Accepted and
Programmed with Traefik's loopback address; an HTTPRoute (``PathPrefix /``, the two Services
weighted 30/70) turns Accepted with ResolvedRefs for it. 200 requests through Traefik's entry
point split within 10 points of the weights; the simulator counted them at the two pod IPs
(Traefik dials EndpointSlice addresses, and its access log shows no other upstream). With the
weights set to 100/0, every request goes to the first Service.
"""

from __future__ import annotations

import collections
import ipaddress
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from runtime.testing import controlplane
from tests.integration import helpers
from tests.support import gateway, raysim

HEAD_LABELS = {"ray.io/node-type": "head", "ray.io/is-ray-node": "yes"}
BACKENDS = ("blue", "green")
SERVE_PORT = 8000
GATEWAY = "gw"
ROUTE = "split"
ROUTES_PATH = "/apis/gateway.networking.k8s.io/v1/namespaces/{ns}/httproutes"
GATEWAYS_PATH = "/apis/gateway.networking.k8s.io/v1/namespaces/{ns}/gateways"
REQUESTS = 200


@pytest.fixture(scope="module")
def sim(control_plane: controlplane.ControlPlane) -> Iterator[raysim.Simulator]:
    with raysim.running(control_plane, deploy_delay=0.5) as s:
        yield s


@pytest.fixture(scope="module")
def traefik(
    control_plane: controlplane.ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[gateway.Traefik]:
    with gateway.running(control_plane, tmp_path_factory.mktemp("traefik")) as t:
        yield t


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10, connect=5)) as s:
        yield s


async def backend_pod(cp: controlplane.ControlPlane, namespace: str, name: str) -> str:
    """A simulator head pod labelled ``gw-backend=<name>`` serving application ``name`` at
    ``/``, and a Service ``name`` for its Serve port; the pod's IP."""
    cp.request(
        "POST", f"/api/v1/namespaces/{namespace}/pods",
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": name, "labels": {**HEAD_LABELS, "gw-backend": name}},
         "spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.60.0"}]}},
    )  # fmt: skip
    cp.request(
        "POST", f"/api/v1/namespaces/{namespace}/services",
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
         "spec": {"selector": {"gw-backend": name},
                  "ports": [{"name": "serve", "port": SERVE_PORT, "targetPort": SERVE_PORT}]}},
    )  # fmt: skip

    def ip() -> str | None:
        status = cp.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}").get("status")
        return status.get("podIP") if (status or {}).get("phase") == "Running" else None

    return str(await helpers.eventually(ip, 90, f"pod {name} Running with an IP"))


async def deploy_app(
    cp: controlplane.ControlPlane, http: aiohttp.ClientSession, ip: str, name: str
) -> None:
    """PUT a Serve config with one application ``name`` at ``/`` to the head at ``ip``."""
    network = cp.pod_network
    assert network is not None
    assert ipaddress.ip_address(ip) in ipaddress.ip_network(network.cidr), ip
    network.connections.append((ip, 8265))
    config = {"applications": [{"name": name, "route_prefix": "/", "import_path": "m.app"}]}
    async with http.put(f"http://{ip}:8265/api/serve/applications/", json=config) as response:
        assert response.status == 200, await response.text()


def route_body(weights: tuple[int, int]) -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": ROUTE},
        "spec": {
            "parentRefs": [{"name": GATEWAY}],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                    "backendRefs": [
                        {"name": name, "port": SERVE_PORT, "weight": weight}
                        for name, weight in zip(BACKENDS, weights, strict=True)
                    ],
                }
            ],
        },
    }


async def split(http: aiohttp.ClientSession, url: str, count: int) -> collections.Counter[str]:
    """Who answered ``count`` sequential GETs (``"<status>"`` for a non-200 answer)."""
    answers: collections.Counter[str] = collections.Counter()
    for _ in range(count):
        async with http.get(url) as response:
            text = await response.text()
            answers[text if response.status == 200 else str(response.status)] += 1
    return answers


async def test_gateway_programs_and_splits_traffic_by_weight(
    control_plane: controlplane.ControlPlane,
    namespace: str,
    sim: raysim.Simulator,
    traefik: gateway.Traefik,
    http: aiohttp.ClientSession,
) -> None:
    cp = control_plane
    ips = {name: await backend_pod(cp, namespace, name) for name in BACKENDS}
    await helpers.eventually(
        lambda: set(ips.values()) <= set(sim.state()["ips"]), 60, "the simulator to know the heads"
    )
    for name, ip in ips.items():
        await deploy_app(cp, http, ip, name)

    started = time.monotonic()
    cp.request(
        "POST", GATEWAYS_PATH.format(ns=namespace),
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
         "metadata": {"name": GATEWAY},
         "spec": {"gatewayClassName": gateway.GATEWAY_CLASS,
                  "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}]}},
    )  # fmt: skip
    cp.request("POST", ROUTES_PATH.format(ns=namespace), route_body((30, 70)))

    def programmed() -> dict[str, Any] | None:
        found: dict[str, Any] = cp.request("GET", f"{GATEWAYS_PATH.format(ns=namespace)}/{GATEWAY}")
        wanted = {"Accepted": "True", "Programmed": "True"}
        return found if wanted.items() <= gateway.conditions(found.get("status")).items() else None

    gw = await helpers.eventually(programmed, 60, "the Gateway Accepted and Programmed")
    programmed_after = time.monotonic() - started
    assert [a["value"] for a in gw["status"]["addresses"]] == [traefik.address]

    def route_accepted() -> bool:
        route = cp.request("GET", f"{ROUTES_PATH.format(ns=namespace)}/{ROUTE}")
        found = gateway.parent_conditions(route, GATEWAY)
        return found.get("Accepted") == "True" and found.get("ResolvedRefs") == "True"

    await helpers.eventually(route_accepted, 60, "the HTTPRoute Accepted with ResolvedRefs")

    def attached() -> bool:
        found = cp.request("GET", f"{GATEWAYS_PATH.format(ns=namespace)}/{GATEWAY}")
        listeners = found["status"]["listeners"]
        return [(x["name"], x["attachedRoutes"]) for x in listeners] == [("http", 1)]

    await helpers.eventually(attached, 30, "the route attached to the listener")

    # Endpoints turn ready, and Traefik picks them up, a moment after the route resolves.
    async def both_answer() -> bool:
        return set(await split(http, traefik.url + "/", 20)) == set(BACKENDS)

    await helpers.eventually(both_answer, 60, "both backends answering through Traefik")
    before = sim.requests()
    answers = await split(http, traefik.url + "/anything", REQUESTS)
    assert sum(answers[name] for name in BACKENDS) == REQUESTS, answers
    for name, weight in zip(BACKENDS, (30, 70), strict=True):
        assert abs(100 * answers[name] / REQUESTS - weight) <= 10, (answers, programmed_after)
    after = sim.requests()
    for name, ip in ips.items():
        key = (ip, "serve", "GET", "/anything")
        assert after.get(key, 0) - before.get(key, 0) == answers[name], (name, ip)

    cp.request(
        "PATCH", f"{ROUTES_PATH.format(ns=namespace)}/{ROUTE}",
        {"spec": route_body((100, 0))["spec"]}, content_type="application/merge-patch+json",
    )  # fmt: skip

    async def only_blue() -> bool:
        return await split(http, traefik.url + "/", 20) == {"blue": 20}

    await helpers.eventually(only_blue, 60, "every request going to blue")
    assert await split(http, traefik.url + "/", REQUESTS) == {"blue": REQUESTS}
    # Traefik dialled the two pod IPs and nothing else (never a ClusterIP).
    assert cp.pod_network is not None
    traefik.check_upstreams(cp.pod_network.cidr)
    assert {u.rsplit(":", 1)[0] for u in traefik.upstreams()} == set(ips.values())
