"""KubeRay v1.7.0's RayService semantics, pass after pass in the world
of :mod:`tests.unit.controllers.rayservice.scenario`: each test names the v1.7.0
function whose behaviour it shows."""

from __future__ import annotations

import dataclasses
import datetime

import pytest

from controllers import main
from controllers.rayservice import reconciler as reconciler_
from tests.unit.controllers.rayservice import scenario

Env = scenario.Env


async def test_num_serve_endpoints_counts_ready_pods_once_each(env: Env) -> None:
    """``calculateNumServeEndpointsFromSlices``: unique ``targetRef.uid`` of endpoints whose
    ``ready`` is explicitly true; a dual-stack pod (one slice per family) counts once, an
    endpoint with ``ready`` unset or without a pod reference not at all."""
    await env.converge_first_cluster()  # two ready pods in the IPv4 slice
    await env.publish_endpoints(2, family="IPv6")  # the same two pods, their IPv6 addresses
    await env.reconcile()
    assert (await env.service())["status"]["numServeEndpoints"] == 2

    ipv4 = [
        {"addresses": ["198.18.9.0"], "conditions": {"ready": True},
         "targetRef": {"kind": "Pod", "name": "pod-0", "uid": "uid-pod-0"}},
        {"addresses": ["198.18.9.5"], "conditions": {},  # ready unknown: not counted
         "targetRef": {"kind": "Pod", "name": "pod-5", "uid": "uid-pod-5"}},
        {"addresses": ["198.18.9.6"], "conditions": {"ready": True}},  # no pod: not counted
    ]  # fmt: skip
    await env.publish_endpoints(0, endpoints=ipv4)
    await env.publish_endpoints(0, family="IPv6", endpoints=[])
    await env.reconcile()
    svc = await env.service()
    assert svc["status"]["numServeEndpoints"] == 1
    assert scenario.condition(svc, "Ready")["reason"] == "NonZeroServeEndpoints"


async def test_suspending_the_cluster_config_starts_no_new_cluster(env: Env) -> None:
    """``rayClusterSpecForHashing``: ``rayClusterConfig.suspend`` (Kueue's), tolerations and
    scheduling gates are not in the hash: no pending cluster, no in-place update."""
    name = await env.converge_first_cluster()
    before = env.writes("rayclusters")
    svc = await env.service()
    config = svc["spec"]["rayClusterConfig"]
    config["suspend"] = True
    config["workerGroupSpecs"][0]["template"]["spec"]["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Exists"}
    ]
    config["headGroupSpec"]["template"]["spec"]["schedulingGates"] = [{"name": "kueue"}]
    await env.client.update(svc)
    await env.synced()
    await env.reconcile()
    await env.reconcile()
    assert await env.live_clusters() == [name]
    assert env.writes("rayclusters") == before
    svc = await env.service()
    assert "pendingServiceStatus" not in svc["status"]
    assert scenario.condition(svc, "UpgradeInProgress")["reason"] == "NoPendingCluster"


@pytest.mark.parametrize(("value", "on"), [("false", False), ("FALSE", False), ("true", True),
                                          ("", True), (None, True)])  # fmt: skip
def test_enable_zero_downtime_is_read_from_the_environment(value: str | None, on: bool) -> None:
    """``isZeroDowntimeUpgradeEnabled``: only ``false`` (any case) turns it off; the operator
    reads it once, the options themselves never do."""
    environ = {} if value is None else {"ENABLE_ZERO_DOWNTIME": value}
    options = main._rayservice_options(main.Settings(), environ=environ)
    assert options.zero_downtime is on
    assert reconciler_.Options().zero_downtime is True


async def _upgrade_to(env: Env, upgrade_type: str | None) -> list[str]:
    """Converge with zero-downtime upgrades off, change rayVersion (and the upgrade type);
    the live clusters after two passes."""
    env.reconciler.options = dataclasses.replace(env.reconciler.options, zero_downtime=False)
    await env.converge_first_cluster()
    svc = await env.service()
    svc["spec"]["rayClusterConfig"]["rayVersion"] = "2.61.0"
    if upgrade_type is not None:
        svc["spec"]["upgradeStrategy"] = {"type": upgrade_type}
    await env.client.update(svc)
    await env.synced()
    await env.reconcile()
    await env.reconcile()
    return await env.live_clusters()


async def test_enable_zero_downtime_false_applies_no_new_cluster(env: Env) -> None:
    """``ENABLE_ZERO_DOWNTIME=false`` and no ``upgradeStrategy.type``: the change waits,
    the serving cluster keeps serving, unchanged (as with type ``None``)."""
    (name,) = await _upgrade_to(env, None)
    (cluster,) = await env.clusters()
    assert cluster["spec"]["rayVersion"] == "2.60.0"
    svc = await env.service()
    assert svc["status"]["activeServiceStatus"]["rayClusterName"] == name
    assert scenario.condition(svc, "UpgradeInProgress")["reason"] == "NoPendingCluster"


async def test_upgrade_strategy_type_wins_over_enable_zero_downtime(env: Env) -> None:
    """A set ``upgradeStrategy.type: NewCluster`` upgrades whatever the variable says."""
    assert len(await _upgrade_to(env, "NewCluster")) == 2
    svc = await env.service()
    assert (
        scenario.condition(svc, "UpgradeInProgress")["reason"] == "BothActivePendingClustersExist"
    )


async def _timed_out(env: Env) -> str:
    """A RayService whose initializing timeout (60 s) passed; returns its cluster's name."""
    body = scenario.rayservice()
    body["metadata"]["annotations"] = {"ray.io/initializing-timeout": "60s"}
    await env.client.create(body)
    await env.synced()
    await env.reconcile()
    (name,) = await env.live_clusters()
    env.now = scenario.T0 + datetime.timedelta(seconds=61)
    await env.reconcile()
    assert scenario.condition(await env.service(), "Ready")["reason"] == "InitializingTimeout"
    return name


async def test_initializing_timeout_is_terminal_even_for_a_new_spec(env: Env) -> None:
    """``isInitializingTimeout``: "the user must delete and recreate the RayService"; a
    spec change creates no cluster and writes no status; the old cluster goes after the
    deletion delay."""
    await _timed_out(env)
    status_writes = env.status_writes()
    svc = await env.service()
    svc["spec"]["rayClusterConfig"]["rayVersion"] = "2.61.0"
    svc["spec"]["serveConfigV2"] = scenario.SERVE_CONFIG.replace("/calc", "/math")
    await env.client.update(svc)
    await env.synced()
    await env.reconcile()
    env.now += datetime.timedelta(seconds=30)
    await env.reconcile()
    await env.reconcile()
    assert await env.live_clusters() == []
    svc = await env.service()
    assert scenario.condition(svc, "Ready")["reason"] == "InitializingTimeout"
    assert env.status_writes() == status_writes


async def _set_suspend(env: Env, value: bool) -> None:
    svc = await env.service()
    svc["spec"]["suspend"] = value
    await env.client.update(svc)
    await env.synced()


async def test_a_committed_suspend_completes_even_when_turned_off(env: Env) -> None:
    """``handleSuspend``: once ``Suspending`` is stored the deletion runs to completion
    (atomic), then the RayService resumes from ``Suspended``."""
    first = await env.converge_first_cluster()
    await _set_suspend(env, True)
    await env.reconcile()  # committed
    await _set_suspend(env, False)  # too late
    await env.reconcile()
    assert await env.live_clusters() == []
    assert env.fake(first).put_count == 1  # nothing submitted meanwhile
    await env.publish_endpoints(0)
    assert (await env.reconcile()).requeue_after == 2.0  # Suspended; the spec says resume
    svc = await env.service()
    assert scenario.condition(svc, "Suspended")["reason"] == "SuspendComplete"
    await env.reconcile()
    svc = await env.service()
    assert scenario.condition(svc, "Suspended")["reason"] == "RayServiceResumed"
    assert len(await env.live_clusters()) == 1


async def test_suspend_and_resume_recover_a_timed_out_service(env: Env) -> None:
    """In v1.7.0 the suspend runs before the terminal timeout check, and resuming sets
    ``Ready=Initializing`` afresh: the only way back short of recreating it."""
    await _timed_out(env)
    await _set_suspend(env, True)
    for _ in range(3):
        await env.reconcile()
    assert scenario.condition(await env.service(), "Suspended")["status"] == "True"
    assert await env.live_clusters() == []
    await _set_suspend(env, False)
    await env.reconcile()
    svc = await env.service()
    assert scenario.condition(svc, "Ready")["reason"] == "Initializing"
    assert scenario.condition(svc, "Ready")["lastTransitionTime"] == "2026-01-01T00:01:01Z"
    assert len(await env.live_clusters()) == 1


async def test_the_serving_heads_label_follows_its_proxy_during_an_upgrade(env: Env) -> None:
    """``updateHeadPodServeLabel`` on the active and the pending head every pass: a dead
    proxy on the serving head leaves the serve service although the pending cluster
    never becomes ready; one ``/-/healthz`` per pass for it, its dashboard not read."""
    old = await env.converge_first_cluster()
    head = f"{old}-head-x"
    await env.client.patch(scenario.PODS, "ns", head, {"metadata": {"labels": {
        "ray.io/serve": "true"}}})  # fmt: skip
    await env.synced()
    svc = await env.service()
    svc["spec"]["rayClusterConfig"]["rayVersion"] = "2.61.0"
    await env.client.update(svc)
    await env.synced()
    await env.reconcile()  # the pending cluster; its head never starts
    dash = env.fake(old)
    dash.health_checks.clear()
    gets = dash.get_count

    dash.proxy_healthy = False
    await env.reconcile()
    pod = await env.client.get(scenario.PODS, "ns", head)
    assert pod["metadata"]["labels"]["ray.io/serve"] == "false"
    dash.proxy_healthy = True
    await env.reconcile()
    pod = await env.client.get(scenario.PODS, "ns", head)
    assert pod["metadata"]["labels"]["ray.io/serve"] == "true"
    assert len(dash.health_checks) == 2
    assert dash.get_count == gets
