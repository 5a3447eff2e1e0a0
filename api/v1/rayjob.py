"""``RayJob``: one Ray job, run on a RayCluster made for it or on an existing one.

Field names, optionality, API defaults and the CRD's CEL rules follow KubeRay v1.7.0
(``ray-operator/apis/ray/v1/rayjob_types.go``), so RayJob YAML written for KubeRay
validates here and round-trips through
``RayJob.model_validate(obj).model_dump(by_alias=True, exclude_unset=True)`` unchanged.

Spec (what the reconciler does with each field is in :mod:`controllers.rayjob`):

- ``entrypoint``: the command the job runs (``python my_job.py``); ``runtimeEnvYAML``
  (a YAML mapping in a string), ``metadata``, ``jobId`` (the Ray submission id; one is
  made up when unset), ``entrypointNumCpus`` / ``entrypointNumGpus`` /
  ``entrypointResources`` (a JSON object in a string) are passed to Ray with it.
- ``submissionMode`` (:class:`SubmissionMode`, API default ``K8sJobMode``): who submits
  the job - a Kubernetes Job the operator creates (``K8sJobMode``), the operator itself
  over HTTP (``HTTPMode``), a container beside the head (``SidecarMode``), or the user
  (``InteractiveMode``).
- ``rayClusterSpec``: the RayCluster to create for the job, or ``clusterSelector``
  (``ray.io/cluster: <name>``) to run it on an existing one.
- ``submitterPodTemplate``, ``submitterConfig.backoffLimit``: the submitter Job's pod
  and its retries.
- ``backoffLimit`` (API default 0): how many times a failed job is retried, each time on
  a new cluster with a new submission id; ``activeDeadlineSeconds``,
  ``preRunningDeadlineSeconds`` (API minimum 1): per-attempt deadlines.
- ``shutdownAfterJobFinishes`` with ``ttlSecondsAfterFinished`` (API default 0), or
  ``deletionStrategy`` (:class:`DeletionStrategy`: the legacy ``onSuccess`` /
  ``onFailure`` pair, or ``deletionRules``): what is deleted once the job finished.
- ``suspend``: delete the cluster and stop while ``true`` (how Kueue admits RayJobs);
  ``managedBy`` (immutable; ``ray.io/kuberay-operator`` or
  ``kueue.x-k8s.io/multikueue``): another controller's object is left alone.

Status: ``jobStatus`` (:class:`JobStatus`, what Ray reports), ``jobDeploymentStatus``
(:class:`JobDeploymentStatus`, the operator's state), ``reason``
(:class:`JobFailedReason`) and ``message``, ``jobId``, ``rayClusterName``,
``dashboardURL``, ``startTime`` / ``endTime`` of the current attempt, ``rayJobInfo``
(Ray's own start and end), the ``succeeded`` / ``failed`` attempt counters, a copy of
the RayCluster's status, ``jobStatusCheckFailureStartTime`` and ``observedGeneration``.

Versions: ``v1`` is stored; ``v1alpha1`` is served too (:attr:`RayJob.SERVED_VERSIONS`,
deprecated), as KubeRay v1.7.0 serves it, but in **v1's shape**: the same schema, no
conversion, so a ``ray.io/v1alpha1`` RayJob has every v1 field and reads back the same
through either version (KubeRay's own ``v1alpha1`` schema is older: it requires
``entrypoint`` and lacks v1's newer fields).

>>> job = RayJob.model_validate({
...     "metadata": {"name": "pi"},
...     "spec": {"entrypoint": "python pi.py", "runtimeEnvYAML": "pip: [numpy]"},
... })
>>> job.spec.submission_mode, job.spec.backoff_limit, job.spec.ttl_seconds_after_finished
('K8sJobMode', 0, 0)
>>> job.model_dump(by_alias=True, exclude_unset=True)["spec"]
{'entrypoint': 'python pi.py', 'runtimeEnvYAML': 'pip: [numpy]'}
"""

from __future__ import annotations

import enum
from typing import Annotated, ClassVar, Literal

import pydantic

from api.v1 import groupversion, meta, raycluster
from runtime.client import resources

__all__ = [
    "MANAGED_BY_KUBERAY",
    "MANAGED_BY_MULTIKUEUE",
    "DeletionCondition",
    "DeletionPolicy",
    "DeletionPolicyType",
    "DeletionRule",
    "DeletionStrategy",
    "JobDeploymentStatus",
    "JobFailedReason",
    "JobStatus",
    "RayJob",
    "RayJobInfo",
    "RayJobSpec",
    "RayJobStatus",
    "SubmissionMode",
    "SubmitterConfig",
]

MANAGED_BY_KUBERAY = "ray.io/kuberay-operator"
"""``spec.managedBy`` of a RayJob this operator reconciles (also when unset)."""
MANAGED_BY_MULTIKUEUE = "kueue.x-k8s.io/multikueue"
"""``spec.managedBy`` of a RayJob MultiKueue dispatches to another cluster: left alone."""


class SubmissionMode(enum.StrEnum):
    """Values of ``spec.submissionMode``: who submits the job to Ray."""

    K8S_JOB = "K8sJobMode"
    """A Kubernetes Job (the submitter) runs ``ray job submit`` against the head."""
    HTTP = "HTTPMode"
    """The operator submits the job to the dashboard's Jobs API itself."""
    INTERACTIVE = "InteractiveMode"
    """The user submits; the operator waits for ``spec.jobId``."""
    SIDECAR = "SidecarMode"
    """A container beside the head submits it."""


class JobStatus(enum.StrEnum):
    """Ray's status of a job (``status.jobStatus``); empty before Ray knows the job."""

    NEW = ""
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"

    @property
    def terminal(self) -> bool:
        """Ray will not change it any more."""
        return self in (JobStatus.STOPPED, JobStatus.SUCCEEDED, JobStatus.FAILED)


class JobDeploymentStatus(enum.StrEnum):
    """The operator's state of a RayJob (``status.jobDeploymentStatus``)."""

    NEW = ""
    INITIALIZING = "Initializing"
    RUNNING = "Running"
    COMPLETE = "Complete"
    FAILED = "Failed"
    VALIDATION_FAILED = "ValidationFailed"
    SUSPENDING = "Suspending"
    SUSPENDED = "Suspended"
    RETRYING = "Retrying"
    WAITING = "Waiting"

    @property
    def terminal(self) -> bool:
        """``Complete`` or ``Failed`` (``ValidationFailed`` and ``Suspended`` are not)."""
        return self in (JobDeploymentStatus.COMPLETE, JobDeploymentStatus.FAILED)


class JobFailedReason(enum.StrEnum):
    """Values of ``status.reason``."""

    SUBMISSION_FAILED = "SubmissionFailed"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    PRE_RUNNING_DEADLINE_EXCEEDED = "PreRunningDeadlineExceeded"
    APP_FAILED = "AppFailed"
    TRANSITION_GRACE_PERIOD_EXCEEDED = "JobDeploymentStatusTransitionGracePeriodExceeded"
    STATUS_CHECK_TIMEOUT_EXCEEDED = "JobStatusCheckTimeoutExceeded"
    VALIDATION_FAILED = "ValidationFailed"


class DeletionPolicyType(enum.StrEnum):
    """What a deletion policy or rule deletes."""

    DELETE_CLUSTER = "DeleteCluster"
    DELETE_WORKERS = "DeleteWorkers"
    DELETE_SELF = "DeleteSelf"
    DELETE_NONE = "DeleteNone"


_Policy = Literal["DeleteCluster", "DeleteWorkers", "DeleteSelf", "DeleteNone"]


class DeletionPolicy(meta.Model):
    """A legacy ``onSuccess`` / ``onFailure`` policy."""

    policy: _Policy | None = None
    """A :class:`DeletionPolicyType`."""


class DeletionCondition(meta.Model):
    """When a deletion rule applies: one of ``jobStatus`` or ``jobDeploymentStatus``."""

    job_status: Literal["SUCCEEDED", "FAILED"] | None = None
    """Ray's final status of the job."""
    job_deployment_status: (
        Annotated[Literal["Failed"], meta.Schema({"enum": ["Failed"]})] | None
    ) = None
    """The operator's final state of the job (only ``Failed``)."""
    ttl_seconds: Annotated[meta.Int32, pydantic.Field(ge=0)] = 0
    """Seconds after ``status.endTime`` the rule is due."""


_CONDITION_RULES = meta.Schema(
    {
        "x-kubernetes-validations": [
            {
                "rule": "!(has(self.jobStatus) && has(self.jobDeploymentStatus))",
                "message": "JobStatus and JobDeploymentStatus cannot be used together "
                "within the same deletion condition.",
            },
            {
                "rule": "has(self.jobStatus) || has(self.jobDeploymentStatus)",
                "message": "the deletion condition requires either the JobStatus or the "
                "JobDeploymentStatus field.",
            },
        ]
    }
)


class DeletionRule(meta.Model):
    """Delete ``policy``'s objects ``condition.ttlSeconds`` after the job ended as the
    condition says."""

    policy: _Policy
    """A :class:`DeletionPolicyType`."""
    condition: Annotated[DeletionCondition, _CONDITION_RULES]
    """When the rule applies."""


_STRATEGY_RULES = meta.Schema(
    {
        "x-kubernetes-validations": [
            {
                "rule": "!((has(self.onSuccess) || has(self.onFailure)) && "
                "has(self.deletionRules))",
                "message": "legacy policies (onSuccess/onFailure) and deletionRules "
                "cannot be used together within the same deletionStrategy",
            },
            {
                "rule": "((has(self.onSuccess) && has(self.onFailure)) || has(self.deletionRules))",
                "message": "deletionStrategy requires either BOTH onSuccess and onFailure, "
                "OR the deletionRules field (cannot be empty)",
            },
        ]
    }
)


class DeletionStrategy(meta.Model):
    """What is deleted after the job finished (gate ``RayJobDeletionPolicy``)."""

    on_success: DeletionPolicy | None = None
    """Legacy: the policy when Ray reports ``SUCCEEDED``."""
    on_failure: DeletionPolicy | None = None
    """Legacy: the policy when Ray reports ``FAILED``."""
    deletion_rules: (
        Annotated[
            list[DeletionRule],
            pydantic.Field(min_length=1),
            meta.Schema({"x-kubernetes-list-type": "atomic"}),
        ]
        | None
    ) = None
    """Rules, each with its own condition and delay; when several are due at once, the one
    that deletes most runs first."""


class SubmitterConfig(meta.Model):
    """The submitter Job's settings."""

    backoff_limit: meta.Int32 | None = None
    """The submitter Job's ``backoffLimit`` (2 when unset)."""


_MANAGED_BY = meta.Schema(
    {
        "x-kubernetes-validations": [
            {"rule": "self == oldSelf", "message": "the managedBy field is immutable"},
            {
                "rule": f"self in ['{MANAGED_BY_KUBERAY}', '{MANAGED_BY_MULTIKUEUE}']",
                "message": "the managedBy field value must be either "
                f"'{MANAGED_BY_KUBERAY}' or '{MANAGED_BY_MULTIKUEUE}'",
            },
        ]
    }
)


class RayJobSpec(meta.Model):
    """The desired state of a RayJob."""

    active_deadline_seconds: meta.Int32 | None = None
    """Seconds an attempt may take from its start before it fails (``DeadlineExceeded``)."""
    backoff_limit: meta.Int32 | None = 0
    """Retries of a failed job (each on a new cluster)."""
    ray_cluster_spec: raycluster.RayClusterSpec | None = None
    """The RayCluster created for the job (unless ``clusterSelector``)."""
    submitter_pod_template: meta.RawObject | None = None
    """The submitter Job's pod template (``K8sJobMode``)."""
    metadata: dict[str, str] | None = None
    """Metadata of the Ray job."""
    cluster_selector: dict[str, str] | None = None
    """``ray.io/cluster: <name>``: run on that existing RayCluster."""
    submitter_config: SubmitterConfig | None = None
    """The submitter Job's settings."""
    managed_by: Annotated[str, _MANAGED_BY] | None = None
    """The controller that reconciles this RayJob."""
    deletion_strategy: Annotated[DeletionStrategy, _STRATEGY_RULES] | None = None
    """What is deleted once the job finished."""
    entrypoint: str | None = None
    """The job's command."""
    runtime_env_yaml: str | None = None
    """The job's Ray runtime environment, a YAML mapping in a string."""
    job_id: str | None = None
    """The Ray submission id (made up when unset)."""
    submission_mode: str | None = SubmissionMode.K8S_JOB.value
    """A :class:`SubmissionMode`."""
    entrypoint_resources: str | None = None
    """Custom resources of the entrypoint, a JSON object in a string."""
    entrypoint_num_cpus: float | None = None
    """CPUs reserved for the entrypoint."""
    entrypoint_num_gpus: float | None = None
    """GPUs reserved for the entrypoint."""
    ttl_seconds_after_finished: meta.Int32 | None = 0
    """Seconds after the job ended before ``shutdownAfterJobFinishes`` acts."""
    shutdown_after_job_finishes: bool | None = None
    """Delete the RayCluster once the job ended."""
    suspend: bool | None = None
    """Delete the cluster and wait while ``true``."""
    pre_running_deadline_seconds: Annotated[meta.Int32, pydantic.Field(ge=1)] | None = None
    """Seconds an attempt may take to reach ``Running`` (``PreRunningDeadlineExceeded``)."""


class RayJobInfo(meta.Model):
    """Ray's own times of the job."""

    start_time: meta.Time | None = None
    """When Ray started the job."""
    end_time: meta.Time | None = None
    """When the job ended, as Ray reports it."""


class RayJobStatus(meta.Model):
    """The observed state of a RayJob."""

    VOLATILE_FIELDS: ClassVar[frozenset[str]] = frozenset({"lastUpdateTime"})
    """Fields (at any depth) the status writer ignores when comparing statuses (the
    embedded RayCluster status's)."""

    ray_job_info: RayJobInfo | None = None
    """Ray's start and end of the job."""
    job_id: str | None = None
    """The Ray submission id of the current attempt."""
    ray_cluster_name: str | None = None
    """The RayCluster of the current attempt."""
    dashboard_url: str | None = None
    """``host:port`` of the cluster's dashboard (no scheme)."""
    job_status: str | None = None
    """A :class:`JobStatus`."""
    job_deployment_status: str | None = None
    """A :class:`JobDeploymentStatus`."""
    reason: str | None = None
    """A :class:`JobFailedReason` once the job failed."""
    message: str | None = None
    """Ray's or the operator's message."""
    start_time: meta.Time | None = None
    """When the current attempt started."""
    end_time: meta.Time | None = None
    """When the job reached ``Complete`` or ``Failed``."""
    succeeded: meta.Int32 | None = None
    """Attempts that succeeded."""
    failed: meta.Int32 | None = None
    """Attempts that failed."""
    ray_cluster_status: raycluster.RayClusterStatus | None = None
    """A copy of the RayCluster's status."""
    job_status_check_failure_start_time: meta.Time | None = None
    """When asking the dashboard about the job began to fail."""
    observed_generation: meta.Int64 | None = None
    """The ``metadata.generation`` this status was computed for."""


class RayJob(meta.Model):
    """One Ray job and the RayCluster it runs on."""

    RESOURCE: ClassVar[resources.Resource] = groupversion.RAYJOBS
    CATEGORIES: ClassVar[tuple[str, ...]] = ("all",)
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ()
    SERVED_VERSIONS: ClassVar[tuple[str, ...]] = ("v1alpha1",)
    """Versions served besides ``v1``, deprecated, with ``v1``'s schema and no conversion
    (KubeRay v1.7.0 serves ``v1alpha1``; see the module docstring)."""
    LEGACY_VERSIONS: ClassVar[tuple[str, ...]] = ()
    PRINTER_COLUMNS: ClassVar[tuple[meta.PrinterColumn, ...]] = (
        meta.PrinterColumn("job status", "string", ".status.jobStatus", priority=0),
        meta.PrinterColumn("deployment status", "string", ".status.jobDeploymentStatus"),
        meta.PrinterColumn("ray cluster name", "string", ".status.rayClusterName"),
        meta.PrinterColumn("start time", "string", ".status.startTime"),
        meta.PrinterColumn("end time", "string", ".status.endTime"),
        meta.PrinterColumn.AGE,
    )
    """KubeRay v1.7.0's columns."""

    api_version: Literal["ray.io/v1"] = "ray.io/v1"
    kind: Literal["RayJob"] = "RayJob"
    metadata: meta.RawObject = pydantic.Field(default_factory=dict)
    spec: RayJobSpec = pydantic.Field(default_factory=RayJobSpec)
    status: RayJobStatus = pydantic.Field(default_factory=RayJobStatus)
