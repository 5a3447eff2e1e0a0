"""What makes a RayJob (or a RayCronJob) impossible, in plain words naming field and value.

:func:`validate` runs KubeRay v1.7.0's three checks in its order and stops at the first
that fails, whose name is the Warning's reason (:class:`Invalid`); unlike KubeRay, which
stops at the first problem, it reports **every** problem of that check:

1. ``InvalidRayJobMetadata`` (``ValidateRayJobMetadata``): ``metadata.name`` at most
   :data:`~controllers.rayjob.names.MAX_NAME_LENGTH` (47) characters and a DNS-1035 label;
2. ``InvalidRayJobSpec`` (``ValidateRayJobSpec``):

   - ``suspend`` needs ``shutdownAfterJobFinishes``; ``ttlSecondsAfterFinished`` >= 0,
     and > 0 only with ``shutdownAfterJobFinishes``;
   - ``deletionStrategy`` needs the ``RayJobDeletionPolicy`` gate (``deletion_policy_gate``,
     on by default as in v1.7.0), and is either the legacy pair or ``deletionRules``, not
     both and not neither; ``deletionRules`` exclude ``shutdownAfterJobFinishes``. Legacy:
     both ``onSuccess`` and ``onFailure``, each with a ``policy``; no ``DeleteCluster`` /
     ``DeleteWorkers`` with ``clusterSelector``; no ``DeleteWorkers`` with
     ``enableInTreeAutoscaling``; no ``DeleteNone`` with ``shutdownAfterJobFinishes``.
     Rules: each condition exactly one of ``jobStatus`` / ``jobDeploymentStatus``,
     ``ttlSeconds`` >= 0; the same ``clusterSelector`` and autoscaling exclusions; no two
     rules with the same condition value and policy; per condition value the TTLs of
     ``DeleteWorkers`` <= ``DeleteCluster`` <= ``DeleteSelf``;
   - ``clusterSelector``: not with ``suspend``, its ``ray.io/cluster`` not empty, not in
     ``SidecarMode``, no ``backoffLimit`` above 0; else ``rayClusterSpec`` is required;
   - ``backoffLimit`` >= 0, and not above 0 in ``InteractiveMode``;
   - ``SidecarMode``: no ``submitterPodTemplate``, no ``submitterConfig``, the head pod's
     ``restartPolicy`` unset or ``Never``;
   - ``rayClusterSpec``: no ``authOptions.enableK8sTokenAuth`` (KubeRay supports it only
     for a standalone RayCluster), and the RayCluster rules
     (:func:`controllers.raycluster.validation.problems`, with the RayJob's annotations);
   - ``runtimeEnvYAML`` a YAML mapping (:func:`controllers.rayjob.submitter.runtime_env`);
   - ``activeDeadlineSeconds`` and ``preRunningDeadlineSeconds`` above 0 when set;

3. ``InvalidRayJobStatus`` (``ValidateRayJobStatus``): ``jobDeploymentStatus: Waiting``
   only in ``InteractiveMode``.

**Beyond KubeRay** (``InvalidRayJobSpec`` too), values that v1.7.0 stores and then fails
on for ever, retrying every 3 s or failing each attempt: ``submissionMode`` one of the
four modes; ``entrypointResources`` a JSON object of numbers (Ray's CLI and Jobs API
refuse anything else); ``metadata`` only with a ``rayClusterSpec.rayVersion`` of 2.6.0 or
later (or none) in the modes that run ``ray job submit`` (``K8sJobMode``,
``SidecarMode``: :func:`controllers.rayjob.submitter.metadata_problem`); a
``submitterPodTemplate`` with at least one container (``K8sJobMode``); and
``runtimeEnvYAML`` values that JSON can carry.

**The validating webhook** (:func:`admission_problems`) checks the name only, as
KubeRay's does, and as this operator's RayService webhook does: a webhook refusing
spec problems would also refuse the updates that carry a RayJob stored invalid out of
the system (the operator's finalizer removal is an update of the object), and the
deletion rules depend on the operator's gate, which the webhook's caller may not share.
The spec problems are reported where KubeRay reports them: ``ValidationFailed`` in the
status and a Warning.

**RayCronJob** (:func:`cron_problems`, KubeRay's ``ValidateRayCronJobSpec``, every
problem): the name at most 36 characters; no ``TZ`` in ``schedule`` (``spec.timeZone``
is the zone), which must parse (:func:`controllers.rayjob.cron.parse`); ``timeZone``,
when set, not empty and a zone this operator can load; ``jobTemplate`` passing the spec
rules above.

>>> job = v1.RayJob.model_validate({"metadata": {"name": "pi"}, "spec": {
...     "entrypoint": "python pi.py", "suspend": True, "backoffLimit": -1,
...     "rayClusterSpec": {"headGroupSpec": {"template": {"spec": {"containers": [{}]}}}}}})
>>> invalid = validate(job)
>>> invalid.event_reason
'InvalidRayJobSpec'
>>> for problem in problems(job):
...     print(problem)
spec.suspend is true but spec.shutdownAfterJobFinishes is not: suspending deletes the cluster
spec.backoffLimit must be 0 or more, got -1
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any, Literal

from api import v1
from api.v1 import raycronjob
from api.v1 import rayjob as api
from controllers.raycluster import interface as raycluster
from controllers.rayjob import cron, names, submitter

__all__ = [
    "EventReason",
    "Invalid",
    "admission_problems",
    "cron_problems",
    "metadata_problems",
    "problems",
    "spec_problems",
    "status_problems",
    "validate",
]

EventReason = Literal["InvalidRayJobMetadata", "InvalidRayJobSpec", "InvalidRayJobStatus"]

_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1035_MAX = 63
_MODES = tuple(mode.value for mode in api.SubmissionMode)
_PLACEHOLDER = "rayjob"
_ORDER = (
    api.DeletionPolicyType.DELETE_WORKERS,
    api.DeletionPolicyType.DELETE_CLUSTER,
    api.DeletionPolicyType.DELETE_SELF,
)
_CLUSTER_POLICIES = (api.DeletionPolicyType.DELETE_CLUSTER, api.DeletionPolicyType.DELETE_WORKERS)


@dataclasses.dataclass(frozen=True)
class Invalid:
    """The first of KubeRay's checks a RayJob fails: the Warning's reason and every problem."""

    event_reason: EventReason
    message: str
    """The problems, joined with ``"; "``."""


def _name_problems(name: Any, limit: int, kind: str, why: str) -> list[str]:
    if not isinstance(name, str):
        return [f"metadata.name must be a string, got {name!r}"]
    found = []
    if len(name) > limit:
        found.append(
            f"metadata.name {name!r} has {len(name)} characters; a {kind} name must have at "
            f"most {limit} ({why})"
        )
    if len(name) > _DNS1035_MAX or not _DNS1035.fullmatch(name):
        found.append(
            f"metadata.name {name!r} is not a valid DNS-1035 label (lower-case letters, digits "
            "and '-', starting with a letter and ending with a letter or digit)"
        )
    return found


_JOB_NAME_WHY = (
    f"its RayClusters are named <name>-<5 characters>, at most {names.MAX_NAME_LENGTH + 6}"
)


def metadata_problems(job: v1.RayJob) -> list[str]:
    """KubeRay's ``ValidateRayJobMetadata``: the name."""
    return _name_problems(
        job.metadata.get("name", ""), names.MAX_NAME_LENGTH, "RayJob", _JOB_NAME_WHY
    )


def status_problems(job: v1.RayJob) -> list[str]:
    """KubeRay's ``ValidateRayJobStatus``: ``Waiting`` only in ``InteractiveMode``."""
    if (
        job.status.job_deployment_status == api.JobDeploymentStatus.WAITING
        and job.spec.submission_mode != api.SubmissionMode.INTERACTIVE
    ):
        return [
            "status.jobDeploymentStatus is 'Waiting', which only an InteractiveMode RayJob "
            f"can be in; spec.submissionMode is {job.spec.submission_mode!r}"
        ]
    return []


def _autoscaling(spec: v1.RayClusterSpec | None) -> bool:
    return spec is not None and bool(spec.enable_in_tree_autoscaling)


def _legacy_problems(job: v1.RayJob, strategy: api.DeletionStrategy) -> list[str]:
    spec = job.spec
    where = "spec.deletionStrategy"
    if strategy.on_success is None or strategy.on_failure is None:
        return [f"{where} needs both onSuccess and onFailure (or deletionRules instead)"]
    found = []
    policies = {"onSuccess": strategy.on_success.policy, "onFailure": strategy.on_failure.policy}
    for key, policy in policies.items():
        if policy is None:
            found.append(f"{where}.{key}.policy is required")
        elif spec.cluster_selector and policy in _CLUSTER_POLICIES:
            found.append(
                f"{where}.{key}.policy {policy!r} cannot be used with spec.clusterSelector "
                "(the RayJob does not own that cluster)"
            )
    set_policies = [p for p in policies.values() if p is not None]
    if api.DeletionPolicyType.DELETE_WORKERS in set_policies and _autoscaling(
        spec.ray_cluster_spec
    ):
        found.append(
            f"{where}: policy 'DeleteWorkers' cannot be used with "
            "rayClusterSpec.enableInTreeAutoscaling (the autoscaler would bring them back)"
        )
    if spec.shutdown_after_job_finishes and api.DeletionPolicyType.DELETE_NONE in set_policies:
        found.append(
            f"{where}: policy 'DeleteNone' contradicts spec.shutdownAfterJobFinishes: true"
        )
    return found


def _rules_problems(job: v1.RayJob, rules: list[api.DeletionRule]) -> list[str]:
    spec = job.spec
    found: list[str] = []
    ttls: dict[tuple[str, str], dict[str, int]] = {}
    for index, rule in enumerate(rules):
        where = f"spec.deletionStrategy.deletionRules[{index}]"
        condition = rule.condition
        if condition.job_status is not None and condition.job_deployment_status is not None:
            found.append(f"{where}.condition sets both jobStatus and jobDeploymentStatus")
            continue
        if condition.job_status is None and condition.job_deployment_status is None:
            found.append(f"{where}.condition needs one of jobStatus or jobDeploymentStatus")
            continue
        if condition.ttl_seconds < 0:
            found.append(f"{where}.condition.ttlSeconds must be 0 or more")
            continue
        if spec.cluster_selector and rule.policy in _CLUSTER_POLICIES:
            found.append(
                f"{where}.policy {rule.policy!r} cannot be used with spec.clusterSelector "
                "(the RayJob does not own that cluster)"
            )
            continue
        if rule.policy == api.DeletionPolicyType.DELETE_WORKERS.value and _autoscaling(
            spec.ray_cluster_spec
        ):
            found.append(
                f"{where}.policy 'DeleteWorkers' cannot be used with "
                "rayClusterSpec.enableInTreeAutoscaling (the autoscaler would bring them back)"
            )
            continue
        key: tuple[str, str]
        if condition.job_status is not None:
            key = ("jobStatus", condition.job_status)
        else:
            key = ("jobDeploymentStatus", str(condition.job_deployment_status))
        group = ttls.setdefault(key, {})
        if rule.policy in group:
            found.append(
                f"{where} repeats the rule for policy {rule.policy!r} and {key[0]} {key[1]!r}"
            )
            continue
        group[rule.policy] = condition.ttl_seconds
    for (field, value), group in ttls.items():
        previous: tuple[str, int] | None = None
        for policy in _ORDER:
            if policy not in group:
                continue
            if previous is not None and group[policy] < previous[1]:
                found.append(
                    f"spec.deletionStrategy.deletionRules for {field} {value!r}: the "
                    f"{policy.value} ttlSeconds ({group[policy]}) must be at least the "
                    f"{previous[0]} ttlSeconds ({previous[1]}) (workers, then the cluster, "
                    "then the RayJob)"
                )
            previous = (policy.value, group[policy])
    return found


def _deletion_problems(job: v1.RayJob, gate: bool) -> list[str]:
    """KubeRay's ``validateDeletionConfiguration``."""
    spec = job.spec
    found = []
    ttl = spec.ttl_seconds_after_finished or 0
    if not spec.shutdown_after_job_finishes and ttl > 0:
        found.append(
            f"spec.ttlSecondsAfterFinished is {ttl} but spec.shutdownAfterJobFinishes is not "
            "true: the TTL only delays that shutdown"
        )
    strategy = spec.deletion_strategy
    if strategy is None:
        return found
    if not gate:
        return [
            *found,
            "spec.deletionStrategy needs the RayJobDeletionPolicy feature gate, which is off "
            "in this operator",
        ]
    legacy = strategy.on_success is not None or strategy.on_failure is not None
    rules = bool(strategy.deletion_rules)
    if rules and spec.shutdown_after_job_finishes:
        found.append(
            "spec.deletionStrategy.deletionRules and spec.shutdownAfterJobFinishes cannot both "
            "be set: the rules say what is deleted"
        )
    if rules and legacy:
        found.append("spec.deletionStrategy cannot have both onSuccess/onFailure and deletionRules")
    if legacy:
        found += _legacy_problems(job, strategy)
    if rules:
        found += _rules_problems(job, strategy.deletion_rules or [])
    if not legacy and not rules:
        found.append("spec.deletionStrategy needs both onSuccess and onFailure, or deletionRules")
    return found


def _head_restart_policy(spec: v1.RayClusterSpec) -> Any:
    pod = spec.head_group_spec.template.get("spec")
    return pod.get("restartPolicy") if isinstance(pod, Mapping) else None


def _cluster_problems(job: v1.RayJob) -> list[str]:
    spec = job.spec.ray_cluster_spec
    if spec is None:
        return []
    found = []
    if spec.auth_options is not None and spec.auth_options.enable_k8s_token_auth:
        found.append(
            "spec.rayClusterSpec.authOptions.enableK8sTokenAuth is not supported for a RayJob "
            "(as in KubeRay): use mode 'token' with the generated or a named Secret"
        )
    name = names.name_of(job)
    if metadata_problems(job):
        name = _PLACEHOLDER
    cluster = v1.RayCluster(
        metadata={
            "name": f"{name}-xxxxx",
            "annotations": dict(job.metadata.get("annotations") or {}),
        },
        spec=spec,
    )
    found += [f"spec.rayClusterSpec: {p}" for p in raycluster.problems(cluster)]
    return found


def _resources_problem(text: str) -> str | None:
    try:
        value = json.loads(text)
    except ValueError as exc:
        return f"spec.entrypointResources {text!r:.80} is not JSON: {exc}"
    if not isinstance(value, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value.values()
    ):
        return (
            f"spec.entrypointResources {text!r:.80} must be a JSON object of resource names "
            "to numbers (such as '{\"custom\": 1}')"
        )
    return None


def spec_problems(job: v1.RayJob, *, deletion_policy_gate: bool = True) -> list[str]:
    """KubeRay's ``ValidateRayJobSpec`` and this operator's additions (module docstring)."""
    spec = job.spec
    mode = spec.submission_mode
    found = []
    if spec.suspend and not spec.shutdown_after_job_finishes:
        found.append(
            "spec.suspend is true but spec.shutdownAfterJobFinishes is not: suspending deletes "
            "the cluster"
        )
    if (spec.ttl_seconds_after_finished or 0) < 0:
        found.append(
            f"spec.ttlSecondsAfterFinished must be 0 or more, got {spec.ttl_seconds_after_finished}"
        )
    found += _deletion_problems(job, deletion_policy_gate)
    selector = bool(spec.cluster_selector)
    backoff = spec.backoff_limit
    if spec.suspend and selector:
        found.append("spec.suspend cannot be used with spec.clusterSelector")
    if spec.ray_cluster_spec is None and not selector:
        found.append("one of spec.rayClusterSpec or spec.clusterSelector must be set")
    if selector:
        if not (spec.cluster_selector or {}).get(names.CLUSTER_SELECTOR_KEY):
            found.append(
                f"spec.clusterSelector must name the cluster under {names.CLUSTER_SELECTOR_KEY!r}"
            )
        if mode == api.SubmissionMode.SIDECAR:
            found.append("spec.clusterSelector cannot be used in SidecarMode")
        if backoff is not None and backoff > 0:
            found.append(
                f"spec.backoffLimit {backoff} cannot be used with spec.clusterSelector (a retry "
                "needs a new cluster)"
            )
    if mode == api.SubmissionMode.INTERACTIVE and backoff is not None and backoff > 0:
        found.append(f"spec.backoffLimit {backoff} cannot be used in InteractiveMode")
    if mode == api.SubmissionMode.SIDECAR:
        if spec.submitter_pod_template is not None:
            found.append("spec.submitterPodTemplate cannot be used in SidecarMode")
        if spec.submitter_config is not None:
            found.append("spec.submitterConfig cannot be used in SidecarMode")
        if spec.ray_cluster_spec is not None:
            policy = _head_restart_policy(spec.ray_cluster_spec)
            if policy not in (None, "", "Never"):
                found.append(
                    "spec.rayClusterSpec.headGroupSpec.template.spec.restartPolicy must be "
                    f"unset or 'Never' in SidecarMode, got {policy!r}"
                )
    found += _cluster_problems(job)
    try:
        submitter.runtime_env(spec.runtime_env_yaml)
    except ValueError as exc:
        found.append(str(exc))
    for field, value in (
        ("activeDeadlineSeconds", spec.active_deadline_seconds),
        ("preRunningDeadlineSeconds", spec.pre_running_deadline_seconds),
    ):
        if value is not None and value <= 0:
            found.append(f"spec.{field} must be above 0, got {value}")
    if backoff is not None and backoff < 0:
        found.append(f"spec.backoffLimit must be 0 or more, got {backoff}")
    found += _beyond_kuberay(job)
    return found


def _beyond_kuberay(job: v1.RayJob) -> list[str]:
    spec = job.spec
    mode = spec.submission_mode
    found = []
    if mode not in _MODES:
        found.append(
            f"spec.submissionMode {mode!r} is not one of {', '.join(repr(m) for m in _MODES)}"
        )
    if spec.entrypoint_resources:
        problem = _resources_problem(spec.entrypoint_resources)
        if problem is not None:
            found.append(problem)
    if mode in (api.SubmissionMode.K8S_JOB, api.SubmissionMode.SIDECAR):
        problem = submitter.metadata_problem(job)
        if problem is not None:
            found.append(problem)
    template = spec.submitter_pod_template
    if mode == api.SubmissionMode.K8S_JOB and template is not None:
        pod = template.get("spec")
        containers = pod.get("containers") if isinstance(pod, Mapping) else None
        if not isinstance(containers, list) or not containers:
            found.append("spec.submitterPodTemplate.spec.containers must have a container")
    return found


def problems(job: v1.RayJob, *, deletion_policy_gate: bool = True) -> list[str]:
    """Every problem of the three checks; empty when the RayJob is valid."""
    return (
        metadata_problems(job)
        + spec_problems(job, deletion_policy_gate=deletion_policy_gate)
        + status_problems(job)
    )


def validate(job: v1.RayJob, *, deletion_policy_gate: bool = True) -> Invalid | None:
    """The first failing check with all its problems (module docstring), or None.

    >>> validate(v1.RayJob.model_validate({"metadata": {"name": "Pi"},
    ...     "spec": {"clusterSelector": {"ray.io/cluster": "c"}}}))  # doctest: +ELLIPSIS
    Invalid(event_reason='InvalidRayJobMetadata', message="metadata.name 'Pi' is not a valid...")
    """
    checks: tuple[tuple[EventReason, list[str]], ...] = (
        ("InvalidRayJobMetadata", metadata_problems(job)),
        ("InvalidRayJobSpec", spec_problems(job, deletion_policy_gate=deletion_policy_gate)),
        ("InvalidRayJobStatus", status_problems(job)),
    )
    for reason, found in checks:
        if found:
            return Invalid(event_reason=reason, message="; ".join(found))
    return None


def admission_problems(obj: Mapping[str, Any]) -> list[str]:
    """What the validating webhook refuses of a RayJob as the API server sends it: the
    name (KubeRay's webhook rule; see the module docstring for why only it).

    >>> admission_problems({"metadata": {"name": "x" * 48}})  # doctest: +ELLIPSIS
    ["metadata.name 'xxx...' has 48 characters; a RayJob name must have at most 47 ..."]
    """
    meta = obj.get("metadata")
    name = meta.get("name", "") if isinstance(meta, Mapping) else ""
    return _name_problems(name, names.MAX_NAME_LENGTH, "RayJob", _JOB_NAME_WHY)


def cron_problems(
    cron_job: raycronjob.RayCronJob, *, deletion_policy_gate: bool = True
) -> list[str]:
    """KubeRay's ``ValidateRayCronJobSpec``, every problem (module docstring).

    >>> cron_problems(raycronjob.RayCronJob.model_validate({"metadata": {"name": "nightly"},
    ...     "spec": {"schedule": "0 3 * * *", "timeZone": "Europe/Nowhere",
    ...              "jobTemplate": {"clusterSelector": {"ray.io/cluster": "c"}}}}))
    ["spec.timeZone 'Europe/Nowhere' is not a time zone this operator knows"]
    """
    found = []
    name = str(cron_job.metadata.get("name") or "")
    if len(name) > names.MAX_CRONJOB_NAME_LENGTH:
        found.append(
            f"metadata.name {name!r} has {len(name)} characters; a RayCronJob name must have "
            f"at most {names.MAX_CRONJOB_NAME_LENGTH} (its RayJobs are named "
            "<name>-<minutes since 1970>)"
        )
    spec = cron_job.spec
    if "TZ" in spec.schedule:
        found.append(
            f"spec.schedule {spec.schedule!r} must not set a time zone (TZ or CRON_TZ); "
            "use spec.timeZone"
        )
    else:
        try:
            cron.parse(spec.schedule)
        except cron.CronError as exc:
            found.append(f"spec.schedule {spec.schedule!r} is not a cron schedule: {exc}")
    if spec.time_zone is not None:
        if spec.time_zone == "":
            found.append(
                "spec.timeZone must not be empty; leave it out for the operator's own zone"
            )
        else:
            try:
                cron.load_zone(spec.time_zone)
            except cron.CronError:
                found.append(
                    f"spec.timeZone {spec.time_zone!r} is not a time zone this operator knows"
                )
    template = v1.RayJob(spec=spec.job_template)
    found += [
        f"spec.jobTemplate: {p.removeprefix('spec.')}"
        for p in spec_problems(template, deletion_policy_gate=deletion_policy_gate)
    ]
    return found
