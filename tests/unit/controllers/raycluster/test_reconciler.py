"""controllers.raycluster.reconciler against the faithful fake API server."""

from __future__ import annotations

import copy
import secrets
from typing import Any

import pytest

import api.v1 as v1
import controllers.setup
from controllers.raycluster import reconciler as reconciler_
from runtime import events, reconcile
from runtime.cache import cache as cache_
from runtime.client import errors, resources
from runtime.testing import fake
from tests.unit.controllers.raycluster import scenario

PODS = scenario.PODS
SERVICES = scenario.SERVICES
EVENTS = scenario.EVENTS
REQUEST = scenario.REQUEST
NOW = scenario.NOW
template = scenario.template
raycluster = scenario.raycluster
Env = scenario.Env


def conditions(obj: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in obj["status"].get("conditions", [])}


def by_group(pods: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for p in pods:
        group = p["metadata"]["labels"]["ray.io/group"]
        counts[group] = counts.get(group, 0) + 1
    return counts


async def test_first_pass_creates_the_head_service_and_pods_and_writes_one_status(env: Env) -> None:
    await env.client.create(raycluster())
    await env.reconcile()
    pods = await env.pods()
    assert by_group(pods) == {"headgroup": 1, "small": 2, "large": 1}
    owner = await env.cluster()
    for pod in pods:
        [ref] = pod["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
            "RayCluster", "demo", owner["metadata"]["uid"], True)  # fmt: skip
    service = await env.client.get(SERVICES, "ns", "demo-head-svc")
    assert service["spec"]["clusterIP"] == "None"
    assert service["metadata"]["ownerReferences"][0]["uid"] == owner["metadata"]["uid"]
    assert env.status_writes() == 1
    assert conditions(owner)["HeadPodReady"] == ("False", "Unknown")  # created, not running
    assert owner["status"]["desiredWorkerReplicas"] == 3
    assert "state" not in owner["status"]


async def test_a_converged_cluster_costs_no_write(env: Env) -> None:
    await env.client.create(raycluster())
    await env.reconcile()
    await env.run_all()
    await env.reconcile()
    cluster = await env.cluster()
    assert cluster["status"]["state"] == "ready"
    assert cluster["status"]["readyWorkerReplicas"] == 3
    assert env.status_writes() == 2, "one write at creation, one at ready"
    writes = env.client.writes()
    for _ in range(3):
        await env.reconcile()
    assert env.client.writes() == writes, "nothing changed: nothing written"


async def test_scaling_down_removes_not_ready_pods_first_then_up_again(env: Env) -> None:
    await env.client.create(raycluster())
    await env.reconcile()
    await env.run_all()
    small = [p for p in await env.pods() if p["metadata"]["labels"]["ray.io/group"] == "small"]
    await env.set_phase(small[1], ready=False)
    await env.synced()
    groups = copy.deepcopy((await env.cluster())["spec"]["workerGroupSpecs"])
    groups[0]["replicas"] = 1
    await env.edit(workerGroupSpecs=groups)
    await env.reconcile()
    names = {p["metadata"]["name"] for p in await env.pods()}
    assert small[1]["metadata"]["name"] not in names, "the not-ready pod went first"
    assert small[0]["metadata"]["name"] in names
    assert by_group(await env.pods())["small"] == 1
    groups[0]["replicas"] = 9  # above maxReplicas: clamped to 5
    await env.edit(workerGroupSpecs=groups)
    await env.reconcile()
    assert by_group(await env.pods())["small"] == 5


async def test_workers_to_delete_are_deleted_and_not_replaced_when_replicas_drop(env: Env) -> None:
    await env.client.create(raycluster())
    await env.reconcile()
    small = sorted(p["metadata"]["name"] for p in await env.pods()
                   if p["metadata"]["labels"]["ray.io/group"] == "small")  # fmt: skip
    groups = copy.deepcopy((await env.cluster())["spec"]["workerGroupSpecs"])
    groups[0]["replicas"] = 1
    groups[0]["scaleStrategy"] = {"workersToDelete": [small[1], "not-a-pod"]}
    await env.edit(workerGroupSpecs=groups)
    deletes = env.client.writes("delete")
    await env.reconcile()
    now = {p["metadata"]["name"] for p in await env.pods()}
    assert small[1] not in now
    assert small[0] in now
    assert env.client.writes("delete") == deletes + 1, "only the pod that exists is deleted"
    await env.reconcile()
    assert env.client.writes("delete") == deletes + 1, "a stale workersToDelete costs nothing"


async def test_autoscaled_groups_shrink_only_through_workers_to_delete(env: Env) -> None:
    await env.client.create(raycluster(enableInTreeAutoscaling=True))
    await env.reconcile()
    head = next(
        p for p in await env.pods() if p["metadata"]["labels"]["ray.io/node-type"] == "head"
    )
    assert [c["name"] for c in head["spec"]["containers"]][-1] == "autoscaler"
    rbac = resources.default_registry
    sa = await env.client.get(rbac.for_kind("v1", "ServiceAccount"), "ns", "demo")
    role = await env.client.get(rbac.for_kind("rbac.authorization.k8s.io/v1", "Role"), "ns", "demo")
    binding = await env.client.get(
        rbac.for_kind("rbac.authorization.k8s.io/v1", "RoleBinding"), "ns", "demo"
    )
    assert head["spec"]["serviceAccountName"] == sa["metadata"]["name"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    groups = copy.deepcopy((await env.cluster())["spec"]["workerGroupSpecs"])
    groups[0]["replicas"] = 0
    await env.edit(workerGroupSpecs=groups)
    await env.reconcile()
    assert by_group(await env.pods())["small"] == 2, "the autoscaler picks, not the operator"
    writes = env.client.writes("create")
    await env.reconcile()
    assert env.client.writes("create") == writes, "RBAC objects are created once"


async def test_suspend_deletes_every_pod_and_resume_recreates_them(env: Env) -> None:
    await env.client.create(raycluster())
    await env.reconcile()
    await env.run_all()
    await env.reconcile()
    await env.edit(suspend=True)
    await env.reconcile()
    assert await env.pods() == []
    cluster = await env.cluster()
    assert cluster["status"]["state"] == "suspended"
    assert conditions(cluster)["RayClusterSuspended"] == ("True", "RayClusterSuspended")
    writes = env.client.writes()
    await env.reconcile()
    assert env.client.writes() == writes, "a suspended cluster is left alone"
    await env.edit(suspend=False)
    await env.reconcile()
    assert by_group(await env.pods()) == {"headgroup": 1, "small": 2, "large": 1}
    assert conditions(await env.cluster())["RayClusterSuspended"][0] == "False"


async def test_a_suspended_group_loses_its_pods_only(env: Env) -> None:
    await env.client.create(raycluster())
    await env.reconcile()
    groups = copy.deepcopy((await env.cluster())["spec"]["workerGroupSpecs"])
    groups[1]["suspend"] = True
    await env.edit(workerGroupSpecs=groups)
    await env.reconcile()
    assert by_group(await env.pods()) == {"headgroup": 1, "small": 2}


async def test_ended_pods_are_replaced_in_the_same_pass(env: Env) -> None:
    await env.client.create(raycluster())
    await env.reconcile()
    await env.run_all()
    pods = await env.pods()
    head = next(p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "head")
    worker = next(p for p in pods if p["metadata"]["labels"]["ray.io/group"] == "small")
    await env.set_phase(head, "Failed", ready=False)
    await env.set_phase(worker, "Succeeded", ready=False)
    await env.synced()
    await env.reconcile()
    names = {p["metadata"]["name"] for p in await env.pods()}
    assert head["metadata"]["name"] not in names
    assert worker["metadata"]["name"] not in names
    assert by_group(await env.pods()) == {"headgroup": 1, "small": 2, "large": 1}


async def test_a_head_pod_deleted_by_hand_is_recreated(env: Env) -> None:
    await env.client.create(raycluster(workerGroupSpecs=[]))
    await env.reconcile()
    [head] = await env.pods()
    await env.client.delete(PODS, "ns", head["metadata"]["name"])
    await env.synced()
    await env.reconcile()
    [again] = await env.pods()
    assert again["metadata"]["name"] != head["metadata"]["name"]


# -- replica indexes (KubeRay v1.7.0's RayMultiHostIndexing) ---------------------------------

INDEX = "ray.io/worker-group-replica-index"
REPLICA = "ray.io/worker-group-replica-name"
HOST = "ray.io/replica-host-index"


def labels_of(pods: list[dict[str, Any]], group: str) -> list[dict[str, str]]:
    return [
        p["metadata"]["labels"] for p in pods if p["metadata"]["labels"]["ray.io/group"] == group
    ]


async def test_workers_take_the_lowest_free_replica_index(env: Env) -> None:
    await env.client.create(raycluster())
    await env.reconcile()
    pods = await env.pods()
    assert sorted(lb[INDEX] for lb in labels_of(pods, "small")) == ["0", "1"]
    assert [lb[INDEX] for lb in labels_of(pods, "large")] == ["0"]
    assert not [lb for lb in labels_of(pods, "small") if REPLICA in lb or HOST in lb]
    first = next(p for p in pods if p["metadata"]["labels"].get(INDEX) == "0"
                 and p["metadata"]["labels"]["ray.io/group"] == "small")  # fmt: skip
    await env.client.delete(PODS, "ns", first["metadata"]["name"])
    await env.synced()
    await env.reconcile()
    assert sorted(lb[INDEX] for lb in labels_of(await env.pods(), "small")) == ["0", "1"]


def multi_host(replicas: int = 2, **group: Any) -> dict[str, Any]:
    return raycluster(workerGroupSpecs=[
        {"groupName": "tpu", "replicas": replicas, "minReplicas": 0, "maxReplicas": 5,
         "numOfHosts": 2, "rayStartParams": {}, "template": scenario.template("ray-worker"),
         **group}])  # fmt: skip


def replicas_of(pods: list[dict[str, Any]]) -> dict[str, list[tuple[str, str]]]:
    out: dict[str, list[tuple[str, str]]] = {}
    for lb in labels_of(pods, "tpu"):
        out.setdefault(lb[REPLICA], []).append((lb[INDEX], lb[HOST]))
    return {name: sorted(hosts) for name, hosts in out.items()}


async def test_multi_host_replicas_are_created_whole_with_names_and_host_indexes(env: Env) -> None:
    await env.client.create(multi_host())
    await env.reconcile()
    replicas = replicas_of(await env.pods())
    assert sorted(replicas.values()) == [[("0", "0"), ("0", "1")], [("1", "0"), ("1", "1")]]
    assert all(name.startswith("tpu-") and len(name) == 9 for name in replicas)


async def test_a_multi_host_replica_missing_a_host_is_replaced_whole(env: Env) -> None:
    await env.client.create(multi_host())
    await env.reconcile()
    pods = await env.pods()
    before = replicas_of(pods)
    [broken] = [n for n, hosts in before.items() if hosts[0][0] == "0"]
    victim = next(p for p in pods if p["metadata"]["labels"].get(REPLICA) == broken)
    await env.client.delete(PODS, "ns", victim["metadata"]["name"])
    await env.synced()
    await env.reconcile()  # the incomplete replica goes ...
    assert broken not in replicas_of(await env.pods())
    assert len(replicas_of(await env.pods())) == 1
    await env.reconcile()  # ... and a new one takes its index
    after = replicas_of(await env.pods())
    assert sorted(after.values()) == sorted(before.values())
    assert broken not in after


async def test_an_ended_host_takes_its_whole_replica_with_it(env: Env) -> None:
    await env.client.create(multi_host())
    await env.reconcile()
    await env.run_all()
    pods = await env.pods()
    ended = next(p for p in pods if p["metadata"]["labels"].get(HOST) == "1")
    await env.set_phase(ended, "Failed", ready=False)
    await env.synced()
    await env.reconcile()
    replicas = replicas_of(await env.pods())
    assert ended["metadata"]["labels"][REPLICA] not in replicas
    assert len(replicas) == 2, "replaced in the same pass"


async def test_workers_to_delete_and_scale_down_remove_whole_replicas(env: Env) -> None:
    await env.client.create(multi_host(replicas=3))
    await env.reconcile()
    pods = await env.pods()
    named = next(p for p in pods if p["metadata"]["labels"].get(HOST) == "1")
    await env.edit(workerGroupSpecs=multi_host(
        replicas=2, scaleStrategy={"workersToDelete": [named["metadata"]["name"]]}
    )["spec"]["workerGroupSpecs"])  # fmt: skip
    await env.reconcile()
    replicas = replicas_of(await env.pods())
    assert named["metadata"]["labels"][REPLICA] not in replicas
    assert len(replicas) == 2
    await env.edit(workerGroupSpecs=multi_host(replicas=1)["spec"]["workerGroupSpecs"])
    await env.reconcile()
    assert [len(hosts) for hosts in replicas_of(await env.pods()).values()] == [2]


async def test_multi_host_pods_without_a_replica_name_are_replaced(env: Env) -> None:
    """Made before replica indexing: deleted, then whole replicas created (KubeRay v1.7.0
    ignores them and creates replicas next to them)."""
    await env.client.create(multi_host(replicas=1))
    await env.reconcile()
    for pod in await env.pods():
        if pod["metadata"]["labels"]["ray.io/node-type"] == "worker":
            for key in (INDEX, REPLICA, HOST):
                pod["metadata"]["labels"].pop(key)
            await env.client.update(pod)
    await env.synced()
    await env.reconcile()
    assert labels_of(await env.pods(), "tpu") == []
    await env.reconcile()
    assert list(replicas_of(await env.pods()).values()) == [[("0", "0"), ("0", "1")]]


class RefusingClient(fake.FakeClient):
    """A server whose pod admission refuses every worker pod, naming it as the server does."""

    attempts = 0

    async def create(self, obj: dict[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        if obj.get("kind") == "Pod" and obj["metadata"]["labels"]["ray.io/node-type"] == "worker":
            self.attempts += 1
            name = obj["metadata"]["generateName"] + secrets.token_hex(3)[:5]
            raise errors.Invalid(422, "Invalid", f'Pod "{name}" is invalid: spec.containers[0]'
                                 '.name: Invalid value: "Bad_Name"')  # fmt: skip
        return await super().create(obj, namespace=namespace)


async def test_a_refused_pod_is_a_replica_failure_with_the_server_message_and_retried() -> None:
    e = Env()
    registry = e.client.registry
    e.client = RefusingClient(registry, namespaces=["ns"])
    e.cache = cache_.Cache(e.client, debug=True)  # type: ignore[arg-type]
    e.recorder = events.Recorder(e.client, "test", options=controllers.setup.EVENT_OPTIONS)  # type: ignore[arg-type]
    e.reconciler = reconciler_.Reconciler(
        e.client, e.cache, e.recorder, clock=lambda: scenario.CLOCK
    )
    try:
        await e.client.create(raycluster())
        for _ in range(3):
            with pytest.raises(Exception, match="FailedCreateWorkerPod") as caught:
                await e.reconcile()
            assert not reconcile.is_terminal(caught.value), "retried, with the queue's backoff"
        cluster = await e.cluster()
        assert conditions(cluster)["ReplicaFailure"] == ("True", "FailedCreateWorkerPod")
        failure = next(c for c in cluster["status"]["conditions"] if c["type"] == "ReplicaFailure")
        assert "Bad_Name" in failure["message"]
        assert 'Pod "demo-small-worker-<generated>" is invalid' in failure["message"]
        assert e.status_writes() == 1, "the same failure is written once"
        assert e.client.attempts == 3, "one attempt per pass: the first refusal stops the pass"
        await e.recorder.flush()
        [event] = (await e.client.list(EVENTS, "ns")).items
        assert (event["type"], event["reason"], event["action"], event["series"]["count"]) == (
            "Warning", "FailedToCreateWorkerPod", "Create", 3)  # fmt: skip
    finally:
        await e.cache.stop()


async def test_a_name_too_long_for_its_labels_is_refused_once_without_creating(env: Env) -> None:
    name = "x" * 70
    await env.client.create(raycluster(name))
    with pytest.raises(reconcile.TerminalError):
        await env.reconcile(name)
    assert (await env.client.list(PODS, "ns")).items == []
    assert env.client.writes("create", None) == 1, "only the RayCluster itself"
    cluster = await env.cluster(name)
    status, reason = conditions(cluster)["ReplicaFailure"]
    assert (status, reason) == ("True", "InvalidRayClusterSpec")
    await env.recorder.flush()
    [event] = (await env.client.list(EVENTS, "ns")).items
    assert event["reason"] == "InvalidRayClusterSpec"


async def test_deleting_and_foreign_clusters_are_left_alone(env: Env) -> None:
    await env.client.create(raycluster("other", managedBy="kueue.x-k8s.io/multikueue"))
    assert await env.reconcile("other") == reconcile.Result()
    assert await env.reconcile("missing") == reconcile.Result()
    obj = raycluster("going")
    obj["metadata"]["finalizers"] = ["example.com/hold"]
    await env.client.create(obj)
    await env.client.delete(v1.RAYCLUSTERS, "ns", "going")
    await env.synced()
    await env.reconcile("going")
    assert env.client.writes("create") == 2, "only the two RayClusters"


ROLES = resources.default_registry.for_kind("rbac.authorization.k8s.io/v1", "Role")
ROLE_BINDINGS = resources.default_registry.for_kind("rbac.authorization.k8s.io/v1", "RoleBinding")


async def test_an_admins_role_of_the_clusters_name_is_never_bound(env: Env) -> None:
    admin = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": "demo", "namespace": "ns"},
             "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}  # fmt: skip
    await env.client.create(admin)
    await env.client.create(raycluster(enableInTreeAutoscaling=True))
    await env.synced()
    with pytest.raises(Exception, match="Role demo exists and is not controlled"):
        await env.reconcile()
    assert (await env.client.list(ROLE_BINDINGS, "ns")).items == []
    status = (await env.cluster()).get("status") or {}
    assert any(c.get("reason") == "RoleNotOwned" for c in status.get("conditions") or []), status


async def test_its_own_role_is_bound(env: Env) -> None:
    await env.client.create(raycluster(enableInTreeAutoscaling=True))
    await env.reconcile()
    made = list(env.client.calls)
    (binding,) = (await env.client.list(ROLE_BINDINGS, "ns")).items
    assert binding["roleRef"]["name"] == "demo"
    (role,) = (await env.client.list(ROLES, "ns")).items
    assert role["metadata"]["ownerReferences"][0]["kind"] == "RayCluster"
    # read by GET: no cluster-wide list/watch of ServiceAccounts, Roles, RoleBindings
    accounts = resources.default_registry.for_kind("v1", "ServiceAccount")
    calls = {(verb, resource.split(".")[0]) for verb, resource, _ in made}
    for kind in (accounts, ROLES, ROLE_BINDINGS):
        assert not any(v in ("list", "watch") and r == kind.plural for v, r in calls), calls
    assert ("get", ROLES.plural) in calls
