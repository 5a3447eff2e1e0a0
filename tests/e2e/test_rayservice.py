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
import copy
import pathlib
import time
from typing import Any

import pytest
import yaml

from runtime.client import client as client_
from runtime.client import errors
from tests.e2e import harness
from tests.e2e.conftest import Managers

Obj = dict[str, Any]
ROOT = pathlib.Path(__file__).parents[2]
SAMPLE = ROOT / "config" / "samples" / "ray_v1_rayservice.yaml"
DELETION_DELAY = 5
PATHS = {"/fruit": "fruit", "/calc/add": "calculator"}
"""What the sample's applications answer (the simulator answers an app's name)."""


def sample(namespace: str) -> Obj:
    """``config/samples/ray_v1_rayservice.yaml`` as a user applies it, in ``namespace``,
    with a short deletion delay so that an upgrade's clean-up fits in a test."""
    obj: Obj = yaml.safe_load(SAMPLE.read_text())
    obj["metadata"]["namespace"] = namespace
    obj["spec"]["rayClusterDeletionDelaySeconds"] = DELETION_DELAY
    return obj


def serve_config(obj: Obj) -> Obj:
    parsed: Obj = yaml.safe_load(obj["spec"]["serveConfigV2"])
    return parsed


def with_serve_config(obj: Obj, config: Obj) -> Obj:
    obj = copy.deepcopy(obj)
    obj["spec"]["serveConfigV2"] = yaml.safe_dump(config, sort_keys=False)
    return obj


def condition(obj: Obj, type_: str) -> Obj | None:
    return next((c for c in obj.get("status", {}).get("conditions") or []
                 if c.get("type") == type_), None)  # fmt: skip


def apps(obj: Obj, which: str = "activeServiceStatus") -> dict[str, str]:
    statuses = ((obj.get("status") or {}).get(which) or {}).get("applicationStatuses") or {}
    return {name: s.get("status", "") for name, s in statuses.items()}


def active_cluster(obj: Obj) -> str | None:
    name: str | None = ((obj.get("status") or {}).get("activeServiceStatus") or {}).get(
        "rayClusterName"
    )
    return name


async def get(api: client_.Client, namespace: str, name: str = "rayservice-sample") -> Obj:
    return await api.get(harness.RAYSERVICES, namespace, name)


async def wait_ready(
    api: client_.Client, namespace: str, *, within: float = 120, cluster_not: str | None = None
) -> Obj:
    """Until Ready with every application RUNNING on the active cluster (not ``cluster_not``)."""

    async def ready() -> Obj | None:
        obj = await get(api, namespace)
        ok = (
            (condition(obj, "Ready") or {}).get("status") == "True"
            and apps(obj)
            and all(s == "RUNNING" for s in apps(obj).values())
            and (condition(obj, "UpgradeInProgress") or {}).get("status", "False") == "False"
            and active_cluster(obj) != cluster_not
        )
        return obj if ok else None

    result: Obj = await harness.until(ready, within, f"RayService in {namespace} Ready")
    return result


async def cluster_names(api: client_.Client, namespace: str) -> set[str]:
    listed = await api.list(harness.RAYCLUSTERS, namespace)
    return {c["metadata"]["name"] for c in listed.items}


async def create_sample(api: client_.Client, namespace: str) -> Obj:
    return await api.create(sample(namespace))


async def update_spec(api: client_.Client, namespace: str, change: Any) -> Obj:
    """Apply ``change(obj)`` to the latest RayService and write it (retrying conflicts)."""
    while True:
        obj = await get(api, namespace)
        change(obj)
        try:
            return await api.update(obj)
        except errors.Conflict:
            continue


def bump_ray_version(obj: Obj) -> None:
    """A ``rayVersion`` (and image) change: a new RayCluster, a zero-downtime upgrade."""
    config = obj["spec"]["rayClusterConfig"]
    config["rayVersion"] = "2.61.0"
    for template in [config["headGroupSpec"]["template"]] + [
        g["template"] for g in config.get("workerGroupSpecs") or []
    ]:
        for container in template["spec"]["containers"]:
            container["image"] = "rayproject/ray:2.61.0"


class ClusterCount:
    """The most RayClusters that existed at once in a namespace while it ran."""

    def __init__(self, api: client_.Client, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.most = 0
        self.seen: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    async def _poll(self) -> None:
        while True:
            names = await cluster_names(self.api, self.namespace)
            self.seen |= names
            self.most = max(self.most, len(names))
            await asyncio.sleep(0.2)

    async def __aenter__(self) -> ClusterCount:
        self._task = asyncio.create_task(self._poll())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


def traffic(api: client_.Client, world: harness.World, namespace: str) -> harness.Traffic:
    return harness.Traffic(api, world, namespace, "rayservice-sample-serve-svc", PATHS)


def no_failures(t: harness.Traffic) -> None:
    assert not t.failures, f"{len(t.failures)} failed of {t.ok + len(t.failures)}: {t.failures[:5]}"


# -- scenarios ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["pod-ip", "kubernetes-proxy"])
async def test_the_sample_becomes_ready_and_answers_requests(
    world: harness.World, api: client_.Client, namespace: str, managers: Managers, mode: str
) -> None:
    if world.local:
        await managers.start(mode).wait_leading()
    await create_sample(api, namespace)
    obj = await wait_ready(api, namespace)
    assert set(apps(obj)) == {"fruit", "calculator"}
    assert obj["status"]["numServeEndpoints"] >= 1
    async with traffic(api, world, namespace) as t:
        await t.wait_requests(40)
    no_failures(t)
    assert len(t.targets) == 2, t.targets  # the head and the worker both serve


async def test_a_serve_config_change_is_applied_in_place(
    world: harness.World, api: client_.Client, namespace: str, manager: None
) -> None:
    created = await create_sample(api, namespace)
    obj = await wait_ready(api, namespace)
    before = await cluster_names(api, namespace)
    config = serve_config(created)
    config["applications"].append(
        {"name": "extra", "route_prefix": "/extra", "import_path": "extra.app"}
    )
    await update_spec(api, namespace,
                      lambda o: o["spec"].update(with_serve_config(o, config)["spec"]))  # fmt: skip

    async def extra_running() -> bool:
        return apps(await get(api, namespace)).get("extra") == "RUNNING"

    await harness.until(extra_running, 60, "the added application RUNNING")
    assert await cluster_names(api, namespace) == before  # no new cluster for a Serve change
    assert active_cluster(await get(api, namespace)) == active_cluster(obj)
    async with harness.Traffic(api, world, namespace, "rayservice-sample-serve-svc",
                               {"/extra": "extra"}) as t:  # fmt: skip
        await t.wait_requests(10)
    no_failures(t)


@pytest.mark.parametrize("mode", ["pod-ip", "kubernetes-proxy"])
async def test_a_zero_downtime_upgrade_loses_no_request(
    world: harness.World, api: client_.Client, namespace: str, managers: Managers, mode: str
) -> None:
    if world.local:
        await managers.start(mode).wait_leading()
    await create_sample(api, namespace)
    old = active_cluster(await wait_ready(api, namespace))
    async with ClusterCount(api, namespace) as count, traffic(api, world, namespace) as t:
        await t.wait_requests(20)
        await update_spec(api, namespace, bump_ray_version)
        new = active_cluster(await wait_ready(api, namespace, cluster_not=old, within=150))

        async def old_gone() -> bool:
            return await cluster_names(api, namespace) == {new}

        await harness.until(old_gone, DELETION_DELAY + 60, "the old cluster deleted")
        await t.wait_requests(20)
    no_failures(t)
    assert count.most == 2
    assert count.seen == {old, new}
    assert len(t.targets) == 4, t.targets  # both clusters' head and worker answered
    assert t.resolutions >= 2


async def test_a_broken_config_during_an_upgrade_keeps_traffic_on_the_old_cluster(
    world: harness.World, api: client_.Client, namespace: str, manager: None
) -> None:
    created = await create_sample(api, namespace)
    old = active_cluster(await wait_ready(api, namespace))
    config = serve_config(created)
    config["applications"][0]["import_path"] = f"{harness.UNIMPORTABLE}.app"

    def broken_upgrade(obj: Obj) -> None:
        bump_ray_version(obj)
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
        assert active_cluster(obj) == old
        assert (condition(obj, "Ready") or {}).get("status") == "True"
        await t.wait_requests(20)
    no_failures(t)  # the old cluster answered everything, including "/fruit"


async def test_a_deleted_head_pod_is_recreated_and_serves_again(
    world: harness.World, api: client_.Client, namespace: str, manager: None
) -> None:
    await create_sample(api, namespace)
    cluster = active_cluster(await wait_ready(api, namespace))
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
        return all(s == "RUNNING" for s in apps(obj).values()) and bool(apps(obj))

    await harness.until(new_head_serving, 90, "a new head pod serving the applications")
    # Without GCS fault tolerance a lost head loses Serve: requests fail until the new
    # head runs the applications again (the operator resubmits them), then all succeed.
    async with traffic(api, world, namespace) as t:
        await t.wait_streak(40, within=60)
    obj = await wait_ready(api, namespace)
    assert await cluster_names(api, namespace) == {cluster}  # the same cluster, healed
    assert active_cluster(obj) == cluster


async def test_a_manager_killed_mid_upgrade_is_replaced_and_the_upgrade_completes(
    world: harness.World, api: client_.Client, namespace: str, managers: Managers
) -> None:
    first = managers.start()
    await first.wait_leading()
    await create_sample(api, namespace)
    old = active_cluster(await wait_ready(api, namespace))
    async with ClusterCount(api, namespace) as count:
        await update_spec(api, namespace, bump_ray_version)

        async def pending_exists() -> bool:
            return len(await cluster_names(api, namespace)) == 2

        await harness.until(pending_exists, 60, "a pending cluster")
        first.kill()  # SIGKILL: no goodbye, the Lease stays held until it expires
        second = managers.start()
        await second.wait_leading(within=60)
        new = active_cluster(await wait_ready(api, namespace, cluster_not=old, within=150))

        async def old_gone() -> bool:
            return await cluster_names(api, namespace) == {new}

        await harness.until(old_gone, DELETION_DELAY + 60, "the old cluster deleted")
    assert count.most == 2, count.seen  # at most one pending cluster, ever


@pytest.mark.parametrize("member", ["kube-apiserver", "etcd"])
async def test_after_a_control_plane_restart_the_manager_reconciles_again(
    world: harness.World, api: client_.Client, namespace: str, managers: Managers, member: str
) -> None:
    """An outage longer than the Lease's renew deadline (10 s) makes the manager give up
    leadership and exit, as controller-runtime's does; its Deployment restarts it. Either
    way - watches recovered, or restarted and relisted - the next change is reconciled."""
    if world.cp is None:
        pytest.skip("restarting a control-plane member needs the suite's own control plane")
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
        return apps(await get(api, namespace)).get("after") == "RUNNING"

    await harness.until(reconciled, 30, f"the change after a {member} restart reconciled")
    assert time.monotonic() - changed <= 30


async def test_the_standby_takes_over_when_the_leader_is_killed(
    world: harness.World, api: client_.Client, namespace: str, managers: Managers
) -> None:
    one, two = managers.start(), managers.start()
    await harness.until(
        lambda: asyncio.to_thread(lambda: one.leading() or two.leading()), 60, "a leader"
    )
    leader, standby = (one, two) if one.leading() else (two, one)
    assert not standby.leading()
    await create_sample(api, namespace)
    old = active_cluster(await wait_ready(api, namespace))
    await update_spec(api, namespace, bump_ray_version)
    leader.kill()
    await standby.wait_leading(within=60)
    new = active_cluster(await wait_ready(api, namespace, cluster_not=old, within=150))

    async def old_gone() -> bool:
        return await cluster_names(api, namespace) == {new}

    await harness.until(old_gone, DELETION_DELAY + 60, "the old cluster deleted by the standby")


async def test_deleting_the_rayservice_removes_everything_it_owns(
    world: harness.World, api: client_.Client, namespace: str, manager: None
) -> None:
    await create_sample(api, namespace)
    await wait_ready(api, namespace)
    assert await cluster_names(api, namespace)
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
