"""End to end: the ``rayservice-manager`` binary, a RayService from ``config/samples``,
requests answered through the serve service's endpoints, and what users live through:
Serve config changes, zero-downtime upgrades, broken configs, lost head pods, a
SIGKILLed manager, control-plane restarts, leader failover and deletion.

Each scenario has its own namespace and its own manager process(es) (``managers``); the
cluster, the CRDs and RBAC and the Ray simulator are shared (``world``). Every wait is
bounded; a failing test's report carries the manager's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import pathlib
import time
from typing import Any

import pytest
import yaml

from runtime.client import client as client_
from runtime.client import errors
from tests.e2e import harness, rayservices, realpods

Obj = dict[str, Any]
ROOT = pathlib.Path(__file__).parents[2]
SAMPLE = ROOT / "config" / "samples" / "ray_v1_rayservice.yaml"
DELETION_DELAY = 5
NAME = "rayservice-sample"
PATHS = {"/fruit": "fruit", "/calc/add": "calculator"}
"""What the sample's applications answer (the simulator answers an app's name)."""


def sample(namespace: str) -> Obj:
    """``config/samples/ray_v1_rayservice.yaml`` as a user applies it, in ``namespace``,
    with a short deletion delay so that an upgrade's clean-up fits in a test."""
    obj: Obj = yaml.safe_load(SAMPLE.read_text())
    obj["metadata"]["namespace"] = namespace
    obj["spec"]["rayClusterDeletionDelaySeconds"] = DELETION_DELAY
    if realpods.enabled():  # a real kubelet runs the pods: tests/e2e/realpods.py
        realpods.fit(obj)
    return obj


def serve_config(obj: Obj) -> Obj:
    parsed: Obj = yaml.safe_load(obj["spec"]["serveConfigV2"])
    return parsed


def with_serve_config(obj: Obj, config: Obj) -> Obj:
    obj = copy.deepcopy(obj)
    obj["spec"]["serveConfigV2"] = yaml.safe_dump(config, sort_keys=False)
    return obj


async def get(api: client_.Client, namespace: str) -> Obj:
    return await rayservices.get(api, namespace, NAME)


async def wait_ready(api: client_.Client, namespace: str, **options: Any) -> Obj:
    return await rayservices.wait_ready(api, namespace, NAME, **options)


async def update_spec(api: client_.Client, namespace: str, change: Any) -> Obj:
    return await rayservices.update_spec(api, namespace, NAME, change)


async def create_sample(api: client_.Client, namespace: str) -> Obj:
    if realpods.enabled():
        with contextlib.suppress(errors.AlreadyExists):
            await api.create(realpods.configmap(namespace))
    return await api.create(sample(namespace))


def traffic(api: client_.Client, world: harness.World, namespace: str) -> harness.Traffic:
    return harness.Traffic(api, world, namespace, "rayservice-sample-serve-svc", PATHS)


def no_failures(t: harness.Traffic) -> None:
    assert not t.failures, f"{len(t.failures)} failed of {t.ok + len(t.failures)}: {t.failures[:5]}"


# -- scenarios ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["pod-ip", "kubernetes-proxy"])
async def test_the_sample_becomes_ready_and_answers_requests(
    world: harness.World, api: client_.Client, namespace: str, managers: harness.Managers, mode: str
) -> None:
    await managers.lead(mode)
    await create_sample(api, namespace)
    obj = await wait_ready(api, namespace)
    assert set(rayservices.apps(obj)) == {"fruit", "calculator"}
    assert obj["status"]["numServeEndpoints"] >= 1
    async with traffic(api, world, namespace) as t:
        await t.wait_requests(40)
        await t.wait_targets(2)  # the worker may join the serve Service after Ready
    no_failures(t)
    assert len(t.targets) == 2, t.targets  # the head and the worker both serve
    # Its Events went through the generated RBAC to events.k8s.io/v1, as KubeRay's. They are
    # sent apart from the reconcile (a recorder's queue), so they may land a moment after
    # Ready; in a real cluster the scheduler's and kubelets' are there too, some without an
    # action.
    wanted = {
        ("rayservice-controller", "UpdatedServeApplications", "Update"),
        ("rayservice-controller", "CreatedRayCluster", "Create"),
    }

    async def said() -> set[tuple[Any, Any, Any]]:
        listed = await api.list(harness.EVENTS_V1, namespace)
        return {(e.get("reportingController"), e.get("reason"), e.get("action"))
                for e in listed.items}  # fmt: skip

    async def all_said() -> bool:
        return wanted <= await said()

    await harness.until(all_said, 10, f"the Events {wanted}")


async def test_a_serve_config_change_is_applied_in_place(
    world: harness.World, api: client_.Client, namespace: str, manager: None
) -> None:
    created = await create_sample(api, namespace)
    obj = await wait_ready(api, namespace)
    before = await rayservices.cluster_names(api, namespace)
    config = serve_config(created)
    extra = {"name": "extra", "route_prefix": "/extra", "import_path": "extra.app"}
    config["applications"].append(realpods.app("extra", "/extra") if realpods.enabled() else extra)
    await update_spec(api, namespace,
                      lambda o: o["spec"].update(with_serve_config(o, config)["spec"]))  # fmt: skip

    async def extra_running() -> bool:
        return rayservices.apps(await get(api, namespace)).get("extra") == "RUNNING"

    await harness.until(extra_running, 60, "the added application RUNNING")
    assert (
        await rayservices.cluster_names(api, namespace) == before
    )  # no new cluster for a Serve change
    assert rayservices.active_cluster(await get(api, namespace)) == rayservices.active_cluster(obj)
    async with harness.Traffic(api, world, namespace, "rayservice-sample-serve-svc",
                               {"/extra": "extra"}) as t:  # fmt: skip
        await t.wait_requests(10)
    no_failures(t)


@pytest.mark.parametrize("mode", ["pod-ip", "kubernetes-proxy"])
async def test_a_zero_downtime_upgrade_loses_no_request(
    world: harness.World, api: client_.Client, namespace: str, managers: harness.Managers, mode: str
) -> None:
    await managers.lead(mode)
    await create_sample(api, namespace)
    old = rayservices.active_cluster(await wait_ready(api, namespace))
    async with (
        rayservices.ClusterCount(api, namespace) as count,
        traffic(api, world, namespace) as t,
    ):
        await t.wait_requests(20)
        await update_spec(api, namespace, rayservices.bump_ray_version)
        new = rayservices.active_cluster(
            await wait_ready(api, namespace, cluster_not=old, within=150)
        )

        async def old_gone() -> bool:
            return await rayservices.cluster_names(api, namespace) == {new}

        await harness.until(old_gone, DELETION_DELAY + 60, "the old cluster deleted")
        await t.wait_requests(20)
        await t.wait_targets(4)  # the new worker may join the serve Service after Ready
    no_failures(t)
    assert count.most == 2
    assert count.seen == {old, new}
    assert len(t.targets) == 4, t.targets  # both clusters' head and worker answered
    assert t.resolutions >= 2


async def test_a_broken_config_during_an_upgrade_keeps_traffic_on_the_old_cluster(
    world: harness.World, api: client_.Client, namespace: str, manager: None
) -> None:
    created = await create_sample(api, namespace)
    old = rayservices.active_cluster(await wait_ready(api, namespace))
    config = serve_config(created)
    config["applications"][0]["import_path"] = f"{harness.UNIMPORTABLE}.app"

    def broken_upgrade(obj: Obj) -> None:
        rayservices.bump_ray_version(obj)
        obj["spec"]["serveConfigV2"] = yaml.safe_dump(config, sort_keys=False)

    async with traffic(api, world, namespace) as t:
        await t.wait_requests(10)
        await update_spec(api, namespace, broken_upgrade)

        async def failed() -> Obj | None:
            obj = await get(api, namespace)
            statuses = ((obj.get("status") or {}).get("pendingServiceStatus") or {}).get(
                "applicationStatuses"
            ) or {}
            fruit = statuses.get("fruit") or {}
            return obj if fruit.get("status") == "DEPLOY_FAILED" else None

        obj = await harness.until(failed, 90, "the pending cluster's fruit DEPLOY_FAILED")
        message = obj["status"]["pendingServiceStatus"]["applicationStatuses"]["fruit"]["message"]
        assert harness.UNIMPORTABLE in message
        await asyncio.sleep(3)  # a few polls later, nothing has moved
        obj = await get(api, namespace)
        assert rayservices.active_cluster(obj) == old
        assert rayservices.condition(obj, "Ready").get("status") == "True"
        await t.wait_requests(20)
    no_failures(t)  # the old cluster answered everything, including "/fruit"


async def test_a_deleted_head_pod_is_recreated_and_serves_again(
    world: harness.World, api: client_.Client, namespace: str, manager: None
) -> None:
    await create_sample(api, namespace)
    cluster = rayservices.active_cluster(await wait_ready(api, namespace))
    selector = f"ray.io/cluster={cluster},ray.io/node-type=head"
    [head] = (await api.list(harness.PODS, namespace, label_selector=selector)).items
    await api.delete(harness.PODS, namespace, head["metadata"]["name"], grace_period_seconds=0)

    async def new_head_serving() -> bool:
        pods = (await api.list(harness.PODS, namespace, label_selector=selector)).items
        fresh = [p for p in pods if p["metadata"]["uid"] != head["metadata"]["uid"]
                 and p.get("status", {}).get("phase") == "Running"]  # fmt: skip
        if not fresh:
            return False
        obj = await get(api, namespace)
        return all(s == "RUNNING" for s in rayservices.apps(obj).values()) and bool(
            rayservices.apps(obj)
        )

    await harness.until(new_head_serving, 90, "a new head pod serving the applications")
    # Without GCS fault tolerance a lost head loses Serve: requests fail until the new
    # head runs the applications again (the operator resubmits them), then all succeed.
    async with traffic(api, world, namespace) as t:
        await t.wait_streak(40, within=60)
    obj = await wait_ready(api, namespace)
    assert await rayservices.cluster_names(api, namespace) == {cluster}  # the same cluster, healed
    assert rayservices.active_cluster(obj) == cluster


@pytest.mark.own_cluster  # starts its own managers
async def test_a_manager_killed_mid_upgrade_is_replaced_and_the_upgrade_completes(
    world: harness.World, api: client_.Client, namespace: str, managers: harness.Managers
) -> None:
    first = managers.start()
    await first.wait_leading()
    await create_sample(api, namespace)
    old = rayservices.active_cluster(await wait_ready(api, namespace))
    async with rayservices.ClusterCount(api, namespace) as count:
        await update_spec(api, namespace, rayservices.bump_ray_version)

        async def pending_exists() -> bool:
            return len(await rayservices.cluster_names(api, namespace)) == 2

        await harness.until(pending_exists, 60, "a pending cluster")
        first.kill()  # SIGKILL: no goodbye, the Lease stays held until it expires
        second = managers.start()
        await second.wait_leading(within=60)
        new = rayservices.active_cluster(
            await wait_ready(api, namespace, cluster_not=old, within=150)
        )

        async def old_gone() -> bool:
            return await rayservices.cluster_names(api, namespace) == {new}

        await harness.until(old_gone, DELETION_DELAY + 60, "the old cluster deleted")
    assert count.most == 2, count.seen  # at most one pending cluster, ever


@pytest.mark.own_cluster  # restarts a member of the suite's own control plane
@pytest.mark.parametrize("member", ["kube-apiserver", "etcd"])
async def test_after_a_control_plane_restart_the_manager_reconciles_again(
    world: harness.World,
    api: client_.Client,
    namespace: str,
    managers: harness.Managers,
    member: str,
) -> None:
    """An outage longer than the Lease's renew deadline (10 s) makes the manager give up
    leadership and exit, as controller-runtime's does; its Deployment restarts it. Either
    way - watches recovered, or restarted and relisted - the next change is reconciled."""
    if world.cp is None:
        pytest.fail(
            "not marked own_cluster, but restarting a control-plane member "
            "needs the suite's own control plane"
        )
    manager = managers.start(restart_on_exit=True)
    await manager.wait_leading()
    created = await create_sample(api, namespace)
    await wait_ready(api, namespace)
    # From this (the main) thread: a component dies with the thread that started it.
    world.cp.restart(member, 2.0)
    config = serve_config(created)
    config["applications"].append(
        {"name": "after", "route_prefix": "/after", "import_path": "after.app"}
    )
    changed = time.monotonic()
    await update_spec(api, namespace,
                      lambda o: o["spec"].update(with_serve_config(o, config)["spec"]))  # fmt: skip

    async def reconciled() -> bool:
        return rayservices.apps(await get(api, namespace)).get("after") == "RUNNING"

    await harness.until(reconciled, 30, f"the change after a {member} restart reconciled")
    assert time.monotonic() - changed <= 30


@pytest.mark.own_cluster  # starts its own managers
async def test_the_standby_takes_over_when_the_leader_is_killed(
    world: harness.World, api: client_.Client, namespace: str, managers: harness.Managers
) -> None:
    one, two = managers.start(), managers.start()
    await harness.until(
        lambda: asyncio.to_thread(lambda: one.leading() or two.leading()), 60, "a leader"
    )
    leader, standby = (one, two) if one.leading() else (two, one)
    assert not standby.leading()
    await create_sample(api, namespace)
    old = rayservices.active_cluster(await wait_ready(api, namespace))
    await update_spec(api, namespace, rayservices.bump_ray_version)
    leader.kill()
    await standby.wait_leading(within=60)
    new = rayservices.active_cluster(await wait_ready(api, namespace, cluster_not=old, within=150))

    async def old_gone() -> bool:
        return await rayservices.cluster_names(api, namespace) == {new}

    await harness.until(old_gone, DELETION_DELAY + 60, "the old cluster deleted by the standby")


async def test_deleting_the_rayservice_removes_everything_it_owns(
    world: harness.World, api: client_.Client, namespace: str, manager: None
) -> None:
    await create_sample(api, namespace)
    await wait_ready(api, namespace)
    assert await rayservices.cluster_names(api, namespace)
    await api.delete(harness.RAYSERVICES, namespace, "rayservice-sample")

    async def all_gone() -> bool:
        left = [
            *(await api.list(harness.RAYSERVICES, namespace)).items,
            *(await api.list(harness.RAYCLUSTERS, namespace)).items,
            *(await api.list(harness.PODS, namespace)).items,
            *(await api.list(harness.SERVICES, namespace)).items,
        ]
        return not left

    await harness.until(all_gone, 60, "the RayService, its clusters, pods and services gone")
