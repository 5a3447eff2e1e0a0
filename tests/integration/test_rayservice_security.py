"""A RayService author cannot aim the operator at another tenant or take it down.

On the real control plane, with the manager in this process and the Ray simulator at
the pod IPs: an ``ExternalName`` Service template is refused before anything is
created (no cluster, no request to any head), and a 420-byte alias bomb beside a
normal RayService is refused while the normal one becomes Ready as usual.
"""

from __future__ import annotations

import asyncio
import pathlib
import time
from collections.abc import AsyncIterator, Iterator

import pytest

import api.v1 as v1
from runtime.client import client as client_
from runtime.client import errors
from runtime.testing import controlplane
from tests.integration import helpers
from tests.integration import rayservice_harness as h
from tests.support import raysim

ROOT = pathlib.Path(__file__).parents[2]
VICTIM = "victim-head-svc.tenant-b.svc.cluster.local"
BOMB = (
    "a: &a [lol]\n"
    + "".join(
        f"{b}: &{b} [{','.join(['*' + a] * 9)}]\n"
        for a, b in zip("abcdefgh", "bcdefghi", strict=True)
    )
    + "applications: [{name: x, import_path: m.x, args: *i}]\n"
)


@pytest.fixture(scope="module", autouse=True)
def crds(control_plane: controlplane.ControlPlane) -> list[str]:
    return control_plane.install_crds(ROOT / "config/crd/bases")


@pytest.fixture(scope="module")
def sim(control_plane: controlplane.ControlPlane) -> Iterator[raysim.Simulator]:
    with raysim.running(control_plane, deploy_delay=1.0) as simulator:
        yield simulator


@pytest.fixture(autouse=True)
def ray_kinds(client: client_.Client) -> None:
    v1.add_to_registry(client.registry)


@pytest.fixture
async def running(
    control_plane: controlplane.ControlPlane, namespace: str, sim: raysim.Simulator
) -> AsyncIterator[h.Running]:
    async with h.manager_running(control_plane, namespace, mode="pod-ip") as r:
        yield r


def validation_failed(obj: h.Obj) -> bool:
    cond = h.condition(obj, "Ready")
    return bool(cond and (cond["status"], cond["reason"]) == ("False", "ValidationFailed"))


async def test_externalname_templates_are_refused_and_nothing_is_contacted(
    client: client_.Client, namespace: str, sim: raysim.Simulator, running: h.Running
) -> None:
    requests_before = sum(sim.requests().values())
    alias = {"spec": {"type": "ExternalName", "externalName": VICTIM}}
    serve = h.rayservice_obj("serve-alias", serveService=alias)
    head = h.rayservice_obj("head-alias")
    head["spec"]["rayClusterConfig"]["headGroupSpec"]["headService"] = alias
    for obj in (serve, head):
        await client.create(obj, namespace=namespace)
    for name, field in (("serve-alias", "spec.serveService"),
                        ("head-alias", "headGroupSpec.headService")):  # fmt: skip
        obj = await h.wait_for(client, namespace, validation_failed, 30, "ValidationFailed", name)
        message = h.condition(obj, "Ready")["message"]  # type: ignore[index]
        assert f"{field}.spec.type 'ExternalName' is not allowed" in message, message
    assert await h.all_clusters(client, namespace) == []
    assert sum(sim.requests().values()) == requests_before


async def test_an_alias_bomb_is_refused_and_its_neighbour_becomes_ready(
    client: client_.Client, namespace: str, sim: raysim.Simulator, running: h.Running
) -> None:
    assert len(BOMB) <= 420
    started = time.monotonic()
    await client.create(h.rayservice_obj("bomb", serve_config=BOMB), namespace=namespace)
    await client.create(h.rayservice_obj(), namespace=namespace)
    obj = await h.wait_for(client, namespace, validation_failed, 30, "ValidationFailed", "bomb")
    assert "anchors and aliases" in h.condition(obj, "Ready")["message"]  # type: ignore[index]
    await h.wait_ready(client, namespace, within=60.0)
    assert time.monotonic() - started < 60
    assert [c for c in await h.all_clusters(client, namespace) if c.startswith("bomb")] == []


def dashboard_gets(sim: raysim.Simulator, ip: str) -> int:
    return sum(
        n
        for (at, port, method, path), n in sim.requests().items()
        if at == ip and port == "dashboard" and method == "GET" and "serve/applications" in path
    )


SLOW_S = 1.5
"""The slow head's answer time (under the dashboard client's 2 s timeout: valid answers)."""


async def test_a_slow_dashboard_neither_hogs_the_worker_nor_delays_its_neighbour(
    client: client_.Client, namespace: str, sim: raysim.Simulator, running: h.Running
) -> None:
    await client.create(h.rayservice_obj("slow"), namespace=namespace)
    ready = await h.wait_ready(client, namespace, "slow")
    slow_ip = await h.head_ip(
        client, namespace, ready["status"]["activeServiceStatus"]["rayClusterName"]
    )
    await client.create(h.rayservice_obj(), namespace=namespace)
    ready = await h.wait_ready(client, namespace)
    demo_ip = await h.head_ip(
        client, namespace, ready["status"]["activeServiceStatus"]["rayClusterName"]
    )
    sim.fault(slow_ip, slow_s=SLOW_S)
    # An UNHEALTHY application keeps the slow service converging, so its poll stays at
    # the 2 s of a converging service: only the fairness rule spaces it out.
    sim.fault(slow_ip, unhealthy="fruit")
    await asyncio.sleep(2 * SLOW_S)
    gets_before, window_start = dashboard_gets(sim, slow_ip), time.monotonic()
    latencies = []
    for round_ in range(4):
        puts = h.serve_puts(sim)
        config = h.SERVE_CONFIG.replace("/fruit", f"/fruit{round_}")
        changed_at = time.monotonic()
        for _ in range(5):  # as kubectl edit: again when the operator wrote meanwhile
            current = await h.get_service(client, namespace)
            current["spec"]["serveConfigV2"] = config
            try:
                await client.update(current)
                break
            except errors.Conflict:
                continue

        async def submitted(since: dict[str, int] = puts) -> bool:
            return h.serve_puts(sim, since=since).get(demo_ip, 0) >= 1

        await helpers.eventually(submitted, 30, "the neighbour's new config at its head")
        latencies.append(time.monotonic() - changed_at)
        await asyncio.sleep(3)
    window = time.monotonic() - window_start
    share = (dashboard_gets(sim, slow_ip) - gets_before) * SLOW_S / window
    # Bounds: the slow head holds the worker at most ~1/(1 + 4) of the time (measured
    # share printed), and the neighbour waits at most one slow pass plus its own.
    print(f"slow share {share:.2f}, neighbour latencies {[round(x, 2) for x in latencies]}")
    assert share <= 0.3, f"the slow dashboard held the worker {share:.0%} of the time"
    assert max(latencies) <= 2 * SLOW_S + 1.5, latencies
