"""``RayService``: Ray Serve applications on a RayCluster, upgraded without downtime.

Field names, optionality and API defaults follow KubeRay v1, so RayService YAML
written for KubeRay validates here and round-trips through
``RayService.model_validate(obj).model_dump(by_alias=True, exclude_unset=True)``
unchanged.

Spec:

- ``serveConfigV2``: the Serve multi-application config, a YAML document in a
  string (``applications: [{name, import_path, route_prefix, ...}]``). It is
  parsed at reconcile time, not here: invalid YAML is reported on the object (a
  condition and an Event), it does not fail validation. At most
  :data:`MAX_SERVE_CONFIG_LENGTH` characters (1.5 MiB, etcd's object limit; the CRD's
  ``maxLength``).
- ``rayClusterConfig`` (required): a :class:`~api.v1.raycluster.RayClusterSpec`,
  pod templates carried as raw objects (see :mod:`api.v1.raycluster` for that
  trade-off).
- ``upgradeStrategy.type``: ``NewCluster`` (also when unset: a changed cluster
  spec starts a new cluster and traffic moves when it is ready), ``None`` (never
  start a new cluster), ``NewClusterWithIncrementalUpgrade`` (KubeRay v1.7.0's: a
  Gateway and an HTTPRoute in front of both clusters; capacity and traffic move step
  by step, :class:`ClusterUpgradeOptions`); any other value is rejected by the API
  server.
- ``rayClusterDeletionDelaySeconds`` (>= 0, API default 60): how long an old
  cluster lives after traffic left it.
- ``excludeHeadPodFromServeSvc``, ``serveService`` (a full Service, raw JSON),
  ``suspend`` (accepted; the reconciler reports that it is not supported yet),
  ``managedBy``.
- ``serviceUnhealthySecondThreshold``, ``deploymentUnhealthySecondThreshold``:
  deprecated by KubeRay, accepted and ignored.

Status: ``conditions`` (:class:`ConditionType`: ``Ready``, ``UpgradeInProgress``,
with ``observedGeneration``), ``activeServiceStatus`` / ``pendingServiceStatus``
(the serving cluster and the one being prepared, with per-application and
per-deployment Serve statuses), ``serviceStatus`` (deprecated: ``Running`` or
empty), ``numServeEndpoints``, ``observedGeneration`` and ``lastUpdateTime``,
which is volatile (:attr:`RayServiceStatus.VOLATILE_FIELDS`; matched at any depth,
so it also covers the embedded RayCluster statuses).

>>> svc = RayService.model_validate({
...     "metadata": {"name": "demo"},
...     "spec": {"rayClusterConfig": {"headGroupSpec": {"template": {}}}},
... })
>>> svc.spec.ray_cluster_deletion_delay_seconds
60
>>> svc.model_dump(by_alias=True, exclude_unset=True)["spec"]
{'rayClusterConfig': {'headGroupSpec': {'template': {}}}}
"""

from __future__ import annotations

import enum
from typing import Annotated, ClassVar, Literal

import pydantic

from api.v1 import groupversion, meta, raycluster
from runtime.client import resources

__all__ = [
    "MAX_SERVE_CONFIG_LENGTH",
    "AppStatus",
    "ApplicationStatus",
    "ClusterUpgradeOptions",
    "ConditionReason",
    "ConditionType",
    "RayService",
    "RayServiceClusterStatus",
    "RayServiceSpec",
    "RayServiceStatus",
    "RayServiceUpgradeStrategy",
    "ServeDeploymentStatus",
    "UpgradeType",
]


class UpgradeType(enum.StrEnum):
    """Values of ``spec.upgradeStrategy.type``."""

    NEW_CLUSTER = "NewCluster"
    NEW_CLUSTER_WITH_INCREMENTAL_UPGRADE = "NewClusterWithIncrementalUpgrade"
    """Accepted for KubeRay compatibility; not implemented by this operator."""
    NONE = "None"


class ConditionType(enum.StrEnum):
    """Condition types of a RayService."""

    READY = "Ready"
    """Requests can be served: the serving cluster has at least one serve endpoint."""
    UPGRADE_IN_PROGRESS = "UpgradeInProgress"
    """A new cluster is being prepared to take over."""


class ConditionReason(enum.StrEnum):
    """Reasons of the RayService conditions."""

    INITIALIZING = "Initializing"
    INITIALIZING_TIMEOUT = "InitializingTimeout"
    ZERO_SERVE_ENDPOINTS = "ZeroServeEndpoints"
    NON_ZERO_SERVE_ENDPOINTS = "NonZeroServeEndpoints"
    BOTH_ACTIVE_PENDING_CLUSTERS_EXIST = "BothActivePendingClustersExist"
    NO_PENDING_CLUSTER = "NoPendingCluster"
    NO_ACTIVE_CLUSTER = "NoActiveCluster"
    VALIDATION_FAILED = "ValidationFailed"


class ApplicationStatus(enum.StrEnum):
    """Ray Serve application statuses (as the dashboard reports them)."""

    NOT_STARTED = "NOT_STARTED"
    DEPLOYING = "DEPLOYING"
    RUNNING = "RUNNING"
    DEPLOY_FAILED = "DEPLOY_FAILED"
    DELETING = "DELETING"
    UNHEALTHY = "UNHEALTHY"


class ClusterUpgradeOptions(meta.Model):
    """How ``NewClusterWithIncrementalUpgrade`` moves capacity and traffic (KubeRay v1.7.0's
    fields; their ranges are checked by the reconciler, as KubeRay does, so a bad value
    is reported on the object rather than refused by the API server)."""

    max_surge_percent: meta.Int32 | None = 100
    """Serve ``target_capacity`` points a cluster gains or loses per capacity step."""
    step_size_percent: meta.Int32
    """Traffic points moved to the new cluster per step (at most ``maxSurgePercent``)."""
    interval_seconds: meta.Int32
    """Seconds between two traffic steps."""
    gateway_class_name: str
    """The GatewayClass of the RayService's Gateway."""


class RayServiceUpgradeStrategy(meta.Model):
    """How a change of ``rayClusterConfig`` is rolled out."""

    type: Literal["NewCluster", "NewClusterWithIncrementalUpgrade", "None"] | None = None
    """An :class:`UpgradeType`; unset means ``NewCluster``."""
    cluster_upgrade_options: ClusterUpgradeOptions | None = None
    """Options of ``NewClusterWithIncrementalUpgrade``."""


MAX_SERVE_CONFIG_LENGTH = 1536 * 1024
"""Longest ``serveConfigV2``, in characters."""


class RayServiceSpec(meta.Model):
    """The desired state of a RayService."""

    serve_config_v2: Annotated[str, pydantic.Field(max_length=MAX_SERVE_CONFIG_LENGTH)] | None = (
        None
    )
    """The Serve multi-application config, as a YAML string."""
    ray_cluster_config: raycluster.RayClusterSpec
    """The RayCluster to run the applications on."""
    upgrade_strategy: RayServiceUpgradeStrategy | None = None
    """How a change of ``rayClusterConfig`` is rolled out."""
    ray_cluster_deletion_delay_seconds: Annotated[meta.Int32, pydantic.Field(ge=0)] = 60
    """Seconds an old RayCluster is kept after traffic moved away from it."""
    exclude_head_pod_from_serve_svc: bool | None = None
    """Never route serve traffic to the head pod."""
    serve_service: meta.RawObject | None = None
    """A Service to use as the template of the serve service."""
    suspend: bool | None = None
    """Delete the clusters while ``true`` (accepted; not supported yet)."""
    managed_by: str | None = None
    """The controller that reconciles this RayService (KubeRay/Kueue multi-cluster)."""
    service_unhealthy_second_threshold: meta.Int32 | None = None
    """Deprecated by KubeRay; ignored."""
    deployment_unhealthy_second_threshold: meta.Int32 | None = None
    """Deprecated by KubeRay; ignored."""


class ServeDeploymentStatus(meta.Model):
    """One Serve deployment as the dashboard reports it."""

    status: str | None = None
    """``UPDATING``, ``HEALTHY``, ``UNHEALTHY``, ..."""
    message: str | None = None


class AppStatus(meta.Model):
    """One Serve application as the dashboard reports it."""

    status: str | None = None
    """An :class:`ApplicationStatus` value."""
    message: str | None = None
    serve_deployment_statuses: dict[str, ServeDeploymentStatus] | None = None
    """The application's deployments by name."""


class RayServiceClusterStatus(meta.Model):
    """One of the RayService's clusters (the active or the pending one) and its applications."""

    ray_cluster_name: str | None = None
    ray_cluster_status: raycluster.RayClusterStatus | None = None
    """A copy of that RayCluster's status."""
    application_statuses: dict[str, AppStatus] | None = None
    """Serve applications by name."""
    target_capacity: meta.Int32 | None = None
    """Serve ``target_capacity`` percentage (incremental upgrade; KubeRay)."""
    traffic_routed_percent: meta.Int32 | None = None
    """Share of traffic routed to this cluster (incremental upgrade; KubeRay)."""
    last_traffic_migrated_time: meta.Time | None = None
    """When ``trafficRoutedPercent`` last changed (incremental upgrade; KubeRay)."""


class RayServiceStatus(meta.Model):
    """The observed state of a RayService."""

    VOLATILE_FIELDS: ClassVar[frozenset[str]] = frozenset({"lastUpdateTime"})
    """Fields (at any depth) the status writer ignores when comparing statuses."""

    conditions: meta.Conditions = pydantic.Field(default_factory=list)
    """The latest observations, one per :class:`ConditionType`."""
    active_service_status: RayServiceClusterStatus | None = None
    """The cluster serving traffic."""
    pending_service_status: RayServiceClusterStatus | None = None
    """The cluster being prepared to take over, during an upgrade."""
    service_status: str | None = None
    """Deprecated: ``Running`` when ``Ready`` is ``True``, else empty."""
    num_serve_endpoints: meta.Int32 = 0
    """Ready endpoints of the serve service."""
    last_update_time: meta.Time | None = None
    """When the status was last written (volatile)."""
    observed_generation: meta.Int64 = 0
    """The ``metadata.generation`` this status was computed for."""


class RayService(meta.Model):
    """Ray Serve applications on a RayCluster, upgraded without downtime."""

    RESOURCE: ClassVar[resources.Resource] = groupversion.RAYSERVICES
    CATEGORIES: ClassVar[tuple[str, ...]] = ("all",)
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ()
    LEGACY_VERSIONS: ClassVar[tuple[str, ...]] = ("v1alpha1",)
    """Versions KubeRay's CRD lists besides ``v1``: listed in ours as neither served nor
    storage, so a cluster whose CRD ``status.storedVersions`` names one accepts ours."""
    PRINTER_COLUMNS: ClassVar[tuple[meta.PrinterColumn, ...]] = (
        meta.PrinterColumn("service status", "string", ".status.serviceStatus"),
        # KubeRay declares this integer field a string column; the cell reads the same.
        meta.PrinterColumn("num serve endpoints", "string", ".status.numServeEndpoints"),
    )
    """KubeRay v1.5.0's columns, exactly (it has no age column for RayServices)."""

    api_version: Literal["ray.io/v1"] = "ray.io/v1"
    kind: Literal["RayService"] = "RayService"
    metadata: meta.RawObject = pydantic.Field(default_factory=dict)
    spec: RayServiceSpec
    status: RayServiceStatus = pydantic.Field(default_factory=RayServiceStatus)
