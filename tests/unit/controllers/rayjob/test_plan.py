"""The RayJob state machine, one test per row of KubeRay v1.7.0's transition table (and
each place we deliberately differ): :func:`controllers.rayjob.plan.plan` on hand-made
snapshots, with a fixed clock."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest

import api.v1 as v1
from controllers.ray import dashboard
from controllers.rayjob import plan as plan_
from controllers.rayjob import snapshot as snapshot_

NOW = datetime.datetime(2026, 6, 1, 12, 0, 0, tzinfo=datetime.UTC)
OPTIONS = plan_.Options()
END_MS = int(NOW.timestamp()) * 1000


def at(seconds: float) -> str:
    return (NOW + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def rayjob(spec: dict[str, Any] | None = None, **status: Any) -> dict[str, Any]:
    base_spec: dict[str, Any] = {
        "entrypoint": "python job.py",
        "rayClusterSpec": {
            "headGroupSpec": {
                "template": {"spec": {"containers": [{"name": "ray-head", "image": "ray:2.60"}]}}
            }
        },
    }
    base_spec.update(spec or {})
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "pi", "namespace": "ns", "uid": "u1", "generation": 1},
        "spec": base_spec,
        "status": status,
    }


def running(spec: dict[str, Any] | None = None, **status: Any) -> dict[str, Any]:
    base = {
        "jobDeploymentStatus": "Running",
        "jobId": "pi-abcde",
        "rayClusterName": "pi-xyzwv",
        "jobStatus": "",
        "startTime": at(-60),
        "succeeded": 0,
        "failed": 0,
        "dashboardURL": "pi-xyzwv-head-svc.ns.svc.cluster.local:8265",
    }
    base.update(status)
    return rayjob(spec, **base)


def cluster(state: str | None = "ready", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "pi-xyzwv", "namespace": "ns", "uid": "c1", **meta},
        "spec": {
            "headGroupSpec": {
                "template": {"spec": {"containers": [{"name": "ray-head", "image": "ray:2.60"}]}}
            },
            "workerGroupSpecs": [{"groupName": "w", "template": {}}],
        },
        "status": {"state": state} if state else {},
    }


HEAD_SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "pi-xyzwv-head-svc", "namespace": "ns"},
    "spec": {
        "ports": [{"name": "dashboard", "port": 8265}],
        "selector": {"ray.io/cluster": "pi-xyzwv"},
    },
}


def submitter_job(condition: str | None = None, seconds_ago: float = 0) -> dict[str, Any]:
    conditions = (
        [{"type": condition, "status": "True", "lastTransitionTime": at(-seconds_ago),
          "reason": "BackoffLimitExceeded", "message": "Job reached its backoff limit"}]
        if condition
        else []
    )  # fmt: skip
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "pi", "namespace": "ns"},
        "status": {"conditions": conditions},
    }


def info(status: str, *, end_ms: int | None = None, message: str = "") -> dashboard.JobInfo:
    return dashboard.JobInfo(
        job_id=None,
        submission_id="pi-abcde",
        status=status,
        message=message,
        start_time=int((NOW.timestamp() - 50) * 1000),
        end_time=end_ms,
    )


def snap(obj: dict[str, Any], **found: Any) -> snapshot_.Snapshot:
    return snapshot_.Snapshot(obj=obj, job=v1.RayJob.model_validate(obj), **found)


def decide(s: snapshot_.Snapshot, now: datetime.datetime = NOW, **options: Any) -> plan_.Plan:
    return plan_.plan(s, now=now, options=plan_.Options(**options), suffixes=("xyzwv", "abcde"))


def kinds(p: plan_.Plan) -> list[str]:
    return [f"{type(w).__name__}:{getattr(w, 'what', '')}".rstrip(":") for w in p.writes]


# -- New ----------------------------------------------------------------------------------


def test_new_records_the_ids_and_the_start_before_anything_is_created() -> None:
    p = decide(snap(rayjob()))
    assert p.add_finalizer
    assert p.writes == ()
    assert p.status is not None
    assert p.status["jobDeploymentStatus"] == "Initializing"
    assert p.status["jobId"] == "pi-abcde"
    assert p.status["rayClusterName"] == "pi-xyzwv"
    assert p.status["startTime"] == at(0)
    assert (p.status["succeeded"], p.status["failed"], p.status["jobStatus"]) == (0, 0, "")
    assert p.requeue_after == plan_.IMMEDIATE


def test_new_takes_the_spec_job_id_and_the_selected_cluster() -> None:
    obj = rayjob({"jobId": "mine", "clusterSelector": {"ray.io/cluster": "shared"}})
    p = decide(snap(obj))
    assert p.status is not None
    assert (p.status["jobId"], p.status["rayClusterName"]) == ("mine", "shared")


def test_new_interactive_has_no_job_id() -> None:
    p = decide(snap(rayjob({"submissionMode": "InteractiveMode"})))
    assert p.status is not None
    assert "jobId" not in p.status


# -- Initializing -------------------------------------------------------------------------


def initializing(spec: dict[str, Any] | None = None, **status: Any) -> dict[str, Any]:
    base = {"jobDeploymentStatus": "Initializing", "jobId": "pi-abcde",
            "rayClusterName": "pi-xyzwv", "jobStatus": "", "startTime": at(-10),
            "succeeded": 0, "failed": 0}  # fmt: skip
    base.update(status)
    return rayjob(spec, **base)


def test_initializing_suspend_goes_suspending() -> None:
    p = decide(snap(initializing({"suspend": True, "shutdownAfterJobFinishes": True})))
    assert p.status is not None
    assert p.status["jobDeploymentStatus"] == "Suspending"
    assert p.writes == ()


def test_initializing_active_deadline_fails_without_retry() -> None:
    p = decide(snap(initializing({"activeDeadlineSeconds": 5, "backoffLimit": 2})))
    assert p.status is not None
    assert (p.status["jobDeploymentStatus"], p.status["reason"]) == ("Failed", "DeadlineExceeded")
    assert p.status["failed"] == 1
    assert p.status["endTime"] == at(0)


def test_initializing_pre_running_deadline_fails_and_is_retried() -> None:
    p = decide(snap(initializing({"preRunningDeadlineSeconds": 5, "backoffLimit": 1})))
    assert p.status is not None
    assert p.status["jobDeploymentStatus"] == "Retrying"
    assert p.status["reason"] == "PreRunningDeadlineExceeded"
    assert p.status["failed"] == 1


def test_initializing_deadline_not_yet_looks_again_at_it() -> None:
    p = decide(snap(initializing({"preRunningDeadlineSeconds": 30})))
    assert p.requeue_after == pytest.approx(20)


def test_initializing_creates_the_missing_cluster() -> None:
    p = decide(snap(initializing()))
    assert kinds(p) == ["Create:RayCluster"]
    created = p.writes[0]
    assert isinstance(created, plan_.Create)
    assert created.obj["metadata"]["name"] == "pi-xyzwv"
    assert p.status is not None
    assert p.status["jobDeploymentStatus"] == "Initializing"
    assert p.requeue_after is None  # the cluster's changes wake the pass


def test_initializing_missing_selected_cluster_warns_and_looks_again() -> None:
    obj = initializing({"clusterSelector": {"ray.io/cluster": "pi-xyzwv"}})
    p = decide(snap(obj))
    assert p.writes == ()
    assert [e.reason for e in p.events] == ["RayClusterNotFound"]
    assert p.requeue_after == OPTIONS.poll_interval


def test_initializing_copies_the_status_of_a_cluster_not_ready_when_its_state_changes() -> None:
    c = cluster(state=None)
    c["status"] = {"readyWorkerReplicas": 1, "conditions": [{"type": "HeadPodReady"}]}
    p = decide(snap(initializing(), cluster=c))
    assert p.status is not None
    assert "rayClusterStatus" not in p.status, "a count or a condition alone: no write"
    assert p.status["jobDeploymentStatus"] == "Initializing"
    c["status"] = {"state": "failed", "reason": "RayClusterPodsProvisioning"}
    p = decide(snap(initializing(), cluster=c))
    assert p.status is not None
    assert p.status["rayClusterStatus"] == c["status"]
    copied = initializing(rayClusterStatus={"state": "failed", "reason": "x"})
    c["status"] = {"state": "failed", "reason": "x", "desiredWorkerReplicas": 3}
    p = decide(snap(copied, cluster=c))
    assert p.status is not None
    assert p.status["rayClusterStatus"] == {"state": "failed", "reason": "x"}


def test_initializing_ready_cluster_without_head_service_waits() -> None:
    p = decide(snap(initializing(), cluster=cluster()))
    assert p.status is not None
    assert p.status["jobDeploymentStatus"] == "Initializing"


def test_initializing_k8s_job_mode_creates_the_submitter_and_runs() -> None:
    p = decide(snap(initializing(), cluster=cluster(), head_service=HEAD_SERVICE))
    assert kinds(p) == ["Create:RayJobSubmitter"]
    assert p.status is not None
    assert p.status["jobDeploymentStatus"] == "Running"
    assert p.status["dashboardURL"] == "pi-xyzwv-head-svc.ns.svc.cluster.local:8265"


def test_initializing_keeps_an_existing_submitter() -> None:
    p = decide(
        snap(
            initializing(), cluster=cluster(), head_service=HEAD_SERVICE, submitter=submitter_job()
        )
    )
    assert p.writes == ()


@pytest.mark.parametrize("mode", ["HTTPMode", "SidecarMode"])
def test_initializing_http_and_sidecar_run_without_a_submitter_job(mode: str) -> None:
    p = decide(
        snap(initializing({"submissionMode": mode}), cluster=cluster(), head_service=HEAD_SERVICE)
    )
    assert p.writes == ()
    assert p.status is not None
    assert p.status["jobDeploymentStatus"] == "Running"


def test_initializing_interactive_waits() -> None:
    obj = initializing({"submissionMode": "InteractiveMode"})
    p = decide(snap(obj, cluster=cluster(), head_service=HEAD_SERVICE))
    assert p.status is not None
    assert p.status["jobDeploymentStatus"] == "Waiting"


# -- Waiting ------------------------------------------------------------------------------


def waiting(spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return initializing({"submissionMode": "InteractiveMode", **(spec or {})},
                        jobDeploymentStatus="Waiting")  # fmt: skip


def test_waiting_pre_running_deadline() -> None:
    p = decide(snap(waiting({"preRunningDeadlineSeconds": 5})))
    assert p.status is not None
    assert p.status["reason"] == "PreRunningDeadlineExceeded"


def test_waiting_ignores_the_active_deadline_and_suspend() -> None:
    p = decide(snap(waiting({"activeDeadlineSeconds": 5, "suspend": True})))
    assert p.status is not None
    assert p.status["jobDeploymentStatus"] == "Waiting"


def test_waiting_without_job_id_writes_nothing_new_and_does_not_poll() -> None:
    obj = waiting()
    p = decide(snap(obj))
    assert p.status == obj["status"]
    assert p.requeue_after is None


def test_waiting_with_job_id_runs() -> None:
    p = decide(snap(waiting({"jobId": "given"})))
    assert p.status is not None
    assert (p.status["jobDeploymentStatus"], p.status["jobId"]) == ("Running", "given")


# -- Running ------------------------------------------------------------------------------


def seen(i: dashboard.JobInfo | None = None, error: str | None = None) -> snapshot_.Dashboard:
    return snapshot_.Dashboard(info=i, error=error)


def test_running_suspend() -> None:
    p = decide(
        snap(running({"suspend": True, "shutdownAfterJobFinishes": True}), cluster=cluster())
    )
    assert p.status is not None
    assert p.status["jobDeploymentStatus"] == "Suspending"


def test_running_active_deadline_is_never_retried() -> None:
    p = decide(snap(running({"activeDeadlineSeconds": 30, "backoffLimit": 3}), cluster=cluster()))
    assert p.status is not None
    assert (p.status["jobDeploymentStatus"], p.status["reason"]) == ("Failed", "DeadlineExceeded")


def test_running_grace_period_after_ray_ended() -> None:
    obj = running(jobStatus="SUCCEEDED", rayJobInfo={"endTime": at(-301)})
    p = decide(snap(obj, cluster=cluster(), submitter=submitter_job()))
    assert p.status is not None
    assert p.status["jobDeploymentStatus"] == "Complete"
    obj = running(jobStatus="FAILED", rayJobInfo={"endTime": at(-301)})
    p = decide(snap(obj, cluster=cluster(), submitter=submitter_job()))
    assert p.status is not None
    assert p.status["reason"] == "JobDeploymentStatusTransitionGracePeriodExceeded"


def test_running_status_check_timeout_is_never_retried() -> None:
    obj = running({"backoffLimit": 2}, jobStatusCheckFailureStartTime=at(-301))
    p = decide(snap(obj, cluster=cluster()))
    assert p.status is not None
    assert (p.status["jobDeploymentStatus"], p.status["reason"]) == (
        "Failed",
        "JobStatusCheckTimeoutExceeded",
    )


def test_running_recreates_a_deleted_cluster_and_makes_the_job_service() -> None:
    p = decide(snap(running(), submitter=submitter_job(), dashboard=seen(info("RUNNING"))))
    assert kinds(p) == ["Create:RayCluster"]
    p = decide(snap(running(), cluster=cluster(), submitter=submitter_job(),
                    dashboard=seen(info("RUNNING"))))  # fmt: skip
    assert kinds(p) == ["Create:Service"]


def test_running_repoints_the_job_service_at_the_current_cluster() -> None:
    old = copy.deepcopy(HEAD_SERVICE)
    old["metadata"]["name"] = "pi-head-svc"
    old["spec"]["selector"] = {"ray.io/cluster": "pi-old"}
    old["spec"]["clusterIP"] = "10.0.0.9"
    p = decide(snap(running(), cluster=cluster(), job_service=old, submitter=submitter_job(),
                    dashboard=seen(info("RUNNING"))))  # fmt: skip
    assert kinds(p) == ["Update:Service"]
    update = p.writes[0]
    assert isinstance(update, plan_.Update)
    assert update.obj["spec"]["selector"]["ray.io/cluster"] == "pi-xyzwv"
    assert update.obj["spec"]["clusterIP"] == "10.0.0.9"


def service_ok() -> dict[str, Any]:
    svc = copy.deepcopy(HEAD_SERVICE)
    svc["metadata"]["name"] = "pi-head-svc"
    return svc


def run_snap(obj: dict[str, Any], **found: Any) -> snapshot_.Snapshot:
    found.setdefault("cluster", cluster())
    found.setdefault("job_service", service_ok())
    return snap(obj, **found)


@pytest.mark.parametrize(
    ("job_status", "reason"), [("FAILED", "AppFailed"), ("RUNNING", "SubmissionFailed")]
)
def test_running_failed_submitter_job(job_status: str, reason: str) -> None:
    obj = running(jobStatus=job_status)
    p = decide(
        run_snap(obj, submitter=submitter_job("Failed", 1), dashboard=seen(info(job_status)))
    )
    assert p.status is not None
    assert (p.status["jobDeploymentStatus"], p.status["reason"]) == ("Failed", reason)
    assert "BackoffLimitExceeded" in p.status["message"] or reason == "AppFailed"


def test_running_submitter_finished_30_s_ago_fails_the_job() -> None:
    p = decide(run_snap(running(), submitter=submitter_job("Complete", 31),
                        dashboard=seen(info("RUNNING"))))  # fmt: skip
    assert p.status is not None
    assert p.status["reason"] == "JobDeploymentStatusTransitionGracePeriodExceeded"
    assert p.status["jobStatus"] == "FAILED"


def test_running_submitter_finished_recently_waits_for_ray() -> None:
    p = decide(run_snap(running(), submitter=submitter_job("Complete", 10),
                        dashboard=seen(info("RUNNING"))))  # fmt: skip
    assert p.status is not None
    assert p.status["jobDeploymentStatus"] == "Running"
    assert p.requeue_after is not None
    assert p.requeue_after <= 20


def test_running_sidecar_without_head_pod_fails() -> None:
    obj = running({"submissionMode": "SidecarMode"})
    p = decide(run_snap(obj, head_pods=(), dashboard=seen(info("RUNNING"))))
    assert p.status is not None
    assert p.status["jobDeploymentStatus"] == "Failed"


def sidecar_head(exit_code: int | None) -> dict[str, Any]:
    state = (
        {"terminated": {"exitCode": exit_code, "finishedAt": at(-1)}}
        if exit_code is not None
        else {"running": {}}
    )
    return {"metadata": {"name": "pi-xyzwv-head"}, "status": {"containerStatuses": [
        {"name": "ray-job-submitter", "state": state, "restartCount": 0}]}}  # fmt: skip


def test_running_sidecar_container_failed() -> None:
    obj = running({"submissionMode": "SidecarMode"})
    p = decide(run_snap(obj, head_pods=(sidecar_head(1),), dashboard=seen(info("RUNNING"))))
    assert p.status is not None
    assert p.status["reason"] == "SubmissionFailed"


def test_running_http_mode_submits_an_unknown_job() -> None:
    obj = running({"submissionMode": "HTTPMode", "entrypointNumCpus": 2,
                   "runtimeEnvYAML": "pip: [numpy]",
                   "entrypointResources": '{"r": 1}'})  # fmt: skip
    p = decide(run_snap(obj, dashboard=seen(None)))
    assert kinds(p) == ["Submit"]
    submit = p.writes[0]
    assert isinstance(submit, plan_.Submit)
    assert submit.request.body() == {
        "entrypoint": "python job.py",
        "submission_id": "pi-abcde",
        "runtime_env": {"pip": ["numpy"]},
        "entrypoint_num_cpus": 2.0,
        "entrypoint_resources": {"r": 1},
    }
    assert submit.failed_status["jobStatusCheckFailureStartTime"] == at(0)
    assert p.status is not None
    assert "jobStatusCheckFailureStartTime" not in p.status


def test_running_unknown_job_after_the_submitter_finished_fails() -> None:
    p = decide(run_snap(running(), submitter=submitter_job("Complete", 5), dashboard=seen(None)))
    assert p.status is not None
    assert (p.status["jobDeploymentStatus"], p.status["reason"]) == ("Failed", "AppFailed")


def test_running_unknown_job_otherwise_waits() -> None:
    obj = running()
    p = decide(run_snap(obj, submitter=submitter_job(), dashboard=seen(None)))
    assert p.status == obj["status"]


def test_running_dashboard_error_records_the_first_failure_only() -> None:
    p = decide(run_snap(running(), submitter=submitter_job(), dashboard=seen(error="refused")))
    assert p.status is not None
    assert p.status["jobStatusCheckFailureStartTime"] == at(0)
    obj = running(jobStatusCheckFailureStartTime=at(-5))
    p = decide(run_snap(obj, submitter=submitter_job(), dashboard=seen(error="refused")))
    assert p.status is not None
    assert p.status["jobStatusCheckFailureStartTime"] == at(-5)


def test_running_copies_ray_s_answer() -> None:
    obj = running(jobStatusCheckFailureStartTime=at(-5), reason="x")
    p = decide(
        run_snap(obj, submitter=submitter_job(), dashboard=seen(info("RUNNING", message="hi")))
    )
    assert p.status is not None
    assert p.status["jobStatus"] == "RUNNING"
    assert p.status["message"] == "hi"
    assert p.status["reason"] == ""
    assert "jobStatusCheckFailureStartTime" not in p.status
    assert p.status["rayJobInfo"] == {"startTime": at(-50)}


def test_running_terminal_but_submitter_running_stays_running() -> None:
    p = decide(run_snap(running(), submitter=submitter_job(),
                        dashboard=seen(info("SUCCEEDED", end_ms=END_MS))))  # fmt: skip
    assert p.status is not None
    assert p.status["jobDeploymentStatus"] == "Running"


@pytest.mark.parametrize(
    ("ray", "state", "succeeded"),
    [("SUCCEEDED", "Complete", 1), ("STOPPED", "Complete", 0), ("FAILED", "Failed", 0)],
)
def test_running_terminal_with_submitter_finished(ray: str, state: str, succeeded: int) -> None:
    p = decide(
        run_snap(running(), submitter=submitter_job("Complete", 1), dashboard=seen(info(ray)))
    )
    assert p.status is not None
    assert p.status["jobDeploymentStatus"] == state
    assert p.status["succeeded"] == succeeded
    assert p.status["endTime"] == at(0)
    if ray == "FAILED":
        assert p.status["reason"] == "AppFailed"
        assert p.status["failed"] == 1


def test_running_http_mode_terminal_needs_no_submitter() -> None:
    p = decide(run_snap(running({"submissionMode": "HTTPMode"}), dashboard=seen(info("SUCCEEDED"))))
    assert p.status is not None
    assert p.status["jobDeploymentStatus"] == "Complete"


def test_running_polls_young_jobs_often_and_old_ones_less() -> None:
    obj = running({"submissionMode": "HTTPMode"}, startTime=at(-10))
    assert decide(run_snap(obj, dashboard=seen(info("RUNNING")))).requeue_after == 3.0
    obj = running({"submissionMode": "HTTPMode"}, startTime=at(-3600))
    assert decide(run_snap(obj, dashboard=seen(info("RUNNING")))).requeue_after == 10.0
    obj = running(startTime=at(-3600))
    found = run_snap(obj, submitter=submitter_job(), dashboard=seen(info("RUNNING")))
    assert decide(found).requeue_after == 30.0


def poll_at(obj: dict[str, Any], last: float | None, **found: Any) -> datetime.datetime | None:
    last_poll = None if last is None else NOW + datetime.timedelta(seconds=last)
    return plan_.poll_at(run_snap(obj, **found), last_poll=last_poll, now=NOW, options=OPTIONS)


def test_a_poll_is_due_when_never_asked_when_the_submitter_ended_or_the_interval_is_over() -> None:
    young = running(startTime=at(-10))
    assert poll_at(young, None, submitter=submitter_job()) is None, "never asked: now"
    assert poll_at(young, -1, submitter=submitter_job()) == NOW + datetime.timedelta(seconds=2)
    assert poll_at(young, -3, submitter=submitter_job()) is None, "the 3 s are over"
    ended = submitter_job("Complete")
    assert poll_at(young, -1, submitter=ended) is None, "the submitter's end is worth a look"
    old = running(startTime=at(-3600))  # a tenth of its age, at most 30 s with a submitter
    assert poll_at(old, -1, submitter=submitter_job()) == NOW + datetime.timedelta(seconds=29)
    http = running({"submissionMode": "HTTPMode"}, startTime=at(-3600))
    assert poll_at(http, -1) == NOW + datetime.timedelta(seconds=9)


def test_running_without_a_due_poll_keeps_ray_s_status_and_looks_again_when_due() -> None:
    obj = running(jobStatus="PENDING", startTime=at(-10))
    due = NOW + datetime.timedelta(seconds=2)
    p = decide(run_snap(obj, submitter=submitter_job(), next_poll=due))
    assert p.status is not None
    assert p.status == obj["status"], "nothing new: nothing to write"
    assert p.writes == ()
    assert p.requeue_after == pytest.approx(2.0)


# -- retries ------------------------------------------------------------------------------


def test_failed_with_attempts_left_retries_and_without_stays_failed() -> None:
    found = {"submitter": submitter_job("Complete", 1), "dashboard": seen(info("FAILED"))}
    p = decide(run_snap(running({"backoffLimit": 2}, failed=1), **found))
    assert p.status is not None
    assert p.status["jobDeploymentStatus"] == "Retrying"
    assert p.status["failed"] == 2
    p = decide(run_snap(running({"backoffLimit": 2}, failed=2), **found))
    assert p.status is not None
    assert p.status["jobDeploymentStatus"] == "Failed"
    assert p.status["failed"] == 3


@pytest.mark.parametrize(("state", "then"), [("Retrying", ""), ("Suspending", "Suspended")])
def test_tear_down_deletes_then_waits_then_clears(state: str, then: str) -> None:
    obj = running(jobDeploymentStatus=state, jobStatus="FAILED", reason="AppFailed",
                  message="boom", rayJobInfo={"startTime": at(-5)})  # fmt: skip
    p = decide(snap(obj, cluster=cluster(), submitter=submitter_job("Failed")))
    assert kinds(p) == ["Delete:RayCluster", "Delete:RayJobSubmitter"]
    assert p.status is not None
    assert p.status["jobDeploymentStatus"] == state
    gone = cluster()
    gone["metadata"]["deletionTimestamp"] = at(-1)
    p = decide(snap(obj, cluster=gone))
    assert p.writes == ()
    assert p.status is not None
    assert p.status["jobDeploymentStatus"] == state
    p = decide(snap(obj))
    assert p.status is not None
    assert p.status["jobDeploymentStatus"] == then
    for cleared in ("jobId", "rayClusterName", "message", "reason", "rayJobInfo", "dashboardURL"):
        assert cleared not in p.status
    assert p.status["jobStatus"] == ""
    assert p.status["failed"] == 0


def test_tear_down_never_deletes_a_selected_cluster() -> None:
    obj = running(
        {"clusterSelector": {"ray.io/cluster": "pi-xyzwv"}}, jobDeploymentStatus="Retrying"
    )
    p = decide(snap(obj, cluster=cluster()))
    assert p.writes == ()
    assert p.status is not None
    assert p.status["jobDeploymentStatus"] == ""


def test_suspended_resumes_when_suspend_is_cleared() -> None:
    obj = rayjob({"shutdownAfterJobFinishes": True, "suspend": True},
                 jobDeploymentStatus="Suspended", jobStatus="")  # fmt: skip
    assert decide(snap(obj)) == plan_.Plan(state="Suspended")
    obj["spec"]["suspend"] = False
    p = decide(snap(obj))
    assert p.status is not None
    assert p.status["jobDeploymentStatus"] == ""


# -- validation ---------------------------------------------------------------------------


def test_invalid_spec_is_reported_once_and_not_polled() -> None:
    obj = initializing()
    s = snapshot_.Snapshot(obj=obj, job=v1.RayJob.model_validate(obj),
                           invalid=("InvalidRayJobSpec", "spec.backoffLimit: -1 < 0"))  # fmt: skip
    p = decide(s)
    assert p.status is not None
    assert (p.status["jobDeploymentStatus"], p.status["reason"]) == (
        "ValidationFailed",
        "ValidationFailed",
    )
    assert [e.reason for e in p.events] == ["InvalidRayJobSpec"]
    assert p.requeue_after is None


def test_a_finished_job_edited_invalid_keeps_its_status() -> None:
    obj = running(jobDeploymentStatus="Complete", jobStatus="SUCCEEDED", endTime=at(-5))
    s = snapshot_.Snapshot(obj=obj, job=v1.RayJob.model_validate(obj),
                           invalid=("InvalidRayJobSpec", "bad"))  # fmt: skip
    p = decide(s)
    assert p.status is None
    assert p.writes == ()
    assert [e.reason for e in p.events] == ["InvalidRayJobSpec"]


def test_a_fixed_spec_deletes_the_interrupted_attempt_first() -> None:
    obj = running(jobDeploymentStatus="ValidationFailed", reason="ValidationFailed")
    p = decide(snap(obj, cluster=cluster(), submitter=submitter_job()))
    assert kinds(p) == ["Delete:RayCluster", "Delete:RayJobSubmitter"]
    assert p.status is not None
    assert p.status["jobDeploymentStatus"] == "ValidationFailed"
    assert p.events == ()


def test_a_fixed_spec_starts_again() -> None:
    obj = initializing(jobDeploymentStatus="ValidationFailed", reason="ValidationFailed", failed=1)
    p = decide(snap(obj))
    assert p.status is not None
    assert p.status["jobDeploymentStatus"] == ""
    assert p.status["failed"] == 1
    assert "reason" not in p.status


# -- finished: deletion policies ----------------------------------------------------------


def finished(spec: dict[str, Any], state: str = "Complete", job_status: str = "SUCCEEDED",
             ended: float = -100) -> dict[str, Any]:  # fmt: skip
    return running(spec, jobDeploymentStatus=state, jobStatus=job_status, endTime=at(ended))


def test_finished_without_policy_does_nothing() -> None:
    assert decide(snap(finished({}), cluster=cluster())) == plan_.Plan(state="Complete")


def test_shutdown_after_ttl_deletes_the_cluster_only() -> None:
    spec = {"shutdownAfterJobFinishes": True, "ttlSecondsAfterFinished": 60}
    assert kinds(decide(snap(finished(spec), cluster=cluster()))) == ["Delete:RayCluster"]
    p = decide(snap(finished(spec, ended=-30), cluster=cluster()))
    assert p.writes == ()
    assert p.requeue_after == pytest.approx(32)


def test_shutdown_deletes_the_rayjob_with_the_operator_setting() -> None:
    spec = {"shutdownAfterJobFinishes": True}
    p = decide(snap(finished(spec), cluster=cluster()), delete_rayjob_after_finish=True)
    assert kinds(p) == ["DeleteSelf"]


def test_selected_cluster_is_never_cleaned_up() -> None:
    spec = {"shutdownAfterJobFinishes": True, "clusterSelector": {"ray.io/cluster": "pi-xyzwv"}}
    assert decide(snap(finished(spec), cluster=cluster())).writes == ()


@pytest.mark.parametrize(
    ("job_status", "expected"),
    [("SUCCEEDED", ["Update:RayCluster"]), ("FAILED", ["DeleteSelf"]), ("STOPPED", [])],
)
def test_legacy_policy_follows_the_ray_status(job_status: str, expected: list[str]) -> None:
    spec = {"deletionStrategy": {"onSuccess": {"policy": "DeleteWorkers"},
                                 "onFailure": {"policy": "DeleteSelf"}}}  # fmt: skip
    p = decide(snap(finished(spec, job_status=job_status), cluster=cluster()))
    assert kinds(p) == expected
    if expected == ["Update:RayCluster"]:
        update = p.writes[0]
        assert isinstance(update, plan_.Update)
        assert all(g["suspend"] for g in update.obj["spec"]["workerGroupSpecs"])


def test_deletion_rules_most_impactful_due_rule_wins_and_the_next_is_timed() -> None:
    rules = [
        {"policy": "DeleteWorkers", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 0}},
        {"policy": "DeleteCluster", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 50}},
        {"policy": "DeleteSelf", "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": 200}},
    ]
    p = decide(snap(finished({"deletionStrategy": {"deletionRules": rules}}), cluster=cluster()))
    assert kinds(p) == ["Delete:RayCluster"]
    assert p.requeue_after == pytest.approx(102)


def test_deletion_rules_skip_what_is_done_already() -> None:
    rules = [{"policy": "DeleteCluster", "condition": {"jobDeploymentStatus": "Failed"}}]
    obj = finished({"deletionStrategy": {"deletionRules": rules}}, state="Failed", job_status="")
    assert decide(snap(obj)).writes == ()
    assert kinds(decide(snap(obj, cluster=cluster()))) == ["Delete:RayCluster"]


def test_deletion_strategy_needs_the_gate() -> None:
    rules = [{"policy": "DeleteCluster", "condition": {"jobStatus": "SUCCEEDED"}}]
    obj = finished({"deletionStrategy": {"deletionRules": rules}})
    assert decide(snap(obj, cluster=cluster()), deletion_policy=False).writes == ()


# -- deletion of the RayJob ---------------------------------------------------------------


@pytest.mark.parametrize(("job_status", "stop"), [("RUNNING", "pi-abcde"), ("", "pi-abcde"),
                                                  ("SUCCEEDED", None)])  # fmt: skip
def test_finalize_stops_a_job_that_may_still_run(job_status: str, stop: str | None) -> None:
    obj = running(jobStatus=job_status)
    assert plan_.finalize(snap(obj)).stop_job_id == stop
