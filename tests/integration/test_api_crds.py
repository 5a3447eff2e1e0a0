"""The generated CRDs on the real API server: samples and KubeRay YAML accepted, bad input refused.

KubeRay's own RayJob samples (``config/samples/ray-job.*.yaml`` of the KubeRay v1.5.0 Go
module that ``make peers`` downloads, found with ``hack/peers/kuberay.sh --crds``) are
created unchanged; the samples new in v1.7.0 (RayCronJob, deletion rules) are covered by
our hand-written equivalents in ``tests/unit/api/v1/testdata``. RayJob's ``v1alpha1``
is served (as KubeRay v1.7.0 does) with v1's schema.

Also checks that ``kubectl apply --dry-run=server -k config/default`` (CRDs, RBAC,
manager) is accepted as a whole.
"""

from __future__ import annotations

import copy
import functools
import pathlib
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

import api.v1 as v1
from runtime.client import resources
from runtime.testing import controlplane

ROOT = pathlib.Path(__file__).parents[2]
CRD_DIR = ROOT / "config/crd/bases"
SAMPLES = sorted(
    p for p in (ROOT / "config/samples").glob("*.yaml") if p.name != "kustomization.yaml"
)
TESTDATA = ROOT / "tests/unit/api/v1/testdata"
KUBERAY = sorted(TESTDATA.glob("kuberay_*.yaml"))
MODELS = {
    "RayCluster": v1.RayCluster,
    "RayService": v1.RayService,
    "RayJob": v1.RayJob,
    "RayCronJob": v1.RayCronJob,
}
RESOURCES = {
    "RayCluster": v1.RAYCLUSTERS,
    "RayService": v1.RAYSERVICES,
    "RayJob": v1.RAYJOBS,
    "RayCronJob": v1.RAYCRONJOBS,
}
RAYJOBS_V1ALPHA1 = resources.Resource(v1.GROUP, "v1alpha1", "RayJob", "rayjobs")
OPERATOR_NAMESPACE = "rayservice-operator-system"


@pytest.fixture(scope="module", autouse=True)
def crds(control_plane: controlplane.ControlPlane) -> list[str]:
    return control_plane.install_crds(CRD_DIR)


@pytest.fixture
def kubectl(bin_dir: pathlib.Path, control_plane: controlplane.ControlPlane) -> list[str]:
    return [str(bin_dir / "kubectl"), "--kubeconfig", str(control_plane.kubeconfig)]


def load(path: pathlib.Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return doc


def contains(big: Any, small: Any) -> bool:
    """``small`` is ``big`` with some mapping keys left out (at any depth)."""
    if isinstance(small, dict):
        return isinstance(big, dict) and all(
            k in big and contains(big[k], v) for k, v in small.items()
        )
    if isinstance(small, list):
        return isinstance(big, list) and len(big) == len(small) and all(map(contains, big, small))
    return bool(big == small)


def create(cp: controlplane.ControlPlane, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in obj.items() if k != "status"}
    result: dict[str, Any] = cp.request("POST", RESOURCES[obj["kind"]].path(namespace), body)
    return result


@pytest.mark.parametrize("path", SAMPLES + KUBERAY, ids=lambda p: p.name)
def test_objects_are_accepted_and_stored_without_losing_fields(
    control_plane: controlplane.ControlPlane, namespace: str, path: pathlib.Path
) -> None:
    doc = load(path)
    stored = create(control_plane, namespace, doc)
    assert contains(stored["spec"], doc["spec"]), "the API server pruned fields"
    assert contains(stored["metadata"], doc["metadata"])
    MODELS[doc["kind"]].model_validate(stored)  # and what the server returns parses


def test_server_applies_the_api_defaults(
    control_plane: controlplane.ControlPlane, namespace: str
) -> None:
    doc = load(ROOT / "config/samples/ray_v1_rayservice.yaml")
    del doc["spec"]["rayClusterDeletionDelaySeconds"]
    group = doc["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    for key in ("replicas", "minReplicas", "maxReplicas"):
        del group[key]
    stored = create(control_plane, namespace, doc)
    assert stored["spec"]["rayClusterDeletionDelaySeconds"] == 60
    stored_group = stored["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    assert (stored_group["replicas"], stored_group["minReplicas"], stored_group["maxReplicas"]) == (
        0, 0, 2**31 - 1,
    )  # fmt: skip
    parsed = v1.RayService.model_validate(stored)
    assert parsed.spec.ray_cluster_deletion_delay_seconds == 60


@pytest.mark.parametrize(
    "name", ["kuberay_rayservice.yaml", "kuberay_rayjob.yaml", "kuberay_raycronjob.yaml"]
)
def test_kuberay_status_is_accepted_by_the_status_subresource(
    control_plane: controlplane.ControlPlane, namespace: str, name: str
) -> None:
    doc = load(TESTDATA / name)
    assert doc["status"]
    stored = create(control_plane, namespace, doc)
    stored["status"] = doc["status"]
    path = RESOURCES[doc["kind"]].path(namespace, doc["metadata"]["name"], "status")
    written = control_plane.request("PUT", path, stored)
    assert contains(written["status"], doc["status"])
    model = MODELS[doc["kind"]]
    status_model = type(model.model_validate(doc).status)
    status = model.model_validate(written).status
    assert status.to_api() == status_model.model_validate(doc["status"]).to_api()


@functools.cache
def kuberay_samples() -> tuple[pathlib.Path, ...] | str:
    """KubeRay v1.5.0's RayJob samples from its Go module (``make peers`` downloads it),
    or why they cannot be found."""
    done = subprocess.run(
        [str(ROOT / "hack/peers/kuberay.sh"), "--crds"],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    if done.returncode != 0 or not done.stdout.strip():
        return f"hack/peers/kuberay.sh --crds failed (run `make peers`):\n{done.stderr}"
    samples = pathlib.Path(done.stdout.strip().splitlines()[-1]).parents[1] / "samples"
    found = tuple(sorted(samples.glob("ray-job.*.yaml")))
    return found or f"no ray-job.*.yaml in {samples}"


def _kuberay_sample_params() -> list[Any]:
    found = kuberay_samples()
    if isinstance(found, str):
        return [pytest.param(None, id="kuberay-module-missing")]
    return [pytest.param(path, id=path.name) for path in found]


@pytest.mark.parametrize("path", _kuberay_sample_params())
def test_kuberay_rayjob_samples_are_accepted_unchanged(
    control_plane: controlplane.ControlPlane, namespace: str, path: pathlib.Path | None
) -> None:
    if path is None:
        pytest.fail(str(kuberay_samples()))
    jobs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc and doc["kind"] == "RayJob"]
    assert jobs, f"{path.name}: no RayJob"
    for doc in jobs:
        stored = create(control_plane, namespace, doc)
        assert contains(stored["spec"], doc["spec"]), f"{path.name}: the API server pruned fields"
        assert contains(stored["metadata"], doc["metadata"])
        job = v1.RayJob.model_validate(stored)
        assert job.spec.submission_mode == doc["spec"].get("submissionMode", "K8sJobMode")


def worker(**fields: Any) -> dict[str, Any]:
    return {"rayStartParams": {}, "template": {"spec": {"containers": []}}, **fields}


def cluster_spec(*workers: dict[str, Any]) -> dict[str, Any]:
    return {
        "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": []}}},
        "workerGroupSpecs": list(workers),
    }


def raycluster(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "bad"},
        "spec": spec,
    }


def rayservice(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "bad"},
        "spec": spec,
    }


def rayjob(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "bad"},
        "spec": {"entrypoint": "python -V", **spec},
    }


def raycronjob(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCronJob",
        "metadata": {"name": "bad"},
        "spec": spec,
    }


def rule(policy: str, **condition: Any) -> dict[str, Any]:
    return {"policy": policy, "condition": condition}


INVALID = {
    "negative-replicas": (
        raycluster(cluster_spec(worker(groupName="g", replicas=-1))),
        "spec.workerGroupSpecs[0].replicas",
    ),
    "negative-min-replicas-in-rayservice": (
        rayservice({"rayClusterConfig": cluster_spec(worker(groupName="g", minReplicas=-2))}),
        "spec.rayClusterConfig.workerGroupSpecs[0].minReplicas",
    ),
    "unknown-upgrade-type": (
        rayservice({"rayClusterConfig": cluster_spec(), "upgradeStrategy": {"type": "Rolling"}}),
        "spec.upgradeStrategy.type",
    ),
    "missing-ray-cluster-config": (
        rayservice({"serveConfigV2": "applications: []\n"}),
        "spec.rayClusterConfig",
    ),
    "worker-group-without-group-name": (
        raycluster(cluster_spec(worker(replicas=1))),
        "spec.workerGroupSpecs[0].groupName",
    ),
    "negative-deletion-delay": (
        rayservice({"rayClusterConfig": cluster_spec(), "rayClusterDeletionDelaySeconds": -1}),
        "spec.rayClusterDeletionDelaySeconds",
    ),
    "missing-head-group": (raycluster({"workerGroupSpecs": []}), "spec.headGroupSpec"),
    "rayjob-unknown-managed-by": (rayjob(managedBy="someone-else"), "spec.managedBy"),
    "rayjob-legacy-and-rules": (
        rayjob(
            deletionStrategy={
                "onSuccess": {"policy": "DeleteCluster"},
                "onFailure": {"policy": "DeleteNone"},
                "deletionRules": [rule("DeleteSelf", jobStatus="SUCCEEDED")],
            }
        ),
        "spec.deletionStrategy",
    ),
    "rayjob-legacy-half": (
        rayjob(deletionStrategy={"onSuccess": {"policy": "DeleteCluster"}}),
        "spec.deletionStrategy",
    ),
    "rayjob-empty-rules": (
        rayjob(deletionStrategy={"deletionRules": []}),
        "spec.deletionStrategy.deletionRules",
    ),
    "rayjob-condition-with-both": (
        rayjob(
            deletionStrategy={
                "deletionRules": [
                    rule("DeleteCluster", jobStatus="FAILED", jobDeploymentStatus="Failed"),
                ]
            }
        ),
        "spec.deletionStrategy.deletionRules[0].condition",
    ),
    "rayjob-condition-with-neither": (
        rayjob(deletionStrategy={"deletionRules": [rule("DeleteCluster", ttlSeconds=5)]}),
        "spec.deletionStrategy.deletionRules[0].condition",
    ),
    "rayjob-condition-unknown-job-status": (
        rayjob(deletionStrategy={"deletionRules": [rule("DeleteCluster", jobStatus="STOPPED")]}),
        "spec.deletionStrategy.deletionRules[0].condition.jobStatus",
    ),
    "rayjob-condition-unknown-deployment-status": (
        rayjob(
            deletionStrategy={
                "deletionRules": [rule("DeleteCluster", jobDeploymentStatus="Complete")]
            }
        ),
        "spec.deletionStrategy.deletionRules[0].condition.jobDeploymentStatus",
    ),
    "rayjob-unknown-policy": (
        rayjob(deletionStrategy={"deletionRules": [rule("DeleteAll", jobStatus="FAILED")]}),
        "spec.deletionStrategy.deletionRules[0].policy",
    ),
    "rayjob-negative-rule-ttl": (
        rayjob(
            deletionStrategy={
                "deletionRules": [rule("DeleteSelf", jobStatus="FAILED", ttlSeconds=-1)]
            }
        ),
        "spec.deletionStrategy.deletionRules[0].condition.ttlSeconds",
    ),
    "rayjob-zero-pre-running-deadline": (
        rayjob(preRunningDeadlineSeconds=0),
        "spec.preRunningDeadlineSeconds",
    ),
    "raycronjob-without-schedule": (raycronjob(jobTemplate={}), "spec.schedule"),
    "raycronjob-without-job-template": (raycronjob(schedule="@hourly"), "spec.jobTemplate"),
    "raycronjob-empty-time-zone": (
        raycronjob(schedule="@hourly", jobTemplate={}, timeZone=""),
        "spec.timeZone",
    ),
}


@pytest.mark.parametrize(("obj", "field"), list(INVALID.values()), ids=list(INVALID))
def test_invalid_objects_are_rejected_naming_the_field(
    control_plane: controlplane.ControlPlane, namespace: str, obj: dict[str, Any], field: str
) -> None:
    with pytest.raises(controlplane.ApiError) as caught:
        create(control_plane, namespace, copy.deepcopy(obj))
    assert caught.value.status == 422
    assert field in caught.value.body["message"]
    assert field in [cause.get("field") for cause in caught.value.body["details"]["causes"]]


def test_kubectl_applies_kuberay_yaml_with_strict_field_validation(
    kubectl: list[str], namespace: str
) -> None:
    for path in KUBERAY + SAMPLES:
        done = subprocess.run(
            [*kubectl, "apply", "--dry-run=server", "--validate=strict", "-n", namespace,
             "-f", str(path)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"{path.name}: {done.stderr}"
        assert "unknown field" not in done.stderr, done.stderr


def test_kubectl_strict_validation_refuses_a_misspelt_field(
    kubectl: list[str], namespace: str, tmp_path: pathlib.Path
) -> None:
    doc = load(ROOT / "config/samples/ray_v1_rayservice.yaml")
    doc["spec"]["rayClusterDeletionDelaySecs"] = doc["spec"].pop("rayClusterDeletionDelaySeconds")
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(doc))
    done = subprocess.run(
        [*kubectl, "apply", "--dry-run=server", "--validate=strict", "-n", namespace,
         "-f", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert 'unknown field "spec.rayClusterDeletionDelaySecs"' in done.stderr


def test_kubectl_get_shows_the_printer_columns(
    control_plane: controlplane.ControlPlane, kubectl: list[str], namespace: str
) -> None:
    for path in SAMPLES:
        create(control_plane, namespace, load(path))
    headers = {}
    for plural in ("rayservices", "rayclusters", "rayjobs", "raycronjobs"):
        done = subprocess.run(
            [*kubectl, "get", plural, "-n", namespace], capture_output=True, text=True,
            timeout=60, check=True,
        )  # fmt: skip
        headers[plural] = done.stdout.splitlines()[0].split("  ")
    assert [h.strip() for h in headers["rayservices"] if h.strip()] == [
        "NAME", "SERVICE STATUS", "NUM SERVE ENDPOINTS",
    ]  # fmt: skip
    assert [h.strip() for h in headers["rayclusters"] if h.strip()] == [
        "NAME", "DESIRED WORKERS", "AVAILABLE WORKERS", "CPUS", "MEMORY", "GPUS", "STATUS", "AGE",
    ]  # fmt: skip
    assert [h.strip() for h in headers["rayjobs"] if h.strip()] == [
        "NAME", "JOB STATUS", "DEPLOYMENT STATUS", "RAY CLUSTER NAME", "START TIME", "END TIME",
        "AGE",
    ]  # fmt: skip
    assert [h.strip() for h in headers["raycronjobs"] if h.strip()] == [
        "NAME", "SCHEDULE", "TIMEZONE", "LAST SCHEDULE", "AGE", "SUSPEND",
    ]  # fmt: skip


def test_rayjob_managed_by_is_immutable(
    control_plane: controlplane.ControlPlane, namespace: str
) -> None:
    """Changed after create: refused. Removed: accepted, as with KubeRay v1.7.0's CRD (a
    transition rule on the field runs only when the old and the new object both have it)."""
    doc = rayjob(managedBy=v1.rayjob.MANAGED_BY_MULTIKUEUE)
    doc["metadata"]["name"] = "dispatched"
    stored = create(control_plane, namespace, doc)
    path = v1.RAYJOBS.path(namespace, "dispatched")
    changed = copy.deepcopy(stored)
    changed["spec"]["managedBy"] = v1.rayjob.MANAGED_BY_KUBERAY
    with pytest.raises(controlplane.ApiError) as caught:
        control_plane.request("PUT", path, changed)
    assert caught.value.status == 422
    assert "the managedBy field is immutable" in caught.value.body["message"]
    assert "spec.managedBy" in [c.get("field") for c in caught.value.body["details"]["causes"]]

    stored["spec"]["entrypoint"] = "python -c 'print(2)'"  # anything else may change
    updated = control_plane.request("PUT", path, stored)
    assert updated["spec"]["managedBy"] == v1.rayjob.MANAGED_BY_MULTIKUEUE
    del updated["spec"]["managedBy"]
    removed = control_plane.request("PUT", path, updated)
    assert "managedBy" not in removed["spec"]


def test_rayjob_api_defaults(control_plane: controlplane.ControlPlane, namespace: str) -> None:
    doc = rayjob(deletionStrategy={"deletionRules": [rule("DeleteSelf", jobStatus="FAILED")]})
    doc["metadata"]["name"] = "defaults"
    stored = create(control_plane, namespace, doc)
    spec = stored["spec"]
    assert (spec["submissionMode"], spec["backoffLimit"], spec["ttlSecondsAfterFinished"]) == (
        "K8sJobMode", 0, 0,
    )  # fmt: skip
    assert spec["deletionStrategy"]["deletionRules"][0]["condition"]["ttlSeconds"] == 0
    assert "status" not in stored or "succeeded" not in stored["status"]
    job = v1.RayJob.model_validate(stored)
    assert job.spec.submission_mode == v1.rayjob.SubmissionMode.K8S_JOB


def test_rayjob_v1alpha1_is_served_with_v1s_shape(
    control_plane: controlplane.ControlPlane, kubectl: list[str], namespace: str
) -> None:
    doc = load(TESTDATA / "kuberay_rayjob_deletion_rules.yaml")
    doc["apiVersion"] = "ray.io/v1alpha1"
    created = control_plane.request("POST", RAYJOBS_V1ALPHA1.path(namespace), doc)
    assert created["apiVersion"] == "ray.io/v1alpha1"
    assert contains(created["spec"], doc["spec"]), "v1alpha1 is v1's shape: nothing pruned"
    name = doc["metadata"]["name"]
    as_v1 = control_plane.request("GET", v1.RAYJOBS.path(namespace, name))
    assert as_v1["apiVersion"] == "ray.io/v1"
    assert as_v1["spec"] == created["spec"]
    v1.RayJob.model_validate(as_v1)

    # written through v1alpha1 (spec and status), read through v1 and back
    created["spec"]["suspend"] = True
    updated = control_plane.request("PUT", RAYJOBS_V1ALPHA1.path(namespace, name), created)
    updated["status"] = {"jobDeploymentStatus": "Suspended", "jobStatus": ""}
    control_plane.request("PUT", RAYJOBS_V1ALPHA1.path(namespace, name, "status"), updated)
    as_v1 = control_plane.request("GET", v1.RAYJOBS.path(namespace, name))
    assert as_v1["spec"]["suspend"] is True
    assert as_v1["status"]["jobDeploymentStatus"] == "Suspended"
    back = control_plane.request("GET", RAYJOBS_V1ALPHA1.path(namespace, name))
    assert (back["apiVersion"], back["spec"], back["status"]) == (
        "ray.io/v1alpha1", as_v1["spec"], as_v1["status"],
    )  # fmt: skip

    done = subprocess.run(
        [*kubectl, "get", "rayjobs.v1alpha1.ray.io", "-n", namespace],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert "deprecated" in done.stderr
    assert name in done.stdout


@pytest.fixture
def operator_namespace(control_plane: controlplane.ControlPlane) -> Iterator[str]:
    """config/default's namespace: a server-side dry run cannot both create and use it."""
    try:
        control_plane.request(
            "POST", "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}},
        )  # fmt: skip
        created = True
    except controlplane.ApiError as exc:
        if exc.status != 409:
            raise
        created = False
    yield OPERATOR_NAMESPACE
    if created:
        control_plane.request("DELETE", f"/api/v1/namespaces/{OPERATOR_NAMESPACE}")


def test_default_kustomization_applies_with_server_dry_run(
    kubectl: list[str], operator_namespace: str
) -> None:
    done = subprocess.run(
        [*kubectl, "apply", "--dry-run=server", "-k", str(ROOT / "config/default")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    applied = done.stdout
    for expected in (
        "customresourcedefinition.apiextensions.k8s.io/rayclusters.ray.io",
        "customresourcedefinition.apiextensions.k8s.io/rayservices.ray.io",
        "customresourcedefinition.apiextensions.k8s.io/rayjobs.ray.io",
        "customresourcedefinition.apiextensions.k8s.io/raycronjobs.ray.io",
        "serviceaccount/rayservice-operator-manager",
        "role.rbac.authorization.k8s.io/rayservice-operator-leader-election-role",
        "clusterrole.rbac.authorization.k8s.io/rayservice-operator-manager-role",
        "clusterrolebinding.rbac.authorization.k8s.io/rayservice-operator-manager-rolebinding",
        "rolebinding.rbac.authorization.k8s.io/rayservice-operator-leader-election-rolebinding",
        "deployment.apps/rayservice-operator-manager",
        f"namespace/{operator_namespace}",
    ):
        assert expected in applied, applied
