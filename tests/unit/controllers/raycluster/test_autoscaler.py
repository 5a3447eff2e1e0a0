"""The autoscaler sidecar, the head pod changes it brings, and its RBAC."""

from __future__ import annotations

from typing import Any

import pytest

from api import v1
from controllers.raycluster import autoscaler, pods

IMAGE = "rayproject/ray:2.46.0"


def make(
    options: dict[str, Any] | None = None,
    *,
    enabled: bool = True,
    name: str = "auto",
    head_spec: dict[str, Any] | None = None,
) -> v1.RayCluster:
    spec: dict[str, Any] = {
        "enableInTreeAutoscaling": enabled,
        "headGroupSpec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "ray-head", "image": IMAGE, "imagePullPolicy": "Always"}
                    ],
                    **(head_spec or {}),
                }
            }
        },
        "workerGroupSpecs": [
            {
                "groupName": "g",
                "template": {"spec": {"containers": [{"name": "w", "image": IMAGE}]}},
            }
        ],
    }
    if options is not None:
        spec["autoscalerOptions"] = options
    return v1.RayCluster.model_validate(
        {"metadata": {"name": name, "namespace": "ns"}, "spec": spec}
    )


START = (
    "ray kuberay-autoscaler --cluster-name $(RAY_CLUSTER_NAME) "
    "--cluster-namespace $(RAY_CLUSTER_NAMESPACE)"
)


def test_sidecar_defaults() -> None:
    assert autoscaler.sidecar(make(), IMAGE) == {
        "name": "autoscaler",
        "image": IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "env": [
            {
                "name": "RAY_CLUSTER_NAME",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['ray.io/cluster']"}},
            },
            {
                "name": "RAY_CLUSTER_NAMESPACE",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
            },
            {
                "name": "RAY_HEAD_POD_NAME",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
            },
            {"name": "KUBERAY_CRD_VER", "value": "v1"},
            {"name": "KUBERAY_GEN_AUTOSCALER_START_CMD", "value": START},
        ],
        "command": ["/bin/bash", "-c", "--"],
        "args": [START],
        "resources": {
            "limits": {"cpu": "500m", "memory": "512Mi"},
            "requests": {"cpu": "500m", "memory": "512Mi"},
        },
    }


def test_sidecar_options_override_and_append() -> None:
    options = {
        "image": "my/autoscaler:1",
        "imagePullPolicy": "Never",
        "resources": {"limits": {"cpu": "1"}},
        "securityContext": {"runAsNonRoot": True},
        "env": [{"name": "AUTOSCALER_UPDATE_INTERVAL_S", "value": "5"}],
        "envFrom": [{"configMapRef": {"name": "c"}}],
        "volumeMounts": [{"name": "tls", "mountPath": "/tls"}],
        "idleTimeoutSeconds": 120,
        "upscalingMode": "Conservative",
    }
    container = autoscaler.sidecar(make(options), IMAGE)
    assert container["image"] == "my/autoscaler:1"
    assert container["imagePullPolicy"] == "Never"
    assert container["resources"] == {"limits": {"cpu": "1"}}
    assert container["securityContext"] == {"runAsNonRoot": True}
    assert [e["name"] for e in container["env"]][-1] == "AUTOSCALER_UPDATE_INTERVAL_S"
    assert len(container["env"]) == 6
    assert container["envFrom"] == [{"configMapRef": {"name": "c"}}]
    assert container["volumeMounts"] == [{"name": "tls", "mountPath": "/tls"}]
    # read by the autoscaler from the RayCluster, not passed through the pod
    assert "120" not in str(container)
    assert "Conservative" not in str(container)
    # command and args stay KubeRay's unless given (KubeRay v1.7.0)
    assert (container["command"], container["args"]) == (["/bin/bash", "-c", "--"], [START])


def test_sidecar_command_and_args_override_when_given() -> None:
    options = {"command": ["sh", "-c"], "args": ["echo hi; $KUBERAY_GEN_AUTOSCALER_START_CMD"]}
    container = autoscaler.sidecar(make(options), IMAGE)
    assert container["command"] == ["sh", "-c"]
    assert container["args"] == ["echo hi; $KUBERAY_GEN_AUTOSCALER_START_CMD"]
    empty = autoscaler.sidecar(make({"command": [], "args": []}), IMAGE)
    assert (empty["command"], empty["args"]) == (["/bin/bash", "-c", "--"], [START])


@pytest.mark.parametrize(("version", "value"), [("v1", "false"), ("v2", "true"), (None, None)])
def test_autoscaler_version_env_on_the_head(version: str | None, value: str | None) -> None:
    """KubeRay v1.7.0 sets RAY_enable_autoscaler_v2 for an explicit v1 too (to false)."""
    options = {"version": version} if version else None
    pod = pods.head_pod(make(options))
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env.get("RAY_enable_autoscaler_v2") == value


def test_head_pod_with_autoscaler() -> None:
    pod = pods.head_pod(make())
    ray, side = pod["spec"]["containers"]
    assert side["name"] == "autoscaler"
    assert side["image"] == IMAGE
    assert pod["spec"]["serviceAccountName"] == "auto"
    assert "--no-monitor" in ray["args"][0]
    assert pod["spec"]["volumes"] == [
        {"name": "shared-mem", "emptyDir": {"medium": "Memory"}},
        {"name": "ray-logs", "emptyDir": {}},
    ]
    assert ray["volumeMounts"] == [
        {"name": "shared-mem", "mountPath": "/dev/shm"},
        {"name": "ray-logs", "mountPath": "/tmp/ray"},
    ]
    assert side["volumeMounts"] == [{"name": "ray-logs", "mountPath": "/tmp/ray"}]
    # the sidecar gets no probes and no Ray env
    assert "readinessProbe" not in side
    assert "restartPolicy" not in pod["spec"]
    assert not any(e["name"] == "RAY_enable_autoscaler_v2" for e in ray["env"])


def test_autoscaler_v2_env_and_restart_policy() -> None:
    cluster = make({"version": "v2"})
    head = pods.head_pod(cluster)
    ray = head["spec"]["containers"][0]
    assert ray["env"][0] == {"name": "RAY_enable_autoscaler_v2", "value": "true"}
    assert head["spec"]["restartPolicy"] == "Never"
    groups = cluster.spec.worker_group_specs or []
    assert pods.worker_pod(cluster, groups[0])["spec"]["restartPolicy"] == "Never"
    v1_cluster = make({"version": "v1"})
    assert "restartPolicy" not in pods.worker_pod(v1_cluster, groups[0])["spec"]


def test_no_sidecar_without_autoscaling() -> None:
    cluster = make({"version": "v2"}, enabled=False)
    pod = pods.head_pod(cluster)
    assert len(pod["spec"]["containers"]) == 1
    assert "serviceAccountName" not in pod["spec"]
    assert "--no-monitor" not in pod["spec"]["containers"][0]["args"][0]
    assert autoscaler.rbac_objects(cluster) == []


def test_rbac_objects() -> None:
    account, role, binding = autoscaler.rbac_objects(make(), created_by="op")
    labels = {
        "ray.io/cluster": "auto",
        "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": "op",
    }
    meta = {"name": "auto", "namespace": "ns", "labels": labels}
    assert account == {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}
    assert role == {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": meta,
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": [""], "resources": ["pods/resize"], "verbs": ["patch"]},
            # KubeRay's rule has no resourceNames: every RayCluster of the namespace.
            {"apiGroups": ["ray.io"], "resources": ["rayclusters"], "resourceNames": ["auto"],
             "verbs": ["get", "patch"]},
        ],
    }  # fmt: skip
    assert binding == {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": meta,
        "subjects": [{"kind": "ServiceAccount", "name": "auto", "namespace": "ns"}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "auto"},
    }


def test_user_service_account_is_not_created_but_bound() -> None:
    cluster = make(head_spec={"serviceAccountName": "mine"})
    objects = autoscaler.rbac_objects(cluster)
    assert [o["kind"] for o in objects] == ["Role", "RoleBinding"]
    assert objects[1]["subjects"][0]["name"] == "mine"
    assert pods.head_pod(cluster)["spec"]["serviceAccountName"] == "mine"


def test_long_cluster_names_are_clipped_from_the_front() -> None:
    name = "a" * 3 + "b" * 50  # 53 characters, the longest allowed
    account, role, binding = autoscaler.rbac_objects(make(name=name))
    assert account["metadata"]["name"] == "b" * 50
    assert role["metadata"]["name"] == "b" * 50
    assert binding["roleRef"]["name"] == "b" * 50
    assert role["metadata"]["labels"]["ray.io/cluster"] == name
    assert role["rules"][-1]["resourceNames"] == [name], "the RayCluster's own name, unclipped"
    assert pods.head_pod(make(name=name))["spec"]["serviceAccountName"] == "b" * 50
