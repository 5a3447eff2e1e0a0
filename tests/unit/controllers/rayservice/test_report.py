"""controllers.rayservice.report.compute: the rules of its module docstring, one by one.

Each test carries a status through passes the way the reconciler does (the output of
one pass is the ``status`` of the next) with a moving ``now``, so a rule that kept or
moved a field it should not would show.
"""

from __future__ import annotations

import copy
from typing import Any

from controllers.ray import dashboard
from controllers.rayservice import report
from runtime import equality
from tests.unit import helpers

TESTDATA = helpers.TESTDATA / "ray-2.60"
T = [f"2026-12-01T00:00:{i:02d}Z" for i in range(60)]

ACTIVE = "demo-aaaaa"
PENDING = "demo-bbbbb"
RUNNING_APPS = {"fruit": {"status": "RUNNING"}}


def service(prev: dict[str, Any] | None = None, *, generation: int = 1) -> dict[str, Any]:
    return {"metadata": {"generation": generation}, "spec": {}, "status": copy.deepcopy(prev or {})}


def step(
    prev: dict[str, Any] | None,
    now: str,
    *,
    generation: int = 1,
    **observed: Any,
) -> dict[str, Any]:
    new: dict[str, Any] = report.compute(
        service(prev, generation=generation), report.Observed(**observed), now=now
    )
    return new


def cond(st: dict[str, Any], type_: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [c for c in st["conditions"] if c["type"] == type_]
    assert len(found) == 1, found
    return found[0]


def types(st: dict[str, Any]) -> list[str]:
    return [c["type"] for c in st["conditions"]]


def triple(st: dict[str, Any], type_: str) -> tuple[str, str, str]:
    c = cond(st, type_)
    return c["status"], c["reason"], c["lastTransitionTime"]


def active(**kw: Any) -> report.ClusterReport:
    return report.ClusterReport(name=ACTIVE, **kw)


def pending(**kw: Any) -> report.ClusterReport:
    return report.ClusterReport(name=PENDING, **kw)


# -- Ready ---------------------------------------------------------------------------------


def test_ready_goes_initializing_then_nonzero_then_zero_endpoints() -> None:
    s0 = step(None, T[0], pending=pending())
    assert triple(s0, "Ready") == ("False", "Initializing", T[0])
    assert cond(s0, "Ready")["observedGeneration"] == 1
    assert s0["observedGeneration"] == 1

    s1 = step(s0, T[1], active=active(), num_serve_endpoints=2)
    assert triple(s1, "Ready") == ("True", "NonZeroServeEndpoints", T[1])
    assert s1["numServeEndpoints"] == 2

    s2 = step(s1, T[2], active=active(), num_serve_endpoints=3)
    assert triple(s2, "Ready") == ("True", "NonZeroServeEndpoints", T[1])  # no transition

    s3 = step(s2, T[3], active=active(), num_serve_endpoints=0)
    assert triple(s3, "Ready") == ("False", "ZeroServeEndpoints", T[3])
    assert s3["numServeEndpoints"] == 0


def test_zero_serve_endpoints_sticks_while_endpoints_stay_at_zero() -> None:
    """KubeRay sets Initializing only on a status without conditions: a service that was
    ready and lost its endpoints stays ZeroServeEndpoints (it is not initializing, so no
    initializing timeout can start for it)."""
    s0 = step(None, T[0], active=active(), num_serve_endpoints=1)
    s1 = step(s0, T[1], active=active(), num_serve_endpoints=0)
    s2 = step(s1, T[2], active=active(), num_serve_endpoints=0)
    assert triple(s2, "Ready") == ("False", "ZeroServeEndpoints", T[1])
    assert report.initializing_since(service(s2)) is None
    # and back
    s3 = step(s2, T[3], active=active(), num_serve_endpoints=1)
    assert triple(s3, "Ready") == ("True", "NonZeroServeEndpoints", T[3])


def test_initializing_keeps_its_start_for_the_same_generation() -> None:
    s0 = step(None, T[0], pending=pending())
    s1 = step(s0, T[5], pending=pending())
    s2 = step(s1, T[9], pending=pending(applications={"fruit": {"status": "DEPLOYING"}}))
    assert triple(s2, "Ready") == ("False", "Initializing", T[0])
    assert report.initializing_since(service(s2)) == T[0]


def test_initializing_restarts_on_a_new_generation() -> None:
    s0 = step(None, T[0], pending=pending())
    s1 = step(s0, T[7], generation=2, pending=pending())
    assert triple(s1, "Ready") == ("False", "Initializing", T[7])
    assert cond(s1, "Ready")["observedGeneration"] == 2
    assert s1["observedGeneration"] == 2
    # as seen from generation 2, a generation-1 Initializing is not a start time
    assert report.initializing_since(service(s0, generation=2)) is None
    assert report.initializing_since(service(s1, generation=2)) == T[7]


def test_initializing_timeout_sticks_even_for_a_new_generation() -> None:
    """KubeRay v1.7.0's isInitializingTimeout: terminal, whatever the generation."""
    s0 = step(None, T[0], pending=pending())
    s1 = step(s0, T[10], timed_out="did not become ready within 10s")
    assert triple(s1, "Ready") == ("False", "InitializingTimeout", T[0])  # status unchanged
    assert cond(s1, "Ready")["message"] == "did not become ready within 10s"

    s2 = step(s1, T[20])  # nothing observed, same generation: still timed out
    assert cond(s2, "Ready") == cond(s1, "Ready")
    assert report.initializing_since(service(s2)) is None  # no new timeout to count

    s3 = step(s2, T[30], generation=2, pending=pending())
    assert triple(s3, "Ready") == ("False", "InitializingTimeout", T[0])
    assert report.initializing_since(service(s3, generation=2)) is None


def test_validation_failed_then_fixed() -> None:
    s0 = step(None, T[0], problem=report.Problem(reason="ValidationFailed", message="bad yaml"))
    c = cond(s0, "Ready")
    assert (c["status"], c["reason"], c["message"]) == ("False", "ValidationFailed", "bad yaml")
    assert s0["serviceStatus"] == ""

    s1 = step(s0, T[4], generation=2, pending=pending())
    assert triple(s1, "Ready") == ("False", "Initializing", T[4])


def test_a_problem_wins_over_ready_endpoints() -> None:
    s0 = step(None, T[0], active=active(), num_serve_endpoints=1)
    s1 = step(s0, T[1], num_serve_endpoints=1,
              problem=report.Problem(reason="ServiceNotOwned", message="x"))  # fmt: skip
    assert triple(s1, "Ready") == ("False", "ServiceNotOwned", T[1])
    assert s1["serviceStatus"] == ""


# -- UpgradeInProgress ---------------------------------------------------------------------


def test_upgrade_in_progress_through_an_upgrade() -> None:
    s0 = step(None, T[0], pending=pending())
    assert triple(s0, "UpgradeInProgress") == ("False", "Initializing", T[0])

    s1 = step(s0, T[1], active=active(), num_serve_endpoints=1)
    assert triple(s1, "UpgradeInProgress") == ("False", "NoPendingCluster", T[0])

    s2 = step(s1, T[2], active=active(), pending=pending(), num_serve_endpoints=1)
    assert triple(s2, "UpgradeInProgress") == ("True", "BothActivePendingClustersExist", T[2])

    s3 = step(s2, T[3], active=active(), num_serve_endpoints=1)
    assert triple(s3, "UpgradeInProgress") == ("False", "NoPendingCluster", T[3])


def test_no_active_cluster_after_having_had_one_is_unknown() -> None:
    s0 = step(None, T[0], active=active(), num_serve_endpoints=1)
    s1 = step(s0, T[1])
    assert triple(s1, "UpgradeInProgress") == ("Unknown", "NoActiveCluster", T[1])
    s2 = step(s1, T[2], pending=pending())
    assert triple(s2, "UpgradeInProgress") == ("Unknown", "NoActiveCluster", T[1])


def test_initializing_without_a_cluster_stays_initializing() -> None:
    s0 = step(None, T[0])
    s1 = step(s0, T[1], timed_out="late")
    assert triple(s1, "UpgradeInProgress") == ("False", "Initializing", T[0])
    s2 = step(s1, T[2])
    assert triple(s2, "UpgradeInProgress") == ("False", "Initializing", T[0])


# -- RollbackInProgress --------------------------------------------------------------------


def test_rollback_in_progress_then_complete() -> None:
    s0 = step(None, T[0], active=active(), num_serve_endpoints=1)
    assert "RollbackInProgress" not in types(s0)
    s1 = step(s0, T[1], active=active(), num_serve_endpoints=1, rolling_back=True)
    assert triple(s1, "RollbackInProgress") == ("True", "RollbackInProgress", T[1])
    s2 = step(s1, T[2], active=active(), num_serve_endpoints=1)
    assert triple(s2, "RollbackInProgress") == ("False", "RollbackComplete", T[2])
    s3 = step(s2, T[3], active=active(), num_serve_endpoints=1)
    assert triple(s3, "RollbackInProgress") == ("False", "RollbackComplete", T[2])
    assert types(s3) == ["Ready", "UpgradeInProgress", "RollbackInProgress"]


# -- Suspending / Suspended ----------------------------------------------------------------


def test_suspend_then_resume() -> None:
    """KubeRay v1.7.0's handleSuspend: requested, deleting, suspended, resumed."""
    s0 = step(None, T[0], active=active(), num_serve_endpoints=1)
    assert "Suspending" not in types(s0)
    assert "Suspended" not in types(s0)

    s1 = step(s0, T[1], active=active(), num_serve_endpoints=1, suspend="requested")
    assert triple(s1, "Suspending") == ("True", "SuspendRequested", T[1])
    assert triple(s1, "Ready") == ("False", "SuspendInProgress", T[1])
    assert triple(s1, "UpgradeInProgress") == ("False", "SuspendInProgress", T[0])
    assert triple(s1, "RollbackInProgress") == ("False", "SuspendInProgress", T[1])
    assert "Suspended" not in types(s1)
    assert "activeServiceStatus" not in s1
    assert (s1["numServeEndpoints"], s1["serviceStatus"]) == (0, "")

    s2 = step(s1, T[2], suspend="deleting")
    assert triple(s2, "Suspending") == ("True", "SuspendInProgress", T[1])
    assert cond(s2, "Ready") == cond(s1, "Ready")

    s3 = step(s2, T[3], suspend="suspended")
    assert triple(s3, "Suspended") == ("True", "SuspendComplete", T[3])
    assert triple(s3, "Suspending") == ("False", "SuspendComplete", T[3])
    for type_ in ("Ready", "UpgradeInProgress", "RollbackInProgress"):
        assert cond(s3, type_)["reason"] == "SuspendComplete"
    assert types(s3) == [
        "Ready", "UpgradeInProgress", "RollbackInProgress", "Suspending", "Suspended"
    ]  # fmt: skip

    back = report.resumed(service(s3), now=T[4])
    assert triple(back, "Suspended") == ("False", "RayServiceResumed", T[4])
    assert triple(back, "Ready") == ("False", "Initializing", T[4])
    assert triple(back, "UpgradeInProgress") == ("False", "Initializing", T[4])
    s4 = step(back, T[5], pending=pending())
    assert triple(s4, "Ready") == ("False", "Initializing", T[4])  # the timeout counts anew
    assert triple(s4, "Suspending") == ("False", "SuspendComplete", T[3])  # untouched
    assert triple(s4, "Suspended") == ("False", "RayServiceResumed", T[4])
    assert triple(s4, "RollbackInProgress") == ("False", "SuspendComplete", T[1])


# -- lastTransitionTime, carried applications, volatile cluster status ---------------------


def test_last_transition_time_moves_only_with_status() -> None:
    s0 = step(None, T[0], problem=report.Problem(reason="ValidationFailed", message="a"))
    # same status False, another reason: the time stays
    s1 = step(s0, T[1], generation=2, active=active(), num_serve_endpoints=0)
    assert cond(s1, "Ready")["status"] == "False"
    s2 = step(s1, T[2], generation=2, active=active(), num_serve_endpoints=1)
    assert triple(s2, "Ready") == ("True", "NonZeroServeEndpoints", T[2])
    s3 = step(s2, T[3], generation=2, active=active(), num_serve_endpoints=1,
              problem=None)  # fmt: skip
    assert cond(s3, "Ready")["lastTransitionTime"] == T[2]
    assert (
        cond(s3, "UpgradeInProgress")["lastTransitionTime"]
        == cond(s2, "UpgradeInProgress")["lastTransitionTime"]
    )
    assert s3 == s2


def test_applications_are_carried_over_for_the_same_cluster_only() -> None:
    apps = {"fruit": {"status": "RUNNING", "serveDeploymentStatuses": {"F": {"status": "HEALTHY"}}}}
    s0 = step(None, T[0], active=active(applications=apps), num_serve_endpoints=1)
    assert s0["activeServiceStatus"] == {"rayClusterName": ACTIVE, "applicationStatuses": apps}

    # not read this pass (the pending cluster is polled): kept for the same cluster
    s1 = step(s0, T[1], active=active(),
              pending=pending(applications={"fruit": {"status": "DEPLOYING"}}),
              num_serve_endpoints=1)  # fmt: skip
    assert s1["activeServiceStatus"]["applicationStatuses"] == apps
    assert s1["pendingServiceStatus"] == {
        "rayClusterName": PENDING,
        "applicationStatuses": {"fruit": {"status": "DEPLOYING"}},
    }

    # the pending cluster became active: the old active's applications do not follow it
    s2 = step(s1, T[2], active=report.ClusterReport(name=PENDING), num_serve_endpoints=1)
    assert s2["activeServiceStatus"] == {"rayClusterName": PENDING}
    assert "pendingServiceStatus" not in s2

    # read this pass, empty: replaces what was there
    s3 = step(s0, T[3], active=active(applications={}), num_serve_endpoints=1)
    assert "applicationStatuses" not in s3["activeServiceStatus"]


def test_ray_cluster_status_is_copied_but_volatile() -> None:
    one = {"state": "ready", "readyWorkerReplicas": 1}
    three = {"state": "ready", "readyWorkerReplicas": 3}
    before = step(None, T[0], active=active(cluster_status=one), num_serve_endpoints=1)
    assert before["activeServiceStatus"]["rayClusterStatus"] == {
        "state": "ready",
        "readyWorkerReplicas": 1,
    }
    after = step(before, T[1], active=active(cluster_status=three), num_serve_endpoints=1)
    assert after != before
    assert equality.equal(before, after, volatile=report.VOLATILE)
    # but not when something else moved
    moved = step(
        before, T[1], active=active(cluster_status={"state": "ready"}), num_serve_endpoints=2
    )
    assert not equality.equal(before, moved, volatile=report.VOLATILE)
    # the write stamp is volatile as well
    assert equality.equal(
        {**before, "lastUpdateTime": T[0]}, {**before, "lastUpdateTime": T[9]},
        volatile=report.VOLATILE,
    )  # fmt: skip


def test_service_status_is_running_iff_ready() -> None:
    s0 = step(None, T[0], pending=pending())
    assert s0["serviceStatus"] == ""
    s1 = step(s0, T[1], active=active(), num_serve_endpoints=1)
    assert s1["serviceStatus"] == "Running"
    s2 = step(s1, T[2], active=active(), num_serve_endpoints=0)
    assert s2["serviceStatus"] == ""


def test_compute_does_not_modify_its_input() -> None:
    s0 = step(None, T[0], active=active(applications=RUNNING_APPS), num_serve_endpoints=1)
    svc = service(s0)
    frozen = copy.deepcopy(svc)
    report.compute(svc, report.Observed(active=active(), suspend="requested"), now=T[5])
    assert svc == frozen


# -- applications(details) -----------------------------------------------------------------


def _details(name: str) -> dashboard.ServeDetails:
    return dashboard.parse_serve_details((TESTDATA / f"{name}.json").read_bytes())


def test_applications_from_two_running() -> None:
    assert report.applications(_details("get-two-running")) == {
        "echo": {"status": "RUNNING", "serveDeploymentStatuses": {"Echo": {"status": "HEALTHY"}}},
        "hello": {"status": "RUNNING", "serveDeploymentStatuses": {"Hello": {"status": "HEALTHY"}}},
    }


def test_applications_from_deploy_failed_carries_the_message() -> None:
    apps = report.applications(_details("get-deploy-failed"))
    assert sorted(apps) == ["broken", "hello"]
    broken = apps["broken"]
    assert broken["status"] == "DEPLOY_FAILED"
    assert (
        broken["message"]
        .rstrip()
        .endswith("ModuleNotFoundError: No module named 'no_such_module_xyz'")
    )
    assert "serveDeploymentStatuses" not in broken  # Ray sent deployments: {}
    assert apps["hello"]["status"] == "RUNNING"
    assert "message" not in apps["hello"]  # "" is left out


def test_applications_of_an_empty_answer() -> None:
    assert report.applications(_details("get-empty")) == {}
