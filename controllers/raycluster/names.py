"""Names and labels of everything the RayCluster controller creates.

The rules are KubeRay v1.7.0's, so a cluster moved from KubeRay gets objects of the
same names:

- **head service** ``<cluster>-head-svc``, or ``headGroupSpec.headService.metadata.name``
  when the user's Service template names one (:func:`head_service_name_for`); never
  shortened (a cluster name is at most :data:`MAX_CLUSTER_NAME_LENGTH` characters, so
  the longest suffix, ``-serve-svc``, still fits in 63);
- **serve service** ``<cluster>-serve-svc``; **multi-host worker service**
  ``<cluster>-headless``;
- **pods** are created with ``metadata.generateName`` (the API server appends 5
  random characters): ``<cluster>-head-`` and ``<cluster>-<group>-worker-``, the part
  before ``-head``/``-worker`` cut to its first 50 characters and lower-cased, so a
  generated name never exceeds 63;
- **autoscaler ServiceAccount, Role and RoleBinding** are named after the cluster
  (or the head template's ``serviceAccountName``), passed through :func:`clip` (KubeRay's
  ``CheckName``: the *last* 50 characters, a leading digit or punctuation mark
  replaced by ``r``);
- the ``ray.io/identifier`` label is ``<cluster>-head`` / ``<cluster>-worker``
  through :func:`clip_label` (the last 63 characters).

The checks that make a cluster impossible are in
:mod:`controllers.raycluster.validation`.

>>> head_service_name("demo"), head_pod_prefix("demo"), worker_pod_prefix("demo", "small")
('demo-head-svc', 'demo-head-', 'demo-small-worker-')
>>> len(worker_pod_prefix("c" * 53, "g" * 40) + "xxxxx")
63
>>> clip("7-up"), clip("x" * 49 + "yz") == "x" * 48 + "yz"
('r-up', True)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from api import v1

__all__ = [
    "APP_NAME",
    "CLUSTER_LABEL",
    "CREATED_BY",
    "CREATED_BY_LABEL",
    "DEFAULT_NAMESPACE",
    "ENABLE_SERVE_SERVICE_ANNOTATION",
    "EXTERNAL_STORAGE_NS_ANNOTATION",
    "FT_ENABLED_ANNOTATION",
    "GROUP_LABEL",
    "HEADLESS_SERVICE_LABEL",
    "HEAD_GROUP",
    "HOST_INDEX_LABEL",
    "IDENTIFIER_LABEL",
    "IS_RAY_NODE_LABEL",
    "KUBERAY_VERSION_ANNOTATION",
    "MAX_CLUSTER_NAME_LENGTH",
    "NAME_LABEL",
    "NODE_TYPE_LABEL",
    "ORIGINATED_FROM_CRD_LABEL",
    "ORIGINATED_FROM_NAME_LABEL",
    "OVERWRITE_CONTAINER_CMD_ANNOTATION",
    "REPLICA_INDEX_LABEL",
    "REPLICA_NAME_LABEL",
    "SERVE_LABEL",
    "SERVE_PORT_NAME",
    "clip",
    "clip_label",
    "has_serve_port",
    "head_fqdn",
    "head_pod_prefix",
    "head_service_name",
    "head_service_name_for",
    "headless_service_name",
    "identifier",
    "is_serving_port",
    "name_of",
    "namespace_of",
    "serve_service_name",
    "worker_pod_prefix",
]

# --- label and annotation keys (KubeRay's) ---------------------------------------------------
CLUSTER_LABEL = "ray.io/cluster"
NODE_TYPE_LABEL = "ray.io/node-type"
GROUP_LABEL = "ray.io/group"
IDENTIFIER_LABEL = "ray.io/identifier"
IS_RAY_NODE_LABEL = "ray.io/is-ray-node"
SERVE_LABEL = "ray.io/serve"
SERVE_PORT_NAME = "serve"
"""The container port the serve service targets (KubeRay's name)."""
"""On pods of a RayService's cluster: whether the pod takes serve traffic."""
HEADLESS_SERVICE_LABEL = "ray.io/headless-worker-svc"
ORIGINATED_FROM_NAME_LABEL = "ray.io/originated-from-cr-name"
ORIGINATED_FROM_CRD_LABEL = "ray.io/originated-from-crd"
"""On a RayCluster made by a RayService (``RayService``) or RayJob (``RayJob``)."""
REPLICA_NAME_LABEL = "ray.io/worker-group-replica-name"
REPLICA_INDEX_LABEL = "ray.io/worker-group-replica-index"
HOST_INDEX_LABEL = "ray.io/replica-host-index"
NAME_LABEL = "app.kubernetes.io/name"
CREATED_BY_LABEL = "app.kubernetes.io/created-by"

FT_ENABLED_ANNOTATION = "ray.io/ft-enabled"
EXTERNAL_STORAGE_NS_ANNOTATION = "ray.io/external-storage-namespace"
OVERWRITE_CONTAINER_CMD_ANNOTATION = "ray.io/overwrite-container-cmd"
ENABLE_SERVE_SERVICE_ANNOTATION = "ray.io/enable-serve-service"
KUBERAY_VERSION_ANNOTATION = "ray.io/kuberay-version"

APP_NAME = "kuberay"
"""The value of ``app.kubernetes.io/name`` on everything created (KubeRay's)."""
CREATED_BY = "kuberay-operator"
"""The ``app.kubernetes.io/created-by`` value of everything created: KubeRay's own. Head
Services select on it (KubeRay's and ours), so pods we create for a cluster KubeRay made
match the Services it made, and the other way round when KubeRay takes a cluster back;
who wrote an object is in its ``managedFields`` (field manager ``rayservice-operator``)."""
HEAD_GROUP = "headgroup"
"""The ``ray.io/group`` value of the head pod."""
MANAGED_BY = "ray.io/kuberay-operator"
"""The ``spec.managedBy`` value KubeRay reconciles (as does this operator, its stand-in)."""

MAX_CLUSTER_NAME_LENGTH = 53
"""63 minus the longest service suffix (``-serve-svc``)."""
DEFAULT_NAMESPACE = "default"

_POD_PREFIX_MAX = 50  # 63 - len("-worker-") - 5 generated characters
_CLIP_MAX = 50
_LABEL_MAX = 63
_PUNCTUATION = frozenset("!\"#%&'()*,-./:;?@[\\]_{}")  # Go's unicode.IsPunct on ASCII


def head_service_name(cluster_name: str) -> str:
    """The default head service name: ``<cluster>-head-svc``."""
    return f"{cluster_name}-head-svc"


def head_service_name_for(cluster: v1.RayCluster) -> str:
    """The head service's name: the ``headService`` template's name if it sets one."""
    custom = (cluster.spec.head_group_spec.head_service or {}).get("metadata") or {}
    return str(custom.get("name") or head_service_name(name_of(cluster)))


def serve_service_name(cluster_name: str) -> str:
    """``<cluster>-serve-svc`` (the serve service of a cluster annotated for it)."""
    return f"{cluster_name}-serve-svc"


def headless_service_name(cluster_name: str) -> str:
    """``<cluster>-headless`` (peer DNS for multi-host worker groups)."""
    return f"{cluster_name}-headless"


def head_pod_prefix(cluster_name: str) -> str:
    """The head pod's ``generateName``."""
    return _pod_prefix(cluster_name, "head")


def worker_pod_prefix(cluster_name: str, group_name: str) -> str:
    """A worker pod's ``generateName``."""
    return _pod_prefix(f"{cluster_name}-{group_name}", "worker")


def _pod_prefix(prefix: str, node_type: str) -> str:
    return f"{prefix[:_POD_PREFIX_MAX]}-{node_type}-".lower()


def identifier(cluster_name: str, node_type: str) -> str:
    """The ``ray.io/identifier`` label value: ``<cluster>-<node type>``, clipped to a label."""
    return clip_label(f"{cluster_name}-{node_type}")


def clip(name: str) -> str:
    """KubeRay's ``CheckName``: keep the last 50 characters; no leading digit or punctuation.

    >>> clip("ok"), clip("-x"), clip("a" * 49 + "bc")
    ('ok', 'rx', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaabc')
    """
    if len(name) > _CLIP_MAX:
        name = name[len(name) - _CLIP_MAX :]
    if name[:1].isdigit():
        name = "r" + name[1:]
    if name[:1] in _PUNCTUATION:
        name = "r" + name[1:]
    return name


def clip_label(value: str) -> str:
    """KubeRay's ``CheckLabel``: keep the last 63 characters; no leading punctuation.

    >>> clip_label("x" * 70) == "x" * 63, clip_label("-a")
    (True, 'ra')
    """
    if len(value) > _LABEL_MAX:
        value = value[len(value) - _LABEL_MAX :]
    if value[:1] in _PUNCTUATION:
        value = "r" + value[1:]
    return value


def namespace_of(cluster: v1.RayCluster) -> str:
    """The cluster's namespace (``default`` when the object carries none, as in tests)."""
    return str(cluster.metadata.get("namespace") or DEFAULT_NAMESPACE)


def head_fqdn(cluster: v1.RayCluster, cluster_domain: str = "cluster.local") -> str:
    """``<head service>.<namespace>.svc.<cluster domain>``: where workers find the head.

    >>> head_fqdn(v1.RayCluster.model_validate({"metadata": {"name": "a", "namespace": "ns"},
    ...                                         "spec": {"headGroupSpec": {"template": {}}}}))
    'a-head-svc.ns.svc.cluster.local'
    """
    return f"{head_service_name_for(cluster)}.{namespace_of(cluster)}.svc.{cluster_domain}"


def name_of(cluster: v1.RayCluster) -> str:
    """The cluster's ``metadata.name`` (empty when the object carries none)."""
    return str(cluster.metadata.get("name") or "")


def is_serving_port(name: Any) -> bool:
    """Whether a port name is a Ray Serve one: ``serve``, or ``serve-<something>`` (KubeRay
    v1.7.0, e.g. ``serve-grpc``).

    >>> is_serving_port("serve"), is_serving_port("serve-grpc"), is_serving_port("server")
    (True, True, False)
    """
    return isinstance(name, str) and (
        name == SERVE_PORT_NAME or name.startswith(SERVE_PORT_NAME + "-")
    )


def has_serve_port(ports: Any) -> bool:
    """Whether a list of container or Service ports has a serving one (:func:`is_serving_port`).

    >>> has_serve_port([{"name": "serve", "containerPort": 8000}]), has_serve_port(None)
    (True, False)
    >>> has_serve_port([{"name": "serve-grpc", "containerPort": 9000}])
    True
    """
    return isinstance(ports, list) and any(
        isinstance(port, Mapping) and is_serving_port(port.get("name")) for port in ports
    )
