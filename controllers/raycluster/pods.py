"""The head and worker pods of a RayCluster, exactly as KubeRay v1.7.0 builds them.

Pure functions: a :class:`api.v1.RayCluster` in, a Pod (plain camelCase JSON, ready to
POST, with ``metadata.generateName`` and no owner reference: the reconciler sets
that) out. The input is never modified (templates are deep-copied first).

What KubeRay does to the pod template, and so what these builders do, in order:

1. **metadata**: ``generateName`` (:mod:`~controllers.raycluster.names`), the
   cluster's namespace; labels = KubeRay's (``ray.io/is-ray-node=yes``,
   ``ray.io/cluster``, ``ray.io/node-type``, ``ray.io/group`` (``headgroup`` for the
   head), ``ray.io/identifier``, ``app.kubernetes.io/name=kuberay``,
   ``app.kubernetes.io/created-by=<created_by>``), overridden by the template's
   labels and the group's ``labels`` except the cluster, node type and group keys;
   on a RayService's cluster (the RayCluster label ``ray.io/originated-from-crd:
   RayService``) also ``ray.io/serve`` (``false`` on the head, ``true`` on
   workers); on workers the replica labels of KubeRay's ``RayMultiHostIndexing``
   (:func:`replica_slots`). Annotations: the template's, plus ``ray.io/ft-enabled`` and
   ``ray.io/kuberay-version`` on the head and ``ray.io/overwrite-container-cmd`` when the
   RayCluster carries it. (KubeRay v1.7.0 also writes
   ``ray.io/upgrade-strategy-recreate-hash`` on the head, a hash of Go's JSON of the
   spec that nothing here can reproduce: it is left out, and KubeRay then skips its
   ``Recreate`` check for that pod.)
2. **the Ray container** is ``containers[0]``. Its command becomes ``/bin/bash -c --``
   with the single argument ``ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}; ray start
   [--head] <flags>``, unless the
   command or args already contain ``ray start`` or the overwrite annotation is
   ``true`` (then the user's command stays); a user command without ``ray start``
   runs first: ``<cmd> && ulimit ...``.
3. **flags** (:func:`ray_start_command`): ``rayStartParams``, plus the group's
   ``resources`` (``cpu``/``memory``/GPU keys become ``--num-cpus``/``--memory``/
   ``--num-gpus``, the rest a JSON ``--resources``) and ``labels`` (``--labels``),
   plus defaults when absent: ``--dashboard-host=0.0.0.0`` (head),
   ``--address=<head FQDN>:<port>`` (workers), ``--metrics-export-port=8080``,
   ``--dashboard-agent-listen-port=52365``, always ``--block``; ``--num-cpus`` from
   the container's CPU limit (else request), rounded up; ``--memory`` from its memory
   limit; ``--num-gpus`` from the first GPU limit; a TPU or Neuron-core limit goes into
   ``--resources``; ``--no-monitor`` with the autoscaler. Flags sorted by name, each
   written `` --name=value `` (``true``/``false`` values are bare switches, except
   ``log-color``, ``include-dashboard`` and ``include-log-monitor``), which is why the
   line has double spaces.
4. **env** appended after the user's: ``FQ_RAY_IP``/``RAY_IP`` (workers),
   ``RAY_CLUSTER_NAME``, ``RAY_CLUSTER_NAMESPACE``, ``RAY_CLOUD_INSTANCE_ID``,
   ``RAY_NODE_TYPE_NAME`` (downward API), ``KUBERAY_GEN_RAY_START_CMD``, then, where the
   user did not set them,
   ``RAY_PORT``, the RayService timeouts, ``RAY_ADDRESS``,
   ``RAY_USAGE_STATS_KUBERAY_IN_USE``, ``RAY_USAGE_STATS_EXTRA_TAGS`` (head, always),
   ``RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE``. GCS fault tolerance
   (``gcsFaultToleranceOptions`` or the ``ray.io/ft-enabled`` annotation) adds Redis
   settings to the head and a reconnect timeout to workers.
5. **ports**: the template's, plus ``metrics: 8080`` when no port is named ``metrics``
   (KubeRay adds no other port, also not ``serve``).
6. **probes**, each only when the user set none: for ``rayVersion`` 2.53.0 and later
   ``GET /api/healthz`` on the agent port, before that exec ``bash -c`` with ``wget``
   checks of the raylet (``:<agent port>/api/local_raylet_healthz``) and, on the head,
   the GCS (``:<dashboard port>/api/gcs_healthz``), the ports from ``rayStartParams``
   (``dashboard-agent-listen-port``, 52365; ``dashboard-port``, 8265); readiness delay
   10 s, period 5, failure 10; liveness delay 30 s, period 5, failure 120; timeouts 5 s
   (head) / 2 s (workers). A RayService worker's readiness probe is always the ``wget``
   checks plus the serve proxy's (``:<serve port>/-/healthz``) and fails after 1 failure.
7. **volumes**: a memory ``emptyDir`` ``shared-mem`` at ``/dev/shm`` (size limit: the
   container's memory limit, else request) unless something is mounted there or
   ``rayStartParams`` has a ``plasma-directory``.
8. **workers** get the init container ``wait-gcs-ready`` (the Ray container's image,
   pull policy, security context, env and mounts; 200m CPU, 256Mi; a ``ray
   health-check`` loop every 5 s); every init container gets ``FQ_RAY_IP``/``RAY_IP``.
9. **autoscaler** (``enableInTreeAutoscaling``): :mod:`~controllers.raycluster.autoscaler`
   adds the sidecar, ``serviceAccountName`` and a shared ``/tmp/ray`` volume; with
   ``autoscalerOptions.version: v2`` every pod gets ``restartPolicy: Never``, and the head
   ``RAY_enable_autoscaler_v2`` (``true``, or ``false`` for an explicit ``v1``).
10. **token authentication** (``authOptions.mode: token``, KubeRay v1.6+; as v1.7.0):
    :func:`controllers.raycluster.auth.configure_pod` adds ``RAY_AUTH_MODE`` and
    ``RAY_AUTH_TOKEN`` (or the Kubernetes token auth settings) to the Ray container, the
    ``wait-gcs-ready`` init container and the autoscaler sidecar, after the GCS fault
    tolerance settings and before the env vars of step 4.

Out of scope (KubeRay operator-level switches, left at their defaults):
``ENABLE_INIT_CONTAINER_INJECTION``, ``ENABLE_PROBES_INJECTION`` (both on),
``ENABLE_LOGIN_SHELL`` (off), ``ENABLE_DETERMINISTIC_HEAD_POD_NAME`` (off), batch
schedulers; what KubeRay v1.7.0's alpha gates add to pods (mTLS, the history server's
collector, embedded GCS storage; all off by default).

The operator's own defaults (KubeRay's ``Configuration`` file: ``headSidecarContainers``,
``workerSidecarContainers``, ``defaultContainerEnvs``, ``defaultPodAnnotations``,
``defaultPodLabels``) come in as :class:`PodDefaults` and are applied as KubeRay
applies them: the sidecars after the template's containers (before the autoscaler's),
the annotations and labels where the template has no such key (KubeRay's own labels
still win), the env vars on the Ray container where it has none of that name, before
KubeRay's.

>>> cluster = v1.RayCluster.model_validate({
...     "metadata": {"name": "demo", "namespace": "ns"},
...     "spec": {"headGroupSpec": {"template": {"spec": {"containers": [
...         {"name": "ray-head", "image": "rayproject/ray:2.46.0",
...          "resources": {"limits": {"cpu": "1500m", "memory": "2G"}}}]}}}},
... })
>>> pod = head_pod(cluster)
>>> pod["metadata"]["generateName"]
'demo-head-'
>>> print(pod["spec"]["containers"][0]["args"][0])  # doctest: +NORMALIZE_WHITESPACE
ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}; ray start --head  --block
  --dashboard-agent-listen-port=52365  --dashboard-host=0.0.0.0  --memory=2000000000
  --metrics-export-port=8080  --num-cpus=2
>>> selector("demo", node_type="head")
'ray.io/cluster=demo,ray.io/node-type=head'
"""

from __future__ import annotations

import copy
import dataclasses
import decimal
import json
import math
import re
import secrets
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from api import v1
from controllers.ray import serve
from controllers.raycluster import auth, autoscaler, containerenv, names
from runtime import quantity
from runtime.client import resources

__all__ = [
    "CACHE_SELECTOR",
    "HEAD",
    "KUBERAY_VERSION",
    "NODE_TYPES",
    "PODS",
    "REDIS_CLEANUP",
    "WORKER",
    "PodDefaults",
    "creator_kind",
    "desired_workers",
    "group_of",
    "head_pod",
    "head_port",
    "is_head",
    "node_type_of",
    "random_replica_name",
    "ray_start_command",
    "replica_slots",
    "selector",
    "worker_pod",
]

PODS = resources.default_registry.for_kind("v1", "Pod")
"""The pods of a cluster, as the client and the cache name them."""


HEAD = "head"
"""The ``ray.io/node-type`` of the head pod."""
WORKER = "worker"
"""The ``ray.io/node-type`` of worker pods."""
REDIS_CLEANUP = "redis-cleanup"
"""The ``ray.io/node-type`` of KubeRay's GCS fault-tolerance clean-up Job's pods (not made here)."""
NODE_TYPES = (HEAD, WORKER, REDIS_CLEANUP)
"""Every ``ray.io/node-type`` KubeRay gives a pod."""

CACHE_SELECTOR = f"{names.NODE_TYPE_LABEL} in ({','.join(NODE_TYPES)})"
"""The pods the manager's cache holds (KubeRay v1.7.0's cache filters its Pods the same
way): Ray nodes. Every pod built here matches it - the node type is one of the labels a
template cannot override."""

KUBERAY_VERSION = "v1.7.0"
"""The KubeRay release these pods match (reported to Ray's usage stats and in the head pod's
``ray.io/kuberay-version`` annotation, as KubeRay does)."""

_RAY = 0  # the Ray container is the first one
_GCS_PORT = "6379"
_METRICS_PORT = 8080
_DASHBOARD_PORT = 8265
_AGENT_PORT = 52365
_SERVE_PORT = serve.DEFAULT_SERVE_PORT
_SHM = ("shared-mem", "/dev/shm")
_SWITCH_EXEMPT = frozenset({"log-color", "include-dashboard", "include-log-monitor"})  # values
_ACCELERATORS = {"aws.amazon.com/neuroncore": "neuron_cores", "google.com/tpu": "TPU"}
_MIG = re.compile(r"nvidia\.com/mig-\d+g\.\d+gb$")
_BASH = ["/bin/bash", "-c", "--"]
_ULIMIT = "ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}"
_PLASMA_DIRECTORY = "plasma-directory"
_UNIFIED_HEALTH_CHECK = (2, 53)  # Ray serves GET /api/healthz on the agent port from 2.53.0


@dataclasses.dataclass(frozen=True)
class PodDefaults:
    """What the operator adds to every pod it builds (see the module docstring). Every
    field defaults to nothing."""

    head_sidecars: tuple[Mapping[str, Any], ...] = ()
    """Containers appended to head pods."""
    worker_sidecars: tuple[Mapping[str, Any], ...] = ()
    """Containers appended to worker pods."""
    env: tuple[Mapping[str, Any], ...] = ()
    """Env vars of the Ray container, where it has none of that name."""
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Pod annotations, where the template has none of that key."""
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Pod labels, where the template has none of that key."""

    def apply(self, meta: dict[str, Any], containers: list[dict[str, Any]], head: bool) -> None:
        """Add the defaults to a pod template's ``meta`` and ``containers`` (in place)."""
        for key, defaults in (("annotations", self.annotations), ("labels", self.labels)):
            if defaults:
                meta[key] = {**defaults, **(meta.get(key) or {})}
        ray = containers[_RAY]
        for var in self.env:
            if not containerenv.has(ray.get("env"), str(var.get("name"))):
                containerenv.of(ray).append(copy.deepcopy(dict(var)))
        sidecars = self.head_sidecars if head else self.worker_sidecars
        containers.extend(copy.deepcopy(dict(c)) for c in sidecars)


_NO_DEFAULTS = PodDefaults()


# --- small helpers for the reconciler --------------------------------------------------------


def selector(cluster_name: str, *, node_type: str | None = None, group: str | None = None) -> str:
    """A label selector for the cluster's pods (optionally one node type or group).

    >>> selector("demo", group="small")
    'ray.io/cluster=demo,ray.io/group=small'
    """
    parts = [f"{names.CLUSTER_LABEL}={cluster_name}"]
    if node_type is not None:
        parts.append(f"{names.NODE_TYPE_LABEL}={node_type}")
    if group is not None:
        parts.append(f"{names.GROUP_LABEL}={group}")
    return ",".join(parts)


def _labels(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return (pod.get("metadata") or {}).get("labels") or {}


def node_type_of(pod: Mapping[str, Any]) -> str | None:
    """The pod's ``ray.io/node-type`` (``head``, ``worker``), if any."""
    value = _labels(pod).get(names.NODE_TYPE_LABEL)
    return str(value) if value is not None else None


def is_head(pod: Mapping[str, Any]) -> bool:
    """Whether ``pod`` is a head pod (by its ``ray.io/node-type`` label)."""
    return node_type_of(pod) == HEAD


def group_of(pod: Mapping[str, Any]) -> str | None:
    """The pod's ``ray.io/group`` (``headgroup`` for the head)."""
    value = _labels(pod).get(names.GROUP_LABEL)
    return str(value) if value is not None else None


def desired_workers(group: v1.WorkerGroupSpec) -> int:
    """How many pods the group should have, as KubeRay counts them.

    0 while suspended; otherwise ``replicas`` clamped to ``[minReplicas, maxReplicas]``
    (``maxReplicas`` when ``minReplicas > maxReplicas``), times ``numOfHosts``.

    >>> desired_workers(v1.WorkerGroupSpec(group_name="g", template={}, replicas=9,
    ...                                    max_replicas=3, num_of_hosts=2))
    6
    """
    if group.suspend:
        return 0
    if group.min_replicas > group.max_replicas:
        replicas = group.max_replicas
    else:
        replicas = min(max(group.replicas, group.min_replicas), group.max_replicas)
    return replicas * group.num_of_hosts


_REPLICA_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' rand.String


def random_replica_name(group: str, index: int) -> str:
    """``<group>-<5 random characters>``: a new multi-host replica's name, as KubeRay makes
    it (``index`` is not part of it)."""
    del index
    suffix = "".join(secrets.choice(_REPLICA_NAME_ALPHABET) for _ in range(5))
    return f"{group}-{suffix}"


def replica_slots(
    group: v1.WorkerGroupSpec,
    *,
    used: Iterable[int] = (),
    replicas: int | None = None,
    replica_name: Callable[[str, int], str] = random_replica_name,
) -> list[dict[str, Any]]:
    """The :func:`worker_pod` keywords of the pods of ``replicas`` new replicas of ``group``
    (default: all it wants, :func:`desired_workers` / ``numOfHosts``), in creation order.

    KubeRay v1.7.0's ``RayMultiHostIndexing`` (on by default): each new replica takes the
    lowest ``ray.io/worker-group-replica-index`` not in ``used`` (the indexes of the
    group's live replicas); with ``numOfHosts > 1`` a replica is ``numOfHosts`` pods
    sharing a ``ray.io/worker-group-replica-name`` (``replica_name(group, index)``), each
    with its ``ray.io/replica-host-index``.

    >>> group = v1.WorkerGroupSpec(group_name="g", template={}, replicas=2, num_of_hosts=2)
    >>> replica_slots(group, used=[0], replicas=1, replica_name=lambda g, i: f"{g}-r{i}")
    [{'replica_index': 1, 'replica_name': 'g-r1', 'host_index': 0}, \
{'replica_index': 1, 'replica_name': 'g-r1', 'host_index': 1}]
    >>> single = v1.WorkerGroupSpec(group_name="g", template={}, replicas=3)
    >>> [slot["replica_index"] for slot in replica_slots(single, used=[1])]
    [0, 2, 3]
    """
    hosts = max(group.num_of_hosts, 1)
    if replicas is None:
        replicas = desired_workers(group) // hosts
    taken = set(used)
    slots: list[dict[str, Any]] = []
    index = 0
    for _ in range(replicas):
        while index in taken:
            index += 1
        taken.add(index)
        if hosts > 1:
            name = replica_name(group.group_name, index)
            slots += [
                {"replica_index": index, "replica_name": name, "host_index": host}
                for host in range(hosts)
            ]
        else:
            slots.append({"replica_index": index})
    return slots


def creator_kind(cluster: v1.RayCluster) -> str:
    """``RayService``/``RayJob`` when one made the cluster (by its label), else ``RayCluster``."""
    value = (cluster.metadata.get("labels") or {}).get(names.ORIGINATED_FROM_CRD_LABEL)
    return value if value in ("RayService", "RayJob") else "RayCluster"


def head_port(params: Mapping[str, str]) -> str:
    """The GCS port workers connect to: ``rayStartParams.port`` or 6379."""
    return str(params.get("port", _GCS_PORT))


# --- the builders ----------------------------------------------------------------------------


def head_pod(
    cluster: v1.RayCluster,
    *,
    cluster_domain: str = "cluster.local",
    created_by: str = names.CREATED_BY,
    defaults: PodDefaults = _NO_DEFAULTS,
) -> dict[str, Any]:
    """The head pod KubeRay v1.7.0 would create for ``cluster``.

    :class:`ValueError` when the head template has no container (see
    :func:`controllers.raycluster.validation.problems`).
    """
    spec = cluster.spec
    head = spec.head_group_spec
    template = copy.deepcopy(head.template)
    params = dict(head.ray_start_params)
    port = head_port(params)
    fqdn = names.head_fqdn(cluster, cluster_domain)
    name = _cluster_name(cluster)

    meta = _metadata(template)
    pod_spec = _spec(template)
    containers = _ray_containers(pod_spec, "headGroupSpec")
    defaults.apply(meta, containers, head=True)
    meta["generateName"] = names.head_pod_prefix(name)
    meta["namespace"] = names.namespace_of(cluster)
    _apply_group_resources(params, head.resources)
    _apply_group_labels(params, head.labels)
    meta["labels"] = _pod_labels(HEAD, name, names.HEAD_GROUP, meta, head.labels, created_by)
    params.setdefault("dashboard-host", "0.0.0.0")
    _common_defaults(params)
    annotations = _annotations(cluster, meta)

    ray = containers[_RAY]
    if autoscaler.enabled(cluster):
        params["no-monitor"] = "true"
        pod_spec["serviceAccountName"] = autoscaler.service_account_name(cluster)
        containers.append(autoscaler.sidecar(cluster, ray.get("image")))
        if autoscaler.is_v2(cluster):
            containerenv.of(ray).append({"name": "RAY_enable_autoscaler_v2", "value": "true"})
            pod_spec["restartPolicy"] = "Never"
        elif autoscaler.is_v1(cluster):
            containerenv.of(ray).append({"name": "RAY_enable_autoscaler_v2", "value": "false"})
    _fault_tolerance(cluster, HEAD, ray, annotations, params)
    annotations[names.KUBERAY_VERSION_ANNOTATION] = KUBERAY_VERSION
    _ensure_metrics_port(ray)
    auth.configure_pod(cluster, pod_spec)

    pod = _pod(meta, annotations, pod_spec)
    _finish(
        cluster,
        pod,
        HEAD,
        params,
        port=port,
        fqdn=fqdn,
        with_autoscaler=autoscaler.enabled(cluster),
    )
    return pod


def worker_pod(
    cluster: v1.RayCluster,
    group: v1.WorkerGroupSpec,
    *,
    cluster_domain: str = "cluster.local",
    created_by: str = names.CREATED_BY,
    replica_name: str | None = None,
    replica_index: int | None = None,
    host_index: int = 0,
    defaults: PodDefaults = _NO_DEFAULTS,
) -> dict[str, Any]:
    """A worker pod of ``group`` as KubeRay v1.7.0 would create it.

    Replica labels (KubeRay v1.7.0's ``RayMultiHostIndexing``, on by default): pass
    ``replica_index`` (the lowest index not in use in the group) to get
    ``ray.io/worker-group-replica-index``, and for ``numOfHosts > 1`` also
    ``replica_name`` (``<group>-<5 random characters>``, one per replica, shared by its
    hosts) and ``host_index`` (0..numOfHosts-1) to get ``ray.io/worker-group-replica-name``
    and ``ray.io/replica-host-index``; :func:`replica_slots` gives them. Without them the
    pod has no replica labels (what KubeRay does with the gate off).
    """
    spec = cluster.spec
    template = copy.deepcopy(group.template)
    params = dict(group.ray_start_params)
    port = head_port(spec.head_group_spec.ray_start_params)
    fqdn = names.head_fqdn(cluster, cluster_domain)
    name = _cluster_name(cluster)

    meta = _metadata(template)
    meta["generateName"] = names.worker_pod_prefix(name, group.group_name)
    meta["namespace"] = names.namespace_of(cluster)
    pod_spec = _spec(template)
    containers = _ray_containers(pod_spec, f"workerGroupSpec {group.group_name!r}")
    ray = containers[_RAY]
    init = pod_spec.get("initContainers")
    pod_spec["initContainers"] = [
        *(init if isinstance(init, list) else []),
        _wait_gcs(ray, fqdn, port),  # KubeRay builds it before its defaults are added
    ]
    defaults.apply(meta, containers, head=False)
    meta.pop("name", None)
    _apply_group_resources(params, group.resources)
    _apply_group_labels(params, group.labels)
    labels = _pod_labels(WORKER, name, group.group_name, meta, group.labels, created_by)
    if replica_index is not None:
        labels[names.REPLICA_INDEX_LABEL] = str(replica_index)
    if replica_name is not None and group.num_of_hosts > 1:
        labels[names.REPLICA_NAME_LABEL] = replica_name
        labels[names.HOST_INDEX_LABEL] = str(host_index)
    meta["labels"] = labels
    params.setdefault("address", f"{fqdn}:{port}")
    _common_defaults(params)
    annotations = _annotations(cluster, meta)
    _fault_tolerance(cluster, WORKER, ray, annotations, params)
    _ensure_metrics_port(ray)
    if autoscaler.enabled(cluster) and autoscaler.is_v2(cluster):
        pod_spec["restartPolicy"] = "Never"
    auth.configure_pod(cluster, pod_spec)

    pod = _pod(meta, annotations, pod_spec)
    _finish(cluster, pod, WORKER, params, port=port, fqdn=fqdn, with_autoscaler=False)
    return pod


# --- template plumbing -----------------------------------------------------------------------


def _cluster_name(cluster: v1.RayCluster) -> str:
    return str(cluster.metadata.get("name") or "")


def _metadata(template: dict[str, Any]) -> dict[str, Any]:
    meta = template.get("metadata")
    return dict(meta) if isinstance(meta, Mapping) else {}


def _spec(template: dict[str, Any]) -> dict[str, Any]:
    spec = template.get("spec")
    return spec if isinstance(spec, dict) else {}


def _ray_containers(pod_spec: dict[str, Any], where: str) -> list[dict[str, Any]]:
    containers = pod_spec.get("containers")
    if not isinstance(containers, list) or not containers or not isinstance(containers[0], dict):
        raise ValueError(f"{where}.template should have at least one container")
    return containers


def _pod_labels(
    node_type: str,
    cluster_name: str,
    group_name: str,
    meta: Mapping[str, Any],
    group_labels: Mapping[str, str] | None,
    created_by: str,
) -> dict[str, str]:
    labels = {
        names.IS_RAY_NODE_LABEL: "yes",
        names.CLUSTER_LABEL: cluster_name,
        names.NODE_TYPE_LABEL: node_type,
        names.GROUP_LABEL: group_name,
        names.IDENTIFIER_LABEL: names.identifier(cluster_name, node_type),
        names.NAME_LABEL: names.APP_NAME,
        names.CREATED_BY_LABEL: created_by,
    }
    fixed = (names.NODE_TYPE_LABEL, names.GROUP_LABEL, names.CLUSTER_LABEL)
    overrides = {**(meta.get("labels") or {}), **(group_labels or {})}
    labels.update({k: v for k, v in overrides.items() if k not in fixed})
    return labels


def _annotations(cluster: v1.RayCluster, meta: Mapping[str, Any]) -> dict[str, str]:
    annotations = dict(meta.get("annotations") or {})
    if _overwrite_requested(cluster.metadata.get("annotations") or {}):
        annotations[names.OVERWRITE_CONTAINER_CMD_ANNOTATION] = "true"
    return annotations


def _overwrite_requested(annotations: Mapping[str, Any]) -> bool:
    return str(annotations.get(names.OVERWRITE_CONTAINER_CMD_ANNOTATION, "")).lower() == "true"


def _common_defaults(params: dict[str, str]) -> None:
    params.setdefault("metrics-export-port", str(_METRICS_PORT))
    params["block"] = "true"
    params.setdefault("dashboard-agent-listen-port", str(_AGENT_PORT))


def _ensure_metrics_port(ray: dict[str, Any]) -> None:
    ports = ray.get("ports")
    if not isinstance(ports, list):
        ports = ray["ports"] = []
    if not any(isinstance(p, Mapping) and p.get("name") == "metrics" for p in ports):
        ports.append({"name": "metrics", "containerPort": _METRICS_PORT})


def _pod(meta: dict[str, Any], annotations: dict[str, str], spec: dict[str, Any]) -> dict[str, Any]:
    meta.pop("annotations", None)
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _fault_tolerance(
    cluster: v1.RayCluster,
    node_type: str,
    ray: dict[str, Any],
    annotations: dict[str, str],
    params: dict[str, str],
) -> None:
    """GCS fault tolerance: the head's ``ray.io/ft-enabled`` annotation and Redis settings."""
    cluster_annotations = cluster.metadata.get("annotations") or {}
    options = cluster.spec.gcs_fault_tolerance_options
    enabled = (
        str(cluster_annotations.get(names.FT_ENABLED_ANNOTATION, "")).lower() == "true"
        or options is not None
    )
    if node_type == HEAD:
        annotations[names.FT_ENABLED_ANNOTATION] = "true" if enabled else "false"
    if not enabled:
        return
    if node_type == WORKER:
        if not containerenv.has(ray.get("env"), "RAY_gcs_rpc_server_reconnect_timeout_s"):
            containerenv.of(ray).append(
                {"name": "RAY_gcs_rpc_server_reconnect_timeout_s", "value": "600"}
            )
        return
    storage = str(cluster.metadata.get("uid") or "")
    storage = str(cluster_annotations.get(names.EXTERNAL_STORAGE_NS_ANNOTATION, storage))
    if options is not None and options.get("externalStorageNamespace"):
        storage = str(options["externalStorageNamespace"])
    annotations[names.EXTERNAL_STORAGE_NS_ANNOTATION] = storage
    if not containerenv.has(ray.get("env"), "RAY_external_storage_namespace"):
        containerenv.of(ray).append(containerenv.value("RAY_external_storage_namespace", storage))
    if options is not None:
        containerenv.of(ray).append(
            containerenv.value("RAY_REDIS_ADDRESS", str(options.get("redisAddress") or ""))
        )
        for key, env_name, param in (
            ("redisUsername", "REDIS_USERNAME", "redis-username"),
            ("redisPassword", "REDIS_PASSWORD", "redis-password"),
        ):
            credential = options.get(key)
            if credential is None:
                continue
            params[param] = f"${env_name}"
            var = containerenv.value(env_name, str(credential.get("value") or ""))
            if credential.get("valueFrom") is not None:
                var["valueFrom"] = copy.deepcopy(credential["valueFrom"])
            containerenv.of(ray).append(var)
    elif not containerenv.has(ray.get("env"), "REDIS_PASSWORD") and "redis-password" in params:
        containerenv.of(ray).append(containerenv.value("REDIS_PASSWORD", params["redis-password"]))


def _wait_gcs(ray: Mapping[str, Any], fqdn: str, port: str) -> dict[str, Any]:
    """The ``wait-gcs-ready`` init container of a worker."""
    address = f"{fqdn}:{port}"
    steps = [
        (0, "SECONDS=0"),
        (0, "while true; do"),
        (1, "if (( SECONDS <= 120 )); then"),
        (2, f"if ray health-check --address {address} > /dev/null 2>&1; then"),
        (3, 'echo "GCS is ready."'),
        (3, "break"),
        (2, "fi"),
        (2, 'echo "$SECONDS seconds elapsed: Waiting for GCS to be ready."'),
        (1, "else"),
        (2, f"if ray health-check --address {address}; then"),
        (3, 'echo "GCS is ready. Any error messages above can be safely ignored."'),
        (3, "break"),
        (2, "fi"),
        (
            2,
            'echo "$SECONDS seconds elapsed: Still waiting for GCS to be ready. For '
            "troubleshooting, refer to the FAQ at "
            'https://docs.ray.io/en/master/cluster/kubernetes/troubleshooting.html."',
        ),
        (1, "fi"),
        (1, "sleep 5"),
        (0, "done"),
    ]
    script = "".join(f"\n{chr(9) * (5 + depth)}{line}" for depth, line in steps) + "\n" + "\t" * 4
    container: dict[str, Any] = {
        "name": "wait-gcs-ready",
        "image": ray.get("image"),
        "imagePullPolicy": ray.get("imagePullPolicy"),
        "command": list(_BASH),
        "args": [script],
        "securityContext": copy.deepcopy(ray.get("securityContext")),
        "env": copy.deepcopy(ray.get("env")),
        "volumeMounts": copy.deepcopy(ray.get("volumeMounts")),
        "resources": {
            "limits": {"cpu": "200m", "memory": "256Mi"},
            "requests": {"cpu": "200m", "memory": "256Mi"},
        },
    }
    return {k: v for k, v in container.items() if v not in (None, "", [])}


# --- BuildPod: volumes, command, env, probes -------------------------------------------------


def _finish(
    cluster: v1.RayCluster,
    pod: dict[str, Any],
    node_type: str,
    params: dict[str, str],
    *,
    port: str,
    fqdn: str,
    with_autoscaler: bool,
) -> None:
    creator = creator_kind(cluster)
    labels = pod["metadata"]["labels"]
    if creator == "RayService":
        labels[names.SERVE_LABEL] = "false" if node_type == HEAD else "true"
    spec = pod["spec"]
    containers = spec["containers"]
    ray = containers[_RAY]
    if _PLASMA_DIRECTORY not in params:  # the object store is elsewhere: no /dev/shm then
        _add_empty_dir(spec, ray, *_SHM, memory=True)
    if with_autoscaler:
        sidecar = next(c for c in containers if c.get("name") == autoscaler.CONTAINER_NAME)
        _add_empty_dir(spec, ray, *autoscaler.LOG_VOLUME)
        _add_empty_dir(spec, sidecar, *autoscaler.LOG_VOLUME)

    user_cmd = _joined(ray.get("command")) + _joined(ray.get("args"))
    start = ray_start_command(node_type, params, ray.get("resources"))
    overwrite = _overwrite_requested(pod["metadata"].get("annotations") or {})
    if not overwrite and "ray start" not in user_cmd:
        generated = f"{_ULIMIT}; {start}"
        ray["command"] = list(_BASH)
        ray["args"] = [f"{user_cmd} && {generated}" if user_cmd else generated]

    for init in spec.get("initContainers") or []:
        if isinstance(init, dict):
            containerenv.of(init).extend(
                [
                    {"name": "FQ_RAY_IP", "value": fqdn},
                    {"name": "RAY_IP", "value": fqdn.split(".")[0]},
                ]
            )
    _ray_env(ray, node_type, fqdn=fqdn, port=port, start=start, creator=creator)
    _probes(ray, node_type, creator, params, cluster.spec.ray_version)


def _joined(parts: Any) -> str:
    """KubeRay's rendering of a command or args list: each part as `` <part> ``."""
    return "".join(f" {p} " for p in parts) if isinstance(parts, list) else ""


def _add_empty_dir(
    spec: dict[str, Any], container: dict[str, Any], volume: str, path: str, *, memory: bool = False
) -> None:
    mounts = container.get("volumeMounts")
    if not isinstance(mounts, list):
        mounts = container["volumeMounts"] = []
    if any(isinstance(m, Mapping) and m.get("mountPath") == path for m in mounts):
        return
    volumes = spec.get("volumes")
    if not isinstance(volumes, list):
        volumes = spec["volumes"] = []
    if not any(isinstance(v, Mapping) and v.get("name") == volume for v in volumes):
        empty_dir: dict[str, Any] = {}
        if memory:
            empty_dir["medium"] = "Memory"
            size = _memory_of(container)
            if size is not None:
                empty_dir["sizeLimit"] = size
        volumes.append({"name": volume, "emptyDir": empty_dir})
    mounts.append({"name": volume, "mountPath": path})


def _memory_of(container: Mapping[str, Any]) -> Any:
    """The container's memory limit, else its request (as written), else ``None``."""
    resources = container.get("resources") or {}
    for kind in ("limits", "requests"):
        amounts = resources.get(kind) or {}
        if "memory" in amounts:
            return copy.deepcopy(amounts["memory"])
    return None


def _ray_env(
    ray: dict[str, Any], node_type: str, *, fqdn: str, port: str, start: str, creator: str
) -> None:
    env = containerenv.of(ray)
    ip = "127.0.0.1"
    if node_type == WORKER:
        ip = fqdn
        env += [
            {"name": "FQ_RAY_IP", "value": fqdn},
            {"name": "RAY_IP", "value": fqdn.split(".")[0]},
        ]
    env += [
        containerenv.field("RAY_CLUSTER_NAME", f"metadata.labels['{names.CLUSTER_LABEL}']"),
        containerenv.field("RAY_CLUSTER_NAMESPACE", "metadata.namespace"),
        containerenv.field("RAY_CLOUD_INSTANCE_ID", "metadata.name"),
        containerenv.field("RAY_NODE_TYPE_NAME", f"metadata.labels['{names.GROUP_LABEL}']"),
        containerenv.value("KUBERAY_GEN_RAY_START_CMD", start),
    ]
    if not containerenv.has(ray.get("env"), "RAY_PORT"):
        env.append(containerenv.value("RAY_PORT", port))
    if creator == "RayService":
        for name, value in (
            ("RAY_timeout_ms_task_wait_for_death_info", "0"),
            ("RAY_gcs_server_request_timeout_seconds", "5"),
            ("RAY_SERVE_KV_TIMEOUT_S", "5"),
        ):
            if not containerenv.has(ray.get("env"), name):
                env.append({"name": name, "value": value})
    if not containerenv.has(ray.get("env"), "RAY_ADDRESS"):
        env.append({"name": "RAY_ADDRESS", "value": f"{ip}:{port}"})
    if not containerenv.has(ray.get("env"), "RAY_USAGE_STATS_KUBERAY_IN_USE"):
        env.append({"name": "RAY_USAGE_STATS_KUBERAY_IN_USE", "value": "1"})
    if node_type == HEAD:
        tags = f"kuberay_version={KUBERAY_VERSION};kuberay_crd={creator}"
        env.append({"name": "RAY_USAGE_STATS_EXTRA_TAGS", "value": tags})
    if not containerenv.has(ray.get("env"), "RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE"):
        env.append({"name": "RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE", "value": "1"})


def _wget(timeout: int, port: int, path: str) -> str:
    return f"wget --tries 1 -T {timeout} -q -O- http://localhost:{port}/{path} | grep success"


def _probes(
    ray: dict[str, Any],
    node_type: str,
    creator: str,
    params: Mapping[str, str],
    ray_version: str | None,
) -> None:
    agent = _port_param(params, "dashboard-agent-listen-port", _AGENT_PORT)
    checks = [_wget(2, agent, "api/local_raylet_healthz")]
    if node_type == HEAD:
        checks.append(_wget(10, _port_param(params, "dashboard-port", _DASHBOARD_PORT),
                            "api/gcs_healthz"))  # fmt: skip
    action: dict[str, Any] = {"exec": {"command": ["bash", "-c", " && ".join(checks)]}}
    if _at_least(ray_version, _UNIFIED_HEALTH_CHECK):
        action = {"httpGet": {"path": "/api/healthz", "port": agent}}
    timeout = 5 if node_type == HEAD else 2
    if ray.get("livenessProbe") is None:
        ray["livenessProbe"] = _probe(action, delay=30, timeout=timeout, failures=120)
    if ray.get("readinessProbe") is None:
        failures = 10
        if creator == "RayService" and node_type == WORKER:
            failures = 1
            checks = [*checks, _wget(10, _serve_port(ray), "-/healthz")]
            action = {"exec": {"command": ["bash", "-c", " && ".join(checks)]}}
        ray["readinessProbe"] = _probe(action, delay=10, timeout=timeout, failures=failures)


def _port_param(params: Mapping[str, str], key: str, default: int) -> int:
    """A port from ``rayStartParams`` when it is a 32-bit integer (Go's ``ParseInt``: an
    optional sign, digits, nothing else), else ``default``.

    >>> _port_param({"p": "9999"}, "p", 1), _port_param({"p": " 9999"}, "p", 1)
    (9999, 1)
    """
    text = str(params.get(key, ""))
    if re.fullmatch(r"[+-]?[0-9]{1,10}", text) is None:  # longer is out of int32 anyway
        return default
    port = int(text)
    return port if -(2**31) <= port < 2**31 else default


def _at_least(version: str | None, minimum: tuple[int, ...]) -> bool:
    """Whether ``version`` is at least ``minimum``, read as Kubernetes' ``ParseGeneric``
    reads it: an optional ``v``, two or more dot-separated numbers (the first without a
    leading zero), then anything, ignored. Unparsable: ``False``.

    >>> _at_least("2.53.0", (2, 53)), _at_least("v2.60", (2, 53)), _at_least("2.52.1", (2, 53))
    (True, True, False)
    >>> _at_least("2.53.0rc1", (2, 53)), _at_least("2", (2, 53)), _at_least(None, (2, 53))
    (True, False, False)
    """
    match = re.match(r"\s*v?([0-9]+(?:\.[0-9]+)+)", version or "")
    if match is None:
        return False
    parts = match.group(1).split(".")
    if len(parts[0]) > 1 and parts[0].startswith("0"):
        return False
    if any(len(p) > 20 for p in parts):  # past uint64: ParseUint refuses it
        return False
    numbers = tuple(int(p) for p in parts)
    width = max(len(numbers), len(minimum))
    pad = (0,) * width
    return (numbers + pad)[:width] >= (minimum + pad)[:width]


def _serve_port(ray: Mapping[str, Any]) -> int:
    for port in ray.get("ports") or []:
        if isinstance(port, Mapping) and port.get("name") == names.SERVE_PORT_NAME:
            return int(port.get("containerPort") or 0)
    return _SERVE_PORT


def _probe(action: Mapping[str, Any], *, delay: int, timeout: int, failures: int) -> dict[str, Any]:
    return {
        **copy.deepcopy(dict(action)),
        "initialDelaySeconds": delay,
        "timeoutSeconds": timeout,
        "periodSeconds": 5,
        "successThreshold": 1,
        "failureThreshold": failures,
    }


# --- the ray start line ----------------------------------------------------------------------


def ray_start_command(node_type: str, params: dict[str, str], resources: Any) -> str:
    """``ray start [--head] <flags>`` from ``params`` (completed in place, as KubeRay does)
    and the Ray container's ``resources``.

    >>> ray_start_command("worker", {"log-color": "true", "disable-usage-stats": "true"},
    ...                   {"limits": {"nvidia.com/gpu": 1, "google.com/tpu": "4"}})
    'ray start  --disable-usage-stats  --log-color=true  --num-gpus=1  --resources=\\'{"TPU":4}\\' '
    """
    resources = resources if isinstance(resources, Mapping) else {}
    limits = resources.get("limits") if isinstance(resources.get("limits"), Mapping) else {}
    requests = resources.get("requests") if isinstance(resources.get("requests"), Mapping) else {}
    if "num-cpus" not in params:
        cpu = _nonzero(limits.get("cpu")) or _nonzero(requests.get("cpu"))
        if cpu is not None:
            params["num-cpus"] = str(_ceil(cpu))
    if "memory" not in params:
        memory = _nonzero(limits.get("memory"))
        if memory is not None:
            params["memory"] = str(_ceil(memory))
    _add_accelerators(params, limits)
    head = "--head " if node_type == HEAD else ""
    return f"ray start {head}{_flags(params)}"


def _flags(params: Mapping[str, str]) -> str:
    out = []
    for key in sorted(params):
        value = params[key]
        if value.lower() in ("true", "false") and key not in _SWITCH_EXEMPT:
            if value.lower() == "true":
                out.append(f" --{key} ")
        else:
            out.append(f" --{key}={value} ")
    return "".join(out)


def _nonzero(value: Any) -> quantity.Quantity | None:
    parsed = quantity.parse_or_none(value)
    return parsed if parsed is not None and parsed.value != 0 else None


def _ceil(q: quantity.Quantity) -> int:
    """Go's ``Quantity.Value()``: the value rounded up to an integer."""
    return math.ceil(q.value)


def _is_gpu(key: str) -> bool:
    return key.endswith("gpu") or _MIG.search(key) is not None


def _go_float(value: float) -> str:
    """A float as Go's ``encoding/json`` writes it (``1``, ``0.5``, ``1e+21``, ``1e-7``)."""
    magnitude = abs(value)
    if magnitude != 0 and (magnitude < 1e-6 or magnitude >= 1e21):
        text = repr(value)
        return re.sub(r"e([+-])0(\d)$", r"e\1\2", text)
    if value.is_integer():
        return str(int(value))
    return format(decimal.Decimal(repr(value)), "f")


def _resources_json(resources: Mapping[str, float]) -> str:
    body = ",".join(f"{json.dumps(k)}:{_go_float(v)}" for k, v in sorted(resources.items()))
    return "'{" + body + "}'"


def _apply_group_resources(params: dict[str, str], resources: Mapping[str, str] | None) -> None:
    """The group's ``resources`` field, turned into flags (they win over ``rayStartParams``)."""
    if not resources:
        return
    custom: dict[str, float] = {}
    for name, text in resources.items():
        parsed = quantity.parse_or_none(text)
        if parsed is None:
            continue
        lowered = name.lower()
        if lowered == "cpu":
            params["num-cpus"] = str(_ceil(parsed))
        elif lowered == "memory":
            params["memory"] = str(_ceil(parsed))
        elif _is_gpu(lowered):
            params["num-gpus"] = str(_ceil(parsed))
        else:
            custom[name] = float(parsed.value)
    if custom:
        params["resources"] = _resources_json(custom)


def _apply_group_labels(params: dict[str, str], labels: Mapping[str, str] | None) -> None:
    if labels:
        params["labels"] = ",".join(f"{k}={labels[k]}" for k in sorted(labels))


def _add_accelerators(params: dict[str, str], limits: Mapping[str, Any]) -> None:
    """``--num-gpus`` from the first GPU limit; the first TPU/Neuron limit into ``--resources``."""
    if not limits:
        return
    existing = params.get("resources")
    custom: dict[str, float] = {}
    if existing is not None:
        try:
            loaded = json.loads(existing.strip("'\"` "))
        except ValueError:
            return
        if not isinstance(loaded, dict) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in loaded.values()
        ):
            return
        custom = {str(k): float(v) for k, v in loaded.items()}
    accelerator_seen = any(name in custom for name in _ACCELERATORS.values())
    for key in sorted(limits):
        amount = _nonzero(limits[key])
        if "num-gpus" not in params and _is_gpu(key) and amount is not None:
            params["num-gpus"] = str(_ceil(amount))
        if not accelerator_seen and key in _ACCELERATORS and amount is not None:
            if _ACCELERATORS[key] not in custom:
                custom[_ACCELERATORS[key]] = float(amount.value)
                params["resources"] = _resources_json(custom)
            accelerator_seen = True
