"""The in-tree autoscaler: its head-pod sidecar and its RBAC, as KubeRay v1.7.0 builds them.

With ``spec.enableInTreeAutoscaling: true`` KubeRay

- runs ``ray start --head`` with ``--no-monitor`` and appends to the head pod the
  container ``autoscaler`` (:func:`sidecar`): the Ray container's image, pull policy
  ``IfNotPresent``, ``/bin/bash -c -- "ray kuberay-autoscaler --cluster-name
  $(RAY_CLUSTER_NAME) --cluster-namespace $(RAY_CLUSTER_NAMESPACE)"``, env
  ``RAY_CLUSTER_NAME`` (the pod's ``ray.io/cluster`` label), ``RAY_CLUSTER_NAMESPACE``,
  ``RAY_HEAD_POD_NAME`` (downward API), ``KUBERAY_CRD_VER=v1`` and
  ``KUBERAY_GEN_AUTOSCALER_START_CMD`` (the generated command, for a user's own
  ``args`` to run), 500m CPU and 512Mi (requests = limits); with token authentication
  (KubeRay v1.6+) also the auth env vars (:func:`controllers.raycluster.auth.configure_container`).
  ``autoscalerOptions`` override the image, pull policy, resources (replaced as a whole),
  security context, command and args (each when non-empty), and append env, envFrom and
  volume mounts. ``idleTimeoutSeconds`` and ``upscalingMode`` are read by the autoscaler
  itself from the RayCluster, not put into the pod;
- shares an ``emptyDir`` ``ray-logs`` at ``/tmp/ray`` between the Ray container and
  the sidecar (:data:`LOG_VOLUME`; the pod builder adds it);
- sets the head pod's ``serviceAccountName`` (:func:`service_account_name`);
- with ``autoscalerOptions.version: v2``: the head's Ray container gets
  ``RAY_enable_autoscaler_v2=true`` and every pod ``restartPolicy: Never``; with
  ``version: v1`` (only when given) ``RAY_enable_autoscaler_v2=false``;
- creates a ServiceAccount (only when the head template names none: a named one is
  the user's to create), a Role (pods: get, list, watch, patch; pods/resize: patch;
  rayclusters: get, patch) and a RoleBinding, all named after the cluster through
  :func:`controllers.raycluster.names.clip` (:func:`rbac_objects`).

One difference, on purpose: KubeRay's Role lets the head pod's account get and patch
**every** RayCluster of the namespace; here the ``rayclusters`` rule names the cluster
(``resourceNames``), which is all the autoscaler reads and patches (``rayclusters/<its
name>``), so code in one cluster's head cannot rewrite another cluster's spec. The pod
rules stay namespace-wide: the autoscaler lists the cluster's pods by label, and
patches (``ray.io/ippr-status``) and resizes pods by names that do not exist yet when
the Role is made. A Role that already exists (one KubeRay made) is never rewritten:
deleted, it is made again, narrowed, at the cluster's next pass.

>>> cluster = v1.RayCluster.model_validate({
...     "metadata": {"name": "auto", "namespace": "ns"},
...     "spec": {"enableInTreeAutoscaling": True, "autoscalerOptions": {"image": "my/as:1"},
...              "headGroupSpec": {"template": {"spec": {"containers": [{"image": "ray"}]}}}},
... })
>>> sidecar(cluster, "ray")["image"], [o["kind"] for o in rbac_objects(cluster)]
('my/as:1', ['ServiceAccount', 'Role', 'RoleBinding'])
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from api import v1
from controllers.raycluster import auth, containerenv, names
from runtime.client import resources

__all__ = [
    "CONTAINER_NAME",
    "LOG_VOLUME",
    "ROLES",
    "ROLE_BINDINGS",
    "SERVICE_ACCOUNTS",
    "enabled",
    "is_v1",
    "is_v2",
    "rbac_objects",
    "role",
    "role_binding",
    "service_account",
    "service_account_name",
    "sidecar",
]

SERVICE_ACCOUNTS = resources.default_registry.for_kind("v1", "ServiceAccount")
ROLES = resources.default_registry.for_kind("rbac.authorization.k8s.io/v1", "Role")
ROLE_BINDINGS = resources.default_registry.for_kind("rbac.authorization.k8s.io/v1", "RoleBinding")

CONTAINER_NAME = "autoscaler"
LOG_VOLUME = ("ray-logs", "/tmp/ray")
"""The volume name and mount path shared by the Ray container and the sidecar."""

_POD_RULES = (
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["pods/resize"], "verbs": ["patch"]},
)


def enabled(cluster: v1.RayCluster) -> bool:
    """Whether the cluster runs the in-tree autoscaler."""
    return bool(cluster.spec.enable_in_tree_autoscaling)


def is_v1(cluster: v1.RayCluster) -> bool:
    """Whether ``autoscalerOptions.version`` explicitly asks for autoscaler v1."""
    return (cluster.spec.autoscaler_options or {}).get("version") == "v1"


def is_v2(cluster: v1.RayCluster) -> bool:
    """Whether ``autoscalerOptions.version`` asks for autoscaler v2."""
    return (cluster.spec.autoscaler_options or {}).get("version") == "v2"


def sidecar(cluster: v1.RayCluster, ray_image: Any) -> dict[str, Any]:
    """The autoscaler container for the head pod (``ray_image``: the Ray container's image)."""
    start = (
        "ray kuberay-autoscaler --cluster-name $(RAY_CLUSTER_NAME) "
        "--cluster-namespace $(RAY_CLUSTER_NAMESPACE)"
    )
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": ray_image,
        "imagePullPolicy": "IfNotPresent",
        "env": [
            containerenv.field("RAY_CLUSTER_NAME", f"metadata.labels['{names.CLUSTER_LABEL}']"),
            containerenv.field("RAY_CLUSTER_NAMESPACE", "metadata.namespace"),
            containerenv.field("RAY_HEAD_POD_NAME", "metadata.name"),
            {"name": "KUBERAY_CRD_VER", "value": "v1"},
            {"name": "KUBERAY_GEN_AUTOSCALER_START_CMD", "value": start},
        ],
        "command": ["/bin/bash", "-c", "--"],
        "args": [start],
        "resources": {
            "limits": {"cpu": "500m", "memory": "512Mi"},
            "requests": {"cpu": "500m", "memory": "512Mi"},
        },
    }
    if auth.token_enabled(cluster.spec):  # before the user's options, as KubeRay v1.7.0
        auth.configure_container(cluster, container)
    options = copy.deepcopy(cluster.spec.autoscaler_options or {})
    for key in ("resources", "image", "imagePullPolicy", "securityContext"):
        if options.get(key) is not None:
            container[key] = options[key]
    for key in ("env", "envFrom", "volumeMounts"):
        extra = options.get(key)
        if isinstance(extra, list) and extra:
            container[key] = [*container.get(key, []), *extra]
    for key in ("command", "args"):
        if isinstance(options.get(key), list) and options[key]:
            container[key] = options[key]
    if not container.get("image"):
        container.pop("image", None)
    if not container.get("imagePullPolicy"):
        container.pop("imagePullPolicy", None)
    return container


def _template_account(cluster: v1.RayCluster) -> str:
    spec = cluster.spec.head_group_spec.template.get("spec")
    return str((spec if isinstance(spec, Mapping) else {}).get("serviceAccountName") or "")


def _cluster_name(cluster: v1.RayCluster) -> str:
    return str(cluster.metadata.get("name") or "")


def service_account_name(cluster: v1.RayCluster) -> str:
    """The head pod's service account: the template's, else the cluster's name; clipped."""
    return names.clip(_template_account(cluster) or _cluster_name(cluster))


def _labels(cluster: v1.RayCluster, created_by: str) -> dict[str, str]:
    return {
        names.CLUSTER_LABEL: _cluster_name(cluster),
        names.NAME_LABEL: names.APP_NAME,
        names.CREATED_BY_LABEL: created_by,
    }


def _metadata(cluster: v1.RayCluster, name: str, created_by: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": names.namespace_of(cluster),
        "labels": _labels(cluster, created_by),
    }


def service_account(
    cluster: v1.RayCluster, *, created_by: str = names.CREATED_BY
) -> dict[str, Any] | None:
    """The autoscaler's ServiceAccount; ``None`` when the head template names its own
    (KubeRay then expects the user to have created it)."""
    if _template_account(cluster):
        return None
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _metadata(cluster, service_account_name(cluster), created_by),
    }


def role(cluster: v1.RayCluster, *, created_by: str = names.CREATED_BY) -> dict[str, Any]:
    """The Role that lets the autoscaler read and patch the namespace's pods and this
    RayCluster (by name: no other)."""
    own = {
        "apiGroups": ["ray.io"],
        "resources": ["rayclusters"],
        "resourceNames": [_cluster_name(cluster)],
        "verbs": ["get", "patch"],
    }
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _metadata(cluster, names.clip(_cluster_name(cluster)), created_by),
        "rules": [*copy.deepcopy(list(_POD_RULES)), own],
    }


def role_binding(cluster: v1.RayCluster, *, created_by: str = names.CREATED_BY) -> dict[str, Any]:
    """The RoleBinding of :func:`role` to the head pod's service account."""
    name = names.clip(_cluster_name(cluster))
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _metadata(cluster, name, created_by),
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": service_account_name(cluster),
                "namespace": names.namespace_of(cluster),
            }
        ],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
    }


def rbac_objects(
    cluster: v1.RayCluster, *, created_by: str = names.CREATED_BY
) -> list[dict[str, Any]]:
    """ServiceAccount (when :func:`service_account` makes one), Role, RoleBinding; ``[]``
    when autoscaling is off."""
    if not enabled(cluster):
        return []
    account = service_account(cluster, created_by=created_by)
    objects = [account] if account is not None else []
    return [
        *objects,
        role(cluster, created_by=created_by),
        role_binding(cluster, created_by=created_by),
    ]
