"""The Gateway and the HTTPRoute in front of a RayService upgraded with
``NewClusterWithIncrementalUpgrade`` (KubeRay v1.7.0's objects), and how to read them.

- :func:`gateway` ``<svc>-gateway``: ``spec.gatewayClassName`` from
  ``clusterUpgradeOptions.gatewayClassName``, one listener ``http``, protocol ``HTTP``,
  port 80; controlled by the RayService.
- :func:`route` ``<svc>-httproute``: parent the Gateway (by name and namespace), one rule
  matching the path prefix ``/`` whose ``backendRefs`` are the per-cluster serve Services
  ``<cluster>-serve-svc`` (:func:`controllers.rayservice.services.cluster_serve_service`)
  on the serve port, each with its weight (the share of traffic, in percent); controlled
  by the RayService. Its annotation :data:`MIGRATED_ANNOTATION` says when the weights last
  changed, written in the same update as the weights: the interval between two traffic
  steps is kept across a restart of the operator by the object itself.
- :func:`merged` puts the fields the operator manages (those KubeRay's
  ``IsGatewayEqual``/``IsHTTPRouteEqual`` compare, and the annotation) of a desired object
  onto the current one, or says they already match: what the API server or the gateway
  controller defaulted (a backend's ``group``/``kind``, a parent's ``group``/``kind``) is
  never fought over, so a route at rest is never written.
- :func:`gateway_ready` (``Accepted`` and ``Programmed`` true) and :func:`route_ready`
  (the route's parent status for the Gateway: ``Accepted`` and ``ResolvedRefs`` true):
  KubeRay v1.7.0's ``IsGatewayReady``/``IsHTTPRouteReady``.
- :func:`weights` reads the route's weights by cluster name.
- :class:`GatewayClasses`: the operator's allow-list of the classes it creates a Gateway
  of (``--gateway-classes``, the Configuration's ``gatewayClasses``, the Helm value
  ``gatewayClasses``). A Gateway is a load balancer in front of the RayService, made with
  the operator's rights: a RayService author without RBAC for Gateways must not get one
  of any class they name. Empty (the default) allows no class; :data:`ANY_CLASS` (``*``,
  alone) allows every class, KubeRay's behaviour. :meth:`GatewayClasses.parse` reads the
  flag's values (each comma-separated; each name a Gateway API ``ObjectName``:
  lower-case DNS subdomains of at most 253 characters); :meth:`GatewayClasses.refusal`
  is the message a RayService asking for another class gets, naming the field, the
  class, what is allowed and the exact flag value that would allow it.

>>> svc = {"apiVersion": "ray.io/v1", "kind": "RayService",
...        "metadata": {"name": "svc", "namespace": "ns", "uid": "u1"}, "spec": {}}
>>> gw = gateway(svc, "traefik")
>>> gw["metadata"]["name"], gw["spec"]["listeners"]
('svc-gateway', [{'name': 'http', 'protocol': 'HTTP', 'port': 80}])
>>> rt = route(svc, [Backend("svc-a1b2c", 8000, 75), Backend("svc-d3e4f", 8000, 25)],
...            migrated_at="2026-12-02T00:00:00Z")
>>> weights(rt)
{'svc-a1b2c': 75, 'svc-d3e4f': 25}
>>> merged(rt, rt) is None
True
>>> allowed = GatewayClasses.parse(["traefik, istio"])
>>> allowed.allows("istio"), allowed.allows("public-lb"), str(allowed)
(True, False, "'istio', 'traefik'")
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from controllers.rayservice import services
from runtime import objects
from runtime.client import resources

__all__ = [
    "ANY_CLASS",
    "GATEWAYS",
    "GATEWAY_SUFFIX",
    "HTTPROUTES",
    "LISTENER",
    "LISTENER_PORT",
    "MIGRATED_ANNOTATION",
    "ROUTE_SUFFIX",
    "Backend",
    "GatewayClasses",
    "gateway",
    "gateway_name",
    "gateway_ready",
    "merged",
    "migrated_at",
    "route",
    "route_name",
    "route_ready",
    "weights",
]

Obj = dict[str, Any]

GROUP = "gateway.networking.k8s.io"
GATEWAYS = resources.Resource(GROUP, "v1", "Gateway", "gateways", True)
HTTPROUTES = resources.Resource(GROUP, "v1", "HTTPRoute", "httproutes", True)
GATEWAY_SUFFIX = "-gateway"
ROUTE_SUFFIX = "-httproute"
LISTENER = "http"
"""The Gateway's one listener (KubeRay's ``GatewayListenerPortName``)."""
LISTENER_PORT = 80
"""Its port (KubeRay's ``DefaultGatewayListenerPort``)."""
MIGRATED_ANNOTATION = "ray.io/traffic-migrated-at"
"""When the route's weights last changed (RFC 3339), written with them."""


ANY_CLASS = "*"
"""``--gateway-classes=*``: every class allowed (KubeRay's behaviour)."""
_CLASS_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_CLASS_NAME_MAX = 253
_FIELD = "spec.upgradeStrategy.clusterUpgradeOptions.gatewayClassName"


@dataclasses.dataclass(frozen=True)
class GatewayClasses:
    """The GatewayClasses the operator creates a RayService's Gateway of (see the module
    docstring). The default allows none."""

    names: tuple[str, ...] = ()
    """The allowed classes, sorted, each once."""
    every: bool = False
    """:data:`ANY_CLASS` was given: every class is allowed."""

    @classmethod
    def parse(cls, values: Iterable[str]) -> GatewayClasses:
        """The classes ``values`` give, each value a comma-separated list (blanks and empty
        items are skipped). :class:`ValueError` naming the first value that is not a
        GatewayClass name, and for :data:`ANY_CLASS` given with anything else."""
        names: set[str] = set()
        every = False
        for value in values:
            for item in (part.strip() for part in value.split(",")):
                if item == ANY_CLASS:
                    every = True
                elif item:
                    if len(item) > _CLASS_NAME_MAX or not _CLASS_NAME.fullmatch(item):
                        raise ValueError(
                            f"{item[:80]!r} is not a GatewayClass name (a lower-case DNS "
                            f"subdomain of at most {_CLASS_NAME_MAX} characters: letters, "
                            "digits, '-' and '.'); '*' allows every class"
                        )
                    names.add(item)
        if every and names:
            raise ValueError(
                f"{ANY_CLASS!r} allows every GatewayClass: give it alone, not with "
                f"{', '.join(repr(n) for n in sorted(names))}"
            )
        return cls(names=tuple(sorted(names)), every=every)

    def allows(self, class_name: str) -> bool:
        """Whether a Gateway of ``class_name`` may be created."""
        return self.every or class_name in self.names

    def flag_value(self) -> str:
        """The value of ``--gateway-classes`` that gives these classes."""
        return ANY_CLASS if self.every else ",".join(self.names)

    def __str__(self) -> str:
        if self.every:
            return "any"
        return ", ".join(repr(n) for n in self.names) if self.names else "none"

    def refusal(self, class_name: str) -> str | None:
        """Why a RayService may not have a Gateway of ``class_name``; None when it may."""
        if self.allows(class_name):
            return None
        wanted = GatewayClasses(names=tuple(sorted({*self.names, class_name})))
        return (
            f"{_FIELD} {class_name!r} is not allowed by the operator (allowed: {self}): "
            "a Gateway is a load balancer the operator would create with its own rights. "
            "A cluster admin allows the class with the operator's flag "
            f"--gateway-classes={wanted.flag_value()} (Helm value gatewayClasses, "
            "Configuration field gatewayClasses) and restarts the operator"
        )


@dataclasses.dataclass(frozen=True)
class Backend:
    """One cluster behind the route: its name, serve port and weight (percent)."""

    cluster: str
    port: int
    weight: int


def gateway_name(service_name: str) -> str:
    """``<service_name>-gateway``."""
    return f"{service_name}{GATEWAY_SUFFIX}"


def route_name(service_name: str) -> str:
    """``<service_name>-httproute``."""
    return f"{service_name}{ROUTE_SUFFIX}"


def _owned(service: Mapping[str, Any], obj: Obj) -> Obj:
    return objects.set_controller_reference(
        service, obj, api_version="ray.io/v1", kind="RayService"
    )


def gateway(service: Mapping[str, Any], class_name: str) -> Obj:
    """``<svc>-gateway`` of class ``class_name`` (see the module docstring)."""
    meta = service["metadata"]
    obj: Obj = {
        "apiVersion": GATEWAYS.api_version,
        "kind": GATEWAYS.kind,
        "metadata": {"name": gateway_name(meta["name"]), "namespace": meta["namespace"]},
        "spec": {
            "gatewayClassName": class_name,
            "listeners": [{"name": LISTENER, "protocol": "HTTP", "port": LISTENER_PORT}],
        },
    }
    return _owned(service, obj)


def route(service: Mapping[str, Any], backends: Sequence[Backend], *, migrated_at: str) -> Obj:
    """``<svc>-httproute`` sending ``/`` to ``backends`` (see the module docstring)."""
    meta = service["metadata"]
    namespace = meta["namespace"]
    obj: Obj = {
        "apiVersion": HTTPROUTES.api_version,
        "kind": HTTPROUTES.kind,
        "metadata": {
            "name": route_name(meta["name"]),
            "namespace": namespace,
            "annotations": {MIGRATED_ANNOTATION: migrated_at},
        },
        "spec": {
            "parentRefs": [{"name": gateway_name(meta["name"]), "namespace": namespace}],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                    "backendRefs": [
                        {
                            "name": services.cluster_serve_service_name(b.cluster),
                            "namespace": namespace,
                            "port": b.port,
                            "weight": b.weight,
                        }
                        for b in backends
                    ],
                }
            ],
        },
    }
    return _owned(service, obj)


def _managed(obj: Mapping[str, Any]) -> Any:
    """The fields the operator manages, in a comparable form."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    spec = obj.get("spec") or {}
    if obj.get("kind") == GATEWAYS.kind:
        return (
            spec.get("gatewayClassName"),
            [
                (item.get("name"), item.get("protocol"), item.get("port"))
                for item in spec.get("listeners") or []
            ],
        )
    return (
        (meta.get("annotations") or {}).get(MIGRATED_ANNOTATION),
        [(p.get("name"), p.get("namespace") or namespace) for p in spec.get("parentRefs") or []],
        [
            (
                rule.get("matches"),
                [
                    (
                        ref.get("name"),
                        ref.get("namespace") or namespace,
                        ref.get("port"),
                        ref.get("weight", 1),
                    )
                    for ref in rule.get("backendRefs") or []
                ],
            )
            for rule in spec.get("rules") or []
        ],
    )


def merged(current: Mapping[str, Any], desired: Mapping[str, Any]) -> Obj | None:
    """``current`` with ``desired``'s spec and managed annotation, or None when the managed
    fields already match (see the module docstring). Metadata is ``current``'s (its
    ``resourceVersion`` makes the update optimistic)."""
    if _managed(current) == _managed(desired):
        return None
    updated: Obj = copy.deepcopy(dict(current))
    updated["spec"] = copy.deepcopy(desired.get("spec") or {})
    wanted = ((desired.get("metadata") or {}).get("annotations") or {}).get(MIGRATED_ANNOTATION)
    if wanted is not None:
        annotations = updated["metadata"].setdefault("annotations", {})
        annotations[MIGRATED_ANNOTATION] = wanted
    return updated


def _true(conditions: Any, type_: str) -> bool:
    return any(
        isinstance(c, Mapping) and c.get("type") == type_ and c.get("status") == "True"
        for c in conditions or ()
    )


def gateway_ready(gw: Mapping[str, Any] | None) -> bool:
    """``Accepted`` and ``Programmed`` are both true.

    >>> gateway_ready({"status": {"conditions": [{"type": "Accepted", "status": "True"},
    ...                                          {"type": "Programmed", "status": "True"}]}})
    True
    >>> gateway_ready({"status": {"conditions": [{"type": "Accepted", "status": "True"}]}})
    False
    """
    if gw is None:
        return False
    conditions = (gw.get("status") or {}).get("conditions")
    return _true(conditions, "Accepted") and _true(conditions, "Programmed")


def route_ready(rt: Mapping[str, Any] | None, gw: Mapping[str, Any] | None) -> bool:
    """The route's parent status for ``gw`` has ``Accepted`` and ``ResolvedRefs`` true."""
    if rt is None or gw is None:
        return False
    name = gw["metadata"]["name"]
    namespace = gw["metadata"].get("namespace")
    for parent in (rt.get("status") or {}).get("parents") or ():
        ref = parent.get("parentRef") or {}
        if ref.get("name") != name or (ref.get("namespace") or namespace) != namespace:
            continue
        conditions = parent.get("conditions")
        if _true(conditions, "Accepted") and _true(conditions, "ResolvedRefs"):
            return True
    return False


def weights(rt: Mapping[str, Any] | None) -> dict[str, int]:
    """The first rule's weights by cluster name (the backend ``<cluster>-serve-svc``; a
    backend of another name is not ours and is left out; no weight means 1, the Gateway
    API's default)."""
    found: dict[str, int] = {}
    if rt is None:
        return found
    rules = (rt.get("spec") or {}).get("rules") or []
    if not rules:
        return found
    for ref in rules[0].get("backendRefs") or []:
        cluster = services.cluster_of_serve_service(str(ref.get("name") or ""))
        if cluster is not None:
            weight = ref.get("weight", 1)
            found[cluster] = int(weight) if isinstance(weight, int) else 1
    return found


def migrated_at(rt: Mapping[str, Any] | None) -> str | None:
    """The route's :data:`MIGRATED_ANNOTATION`, if any."""
    if rt is None:
        return None
    value = ((rt.get("metadata") or {}).get("annotations") or {}).get(MIGRATED_ANNOTATION)
    return str(value) if value else None
