"""Setup: the RayService controller wired to a manager, beside its reconciler (as
controller-runtime keeps ``SetupWithManager`` beside ``Reconcile``).

:func:`setup` wires the reconciler to a manager. It reconciles a RayService on
changes to its spec, labels or annotations (not on its own status writes), on any
change to the RayClusters (but its own ``ray.io/serve-config-hash`` annotation:
:func:`not_only_serve_config_hash`) and Services it controls, and on the EndpointSlices of
its services (they carry the RayService's ``ray.io/originated-from-*`` labels,
copied from the Service by the EndpointSlice controller; a per-cluster serve Service's
name the cluster, ``<svc>-<5 characters>``, whose RayService is asked too), and on its
clusters' head pods turning ready or not (:func:`head_pod_owner`,
:func:`head_readiness_changed`: the pod informer the RayCluster controller has anyway, so
no API traffic; the Serve config goes to a head as soon as it is ready, not after the
RayCluster controller's next status write). With
``Options.gateway_api`` (:func:`gateway_api_served`) it also watches the Gateways and
HTTPRoutes it controls (KubeRay v1.7.0 polls them every 2 s instead), so a gateway
controller accepting them wakes the upgrade. The Ray dashboard sends
no events: the reconciler polls it (see :mod:`controllers.rayservice.reconciler`).
:data:`RBAC` is what it needs in the API server.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import api.v1 as v1
from controllers import rbac
from controllers.ray import dashboard, retries
from controllers.raycluster import interface as raycluster
from controllers.rayservice import clusters, gateway, services
from controllers.rayservice import poller as poller_
from controllers.rayservice import reconciler as reconciler_
from runtime import builder, handler, predicate, reconcile
from runtime import controller as controller_
from runtime.cache import informer
from runtime.client import errors

__all__ = [
    "NAME",
    "RBAC",
    "RECORDER",
    "gateway_api_served",
    "head_pod_owner",
    "head_readiness_changed",
    "not_only_serve_config_hash",
    "rate_limiter",
    "serve_endpoint_owner",
    "setup",
]

NAME = "rayservice"
"""The controller's name (logs, metrics)."""
RECORDER = "rayservice-controller"
"""Who its Events say reported them (``reportingController``; KubeRay's name)."""

RBAC = rbac.RAYSERVICE
"""The API permissions the reconciler needs."""


def serve_endpoint_owner(obj: dict[str, Any]) -> Iterator[reconcile.Request]:
    """The RayService whose Service an EndpointSlice belongs to, from the labels the
    EndpointSlice controller copies from the Service.

    >>> list(serve_endpoint_owner({"metadata": {"namespace": "ns", "labels": {
    ...     "ray.io/originated-from-crd": "RayService",
    ...     "ray.io/originated-from-cr-name": "demo"}}}))
    [Request(namespace='ns', name='demo')]
    """
    meta = obj["metadata"]
    labels = meta.get("labels") or {}
    if labels.get(clusters.ORIGINATED_FROM_CRD_LABEL) != clusters.ORIGINATED_FROM_CRD:
        return
    owner = labels.get(clusters.ORIGINATED_FROM_NAME_LABEL)
    if owner:
        yield reconcile.Request(meta.get("namespace") or "", owner)
        stem, _, suffix = str(owner).rpartition("-")
        if stem and len(suffix) == 5:  # a per-cluster serve Service: <svc>-<5 characters>
            yield reconcile.Request(meta.get("namespace") or "", stem)


def of_a_serve_service(event: Any) -> bool:
    """An EndpointSlice of a serve Service (``<name>-serve-svc``, a custom
    ``spec.serveService``, a per-cluster ``<cluster>-serve-svc``: the ones whose ready
    endpoints a RayService counts), known by the ``ray.io/serve`` label the EndpointSlice
    controller copies from them; the head Service's slices wake no pass.

    >>> from runtime.cache.informer import Event
    >>> serve = {"metadata": {"labels": {"ray.io/serve": "svc-serve"}}}
    >>> head = {"metadata": {"labels": {"ray.io/node-type": "head"}}}
    >>> of_a_serve_service(Event("add", serve)), of_a_serve_service(Event("add", head))
    (True, False)
    """
    return raycluster.SERVE_LABEL in (event.obj["metadata"].get("labels") or {})


def head_readiness_changed(event: Any) -> bool:
    """A head pod (``ray.io/node-type: head``) came, went, or changed readiness (phase,
    ``Ready`` condition or IP): what the RayService waits for before it talks to Serve.

    >>> from runtime.cache.informer import Event
    >>> head = {"metadata": {"labels": {"ray.io/node-type": "head"}}, "status": {}}
    >>> ready = {**head, "status": {"phase": "Running", "podIP": "198.18.1.2",
    ...          "conditions": [{"type": "Ready", "status": "True"}]}}
    >>> head_readiness_changed(Event("update", ready, head))
    True
    >>> head_readiness_changed(Event("update", {**ready, "spec": {"x": 1}}, ready))
    False
    >>> worker = {"metadata": {"labels": {"ray.io/node-type": "worker"}}}
    >>> head_readiness_changed(Event("add", worker))
    False
    """
    labels = event.obj["metadata"].get("labels") or {}
    if labels.get(raycluster.NODE_TYPE_LABEL) != "head":
        return False
    if event.type != "update" or event.old is None:
        return True
    return _readiness(event.obj) != _readiness(event.old)


def _readiness(pod: dict[str, Any]) -> tuple[Any, ...]:
    status = pod.get("status") or {}
    ready = next(
        (c.get("status") for c in status.get("conditions") or () if c.get("type") == "Ready"),
        None,
    )
    return status.get("phase"), ready, status.get("podIP"), pod["metadata"].get("deletionTimestamp")


def head_pod_owner(cache: Any) -> Any:
    """A map from a head pod to the RayService that controls its RayCluster (read from
    ``cache``'s RayClusters, no request): the pod's ``ray.io/cluster`` label names the
    cluster, the cluster's controller owner reference the RayService."""
    clusters_informer = cache.informer(v1.RAYCLUSTERS)

    def owner(pod: dict[str, Any]) -> Iterator[reconcile.Request]:
        meta = pod["metadata"]
        namespace = meta.get("namespace") or ""
        name = (meta.get("labels") or {}).get(raycluster.CLUSTER_LABEL)
        if not name:
            return
        cluster = clusters_informer.store.get(f"{namespace}/{name}")
        for ref in ((cluster or {}).get("metadata") or {}).get("ownerReferences") or ():
            if ref.get("controller") and ref.get("kind") == v1.RAYSERVICES.kind:
                yield reconcile.Request(namespace, str(ref.get("name")))

    return owner


def not_only_serve_config_hash(event: informer.Event) -> bool:
    """Whether a RayCluster event is worth a pass of its RayService: not an update whose
    only change is the ``ray.io/serve-config-hash`` annotation. That is the RayService's
    own write after a Serve PUT, made by a pass that has read Serve after the PUT and
    looks again at its poll; a pass on it would read the same and write nothing (under
    spec churn, one such pass per change).

    >>> from runtime.cache.informer import Event
    >>> def cluster(rv, annotations, state="ready"):
    ...     return {"metadata": {"resourceVersion": rv, "annotations": annotations},
    ...             "status": {"state": state}}
    >>> old = cluster("1", {"ray.io/serve-config-hash": "a"})
    >>> new = cluster("2", {"ray.io/serve-config-hash": "b"})
    >>> not_only_serve_config_hash(Event("update", new, old))
    False
    >>> new = cluster("2", {"ray.io/serve-config-hash": "b"}, "failed")
    >>> not_only_serve_config_hash(Event("update", new, old))
    True
    >>> not_only_serve_config_hash(Event("delete", old))
    True
    """
    if event.type != "update" or event.old is None:
        return True
    return _without_serve_config_hash(event.old) != _without_serve_config_hash(event.obj)


def _without_serve_config_hash(obj: dict[str, Any]) -> dict[str, Any]:
    meta = dict(obj.get("metadata") or {})
    for noise in ("resourceVersion", "managedFields"):
        meta.pop(noise, None)
    annotations = dict(meta.get("annotations") or {})
    annotations.pop(clusters.SERVE_CONFIG_ANNOTATION, None)
    meta["annotations"] = annotations
    return {**obj, "metadata": meta}


async def gateway_api_served(client: Any) -> bool:
    """Whether the API server serves ``gateway.networking.k8s.io/v1`` Gateways and
    HTTPRoutes (registering them with ``client``)."""
    try:
        found = await client.discover(gateway.GATEWAYS.api_version)
    except errors.NotFound:
        return False
    kinds = {r.kind for r in found}
    return {gateway.GATEWAYS.kind, gateway.HTTPROUTES.kind} <= kinds


rate_limiter = retries.rate_limiter
"""Retries of a failed pass (:func:`controllers.ray.retries.rate_limiter`)."""


def setup(
    manager: Any,
    *,
    dashboards: dashboard.DashboardFactory,
    options: reconciler_.Options | None = None,
    max_concurrent_reconciles: int = 1,
    skip_name_validation: bool = False,
    serve_poller: bool = True,
) -> controller_.Controller:
    """Register the RayService controller with ``manager``; returns it.

    ``dashboards`` hands out the dashboard clients (one
    :class:`controllers.ray.dashboard.Dashboards` per manager; close it on shutdown).
    ``skip_name_validation``: allow a second controller of this name in the process.
    ``serve_poller``: poll pending deploys off the worker
    (:class:`controllers.rayservice.poller.Poller`, a source of the controller and a
    runnable of the manager); ``False``: every poll is a pass."""
    v1.add_to_registry(manager.client.registry)
    poller = poller_.Poller() if serve_poller else None
    reconciler = reconciler_.Reconciler(
        manager.client, manager.cache, manager.recorder(RECORDER), dashboards, options,
        poller=poller,
    )  # fmt: skip
    built = (
        builder.Builder(manager)
        .for_(v1.RAYSERVICES, predicates=(predicate.spec_or_metadata_changed,))
        .owns(v1.RAYCLUSTERS, predicates=(not_only_serve_config_hash,))
        .owns(services.SERVICES)
        .watches(
            services.ENDPOINT_SLICES,
            handler.map_to(serve_endpoint_owner),
            predicates=(of_a_serve_service,),
        )
        .watches(
            raycluster.PODS,
            handler.map_to(head_pod_owner(manager.cache)),
            predicates=(head_readiness_changed,),
        )
    )
    if reconciler.options.gateway_api:
        for resource in (gateway.GATEWAYS, gateway.HTTPROUTES):
            manager.client.registry.register(resource)
            built = built.owns(resource)
    ctrl = (
        built.with_options(
            max_concurrent_reconciles=max_concurrent_reconciles,
            skip_name_validation=skip_name_validation,
            rate_limiter=rate_limiter(),
        )
        .named(NAME)
        .complete(reconciler)
    )
    if poller is not None:
        ctrl.watch(poller.channel)
        manager.add(poller)
    return ctrl
