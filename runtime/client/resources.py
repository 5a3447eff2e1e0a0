"""Which URL a kind lives at: a small registry from (apiVersion, kind) to a :class:`Resource`.

The client is generic: objects are plain JSON dicts, and the registry says where
each kind is served (group, version, plural, namespaced or not). Common
built-in kinds are registered; register your own CRDs (or fill the registry from
discovery with :meth:`runtime.client.Client.discover`).

>>> pods = default_registry.for_kind("v1", "Pod")
>>> pods.path("ns", "web-0", "status")
'/api/v1/namespaces/ns/pods/web-0/status'
>>> Resource("example.com", "v1", "Database", "databases").path("ns")
'/apis/example.com/v1/namespaces/ns/databases'
>>> default_registry.for_kind("apps/v1", "Deployment").path()
'/apis/apps/v1/deployments'

A built-in kind is named shortest with :func:`builtin` (also ``runtime.client.builtin``):

>>> builtin("ConfigMap") is default_registry.for_kind("v1", "ConfigMap")
True
>>> builtin("Deployment").path("ns")
'/apis/apps/v1/namespaces/ns/deployments'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["Registry", "Resource", "builtin", "default_registry"]


@dataclasses.dataclass(frozen=True, slots=True)
class Resource:
    """A served resource: ``group`` is ``""`` for the core API."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool = True
    _hash: int = dataclasses.field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Resources key every cache lookup: hash once, not per lookup.
        object.__setattr__(self, "_hash", hash((self.group, self.version, self.plural)))

    def __hash__(self) -> int:
        return self._hash

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:  # fmt: skip
        """The URL path; without ``namespace`` a namespaced kind lists across namespaces."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        elif subresource:
            raise ValueError("a subresource needs an object name")
        return base

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


_BUILTIN = [
    Resource("", "v1", "Pod", "pods"),
    Resource("", "v1", "Service", "services"),
    Resource("", "v1", "ConfigMap", "configmaps"),
    Resource("", "v1", "Secret", "secrets"),
    Resource("", "v1", "Event", "events"),
    Resource("", "v1", "ServiceAccount", "serviceaccounts"),
    Resource("", "v1", "Endpoints", "endpoints"),
    Resource("", "v1", "Namespace", "namespaces", namespaced=False),
    Resource("", "v1", "Node", "nodes", namespaced=False),
    Resource("apps", "v1", "Deployment", "deployments"),
    Resource("apps", "v1", "ReplicaSet", "replicasets"),
    Resource("batch", "v1", "Job", "jobs"),
    Resource("coordination.k8s.io", "v1", "Lease", "leases"),
    Resource("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices"),
    Resource("events.k8s.io", "v1", "Event", "events"),
    Resource("networking.k8s.io", "v1", "Ingress", "ingresses"),
    Resource("rbac.authorization.k8s.io", "v1", "Role", "roles"),
    Resource("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings"),
    Resource("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", namespaced=False),
    Resource(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        namespaced=False,
    ),
    Resource(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        namespaced=False,
    ),
]


class Registry:
    """(apiVersion, kind) -> :class:`Resource`."""

    def __init__(self, resources: Iterable[Resource] = ()) -> None:
        self._by_kind: dict[tuple[str, str], Resource] = {}
        for resource in resources:
            self.register(resource)

    def register(self, resource: Resource) -> Resource:
        self._by_kind[(resource.api_version, resource.kind)] = resource
        return resource

    def for_kind(self, api_version: str, kind: str) -> Resource:
        try:
            return self._by_kind[(api_version, kind)]
        except KeyError:
            raise LookupError(
                f"unknown kind {kind} in {api_version}: register it "
                "(runtime.client.Resource) or run discovery"
            ) from None

    def for_object(self, obj: Mapping[str, Any]) -> Resource:
        return self.for_kind(obj.get("apiVersion", ""), obj.get("kind", ""))

    def resource_for(self, obj_or_resource: Mapping[str, Any] | Resource) -> Resource:
        """``obj_or_resource`` itself when it is a :class:`Resource`, else
        :meth:`for_object` (a client's ``resource_for``).

        >>> pods = default_registry.for_kind("v1", "Pod")
        >>> default_registry.resource_for(pods) is pods
        True
        >>> default_registry.resource_for({"apiVersion": "v1", "kind": "Pod"}) is pods
        True
        """
        if isinstance(obj_or_resource, Resource):
            return obj_or_resource
        return self.for_object(obj_or_resource)

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._by_kind

    def copy(self) -> Registry:
        return Registry(self._by_kind.values())


default_registry = Registry(_BUILTIN)
"""Built-in kinds; copied into each client that is given no registry."""


def builtin(kind: str, group: str | None = None) -> Resource:
    """The built-in resource of ``kind`` (one of the kinds :data:`default_registry` starts
    with). A kind served by two groups is the core group's unless ``group`` names the other,
    as ``kubectl get events`` means the core ``v1`` Events:

    >>> builtin("Event").api_version, builtin("Event", group="events.k8s.io").api_version
    ('v1', 'events.k8s.io/v1')
    >>> builtin("Widget")
    Traceback (most recent call last):
    ...
    LookupError: Widget is no built-in kind (ClusterRole, ClusterRoleBinding, ConfigMap, \
CustomResourceDefinition, Deployment, EndpointSlice, Endpoints, Event, Ingress, Job, Lease, \
Namespace, Node, Pod, ReplicaSet, Role, RoleBinding, Secret, Service, ServiceAccount): \
describe it with runtime.client.Resource(group, version, kind, plural)
    """
    found = [r for r in _BUILTIN if r.kind == kind and (group is None or r.group == group)]
    if not found:
        kinds = ", ".join(sorted({r.kind for r in _BUILTIN}))
        raise LookupError(
            f"{kind} is no built-in kind{f' in group {group!r}' if group is not None else ''} "
            f"({kinds}): describe it with runtime.client.Resource(group, version, kind, plural)"
        )
    return min(found, key=lambda r: r.group != "")  # the core group first
