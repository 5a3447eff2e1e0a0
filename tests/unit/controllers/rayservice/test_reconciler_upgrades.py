"""controllers.rayservice.reconciler through upgrades, rollbacks, crashes between writes and
clusters that hold on: where zero downtime is won or lost.

Each test states the behaviour it expects; the scenarios reuse the fake API server
and fake dashboards of :mod:`tests.unit.controllers.rayservice.scenario` (the RayCluster
controller does not run: a test plays it).
"""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest

import api.v1 as v1
from controllers.ray import dashboard
from controllers.rayservice import clusters, services, setup, validation
from controllers.rayservice import reconciler as reconciler_
from runtime import reconcile
from runtime.client import errors
from tests.unit.controllers.rayservice import scenario

PODS = scenario.PODS
REQUEST = scenario.REQUEST
SERVE_CONFIG = scenario.SERVE_CONFIG
SERVICES = scenario.SERVICES
T0 = scenario.T0
Env = scenario.Env
condition = scenario.condition
rayservice = scenario.rayservice


async def change_spec(env: Env, **spec: Any) -> dict[str, Any]:
    svc = await env.service()
    svc["spec"].update(spec)
    updated: dict[str, Any] = await env.client.update(svc)
    await env.synced()
    return updated


async def bump_version(env: Env, version: str) -> None:
    svc = await env.service()
    config = copy.deepcopy(svc["spec"]["rayClusterConfig"])
    config["rayVersion"] = version
    await change_spec(env, rayClusterConfig=config)


async def hold(env: Env, cluster: str) -> None:
    """A finalizer on the cluster, so a deletion leaves it terminating (as a RayCluster
    with GCS fault tolerance, or a slow garbage collector, would)."""
    await env.client.patch(
        v1.RAYCLUSTERS, "ns", cluster, {"metadata": {"finalizers": ["test/hold"]}}
    )
    await env.synced()


async def release(env: Env, cluster: str) -> None:
    await env.client.patch(v1.RAYCLUSTERS, "ns", cluster, {"metadata": {"finalizers": None}})
    await env.synced()


# -- crashes between writes, stale annotations, foreign objects -----------------------------


async def test_a_served_service_whose_endpoints_drop_is_not_timed_out(env: Env) -> None:
    """Ready once, then zero endpoints for longer than the initializing timeout: the
    service is not initializing, so its clusters must not be deleted (KubeRay only
    times out ``Ready=False/Initializing``). Before the status fix, the second
    zero-endpoint pass turned ``ZeroServeEndpoints`` into a fresh ``Initializing``."""
    body = rayservice()
    body["metadata"]["annotations"] = {validation.INITIALIZING_TIMEOUT_ANNOTATION: "60s"}
    await env.client.create(body)
    await env.synced()
    await env.reconcile()
    (name,) = await env.live_clusters()
    await env.start_head(name)
    await env.reconcile()
    env.fake(name).set_all("RUNNING")
    await env.reconcile()
    await env.publish_endpoints(2)
    await env.reconcile()
    assert condition(await env.service(), "Ready")["status"] == "True"

    await env.publish_endpoints(0)  # the serve pods went unready
    env.now = T0 + datetime.timedelta(seconds=10)
    await env.reconcile()
    env.now = T0 + datetime.timedelta(seconds=20)
    await env.reconcile()
    env.now = T0 + datetime.timedelta(seconds=200)
    await env.reconcile()
    await env.reconcile()
    assert await env.live_clusters() == [name]
    ready = condition(await env.service(), "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ZeroServeEndpoints")


async def test_validation_failure_on_a_serving_service_keeps_what_it_knows(env: Env) -> None:
    """An invalid edit of a serving RayService: ``Ready=False/ValidationFailed``, but the
    cluster still serves (it is not touched) and the status must still say so - KubeRay
    sets only the condition. The reconciler writes ``Observed(problem=...)`` alone, so the
    status loses ``activeServiceStatus``, reports ``numServeEndpoints: 0`` and
    ``UpgradeInProgress: Unknown/NoActiveCluster``."""
    name = await env.converge_first_cluster()
    await change_spec(env, serveConfigV2="applications: [\n  - name: a\n bad")
    with pytest.raises(reconcile.TerminalError):
        await env.reconcile()
    svc = await env.service()
    assert condition(svc, "Ready")["reason"] == "ValidationFailed"
    assert await env.live_clusters() == [name]
    assert svc["status"].get("activeServiceStatus", {}).get("rayClusterName") == name
    assert svc["status"]["numServeEndpoints"] == 2
    assert condition(svc, "UpgradeInProgress")["status"] != "Unknown"


async def test_a_foreign_service_does_not_erase_the_active_cluster_from_status(env: Env) -> None:
    """The same on the ``ServiceNotOwned`` path: the serve service replaced by someone
    else's object while the head service still selects our serving cluster."""
    name = await env.converge_first_cluster()
    await env.client.delete(SERVICES, "ns", "demo-serve-svc")
    await env.synced()
    await env.client.create({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "demo-serve-svc", "namespace": "ns"},
        "spec": {"selector": {"app": "other"}, "ports": [{"port": 80}]},
    })  # fmt: skip
    await env.synced()
    await env.reconcile()
    svc = await env.service()
    assert condition(svc, "Ready")["reason"] == "ServiceNotOwned"
    assert svc["status"].get("activeServiceStatus", {}).get("rayClusterName") == name


async def test_a_foreign_service_is_reported_once_not_every_poll(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``ServiceNotOwned`` pass requeues every ``serve_poll_max`` (10 s: the foreign
    object sends no events) and records the Warning on every one of them; the
    recorder folds repeats into the same Event, but each fold is a PATCH of it - an
    API write every 10 s for as long as the object is there, nothing having changed.
    The Event should go with the condition's transition (once)."""
    recorded: list[str] = []
    original = env.recorder.event

    def spy(obj: dict[str, Any], type_: Any, reason: str, message: str, **kw: Any) -> None:
        recorded.append(reason)
        original(obj, type_, reason, message, **kw)

    monkeypatch.setattr(env.recorder, "event", spy)
    await env.client.create({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "demo-serve-svc", "namespace": "ns"},
        "spec": {"selector": {"app": "other"}, "ports": [{"port": 80}]},
    })  # fmt: skip
    await env.client.create(rayservice())
    await env.synced()
    results = [await env.reconcile() for _ in range(3)]
    assert [r.requeue_after for r in results] == [10.0, 10.0, 10.0]
    assert recorded.count("ServiceNotOwned") == 1, recorded


async def test_new_serve_config_is_not_put_on_the_old_cluster_while_the_pending_waits(
    env: Env,
) -> None:
    """An upgrade that changes the cluster and the Serve config together must never
    submit the new Serve config to the cluster that serves (it runs the old image).
    When the pending cluster's name is still held by a terminating cluster of the same
    hash (upgrade, rollback, upgrade again), ``pending`` is ``None`` and the target
    falls back to the active cluster (reconciler.py: ``target = pending if pending is
    not None else active``), which then gets the new config."""
    old = await env.converge_first_cluster()
    await bump_version(env, "2.61.0")
    await env.reconcile()
    (first_pending,) = [n for n in await env.live_clusters() if n != old]
    await hold(env, first_pending)

    original = rayservice()["spec"]["rayClusterConfig"]
    await change_spec(env, rayClusterConfig=original)  # rollback: the pending is dropped
    await env.reconcile()
    env.now += datetime.timedelta(seconds=30)  # rayClusterDeletionDelaySeconds
    await env.reconcile()
    assert await env.live_clusters() == [old]

    new_serve = SERVE_CONFIG.replace("fruit:app", "fruit_v2:app")
    svc = await env.service()
    config = copy.deepcopy(svc["spec"]["rayClusterConfig"])
    config["rayVersion"] = "2.61.0"
    await change_spec(env, rayClusterConfig=config, serveConfigV2=new_serve)
    puts = env.fake(old).put_count
    await env.reconcile()
    assert env.fake(old).put_count == puts  # the serving cluster keeps its config
    last = env.fake(old).last_config or {}
    assert last["applications"][0]["import_path"] == "fruit:app"

    await release(env, first_pending)
    await env.reconcile()
    assert len(await env.live_clusters()) == 2  # the pending one comes back


async def test_no_serve_config_does_not_poll_at_two_seconds_forever(env: Env) -> None:
    """Without ``serveConfigV2`` nothing is ever deployed, so the service can never be
    Ready (validation.py's docstring); polling its dashboard every 2 s would cost 30
    GETs a minute per such service, forever."""
    body = rayservice()
    del body["spec"]["serveConfigV2"]
    await env.client.create(body)
    await env.synced()
    await env.reconcile()
    (name,) = await env.live_clusters()
    await env.start_head(name)
    intervals = [(await env.reconcile()).requeue_after for _ in range(5)]
    assert env.fake(name).put_count == 0
    assert env.fake(name).get_count <= 1
    assert all(i is None or i >= reconciler_.Options().serve_poll_max for i in intervals)
    assert condition(await env.service(), "Ready")["reason"] == "Initializing"


async def test_a_stale_delete_after_on_the_active_cluster_does_not_cut_the_delay(
    env: Env,
) -> None:
    """``_route`` annotates the old active cluster *before* moving traffic and skips the
    annotation when one is already there. A crash between the two (or a switch that
    was then abandoned: the pending cluster failed, the spec was reverted) leaves the
    serving cluster carrying a ``delete-after`` that nothing removes (``_keep`` only
    runs for pending candidates). At the next upgrade the stale time is kept, and the
    old cluster is deleted at once when traffic leaves it - no
    ``rayClusterDeletionDelaySeconds`` for the requests still in flight."""
    old = await env.converge_first_cluster()
    # what the crash left behind, an hour before the next upgrade
    await env.client.patch(v1.RAYCLUSTERS, "ns", old, {"metadata": {"annotations": {
        clusters.DELETE_AFTER_ANNOTATION: "2026-01-01T00:00:30Z"}}})  # fmt: skip
    await env.synced()
    env.now = T0 + datetime.timedelta(hours=1)
    await env.reconcile()
    assert old in await env.live_clusters()  # it serves: never deleted while active

    await bump_version(env, "2.61.0")
    await env.reconcile()
    (new,) = [n for n in await env.live_clusters() if n != old]
    await env.start_head(new)
    await env.reconcile()
    env.fake(new).set_all("RUNNING")
    await env.reconcile()  # traffic moves to the new cluster
    serve = await env.client.get(SERVICES, "ns", "demo-serve-svc")
    assert serve["spec"]["selector"]["ray.io/cluster"] == new
    await env.reconcile()  # the next pass (EndpointSlice event), a second later
    assert old in await env.live_clusters()  # kept for rayClusterDeletionDelaySeconds (30)
    cluster = await env.client.get(v1.RAYCLUSTERS, "ns", old)
    assert cluster["metadata"]["annotations"][clusters.DELETE_AFTER_ANNOTATION] == (
        "2026-01-01T01:00:30Z"
    )


async def test_a_cluster_the_serve_service_selects_is_never_deleted(env: Env) -> None:
    """``_route`` updates the head service, then the serve service. A crash (or an API
    error) between the two leaves the head service - which defines "active" - on the
    new cluster and the serve service - which carries the traffic - on the old one,
    whose ``delete-after`` is already set. If the new cluster's applications are not
    all RUNNING on the next passes (a replica restarting), ``_route`` is not called,
    nothing re-points the serve service, and ``_clean_up`` deletes the old cluster
    when its time comes: the serve service then selects a cluster that is gone."""
    old = await env.converge_first_cluster()
    await bump_version(env, "2.61.0")
    await env.reconcile()
    (new,) = [n for n in await env.live_clusters() if n != old]
    await env.start_head(new)
    await env.reconcile()
    # what a pass interrupted after the head service's update leaves behind
    await env.client.patch(v1.RAYCLUSTERS, "ns", old, {"metadata": {"annotations": {
        clusters.DELETE_AFTER_ANNOTATION: "2026-01-01T00:00:30Z"}}})  # fmt: skip
    head = await env.client.get(SERVICES, "ns", "demo-head-svc")
    head["spec"]["selector"]["ray.io/cluster"] = new
    await env.client.update(head)
    await env.synced()
    env.fake(new).set_all("UNHEALTHY", "a replica is restarting")

    await env.reconcile()
    env.now = T0 + datetime.timedelta(seconds=31)
    await env.reconcile()
    serve = await env.client.get(SERVICES, "ns", "demo-serve-svc")
    assert serve["spec"]["selector"]["ray.io/cluster"] in await env.live_clusters()


async def test_a_refused_config_is_visible_in_the_status(env: Env) -> None:
    """Ray answers HTTP 400 to a config it refuses (recorded:
    testdata/ray-2.60/put-no-import-path-400.txt). Each retry (the work queue's
    backoff) submits the same refused config again and queues the Warning again; the
    status says only ``Initializing``. It should say why the service does not
    progress (the Event ages out after an hour, and ``kubectl get`` users read the
    status)."""
    await env.client.create(rayservice())
    await env.synced()
    await env.reconcile()
    (name,) = await env.live_clusters()
    await env.start_head(name)
    refused = dashboard.DashboardHTTPError(400, "ValidationError: import_path required")
    env.fake(name).fail("put", refused)
    for _ in range(3):
        with pytest.raises(Exception, match="cannot submit the Serve config"):
            await env.reconcile()
    svc = await env.service()
    assert "import_path required" in repr(svc["status"])


# -- upgrades that change course -------------------------------------------------------------


async def test_a_pending_cluster_replaced_mid_upgrade_goes_after_the_deletion_delay(
    env: Env,
) -> None:
    """One pending cluster at a time; the replaced one is dangling and deleted
    ``rayClusterDeletionDelaySeconds`` later (KubeRay v1.7.0's cleanUpRayClusterInstance)."""
    old = await env.converge_first_cluster()
    await bump_version(env, "2.61.0")
    await env.reconcile()
    (first,) = [n for n in await env.live_clusters() if n != old]
    await bump_version(env, "2.62.0")
    await env.reconcile()
    (second,) = [n for n in await env.live_clusters() if n not in (old, first)]
    svc = await env.service()
    assert svc["status"]["pendingServiceStatus"]["rayClusterName"] == second
    replaced = await env.client.get(v1.RAYCLUSTERS, "ns", first)
    assert clusters.DELETE_AFTER_ANNOTATION in replaced["metadata"]["annotations"]
    await env.reconcile()
    assert len(await env.live_clusters()) == 3
    env.now += datetime.timedelta(seconds=30)
    await env.reconcile()
    assert await env.live_clusters() == sorted([old, second])


async def test_a_restarted_head_with_a_new_ip_is_served_again(env: Env) -> None:
    name = await env.converge_first_cluster()
    await env.client.delete(PODS, "ns", f"{name}-head-x")
    await env.synced()
    env.fake(name).restart()
    owner = await env.client.get(v1.RAYCLUSTERS, "ns", name)
    pod = await env.client.create({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{name}-head-y", "namespace": "ns", "labels": {
            "ray.io/cluster": name, "ray.io/node-type": "head", "ray.io/is-ray-node": "yes"},
            "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": name,
                                 "uid": owner["metadata"]["uid"], "controller": True}]},
        "spec": {"containers": [{"name": "ray-head", "image": "ray"}]},
    })  # fmt: skip
    pod["status"] = {"phase": "Running", "podIP": "198.18.7.7",
                     "conditions": [{"type": "Ready", "status": "True"}]}  # fmt: skip
    await env.client.update_status(pod)
    await env.synced()
    await env.reconcile()
    assert env.fake(name).put_count == 2
    pod = await env.client.get(PODS, "ns", f"{name}-head-y")
    assert pod["metadata"]["labels"]["ray.io/serve"] == "true"


async def test_deletion_during_an_upgrade_deletes_both_clusters(env: Env) -> None:
    await env.converge_first_cluster()
    await bump_version(env, "2.61.0")
    await env.reconcile()
    assert len(await env.live_clusters()) == 2
    await env.client.delete(v1.RAYSERVICES, "ns", "demo")
    await env.synced()
    await env.reconcile()
    assert await env.live_clusters() == []
    await env.reconcile()
    with pytest.raises(errors.NotFound):
        await env.service()


async def test_two_rayservices_in_one_namespace_do_not_touch_each_other(env: Env) -> None:
    await env.converge_first_cluster()
    other = rayservice()
    other["metadata"]["name"] = "demo-x"
    await env.client.create(other)
    await env.synced()
    await env.reconciler.reconcile(reconcile.Request("ns", "demo-x"))
    await env.synced()
    names = await env.live_clusters()
    assert len(names) == 2
    mine = [n for n in names if n.startswith("demo-x-")]
    assert len(mine) == 1
    writes = env.writes()
    await env.reconcile()  # "demo" sees the other's cluster in its namespace
    assert env.writes() == writes
    assert await env.live_clusters() == names


async def test_a_47_character_name_gives_names_that_fit(env: Env) -> None:
    name = "s" * 47
    body = rayservice()
    body["metadata"]["name"] = name
    await env.client.create(body)
    await env.synced()
    await env.reconciler.reconcile(reconcile.Request("ns", name))
    await env.synced()
    (cluster,) = await env.live_clusters()
    assert len(cluster) == 53
    assert len(services.head_service_name(name)) <= 63
    assert len(services.serve_service_name(body)) <= 63
    assert len(f"{cluster}-head-svc") <= 63  # the RayCluster's own head service


def test_the_rate_limiter_backs_off_per_service() -> None:
    limiter = setup.rate_limiter()
    delays = [limiter.when(REQUEST) for _ in range(12)]
    assert delays[:4] == [0.5, 1.0, 2.0, 4.0]
    assert delays[-1] == 300.0
    assert limiter.when(reconcile.Request("ns", "other")) == 0.5  # per item
    limiter.forget(REQUEST)
    assert limiter.when(REQUEST) == 0.5


async def test_an_active_cluster_deleted_by_hand_comes_back(env: Env) -> None:
    """The recreated cluster gets the same name (same hash), which the services still
    select: it is active at once, gets the config when its head is up, and serves."""
    name = await env.converge_first_cluster()
    await env.client.delete(v1.RAYCLUSTERS, "ns", name)
    await env.client.delete(PODS, "ns", f"{name}-head-x")
    await env.synced()
    env.fake(name).restart()
    await env.reconcile()
    assert await env.live_clusters() == [name]
    cluster = await env.client.get(v1.RAYCLUSTERS, "ns", name)
    assert clusters.SERVE_CONFIG_ANNOTATION not in cluster["metadata"]["annotations"]
    await env.start_head(name)
    await env.reconcile()
    assert env.fake(name).put_count == 2
    env.fake(name).set_all("RUNNING")
    await env.reconcile()
    svc = await env.service()
    assert svc["status"]["activeServiceStatus"]["rayClusterName"] == name
    assert condition(svc, "Ready")["status"] == "True"  # the slice never went away here
