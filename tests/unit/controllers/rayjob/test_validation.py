"""controllers/rayjob/validation.py: every rule, accepted and refused (table-driven)."""

# ruff: noqa: E501 (the tables read one case per line)
from __future__ import annotations

from typing import Any

import pytest

from api import v1
from api.v1 import raycronjob
from controllers.rayjob import validation

HEAD = {"headGroupSpec": {"template": {"spec": {"containers": [{"name": "ray-head"}]}}}}
AUTOSCALED = {**HEAD, "enableInTreeAutoscaling": True}
SIDECAR_NEVER = {
    "headGroupSpec": {
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "h"}]}}
    }
}
SIDECAR_ALWAYS = {
    "headGroupSpec": {
        "template": {"spec": {"restartPolicy": "Always", "containers": [{"name": "h"}]}}
    }
}
SELECT = {"ray.io/cluster": "shared"}


def _rule(policy: str, ttl: int = 0, status: str = "SUCCEEDED") -> dict[str, Any]:
    return {"policy": policy, "condition": {"jobStatus": status, "ttlSeconds": ttl}}


def _legacy(success: str | None, failure: str | None) -> dict[str, Any]:
    return {"onSuccess": {"policy": success}, "onFailure": {"policy": failure}}


def _job(
    spec: dict[str, Any], name: str = "job", status: dict[str, Any] | None = None
) -> v1.RayJob:
    return v1.RayJob.model_validate(
        {
            "metadata": {"name": name},
            "spec": {"rayClusterSpec": HEAD, **spec},
            "status": status or {},
        }
    )


# (spec, expected problem fragment or None when valid)
SPEC_CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("minimal", {}, None),
    ("suspend needs shutdown", {"suspend": True}, "spec.suspend is true"),
    ("suspend with shutdown", {"suspend": True, "shutdownAfterJobFinishes": True}, None),
    ("ttl negative", {"ttlSecondsAfterFinished": -1}, "spec.ttlSecondsAfterFinished must be 0"),
    ("ttl without shutdown", {"ttlSecondsAfterFinished": 10}, "only delays that shutdown"),
    ("ttl with shutdown", {"ttlSecondsAfterFinished": 10, "shutdownAfterJobFinishes": True}, None),
    ("neither cluster spec nor selector", {"rayClusterSpec": None}, "one of spec.rayClusterSpec"),
    ("selector only", {"rayClusterSpec": None, "clusterSelector": SELECT}, None),
    ("selector without name", {"rayClusterSpec": None, "clusterSelector": {"a": "b"}},
     "must name the cluster"),
    ("selector empty name", {"clusterSelector": {"ray.io/cluster": ""}}, "must name the cluster"),
    ("selector and suspend", {"clusterSelector": SELECT, "suspend": True,
                              "shutdownAfterJobFinishes": True}, "cannot be used with spec.clusterSelector"),
    ("selector in sidecar", {"clusterSelector": SELECT, "submissionMode": "SidecarMode"},
     "cannot be used in SidecarMode"),
    ("selector and backoff", {"clusterSelector": SELECT, "backoffLimit": 1}, "a retry needs a new cluster"),
    ("selector and backoff 0", {"clusterSelector": SELECT, "backoffLimit": 0}, None),
    ("interactive backoff", {"submissionMode": "InteractiveMode", "backoffLimit": 2},
     "cannot be used in InteractiveMode"),
    ("interactive", {"submissionMode": "InteractiveMode"}, None),
    ("backoff negative", {"backoffLimit": -1}, "spec.backoffLimit must be 0 or more"),
    ("backoff retries", {"backoffLimit": 3}, None),
    ("sidecar", {"submissionMode": "SidecarMode", "rayClusterSpec": SIDECAR_NEVER}, None),
    ("sidecar template", {"submissionMode": "SidecarMode", "submitterPodTemplate": {"spec": {}}},
     "spec.submitterPodTemplate cannot be used in SidecarMode"),
    ("sidecar config", {"submissionMode": "SidecarMode", "submitterConfig": {"backoffLimit": 1}},
     "spec.submitterConfig cannot be used in SidecarMode"),
    ("sidecar restart policy", {"submissionMode": "SidecarMode", "rayClusterSpec": SIDECAR_ALWAYS},
     "restartPolicy must be unset or 'Never' in SidecarMode, got 'Always'"),
    ("k8s token auth", {"rayClusterSpec": {**HEAD, "rayVersion": "2.60.0", "authOptions": {
        "mode": "token", "enableK8sTokenAuth": True}}}, "enableK8sTokenAuth is not supported"),
    ("token auth", {"rayClusterSpec": {**HEAD, "rayVersion": "2.60.0",
                                       "authOptions": {"mode": "token"}}}, None),
    ("cluster rules", {"rayClusterSpec": {"headGroupSpec": {"template": {"spec": {}}}}},
     "spec.rayClusterSpec: headGroupSpec.template should have at least one container"),
    ("runtime env", {"runtimeEnvYAML": "pip: [numpy]\nenv_vars: {A: b}"}, None),
    ("runtime env empty", {"runtimeEnvYAML": ""}, None),
    ("runtime env comment", {"runtimeEnvYAML": "# nothing"}, None),
    ("runtime env not yaml", {"runtimeEnvYAML": "pip: [numpy"}, "spec.runtimeEnvYAML is not valid YAML"),
    ("runtime env list", {"runtimeEnvYAML": "- numpy"}, "spec.runtimeEnvYAML must be a YAML mapping"),
    ("runtime env scalar", {"runtimeEnvYAML": "numpy"}, "but it is a string"),
    ("active deadline 0", {"activeDeadlineSeconds": 0}, "spec.activeDeadlineSeconds must be above 0"),
    ("active deadline", {"activeDeadlineSeconds": 60}, None),
    ("pre-running deadline", {"preRunningDeadlineSeconds": 60}, None),
    # deletion strategy
    ("rules", {"deletionStrategy": {"deletionRules": [
        _rule("DeleteWorkers", 0), _rule("DeleteCluster", 10), _rule("DeleteSelf", 20),
        _rule("DeleteCluster", 5, "FAILED")]}}, None),
    ("rules and shutdown", {"shutdownAfterJobFinishes": True, "deletionStrategy": {
        "deletionRules": [_rule("DeleteCluster")]}}, "cannot both be set"),
    ("rules and legacy", {"deletionStrategy": {"deletionRules": [_rule("DeleteCluster")],
                                               **_legacy("DeleteCluster", "DeleteCluster")}},
     "cannot have both onSuccess/onFailure and deletionRules"),
    ("empty strategy", {"deletionStrategy": {}}, "needs both onSuccess and onFailure, or deletionRules"),
    ("rule with both conditions", {"deletionStrategy": {"deletionRules": [{"policy": "DeleteSelf",
        "condition": {"jobStatus": "FAILED", "jobDeploymentStatus": "Failed"}}]}},
     "sets both jobStatus and jobDeploymentStatus"),
    ("rule with no condition", {"deletionStrategy": {"deletionRules": [
        {"policy": "DeleteSelf", "condition": {"ttlSeconds": 1}}]}}, "needs one of jobStatus"),
    ("rule on deployment status", {"deletionStrategy": {"deletionRules": [
        {"policy": "DeleteSelf", "condition": {"jobDeploymentStatus": "Failed"}}]}}, None),
    ("rule cluster with selector", {"rayClusterSpec": None, "clusterSelector": SELECT,
        "deletionStrategy": {"deletionRules": [_rule("DeleteCluster")]}},
     "policy 'DeleteCluster' cannot be used with spec.clusterSelector"),
    ("rule self with selector", {"rayClusterSpec": None, "clusterSelector": SELECT,
        "deletionStrategy": {"deletionRules": [_rule("DeleteSelf")]}}, None),
    ("rule workers with autoscaling", {"rayClusterSpec": AUTOSCALED,
        "deletionStrategy": {"deletionRules": [_rule("DeleteWorkers")]}},
     "'DeleteWorkers' cannot be used with rayClusterSpec.enableInTreeAutoscaling"),
    ("duplicate rule", {"deletionStrategy": {"deletionRules": [_rule("DeleteSelf", 1),
        _rule("DeleteSelf", 2)]}}, "repeats the rule for policy 'DeleteSelf' and jobStatus 'SUCCEEDED'"),
    ("ttl order", {"deletionStrategy": {"deletionRules": [_rule("DeleteCluster", 10),
        _rule("DeleteWorkers", 20)]}},
     "the DeleteCluster ttlSeconds (10) must be at least the DeleteWorkers ttlSeconds (20)"),
    ("ttl order ignores DeleteNone", {"deletionStrategy": {"deletionRules": [
        _rule("DeleteCluster", 10), _rule("DeleteNone", 0)]}}, None),
    ("legacy", {"deletionStrategy": _legacy("DeleteCluster", "DeleteNone")}, None),
    ("legacy half", {"deletionStrategy": {"onSuccess": {"policy": "DeleteCluster"}}},
     "needs both onSuccess and onFailure"),
    ("legacy without policy", {"deletionStrategy": _legacy("DeleteCluster", None)},
     "spec.deletionStrategy.onFailure.policy is required"),
    ("legacy selector", {"rayClusterSpec": None, "clusterSelector": SELECT,
                         "deletionStrategy": _legacy("DeleteWorkers", "DeleteSelf")},
     "onSuccess.policy 'DeleteWorkers' cannot be used with spec.clusterSelector"),
    ("legacy autoscaling", {"rayClusterSpec": AUTOSCALED,
                            "deletionStrategy": _legacy("DeleteWorkers", "DeleteCluster")},
     "policy 'DeleteWorkers' cannot be used with rayClusterSpec.enableInTreeAutoscaling"),
    ("legacy DeleteNone with shutdown", {"shutdownAfterJobFinishes": True,
                                         "deletionStrategy": _legacy("DeleteNone", "DeleteCluster")},
     "'DeleteNone' contradicts spec.shutdownAfterJobFinishes"),
    # beyond KubeRay
    ("unknown mode", {"submissionMode": "CarrierPigeon"}, "spec.submissionMode 'CarrierPigeon' is not one of"),
    ("resources", {"entrypointResources": '{"custom": 1, "other": 0.5}'}, None),
    ("resources not json", {"entrypointResources": "custom=1"}, "spec.entrypointResources 'custom=1' is not JSON"),
    ("resources not numbers", {"entrypointResources": '{"custom": "1"}'}, "must be a JSON object"),
    ("metadata old ray", {"metadata": {"a": "b"}, "rayClusterSpec": {**HEAD, "rayVersion": "2.5.0"}},
     "spec.metadata needs Ray 2.6.0 or later"),
    ("metadata old ray http", {"submissionMode": "HTTPMode", "metadata": {"a": "b"},
                               "rayClusterSpec": {**HEAD, "rayVersion": "2.5.0"}}, None),
    ("metadata new ray", {"metadata": {"a": "b"}, "rayClusterSpec": {**HEAD, "rayVersion": "2.6.0"}}, None),
    ("template without container", {"submitterPodTemplate": {"spec": {"containers": []}}},
     "spec.submitterPodTemplate.spec.containers must have a container"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "expected"), [c[1:] for c in SPEC_CASES], ids=[c[0] for c in SPEC_CASES]
)
def test_spec_rules(spec: dict[str, Any], expected: str | None) -> None:
    job = _job(spec)
    found = validation.problems(job)
    invalid = validation.validate(job)
    if expected is None:
        assert found == []
        assert invalid is None
    else:
        assert any(expected in p for p in found), found
        assert invalid is not None
        assert invalid.event_reason == "InvalidRayJobSpec"
        assert expected in invalid.message


def test_deletion_strategy_needs_the_gate() -> None:
    job = _job({"deletionStrategy": {"deletionRules": [_rule("DeleteCluster")]}})
    assert validation.problems(job) == []
    assert validation.problems(job, deletion_policy_gate=False) == [
        "spec.deletionStrategy needs the RayJobDeletionPolicy feature gate, which is off in this "
        "operator"
    ]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("j" * 47, None),
        ("j" * 48, "has 48 characters; a RayJob name must have at most 47"),
        ("Job", "not a valid DNS-1035 label"),
        ("1job", "not a valid DNS-1035 label"),
        ("job-", "not a valid DNS-1035 label"),
    ],
)
def test_metadata(name: str, expected: str | None) -> None:
    invalid = validation.validate(_job({"suspend": True}, name=name))  # the spec is bad too
    assert invalid is not None
    if expected is None:
        assert invalid.event_reason == "InvalidRayJobSpec"
    else:
        assert invalid.event_reason == "InvalidRayJobMetadata"
        assert expected in invalid.message
        assert validation.admission_problems({"metadata": {"name": name}}) == [invalid.message]


def test_all_problems_of_the_first_failing_check() -> None:
    invalid = validation.validate(_job({"backoffLimit": -1, "activeDeadlineSeconds": -5}))
    assert invalid == validation.Invalid(
        "InvalidRayJobSpec",
        "spec.activeDeadlineSeconds must be above 0, got -5; spec.backoffLimit must be 0 or "
        "more, got -1",
    )


@pytest.mark.parametrize(
    ("mode", "invalid"),
    [("K8sJobMode", True), ("HTTPMode", True), ("SidecarMode", True), ("InteractiveMode", False)],
)
def test_status_waiting_only_interactive(mode: str, invalid: bool) -> None:
    spec: dict[str, Any] = {"submissionMode": mode}
    if mode == "SidecarMode":
        spec["rayClusterSpec"] = SIDECAR_NEVER
    got = validation.validate(_job(spec, status={"jobDeploymentStatus": "Waiting"}))
    if invalid:
        assert got is not None
        assert got.event_reason == "InvalidRayJobStatus"
    else:
        assert got is None


def test_admission_checks_only_the_name() -> None:
    assert (
        validation.admission_problems({"metadata": {"name": "ok"}, "spec": {"suspend": True}}) == []
    )
    assert validation.admission_problems({}) != []


def _cron(name: str = "nightly", **spec: Any) -> raycronjob.RayCronJob:
    return raycronjob.RayCronJob.model_validate(
        {"metadata": {"name": name}, "spec": {"schedule": "0 3 * * *",
                                              "jobTemplate": {"rayClusterSpec": HEAD}, **spec}}
    )  # fmt: skip


CRON_CASES: list[tuple[str, raycronjob.RayCronJob, str | None]] = [
    ("valid", _cron(), None),
    ("descriptor", _cron(schedule="@every 1h"), None),
    ("zone", _cron(timeZone="Europe/Paris"), None),
    ("utc", _cron(timeZone="UTC"), None),
    ("name 36", _cron("c" * 36), None),
    ("name 37", _cron("c" * 37), "a RayCronJob name must have at most 36"),
    ("TZ", _cron(schedule="TZ=UTC 0 3 * * *"), "must not set a time zone"),
    ("CRON_TZ", _cron(schedule="CRON_TZ=UTC 0 3 * * *"), "must not set a time zone"),
    ("bad schedule", _cron(schedule="0 25 * * *"), "hour: the end of range 25"),
    ("six fields", _cron(schedule="0 0 3 * * *"), "expected exactly 5 fields"),
    ("empty zone (the schema refuses it too)",
     _cron().model_copy(update={"spec": _cron().spec.model_copy(update={"time_zone": ""})}),
     "spec.timeZone must not be empty"),
    ("unknown zone", _cron(timeZone="Mars/Olympus"), "'Mars/Olympus' is not a time zone"),
    ("template", _cron(jobTemplate={"suspend": True, "rayClusterSpec": HEAD}),
     "spec.jobTemplate: suspend is true"),
    ("template needs a cluster", _cron(jobTemplate={}), "spec.jobTemplate: one of spec.rayClusterSpec"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("cron_job", "expected"), [c[1:] for c in CRON_CASES], ids=[c[0] for c in CRON_CASES]
)
def test_cron_rules(cron_job: raycronjob.RayCronJob, expected: str | None) -> None:
    found = validation.cron_problems(cron_job)
    if expected is None:
        assert found == []
    else:
        assert any(expected in p for p in found), found
