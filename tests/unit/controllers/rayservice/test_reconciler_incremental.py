"""NewClusterWithIncrementalUpgrade through the reconciler, on the fake API server: the
first cluster behind a Gateway, an idle service that is never written, an upgrade whose
capacity and traffic move step by step within their bounds, a restart mid-way, and a
rollback. The test plays the RayCluster controller, kube-controller-manager (the
EndpointSlices) and the gateway controller (Accepted and Programmed).
"""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest

import api.v1 as v1
from controllers.rayservice import clusters, gateway, services
from controllers.rayservice import reconciler as reconciler_
from runtime.client import errors
from tests.unit.controllers.rayservice import scenario

Env = scenario.Env
pytestmark = pytest.mark.gateway_api
OPTIONS = {"maxSurgePercent": 50, "stepSizePercent": 50, "intervalSeconds": 10,
           "gatewayClassName": "traefik"}  # fmt: skip
SLICES = services.ENDPOINT_SLICES


def rayservice() -> dict[str, Any]:
    svc = scenario.rayservice(
        upgradeStrategy={"type": "NewClusterWithIncrementalUpgrade",
                         "clusterUpgradeOptions": OPTIONS},
    )  # fmt: skip
    svc["spec"]["rayClusterConfig"]["enableInTreeAutoscaling"] = True
    return svc


async def get(env: Env, resource: Any, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = await env.client.get(resource, "ns", name)
    except errors.NotFound:
        return None
    return found


class World:
    """What runs around the operator: each cluster's head and Serve, its serve endpoints,
    and the gateway controller accepting the Gateway and the HTTPRoute."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.started: set[str] = set()

    async def step(self) -> None:
        env = self.env
        for name in await env.live_clusters():
            if name not in self.started:
                await env.start_head(name, serve="true")
                self.started.add(name)
            fake = env.fake(name)
            if fake.applications:
                fake.set_all("RUNNING")
            svc = await get(env, services.SERVICES, services.cluster_serve_service_name(name))
            if svc is not None:
                await self.endpoints(name, 0 if fake.target_capacity == 0 else 1)
        for resource, name in (
            (gateway.GATEWAYS, "demo-gateway"),
            (gateway.HTTPROUTES, "demo-httproute"),
        ):
            found = await get(env, resource, name)
            if found is None:
                continue
            if resource is gateway.GATEWAYS:
                found["status"] = {
                    "conditions": [
                        {"type": "Accepted", "status": "True"},
                        {"type": "Programmed", "status": "True"},
                    ]
                }
            else:
                found["status"] = {
                    "parents": [
                        {
                            "parentRef": {"name": "demo-gateway", "namespace": "ns"},
                            "controllerName": "traefik.io/gateway-controller",
                            "conditions": [
                                {"type": "Accepted", "status": "True"},
                                {"type": "ResolvedRefs", "status": "True"},
                            ],
                        }
                    ]
                }
            if found.get("status") != (await get(env, resource, name) or {}).get("status"):
                await env.client.update_status(found)
        await env.synced()

    async def endpoints(self, cluster: str, ready: int) -> None:
        env = self.env
        svc_name = services.cluster_serve_service_name(cluster)
        body = {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{svc_name}-x", "namespace": "ns", "labels": {
                "kubernetes.io/service-name": svc_name,
                clusters.ORIGINATED_FROM_CRD_LABEL: "RayService",
                clusters.ORIGINATED_FROM_NAME_LABEL: cluster}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [f"198.18.8.{i}"], "conditions": {"ready": True},
                           "targetRef": {"kind": "Pod", "uid": f"{cluster}-{i}"}}
                          for i in range(ready)],
        }  # fmt: skip
        current = await get(env, SLICES, body["metadata"]["name"])
        if current is None:
            await env.client.create(body)
        elif current["endpoints"] != body["endpoints"]:
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            await env.client.update(body)


async def weights(env: Env) -> dict[str, int]:
    return gateway.weights(await get(env, gateway.HTTPROUTES, "demo-httproute"))


async def converge(env: Env, world: World, passes: int, seconds: float = 5.0) -> None:
    for _ in range(passes):
        await world.step()
        await env.reconcile()
        env.now += datetime.timedelta(seconds=seconds)


async def test_an_incremental_upgrade_moves_capacity_then_traffic_and_writes_once_per_step(
    env: Env,
) -> None:
    world = World(env)
    await env.client.create(rayservice())
    await env.synced()
    await converge(env, world, 8)
    (old,) = await env.live_clusters()
    svc = await env.service()
    assert scenario.condition(svc, "Ready")["status"] == "True"
    assert env.fake(old).last_config is not None
    assert env.fake(old).last_config["target_capacity"] == 100  # KubeRay's first value
    assert await weights(env) == {old: 100}
    active = svc["status"]["activeServiceStatus"]
    assert (active["targetCapacity"], active["trafficRoutedPercent"]) == (100, 100)
    gw = await get(env, gateway.GATEWAYS, "demo-gateway")
    assert gw is not None
    assert gw["spec"]["gatewayClassName"] == "traefik"

    # at rest: not one write, whatever the time (KubeRay v1.7.0: one status write per 2 s)
    before = len(env.client.calls)
    writes, status = env.writes(), env.status_writes()
    await converge(env, world, 20, seconds=10.0)
    assert (env.writes(), env.status_writes()) == (writes, status), env.client.calls[before:]

    # the upgrade
    svc = await env.service()
    svc["spec"]["rayClusterConfig"]["rayVersion"] = "2.61.0"
    await env.client.update(svc)
    await env.synced()
    status = env.status_writes()
    seen: list[tuple[int, int, int, int]] = []
    new = None
    for _ in range(60):
        await converge(env, world, 1, seconds=5.0)
        live = await env.live_clusters()
        new = next((c for c in live if c != old), None)
        if new is None:
            continue
        w = await weights(env)
        a_cap = env.fake(old).target_capacity
        b_cap = env.fake(new).target_capacity if env.fake(new).submitted else 0
        state = (int(a_cap if a_cap is not None else 100), int(b_cap or 0),
                 w.get(old, 100 if not w else 0), w.get(new, 0))  # fmt: skip
        if not seen or seen[-1] != state:
            seen.append(state)
        assert state[0] + state[1] <= 150, seen  # 100 + maxSurgePercent
        assert state[3] <= state[1], seen  # traffic never ahead of capacity
        head = await get(env, services.SERVICES, "demo-head-svc")
        if head is not None and services.selected_cluster(head) == new:
            break
    assert new is not None
    assert seen[0] == (100, 0, 100, 0)
    assert seen[-1] == (0, 100, 0, 100), seen
    assert await weights(env) == {new: 100}
    # the new cluster started without worker replicas (it grows with target_capacity)
    created = await get(env, v1.RAYCLUSTERS, new)
    assert created is not None
    assert all(g.get("replicas") in (None, 0) for g in created["spec"]["workerGroupSpecs"])
    # one status write per observable change: each step, the cluster's states, the promotion
    steps = len(seen) - 1
    assert env.status_writes() - status <= steps + 3, (env.status_writes() - status, seen)
    await converge(env, world, 10, seconds=10.0)  # the old cluster goes after the delay
    assert await env.live_clusters() == [new]
    svc = await env.service()
    assert scenario.condition(svc, "Ready")["status"] == "True"
    assert scenario.condition(svc, "UpgradeInProgress")["status"] == "False"
    assert "pendingServiceStatus" not in svc["status"]


async def first_traffic_step(env: Env, world: World) -> tuple[str, str, dict[str, Any]]:
    """A served RayService upgraded until the new cluster has some traffic: (old cluster,
    new cluster, the original rayClusterConfig)."""
    await env.client.create(rayservice())
    await env.synced()
    await converge(env, world, 8)
    (old,) = await env.live_clusters()
    svc = await env.service()
    original = copy.deepcopy(svc["spec"]["rayClusterConfig"])
    svc["spec"]["rayClusterConfig"]["rayVersion"] = "2.61.0"
    await env.client.update(svc)
    await env.synced()
    for _ in range(30):
        await converge(env, world, 1)
        others = set(await env.live_clusters()) - {old}
        if others and (await weights(env)).get(others.pop(), 0) > 0:
            break
    (new,) = set(await env.live_clusters()) - {old}
    return old, new, original


async def test_a_restart_mid_upgrade_continues_from_the_objects(env: Env) -> None:
    world = World(env)
    old, new, _ = await first_traffic_step(env, world)
    mid = await weights(env)
    assert 0 < mid[new] < 100
    # a new operator process: nothing in memory
    env.reconciler = reconciler_.Reconciler(
        env.client, env.cache, env.recorder, env.dashboards,
        reconciler_.Options(
            address_mode="pod-ip", gateway_api=True, gateway_classes=scenario.GATEWAY_CLASSES
        ),
        clock=lambda: env.now,
    )  # fmt: skip
    puts = env.fake(new).put_count
    await converge(env, world, 1, seconds=0.0)
    assert await weights(env) in (mid, {old: mid[old] - 50, new: mid[new] + 50})
    assert env.fake(new).put_count <= puts + 1  # no resubmission of the config
    assert await env.live_clusters() == sorted([old, new])  # nothing recreated
    for _ in range(40):
        await converge(env, world, 1)
        head = await get(env, services.SERVICES, "demo-head-svc")
        if head is not None and services.selected_cluster(head) == new:
            break
    assert await weights(env) == {new: 100}


async def test_a_reverted_spec_rolls_back_through_the_route(env: Env) -> None:
    world = World(env)
    old, new, original = await first_traffic_step(env, world)
    assert (await weights(env))[new] > 0
    svc = await env.service()
    svc["spec"]["rayClusterConfig"] = original
    await env.client.update(svc)
    await env.synced()
    await converge(env, world, 1)
    svc = await env.service()
    assert scenario.condition(svc, "RollbackInProgress")["reason"] == "DesiredClusterSpecChanged"
    for _ in range(40):
        await converge(env, world, 1)
        if await weights(env) == {old: 100}:
            break
    assert await weights(env) == {old: 100}
    assert env.fake(old).target_capacity == 100
    await converge(env, world, 10, seconds=10.0)
    assert new not in await env.live_clusters()  # the drained cluster went after the delay
    assert await env.live_clusters() == [old]
    svc = await env.service()
    assert scenario.condition(svc, "RollbackInProgress")["status"] == "False"
    assert (
        services.selected_cluster(await get(env, services.SERVICES, "demo-head-svc") or {}) == old
    )
