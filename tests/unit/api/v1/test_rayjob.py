"""api.v1.rayjob and api.v1.raycronjob: KubeRay v1.7.0's RayJob and RayCronJob models."""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import pydantic
import pytest
import yaml

import api.v1 as v1
from api.v1 import rayjob
from runtime import equality

TESTDATA = pathlib.Path(__file__).parent / "testdata"


def load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((TESTDATA / name).read_text())
    return doc


def test_rayjob_api_defaults() -> None:
    spec = v1.RayJob.model_validate({"metadata": {"name": "j"}, "spec": {}}).spec
    assert spec.submission_mode == rayjob.SubmissionMode.K8S_JOB == "K8sJobMode"
    assert spec.backoff_limit == 0
    assert spec.ttl_seconds_after_finished == 0
    unset = (
        spec.shutdown_after_job_finishes, spec.suspend, spec.managed_by,
        spec.deletion_strategy, spec.active_deadline_seconds, spec.pre_running_deadline_seconds,
        spec.ray_cluster_spec, spec.cluster_selector, spec.entrypoint_num_cpus,
    )  # fmt: skip
    assert unset == (None,) * len(unset)
    assert spec.model_dump(by_alias=True, exclude_unset=True) == {}
    condition = rayjob.DeletionCondition.model_validate({"jobStatus": "FAILED"})
    assert condition.ttl_seconds == 0
    status = v1.RayJobStatus()
    assert (status.succeeded, status.failed, status.job_deployment_status) == (None, None, None)


def test_raycronjob_needs_its_schedule_and_template() -> None:
    with pytest.raises(pydantic.ValidationError, match="schedule"):
        v1.RayCronJob.model_validate({"spec": {"jobTemplate": {}}})
    with pytest.raises(pydantic.ValidationError, match="jobTemplate"):
        v1.RayCronJob.model_validate({"spec": {"schedule": "@hourly"}})
    with pytest.raises(pydantic.ValidationError, match="timeZone"):
        v1.RayCronJob.model_validate(
            {"spec": {"schedule": "@hourly", "jobTemplate": {}, "timeZone": ""}}
        )
    cron = v1.RayCronJob.model_validate({"spec": {"schedule": "@hourly", "jobTemplate": {}}})
    assert (cron.spec.time_zone, cron.spec.suspend, cron.status.last_schedule_time) == (
        None, None, None,
    )  # fmt: skip
    assert cron.spec.job_template.backoff_limit == 0


def test_kuberay_objects_read_typed() -> None:
    job = v1.RayJob.model_validate(load("kuberay_rayjob.yaml"))
    assert job.spec.entrypoint_num_gpus == 0.5
    assert job.spec.submitter_config
    assert job.spec.submitter_config.backoff_limit == 1
    assert job.spec.ray_cluster_spec
    assert job.spec.ray_cluster_spec.ray_version == "2.60.0"
    assert job.status.job_status == rayjob.JobStatus.SUCCEEDED
    assert rayjob.JobDeploymentStatus(job.status.job_deployment_status).terminal
    assert job.status.dashboard_url
    assert job.status.dashboard_url.endswith(":8265")
    assert job.status.ray_job_info
    assert job.status.ray_job_info.end_time
    assert job.status.ray_cluster_status
    assert job.status.ray_cluster_status.state == "ready"

    rules = v1.RayJob.model_validate(load("kuberay_rayjob_deletion_rules.yaml"))
    strategy = rules.spec.deletion_strategy
    assert strategy
    assert strategy.deletion_rules
    assert not strategy.on_success
    assert [(r.policy, r.condition.job_status, r.condition.ttl_seconds)
            for r in strategy.deletion_rules][:2] == [
        ("DeleteWorkers", "FAILED", 60), ("DeleteCluster", "FAILED", 300),
    ]  # fmt: skip
    assert strategy.deletion_rules[-1].condition.job_deployment_status == "Failed"

    cron = v1.RayCronJob.model_validate(load("kuberay_raycronjob_timezone.yaml"))
    assert (cron.spec.schedule, cron.spec.time_zone, cron.spec.suspend) == (
        "30 22 * * 1-5", "Europe/Paris", True,
    )  # fmt: skip
    assert cron.spec.job_template.cluster_selector == {"ray.io/cluster": "shared-cluster"}


def test_wire_names_are_kuberays() -> None:
    spec = v1.RayJobSpec.model_fields
    assert {f.alias for f in spec.values()} >= {
        "runtimeEnvYAML", "jobId", "rayClusterSpec", "submitterPodTemplate",
        "entrypointNumCpus", "entrypointNumGpus", "entrypointResources",
        "ttlSecondsAfterFinished", "preRunningDeadlineSeconds", "managedBy",
    }  # fmt: skip
    status = {f.alias for f in v1.RayJobStatus.model_fields.values()}
    assert {"dashboardURL", "rayJobInfo", "jobStatusCheckFailureStartTime"} <= status
    assert {f.alias for f in v1.RayCronJobSpec.model_fields.values()} == {
        "jobTemplate", "schedule", "timeZone", "suspend",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("model", "value"),
    [
        (rayjob.DeletionRule, {"policy": "DeleteEverything", "condition": {"jobStatus": "FAILED"}}),
        (rayjob.DeletionCondition, {"jobStatus": "RUNNING"}),
        (rayjob.DeletionCondition, {"jobDeploymentStatus": "Complete"}),
        (rayjob.DeletionCondition, {"jobStatus": "FAILED", "ttlSeconds": -1}),
        (rayjob.DeletionPolicy, {"policy": "Delete"}),
        (rayjob.DeletionStrategy, {"deletionRules": []}),
        (v1.RayJobSpec, {"preRunningDeadlineSeconds": 0}),
        (v1.RayJobSpec, {"deletionStrategy": {"deletionRules": [{"policy": "DeleteSelf"}]}}),
    ],
)
def test_out_of_range_values_are_refused(model: type[pydantic.BaseModel], value: Any) -> None:
    with pytest.raises(pydantic.ValidationError):
        model.model_validate(value)


def test_job_status_helpers() -> None:
    assert [s.value for s in rayjob.JobStatus if s.terminal] == ["STOPPED", "SUCCEEDED", "FAILED"]
    assert rayjob.JobStatus("") is rayjob.JobStatus.NEW
    assert not rayjob.JobStatus.NEW.terminal
    assert [s.value for s in rayjob.JobDeploymentStatus if s.terminal] == ["Complete", "Failed"]
    not_terminal = ["", "Initializing", "Running", "ValidationFailed", "Suspending",
                    "Suspended", "Retrying", "Waiting"]  # fmt: skip
    assert [s.value for s in rayjob.JobDeploymentStatus if not s.terminal] == not_terminal


def test_enums_hold_kuberays_values() -> None:
    assert [m.value for m in rayjob.SubmissionMode] == [
        "K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode",
    ]  # fmt: skip
    assert [m.value for m in rayjob.JobFailedReason] == [
        "SubmissionFailed", "DeadlineExceeded", "PreRunningDeadlineExceeded", "AppFailed",
        "JobDeploymentStatusTransitionGracePeriodExceeded", "JobStatusCheckTimeoutExceeded",
        "ValidationFailed",
    ]  # fmt: skip
    assert [m.value for m in rayjob.DeletionPolicyType] == [
        "DeleteCluster", "DeleteWorkers", "DeleteSelf", "DeleteNone",
    ]  # fmt: skip
    assert (rayjob.MANAGED_BY_KUBERAY, rayjob.MANAGED_BY_MULTIKUEUE) == (
        "ray.io/kuberay-operator", "kueue.x-k8s.io/multikueue",
    )  # fmt: skip


def test_status_writer_ignores_the_cluster_status_timestamp() -> None:
    doc = load("kuberay_rayjob.yaml")
    old = v1.RayJobStatus.model_validate(doc["status"])
    new = old.model_copy(deep=True)
    assert new.ray_cluster_status
    new.ray_cluster_status.last_update_time = "2026-03-02T00:00:00Z"
    volatile = v1.RayJobStatus.VOLATILE_FIELDS
    assert "lastUpdateTime" in {
        f.alias for f in v1.RayClusterStatus.model_fields.values()
    }  # where it is
    assert equality.equal(old.to_api(), new.to_api(), volatile=volatile)
    new.failed = 1
    assert not equality.equal(old.to_api(), new.to_api(), volatile=volatile)


def test_unknown_fields_survive() -> None:
    doc = load("kuberay_raycronjob.yaml")
    doc["spec"]["concurrencyPolicy"] = "Forbid"
    doc["spec"]["jobTemplate"]["fieldFromTheFuture"] = {"a": 1}
    cron = v1.RayCronJob.model_validate(copy.deepcopy(doc))
    assert cron.model_dump(by_alias=True, exclude_unset=True) == doc
