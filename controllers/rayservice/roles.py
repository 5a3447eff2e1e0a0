"""Roles: which owned cluster does what in a RayService pass, and whether the pass stops
before the clusters - decided once, from a :class:`~controllers.rayservice.snapshot.Snapshot`,
by :func:`decide` (observe calls it before asking any dashboard; the plan reads
:attr:`~controllers.rayservice.snapshot.Snapshot.roles`). Pure: no I/O.

A pass stops before the clusters (:func:`stops`) when the RayService is invalid, being
suspended (:func:`suspend_phase`), timed out initializing (:func:`timed_out`), or when an
object of our name is not ours (:func:`foreign`). Otherwise :func:`roles` names the
*active* cluster (the one the head Service selects), whether the config *needs a new*
cluster (:func:`new_cluster_upgrades`), the *pending* one for it, and, in an incremental
upgrade (:func:`incremental_mode`), a cluster being *drained*. docs/architecture.md
(2.7b) walks through a pass.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any, Literal

from controllers.rayservice import clusters, gateway, report, services
from controllers.rayservice import snapshot as snapshot_
from runtime import clock, conditions, objects

__all__ = [
    "INCREMENTAL",
    "SuspendPhase",
    "TimedOut",
    "decide",
    "foreign",
    "incremental_mode",
    "kind_of",
    "new_cluster_upgrades",
    "not_ours",
    "roles",
    "stops",
    "suspend_phase",
    "timed_out",
]

Obj = dict[str, Any]

INCREMENTAL = "NewClusterWithIncrementalUpgrade"


def decide(
    snapshot: snapshot_.Snapshot,
    now: datetime.datetime,
    *,
    zero_downtime: bool,
    incremental_gate: bool = True,
) -> snapshot_.Snapshot:
    """``snapshot`` with its :attr:`~controllers.rayservice.snapshot.Snapshot.roles` decided
    (:func:`roles`)."""
    decided = roles(snapshot, now, zero_downtime=zero_downtime, incremental_gate=incremental_gate)
    return dataclasses.replace(snapshot, roles=decided)


@dataclasses.dataclass(frozen=True)
class TimedOut:
    """An initializing timeout that passed (:func:`timed_out`)."""

    message: str | None
    """The message when the timeout passed in this pass; None when it passed earlier."""


def foreign(snapshot: snapshot_.Snapshot, incremental_gate: bool = True) -> list[Obj]:
    """Objects of our names that we do not control: the head and serve Services (in an
    incremental upgrade the serve service is not used; the Gateway, the HTTPRoute and the
    per-cluster serve Services, controlled by their cluster, are instead)."""
    service = snapshot.service
    spec = snapshot.validated.spec
    if not incremental_mode(spec, incremental_gate):
        return [
            s
            for s in (snapshot.head_svc, snapshot.serve_svc)
            if s is not None and not objects.is_controlled_by(s, service)
        ]
    found = [
        s
        for s in (snapshot.head_svc, snapshot.gateway, snapshot.route)
        if s is not None and not objects.is_controlled_by(s, service)
    ]
    owned = {c["metadata"]["name"]: c for c in snapshot.owned}
    for name, svc in sorted(snapshot.cluster_services.items()):
        cluster = owned.get(name)
        if cluster is not None and not objects.is_controlled_by(svc, cluster):
            found.append(svc)
    return found


def kind_of(snapshot: snapshot_.Snapshot, obj: Obj) -> str:
    if obj is snapshot.gateway:
        return "Gateway"
    if obj is snapshot.route:
        return "HTTPRoute"
    return "Service"


def not_ours(snapshot: snapshot_.Snapshot, obj: Obj) -> str:
    owner = "RayService"
    if (
        obj is not snapshot.head_svc
        and obj is not snapshot.serve_svc
        and kind_of(snapshot, obj) == "Service"
    ):
        owner = "RayCluster"  # a per-cluster serve Service
    name = obj["metadata"]["name"]
    return f"{kind_of(snapshot, obj)} {name} exists and is not controlled by this {owner}"


SuspendPhase = Literal["requested", "deleting", "suspended", "resuming"]


def suspend_phase(snapshot: snapshot_.Snapshot) -> SuspendPhase | None:
    """Where a suspend stands (KubeRay v1.7.0's ``handleSuspend``), from the persisted
    conditions first: ``Suspended`` is ``suspended`` while ``spec.suspend`` holds, else
    ``resuming``; a committed ``Suspending`` is ``deleting`` whatever the spec says
    (atomic); otherwise ``spec.suspend`` is ``requested``. None: not suspending."""
    service = snapshot.service
    spec = snapshot.validated.spec
    wanted = bool(spec is not None and spec.suspend)
    if conditions.is_true(service, report.SUSPENDED):
        return "suspended" if wanted else "resuming"
    if conditions.is_true(service, report.SUSPENDING):
        return "deleting"
    return "requested" if wanted else None


def stops(snapshot: snapshot_.Snapshot, now: datetime.datetime, incremental_gate: bool) -> bool:
    return (
        snapshot.validated.spec is None
        or suspend_phase(snapshot) in ("requested", "deleting", "suspended")
        or timed_out(snapshot, now) is not None
        or bool(foreign(snapshot, incremental_gate))
    )


def roles(
    snapshot: snapshot_.Snapshot,
    now: datetime.datetime,
    *,
    zero_downtime: bool,
    incremental_gate: bool = True,
) -> snapshot_.Roles | None:
    """The clusters' roles; None when the pass stops before the clusters (invalid,
    suspended, timed out, or a Service of our name we do not control).
    ``zero_downtime`` and ``incremental_gate``: the operator's options
    (:class:`controllers.rayservice.plan.Settings`)."""
    if stops(snapshot, now, incremental_gate):
        return None
    spec = snapshot.validated.spec
    assert spec is not None
    config = (snapshot.service.get("spec") or {}).get("rayClusterConfig") or {}
    live = tuple(c for c in snapshot.owned if not c["metadata"].get("deletionTimestamp"))
    selected = (
        services.selected_cluster(snapshot.head_svc) if snapshot.head_svc is not None else None
    )
    active = next((c for c in live if c["metadata"]["name"] == selected), None)
    active_match = clusters.match(active, config) if active is not None else None
    need_new = not (
        active_match is clusters.Match.APPENDED
        or active_match is clusters.Match.EXACT
        or (active is not None and not new_cluster_upgrades(spec, zero_downtime, incremental_gate))
    )
    pending = pending_match = None
    if need_new:
        candidates = [c for c in live if c is not active]
        matches = [(c, clusters.match(c, config)) for c in candidates]
        for wanted in (clusters.Match.EXACT, clusters.Match.APPENDED):
            found = next((c for c, m in matches if m is wanted), None)
            if found is not None:
                pending, pending_match = found, wanted
                break
    draining = None
    if incremental_mode(spec, incremental_gate) and active is not None:
        routed = gateway.weights(snapshot.route)
        draining = next(
            (
                c
                for c in live
                if c is not active and c is not pending and c["metadata"]["name"] in routed
            ),
            None,
        )
    return snapshot_.Roles(live, active, active_match, pending, pending_match, need_new, draining)


def incremental_mode(spec: Any, gate: bool) -> bool:
    """``upgradeStrategy.type`` is ``NewClusterWithIncrementalUpgrade`` and the gate
    ``RayServiceIncrementalUpgrade`` (``gate``) is on (KubeRay v1.7.0's
    ``IsIncrementalUpgradeEnabled``).

    >>> from types import SimpleNamespace as S
    >>> spec = S(upgrade_strategy=S(type="NewClusterWithIncrementalUpgrade"))
    >>> incremental_mode(spec, True), incremental_mode(spec, False)
    (True, False)
    """
    strategy = spec.upgrade_strategy if spec is not None else None
    return bool(gate and strategy is not None and strategy.type == INCREMENTAL)


def new_cluster_upgrades(spec: Any, zero_downtime: bool, incremental_gate: bool = True) -> bool:
    """Whether a changed ``rayClusterConfig`` is rolled out on a new cluster (KubeRay
    v1.7.0's ``isZeroDowntimeUpgradeEnabled``): ``spec.upgradeStrategy.type`` decides
    when it is set (``NewCluster``, and ``NewClusterWithIncrementalUpgrade`` while its
    gate is on: yes; ``None``, or the incremental type with its gate off: no); otherwise
    ``zero_downtime`` (the operator's ``ENABLE_ZERO_DOWNTIME``, not ``false``) does.

    >>> from types import SimpleNamespace as S
    >>> new_cluster_upgrades(S(upgrade_strategy=None), False)
    False
    >>> new_cluster_upgrades(S(upgrade_strategy=S(type="NewCluster")), False)
    True
    >>> new_cluster_upgrades(S(upgrade_strategy=S(type="None")), True)
    False
    >>> incremental = S(upgrade_strategy=S(type="NewClusterWithIncrementalUpgrade"))
    >>> new_cluster_upgrades(incremental, True), new_cluster_upgrades(incremental, True, False)
    (True, False)
    """
    strategy = spec.upgrade_strategy
    kind = strategy.type if strategy is not None else None
    if kind:
        return str(kind) == "NewCluster" or (str(kind) == INCREMENTAL and incremental_gate)
    return zero_downtime


def timed_out(snapshot: snapshot_.Snapshot, now: datetime.datetime) -> TimedOut | None:
    """None: not timed out. Otherwise when (see :class:`TimedOut`)."""
    service = snapshot.service
    ready = conditions.of(service, report.READY)
    if (
        ready is not None
        and ready.get("status") == "False"
        and ready.get("reason") == "InitializingTimeout"
    ):
        return TimedOut(None)  # terminal: whatever the spec says now
    if snapshot.endpoints > 0:
        return None
    timeout = snapshot.validated.initializing_timeout
    since = clock.parse_rfc3339(report.initializing_since(service))
    if timeout is None or since is None:
        return None
    spent = (now - since).total_seconds()
    if spent < timeout:
        return None
    return TimedOut(
        f"RayService failed to become ready within the configured timeout of {timeout:g}s. "
        f"Time spent initializing: {spent:.0f}s"
    )
