"""controllers.raycluster.report: the status as a pure function of the cache's view."""

from __future__ import annotations

import copy
from typing import Any

import pytest

import api.v1 as v1
from controllers.raycluster import pods as pods_
from controllers.raycluster import report

T0, T1, T2 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z", "2026-01-01T00:02:00Z"


def cluster(
    *,
    groups: list[dict[str, Any]] | None = None,
    suspend: bool | None = None,
    old_status: dict[str, Any] | None = None,
    generation: int = 3,
) -> v1.RayCluster:
    head = {
        "spec": {
            "containers": [
                {
                    "name": "ray-head",
                    "resources": {
                        "limits": {"cpu": "1", "memory": "2Gi"},
                        "requests": {"cpu": "500m"},
                    },
                }
            ]
        }
    }
    worker = {
        "spec": {
            "containers": [
                {
                    "name": "ray-worker",
                    "resources": {"limits": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"}},
                }
            ]
        }
    }
    spec: dict[str, Any] = {
        "headGroupSpec": {"template": head},
        "workerGroupSpecs": groups
        if groups is not None
        else [
            {
                "groupName": "small",
                "replicas": 2,
                "minReplicas": 1,
                "maxReplicas": 5,
                "template": worker,
            }
        ],
    }
    if suspend is not None:
        spec["suspend"] = suspend
    return v1.RayCluster.model_validate({
        "metadata": {"name": "demo", "namespace": "ns", "generation": generation},
        "spec": spec, "status": old_status or {}})  # fmt: skip


def pod(
    name: str,
    node_type: str = "worker",
    *,
    phase: str = "Running",
    ready: bool = True,
    ip: str = "198.18.0.5",
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"ray.io/node-type": node_type}}
    if deleting:
        meta["deletionTimestamp"] = T0
    return {"metadata": meta, "status": {
        "phase": phase, "podIP": ip,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}  # fmt: skip


HEADLESS = {"metadata": {"name": "demo-head-svc"}, "spec": {"clusterIP": "None", "ports": [
    {"name": "dashboard", "port": 8265, "targetPort": 8265},
    {"name": "gcs", "port": 6379, "targetPort": 6379}, {"port": 1}]}}  # fmt: skip


def conditions(s: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in s["conditions"]}


def again(c: v1.RayCluster, s: dict[str, Any]) -> v1.RayCluster:
    """The cluster as it is after ``s`` was written."""
    obj = c.model_dump(by_alias=True, exclude_none=True)
    obj["status"] = s
    return v1.RayCluster.model_validate(obj)


@pytest.mark.parametrize(
    ("replicas", "low", "high", "hosts", "suspend", "want"),
    [(2, 1, 5, 1, None, 2), (0, 1, 5, 1, None, 1), (9, 1, 5, 1, None, 5),
     (3, 4, 2, 1, None, 2), (2, 0, 5, 4, None, 8), (2, 0, 5, 1, True, 0)],
)  # fmt: skip
def test_desired_replicas_clamps_and_multiplies(
    replicas: int, low: int, high: int, hosts: int, suspend: bool | None, want: int
) -> None:
    group = v1.WorkerGroupSpec.model_validate({"groupName": "g", "replicas": replicas,
        "minReplicas": low, "maxReplicas": high, "numOfHosts": hosts, "suspend": suspend,
        "template": {}})  # fmt: skip
    assert pods_.desired_workers(group) == want


def test_ready_when_the_head_and_every_desired_worker_run_and_are_ready() -> None:
    c = cluster()
    pods = [pod("h", "head", ip="198.18.0.9"), pod("w1"), pod("w2")]
    s = report.compute(c, pods, HEADLESS, now=T0)
    assert s["state"] == "ready"
    assert s["stateTransitionTimes"] == {"ready": T0}
    assert (s["readyWorkerReplicas"], s["availableWorkerReplicas"], s["desiredWorkerReplicas"]) == (
        2,
        2,
        2,
    )
    assert (s["minWorkerReplicas"], s["maxWorkerReplicas"]) == (1, 5)
    assert conditions(s)["HeadPodReady"] == ("True", "HeadPodRunningAndReady")
    assert conditions(s)["RayClusterProvisioned"] == ("True", "AllPodRunningAndReadyFirstTime")
    assert "ReplicaFailure" not in conditions(s)
    assert s["head"] == {
        "podName": "h",
        "podIP": "198.18.0.9",
        "serviceName": "demo-head-svc",
        "serviceIP": "198.18.0.9",
    }  # headless: the pod's IP
    assert s["endpoints"] == {"dashboard": "8265", "gcs": "6379"}  # unnamed ports left out
    assert s["observedGeneration"] == 3


@pytest.mark.parametrize("missing", ["a worker not ready", "a worker missing", "a failure"])
def test_not_ready_while_anything_is_missing(missing: str) -> None:
    c = cluster()
    pods = [pod("h", "head"), pod("w1"), pod("w2", ready=missing != "a worker not ready")]
    if missing == "a worker missing":
        pods.pop()
    failure = report.Failure("FailedCreateWorkerPod", "bad") if missing == "a failure" else None
    s = report.compute(c, pods, HEADLESS, failure=failure, now=T0)
    assert "state" not in s
    if failure:
        assert conditions(s)["ReplicaFailure"] == ("True", "FailedCreateWorkerPod")


def test_an_honest_state_leaves_ready_when_a_worker_is_lost() -> None:
    c = cluster()
    ready = report.compute(c, [pod("h", "head"), pod("w1"), pod("w2")], HEADLESS, now=T0)
    after = report.compute(again(c, ready), [pod("h", "head"), pod("w1")], HEADLESS, now=T1)
    assert "state" not in after
    assert after["stateTransitionTimes"] == {"ready": T0}, "when ready was last entered"
    assert conditions(after)["RayClusterProvisioned"][0] == "True", "provisioned stays True"


def test_terminating_pods_count_for_nothing() -> None:
    c = cluster()
    s = report.compute(c, [pod("h", "head"), pod("w1"), pod("w2", deleting=True)], HEADLESS, now=T0)
    assert (s["readyWorkerReplicas"], s.get("state")) == (1, None)


def test_head_pod_conditions() -> None:
    c = cluster(groups=[])
    none = report.compute(c, [], None, now=T0)
    assert conditions(none)["HeadPodReady"] == ("False", "HeadPodNotFound")
    assert "head" not in none
    assert "endpoints" not in none
    unready = report.compute(c, [pod("h", "head", ready=False)], None, now=T0)
    assert conditions(unready)["HeadPodReady"] == ("False", "Unknown")
    pending = pod("h", "head", phase="Pending")
    pending["status"]["conditions"] = []
    assert conditions(report.compute(c, [pending], None, now=T0))["HeadPodReady"] == (
        "False",
        "Unknown",
    )


def test_transition_times_move_only_when_a_condition_status_does() -> None:
    c = cluster()
    first = report.compute(c, [pod("h", "head", ready=False)], HEADLESS, now=T0)
    same = report.compute(again(c, first), [pod("h", "head", ready=False)], HEADLESS, now=T1)
    assert same == first, "nothing changed: the same status, so the writer writes nothing"
    moved = report.compute(again(c, same), [pod("h", "head")], HEADLESS, now=T2)
    times = {c["type"]: c["lastTransitionTime"] for c in moved["conditions"]}
    assert times["HeadPodReady"] == T2
    assert times["RayClusterSuspended"] == T0


def test_replica_failure_carries_the_message_and_goes_away() -> None:
    c = cluster()
    failed = report.compute(
        c, [], None, failure=report.Failure("FailedCreateHeadPod", "no"), now=T0
    )
    failure = next(x for x in failed["conditions"] if x["type"] == "ReplicaFailure")
    assert (failure["message"], failure["observedGeneration"]) == ("no", 3)
    assert "ReplicaFailure" not in conditions(report.compute(again(c, failed), [], None, now=T1))


def test_suspend_runs_to_its_end_then_resumes() -> None:
    c = cluster(suspend=True)
    ready_pods = [pod("h", "head"), pod("w1"), pod("w2")]
    suspending = report.compute(c, ready_pods, HEADLESS, now=T0)
    assert conditions(suspending)["RayClusterSuspending"] == ("True", "RayClusterSuspending")
    assert conditions(suspending)["RayClusterSuspended"][0] == "False"
    # The user changes their mind half-way: the suspend still completes.
    c2 = again(cluster(suspend=False), suspending)
    still = report.compute(c2, [pod("h", "head", deleting=True)], HEADLESS, now=T1)
    assert conditions(still)["RayClusterSuspending"][0] == "True", "terminating pods remain"
    c3 = again(cluster(suspend=True), still)
    done = report.compute(c3, [], HEADLESS, now=T1)
    assert conditions(done)["RayClusterSuspended"] == ("True", "RayClusterSuspended")
    assert conditions(done)["RayClusterSuspending"][0] == "False"
    assert conditions(done)["RayClusterProvisioned"] == ("False", "RayClusterPodsProvisioning")
    assert done["state"] == "suspended"
    assert done["stateTransitionTimes"]["suspended"] == T1
    resumed = report.compute(again(cluster(suspend=False), done), [], HEADLESS, now=T2)
    assert conditions(resumed)["RayClusterSuspended"][0] == "False"
    assert "state" not in resumed


def test_desired_resources_sum_requests_over_limits_in_canonical_spelling() -> None:
    gpu_limits = {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1", "google.com/tpu": "4"}
    c = cluster(groups=[
        {"groupName": "gpu", "replicas": 2, "numOfHosts": 2, "template": {"spec": {"containers": [
            {"name": "w", "resources": {"limits": gpu_limits}}]}}},
        {"groupName": "off", "replicas": 5, "suspend": True, "template": {"spec": {"containers": [
            {"name": "w", "resources": {"limits": {"cpu": "100"}}}]}}},
    ])  # fmt: skip
    s = report.compute(c, [], None, now=T0)
    # head: cpu request 500m (over its limit 1), memory 2Gi;
    # 4 worker pods: 2 cpu, 1Gi, 1 GPU, 4 TPU each.
    assert (s["desiredCPU"], s["desiredMemory"]) == ("8500m", "6Gi")
    assert (s["desiredGPU"], s["desiredTPU"]) == ("4", "16")
    nothing = report.compute(cluster(groups=[]), [], None, now=T0)
    assert nothing["desiredGPU"] == "0"
    assert nothing["desiredTPU"] == "0"


def test_compute_reads_but_never_changes_its_inputs() -> None:
    c = cluster()
    before = c.model_dump()
    pods = [pod("h", "head"), pod("w1")]
    kept = copy.deepcopy(pods)
    report.compute(c, pods, HEADLESS, now=T0)
    assert c.model_dump() == before
    assert pods == kept


def test_the_status_validates_as_the_api_type() -> None:
    s = report.compute(cluster(), [pod("h", "head"), pod("w1"), pod("w2")], HEADLESS, now=T0)
    parsed = v1.RayClusterStatus.model_validate(s)
    assert parsed.state == "ready"
    assert parsed.head is not None
    assert parsed.head.pod_name == "h"
