"""controllers.rayservice.reconciler, a pass after another, in the world of
:mod:`tests.unit.controllers.rayservice.scenario` (fake API server, fake dashboards)."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest

import api.v1 as v1
from controllers.ray import dashboard
from controllers.rayservice import clusters, plan
from controllers.rayservice import reconciler as reconciler_
from runtime import reconcile
from runtime.client import errors
from tests.unit.controllers.rayservice import scenario

Env = scenario.Env


async def test_first_pass_adds_the_finalizer_and_creates_one_pending_cluster(
    env: Env,
) -> None:
    await env.client.create(scenario.rayservice())
    await env.synced()
    result = await env.reconcile()

    svc = await env.service()
    assert reconciler_.FINALIZER in svc["metadata"]["finalizers"]
    (cluster,) = await env.clusters()
    name = cluster["metadata"]["name"]
    assert name.startswith("demo-")
    assert len(name) == len("demo-") + 5
    assert cluster["metadata"]["annotations"][clusters.HASH_ANNOTATION] == clusters.spec_hash(
        svc["spec"]["rayClusterConfig"]
    )
    assert svc["status"]["pendingServiceStatus"]["rayClusterName"] == name
    assert "activeServiceStatus" not in svc["status"]
    assert scenario.condition(svc, "Ready")["reason"] == "Initializing"
    assert scenario.condition(svc, "UpgradeInProgress")["reason"] == "Initializing"
    assert result.requeue_after is None  # nothing to poll yet: the cluster's events wake it

    # A second pass (the cluster's own watch event) changes nothing.
    before = env.writes()
    await env.reconcile()
    assert env.writes() == before
    assert len(await env.clusters()) == 1


async def test_config_is_submitted_once_head_ready_then_traffic_moves_and_ready(
    env: Env,
) -> None:
    await env.client.create(scenario.rayservice())
    await env.synced()
    await env.reconcile()
    (name,) = await env.live_clusters()
    assert env.fake(name).put_count == 0  # no head pod yet: the dashboard is not asked

    await env.start_head(name)
    result = await env.reconcile()
    dash = env.fake(name)
    assert dash.put_count == 1
    assert [a["name"] for a in dash.last_config["applications"]] == ["fruit", "math"]  # type: ignore[index]
    cluster = await env.client.get(v1.RAYCLUSTERS, "ns", name)
    assert cluster["metadata"]["annotations"][clusters.SERVE_CONFIG_ANNOTATION]
    assert result.requeue_after == 2.0
    with pytest.raises(errors.NotFound):  # not RUNNING yet: no services
        await env.client.get(scenario.SERVICES, "ns", "demo-serve-svc")

    await env.reconcile()
    assert dash.put_count == 1  # recorded: not submitted again
    dash.set_all("RUNNING")
    writes = env.status_writes()
    result = await env.reconcile()
    serve = await env.client.get(scenario.SERVICES, "ns", "demo-serve-svc")
    head = await env.client.get(scenario.SERVICES, "ns", "demo-head-svc")
    assert serve["spec"]["selector"]["ray.io/cluster"] == name
    assert head["spec"]["selector"]["ray.io/cluster"] == name
    # The pass that moved traffic waits for the endpoints before reporting.
    assert env.status_writes() == writes
    assert result.requeue_after == plan.ENDPOINTS_GRACE
    await env.reconcile()  # woken by its own Service writes: still no endpoint, waits
    assert env.status_writes() == writes
    env.now += datetime.timedelta(seconds=plan.ENDPOINTS_GRACE)
    await env.reconcile()  # the grace passed without endpoints: reported anyway
    assert env.status_writes() == writes + 1
    svc = await env.service()
    assert svc["status"]["activeServiceStatus"]["rayClusterName"] == name
    assert "pendingServiceStatus" not in svc["status"]
    apps = svc["status"]["activeServiceStatus"]["applicationStatuses"]
    assert {k: v["status"] for k, v in apps.items()} == {"fruit": "RUNNING", "math": "RUNNING"}
    assert scenario.condition(svc, "UpgradeInProgress")["reason"] == "NoPendingCluster"
    assert scenario.condition(svc, "Ready")["status"] == "False"  # no endpoint yet

    await env.publish_endpoints(2)
    await env.reconcile()
    svc = await env.service()
    assert scenario.condition(svc, "Ready")["reason"] == "NonZeroServeEndpoints"
    assert svc["status"]["numServeEndpoints"] == 2
    assert svc["status"]["serviceStatus"] == "Running"


async def test_a_ready_unchanged_service_backs_off_and_writes_nothing(env: Env) -> None:
    name = await env.converge_first_cluster()
    # Initializing; the applications deploying; serving and Ready (KubeRay v1.5.0: 4).
    assert env.status_writes() == 3
    head = await env.client.get(scenario.PODS, "ns", f"{name}-head-x")
    # Serve reports the head's proxy healthy in the same answer: no /-/healthz needed.
    env.fake(name).proxies = {"n1": {"node_ip": head["status"]["podIP"], "status": "HEALTHY"}}
    env.fake(name).health_checks.clear()
    before = env.writes()
    gets = env.fake(name).get_count
    intervals = [(await env.reconcile()).requeue_after for _ in range(5)]
    assert intervals == [4.0, 8.0, 10.0, 10.0, 10.0]  # the pass that made it Ready: 2 s
    assert env.writes() == before
    assert env.fake(name).get_count == gets + 5
    assert env.fake(name).health_checks == []

    env.fake(name).set_application("fruit", "UNHEALTHY", "replica died")
    assert (await env.reconcile()).requeue_after == 2.0  # a change: back to 2 s
    svc = await env.service()
    fruit = svc["status"]["activeServiceStatus"]["applicationStatuses"]["fruit"]
    assert fruit == {"status": "UNHEALTHY", "message": "replica died"}


async def test_cluster_spec_change_upgrades_through_a_pending_cluster(env: Env) -> None:
    old = await env.converge_first_cluster()
    svc = await env.service()
    svc["spec"]["rayClusterConfig"]["rayVersion"] = "2.61.0"
    await env.client.update(svc)
    await env.synced()

    await env.reconcile()
    assert len(await env.live_clusters()) == 2
    new = next(n for n in await env.live_clusters() if n != old)
    svc = await env.service()
    assert svc["status"]["pendingServiceStatus"]["rayClusterName"] == new
    assert svc["status"]["activeServiceStatus"]["rayClusterName"] == old
    assert scenario.condition(svc, "UpgradeInProgress")["status"] == "True"
    assert scenario.condition(svc, "Ready")["status"] == "True"  # the old cluster still serves

    await env.start_head(new)
    await env.reconcile()
    assert env.fake(new).put_count == 1
    serve = await env.client.get(scenario.SERVICES, "ns", "demo-serve-svc")
    assert serve["spec"]["selector"]["ray.io/cluster"] == old  # not RUNNING yet

    env.fake(new).set_all("RUNNING")
    await env.reconcile()
    await env.reconcile()  # the EndpointSlice event (or the grace period)
    serve = await env.client.get(scenario.SERVICES, "ns", "demo-serve-svc")
    assert serve["spec"]["selector"]["ray.io/cluster"] == new
    old_cluster = await env.client.get(v1.RAYCLUSTERS, "ns", old)
    after = old_cluster["metadata"]["annotations"][clusters.DELETE_AFTER_ANNOTATION]
    assert after == "2026-01-01T00:00:30Z"  # now + rayClusterDeletionDelaySeconds
    svc = await env.service()
    assert svc["status"]["activeServiceStatus"]["rayClusterName"] == new
    assert "pendingServiceStatus" not in svc["status"]
    assert scenario.condition(svc, "UpgradeInProgress")["status"] == "False"

    result = await env.reconcile()
    assert old in await env.live_clusters()  # not due yet
    assert result.requeue_after is not None
    assert result.requeue_after <= 30
    env.now = scenario.T0 + datetime.timedelta(seconds=31)  # a restarted manager would see the same
    await env.reconcile()
    assert await env.live_clusters() == [new]


async def test_spec_reverted_mid_upgrade_drops_the_pending_cluster(env: Env) -> None:
    old = await env.converge_first_cluster()
    svc = await env.service()
    original = copy.deepcopy(svc["spec"])
    svc["spec"]["rayClusterConfig"]["rayVersion"] = "2.61.0"
    svc = await env.client.update(svc)
    await env.synced()
    await env.reconcile()
    assert len(await env.live_clusters()) == 2

    svc = await env.service()
    svc["spec"] = original
    await env.client.update(svc)
    await env.synced()
    await env.reconcile()
    # Dangling: deleted after rayClusterDeletionDelaySeconds (30 s here), as KubeRay v1.7.0.
    (dropped,) = [n for n in await env.live_clusters() if n != old]
    cluster = await env.client.get(v1.RAYCLUSTERS, "ns", dropped)
    assert cluster["metadata"]["annotations"][clusters.DELETE_AFTER_ANNOTATION] == (
        "2026-01-01T00:00:30Z"
    )
    svc = await env.service()
    assert scenario.condition(svc, "RollbackInProgress")["status"] == "True"
    assert "pendingServiceStatus" not in svc["status"]
    await env.reconcile()  # its annotation's event: still rolling back, nothing written
    assert scenario.condition(await env.service(), "RollbackInProgress")["status"] == "True"

    env.now = scenario.T0 + datetime.timedelta(seconds=30)
    await env.reconcile()
    assert await env.live_clusters() == [old]
    await env.reconcile()  # the fake deletes at once: gone
    assert scenario.condition(await env.service(), "RollbackInProgress")["reason"] == (
        "RollbackComplete"
    )


async def test_appended_worker_group_updates_the_active_cluster_in_place(env: Env) -> None:
    name = await env.converge_first_cluster()
    svc = await env.service()
    groups = svc["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    groups.append({**copy.deepcopy(groups[0]), "groupName": "extra"})
    await env.client.update(svc)
    await env.synced()
    await env.reconcile()
    assert await env.live_clusters() == [name]
    cluster = await env.client.get(v1.RAYCLUSTERS, "ns", name)
    assert [g["groupName"] for g in cluster["spec"]["workerGroupSpecs"]] == ["small", "extra"]
    assert cluster["metadata"]["annotations"][clusters.NUM_WORKER_GROUPS_ANNOTATION] == "2"


async def test_serve_config_change_is_submitted_in_place(env: Env) -> None:
    name = await env.converge_first_cluster()
    svc = await env.service()
    svc["spec"]["serveConfigV2"] = scenario.SERVE_CONFIG.replace("/calc", "/math")
    await env.client.update(svc)
    await env.synced()
    await env.reconcile()
    assert await env.live_clusters() == [name]
    assert env.fake(name).put_count == 2
    assert env.fake(name).last_config["applications"][1]["route_prefix"] == "/math"  # type: ignore[index]


async def test_a_put_whose_annotation_was_lost_is_not_submitted_again(env: Env) -> None:
    """A crash between the PUT and the annotation: the dashboard already runs the config."""
    await env.client.create(scenario.rayservice())
    await env.synced()
    await env.reconcile()
    (name,) = await env.live_clusters()
    await env.start_head(name)
    await env.reconcile()
    assert env.fake(name).put_count == 1
    forget = {"metadata": {"annotations": {clusters.SERVE_CONFIG_ANNOTATION: None}}}
    await env.client.patch(v1.RAYCLUSTERS, "ns", name, forget)
    await env.synced()
    fresh = reconciler_.Reconciler(  # a restarted manager: nothing in memory
        env.client, env.cache, env.recorder, env.dashboards,
        reconciler_.Options(address_mode="pod-ip"), clock=lambda: env.now,
    )  # fmt: skip
    await fresh.reconcile(scenario.REQUEST)
    await env.synced()
    assert env.fake(name).put_count == 1
    cluster = await env.client.get(v1.RAYCLUSTERS, "ns", name)
    assert clusters.SERVE_CONFIG_ANNOTATION in cluster["metadata"]["annotations"]


async def test_a_restarted_head_gets_the_config_again(env: Env) -> None:
    name = await env.converge_first_cluster()
    env.fake(name).restart()
    await env.reconcile()
    assert env.fake(name).put_count == 2


async def test_invalid_serve_config_is_terminal_and_written_once(env: Env) -> None:
    await env.client.create(scenario.rayservice(serveConfigV2="applications: [\n  - name: a\n bad"))
    await env.synced()
    with pytest.raises(reconcile.TerminalError):
        await env.reconcile()
    svc = await env.service()
    ready = scenario.condition(svc, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ValidationFailed")
    assert "serveConfigV2" in ready["message"]
    assert await env.clusters() == []
    writes = env.status_writes()
    with pytest.raises(reconcile.TerminalError):
        await env.reconcile()
    assert env.status_writes() == writes


async def test_dashboard_down_raises_after_writing_what_is_known(env: Env) -> None:
    await env.client.create(scenario.rayservice())
    await env.synced()
    await env.reconcile()
    (name,) = await env.live_clusters()
    await env.start_head(name)
    env.fake(name).fail("get", dashboard.DashboardUnreachable("refused"))
    with pytest.raises(Exception, match="cannot read Serve applications"):
        await env.reconcile()
    assert env.fake(name).put_count == 0


async def test_excluded_head_pod_is_labelled_not_serving(env: Env) -> None:
    await env.client.create(scenario.rayservice(excludeHeadPodFromServeSvc=True))
    await env.synced()
    await env.reconcile()
    (name,) = await env.live_clusters()
    await env.start_head(name, serve="true")
    await env.reconcile()
    pod = await env.client.get(scenario.PODS, "ns", f"{name}-head-x")
    assert pod["metadata"]["labels"]["ray.io/serve"] == "false"
    assert env.fake(name).health_checks == []


async def test_head_serve_label_follows_proxy_health(env: Env) -> None:
    await env.client.create(scenario.rayservice())
    await env.synced()
    await env.reconcile()
    (name,) = await env.live_clusters()
    await env.start_head(name)
    await env.reconcile()
    pod = await env.client.get(scenario.PODS, "ns", f"{name}-head-x")
    assert pod["metadata"]["labels"]["ray.io/serve"] == "true"
    env.fake(name).proxy_healthy = False
    await env.reconcile()
    pod = await env.client.get(scenario.PODS, "ns", f"{name}-head-x")
    assert pod["metadata"]["labels"]["ray.io/serve"] == "false"


async def test_the_pass_that_submits_asks_the_proxy_after_the_put(env: Env) -> None:
    """Ray starts the Serve proxy on the first PUT: asked before it, the proxy would
    say no and the head would join the serve service a poll later. So the pass that
    submits asks once, after the PUT, and labels the head from that answer."""
    await env.client.create(scenario.rayservice())
    await env.synced()
    await env.reconcile()
    (name,) = await env.live_clusters()
    await env.start_head(name)
    fake = env.fake(name)
    fake.proxy_healthy = False
    put = fake.put_serve_applications

    async def put_starts_the_proxy(config: Any) -> None:
        await put(config)
        fake.proxy_healthy = True

    fake.put_serve_applications = put_starts_the_proxy  # type: ignore[method-assign]
    await env.reconcile()  # the PUT
    assert len(fake.submitted) == 1
    assert len(fake.health_checks) == 1, "asked once, after the PUT"
    pod = await env.client.get(scenario.PODS, "ns", f"{name}-head-x")
    assert pod["metadata"]["labels"]["ray.io/serve"] == "true"


async def test_suspend_deletes_clusters_and_resume_recreates(env: Env) -> None:
    """KubeRay v1.7.0's handleSuspend: commit (status only), delete the clusters and the
    RayService's Services, Suspended; resume re-arms Initializing and starts again."""
    await env.converge_first_cluster()
    svc = await env.service()
    svc["spec"]["suspend"] = True
    await env.client.update(svc)
    await env.synced()
    assert (await env.reconcile()).requeue_after == 2.0
    assert len(await env.live_clusters()) == 1  # committed first, deleted next pass
    svc = await env.service()
    assert scenario.condition(svc, "Suspending")["reason"] == "SuspendRequested"
    assert scenario.condition(svc, "Ready")["reason"] == "SuspendInProgress"
    assert "activeServiceStatus" not in svc["status"]
    await env.reconcile()
    assert await env.live_clusters() == []
    for name in ("demo-head-svc", "demo-serve-svc"):
        with pytest.raises(errors.NotFound):
            await env.client.get(scenario.SERVICES, "ns", name)
    svc = await env.service()
    assert scenario.condition(svc, "Suspending")["reason"] == "SuspendInProgress"
    await env.publish_endpoints(0)  # kube-controller-manager: the Service is gone
    await env.reconcile()  # their deletion events
    svc = await env.service()
    assert scenario.condition(svc, "Suspended")["status"] == "True"
    assert scenario.condition(svc, "Suspending")["status"] == "False"
    assert scenario.condition(svc, "Ready")["reason"] == "SuspendComplete"
    writes = env.writes()
    assert (await env.reconcile()).requeue_after is None
    assert env.writes() == writes  # suspended: nothing to do
    svc["spec"]["suspend"] = False
    await env.client.update(svc)
    await env.synced()
    await env.reconcile()
    assert len(await env.live_clusters()) == 1
    svc = await env.service()
    assert scenario.condition(svc, "Suspended")["reason"] == "RayServiceResumed"
    assert scenario.condition(svc, "Ready")["reason"] == "Initializing"


async def test_initializing_timeout_cleans_up_and_stops(env: Env) -> None:
    """KubeRay v1.7.0 (``isInitializingTimeout``): terminal. The clusters are deleted
    after the deletion delay (30 s here), and then nothing is retried, nor written."""
    body = scenario.rayservice()
    body["metadata"]["annotations"] = {"ray.io/initializing-timeout": "60s"}
    await env.client.create(body)
    await env.synced()
    result = await env.reconcile()
    assert result.requeue_after == 60.0  # wakes up at the deadline
    assert len(await env.live_clusters()) == 1
    env.now = scenario.T0 + datetime.timedelta(seconds=61)
    assert (await env.reconcile()).requeue_after == 30.0
    assert len(await env.live_clusters()) == 1
    svc = await env.service()
    assert scenario.condition(svc, "Ready")["reason"] == "InitializingTimeout"
    status_writes = env.status_writes()
    env.now += datetime.timedelta(seconds=30)
    await env.reconcile()
    assert await env.live_clusters() == []
    writes = env.writes()
    assert (await env.reconcile()).requeue_after is None
    assert env.writes() == writes
    assert env.status_writes() == status_writes  # the timeout was written once


async def test_deletion_removes_clusters_then_the_finalizer(env: Env) -> None:
    await env.converge_first_cluster()
    await env.client.delete(v1.RAYSERVICES, "ns", "demo")
    await env.synced()
    await env.reconcile()
    assert await env.live_clusters() == []
    # The fake has no garbage collector or RayCluster controller: the clusters go at once.
    await env.reconcile()
    with pytest.raises(errors.NotFound):
        await env.service()


async def test_a_foreign_service_is_never_overwritten(env: Env) -> None:
    await env.client.create({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "demo-serve-svc", "namespace": "ns"},
        "spec": {"selector": {"app": "someone-else"}, "ports": [{"port": 80}]},
    })  # fmt: skip
    await env.client.create(scenario.rayservice())
    await env.synced()
    await env.reconcile()
    svc = await env.service()
    ready = scenario.condition(svc, "Ready")
    assert ready["reason"] == "ServiceNotOwned"
    assert "demo-serve-svc" in ready["message"]
    foreign = await env.client.get(scenario.SERVICES, "ns", "demo-serve-svc")
    assert foreign["spec"]["selector"] == {"app": "someone-else"}


async def test_a_timed_out_put_is_retried_quietly_a_refused_one_is_an_event(
    env: Env,
) -> None:
    await env.client.create(scenario.rayservice())
    await env.synced()
    await env.reconcile()
    (name,) = await env.live_clusters()
    await env.start_head(name)
    dash = env.fake(name)
    dash.fail("put", dashboard.DashboardTimeout("timed out after 2 s"), times=1)
    with pytest.raises(Exception, match="cannot submit the Serve config"):
        await env.reconcile()
    await env.recorder.flush()
    reasons = [e["reason"] for e in (await env.client.list(scenario.EVENTS, "ns")).items]
    assert "FailedToUpdateServeApplications" not in reasons  # Serve may still be deploying it
    await env.reconcile()  # the retry
    assert dash.put_count == 1

    svc = await env.service()
    svc["spec"]["serveConfigV2"] = scenario.SERVE_CONFIG.replace("/calc", "/math")
    await env.client.update(svc)
    await env.synced()
    dash.fail("put", dashboard.DashboardHTTPError(400, "bad config"), times=1)
    with pytest.raises(Exception, match="cannot submit the Serve config"):
        await env.reconcile()
    await env.recorder.flush()
    events_ = (await env.client.list(scenario.EVENTS, "ns")).items
    refused = [e for e in events_ if e["reason"] == "FailedToUpdateServeApplications"]
    assert len(refused) == 1
    assert "bad config" in refused[0]["note"]
    assert refused[0]["action"] == "Update"


async def test_serve_defaults_in_the_deployed_config_do_not_cause_a_second_put(
    env: Env,
) -> None:
    """Serve reports ``deployed_app_config`` with its own additions; what the config sets
    is what must match."""
    await env.client.create(scenario.rayservice())
    await env.synced()
    await env.reconcile()
    (name,) = await env.live_clusters()
    await env.start_head(name)
    await env.reconcile()
    dash = env.fake(name)
    for app_name, app in list(dash.applications.items()):
        reported = {**app.model_extra["deployed_app_config"], "args": {}}  # type: ignore[index]
        dash.applications[app_name] = app.model_copy(update={"deployed_app_config": reported})
    forget = {"metadata": {"annotations": {clusters.SERVE_CONFIG_ANNOTATION: None}}}
    await env.client.patch(v1.RAYCLUSTERS, "ns", name, forget)
    await env.synced()
    await env.reconcile()
    assert dash.put_count == 1
    # A config that differs in a field it sets is submitted.
    first = dash.applications["fruit"]
    changed = {**first.model_extra["deployed_app_config"], "import_path": "old:app"}  # type: ignore[index]
    dash.applications["fruit"] = first.model_copy(update={"deployed_app_config": changed})
    await env.client.patch(v1.RAYCLUSTERS, "ns", name, forget)
    await env.synced()
    await env.reconcile()
    assert dash.put_count == 2


async def test_events_say_what_was_done_with_kuberays_reasons_and_actions(env: Env) -> None:
    """KubeRay v1.7.0's reasons and actions for what ``kubectl describe`` readers follow:
    the cluster created, the Serve applications submitted, the head joining the serve
    Service, the Services created; one Event write per change at most."""
    name = await env.converge_first_cluster()
    await env.recorder.flush()
    said = {
        (e["reason"], e["action"], e["type"])
        for e in (await env.client.list(scenario.EVENTS, "ns")).items
    }
    assert {
        ("CreatedRayCluster", "Create", "Normal"),
        ("UpdatedServeApplications", "Update", "Normal"),
        ("UpdatedHeadPodServeLabel", "Update", "Normal"),
        ("CreatedService", "Create", "Normal"),
    } <= said, said
    notes = [e["note"] for e in (await env.client.list(scenario.EVENTS, "ns")).items]
    assert f"Submitted the Serve applications to RayCluster {name}" in notes
    assert any(n.startswith("Set ray.io/serve=true on head pod ") for n in notes)
    listed = (await env.client.list(scenario.EVENTS, "ns")).items
    assert all("series" not in e for e in listed), "each change reported by one write"
    event_writes = [
        c for c in env.client.calls if c[1].startswith("events") and c[0] in ("create", "patch")
    ]
    assert len(event_writes) == len(listed)
