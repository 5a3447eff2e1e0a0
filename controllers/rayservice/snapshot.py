"""Snapshot: what one RayService pass saw, as plain frozen data - the contract between
:mod:`controllers.rayservice.observe` (which reads it) and
:mod:`controllers.rayservice.plan` (which decides from it).

Nothing here does I/O or holds a client: two snapshots of the same world compare equal,
and a plan built from one can be compared with ``==``. The dashboard answers are data
(:class:`ServeView`, :class:`ProxyView`); which client reaches a cluster's dashboard
stays with observe and act (:mod:`controllers.rayservice.act` is given them by name).
The roles (:class:`Roles`) are decided once per pass, by
:func:`controllers.rayservice.roles.decide`, and kept here.

>>> Roles(live=(), active=None, active_match=None, pending=None, pending_match=None,
...       need_new=True).target is None
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from controllers.ray import serve
from controllers.rayservice import clusters, validation

__all__ = ["ProxyView", "Roles", "ServeView", "Snapshot"]

Obj = dict[str, Any]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServeView:
    """What the target cluster's dashboard said this pass, or why it said nothing."""

    cluster: str
    """The target cluster's name."""
    head: Obj
    """Its head pod (controlled by the cluster, Running and Ready)."""
    details: serve.ServeDetails | None = None
    """The Serve applications the dashboard reported; None when it was not read (see
    :attr:`failure`). Only a view with details names a dashboard act may call."""
    proxy_healthy: bool | None = None
    """The head's Serve proxy answered ``/-/healthz`` (asked only when the label may
    change); None when not asked."""
    failure: str | None = None
    """Why the dashboard was not read (an untrusted head Service, an error): the pass
    ends with it as its error, retried with backoff."""
    spent: float = 0.0
    """Seconds the dashboard took to answer."""
    config_hash: str | None = None
    """:func:`controllers.rayservice.clusters.serve_config_hash` of the Serve config,
    computed once where it is needed first (None: the plan computes it)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProxyView:
    """The serving cluster's head while Serve runs on another (an upgrade): its Serve
    proxy's health, for its ``ray.io/serve`` label (KubeRay v1.7.0 checks both heads)."""

    cluster: str
    """The serving cluster's name."""
    head: Obj
    """Its head pod (controlled by the cluster, not being deleted)."""
    healthy: bool | None = None
    """Its proxy answered ``/-/healthz``; None when not asked (the head is excluded
    from the serve service)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Snapshot:
    """One RayService and everything around it, as one pass saw it. Read-only."""

    service: Obj
    """The RayService (the cache's object: never modified)."""
    validated: validation.Validated
    """It, validated once."""
    owned: tuple[Obj, ...] = ()
    """The RayClusters it controls, those being deleted included, by name."""
    head_svc: Obj | None = None
    """``<svc>-head-svc``, if it exists (whoever controls it)."""
    serve_svc: Obj | None = None
    """The serve service, if it exists (whoever controls it)."""
    endpoints: int = 0
    """Pods ready behind the serve service
    (:func:`controllers.rayservice.services.ready_endpoints`)."""
    names_in_use: Mapping[str, str | None] | None = None
    """Every RayCluster name in the namespace, with its spec hash when this RayService
    owns it (``""`` when it does not); None when no new cluster is needed."""
    serve: ServeView | None = None
    """The target's dashboard, once its head is Running and Ready and there is a Serve
    config to run; None otherwise."""
    serving_head: ProxyView | None = None
    """The active cluster's head when it is not the target (an upgrade); None otherwise."""
    gateway: Obj | None = None
    """``<svc>-gateway``, if it exists (incremental upgrades; whoever controls it)."""
    route: Obj | None = None
    """``<svc>-httproute``, if it exists (incremental upgrades; whoever controls it)."""
    cluster_services: Mapping[str, Obj] = dataclasses.field(default_factory=dict)
    """The per-cluster serve Services ``<cluster>-serve-svc`` that exist, by cluster name
    (incremental upgrades)."""
    cluster_endpoints: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """Ready pods behind each owned cluster's ``<cluster>-serve-svc`` (incremental)."""
    other_serve: ServeView | None = None
    """The dashboard of the cluster traffic leaves in an incremental upgrade (the active
    one, or the one a rollback drains); None otherwise."""
    gateway_api: bool = True
    """The API server serves the Gateway API (``gateway.networking.k8s.io/v1``)."""
    roles: Roles | None = None
    """Which owned cluster does what (:func:`controllers.rayservice.roles.decide`, decided
    once, before the dashboards are asked); None when the pass stops before the clusters."""


@dataclasses.dataclass(frozen=True)
class Roles:
    """Which owned cluster does what (see step 4 of the module docstring)."""

    live: tuple[Obj, ...]
    """Owned clusters not being deleted."""
    active: Obj | None
    """The cluster the head Service selects."""
    active_match: clusters.Match | None
    pending: Obj | None
    """An existing cluster for the config, when a new one is needed."""
    pending_match: clusters.Match | None
    need_new: bool
    """The config needs a cluster other than the active one."""
    draining: Obj | None = None
    """Incremental upgrades: a cluster the HTTPRoute still sends to that is neither active
    nor pending (the spec changed mid-upgrade): traffic and capacity return to the
    active cluster before it goes, and no new cluster is created meanwhile."""

    @property
    def target(self) -> Obj | None:
        """Where Serve runs this pass: the pending cluster, else the active one (always the
        active one while a rollback drains another)."""
        if self.draining is not None:
            return self.active
        return self.pending if self.need_new else self.active

    @property
    def other(self) -> Obj | None:
        """The cluster an incremental upgrade moves traffic from: the active one (forward),
        or the one a rollback drains; None when nothing moves."""
        if self.draining is not None:
            return self.draining
        return self.active if self.need_new and self.pending is not None else None
