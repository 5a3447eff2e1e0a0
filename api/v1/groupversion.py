"""The ``ray.io/v1`` group and version, and where its kinds are served.

>>> RAYSERVICES.path("default", "web")
'/apis/ray.io/v1/namespaces/default/rayservices/web'
>>> from runtime.client import resources
>>> registry = add_to_registry(resources.Registry())
>>> registry.for_kind("ray.io/v1", "RayCluster") is RAYCLUSTERS
True
"""

from __future__ import annotations

from runtime.client import resources

__all__ = [
    "API_VERSION",
    "GROUP",
    "KINDS",
    "RAYCLUSTERS",
    "RAYCRONJOBS",
    "RAYJOBS",
    "RAYSERVICES",
    "VERSION",
    "add_to_registry",
]

GROUP = "ray.io"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"

RAYCLUSTERS = resources.Resource(GROUP, VERSION, "RayCluster", "rayclusters")
RAYSERVICES = resources.Resource(GROUP, VERSION, "RayService", "rayservices")
RAYJOBS = resources.Resource(GROUP, VERSION, "RayJob", "rayjobs")
RAYCRONJOBS = resources.Resource(GROUP, VERSION, "RayCronJob", "raycronjobs")
KINDS = (RAYCLUSTERS, RAYSERVICES, RAYJOBS, RAYCRONJOBS)


def add_to_registry(registry: resources.Registry) -> resources.Registry:
    """Register every ``ray.io/v1`` kind in ``registry`` (a client's) and return it."""
    for resource in KINDS:
        registry.register(resource)
    return registry
