"""controllers/rayjob/cluster.py: the RayCluster, the head Service and the dashboard URL."""

# ruff: noqa: E501 (the tables read one case per line)
from __future__ import annotations

from typing import Any

import pytest

from api import v1
from controllers.rayjob import cluster, submitter

HEAD_CONTAINER = {"name": "ray-head", "image": "rayproject/ray:2.60.0"}
SPEC = {
    "rayVersion": "2.60.0",
    "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [HEAD_CONTAINER]}}},
    "workerGroupSpecs": [{"groupName": "w", "replicas": 2, "template": {"spec": {"containers": [{}]}}}],
}  # fmt: skip


def _job(**spec: Any) -> v1.RayJob:
    return v1.RayJob.model_validate(
        {
            "metadata": {"name": "pi", "namespace": "ml", "uid": "u1", "labels": {"team": "a"},
                         "annotations": {"note": "x"}},
            "spec": {"entrypoint": "python pi.py", "rayClusterSpec": SPEC, **spec},
            "status": {"jobId": "pi-abcde"},
        }
    )  # fmt: skip


OWNER = {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "pi", "uid": "u1",
         "controller": True, "blockOwnerDeletion": True}  # fmt: skip


def test_ray_cluster() -> None:
    manifest = cluster.ray_cluster(_job(), "pi-b4c5d")
    assert manifest == {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": "pi-b4c5d",
            "namespace": "ml",
            "labels": {"team": "a", "ray.io/originated-from-cr-name": "pi",
                       "ray.io/originated-from-crd": "RayJob",
                       "ray.io/job-submission-mode": "K8sJobMode"},
            "annotations": {"note": "x"},
            "ownerReferences": [OWNER],
        },
        "spec": SPEC,
    }  # fmt: skip
    assert manifest["spec"] is not SPEC
    v1.RayCluster.model_validate(manifest)


@pytest.mark.parametrize("restart", [False, True])
def test_sidecar_mode(restart: bool) -> None:
    job = _job(submissionMode="SidecarMode")
    manifest = cluster.ray_cluster(job, "pi-b4c5d", sidecar_restart=restart)
    assert manifest["metadata"]["annotations"] == {
        "note": "x",
        "ray.io/disable-provisioned-head-restart": "true",
    }
    assert manifest["metadata"]["labels"]["ray.io/job-submission-mode"] == "SidecarMode"
    pod = manifest["spec"]["headGroupSpec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    head, sidecar = pod["containers"]
    assert head == HEAD_CONTAINER
    expected = submitter.sidecar_container(
        job, v1.RayCluster.model_validate(cluster.ray_cluster(job, "pi-b4c5d")), restart=restart
    )
    assert sidecar == expected
    assert sidecar["name"] == "ray-job-submitter"
    assert SPEC["headGroupSpec"]["template"]["spec"]["containers"] == [HEAD_CONTAINER]  # type: ignore[index]


def test_sidecar_with_token_auth_reads_the_clusters_secret() -> None:
    spec = {**SPEC, "authOptions": {"mode": "token"}}
    manifest = cluster.ray_cluster(
        _job(submissionMode="SidecarMode", rayClusterSpec=spec), "pi-b4c5d"
    )
    sidecar = manifest["spec"]["headGroupSpec"]["template"]["spec"]["containers"][1]
    assert sidecar["env"][-1] == {
        "name": "RAY_AUTH_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "pi-b4c5d", "key": "auth_token"}},
    }


def test_ray_cluster_needs_a_spec() -> None:
    job = _job(rayClusterSpec=None, clusterSelector={"ray.io/cluster": "c"})
    with pytest.raises(ValueError, match="rayClusterSpec"):
        cluster.ray_cluster(job, "c")


def test_head_service() -> None:
    rc = v1.RayCluster.model_validate(cluster.ray_cluster(_job(), "pi-b4c5d"))
    svc = cluster.head_service(_job(), rc)
    assert svc["metadata"] == {
        "name": "pi-head-svc",
        "namespace": "ml",
        "labels": {"ray.io/originated-from-cr-name": "pi", "ray.io/originated-from-crd": "RayJob",
                   "ray.io/node-type": "head", "ray.io/identifier": "pi-head"},
        "ownerReferences": [OWNER],
    }  # fmt: skip
    assert svc["spec"]["selector"] == {
        "ray.io/cluster": "pi-b4c5d",
        "ray.io/node-type": "head",
        "ray.io/identifier": "pi-b4c5d-head",
        "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": "kuberay-operator",
    }
    assert [p["name"] for p in svc["spec"]["ports"]] == [
        "client", "dashboard", "gcs-server", "metrics", "serve",
    ]  # fmt: skip


def test_dashboard_url() -> None:
    rc = v1.RayCluster.model_validate(cluster.ray_cluster(_job(), "pi-b4c5d"))
    svc = {"metadata": {"name": "pi-b4c5d-head-svc", "namespace": "ml"},
           "spec": {"ports": [{"name": "client", "port": 10001}, {"name": "dashboard", "port": 8266}]}}  # fmt: skip
    assert (
        cluster.dashboard_url(rc, svc, "corp.local") == "pi-b4c5d-head-svc.ml.svc.corp.local:8266"
    )
    with pytest.raises(ValueError, match="no port named 'dashboard'"):
        cluster.dashboard_url(rc, {"metadata": {}, "spec": {"ports": []}}, "cluster.local")
