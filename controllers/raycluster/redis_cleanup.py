"""GCS fault tolerance with Redis: the clean-up finalizer and its Job, as KubeRay v1.7.0.

A RayCluster with GCS fault tolerance on (``gcsFaultToleranceOptions``, or the
``ray.io/ft-enabled: "true"`` annotation) and the Redis backend keeps its GCS state in
Redis under a *storage namespace* (:func:`storage_namespace`: the options'
``externalStorageNamespace``, else the ``ray.io/external-storage-namespace``
annotation, else the cluster's uid). Nothing in Kubernetes deletes those keys when the
cluster goes, so the operator holds the cluster with the finalizer :data:`FINALIZER`
until a Job has removed them (KubeRay issue #1286: every RayService upgrade otherwise
leaves a namespace of keys behind).

What this module decides (pure functions; :mod:`controllers.raycluster.reconciler`
does the writes):

- :func:`applies`: the finalizer is the operator's business for this cluster - fault
  tolerance on, backend Redis (not the embedded ``rocksdb`` one). With
  ``ENABLE_GCS_FT_REDIS_CLEANUP=false`` the reconciler never adds it and leaves
  existing ones alone (the user cleans Redis by hand), as KubeRay.
- :func:`job`: the clean-up Job ``<cluster>-redis-cleanup`` (name cut to 63 characters
  from the left, a leading punctuation mark replaced by ``r``): the head pod the cluster
  would get, minus every container but the Ray one (sidecars, the autoscaler), labelled
  ``ray.io/node-type: redis-cleanup`` (the Job's labels and annotations are the pod's,
  with ``app.kubernetes.io/created-by: kuberay-operator`` on the Job whatever the
  template says, so the cache sees it); the Ray container keeps image, env and mounts,
  runs ``/bin/bash -c --`` with one script that calls ``cleanup_redis_storage`` of
  ``ray._private.gcs_utils`` with the host, port, password (``$REDIS_PASSWORD``, else
  the URL's), username (``$REDIS_USERNAME`` only when the container sets it), TLS
  (``rediss://``) of the first address in ``$RAY_REDIS_ADDRESS`` and the storage
  namespace ``$RAY_external_storage_namespace``, exiting 1 when it reports failure; no
  probes; env ``RAY_redis_db_connect_retries=120`` and
  ``RAY_redis_db_connect_wait_milliseconds=500`` appended (at least a minute of
  retries); requests and limits exactly ``200m`` CPU and ``256Mi`` (no GPU);
  ``restartPolicy: Never``; ``backoffLimit: 0``, ``activeDeadlineSeconds: 300``, no
  ``ttlSecondsAfterFinished``; controlled by the RayCluster (the garbage collector
  removes it with the cluster).
- :func:`finished`: a Job is done when ``Complete``, ``Failed`` or ``FailureTarget``
  (the condition a deadline sets tens of seconds before ``Failed``) is ``True``.
- :func:`deletion_timeout`: the ``ray.io/gcs-ft-deletion-timeout`` annotation
  (positive whole seconds), else 300 s; past it, the finalizer is removed whatever the
  Job does, with a Warning ``ForceDeletedStuckCluster`` (KubeRay #4767, PR #4836).

The Jobs are read from the manager's cache, which holds only Jobs labelled
``app.kubernetes.io/created-by: kuberay-operator`` (:data:`CACHE_SELECTOR`, KubeRay's own
Job filter); the Job carries the head pod's labels, that one included.

>>> cluster = v1.RayCluster.model_validate({
...     "metadata": {"name": "demo", "namespace": "ns", "uid": "u-1"},
...     "spec": {"gcsFaultToleranceOptions": {"redisAddress": "redis:6379"},
...              "headGroupSpec": {"template": {"spec": {"containers": [
...                  {"name": "ray-head", "image": "rayproject/ray:2.60.0"}]}}}}})
>>> applies(cluster), storage_namespace(cluster)
(True, 'u-1')
>>> cleanup = job(cluster)
>>> cleanup["metadata"]["name"], cleanup["spec"]["backoffLimit"]
('demo-redis-cleanup', 0)
>>> finished({"status": {"conditions": [{"type": "FailureTarget", "status": "True"}]}})
'Failed'
"""

from __future__ import annotations

import copy
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from api import v1
from controllers.raycluster import names, pods
from runtime.client import resources

__all__ = [
    "CACHE_SELECTOR",
    "CONNECT_ENV",
    "DEFAULT_DELETION_TIMEOUT",
    "DELETION_TIMEOUT_ANNOTATION",
    "ENABLE_ENV",
    "FINALIZER",
    "JOBS",
    "RESOURCES",
    "applies",
    "deletion_timeout",
    "finished",
    "ft_enabled",
    "job",
    "job_name",
    "job_selector",
    "script",
    "storage_namespace",
]

JOBS = resources.default_registry.for_kind("batch/v1", "Job")
"""Jobs, as the client and the cache name them."""

FINALIZER = "ray.io/gcs-ft-redis-cleanup-finalizer"
"""KubeRay's finalizer on a RayCluster whose Redis keys must go before it does."""

ENABLE_ENV = "ENABLE_GCS_FT_REDIS_CLEANUP"
"""The operator's environment variable: ``false`` (any case) turns the clean-up off."""

DELETION_TIMEOUT_ANNOTATION = "ray.io/gcs-ft-deletion-timeout"
"""On a RayCluster: seconds after its deletion began when the finalizer is forced off."""

DEFAULT_DELETION_TIMEOUT = 300.0
"""Seconds, when the annotation is absent or not a positive whole number that Go's
``strconv.Atoi`` reads (an optional sign and at most 19 ASCII digits, within int64)."""

MAX_DELETION_TIMEOUT = 365 * 86400.0
"""Seconds: a longer timeout (up to int64's) is clamped to a year, so that the wait is
a number every timer and date takes."""

CACHE_SELECTOR = f"{names.CREATED_BY_LABEL}={names.CREATED_BY}"
"""The Jobs the manager's cache holds (KubeRay v1.7.0's Job informer filter)."""

CONNECT_ENV = (
    {"name": "RAY_redis_db_connect_retries", "value": "120"},
    {"name": "RAY_redis_db_connect_wait_milliseconds", "value": "500"},
)
"""Appended to the Job's Ray container: 120 tries, 500 ms apart."""

RESOURCES = {
    "limits": {"cpu": "200m", "memory": "256Mi"},
    "requests": {"cpu": "200m", "memory": "256Mi"},
}
"""The Job's Ray container, whatever the head asks for (no GPU)."""

_ACTIVE_DEADLINE = 300
_LABEL_MAX = 63
_SECONDS = re.compile(r"[+-]?[0-9]{1,19}")
_BASH = ["/bin/bash", "-c", "--"]
_ROCKSDB = "rocksdb"


def ft_enabled(cluster: v1.RayCluster) -> bool:
    """GCS fault tolerance on: ``gcsFaultToleranceOptions`` set or ``ray.io/ft-enabled``
    ``true`` (any case)."""
    annotations = cluster.metadata.get("annotations") or {}
    flag = str(annotations.get(names.FT_ENABLED_ANNOTATION, "")).lower() == "true"
    return flag or cluster.spec.gcs_fault_tolerance_options is not None


def embedded(cluster: v1.RayCluster) -> bool:
    """The options name the embedded RocksDB backend (no Redis to clean)."""
    options = cluster.spec.gcs_fault_tolerance_options
    return options is not None and options.get("backend") == _ROCKSDB


def applies(cluster: v1.RayCluster) -> bool:
    """Fault tolerance on with the Redis backend: the finalizer belongs on the cluster."""
    return ft_enabled(cluster) and not embedded(cluster)


def storage_namespace(cluster: v1.RayCluster) -> str:
    """The Redis storage namespace of ``cluster`` (see the module docstring)."""
    options = cluster.spec.gcs_fault_tolerance_options or {}
    if options.get("externalStorageNamespace"):
        return str(options["externalStorageNamespace"])
    annotations = cluster.metadata.get("annotations") or {}
    if names.EXTERNAL_STORAGE_NS_ANNOTATION in annotations:
        return str(annotations[names.EXTERNAL_STORAGE_NS_ANNOTATION])
    return str(cluster.metadata.get("uid") or "")


def job_name(cluster_name: str) -> str:
    """``<cluster>-redis-cleanup``, kept to a valid 63-character label value.

    >>> job_name("x" * 60)[:4], len(job_name("x" * 60))
    ('xxxx', 63)
    >>> job_name("aaa-" + "b" * 48)[:2]
    'rb'
    """
    name = f"{cluster_name}-redis-cleanup"
    if len(name) > _LABEL_MAX:
        name = name[len(name) - _LABEL_MAX :]
    if unicodedata.category(name[0]).startswith("P"):
        name = "r" + name[1:]
    return name


def job_selector(cluster_name: str) -> str:
    """The labels of ``cluster_name``'s clean-up Job (and of its pods)."""
    return pods.selector(cluster_name, node_type=pods.REDIS_CLEANUP)


def script(*, with_username: bool) -> str:
    """The one argument of the Job's ``/bin/bash -c --``.

    >>> "cleanup_redis_storage(" in script(with_username=False)
    True
    >>> "username=" in script(with_username=False), "username=" in script(with_username=True)
    (False, True)
    """
    username = "username=os.getenv('REDIS_USERNAME', url.username), " if with_username else ""
    python = (
        "from ray._private.gcs_utils import cleanup_redis_storage; "
        "from urllib.parse import urlparse; "
        "import os; "
        "import sys; "
        "address = os.getenv('RAY_REDIS_ADDRESS', '').split(',')[0]; "
        "address = address if '://' in address else 'redis://' + address; "
        "url = urlparse(address); "
        "sys.exit(1) if not cleanup_redis_storage("
        "host=url.hostname, port=url.port, "
        f"{username}"
        "password=os.getenv('REDIS_PASSWORD', url.password or ''), "
        "use_ssl=url.scheme == 'rediss', "
        "storage_namespace=os.getenv('RAY_external_storage_namespace')) else None"
    )
    hint = (
        "echo \"Deleting this RayCluster's GCS storage namespace from Redis. If this fails, "
        "delete the keys by hand and remove the finalizer " + FINALIZER + ": see "
        'https://docs.ray.io/en/master/cluster/kubernetes/user-guides/kuberay-gcs-ft.html"'
    )
    return f'{hint} && python -c "{python}"'


def job(
    cluster: v1.RayCluster,
    *,
    cluster_domain: str = "cluster.local",
    created_by: str = names.CREATED_BY,
    defaults: pods.PodDefaults | None = None,
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The clean-up Job of ``cluster`` (see the module docstring), ready to POST.

    The head pod is built with the same arguments as the reconciler builds it.
    ``owner``: the raw RayCluster (with its uid), made the controller of the Job and of
    its pod template's metadata, as KubeRay's template carries the head pod's owner."""
    head = pods.head_pod(
        cluster,
        cluster_domain=cluster_domain,
        created_by=created_by,
        **({"defaults": defaults} if defaults is not None else {}),
    )
    meta = head["metadata"]
    meta["labels"][names.NODE_TYPE_LABEL] = pods.REDIS_CLEANUP
    spec = head["spec"]
    ray = spec["containers"][0]
    spec["containers"] = [ray]
    # mTLS (KubeRay's wait-for-tls-ip-san init container) is not built here: nothing to drop.
    env = ray.setdefault("env", [])
    with_username = any(e.get("name") == "REDIS_USERNAME" for e in env)
    ray["command"] = list(_BASH)
    ray["args"] = [script(with_username=with_username)]
    ray.pop("livenessProbe", None)
    ray.pop("readinessProbe", None)
    env.extend(copy.deepcopy(list(CONNECT_ENV)))
    ray["resources"] = copy.deepcopy(RESOURCES)
    spec["restartPolicy"] = "Never"
    if owner is not None:
        meta["ownerReferences"] = [_controller_reference(owner)]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(names.name_of(cluster)),
            "namespace": meta["namespace"],
            # The cache sees only Jobs with KubeRay's created-by, which a template may
            # have overridden on the pod: the Job itself always carries it.
            "labels": {**meta["labels"], names.CREATED_BY_LABEL: names.CREATED_BY},
            "annotations": dict(meta.get("annotations") or {}),
            **({"ownerReferences": [_controller_reference(owner)]} if owner else {}),
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": _ACTIVE_DEADLINE,
            "template": {"metadata": meta, "spec": spec},
        },
    }


def _controller_reference(owner: Mapping[str, Any]) -> dict[str, Any]:
    meta = owner["metadata"]
    return {
        "apiVersion": v1.RAYCLUSTERS.api_version,
        "kind": v1.RAYCLUSTERS.kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def finished(job_obj: Mapping[str, Any]) -> str | None:
    """``Complete`` or ``Failed`` once the Job is done (``FailureTarget`` counts as
    ``Failed``), else None."""
    for condition in (job_obj.get("status") or {}).get("conditions") or ():
        if condition.get("status") != "True":
            continue
        kind = condition.get("type")
        if kind in ("Complete", "Failed"):
            return str(kind)
        if kind == "FailureTarget":
            return "Failed"
    return None


def deletion_timeout(cluster: Mapping[str, Any]) -> float:
    """Seconds from the raw ``cluster``'s ``deletionTimestamp`` until the finalizer is forced.

    >>> deletion_timeout({"metadata": {"annotations": {DELETION_TIMEOUT_ANNOTATION: "20"}}})
    20.0
    >>> deletion_timeout({"metadata": {"annotations": {DELETION_TIMEOUT_ANNOTATION: "-1"}}})
    300.0
    >>> deletion_timeout({"metadata": {"annotations": {DELETION_TIMEOUT_ANNOTATION: "9" * 400}}})
    300.0
    """
    text = ((cluster.get("metadata") or {}).get("annotations") or {}).get(
        DELETION_TIMEOUT_ANNOTATION
    )
    seconds = int(text) if isinstance(text, str) and _SECONDS.fullmatch(text) else 0
    if not 0 < seconds < 2**63:  # Atoi refuses what int64 does not hold
        return DEFAULT_DELETION_TIMEOUT
    return min(float(seconds), MAX_DELETION_TIMEOUT)
