"""The ``ray.io/v1`` API: RayCluster, RayService, RayJob and RayCronJob as pydantic models.

The models are the single source of truth for the API: the CRD schemas in
``config/crd/bases`` are generated from them (``hack/gen_manifests.py``), and the
reconcilers read and write objects through them.

- :mod:`api.v1.groupversion`: ``GROUP``, ``VERSION`` and the
  :class:`runtime.client.resources.Resource` of each kind (``RAYCLUSTERS``,
  ``RAYSERVICES``, ``RAYJOBS``, ``RAYCRONJOBS``).
- :mod:`api.v1.meta`: the model base (camelCase aliases, unknown fields kept,
  ``None`` = unset), ``Condition`` in the ``metav1.Condition`` shape, and the
  scalar types (``Int32``, ``Time``, ``Quantity``, ``RawObject``).
- :mod:`api.v1.raycluster`: ``RayCluster`` and its spec and status; the module
  docstring says why pod templates are raw objects.
- :mod:`api.v1.rayservice`: ``RayService`` and its spec and status.
- :mod:`api.v1.rayjob`: ``RayJob`` and its spec and status.
- :mod:`api.v1.raycronjob`: ``RayCronJob`` and its spec and status.

Each status type names its volatile fields in ``VOLATILE_FIELDS`` (for
:class:`runtime.status.StatusWriter`'s ``volatile=``).

>>> import api.v1 as v1
>>> v1.RayService.RESOURCE.path("ns", "web")
'/apis/ray.io/v1/namespaces/ns/rayservices/web'
>>> sorted(v1.RayServiceStatus.VOLATILE_FIELDS)
['lastUpdateTime']
"""

from api.v1 import groupversion, meta, raycluster, raycronjob, rayjob, rayservice
from api.v1.groupversion import (
    API_VERSION,
    GROUP,
    RAYCLUSTERS,
    RAYCRONJOBS,
    RAYJOBS,
    RAYSERVICES,
    VERSION,
    add_to_registry,
)
from api.v1.meta import Condition
from api.v1.raycluster import (
    HeadGroupSpec,
    RayCluster,
    RayClusterSpec,
    RayClusterStatus,
    WorkerGroupSpec,
)
from api.v1.raycronjob import RayCronJob, RayCronJobSpec, RayCronJobStatus
from api.v1.rayjob import RayJob, RayJobSpec, RayJobStatus
from api.v1.rayservice import RayService, RayServiceSpec, RayServiceStatus

MODELS = (RayCluster, RayService, RayJob, RayCronJob)
"""The top-level kinds, each with its CRD declarations (``RESOURCE``, ``PRINTER_COLUMNS``, ...)."""

__all__ = [
    "API_VERSION",
    "GROUP",
    "MODELS",
    "RAYCLUSTERS",
    "RAYCRONJOBS",
    "RAYJOBS",
    "RAYSERVICES",
    "VERSION",
    "Condition",
    "HeadGroupSpec",
    "RayCluster",
    "RayClusterSpec",
    "RayClusterStatus",
    "RayCronJob",
    "RayCronJobSpec",
    "RayCronJobStatus",
    "RayJob",
    "RayJobSpec",
    "RayJobStatus",
    "RayService",
    "RayServiceSpec",
    "RayServiceStatus",
    "WorkerGroupSpec",
    "add_to_registry",
    "groupversion",
    "meta",
    "raycluster",
    "raycronjob",
    "rayjob",
    "rayservice",
]
