"""The Services of a RayCluster, as KubeRay v1.7.0 builds them.

- :func:`head_service` ``<cluster>-head-svc``: one port per port of the head
  template's Ray container (``<number>-port`` when unnamed; KubeRay's defaults
  ``client`` 10001, ``dashboard`` 8265, ``gcs-server`` 6379, ``metrics`` 8080,
  ``serve`` 8000 when it has none), plus ``metrics`` 8080 when missing, each with
  ``appProtocol: tcp``, **sorted by name** (unsorted ports made KubeRay rewrite the
  Service on every reconcile, KubeRay #1044). Selector and labels: ``ray.io/cluster``,
  ``ray.io/node-type=head``, ``ray.io/identifier``, ``app.kubernetes.io/name``
  (the head template's value if it sets one, else ``kuberay``),
  ``app.kubernetes.io/created-by``. Annotations: ``headServiceAnnotations``. Type:
  ``headGroupSpec.serviceType``; when that is unset or ``ClusterIP`` the Service is
  **headless** (``clusterIP: None``, ``publishNotReadyAddresses: true``: a cluster has
  one head, and its address should not vanish while it is unready).
  With a ``headService`` template, that Service is the base instead: its name,
  type, labels and annotations are kept where set (the defaults fill the gaps;
  default labels and ``headServiceAnnotations`` win), its selector is replaced, its
  ports come first and the default ports are appended, and it is not made headless.
  KubeRay appends those ports in random order (a Go map); here they are sorted.
- :func:`serve_service` ``<cluster>-serve-svc`` for a cluster annotated
  ``ray.io/enable-serve-service: "true"``: only the serving ports, ``serve`` and those
  named ``serve-<something>`` (``serve-grpc``: KubeRay v1.7.0), sorted by name (KubeRay
  lists them in Go map order, random), selector ``ray.io/cluster`` (every pod: a plain
  RayCluster has no serve-readiness label).
- :func:`headless_worker_service` ``<cluster>-headless`` when a worker group has
  ``numOfHosts > 1`` (:func:`needs_headless_worker_service`): peer DNS for the hosts
  of multi-host replicas.
- :func:`endpoints`: ``status.endpoints`` from a head Service, port name -> port.

No owner references (the reconciler sets them).

>>> cluster = v1.RayCluster.model_validate({
...     "metadata": {"name": "demo", "namespace": "ns"},
...     "spec": {"headGroupSpec": {"template": {"spec": {"containers": [
...         {"ports": [{"name": "gcs", "containerPort": 6379},
...                    {"name": "dashboard", "containerPort": 8265}]}]}}}},
... })
>>> svc = head_service(cluster)
>>> [p["name"] for p in svc["spec"]["ports"]], svc["spec"]["clusterIP"]
(['dashboard', 'gcs', 'metrics'], 'None')
>>> endpoints(svc)
{'dashboard': '8265', 'gcs': '6379', 'metrics': '8080'}
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from api import v1
from controllers.ray import serve
from controllers.raycluster import names
from runtime.client import resources

__all__ = [
    "SERVICES",
    "endpoints",
    "head_service",
    "headless_worker_service",
    "needs_headless_worker_service",
    "serve_service",
]

SERVICES = resources.default_registry.for_kind("v1", "Service")
"""Services, as the client and the cache name them."""

_DEFAULT_PORTS = {
    "client": 10001,
    "gcs-server": 6379,
    "dashboard": 8265,
    "metrics": 8080,
    "serve": serve.DEFAULT_SERVE_PORT,
}
_APP_PROTOCOL = "tcp"


def _cluster_name(cluster: v1.RayCluster) -> str:
    return str(cluster.metadata.get("name") or "")


def _head_container(cluster: v1.RayCluster) -> Mapping[str, Any]:
    spec = cluster.spec.head_group_spec.template.get("spec") or {}
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    if not isinstance(containers, list) or not containers or not isinstance(containers[0], Mapping):
        raise ValueError("headGroupSpec.template should have at least one container")
    return containers[0]


def _ports(cluster: v1.RayCluster) -> dict[str, int]:
    """Port name -> number: the head container's ports, or KubeRay's defaults; metrics added."""
    found: dict[str, int] = {}
    for port in _head_container(cluster).get("ports") or []:
        if not isinstance(port, Mapping):
            continue
        number = port.get("containerPort")
        found[str(port.get("name") or f"{number}-port")] = int(number or 0)
    if not found:
        found = dict(_DEFAULT_PORTS)
    found.setdefault("metrics", _DEFAULT_PORTS["metrics"])
    return found


def _head_labels(cluster: v1.RayCluster, created_by: str) -> dict[str, str]:
    """The head service's selector and labels (the app name may come from the template)."""
    name = _cluster_name(cluster)
    template_labels = (cluster.spec.head_group_spec.template.get("metadata") or {}).get(
        "labels"
    ) or {}
    return {
        names.CLUSTER_LABEL: name,
        names.NODE_TYPE_LABEL: "head",
        names.IDENTIFIER_LABEL: names.identifier(name, "head"),
        names.NAME_LABEL: str(template_labels.get(names.NAME_LABEL, names.APP_NAME)),
        names.CREATED_BY_LABEL: created_by,
    }


def head_service(cluster: v1.RayCluster, *, created_by: str = names.CREATED_BY) -> dict[str, Any]:
    """The head Service KubeRay v1.5.0 would create (:class:`ValueError`: no head container)."""
    head = cluster.spec.head_group_spec
    selector = _head_labels(cluster, created_by)
    annotations = dict(cluster.spec.head_service_annotations or {})
    ports = [
        {"name": name, "port": number, "appProtocol": _APP_PROTOCOL}
        for name, number in sorted(_ports(cluster).items())
    ]
    if head.head_service is not None:
        return _from_template(cluster, head.head_service, selector, annotations, ports)
    spec: dict[str, Any] = {"selector": dict(selector), "ports": ports}
    if head.service_type:
        spec["type"] = head.service_type
    if head.service_type in (None, "", "ClusterIP"):
        spec["clusterIP"] = "None"
        spec["publishNotReadyAddresses"] = True
    metadata: dict[str, Any] = {
        "name": names.head_service_name_for(cluster),
        "namespace": names.namespace_of(cluster),
        "labels": dict(selector),
    }
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec}


def _from_template(
    cluster: v1.RayCluster,
    template: Mapping[str, Any],
    selector: dict[str, str],
    annotations: dict[str, str],
    ports: list[dict[str, Any]],
) -> dict[str, Any]:
    service = copy.deepcopy(dict(template))
    metadata = service["metadata"] = dict(service.get("metadata") or {})
    spec = service["spec"] = dict(service.get("spec") or {})
    spec["selector"] = dict(selector)
    merged = {**(metadata.get("annotations") or {}), **annotations}
    if merged:
        metadata["annotations"] = merged
    spec["ports"] = [*(spec.get("ports") or []), *ports]
    metadata["labels"] = {**(metadata.get("labels") or {}), **selector}
    metadata["name"] = metadata.get("name") or names.head_service_name_for(cluster)
    metadata["namespace"] = names.namespace_of(cluster)
    if not spec.get("type") and cluster.spec.head_group_spec.service_type:
        spec["type"] = cluster.spec.head_group_spec.service_type
    service.setdefault("apiVersion", "v1")
    service.setdefault("kind", "Service")
    return service


def serve_service(cluster: v1.RayCluster) -> dict[str, Any]:
    """``<cluster>-serve-svc`` (for ``ray.io/enable-serve-service: "true"``); :class:`ValueError`
    when the head container has ports and none is a serving one (``serve``, ``serve-*``)."""
    name = _cluster_name(cluster)
    ports = _ports(cluster)
    serving = sorted(p for p in ports if names.is_serving_port(p))
    if not serving:
        raise ValueError(
            "the head container has no port named 'serve' (or 'serve-<protocol>', e.g. "
            "'serve-grpc'), so the serve service has no port"
        )
    spec: dict[str, Any] = {
        "selector": {names.CLUSTER_LABEL: name},
        "ports": [{"name": port, "port": ports[port]} for port in serving],
    }
    if cluster.spec.head_group_spec.service_type:
        spec["type"] = cluster.spec.head_group_spec.service_type
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": names.serve_service_name(name),
            "namespace": names.namespace_of(cluster),
            "labels": {
                names.ORIGINATED_FROM_NAME_LABEL: name,
                names.ORIGINATED_FROM_CRD_LABEL: "RayCluster",
                names.SERVE_LABEL: f"{name}-serve",
            },
        },
        "spec": spec,
    }


def needs_headless_worker_service(cluster: v1.RayCluster) -> bool:
    """Whether some worker group has multi-host replicas (``numOfHosts > 1``)."""
    return any(g.num_of_hosts > 1 for g in cluster.spec.worker_group_specs or [])


def headless_worker_service(cluster: v1.RayCluster) -> dict[str, Any]:
    """``<cluster>-headless``: DNS for every worker pod, ready or not."""
    name = _cluster_name(cluster)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": names.headless_service_name(name),
            "namespace": names.namespace_of(cluster),
            "labels": {names.HEADLESS_SERVICE_LABEL: name},
        },
        "spec": {
            "clusterIP": "None",
            "selector": {names.CLUSTER_LABEL: name, names.NODE_TYPE_LABEL: "worker"},
            "type": "ClusterIP",
            "publishNotReadyAddresses": True,
        },
    }


def endpoints(service: Mapping[str, Any]) -> dict[str, str]:
    """``status.endpoints`` from a head Service: port name -> node port, else target port.

    KubeRay's rule, on the Service as stored: unnamed ports are skipped, a node port
    wins, then the target port (a number, or a named port's name). A Service as built
    here has no target port yet; the API server defaults it to ``port``, and so does
    this function.

    >>> endpoints({"spec": {"ports": [{"name": "a", "port": 1, "nodePort": 30001},
    ...                               {"name": "b", "port": 2, "targetPort": "http"},
    ...                               {"port": 3}]}})
    {'a': '30001', 'b': 'http'}
    """
    out: dict[str, str] = {}
    for port in (service.get("spec") or {}).get("ports") or []:
        name = port.get("name")
        if not name:
            continue
        target = port.get("targetPort", port.get("port"))
        if port.get("nodePort"):
            out[name] = str(port["nodePort"])
        elif target not in (None, 0, ""):
            out[name] = str(target)
    return out
