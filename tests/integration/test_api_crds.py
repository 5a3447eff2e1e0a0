"""The generated CRDs on the real API server: samples and KubeRay YAML accepted, bad input refused.

Also checks that ``kubectl apply --dry-run=server -k config/default`` (CRDs, RBAC,
manager) is accepted as a whole.
"""

from __future__ import annotations

import copy
import pathlib
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

import api.v1 as v1
from runtime.testing import controlplane

ROOT = pathlib.Path(__file__).parents[2]
CRD_DIR = ROOT / "config/crd/bases"
SAMPLES = sorted(
    p for p in (ROOT / "config/samples").glob("*.yaml") if p.name != "kustomization.yaml"
)
KUBERAY = sorted((ROOT / "tests/unit/api/v1/testdata").glob("kuberay_*.yaml"))
MODELS = {"RayCluster": v1.RayCluster, "RayService": v1.RayService}
RESOURCES = {"RayCluster": v1.RAYCLUSTERS, "RayService": v1.RAYSERVICES}
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


def test_kuberay_status_is_accepted_by_the_status_subresource(
    control_plane: controlplane.ControlPlane, namespace: str
) -> None:
    doc = load(KUBERAY[0])
    assert doc["kind"] == "RayService"
    assert doc["status"]
    stored = create(control_plane, namespace, doc)
    stored["status"] = doc["status"]
    path = v1.RAYSERVICES.path(namespace, doc["metadata"]["name"], "status")
    written = control_plane.request("PUT", path, stored)
    assert contains(written["status"], doc["status"])
    status = v1.RayService.model_validate(written).status
    assert status.to_api() == v1.RayServiceStatus.model_validate(doc["status"]).to_api()


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
    for plural in ("rayservices", "rayclusters"):
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
        "serviceaccount/rayservice-operator-manager",
        "role.rbac.authorization.k8s.io/rayservice-operator-leader-election-role",
        "clusterrole.rbac.authorization.k8s.io/rayservice-operator-manager-role",
        "clusterrolebinding.rbac.authorization.k8s.io/rayservice-operator-manager-rolebinding",
        "rolebinding.rbac.authorization.k8s.io/rayservice-operator-leader-election-rolebinding",
        "deployment.apps/rayservice-operator-manager",
        f"namespace/{operator_namespace}",
    ):
        assert expected in applied, applied
