"""The RayService controller on the real control plane: kube-controller-manager
(EndpointSlices, garbage collection), kube-scheduler, kwok and the Ray simulator answering
at the head pods' IPs. The manager (RayCluster and RayService controllers) runs in this
process, watching the test's namespace; every wait is bounded."""

from __future__ import annotations

import asyncio
import datetime
import pathlib
import re
import time
from collections.abc import AsyncIterator, Iterator

import pytest

import api.v1 as v1
from controllers.ray import dashboard
from runtime.client import client as client_
from runtime.client import errors
from runtime.testing import controlplane
from tests.integration import helpers
from tests.integration import rayservice_harness as h
from tests.support import raysim

ROOT = pathlib.Path(__file__).parents[2]
CRD_DIR = ROOT / "config/crd/bases"
DEPLOY_DELAY = 1.0
"""Seconds the simulator's applications stay DEPLOYING."""


@pytest.fixture(scope="module", autouse=True)
def crds(control_plane: controlplane.ControlPlane) -> list[str]:
    return control_plane.install_crds(CRD_DIR)


@pytest.fixture(scope="module")
def sim(control_plane: controlplane.ControlPlane) -> Iterator[raysim.Simulator]:
    with raysim.running(
        control_plane, deploy_delay=DEPLOY_DELAY, unimportable=("secret_pkg",)
    ) as simulator:
        yield simulator


@pytest.fixture(autouse=True)
def ray_kinds(client: client_.Client) -> None:
    v1.add_to_registry(client.registry)


@pytest.fixture
def puts0(sim: raysim.Simulator) -> dict[str, int]:
    """The Serve PUTs counted before the test (kwok reuses the IPs of deleted pods)."""
    return h.serve_puts(sim)


@pytest.fixture
async def running(
    control_plane: controlplane.ControlPlane, namespace: str, sim: raysim.Simulator
) -> AsyncIterator[h.Running]:
    async with h.manager_running(control_plane, namespace, mode="pod-ip") as r:
        yield r


async def create_ready(
    client: client_.Client, namespace: str, obj: h.Obj | None = None
) -> tuple[h.Obj, str]:
    """Create the RayService (default :func:`h.rayservice_obj`), wait for Ready; the
    object and its cluster's name."""
    await client.create(obj or h.rayservice_obj(), namespace=namespace)
    ready = await h.wait_ready(client, namespace)
    return ready, ready["status"]["activeServiceStatus"]["rayClusterName"]


async def update_spec(client: client_.Client, namespace: str, **spec: object) -> h.Obj:
    """Change the RayService's spec (re-read first, and again when the operator wrote the
    object in between, as ``kubectl edit`` does: a 409 is the user's race, not a failure)."""
    for _ in range(5):
        current = await h.get_service(client, namespace)
        try:
            updated: h.Obj = await client.update(h.changed(current, **spec))
        except errors.Conflict:
            continue
        return updated
    raise AssertionError("the RayService kept changing under five updates in a row")


def statuses(apps: dict[str, object]) -> dict[str, object]:
    return {name: app["status"] for name, app in apps.items()}  # type: ignore[index]


def proxy_requests(cp: controlplane.ControlPlane) -> float:
    return sum(n for (_, res, sub), n in cp.request_counts().items()
               if sub == "proxy" and res in ("services", "pods"))  # fmt: skip


# -- create -> Ready ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["pod-ip", "kubernetes-proxy"])
async def test_create_reaches_ready_with_two_apps_and_serve_endpoints(
    control_plane: controlplane.ControlPlane,
    client: client_.Client,
    namespace: str,
    sim: raysim.Simulator,
    puts0: dict[str, int],
    mode: dashboard.Mode,
) -> None:
    proxied_before = proxy_requests(control_plane)
    async with h.manager_running(control_plane, namespace, mode=mode):
        obj, name = await create_ready(client, namespace)
        status = obj["status"]
        assert re.fullmatch(r"demo-[a-z0-9]{5}", name), name
        assert obj["metadata"]["finalizers"] == [h.FINALIZER]
        ready = h.condition(obj, "Ready")
        assert ready is not None
        assert (ready["status"], ready["reason"]) == ("True", "NonZeroServeEndpoints")
        assert ready.get("observedGeneration") == obj["metadata"]["generation"]
        upgrade = h.condition(obj, "UpgradeInProgress")
        assert upgrade is None or upgrade["status"] == "False"
        assert status["serviceStatus"] == "Running"
        assert status["numServeEndpoints"] >= 1
        assert not (status.get("pendingServiceStatus") or {}).get("rayClusterName")
        apps = status["activeServiceStatus"]["applicationStatuses"]
        assert statuses(apps) == {"fruit": "RUNNING", "calc": "RUNNING"}
        assert apps["fruit"]["serveDeploymentStatuses"]["FruitMarket"]["status"] == "HEALTHY"

        (cluster,) = await h.clusters_of(client, namespace)
        meta = cluster["metadata"]
        assert meta["name"] == name
        assert meta["labels"][h.NAME_LABEL] == "demo"
        assert meta["labels"][h.CRD_LABEL] == "RayService"
        assert len(meta["annotations"][h.HASH_ANNOTATION]) >= 5
        assert meta["annotations"][h.GROUPS_ANNOTATION] == "1"
        assert meta["annotations"][h.SERVE_HASH_ANNOTATION]
        assert h.DELETE_AFTER_ANNOTATION not in meta["annotations"]
        owner = meta["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner.get("controller")) == (
            "RayService",
            "demo",
            True,
        )

        head = await client.get(h.SERVICES, namespace, "demo-head-svc")
        serve = await client.get(h.SERVICES, namespace, "demo-serve-svc")
        assert head["spec"]["selector"]["ray.io/cluster"] == name
        assert serve["spec"]["selector"]["ray.io/cluster"] == name
        assert serve["spec"]["selector"]["ray.io/serve"] == "true"
        pod = await h.head_pod(client, namespace, name)
        assert pod is not None
        assert pod["metadata"]["labels"]["ray.io/serve"] == "true"

        ip = pod["status"]["podIP"]
        assert statuses(await h.applications_at(control_plane, ip)) == {
            "fruit": "RUNNING", "calc": "RUNNING"
        }  # fmt: skip
        assert h.serve_puts(sim, since=puts0).get(ip) == 1, "one Serve config PUT for one config"
    proxied = proxy_requests(control_plane) - proxied_before
    if mode == "kubernetes-proxy":
        assert proxied > 0, "the dashboard was reached through the API server's proxy"
    else:
        assert proxied == 0, "pod-ip mode dials the pod directly"


# -- changes -----------------------------------------------------------------------------------


async def test_serve_config_change_is_applied_in_place(
    control_plane: controlplane.ControlPlane,
    client: client_.Client,
    namespace: str,
    sim: raysim.Simulator,
    puts0: dict[str, int],
    running: h.Running,
) -> None:
    _, name = await create_ready(client, namespace)
    (cluster,) = await h.clusters_of(client, namespace)
    serve_hash = cluster["metadata"]["annotations"][h.SERVE_HASH_ANNOTATION]
    ip = await h.head_ip(client, namespace, name)
    async with h.Observer(client, namespace) as seen:
        extra = "  - name: extra\n    route_prefix: /extra\n    import_path: extra.app\n"
        await update_spec(client, namespace, serveConfigV2=h.SERVE_CONFIG + extra)

        def three_running(obj: h.Obj) -> bool:
            apps = ((obj.get("status") or {}).get("activeServiceStatus") or {}).get(
                "applicationStatuses"
            ) or {}
            return h.is_ready(obj) and statuses(apps) == {
                "fruit": "RUNNING", "calc": "RUNNING", "extra": "RUNNING"
            }  # fmt: skip

        obj = await h.wait_for(client, namespace, three_running, 60, "three apps RUNNING")
        assert obj["status"]["activeServiceStatus"]["rayClusterName"] == name
        assert statuses(await h.applications_at(control_plane, ip)) == {
            "fruit": "RUNNING", "calc": "RUNNING", "extra": "RUNNING"
        }  # fmt: skip
        (after,) = await h.clusters_of(client, namespace)
        assert after["metadata"]["name"] == name
        assert after["metadata"]["annotations"][h.SERVE_HASH_ANNOTATION] != serve_hash
    assert seen.clusters_seen == [name], "no other cluster, not even for a moment"
    assert h.serve_puts(sim, since=puts0).get(ip) == 2, "one PUT per config"


async def test_ray_version_change_upgrades_on_a_new_cluster_never_routing_to_an_unready_one(
    control_plane: controlplane.ControlPlane,
    client: client_.Client,
    namespace: str,
    sim: raysim.Simulator,
    puts0: dict[str, int],
    running: h.Running,
) -> None:
    problems: list[str] = []

    async def check(change: h.SelectorChange) -> None:
        # The service now selects change.cluster: its applications must be RUNNING, and
        # have been since before the test saw the change.
        assert change.cluster is not None
        if change.service not in ("demo-head-svc", "demo-serve-svc"):
            return  # a RayCluster's own head service
        ip = seen.head_ips.get(change.cluster) or await h.head_ip(client, namespace, change.cluster)
        apps = await h.applications_at(control_plane, ip)
        late = {
            app: round(float(info["last_deployed_time_s"]) + DEPLOY_DELAY - change.at, 2)
            for app, info in apps.items()
            if float(info["last_deployed_time_s"]) + DEPLOY_DELAY > change.at + 0.05
        }
        if statuses(apps) != {"fruit": "RUNNING", "calc": "RUNNING"} or late:
            problems.append(
                f"{change.service} -> {change.cluster} while its apps were {statuses(apps)} "
                f"(RUNNING only {late} s after the switch was seen)"
            )

    async with h.Observer(client, namespace) as seen:
        seen.on_selector = check
        _, old = await create_ready(client, namespace)
        old_ip = await h.head_ip(client, namespace, old)
        await update_spec(client, namespace, rayVersion="2.61.0")

        def upgrading(obj: h.Obj) -> bool:
            pending = (obj.get("status") or {}).get("pendingServiceStatus") or {}
            cond = h.condition(obj, "UpgradeInProgress")
            return bool(pending.get("rayClusterName")) and bool(cond and cond["status"] == "True")

        mid = await h.wait_for(client, namespace, upgrading, 60, "a pending cluster in status")
        new = mid["status"]["pendingServiceStatus"]["rayClusterName"]
        assert new != old
        assert re.fullmatch(r"demo-[a-z0-9]{5}", new), new
        assert mid["status"]["activeServiceStatus"]["rayClusterName"] == old
        assert h.is_ready(mid), "the old cluster keeps serving during the upgrade"

        def switched(obj: h.Obj) -> bool:
            active = (obj.get("status") or {}).get("activeServiceStatus") or {}
            return h.is_ready(obj) and active.get("rayClusterName") == new

        done = await h.wait_for(client, namespace, switched, 60, "traffic on the new cluster")
        assert not (done["status"].get("pendingServiceStatus") or {}).get("rayClusterName")

        async def old_gone() -> bool:
            return old not in await h.all_clusters(client, namespace)

        await helpers.eventually(old_gone, 30, f"{old} deleted after the delay")
        await h.wait_ready(client, namespace)
        await seen.settle()
        new_ip = seen.head_ips[new]

    after = h.condition(await h.get_service(client, namespace), "UpgradeInProgress")
    assert after is None or after["status"] == "False"
    assert seen.clusters_seen == [old, new]
    assert seen.most_at_once == 2
    assert seen.clusters_selected("demo-serve-svc") == [old, new]
    assert seen.clusters_selected("demo-head-svc") == [old, new]
    assert problems == []
    # The old cluster was marked with its deletion time before traffic left it, and went
    # no earlier than that (RFC 3339 has whole seconds).
    delete_after = seen.last[old]["metadata"]["annotations"][h.DELETE_AFTER_ANNOTATION]
    due = datetime.datetime.fromisoformat(delete_after.replace("Z", "+00:00")).timestamp()
    switch = next(
        s.at for s in seen.selectors if s.service == "demo-serve-svc" and s.cluster == new
    )
    assert 2 - 1.5 <= due - switch <= 2 + 1.5, (delete_after, switch)
    assert seen.deleted_at[old] >= due - 1.0
    puts = h.serve_puts(sim, since=puts0)
    assert (puts.get(old_ip), puts.get(new_ip)) == (1, 1)


async def test_spec_reverted_mid_upgrade_drops_the_pending_cluster(
    control_plane: controlplane.ControlPlane,
    client: client_.Client,
    namespace: str,
    sim: raysim.Simulator,
    puts0: dict[str, int],
    running: h.Running,
) -> None:
    async with h.Observer(client, namespace) as seen:
        _, old = await create_ready(client, namespace)
        old_ip = await h.head_ip(client, namespace, old)
        # The pending cluster never gets ready (an application fails), so the upgrade is
        # still in progress when the spec goes back.
        await update_spec(
            client, namespace, rayVersion="2.61.0", serveConfigV2=h.SERVE_CONFIG + h.FAILING_APP
        )

        def pending(obj: h.Obj) -> bool:
            found = (obj.get("status") or {}).get("pendingServiceStatus") or {}
            return bool(found.get("rayClusterName"))

        mid = await h.wait_for(client, namespace, pending, 60, "a pending cluster")
        dropped = mid["status"]["pendingServiceStatus"]["rayClusterName"]
        await update_spec(client, namespace, rayVersion="2.60.0", serveConfigV2=h.SERVE_CONFIG)

        async def only_old() -> bool:
            return await h.all_clusters(client, namespace) == [old]

        await helpers.eventually(only_old, 30, f"{dropped} deleted, {old} kept")

        def settled(obj: h.Obj) -> bool:
            found = (obj.get("status") or {}).get("pendingServiceStatus") or {}
            upgrade = h.condition(obj, "UpgradeInProgress")
            rollback = h.condition(obj, "RollbackInProgress")
            return (
                h.is_ready(obj)
                and not found.get("rayClusterName")
                and (upgrade is None or upgrade["status"] == "False")
                and (rollback is None or rollback["status"] == "False")
                and obj["status"]["activeServiceStatus"]["rayClusterName"] == old
            )

        await h.wait_for(client, namespace, settled, 30, "back on the old cluster, no pending")
        await seen.settle()
    assert seen.clusters_seen == [old, dropped]
    assert seen.clusters_selected("demo-serve-svc") == [old], "traffic never moved"
    assert h.DELETE_AFTER_ANNOTATION not in seen.last[old]["metadata"].get("annotations", {})
    assert h.serve_puts(sim, since=puts0).get(old_ip) == 1, (
        "the old cluster's config was never resent"
    )


async def test_appended_worker_group_updates_the_cluster_in_place(
    client: client_.Client,
    namespace: str,
    sim: raysim.Simulator,
    puts0: dict[str, int],
    running: h.Running,
) -> None:
    obj, name = await create_ready(client, namespace)
    ip = await h.head_ip(client, namespace, name)
    async with h.Observer(client, namespace) as seen:
        config = obj["spec"]["rayClusterConfig"]
        config["workerGroupSpecs"].append(h.worker_group("extra", 1))
        await update_spec(client, namespace, rayClusterConfig=config)

        async def grown() -> bool:
            (cluster,) = await h.clusters_of(client, namespace)
            groups = [g["groupName"] for g in cluster["spec"]["workerGroupSpecs"]]
            pods = await client.list(
                h.PODS, namespace, label_selector=f"ray.io/cluster={name},ray.io/group=extra"
            )
            return (
                groups == ["small", "extra"]
                and cluster["metadata"]["annotations"][h.GROUPS_ANNOTATION] == "2"
                and len(pods.items) == 1
            )

        await helpers.eventually(grown, 60, "the new group on the same cluster")
        after = await h.wait_ready(client, namespace)
    assert after["status"]["activeServiceStatus"]["rayClusterName"] == name
    assert seen.clusters_seen == [name]
    assert seen.clusters_selected("demo-serve-svc") == [name]
    assert h.serve_puts(sim, since=puts0).get(ip) == 1


# -- failures ----------------------------------------------------------------------------------


async def test_invalid_serve_config_fails_validation_and_is_not_retried_until_fixed(
    control_plane: controlplane.ControlPlane,
    client: client_.Client,
    namespace: str,
    sim: raysim.Simulator,
    running: h.Running,
) -> None:
    requests_before = sum(sim.requests().values())
    bad = h.rayservice_obj(serve_config="applications:\n  - name: [unclosed\n")
    await client.create(bad, namespace=namespace)

    def failed(obj: h.Obj) -> bool:
        cond = h.condition(obj, "Ready")
        return bool(cond and (cond["status"], cond["reason"]) == ("False", "ValidationFailed"))

    obj = await h.wait_for(client, namespace, failed, 30, "ValidationFailed")
    message = h.condition(obj, "Ready")["message"]  # type: ignore[index]
    assert "serveConfigV2" in message or "YAML" in message.upper(), message
    assert obj["status"].get("serviceStatus") in (None, "")
    version = obj["metadata"]["resourceVersion"]
    status_writes = control_plane.request_counts().get(("PUT", "rayservices", "status"), 0)
    warnings = [e for e in (await client.list(h.EVENTS, namespace)).items
                if e["involvedObject"]["name"] == "demo" and e["type"] == "Warning"]  # fmt: skip
    assert len(warnings) == 1, warnings
    # Nothing happens while it stays invalid: a window in which a retrying reconciler
    # (its first retries come within a second or two) would write or create something.
    await asyncio.sleep(6)
    obj = await h.get_service(client, namespace)
    assert obj["metadata"]["resourceVersion"] == version, "the RayService was rewritten"
    assert control_plane.request_counts().get(("PUT", "rayservices", "status"), 0) == (
        status_writes
    )
    assert await h.all_clusters(client, namespace) == []
    again = [e for e in (await client.list(h.EVENTS, namespace)).items
             if e["involvedObject"]["name"] == "demo" and e["type"] == "Warning"]  # fmt: skip
    assert [e.get("count", 1) for e in again] == [warnings[0].get("count", 1)]
    assert sum(sim.requests().values()) == requests_before

    await update_spec(client, namespace, serveConfigV2=h.SERVE_CONFIG)
    fixed = await h.wait_ready(client, namespace)
    assert h.condition(fixed, "Ready")["reason"] == "NonZeroServeEndpoints"  # type: ignore[index]


async def test_a_failing_application_is_reported_and_traffic_stays(
    control_plane: controlplane.ControlPlane,
    client: client_.Client,
    namespace: str,
    sim: raysim.Simulator,
    running: h.Running,
) -> None:
    async with h.Observer(client, namespace) as seen:
        _, old = await create_ready(client, namespace)
        await update_spec(
            client, namespace, rayVersion="2.61.0", serveConfigV2=h.SERVE_CONFIG + h.FAILING_APP
        )

        def failed(obj: h.Obj) -> bool:
            pending = (obj.get("status") or {}).get("pendingServiceStatus") or {}
            app = (pending.get("applicationStatuses") or {}).get("broken") or {}
            return app.get("status") == "DEPLOY_FAILED"

        obj = await h.wait_for(client, namespace, failed, 60, "broken DEPLOY_FAILED in status")
        pending = obj["status"]["pendingServiceStatus"]
        message = pending["applicationStatuses"]["broken"]["message"]
        assert "No module named 'secret_pkg'" in message
        assert statuses(pending["applicationStatuses"]) == {
            "fruit": "RUNNING", "calc": "RUNNING", "broken": "DEPLOY_FAILED"
        }  # fmt: skip
        # The next polls (every 2 s while converging) must not move traffic either.
        started = time.monotonic()
        while time.monotonic() - started < 6:
            current = await h.get_service(client, namespace)
            assert current["status"]["activeServiceStatus"]["rayClusterName"] == old
            assert h.is_ready(current), "the old cluster still serves"
            await asyncio.sleep(0.5)
        assert await h.selector_of(client, namespace, "demo-serve-svc") == old
    assert seen.clusters_selected("demo-serve-svc") == [old]
    assert seen.clusters_selected("demo-head-svc") == [old]
    assert len(seen.clusters_seen) == 2


async def test_an_unreachable_dashboard_is_retried_with_backoff(
    client: client_.Client, namespace: str, sim: raysim.Simulator, running: h.Running
) -> None:
    _, name = await create_ready(client, namespace)
    ip = await h.head_ip(client, namespace, name)
    before = h.requests_to(sim, {ip})
    assert sim.fault(ip, dashboard_down=True)["ok"] is True

    def resets() -> int:
        return sum(n for (i, port, method, _), n in sim.requests().items()
                   if i == ip and port == "dashboard" and method == "")  # fmt: skip

    # The next poll of a ready service comes within serve_poll_max (10 s).
    await helpers.eventually(lambda: resets(), 20, "a request meeting the dead dashboard")
    first = time.monotonic()
    await asyncio.sleep(4)  # the first few retries come quickly
    start = h.requests_to(sim, {ip})
    await asyncio.sleep(30)
    window = h.requests_to(sim, {ip}) - start
    # A 2 s loop would make 15 attempts or more; a doubling backoff (0.5 s, 1, 2, 4, 8,
    # 16, ...) about 3. The simulator counts connections reset before a request, and
    # aiohttp may dial twice for one attempt that meets a reset: up to 2 per attempt.
    assert window <= 8, f"{window} requests to the head in 30 s (since {first:.0f})"
    assert h.requests_to(sim, {ip}) - before >= 3, "it did retry"
    sim.fault(ip, dashboard_down=False)


async def test_suspend_deletes_the_clusters_and_resume_brings_the_service_back(
    client: client_.Client, namespace: str, sim: raysim.Simulator, running: h.Running
) -> None:
    await create_ready(client, namespace)
    await update_spec(client, namespace, suspend=True)

    def suspended(obj: h.Obj) -> bool:
        return any(
            c["type"].endswith("Suspended") and c["status"] == "True"
            for c in (obj.get("status") or {}).get("conditions") or ()
        )

    # Ready follows the serve endpoints, which go when kube-controller-manager sees the
    # pods go (a moment after the clusters).
    await h.wait_for(
        client, namespace, lambda o: suspended(o) and not h.is_ready(o), 60, "Suspended, not Ready"
    )
    assert await h.all_clusters(client, namespace) == []
    await update_spec(client, namespace, suspend=False)
    back = await h.wait_ready(client, namespace, within=60)
    assert not suspended(back)
    assert len(await h.clusters_of(client, namespace)) == 1


async def test_initializing_timeout_cleans_up_and_stops(
    client: client_.Client, namespace: str, sim: raysim.Simulator, running: h.Running
) -> None:
    obj = h.rayservice_obj(
        serve_config=h.SERVE_CONFIG + h.FAILING_APP,
        annotations={"ray.io/initializing-timeout": "3s"},
    )
    created = time.monotonic()
    await client.create(obj, namespace=namespace)

    def timed_out(obj: h.Obj) -> bool:
        cond = h.condition(obj, "Ready")
        return bool(cond and (cond["status"], cond["reason"]) == ("False", "InitializingTimeout"))

    failed = await h.wait_for(client, namespace, timed_out, 30, "InitializingTimeout")
    assert time.monotonic() - created >= 3 - 1, "not before the timeout (whole-second stamps)"

    async def no_clusters() -> bool:
        return await h.all_clusters(client, namespace) == []

    await helpers.eventually(no_clusters, 30, "its clusters deleted")
    version = (await h.get_service(client, namespace))["metadata"]["resourceVersion"]
    requests = sum(sim.requests().values())
    await asyncio.sleep(5)  # a window for retries that must not come
    assert (await h.get_service(client, namespace))["metadata"]["resourceVersion"] == version
    assert await h.all_clusters(client, namespace) == []
    assert sum(sim.requests().values()) == requests
    assert failed["status"].get("serviceStatus") in (None, "")


async def test_delete_removes_the_clusters_then_the_finalizer(
    client: client_.Client, namespace: str, sim: raysim.Simulator, running: h.Running
) -> None:
    obj, name = await create_ready(client, namespace)
    assert h.FINALIZER in obj["metadata"]["finalizers"]
    await client.delete(v1.RAYSERVICES, namespace, "demo")

    async def gone() -> bool:
        try:
            await h.get_service(client, namespace)
        except errors.NotFound:
            return await h.all_clusters(client, namespace) == []
        return False

    await helpers.eventually(gone, 60, "the RayService and its clusters gone")

    async def no_pods() -> bool:
        pods = await client.list(h.PODS, namespace, label_selector=f"ray.io/cluster={name}")
        return not pods.items

    await helpers.eventually(no_pods, 60, "its pods garbage-collected")
