"""Observe: everything one RayService pass decides from, read once into a
:class:`~controllers.rayservice.snapshot.Snapshot` that nothing changes afterwards.

:func:`observe` reads only the cache (never the API server) and, for the one
cluster whose Serve applications matter this pass (the *target*:
:func:`controllers.rayservice.roles.decide` names it, from what the cache holds), the
Ray dashboard. It writes nothing. What it found is:

- the RayService validated once (:func:`controllers.rayservice.validation.validate`:
  the typed spec, the parsed Serve config, the initializing timeout; the YAML is
  parsed off the event loop first, :func:`controllers.ray.serveconfig.parse_off_loop`);
- the RayClusters it owns (selected by the ``ray.io/originated-from-*`` labels and
  controlled by it), its head and serve Services, the pods ready behind the serve
  service (:func:`controllers.rayservice.services.ready_endpoints`);
- every RayCluster name in the namespace, only when a new cluster has to be named;
- during an upgrade, the active cluster's head pod and its Serve proxy's health
  (one ``/-/healthz``, not asked when the head is excluded from the serve service;
  a :class:`~controllers.rayservice.snapshot.ProxyView`): its ``ray.io/serve`` label is
  kept up to date too, as KubeRay v1.7.0 does for both heads;
- for the target, once its head pod (controlled by the cluster, Running and Ready)
  is there: the dashboard's Serve applications, and the Serve proxy's health when
  the head pod's ``ray.io/serve`` label may have to change (a
  :class:`~controllers.rayservice.snapshot.ServeView`). The dashboard is reached only
  through what the RayCluster controls: in the ``service`` and ``kubernetes-proxy``
  modes its head Service must be controlled by the cluster, not an ``ExternalName``,
  and select the cluster's head pod; otherwise nothing is sent and the view's
  ``failure`` says why. With token authentication (``authOptions.mode: token``) every
  dashboard request carries the cluster's token (:mod:`controllers.ray.tokens`);
  a token that cannot be read is the view's ``failure``, and nothing is sent. The Serve
  proxy's ``/-/healthz`` takes no token (Ray does not guard its Serve proxy);
- ``NewClusterWithIncrementalUpgrade`` (with the gate on): the Gateway and the HTTPRoute
  (from the cache, when the Gateway API is served), each owned cluster's
  ``<cluster>-serve-svc`` and the pods ready behind it, and the Serve applications of the
  cluster traffic moves from (:attr:`~controllers.rayservice.snapshot.Roles.other`: its
  ``target_capacity``, read the same way as the target's; nothing is submitted to it
  here).
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Mapping
from typing import Any

import api.v1 as v1
from controllers.ray import dashboard, serveconfig, tokens
from controllers.raycluster import interface as raycluster
from controllers.rayservice import (
    clusters,
    gateway,
    roles,
    services,
    serving,
    validation,
)
from controllers.rayservice import snapshot as snapshot_
from runtime import objects
from runtime.cache import cache as cache_
from runtime.client import errors

__all__ = ["Observation", "not_the_head_service", "observe"]

Obj = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Observation:
    """What :func:`observe` found: the snapshot the plan decides from, and the dashboard
    client of each cluster whose dashboard it read (act reaches a cluster the plan names
    through these)."""

    snapshot: snapshot_.Snapshot
    dashboards: Mapping[str, dashboard.DashboardClient] = dataclasses.field(default_factory=dict)


async def observe(
    service: Obj,
    *,
    cache: cache_.Cache,
    dashboards: dashboard.DashboardFactory,
    tokens: tokens.Tokens,
    address_mode: dashboard.Mode,
    cluster_domain: str,
    now: datetime.datetime,
    zero_downtime: bool,
    incremental_gate: bool = True,
    gateway_api: bool = True,
) -> Observation:
    """Read what a pass over ``service`` decides from (see the module docstring); the
    roles are decided once here (:func:`controllers.rayservice.roles.decide`: ``now``
    tells whether the pass stops before the clusters, ``zero_downtime`` and
    ``incremental_gate`` which cluster is the target); ``gateway_api``: the Gateway API
    is served (its objects are in the cache)."""
    snapshot = await _from_cache(service, cache, incremental_gate, gateway_api)
    snapshot = roles.decide(
        snapshot, now, zero_downtime=zero_downtime, incremental_gate=incremental_gate
    )
    decided = snapshot.roles
    if decided is None:  # invalid, suspended, timed out, or an object we do not control
        return Observation(snapshot)
    if decided.need_new and decided.pending is None:
        snapshot = dataclasses.replace(snapshot, names_in_use=await _names(cache, service))
    if decided.need_new and decided.active is not None:
        serving_head = await _serving_head(
            cache, dashboards, decided.active, service, address_mode, cluster_domain
        )
        snapshot = dataclasses.replace(snapshot, serving_head=serving_head)
    reach = _Reach(cache, dashboards, tokens, address_mode, cluster_domain)
    serve_config = snapshot.validated.serve_config
    clients: dict[str, dashboard.DashboardClient] = {}
    if decided.target is not None and serve_config:
        view = await _serve_view(reach, decided.target, service, serve_config, clients)
        snapshot = dataclasses.replace(snapshot, serve=view)
    stepwise = roles.incremental_mode(snapshot.validated.spec, incremental_gate)
    other = decided.other if stepwise else None
    if other is not None and other is not decided.target:
        # The cluster an incremental upgrade moves from: its Serve target_capacity and
        # applications (no config is submitted to it; its config is read back if needed).
        view = await _serve_view(reach, other, service, serve_config or {}, clients)
        snapshot = dataclasses.replace(snapshot, other_serve=view)
    return Observation(snapshot, clients)


async def _from_cache(
    service: Obj, cache: cache_.Cache, incremental_gate: bool, gateway_api: bool
) -> snapshot_.Snapshot:
    """The RayService validated, and what the cache holds around it."""
    text = (service.get("spec") or {}).get("serveConfigV2")
    if isinstance(text, str):
        await serveconfig.parse_off_loop(text)  # once per text, never on the loop
    checked = validation.validate(service, incremental=incremental_gate)
    namespace, name = service["metadata"]["namespace"], service["metadata"]["name"]
    endpoints = services.ready_endpoints(
        await cache.list(
            services.ENDPOINT_SLICES,
            namespace,
            label_selector=f"{services.SERVICE_NAME_LABEL}={services.serve_service_name(service)}",
        )
    )
    if checked.spec is None:
        return snapshot_.Snapshot(service=service, validated=checked, endpoints=endpoints)
    listed = await cache.list(
        v1.RAYCLUSTERS, namespace, label_selector=clusters.owned_selector(name)
    )
    owned = sorted(
        (c for c in listed if objects.is_controlled_by(c, service)),
        key=lambda c: str(c["metadata"]["name"]),
    )
    snapshot = snapshot_.Snapshot(
        service=service,
        validated=checked,
        owned=tuple(owned),
        head_svc=await _get(cache, services.SERVICES, namespace, services.head_service_name(name)),
        serve_svc=await _get(
            cache, services.SERVICES, namespace, services.serve_service_name(service)
        ),
        endpoints=endpoints,
        gateway_api=gateway_api,
    )
    if roles.incremental_mode(checked.spec, incremental_gate):
        snapshot = await _gateway_side(cache, snapshot, gateway_api)
    return snapshot


async def _gateway_side(
    cache: cache_.Cache, snapshot: snapshot_.Snapshot, gateway_api: bool
) -> snapshot_.Snapshot:
    """An incremental upgrade's objects: the Gateway and the HTTPRoute (when the Gateway
    API is served), and each owned cluster's ``<cluster>-serve-svc`` with the pods ready
    behind it."""
    service = snapshot.service
    namespace, name = service["metadata"]["namespace"], service["metadata"]["name"]
    found_gateway = found_route = None
    if gateway_api:
        found_gateway = await _get(cache, gateway.GATEWAYS, namespace, gateway.gateway_name(name))
        found_route = await _get(cache, gateway.HTTPROUTES, namespace, gateway.route_name(name))
    cluster_services: dict[str, Obj] = {}
    cluster_endpoints: dict[str, int] = {}
    for cluster in snapshot.owned:
        cluster_name = cluster["metadata"]["name"]
        svc_name = services.cluster_serve_service_name(cluster_name)
        svc = await _get(cache, services.SERVICES, namespace, svc_name)
        if svc is None:
            continue
        cluster_services[cluster_name] = svc
        cluster_endpoints[cluster_name] = services.ready_endpoints(
            await cache.list(
                services.ENDPOINT_SLICES,
                namespace,
                label_selector=f"{services.SERVICE_NAME_LABEL}={svc_name}",
            )
        )
    return dataclasses.replace(
        snapshot,
        gateway=found_gateway,
        route=found_route,
        cluster_services=cluster_services,
        cluster_endpoints=cluster_endpoints,
        # Until the roles are known, what any of its clusters serves (the initializing
        # timeout only asks whether anything does).
        endpoints=sum(cluster_endpoints.values()),
    )


async def _get(cache: cache_.Cache, resource: Any, namespace: str, name: str) -> Obj | None:
    try:
        found: Obj = await cache.get(resource, namespace, name)
    except errors.NotFound:
        return None
    return found


async def _names(cache: cache_.Cache, service: Obj) -> dict[str, str | None]:
    """Every RayCluster name in the namespace: its hash when ``service`` owns it, ``""``
    when it does not (a copied hash must not make us wait for a foreign cluster)."""
    found = await cache.list(v1.RAYCLUSTERS, service["metadata"]["namespace"])
    return {
        c["metadata"]["name"]: (
            (c["metadata"].get("annotations") or {}).get(clusters.HASH_ANNOTATION)
            if objects.is_controlled_by(c, service)
            else ""
        )
        for c in found
    }


async def _head_pod(cache: cache_.Cache, cluster: Mapping[str, Any]) -> Obj | None:
    """The cluster's one head pod, controlled by it (a look-alike is not the head)."""
    namespace, name = cluster["metadata"]["namespace"], cluster["metadata"]["name"]
    found = await cache.list(
        raycluster.PODS, namespace, label_selector=raycluster.pod_selector(name)
    )
    heads = [
        p
        for p in found
        if raycluster.is_head(p)
        and not p["metadata"].get("deletionTimestamp")
        and objects.is_controlled_by(p, cluster)
    ]
    return heads[0] if len(heads) == 1 else None


def not_the_head_service(found: Mapping[str, Any] | None, cluster: Mapping[str, Any]) -> str | None:
    """Why ``found`` cannot be trusted to lead to ``cluster``'s head; None when it can."""
    if found is None:
        return "does not exist"
    if not objects.is_controlled_by(found, cluster):
        return "is not controlled by the RayCluster"
    spec = found.get("spec") or {}
    if spec.get("type") == "ExternalName" or spec.get("externalName"):
        return "is an ExternalName alias"
    selector = spec.get("selector") or {}
    if (
        selector.get(raycluster.CLUSTER_LABEL) != cluster["metadata"]["name"]
        or selector.get(raycluster.NODE_TYPE_LABEL) != "head"
    ):
        return "does not select the cluster's head pod"
    return None


async def _serving_head(
    cache: cache_.Cache,
    dashboards: dashboard.DashboardFactory,
    cluster: Mapping[str, Any],
    service: Mapping[str, Any],
    mode: dashboard.Mode,
    cluster_domain: str,
) -> snapshot_.ProxyView | None:
    """The active cluster's head during an upgrade, with its proxy's health: one
    ``/-/healthz`` (none when the head is excluded from the serve service; a pod
    without an IP is unhealthy without asking). The dashboard is not read."""
    head = await _head_pod(cache, cluster)
    if head is None:
        return None
    name = cluster["metadata"]["name"]
    if (service.get("spec") or {}).get("excludeHeadPodFromServeSvc"):
        return snapshot_.ProxyView(cluster=name, head=head)
    ip = (head.get("status") or {}).get("podIP")
    if not ip and mode != "kubernetes-proxy":
        return snapshot_.ProxyView(cluster=name, head=head, healthy=False)
    address = dashboard.address(
        mode,
        cluster=name,
        namespace=cluster["metadata"]["namespace"],
        head_pod_ip=ip,
        cluster_domain=cluster_domain,
    )
    healthy = await dashboards.client_for(address).serve_proxy_healthy(head)
    return snapshot_.ProxyView(cluster=name, head=head, healthy=healthy)


@dataclasses.dataclass(frozen=True)
class _Reach:
    """How dashboards are reached this pass."""

    cache: cache_.Cache
    dashboards: dashboard.DashboardFactory
    tokens: tokens.Tokens
    mode: dashboard.Mode
    cluster_domain: str


async def _serve_view(
    reach: _Reach,
    cluster: Mapping[str, Any],
    service: Mapping[str, Any],
    serve_config: Mapping[str, Any],
    clients: dict[str, dashboard.DashboardClient],
) -> snapshot_.ServeView | None:
    """What ``cluster``'s dashboard says of Serve (its client, once reached, goes into
    ``clients``); None before its head pod is Running and Ready, or has an address."""
    head = await _head_pod(reach.cache, cluster)
    if head is None or not raycluster.is_running_and_ready(head):
        return None
    namespace, name = cluster["metadata"]["namespace"], cluster["metadata"]["name"]
    head_service = None
    if reach.mode != "pod-ip":
        status_head = (cluster.get("status") or {}).get("head") or {}
        head_service = str(status_head.get("serviceName") or raycluster.head_service_name(name))
        why = not_the_head_service(
            await _get(reach.cache, services.SERVICES, namespace, head_service), cluster
        )
        if why is not None:
            failure = (
                f"the head Service {head_service} of RayCluster {name} {why}: its dashboard "
                "is not contacted through it"
            )
            return snapshot_.ServeView(cluster=name, head=head, failure=failure)
    try:
        address = dashboard.address(
            reach.mode,
            cluster=name,
            namespace=namespace,
            head_service=head_service,
            head_pod_ip=(head.get("status") or {}).get("podIP"),
            cluster_domain=reach.cluster_domain,
        )
    except ValueError:
        return None  # no IP yet (pod-ip mode)
    try:
        token = await reach.tokens.token_for(cluster)
    except tokens.TokenUnavailable as exc:
        failure = f"cannot read Serve applications of {name}: {exc}"
        return snapshot_.ServeView(cluster=name, head=head, failure=failure)
    client = reach.dashboards.client_for(address, auth_token=token)
    started = time.monotonic()
    try:
        details = await client.get_serve_applications()
    except dashboard.DashboardError as exc:
        if isinstance(exc, dashboard.DashboardHTTPError) and exc.status in (401, 403):
            reach.tokens.forget(cluster)  # a rotated Secret: read it again next pass
        failure = f"cannot read Serve applications of {name}: {exc}"
        return snapshot_.ServeView(
            cluster=name, head=head, failure=failure, spent=time.monotonic() - started
        )
    clients[name] = client
    config_hash = clusters.serve_config_hash(serve_config)  # once per polled pass
    healthy = None
    if serving.asks_proxy(service, head, details) and not serving.submits(
        cluster, details, serve_config, config_hash
    ):  # a config about to be submitted starts the proxy: it is asked after the PUT
        healthy = await client.serve_proxy_healthy(head)
    return snapshot_.ServeView(
        cluster=name,
        head=head,
        details=details,
        proxy_healthy=healthy,
        spent=time.monotonic() - started,
        config_hash=config_hash,
    )
