"""The RayCluster controller on the real control plane: kube-controller-manager (garbage
collection), kube-scheduler and kwok bind pods and turn them Running and Ready with IPs
from the pod CIDR; the manager runs in this process, watching the test's namespace."""

from __future__ import annotations

import asyncio
import copy
import pathlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

import api.v1 as v1
import controllers.setup
from controllers.raycluster import pods, services
from controllers.raycluster import setup as raycluster_setup
from runtime import manager as manager_
from runtime import metrics
from runtime.client import client as client_
from runtime.client import errors, resources
from runtime.testing import controlplane
from tests.integration import helpers

ROOT = pathlib.Path(__file__).parents[2]
CRD_DIR = ROOT / "config/crd/bases"
PODS, SERVICES = pods.PODS, services.SERVICES
EVENTS = resources.default_registry.for_kind("v1", "Event")
RBAC = resources.default_registry
WRITES = {"POST", "PUT", "PATCH", "DELETE", "CREATE", "UPDATE", "APPLY"}
MANAGER_RESOURCES = {"rayclusters", "pods", "services", "serviceaccounts", "roles",
                     "rolebindings", "events"}  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def crds(control_plane: controlplane.ControlPlane) -> list[str]:
    return control_plane.install_crds(CRD_DIR)


@pytest.fixture(autouse=True)
def ray_kinds(client: client_.Client) -> None:
    v1.add_to_registry(client.registry)


@pytest.fixture
async def manager(
    control_plane: controlplane.ControlPlane, namespace: str
) -> AsyncIterator[manager_.Manager]:
    client = await client_.Client.from_kubeconfig(control_plane.kubeconfig)
    mgr = manager_.Manager(client, manager_.Options(
        name="rayservice-operator",
        namespace=namespace, metrics_bind_address="0", health_probe_bind_address="0",
        cache_by_resource=controllers.setup.cache_by_resource()))  # fmt: skip
    raycluster_setup.setup(mgr, skip_name_validation=True)
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        yield mgr
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await client.close()


def template(name: str, cpu: str = "100m") -> dict[str, Any]:
    return {
        "spec": {
            "containers": [
                {
                    "name": name,
                    "image": "rayproject/ray:2.60.0",
                    "resources": {"limits": {"cpu": cpu, "memory": "256Mi"}},
                }
            ]
        }
    }


def raycluster_obj(name: str = "demo", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "rayVersion": "2.60.0",
        "headGroupSpec": {"rayStartParams": {}, "template": template("ray-head")},
        "workerGroupSpecs": [
            {"groupName": "small", "replicas": 2, "minReplicas": 0, "maxReplicas": 5,
             "rayStartParams": {}, "template": template("ray-worker")},
            {"groupName": "large", "replicas": 1, "minReplicas": 0, "maxReplicas": 5,
             "rayStartParams": {}, "template": template("ray-worker", "200m")},
        ],
    }  # fmt: skip
    body.update(spec)
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": name},
            "spec": body}  # fmt: skip


def manager_writes(
    cp: controlplane.ControlPlane, *, deletes: bool = True
) -> dict[tuple[str, str, str], float]:
    """Write requests the apiserver counted on the kinds the manager writes (pods' status is
    kwok's, bindings the scheduler's). The apiserver cannot tell clients apart: the
    namespace controller deleting earlier tests' namespaces also DELETEs pods, services,
    RBAC objects and events, so ``deletes=False`` leaves DELETE out."""
    verbs = WRITES if deletes else WRITES - {"DELETE"}
    return {k: v for k, v in cp.request_counts().items()
            if k[0] in verbs and k[1] in MANAGER_RESOURCES
            and not (k[1] == "pods" and k[2] in ("status", "binding"))}  # fmt: skip


def client_requests() -> dict[str, float]:
    """Requests made by this process's clients, by method (``rest_client_requests_total``)."""
    counts: dict[str, float] = {}
    for family in metrics.registry.collect():
        for sample in family.samples:
            if sample.name == "rest_client_requests_total":
                method = sample.labels["method"]
                counts[method] = counts.get(method, 0.0) + sample.value
    return counts


def delta(after: dict[Any, float], before: dict[Any, float]) -> dict[Any, float]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


async def get(client: client_.Client, namespace: str, name: str = "demo") -> dict[str, Any]:
    return await client.get(v1.RAYCLUSTERS, namespace, name)


async def pods_of(
    client: client_.Client, namespace: str, name: str = "demo"
) -> list[dict[str, Any]]:
    found = (await client.list(PODS, namespace, label_selector=f"ray.io/cluster={name}")).items
    return [p for p in found if not p["metadata"].get("deletionTimestamp")]


def groups(pods: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for p in pods:
        counts[p["metadata"]["labels"]["ray.io/group"]] = counts.get(
            p["metadata"]["labels"]["ray.io/group"], 0) + 1  # fmt: skip
    return counts


def condition(obj: dict[str, Any], type_: str) -> tuple[str, str, str] | None:
    for c in obj.get("status", {}).get("conditions", []):
        if c["type"] == type_:
            return c["status"], c["reason"], c["message"]
    return None


async def ready(client: client_.Client, namespace: str, name: str = "demo",
                within: float = 60) -> dict[str, Any]:  # fmt: skip
    async def check() -> dict[str, Any] | None:
        obj = await get(client, namespace, name)
        return obj if obj.get("status", {}).get("state") == "ready" else None

    return await helpers.eventually(check, within, f"RayCluster {name} ready")


async def edit_groups(client: client_.Client, namespace: str, change: Any) -> None:
    obj = await get(client, namespace)
    specs = copy.deepcopy(obj["spec"]["workerGroupSpecs"])
    change(specs)
    obj["spec"]["workerGroupSpecs"] = specs
    await client.update(obj)


async def test_converges_to_ready_with_two_status_writes_then_writes_nothing_for_120_s(
    control_plane: controlplane.ControlPlane, client: client_.Client, namespace: str,
    manager: manager_.Manager,
) -> None:  # fmt: skip
    before = manager_writes(control_plane)
    await client.create(raycluster_obj(), namespace=namespace)
    obj = await ready(client, namespace)
    status = obj["status"]
    pods = await pods_of(client, namespace)
    assert groups(pods) == {"headgroup": 1, "small": 2, "large": 1}
    head = next(p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "head")
    assert status["head"]["podName"] == head["metadata"]["name"]
    assert status["head"]["podIP"] == head["status"]["podIP"]
    assert head["status"]["podIP"].startswith("198.18."), "an IP from the pod CIDR"
    assert status["head"]["serviceName"] == "demo-head-svc"
    assert (status["readyWorkerReplicas"], status["desiredWorkerReplicas"]) == (3, 3)
    assert condition(obj, "RayClusterProvisioned")[:2] == ("True", "AllPodRunningAndReadyFirstTime")  # type: ignore[index]
    assert condition(obj, "HeadPodReady")[:2] == ("True", "HeadPodRunningAndReady")  # type: ignore[index]
    assert status["endpoints"]["dashboard"] == "8265"
    service = await client.get(SERVICES, namespace, "demo-head-svc")
    assert service["spec"]["clusterIP"] == "None"
    assert [p["name"] for p in service["spec"]["ports"]] == sorted(
        p["name"] for p in service["spec"]["ports"]
    )
    await asyncio.sleep(3)  # the delayed reconciles of the last pod events
    converged = manager_writes(control_plane, deletes=False)
    requests_before = client_requests()
    init = delta(converged, before)
    status_puts = sum(
        v for (verb, res, sub), v in init.items() if res == "rayclusters" and sub == "status"
    )
    assert status_puts <= 2, f"status writes from creation to ready: {init}"
    assert init.get(("POST", "pods", ""), 0) == 4
    assert init.get(("POST", "services", ""), 0) == 1
    await asyncio.sleep(120)  # the test's own client makes no request meanwhile
    quiet = delta(manager_writes(control_plane, deletes=False), converged)
    assert quiet == {}, f"writes the apiserver counted in 120 s after convergence: {quiet}"
    made = delta(client_requests(), requests_before)
    assert made == {}, f"requests of any kind the manager made in 120 s: {made}"


async def test_scaling_and_workers_to_delete(
    client: client_.Client, namespace: str, manager: manager_.Manager
) -> None:
    await client.create(raycluster_obj(), namespace=namespace)
    await ready(client, namespace)

    def up(specs: list[dict[str, Any]]) -> None:
        specs[0]["replicas"] = 4

    await edit_groups(client, namespace, up)
    await helpers.eventually(lambda: _count(client, namespace, "small", 4), 60, "4 small workers")
    obj = await ready(client, namespace)
    assert obj["status"]["desiredWorkerReplicas"] == 5
    small = sorted(p["metadata"]["name"] for p in await pods_of(client, namespace)
                   if p["metadata"]["labels"]["ray.io/group"] == "small")  # fmt: skip

    def down(specs: list[dict[str, Any]]) -> None:
        specs[0]["replicas"] = 2
        specs[0]["scaleStrategy"] = {"workersToDelete": small[:2]}

    await edit_groups(client, namespace, down)
    await helpers.eventually(lambda: _count(client, namespace, "small", 2), 60, "2 small workers")
    left = {p["metadata"]["name"] for p in await pods_of(client, namespace)}
    assert left.isdisjoint(small[:2]), "the named pods went"
    assert set(small[2:]) <= left, "and only those"
    await ready(client, namespace)


async def _count(client: client_.Client, namespace: str, group: str, want: int) -> bool:
    return groups(await pods_of(client, namespace)).get(group, 0) == want


async def test_suspend_then_resume(
    client: client_.Client, namespace: str, manager: manager_.Manager
) -> None:
    await client.create(raycluster_obj(), namespace=namespace)
    obj = await ready(client, namespace)
    obj["spec"]["suspend"] = True
    await client.update(obj)

    async def suspended() -> dict[str, Any] | None:
        current = await get(client, namespace)
        return current if current.get("status", {}).get("state") == "suspended" else None

    done = await helpers.eventually(suspended, 60, "suspended")
    assert await pods_of(client, namespace) == []
    assert condition(done, "RayClusterSuspended")[:2] == ("True", "RayClusterSuspended")  # type: ignore[index]
    assert condition(done, "RayClusterSuspending")[0] == "False"  # type: ignore[index]
    done["spec"]["suspend"] = False
    await client.update(done)
    back = await ready(client, namespace)
    assert condition(back, "RayClusterSuspended")[0] == "False"  # type: ignore[index]
    assert groups(await pods_of(client, namespace)) == {"headgroup": 1, "small": 2, "large": 1}


async def test_autoscaler_sidecar_and_its_rbac(
    client: client_.Client, namespace: str, manager: manager_.Manager
) -> None:
    await client.create(raycluster_obj(enableInTreeAutoscaling=True), namespace=namespace)
    await ready(client, namespace)
    head = next(p for p in await pods_of(client, namespace)
                if p["metadata"]["labels"]["ray.io/node-type"] == "head")  # fmt: skip
    sidecar = head["spec"]["containers"][-1]
    assert sidecar["name"] == "autoscaler"
    assert "kuberay-autoscaler" in " ".join([*sidecar.get("command", []), *sidecar.get("args", [])])
    account = await client.get(RBAC.for_kind("v1", "ServiceAccount"), namespace, "demo")
    role = await client.get(
        RBAC.for_kind("rbac.authorization.k8s.io/v1", "Role"), namespace, "demo"
    )
    binding = await client.get(
        RBAC.for_kind("rbac.authorization.k8s.io/v1", "RoleBinding"), namespace, "demo"
    )
    assert head["spec"]["serviceAccountName"] == account["metadata"]["name"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"][0]["name"] == account["metadata"]["name"]
    assert any("pods" in r["resources"] and "patch" in r["verbs"] for r in role["rules"])


async def test_a_head_pod_deleted_by_hand_is_recreated(
    client: client_.Client, namespace: str, manager: manager_.Manager
) -> None:
    await client.create(raycluster_obj(workerGroupSpecs=[]), namespace=namespace)
    obj = await ready(client, namespace)
    old = obj["status"]["head"]["podName"]
    await client.delete(PODS, namespace, old)

    async def replaced() -> dict[str, Any] | None:
        current = await get(client, namespace)
        head = current.get("status", {}).get("head", {})
        ok = current["status"].get("state") == "ready" and head.get("podName") not in (None, old)
        return current if ok else None

    await helpers.eventually(replaced, 60, "a new head pod, ready")


async def test_an_invalid_template_is_a_replica_failure_retried_with_backoff(
    control_plane: controlplane.ControlPlane, client: client_.Client, namespace: str,
    manager: manager_.Manager,
) -> None:  # fmt: skip
    bad = raycluster_obj(workerGroupSpecs=[
        {"groupName": "bad", "replicas": 1, "rayStartParams": {},
         "template": template("Bad_Name")}])  # fmt: skip
    counts = control_plane.request_counts()
    before = counts.get(("POST", "pods", ""), 0)
    puts_before = counts.get(("PUT", "rayclusters", "status"), 0)
    started = time.monotonic()
    await client.create(bad, namespace=namespace)

    async def failed() -> tuple[str, str, str] | None:
        found = condition(await get(client, namespace), "ReplicaFailure")
        return found if found and found[0] == "True" else None

    _status, reason, message = await helpers.eventually(failed, 30, "ReplicaFailure")
    assert reason == "FailedCreateWorkerPod"
    assert "Bad_Name" in message, "the server's own message"
    await asyncio.sleep(max(0.0, 60 - (time.monotonic() - started)))
    attempts = control_plane.request_counts().get(("POST", "pods", ""), 0) - before
    # 1 head pod, then worker attempts spaced by the queue's doubling backoff (5 ms, 10 ms,
    # ... : about 14 fit in 60 s); a hot loop would make thousands.
    assert 3 <= attempts <= 20, f"{attempts} pod creations in 60 s"
    puts = control_plane.request_counts().get(("PUT", "rayclusters", "status"), 0) - puts_before
    assert puts <= 2, "the same failure on every retry is written once"
    found = [e for e in (await client.list(EVENTS, namespace)).items
             if e["reason"] == "FailedToCreateWorkerPod"]  # KubeRay's Event reason  # fmt: skip
    assert len(found) == 1, "one aggregated Event"
    assert found[0]["type"] == "Warning"
    assert found[0].get("count", 1) >= 2


async def test_a_name_too_long_is_refused_without_a_create(
    control_plane: controlplane.ControlPlane, client: client_.Client, namespace: str,
    manager: manager_.Manager,
) -> None:  # fmt: skip
    name = "r" * 60
    before = control_plane.request_counts().get(("POST", "pods", ""), 0)
    await client.create(raycluster_obj(name), namespace=namespace)

    async def refused() -> tuple[str, str, str] | None:
        found = condition(await get(client, namespace, name), "ReplicaFailure")
        return found if found and found[0] == "True" else None

    _, reason, message = await helpers.eventually(refused, 30, "ReplicaFailure")
    assert reason == "InvalidRayClusterSpec"
    assert "53" in message
    await asyncio.sleep(2)
    assert control_plane.request_counts().get(("POST", "pods", ""), 0) == before


async def test_deleting_the_cluster_removes_its_pods_and_services(
    client: client_.Client, namespace: str, manager: manager_.Manager
) -> None:
    await client.create(raycluster_obj(), namespace=namespace)
    await ready(client, namespace)
    await client.delete(v1.RAYCLUSTERS, namespace, "demo")

    async def gone() -> bool:
        pods = (await client.list(PODS, namespace)).items
        services = (await client.list(SERVICES, namespace)).items
        return not pods and not services

    await helpers.eventually(gone, 60, "pods and services garbage-collected")
    with pytest.raises(errors.NotFound):
        await get(client, namespace)
