"""controllers.raycluster.plan: the writes of a pass, decided from a snapshot and the clock
alone (no client, no cache, no event loop)."""

from __future__ import annotations

import copy
import dataclasses
import datetime
from collections.abc import Sequence
from typing import Any

import pytest

import api.v1 as v1
from controllers.raycluster import plan, redis_cleanup, snapshot
from tests.unit.controllers.raycluster import scenario

NOW = scenario.CLOCK
OPTIONS = plan.Options()


def see(
    obj: dict[str, Any], pods: Sequence[dict[str, Any]] = (), **fields: Any
) -> snapshot.Snapshot:
    obj.setdefault("metadata", {}).setdefault("uid", "u-demo")
    return snapshot.Snapshot(
        obj=obj, cluster=v1.RayCluster.model_validate(obj), pods=tuple(pods), **fields
    )


def pod(
    name: str, node_type: str, group: str = "", *, ready: bool = True, **meta: Any
) -> dict[str, Any]:
    labels = {"ray.io/cluster": "demo", "ray.io/node-type": node_type}
    if group:
        labels["ray.io/group"] = group
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "labels": labels, **meta},
        "spec": {"containers": [{"name": "ray"}]},
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True" if ready else "False"}]},
    }  # fmt: skip


def kinds(decided: plan.Plan) -> list[tuple[str, str]]:
    """Each write as (verb and kind, the failure reason or the object's name)."""
    out = []
    for write in decided.writes:
        if isinstance(write, plan.Delete):
            out += [("delete", p["metadata"]["name"]) for p in write.pods]
        else:
            meta = write.obj["metadata"]
            out.append((f"create {write.obj['kind']}", meta.get("name") or meta["generateName"]))
    return out


def test_a_new_cluster_gets_its_head_service_head_and_workers_in_order() -> None:
    decided = plan.plan(see(scenario.raycluster()), now=NOW, options=OPTIONS)
    assert isinstance(decided, plan.Plan)
    assert kinds(decided) == [
        ("create Service", "demo-head-svc"),
        ("create Pod", "demo-head-"),
        ("create Pod", "demo-small-worker-"),
        ("create Pod", "demo-small-worker-"),
        ("create Pod", "demo-large-worker-"),
    ]
    assert decided.failure is None
    assert decided.error is None
    assert not decided.add_finalizer


def test_what_exists_is_not_created_again() -> None:
    found = [pod("h", "head"), pod("s1", "worker", "small"), pod("s2", "worker", "small"),
             pod("l1", "worker", "large")]  # fmt: skip
    seen = see(scenario.raycluster(), found, owned={("Service", "demo-head-svc"): True})
    assert plan.plan(seen, now=NOW, options=OPTIONS) == plan.Plan(cluster=seen.cluster)  # type: ignore[arg-type]


def test_scaling_down_deletes_the_not_ready_pod_then_the_newest() -> None:
    found = [pod("h", "head"), pod("l1", "worker", "large"),
             pod("old", "worker", "small", creationTimestamp="2026-01-01T00:00:00Z"),
             pod("new", "worker", "small", creationTimestamp="2026-01-01T00:05:00Z"),
             pod("sick", "worker", "small", ready=False)]  # fmt: skip
    seen = see(scenario.raycluster(), found, owned={("Service", "demo-head-svc"): True})
    decided = plan.plan(seen, now=NOW, options=OPTIONS)
    assert isinstance(decided, plan.Plan)
    assert kinds(decided) == [("delete", "sick")]
    [write] = decided.writes
    assert isinstance(write, plan.Delete)
    assert write.failure == "FailedDeleteWorkerPod"


def test_two_heads_are_an_error_and_no_pod_is_written() -> None:
    seen = see(scenario.raycluster(), [pod("a", "head"), pod("b", "head")],
               owned={("Service", "demo-head-svc"): True})  # fmt: skip
    decided = plan.plan(seen, now=NOW, options=OPTIONS)
    assert isinstance(decided, plan.Plan)
    assert decided.writes == ()
    assert decided.error == "2 head pods (a, b); delete the extra ones"


def test_a_suspended_cluster_loses_every_pod_at_once() -> None:
    seen = see(scenario.raycluster(suspend=True), [pod("h", "head"), pod("s1", "worker", "small")])
    decided = plan.plan(seen, now=NOW, options=OPTIONS)
    assert isinstance(decided, plan.Plan)
    assert [(type(w), getattr(w, "failure", None)) for w in decided.writes][-1] == (
        plan.Delete, "FailedDeleteAllPods")  # fmt: skip
    assert kinds(decided)[-2:] == [("delete", "h"), ("delete", "s1")]


def test_a_role_of_the_autoscalers_name_not_controlled_stops_before_its_binding() -> None:
    obj = scenario.raycluster(enableInTreeAutoscaling=True)
    cluster = v1.RayCluster.model_validate(obj)
    wanted, _ = plan.owned(cluster, {}, OPTIONS)
    role = next(c for c in wanted if c.must_own)
    seen = see(obj, owned={plan.key(role.obj): False})
    decided = plan.plan(seen, now=NOW, options=OPTIONS)
    assert isinstance(decided, plan.Plan)
    assert decided.failure is not None
    assert decided.failure.reason == "RoleNotOwned"
    assert [w.obj["kind"] for w in decided.writes if isinstance(w, plan.Create)] == [
        "ServiceAccount"
    ]


def test_a_cluster_whose_objects_cannot_exist_is_refused_with_its_status() -> None:
    seen = dataclasses.replace(see(scenario.raycluster()), problems=("too long",))
    refusal = plan.plan(seen, now=NOW, options=OPTIONS)
    assert isinstance(refusal, plan.Refusal)
    assert (refusal.message, refusal.error) == ("too long", "too long")
    assert refusal.status is not None
    failure = next(c for c in refusal.status["conditions"] if c["type"] == "ReplicaFailure")
    assert (failure["reason"], failure["lastTransitionTime"]) == (
        "InvalidRayClusterSpec", scenario.NOW)  # fmt: skip


# -- a cluster being deleted ------------------------------------------------------------------

FT = {"redisAddress": "redis:6379"}


def deleting(**metadata: Any) -> dict[str, Any]:
    obj = scenario.raycluster(gcsFaultToleranceOptions=copy.deepcopy(FT))
    obj["metadata"].update(
        uid="u-demo", deletionTimestamp=scenario.NOW, finalizers=[redis_cleanup.FINALIZER],
        **metadata,
    )  # fmt: skip
    return obj


def test_while_the_head_exists_its_pods_are_deleted_and_nothing_else() -> None:
    found = [pod("h", "head"), pod("s1", "worker", "small")]
    decided = plan.deletion(see(deleting(), found), now=NOW, options=OPTIONS)
    assert [p["metadata"]["name"] for p in decided.delete] == ["h", "s1"]
    assert decided.steps == ()
    assert decided.requeue_after is None


def test_without_the_head_the_job_is_created_and_the_timeout_is_the_requeue() -> None:
    decided = plan.deletion(
        see(deleting()), now=NOW + datetime.timedelta(seconds=100), options=OPTIONS
    )
    [step] = decided.steps
    assert isinstance(step, plan.CreateJob)
    assert step.remaining == pytest.approx(redis_cleanup.DEFAULT_DELETION_TIMEOUT - 100)


@pytest.mark.parametrize(
    ("condition", "expected"),
    [("Complete", [plan.DropFinalizer]), ("Failed", [plan.Event, plan.DropFinalizer])],
)  # fmt: skip
def test_a_finished_job_drops_the_finalizer(condition: str, expected: list[type]) -> None:
    job = {"metadata": {"name": "demo-redis-cleanup"},
           "status": {"conditions": [{"type": condition, "status": "True"}]}}  # fmt: skip
    decided = plan.deletion(see(deleting(), jobs=(job,)), now=NOW, options=OPTIONS)
    assert [type(s) for s in decided.steps] == expected


def test_past_the_timeout_the_finalizer_is_forced_off_with_a_warning() -> None:
    decided = plan.deletion(see(deleting()), now=NOW + datetime.timedelta(hours=1), options=OPTIONS)
    drop, event = decided.steps
    assert isinstance(drop, plan.DropFinalizer)
    assert isinstance(event, plan.Event)
    assert event.reason == "ForceDeletedStuckCluster"
