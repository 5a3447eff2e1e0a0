"""A RayService's own Services, ``<name>-head-svc`` and ``<name>-serve-svc`` (KubeRay's shape).

Both point at the cluster that serves (their selector's ``ray.io/cluster``), and
they are rewritten **only when that cluster changes** (:func:`retargeted`), as
KubeRay does: a Service is never updated for any other difference.

- :func:`head_service` ``<name>-head-svc``: the cluster's own head Service
  (:func:`controllers.raycluster.services.head_service`: same ports, type,
  headless-ness and selector, i.e. the head pod of that cluster) but *without*
  ``headServiceAnnotations`` (KubeRay passes none for a RayService), renamed, in the
  RayService's namespace, with only these labels: ``ray.io/originated-from-cr-name``
  (the RayService), ``ray.io/originated-from-crd: RayService``,
  ``ray.io/node-type: head``, ``ray.io/identifier: <name>-head``.
- :func:`serve_service` ``<name>-serve-svc``: selector ``ray.io/cluster: <cluster>``
  and ``ray.io/serve: "true"`` (the pods whose Serve proxy is healthy); labels
  ``ray.io/originated-from-cr-name``, ``ray.io/originated-from-crd: RayService``,
  ``ray.io/serve: <name>-serve``; the serving ports of the cluster's head container,
  ``serve`` and ``serve-<protocol>`` (KubeRay v1.7.0), sorted by name (``{name, port}``
  only: the server defaults ``targetPort`` to it; ``serve`` 8000 when the container
  lists no ports); type ``rayClusterConfig.headGroupSpec.serviceType``.
  With ``spec.serveService`` that Service is the base: its name (if set; else the
  default), type (if set), labels (ours win) and annotations are kept, its namespace
  and selector are replaced, and its ports are the cluster's serving ports, each
  replaced by the template's port of the same name when it has one (so its
  ``appProtocol``, e.g. ``kubernetes.io/h2c`` for gRPC, is kept), or, when the head
  container has none, the template's own ports as given (KubeRay v1.7.0).
  :class:`ValueError` when there is no serving port at all (KubeRay refuses the same).
- Both get the RayService as controller owner.
- :func:`cluster_serve_service` ``<cluster>-serve-svc`` (``NewClusterWithIncrementalUpgrade``
  only, KubeRay v1.7.0's per-cluster serve Service, the HTTPRoute's backend): the same
  selector and ports as the serve service (``spec.serveService`` is not used, as in
  KubeRay), labels ``ray.io/originated-from-cr-name: <cluster>``,
  ``ray.io/originated-from-crd: RayService``, ``ray.io/serve: <cluster>-serve``; the
  *RayCluster* is its controller owner (it goes with the cluster). Created when absent,
  never updated (KubeRay's rule).

>>> service = {"apiVersion": "ray.io/v1", "kind": "RayService",
...            "metadata": {"name": "svc", "namespace": "ns", "uid": "u1"}, "spec": {}}
>>> cluster = {"metadata": {"name": "svc-abcde", "namespace": "ns"},
...            "spec": {"headGroupSpec": {"template": {"spec": {"containers": [{}]}}}}}
>>> serve = serve_service(service, cluster)
>>> serve["metadata"]["name"], serve["spec"]["ports"]
('svc-serve-svc', [{'name': 'serve', 'port': 8000}])
>>> serve["spec"]["selector"]
{'ray.io/cluster': 'svc-abcde', 'ray.io/serve': 'true'}
>>> head = head_service(service, cluster)
>>> head["metadata"]["name"], selected_cluster(head), objects.is_controlled_by(head, service)
('svc-head-svc', 'svc-abcde', True)
>>> retargeted(head, head) is None
True
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from controllers.raycluster import interface as raycluster
from runtime import objects
from runtime.client import resources

__all__ = [
    "ENDPOINT_SLICES",
    "HEAD_SUFFIX",
    "SERVE_SUFFIX",
    "SERVICES",
    "SERVICE_NAME_LABEL",
    "cluster_of_serve_service",
    "cluster_serve_service",
    "cluster_serve_service_name",
    "head_service",
    "head_service_name",
    "ready_endpoints",
    "retargeted",
    "selected_cluster",
    "serve_service",
    "serve_service_name",
]

Obj = dict[str, Any]

SERVICES = raycluster.SERVICES
ENDPOINT_SLICES = resources.default_registry.for_kind("discovery.k8s.io/v1", "EndpointSlice")
"""Where the serve service's endpoints are (the EndpointSlice controller's)."""
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
"""The label naming an EndpointSlice's Service."""
HEAD_SUFFIX = "-head-svc"
SERVE_SUFFIX = "-serve-svc"
_ALLOCATED = ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy", "healthCheckNodePort")
"""Spec fields the API server allocated; kept when a Service is pointed elsewhere."""


def head_service_name(service_name: str) -> str:
    """``<service_name>-head-svc``.

    >>> head_service_name("svc")
    'svc-head-svc'
    """
    return f"{service_name}{HEAD_SUFFIX}"


def serve_service_name(service: Mapping[str, Any]) -> str:
    """``spec.serveService.metadata.name`` when set (KubeRay honours it), else ``<name>-serve-svc``.

    >>> serve_service_name({"metadata": {"name": "svc"}, "spec": {}})
    'svc-serve-svc'
    """
    template = (service.get("spec") or {}).get("serveService")
    if isinstance(template, Mapping):
        custom = (template.get("metadata") or {}).get("name")
        if custom:
            return str(custom)
    return f"{_meta(service).get('name')}{SERVE_SUFFIX}"


def cluster_serve_service_name(cluster_name: str) -> str:
    """``<cluster_name>-serve-svc``.

    >>> cluster_serve_service_name("svc-a1b2c")
    'svc-a1b2c-serve-svc'
    """
    return f"{cluster_name}{SERVE_SUFFIX}"


def cluster_of_serve_service(name: str) -> str | None:
    """The cluster whose per-cluster serve Service is called ``name``; None when the name
    does not end in ``-serve-svc``.

    >>> cluster_of_serve_service("svc-a1b2c-serve-svc"), cluster_of_serve_service("web")
    ('svc-a1b2c', None)
    """
    if not name.endswith(SERVE_SUFFIX) or len(name) == len(SERVE_SUFFIX):
        return None
    return name[: -len(SERVE_SUFFIX)]


def selected_cluster(svc: Mapping[str, Any]) -> str | None:
    """The ``ray.io/cluster`` value of a Service's selector (None without one)."""
    selector = (svc.get("spec") or {}).get("selector") or {}
    value = selector.get(raycluster.CLUSTER_LABEL) if isinstance(selector, Mapping) else None
    return str(value) if value is not None else None


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _owned(service: Mapping[str, Any], svc: Obj) -> Obj:
    return objects.set_controller_reference(
        service, svc, api_version="ray.io/v1", kind="RayService"
    )


def head_service(
    service: Mapping[str, Any],
    cluster: Mapping[str, Any],
    *,
    created_by: str = raycluster.CREATED_BY,
) -> Obj:
    """``<name>-head-svc`` pointing at the head pod of ``cluster`` (see the module docstring).

    ``created_by`` is the ``app.kubernetes.io/created-by`` value of the cluster's pods
    (part of the selector, as in the cluster's own head Service).
    """
    svc = raycluster.head_service(cluster, created_by=created_by)
    name = str(_meta(service).get("name") or "")
    metadata = svc["metadata"]
    metadata["name"] = head_service_name(name)
    metadata["namespace"] = _meta(service).get("namespace")
    metadata["labels"] = {
        raycluster.ORIGINATED_FROM_NAME_LABEL: name,
        raycluster.ORIGINATED_FROM_CRD_LABEL: "RayService",
        raycluster.NODE_TYPE_LABEL: "head",
        raycluster.IDENTIFIER_LABEL: raycluster.identifier(name, "head"),
    }
    return _owned(service, copy.deepcopy(svc))


def serve_service(service: Mapping[str, Any], cluster: Mapping[str, Any]) -> Obj:
    """``<name>-serve-svc`` pointing at the serve-ready pods of ``cluster`` (module docstring)."""
    meta = _meta(service)
    name = str(meta.get("name") or "")
    spec = service.get("spec") or {}
    labels = {
        raycluster.ORIGINATED_FROM_NAME_LABEL: name,
        raycluster.ORIGINATED_FROM_CRD_LABEL: "RayService",
        raycluster.SERVE_LABEL: f"{name}-serve",
    }
    selector = {
        raycluster.CLUSTER_LABEL: str(_meta(cluster).get("name") or ""),
        raycluster.SERVE_LABEL: "true",
    }
    head_group = (spec.get("rayClusterConfig") or {}).get("headGroupSpec") or {}
    service_type = head_group.get("serviceType")
    ports = raycluster.serve_ports(cluster)  # serve and serve-*, sorted by name
    template = spec.get("serveService")
    if isinstance(template, Mapping):
        svc: Obj = copy.deepcopy(dict(template))
        metadata = svc["metadata"] = dict(svc.get("metadata") or {})
        body = svc["spec"] = dict(svc.get("spec") or {})
        body["selector"] = selector
        if ports:  # the cluster's serving ports, each as the template defines it if it does
            given = {
                port.get("name"): port
                for port in body.get("ports") or []
                if isinstance(port, Mapping)
            }
            body["ports"] = [copy.deepcopy(dict(given.get(p["name"], p))) for p in ports]
        metadata["labels"] = {**(metadata.get("labels") or {}), **labels}
        metadata["name"] = metadata.get("name") or f"{name}{SERVE_SUFFIX}"
        metadata["namespace"] = meta.get("namespace")
        if not body.get("type") and service_type:
            body["type"] = service_type
        svc.setdefault("apiVersion", "v1")
        svc.setdefault("kind", "Service")
        return _owned(service, svc)
    if not ports:
        raise ValueError(
            "the head container lists ports but none named 'serve': the serve service "
            f"{name}{SERVE_SUFFIX} would have no port"
        )
    body = {"selector": selector, "ports": ports}
    if service_type:
        body["type"] = service_type
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": f"{name}{SERVE_SUFFIX}",
            "namespace": meta.get("namespace"),
            "labels": labels,
        },
        "spec": body,
    }
    return _owned(service, svc)


def cluster_serve_service(service: Mapping[str, Any], cluster: Mapping[str, Any]) -> Obj:
    """``<cluster>-serve-svc`` selecting the serve-ready pods of ``cluster``, controlled by
    it (see the module docstring). :class:`ValueError` without a serving port."""
    cluster_meta = _meta(cluster)
    name = str(cluster_meta.get("name") or "")
    spec = service.get("spec") or {}
    ports = raycluster.serve_ports(cluster)
    if not ports:
        raise ValueError(
            "the head container lists ports but none named 'serve': the serve service "
            f"{name}{SERVE_SUFFIX} would have no port"
        )
    body: Obj = {
        "selector": {raycluster.CLUSTER_LABEL: name, raycluster.SERVE_LABEL: "true"},
        "ports": ports,
    }
    service_type = ((spec.get("rayClusterConfig") or {}).get("headGroupSpec") or {}).get(
        "serviceType"
    )
    if service_type:
        body["type"] = service_type
    svc: Obj = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": cluster_serve_service_name(name),
            "namespace": _meta(service).get("namespace"),
            "labels": {
                raycluster.ORIGINATED_FROM_NAME_LABEL: name,
                raycluster.ORIGINATED_FROM_CRD_LABEL: "RayService",
                raycluster.SERVE_LABEL: f"{name}-serve",
            },
        },
        "spec": body,
    }
    return objects.set_controller_reference(
        cluster, svc, api_version="ray.io/v1", kind="RayCluster"
    )


def retargeted(current: Mapping[str, Any], desired: Mapping[str, Any]) -> Obj | None:
    """``current`` pointed where ``desired`` points, or None when it already does.

    None when both select the same ``ray.io/cluster``: then the Service is left
    alone, whatever else differs. Otherwise a copy of ``current`` whose ``spec`` is
    ``desired``'s (KubeRay replaces the whole spec on a switch) except for what the
    API server allocated: ``clusterIP`` (KubeRay keeps it: it is immutable),
    ``clusterIPs``, ``ipFamilies``, ``ipFamilyPolicy`` and, when the type stays the
    same, ``healthCheckNodePort`` and each port's ``nodePort`` (by port name) where
    ``desired`` sets none (so a NodePort does not move). Metadata is
    ``current``'s (with its ``resourceVersion``, for an optimistic update).

    >>> old = {"metadata": {"name": "s"}, "spec": {"clusterIP": "198.19.0.10",
    ...        "selector": {"ray.io/cluster": "a"}}}
    >>> new = {"metadata": {"name": "s"}, "spec": {"selector": {"ray.io/cluster": "b"}}}
    >>> retargeted(old, new)["spec"]
    {'selector': {'ray.io/cluster': 'b'}, 'clusterIP': '198.19.0.10'}
    """
    if selected_cluster(current) == selected_cluster(desired):
        return None
    updated = copy.deepcopy(dict(current))
    old_spec: Mapping[str, Any] = current.get("spec") or {}
    spec: Obj = copy.deepcopy(dict(desired.get("spec") or {}))
    same_type = (old_spec.get("type") or "ClusterIP") == (spec.get("type") or "ClusterIP")
    for key in _ALLOCATED:
        if key in old_spec and (same_type or key != "healthCheckNodePort"):
            spec[key] = copy.deepcopy(old_spec[key])
    if not same_type:
        updated["spec"] = spec
        return updated
    node_ports = {
        port.get("name"): port["nodePort"]
        for port in old_spec.get("ports") or []
        if isinstance(port, Mapping) and port.get("nodePort")
    }
    for port in spec.get("ports") or []:
        if isinstance(port, dict) and not port.get("nodePort") and port.get("name") in node_ports:
            port["nodePort"] = node_ports[port.get("name")]
    updated["spec"] = spec
    return updated


def ready_endpoints(slices: Iterable[Mapping[str, Any]]) -> int:
    """How many distinct pods ``slices`` list as ready, as KubeRay v1.7.0 counts
    ``numServeEndpoints``: an endpoint counts when its ``ready`` condition is
    explicitly ``true`` (absent or ``null`` is not ready here) and it names a pod
    (``targetRef.uid``); a pod listed twice (dual-stack: one slice per IP family)
    counts once.

    >>> ready_endpoints([
    ...     {"endpoints": [{"conditions": {"ready": True}, "targetRef": {"uid": "a"}},
    ...                    {"conditions": {}, "targetRef": {"uid": "b"}},
    ...                    {"conditions": {"ready": False}, "targetRef": {"uid": "c"}},
    ...                    {"conditions": {"ready": True}}]},
    ...     {"endpoints": [{"conditions": {"ready": True}, "targetRef": {"uid": "a"}}]}])
    1
    """
    pods: set[str] = set()
    for piece in slices:
        for endpoint in piece.get("endpoints") or ():
            if (endpoint.get("conditions") or {}).get("ready") is not True:
                continue
            uid = (endpoint.get("targetRef") or {}).get("uid")
            if uid:
                pods.add(str(uid))
    return len(pods)
