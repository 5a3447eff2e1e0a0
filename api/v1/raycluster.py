"""``RayCluster``: a Ray head pod plus groups of worker pods (``ray.io/v1``, KubeRay's shape).

Field names, optionality and API defaults follow KubeRay v1, so RayCluster YAML
written for KubeRay validates here and round-trips through
``RayCluster.model_validate(obj).model_dump(by_alias=True, exclude_unset=True)``
unchanged. API defaults (declared in the generated CRD too): a worker group's
``replicas`` and ``minReplicas`` are 0, ``maxReplicas`` is 2147483647 and
``numOfHosts`` is 1. Counts are never negative.

**Pod templates are raw objects** (``headGroupSpec.template``,
``workerGroupSpecs[].template``: :data:`~api.v1.meta.RawObject`, stored as
``x-kubernetes-preserve-unknown-fields``), not a typed ``PodTemplateSpec``. The
trade-off:

- for: the CRD stays small (KubeRay's full pod schemas make its CRDs about a
  megabyte, past the 256 KiB annotation that client-side ``kubectl apply``
  writes), it never lags behind the
  Kubernetes version of the cluster (a field added to pods in a newer Kubernetes
  is accepted as soon as that cluster accepts it), and the operator copies the
  template into the pods it creates without re-encoding it;
- against: a mistake in a template (a misspelt ``containers`` key, a string
  where a number belongs) is not rejected when the RayCluster is applied, but
  when the operator creates the pod: it surfaces as a failed pod creation (an
  Event on the RayCluster), not as a ``kubectl apply`` error, and
  ``kubectl explain`` stops at ``template``.

The same holds for the other objects carried as raw JSON: ``headService``,
``ingressOptions``, ``autoscalerOptions``, ``gcsFaultToleranceOptions``, and the KubeRay
options this operator does not implement (``historyServerOptions``, ``networkPolicy``,
``tlsOptions``, ``enableIngress``/``ingressOptions``, ``upgradeStrategy.type:
Recreate``): the API accepts them, so KubeRay YAML applies, and the reconciler
**refuses** them (``InvalidRayClusterSpec``, the field named) instead of storing and
ignoring them. ``authOptions`` (:class:`AuthOptions`, Ray token authentication) is
typed and implemented.

Status: ``state`` (``ready``, ``suspended``; ``failed`` is deprecated) and
``conditions`` (types in :class:`ConditionType`) with worker counts, desired
resources, the head's pod and service, and ``lastUpdateTime``, which is
volatile: :attr:`RayClusterStatus.VOLATILE_FIELDS` names what the status writer
ignores when deciding whether anything changed.

>>> cluster = RayCluster.model_validate({
...     "metadata": {"name": "demo"},
...     "spec": {"headGroupSpec": {"template": {}},
...              "workerGroupSpecs": [{"groupName": "small", "template": {}}]},
... })
>>> group = cluster.spec.worker_group_specs[0]
>>> (group.replicas, group.min_replicas, group.max_replicas, group.num_of_hosts)
(0, 0, 2147483647, 1)
>>> cluster.model_dump(by_alias=True, exclude_unset=True)["spec"]["workerGroupSpecs"]
[{'groupName': 'small', 'template': {}}]
"""

from __future__ import annotations

import enum
from typing import Annotated, ClassVar, Literal

import pydantic

from api.v1 import groupversion, meta
from runtime.client import resources

__all__ = [
    "AuthOptions",
    "ClusterState",
    "ConditionType",
    "HeadGroupSpec",
    "HeadInfo",
    "RayCluster",
    "RayClusterSpec",
    "RayClusterStatus",
    "RayClusterUpgradeStrategy",
    "ScaleStrategy",
    "WorkerGroupSpec",
]

_Count = Annotated[meta.Int32, pydantic.Field(ge=0)]


class ClusterState(enum.StrEnum):
    """Values of ``status.state`` (deprecated by KubeRay in favour of conditions)."""

    READY = "ready"
    SUSPENDED = "suspended"
    FAILED = "failed"
    """Deprecated; never set by this operator."""


class ConditionType(enum.StrEnum):
    """Condition types of a RayCluster."""

    PROVISIONED = "RayClusterProvisioned"
    """All Ray pods were ready once; stays ``True`` afterwards."""
    HEAD_POD_READY = "HeadPodReady"
    REPLICA_FAILURE = "ReplicaFailure"
    """Creating or deleting a pod failed."""
    SUSPENDING = "RayClusterSuspending"
    SUSPENDED = "RayClusterSuspended"


class ScaleStrategy(meta.Model):
    """Which worker pods to remove when scaling a group down."""

    workers_to_delete: list[str] | None = None
    """Names of the worker pods to delete (written by the Ray autoscaler)."""


class HeadGroupSpec(meta.Model):
    """The head pod and its service."""

    template: meta.RawObject
    """The head pod's template (a ``PodTemplateSpec``, validated when the pod is created)."""
    ray_start_params: dict[str, str] = pydantic.Field(default_factory=dict)
    """Extra ``ray start`` flags (without ``--``), e.g. ``dashboard-host: 0.0.0.0``."""
    service_type: str | None = None
    """The head service's type (``ClusterIP`` when unset)."""
    head_service: meta.RawObject | None = None
    """A Service to use as the template of the head service."""
    enable_ingress: bool | None = None
    """Create an Ingress for the head service (KubeRay): refused when ``true`` (not
    implemented)."""
    ingress_options: meta.RawObject | None = None
    """Options of that Ingress (KubeRay): refused when set (not implemented)."""
    resources: dict[str, str] | None = None
    """Ray resources of the head node; override those in ``rayStartParams``."""
    labels: dict[str, str] | None = None
    """Ray node labels of the head node (also added to the pod)."""


class WorkerGroupSpec(meta.Model):
    """A group of identical worker pods."""

    group_name: str = pydantic.Field(min_length=1)
    """The group's name; unique within the cluster."""
    replicas: _Count = 0
    """Desired number of replicas."""
    min_replicas: _Count = 0
    """Lower bound of ``replicas`` for the autoscaler."""
    max_replicas: _Count = meta.INT32_MAX
    """Upper bound of ``replicas`` for the autoscaler."""
    num_of_hosts: Annotated[meta.Int32, pydantic.Field(ge=1)] = 1
    """Pods per replica (multi-host replicas, e.g. TPU slices)."""
    idle_timeout_seconds: meta.Int32 | None = None
    """Seconds before the autoscaler removes an idle worker of this group."""
    ray_start_params: dict[str, str] = pydantic.Field(default_factory=dict)
    """Extra ``ray start`` flags (without ``--``)."""
    template: meta.RawObject
    """The worker pods' template (a ``PodTemplateSpec``, validated when pods are created)."""
    scale_strategy: ScaleStrategy | None = None
    """Which pods to remove on scale-down."""
    suspend: bool | None = None
    """Delete the group's pods while ``true``."""
    resources: dict[str, str] | None = None
    """Ray resources of each node; override those in ``rayStartParams``."""
    labels: dict[str, str] | None = None
    """Ray node labels of each node (also added to the pods)."""
    priority: meta.Int32 | None = None
    """Autoscaler preference among groups (KubeRay; not acted on)."""


class RayClusterUpgradeStrategy(meta.Model):
    """What to do with running pods when the pod templates change."""

    type: Literal["Recreate", "None"] | None = None
    """``None`` (or unset) leaves running pods as they are; ``Recreate`` (KubeRay: delete
    and recreate them) is refused by this operator, which does not implement it."""


class AuthOptions(meta.Model):
    """Ray's token authentication for the cluster (KubeRay v1.6+): the dashboard, GCS and
    every Ray API refuse requests without the cluster's token."""

    mode: Literal["disabled", "token"] | None = None
    """``token`` turns authentication on (Ray 2.52.0 or later); ``disabled`` or unset
    leaves it off."""
    secret_name: str | None = None
    """A Secret of the cluster's namespace holding the token under the key ``auth_token``;
    unset: the operator creates the Secret ``<cluster>`` with a random token."""
    enable_k8s_token_auth: bool | None = None
    """Ray checks Kubernetes ServiceAccount tokens instead of a shared one (Ray 2.55.0 or
    later; not for a RayService's cluster)."""


class RayClusterSpec(meta.Model):
    """The desired state of a RayCluster (also a RayService's ``rayClusterConfig``)."""

    ray_version: str | None = None
    """The Ray version in the images, e.g. ``2.60.0``."""
    head_group_spec: HeadGroupSpec
    """The head pod."""
    worker_group_specs: list[WorkerGroupSpec] | None = None
    """The worker groups."""
    enable_in_tree_autoscaling: bool | None = None
    """Run the Ray autoscaler as a head sidecar (KubeRay; not acted on yet)."""
    head_service_annotations: dict[str, str] | None = None
    """Annotations of the head service."""
    suspend: bool | None = None
    """Delete all pods while ``true``."""
    managed_by: str | None = None
    """The controller that reconciles this cluster (KubeRay/Kueue multi-cluster)."""
    upgrade_strategy: RayClusterUpgradeStrategy | None = None
    """What to do with running pods when the templates change."""
    autoscaler_options: meta.RawObject | None = None
    """KubeRay autoscaler sidecar options (image, resources, idle timeout, version)."""
    gcs_fault_tolerance_options: meta.RawObject | None = None
    """KubeRay GCS fault tolerance options (Redis address, password, storage namespace)."""
    auth_options: AuthOptions | None = None
    """Ray token authentication (``mode: token``)."""
    history_server_options: meta.RawObject | None = None
    """KubeRay history server options: refused when set (not implemented)."""
    network_policy: meta.RawObject | None = None
    """KubeRay network isolation options: refused when set (not implemented)."""
    tls_options: meta.RawObject | None = None
    """KubeRay mTLS options: refused when set (not implemented)."""


class HeadInfo(meta.Model):
    """Where the head runs."""

    pod_ip: str | None = None
    pod_name: str | None = None
    service_ip: str | None = None
    service_name: str | None = None


class RayClusterStatus(meta.Model):
    """The observed state of a RayCluster."""

    VOLATILE_FIELDS: ClassVar[frozenset[str]] = frozenset({"lastUpdateTime"})
    """Fields (at any depth) the status writer ignores when comparing statuses."""

    state: str | None = None
    """Deprecated summary: a :class:`ClusterState` value, or unset while provisioning."""
    reason: str | None = None
    """Why the cluster is in ``state``."""
    conditions: meta.Conditions = pydantic.Field(default_factory=list)
    """The latest observations, one per :class:`ConditionType`."""
    ready_worker_replicas: meta.Int32 = 0
    """Worker pods that are Ready."""
    available_worker_replicas: meta.Int32 = 0
    """Worker pods that are Running."""
    desired_worker_replicas: meta.Int32 = 0
    """Sum of ``replicas * numOfHosts`` over the worker groups."""
    min_worker_replicas: meta.Int32 = 0
    """Sum of ``minReplicas * numOfHosts`` over the worker groups."""
    max_worker_replicas: meta.Int32 = 0
    """Sum of ``maxReplicas * numOfHosts`` over the worker groups."""
    desired_cpu: meta.Quantity | None = None
    """Total CPU requested by all pods."""
    desired_memory: meta.Quantity | None = None
    """Total memory requested by all pods."""
    desired_gpu: meta.Quantity | None = None
    """Total GPUs requested by all pods."""
    desired_tpu: meta.Quantity | None = None
    """Total TPUs requested by all pods."""
    head: HeadInfo | None = None
    """The head pod and service."""
    endpoints: dict[str, str] | None = None
    """Head service ports by name."""
    state_transition_times: dict[str, meta.Time] | None = None
    """When each ``state`` was last entered."""
    last_update_time: meta.Time | None = None
    """When the status was last written (volatile)."""
    observed_generation: meta.Int64 = 0
    """The ``metadata.generation`` this status was computed for."""


class RayCluster(meta.Model):
    """A Ray cluster: one head pod and groups of worker pods."""

    RESOURCE: ClassVar[resources.Resource] = groupversion.RAYCLUSTERS
    CATEGORIES: ClassVar[tuple[str, ...]] = ("all",)
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ()
    LEGACY_VERSIONS: ClassVar[tuple[str, ...]] = ("v1alpha1",)
    """Versions KubeRay's CRD lists besides ``v1``: listed in ours as neither served nor
    storage, so a cluster whose CRD ``status.storedVersions`` names one accepts ours."""
    PRINTER_COLUMNS: ClassVar[tuple[meta.PrinterColumn, ...]] = (
        meta.PrinterColumn("desired workers", "integer", ".status.desiredWorkerReplicas"),
        meta.PrinterColumn("available workers", "integer", ".status.availableWorkerReplicas"),
        meta.PrinterColumn("cpus", "string", ".status.desiredCPU"),
        meta.PrinterColumn("memory", "string", ".status.desiredMemory"),
        meta.PrinterColumn("gpus", "string", ".status.desiredGPU"),
        meta.PrinterColumn("tpus", "string", ".status.desiredTPU", priority=1),
        meta.PrinterColumn("status", "string", ".status.state"),
        meta.PrinterColumn.AGE,
        meta.PrinterColumn("head pod IP", "string", ".status.head.podIP", priority=1),
        meta.PrinterColumn("head service IP", "string", ".status.head.serviceIP", priority=1),
    )
    """KubeRay v1.5.0's columns: same names, types, paths, order and ``-o wide`` ones."""

    api_version: Literal["ray.io/v1"] = "ray.io/v1"
    kind: Literal["RayCluster"] = "RayCluster"
    metadata: meta.RawObject = pydantic.Field(default_factory=dict)
    spec: RayClusterSpec
    status: RayClusterStatus = pydantic.Field(default_factory=RayClusterStatus)
