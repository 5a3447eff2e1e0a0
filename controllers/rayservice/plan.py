"""Plan: one pure function from a :class:`Snapshot` (what
:func:`controllers.rayservice.observe.observe` read)
(and the clock, and what the reconciler remembers) to a :class:`Plan`: every write
the pass makes, in the order :mod:`controllers.rayservice.act` makes them, the
status, and when to look again. No client, no cache, no event loop.

The decisions, in order (the first three end the pass early):

1. **invalid** (:attr:`Snapshot.validated` has problems): ``Ready=False``/
   ``ValidationFailed`` with the reasons, a Warning unless the status already says
   exactly this, and a :class:`~runtime.reconcile.TerminalError` (no retry until it
   changes);
2. **suspend** (:func:`suspend_phase`, KubeRay v1.7.0's): the first pass to see
   ``spec.suspend`` only commits ``Suspending`` (the status); the next ones delete
   every cluster and the head and serve Services, until none is left, then
   ``Suspended``; once committed it completes even if ``spec.suspend`` turns false
   meanwhile. Resuming re-arms ``Ready=Initializing`` and goes on in the same pass
   (:func:`controllers.rayservice.report.resumed`). **Timeout**: an
   ``ray.io/initializing-timeout`` that passed before the service was ever ready is
   terminal (KubeRay v1.7.0): ``InitializingTimeout`` and a Warning once, then no
   status write, whatever the spec becomes (only a suspend and resume starts it
   afresh); its clusters are dangling (step 4);
3. **foreign objects**: a head or serve Service of our name that we do not control
   is never touched; ``ServiceNotOwned`` is reported instead (with
   ``NewClusterWithIncrementalUpgrade``: the Gateway and the HTTPRoute, reported as
   ``GatewayNotOwned``, and the per-cluster serve Services, which their cluster must
   control; and ``GatewayAPIUnavailable`` when the Gateway API is not served);
4. **clusters** (:func:`roles`): the active cluster (the one the head Service
   selects) is *kept* when its hash matches, or when upgrades on a new cluster are
   off (:func:`new_cluster_upgrades`: ``upgradeStrategy.type: None``, or no type and
   the operator's ``ENABLE_ZERO_DOWNTIME=false``);
   *updated in place* when worker groups were only appended; otherwise a pending
   cluster is found (kept, or updated in place) or *created*, named after the spec
   hash (or waited for while its name is still held by one being deleted). A
   cluster taken back into a role loses its ``delete-after``. Clusters no role
   claims and no Service selects are *dangling*: they get a ``delete-after``
   ``rayClusterDeletionDelaySeconds`` (60) away if they have none, and are *deleted*
   once it passed (KubeRay v1.7.0 waits the same delay for every cluster it
   deletes before the RayService goes); dropping a pending cluster without one while
   the active one matches again is a *rollback*, in progress until it is gone;
5. **Serve** on the target (the pending cluster, else the active one), from what
   its dashboard said: *submit* the config when the cluster's ``serve-config-hash``
   differs or Serve runs no application, unless Serve already runs exactly this
   config (a PUT made before a crash); write the hash annotation after it;
   *relabel* the head pod's ``ray.io/serve`` when its proxy's health says so; during
   an upgrade the serving (active) cluster's head too, every poll (KubeRay v1.7.0
   checks both heads each pass): its proxy is asked ``/-/healthz`` directly (its
   dashboard is not polled), so a dead proxy leaves the serve service even when
   the pending cluster never becomes ready;
6. **traffic**: once the target's applications are all ``RUNNING``, the services
   are created or *pointed* at it; a switch stamps the old active cluster's
   ``delete-after`` first. A pass that moved traffic writes no status: the serve
   endpoints follow within about a second and one write then reports both;
**Incremental upgrades** (``NewClusterWithIncrementalUpgrade`` with its gate on,
:func:`incremental_mode`) change steps 4 to 6: the new cluster starts without worker
replicas; a cluster the HTTPRoute still sends to that is neither active nor pending is
being *drained* (a rollback: the target is then the active cluster, and no new cluster
is created until it is gone); each pass takes at most one step of
:func:`controllers.rayservice.incremental.next_step` (a Serve ``target_capacity`` PUT,
or new weights in the route, stamped ``ray.io/traffic-migrated-at``); the Gateway, the
route and the per-cluster serve Services are created or updated when a managed field
differs; the head Service moves to the new cluster only when the step machine says
*done* (the serve service ``<svc>-serve-svc`` is not used). The status reports each
cluster's ``targetCapacity``, ``trafficRoutedPercent`` and ``lastTrafficMigratedTime``
from those objects, so it changes only with a step.

7. **status** (:func:`controllers.rayservice.report.compute`), and when to look
   again: the next dashboard poll (2 s while converging, doubling to 10 s while
   ready and unchanged; never sooner than ``slow_dashboard_factor`` times what the
   dashboard took), the next ``delete-after``, the initializing deadline.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any, Literal

from controllers.ray import dashboard
from controllers.raycluster import interface as raycluster
from controllers.rayservice import clusters, gateway, incremental, report, services, validation
from runtime import clock, conditions, equality, objects, reconcile

__all__ = [
    "ENDPOINTS_GRACE",
    "Annotate",
    "ClusterOp",
    "Create",
    "Delete",
    "DeleteService",
    "Event",
    "Keep",
    "Memory",
    "Plan",
    "Point",
    "Poll",
    "ProxyView",
    "Relabel",
    "Roles",
    "ServeFailed",
    "ServeView",
    "Settings",
    "Snapshot",
    "Submit",
    "UpdateInPlace",
    "asks_proxy",
    "incremental_mode",
    "new_cluster_upgrades",
    "plan",
    "proxy_status",
    "roles",
    "submits",
    "suspend_phase",
]

Obj = dict[str, Any]

ENDPOINTS_GRACE = 3.0
"""Seconds after traffic moved during which a report waits for the serve endpoints."""


# -- what a pass saw -----------------------------------------------------------------------


class ServeFailed(Exception):
    """The dashboard could not be read, or refused the config (retried with backoff)."""

    def __init__(self, message: str, *, refusal: str | None = None) -> None:
        super().__init__(message)
        self.refusal = refusal
        """Serve's answer when it refused the config (worth showing in the status)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServeView:
    """What the target cluster's dashboard said this pass, or why it said nothing."""

    cluster: str
    """The target cluster's name."""
    head: Obj
    """Its head pod (controlled by the cluster, Running and Ready)."""
    client: dashboard.DashboardClient | None = None
    """Its dashboard; None when it cannot be reached safely (see :attr:`failure`)."""
    details: dashboard.ServeDetails | None = None
    """The Serve applications the dashboard reported; None on a failure."""
    proxy_healthy: bool | None = None
    """The head's Serve proxy answered ``/-/healthz`` (asked only when the label may
    change); None when not asked."""
    failure: ServeFailed | None = None
    """Why the dashboard was not read (an untrusted head Service, an error)."""
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


# -- what a plan holds ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Event:
    """An Event on the RayService; ``action`` is what the controller did (KubeRay's
    ``Validate``, ``Reconcile``, ``Create``...)."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str
    action: str = "Reconcile"


@dataclasses.dataclass(frozen=True)
class Keep:
    """Remove ``cluster``'s ``delete-after``: it was taken back into a role."""

    cluster: Obj


@dataclasses.dataclass(frozen=True)
class UpdateInPlace:
    """Replace a cluster by ``desired`` (its spec with worker groups appended)."""

    desired: Obj


@dataclasses.dataclass(frozen=True)
class Create:
    """Create the cluster ``desired``."""

    desired: Obj


@dataclasses.dataclass(frozen=True)
class Delete:
    """Delete ``cluster`` (its uid as a precondition), saying ``why`` in the Event."""

    cluster: Obj
    why: str


@dataclasses.dataclass(frozen=True)
class DeleteService:
    """Delete the Service ``svc`` (its uid as a precondition), saying ``why`` in the Event."""

    svc: Obj
    why: str


@dataclasses.dataclass(frozen=True)
class Submit:
    """PUT ``config`` to the dashboard of ``cluster``."""

    cluster: str
    client: dashboard.DashboardClient
    config: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Annotate:
    """Merge ``annotations`` into ``cluster``'s (``None`` removes one)."""

    cluster: Obj
    annotations: Mapping[str, str | None]


ClusterOp = Keep | UpdateInPlace | Create | Delete | Annotate


@dataclasses.dataclass(frozen=True)
class Relabel:
    """Set the head pod's ``ray.io/serve`` label to ``value``; with no ``value``, to what
    its Serve proxy answers ``client`` once the config is submitted (the PUT starts the
    proxy: asked before it, it would say no for one more poll)."""

    pod: Obj
    value: str | None
    client: dashboard.DashboardClient | None = None


@dataclasses.dataclass(frozen=True)
class Point:
    """Create ``desired`` (``current`` is None) or update ``current`` to it."""

    current: Obj | None
    desired: Obj


@dataclasses.dataclass(frozen=True)
class Poll:
    """The last dashboard poll of a RayService: what the status said, and the interval."""

    fingerprint: Any
    interval: float


@dataclasses.dataclass(frozen=True)
class Memory:
    """What the reconciler keeps between passes of one RayService (hints only: losing
    them costs at most a status write or an early poll)."""

    poll: Poll | None = None
    """The last poll, to double the interval while nothing changes."""
    moved: datetime.datetime | None = None
    """When traffic last moved: the report waits for the serve endpoints."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """The reconciler's options a plan depends on."""

    serve_poll_interval: float = 2.0
    serve_poll_max: float = 10.0
    slow_dashboard_factor: float = 4.0
    zero_downtime: bool = True
    """A changed ``rayClusterConfig`` goes to a new cluster unless
    ``upgradeStrategy.type`` says otherwise (:func:`new_cluster_upgrades`)."""
    incremental: bool = True
    """The ``RayServiceIncrementalUpgrade`` gate (:func:`incremental_mode`)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan:
    """Every write of one pass, in the order they are made, and what comes after."""

    events: tuple[Event, ...] = ()
    """Warnings decided from the snapshot (sent first)."""
    clusters: tuple[ClusterOp, ...] = ()
    """Cluster writes: the active one's, the pending one's, then the dangling ones'
    (their ``delete-after``, or their deletion)."""
    delete_services: tuple[DeleteService, ...] = ()
    """The RayService's own Services to delete (a suspend)."""
    submit: Submit | None = None
    """The Serve config to PUT."""
    serve_annotation: Annotate | None = None
    """The target's ``serve-config-hash``, after the PUT."""
    relabel: Relabel | None = None
    """The target's head pod's ``ray.io/serve`` label."""
    relabel_serving: Relabel | None = None
    """The active cluster's head pod's, when it is not the target (an upgrade)."""
    delete_after: Annotate | None = None
    """The old active cluster's ``delete-after``, before traffic leaves it."""
    capacity: Submit | None = None
    """A Serve ``target_capacity`` change (incremental upgrades): the config that cluster
    runs, with the new value."""
    capacity_message: str | None = None
    """``UpdatedServeTargetCapacity``'s message."""
    cluster_services: tuple[Obj, ...] = ()
    """Per-cluster serve Services to create (incremental upgrades)."""
    gateway_points: tuple[Point, ...] = ()
    """The Gateway, then the HTTPRoute, created or updated (incremental upgrades)."""
    points: tuple[Point, ...] = ()
    """The head Service, then the serve Service, created or pointed at the target."""
    switched: str | None = None
    """``SwitchedTraffic``'s message when traffic moves to another cluster."""
    status: Obj | None = None
    """The status to hand to the writer; None: no report this pass."""
    observed: report.Observed | None = None
    """What :attr:`status` was computed from (for :meth:`refused`)."""
    target: str | None = None
    """The cluster Serve runs on this pass."""
    error: Exception | None = None
    """Raised once everything else is done (retry with backoff, or never)."""
    wake: tuple[float, ...] = ()
    """Seconds until something is due (a ``delete-after``, the initializing deadline)."""
    poll: float | None = None
    """Seconds until the next dashboard poll, before the slow-dashboard floor."""
    slow_dashboard_factor: float = 0.0
    memory: Memory = Memory()
    """What to remember for the next pass."""
    service: Obj = dataclasses.field(default_factory=dict)
    now: datetime.datetime | None = None

    def requeue_after(self, spent: float) -> float | None:
        """When to look again, given that the dashboard took ``spent`` seconds."""
        wake = list(self.wake)
        if self.poll is not None:
            wake.append(max(self.poll, spent * self.slow_dashboard_factor))
        positive = [w for w in wake if w > 0]
        return min(positive) if positive else None

    def refused(self, serve_error: str | None) -> Obj:
        """The status to write instead when the PUT failed (Serve's answer, if it
        refused, in ``Ready``'s message; the target's applications as before)."""
        assert self.observed is not None
        assert self.now is not None
        seen = self.observed

        def unread(cluster: report.ClusterReport | None) -> report.ClusterReport | None:
            if cluster is None or cluster.name != self.target:
                return cluster
            return dataclasses.replace(cluster, applications=None)

        observed = dataclasses.replace(
            seen,
            active=unread(seen.active),
            pending=unread(seen.pending),
            serve_error=serve_error,
        )
        return report.compute(self.service, observed, now=clock.rfc3339(self.now))

    def replaces_running_config(self) -> bool:
        """Whether the target ran Serve applications when this pass read it: the PUT then
        changes a running config in place, and the status must say what Serve runs after
        it (:meth:`submitted`). A first config (a new cluster) has nothing to correct: its
        applications appear at the next poll, as the status said before."""
        seen = self.observed
        if seen is None:
            return False
        for cluster in (seen.active, seen.pending):
            if cluster is not None and cluster.name == self.target:
                return bool(cluster.applications)
        return False

    def submitted(self, details: dashboard.ServeDetails) -> Obj | None:
        """The status to write instead once the config was PUT: the target's applications
        as Serve reports them after the PUT (``details``; KubeRay v1.7.0 reads them after
        submitting too), not those of the config it replaced - else this write reports
        the new generation with the old config's applications, and the next pass writes
        again to correct them. None when this pass reports nothing."""
        if self.status is None or self.observed is None or self.now is None:
            return self.status
        seen = self.observed
        apps = report.applications(details)

        def reread(cluster: report.ClusterReport | None) -> report.ClusterReport | None:
            if cluster is None or cluster.name != self.target:
                return cluster
            return dataclasses.replace(cluster, applications=apps)

        observed = dataclasses.replace(
            seen, active=reread(seen.active), pending=reread(seen.pending)
        )
        return report.compute(self.service, observed, now=clock.rfc3339(self.now))


# -- roles ----------------------------------------------------------------------------------


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


@dataclasses.dataclass(frozen=True)
class _TimedOut:
    message: str | None
    """The message when the timeout passed in this pass; None when it passed earlier."""


def _foreign(snapshot: Snapshot, incremental_gate: bool = True) -> list[Obj]:
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


def _kind_of(snapshot: Snapshot, obj: Obj) -> str:
    if obj is snapshot.gateway:
        return "Gateway"
    if obj is snapshot.route:
        return "HTTPRoute"
    return "Service"


def _not_ours(snapshot: Snapshot, obj: Obj) -> str:
    owner = "RayService"
    if (
        obj is not snapshot.head_svc
        and obj is not snapshot.serve_svc
        and _kind_of(snapshot, obj) == "Service"
    ):
        owner = "RayCluster"  # a per-cluster serve Service
    name = obj["metadata"]["name"]
    return f"{_kind_of(snapshot, obj)} {name} exists and is not controlled by this {owner}"


SuspendPhase = Literal["requested", "deleting", "suspended", "resuming"]


def suspend_phase(snapshot: Snapshot) -> SuspendPhase | None:
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


def _stops(snapshot: Snapshot, now: datetime.datetime, incremental_gate: bool) -> bool:
    return (
        snapshot.validated.spec is None
        or suspend_phase(snapshot) in ("requested", "deleting", "suspended")
        or _timed_out(snapshot, now) is not None
        or bool(_foreign(snapshot, incremental_gate))
    )


def roles(
    snapshot: Snapshot,
    now: datetime.datetime,
    *,
    zero_downtime: bool,
    incremental_gate: bool = True,
) -> Roles | None:
    """The clusters' roles; None when the pass stops before the clusters (invalid,
    suspended, timed out, or a Service of our name we do not control).
    ``zero_downtime``: :attr:`Settings.zero_downtime`; ``incremental_gate``:
    :attr:`Settings.incremental`."""
    if _stops(snapshot, now, incremental_gate):
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
    return Roles(live, active, active_match, pending, pending_match, need_new, draining)


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
    return bool(gate and strategy is not None and strategy.type == _INCREMENTAL)


_INCREMENTAL = "NewClusterWithIncrementalUpgrade"


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
        return str(kind) == "NewCluster" or (str(kind) == _INCREMENTAL and incremental_gate)
    return zero_downtime


# -- the plan -------------------------------------------------------------------------------


def plan(
    snapshot: Snapshot,
    *,
    now: datetime.datetime,
    memory: Memory,
    settings: Settings,
) -> Plan:
    """The pass for ``snapshot`` (see the module docstring)."""
    service = snapshot.service
    base = Plan(service=service, now=now, memory=memory)
    now_text = clock.rfc3339(now)
    checked = snapshot.validated
    endpoints = snapshot.endpoints

    def status(observed: report.Observed) -> Obj:
        return report.compute(service, observed, now=now_text)

    if checked.spec is None:
        message = "; ".join(checked.problems)
        observed = report.Observed(
            num_serve_endpoints=endpoints,
            problem=report.Problem(reason="ValidationFailed", message=message),
        )
        return dataclasses.replace(
            base,
            events=_warn_once(
                service, "ValidationFailed", "InvalidRayServiceSpec", message, action="Validate"
            ),
            status=status(observed),
            observed=observed,
            error=reconcile.TerminalError(message),
            memory=dataclasses.replace(memory, poll=None),
        )
    phase = suspend_phase(snapshot)
    if phase == "resuming":  # the pass goes on from a re-armed Initializing
        service = {**service, "status": report.resumed(service, now=now_text)}
        snapshot = dataclasses.replace(snapshot, service=service)
        base = dataclasses.replace(base, service=service)
    elif phase is not None:
        return _suspend(snapshot, phase, base, settings)

    timed_out = _timed_out(snapshot, now)
    if timed_out is not None:
        # Terminal: every cluster is dangling, deleted after the deletion delay; the
        # status is written once, when it times out, and never again.
        retired, wake = _retire(
            snapshot.owned, now, checked.spec, "the RayService did not become ready in time"
        )
        if timed_out.message is None:  # it passed before
            return dataclasses.replace(base, clusters=retired, wake=wake, memory=Memory())
        observed = report.Observed(num_serve_endpoints=endpoints, timed_out=timed_out.message)
        return dataclasses.replace(
            base,
            events=(Event("Warning", "RayServiceInitializingTimeout", timed_out.message),),
            clusters=retired,
            status=status(observed),
            observed=observed,
            wake=wake,
            memory=Memory(),
        )

    foreign = _foreign(snapshot, settings.incremental)
    if foreign:
        message = "; ".join(_not_ours(snapshot, s) for s in foreign)
        kind = _kind_of(snapshot, foreign[0])
        reason = "GatewayNotOwned" if kind in ("Gateway", "HTTPRoute") else "ServiceNotOwned"
        observed = report.Observed(
            num_serve_endpoints=endpoints,
            problem=report.Problem(reason=reason, message=message),
        )
        return dataclasses.replace(
            base,
            events=_warn_once(service, reason, reason, message),
            status=status(observed),
            observed=observed,
            wake=(settings.serve_poll_max,),
        )

    if incremental_mode(checked.spec, settings.incremental) and not snapshot.gateway_api:
        message = (
            f"spec.upgradeStrategy.type {_INCREMENTAL!r} needs the Gateway API "
            "(gateway.networking.k8s.io/v1 Gateway and HTTPRoute), which the API server "
            "did not serve when the operator started: install its CRDs and a gateway "
            "controller, then restart the operator"
        )
        observed = report.Observed(
            num_serve_endpoints=endpoints,
            problem=report.Problem(reason="GatewayAPIUnavailable", message=message),
        )
        return dataclasses.replace(
            base,
            events=_warn_once(service, "GatewayAPIUnavailable", "GatewayAPIUnavailable", message),
            status=status(observed),
            observed=observed,
            error=reconcile.TerminalError(message),
        )

    decided = roles(
        snapshot, now, zero_downtime=settings.zero_downtime, incremental_gate=settings.incremental
    )
    assert decided is not None
    return _converge(snapshot, decided, base, now, settings)


def _suspend(snapshot: Snapshot, phase: SuspendPhase, base: Plan, settings: Settings) -> Plan:
    """A suspend at ``phase`` (:func:`suspend_phase`; not ``resuming``). ``requested``
    only commits (the status; the deletions come the pass after, as KubeRay's);
    ``deleting`` deletes every cluster and the head and serve Services it controls, and
    is ``suspended`` once none is left; ``suspended`` writes nothing."""
    service = snapshot.service
    now_text = clock.rfc3339(base.now) if base.now is not None else ""
    memory = Memory()
    if phase == "suspended":
        return dataclasses.replace(base, memory=memory)
    if phase == "requested":
        observed = report.Observed(suspend="requested")
        return dataclasses.replace(
            base,
            status=report.compute(service, observed, now=now_text),
            observed=observed,
            wake=(settings.serve_poll_interval,),
            memory=memory,
        )
    why = "the RayService is suspended"
    ours = [
        s
        for s in (snapshot.head_svc, snapshot.serve_svc)
        if s is not None and objects.is_controlled_by(s, service)
    ]
    left = bool(snapshot.owned or ours)
    observed = report.Observed(suspend="deleting" if left else "suspended")
    spec = snapshot.validated.spec
    resume = not left and not (spec is not None and spec.suspend)
    return dataclasses.replace(
        base,
        # Suspended while the spec already says resume (it turned false meanwhile): no
        # event will come, so look again.
        wake=(settings.serve_poll_interval,) if resume else (),
        clusters=tuple(
            Delete(c, why) for c in snapshot.owned if not c["metadata"].get("deletionTimestamp")
        ),
        delete_services=tuple(
            DeleteService(s, why) for s in ours if not s["metadata"].get("deletionTimestamp")
        ),
        status=report.compute(service, observed, now=now_text),
        observed=observed,
        memory=memory,
    )


def _converge(
    snapshot: Snapshot,
    decided: Roles,
    base: Plan,
    now: datetime.datetime,
    settings: Settings,
) -> Plan:
    """Steps 4 to 7 of the module docstring (and :func:`_incremental`'s steps)."""
    service = snapshot.service
    memory = base.memory
    config = (service.get("spec") or {}).get("rayClusterConfig") or {}
    stepwise = incremental_mode(snapshot.validated.spec, settings.incremental)
    ops: list[ClusterOp] = []
    events: list[Event] = []
    wake: list[float] = []

    # 4. clusters
    active, pending, draining = decided.active, decided.pending, decided.draining
    if active is not None and decided.active_match is clusters.Match.APPENDED:
        ops.append(UpdateInPlace(clusters.updated_in_place(active, service)))
    if active is not None and not decided.need_new and _delete_after_set(active):
        ops.append(Keep(active))  # a delete-after left by an abandoned switch
    if decided.need_new:
        if pending is not None and decided.pending_match is clusters.Match.EXACT:
            if _delete_after_set(pending):
                ops.append(Keep(pending))
        elif pending is not None:
            ops.append(UpdateInPlace(clusters.updated_in_place(pending, service)))
        elif draining is None:  # a rollback first brings everything back (KubeRay's rule)
            pending, created, event = _new_cluster(
                snapshot, config, autoscaled=stepwise and active is not None
            )
            if created is not None:
                ops.append(created)
            if event is not None:
                events.append(event)
            if pending is None:  # its name is still held by a cluster being deleted
                wake.append(settings.serve_poll_interval)
    claimed = {c["metadata"]["name"] for c in (active, pending, draining) if c is not None}
    # Never delete what a service selects, even when the two disagree (a crash between
    # re-pointing one and the other): traffic may still go there.
    claimed.update(
        n
        for n in (
            services.selected_cluster(s) for s in (snapshot.head_svc, snapshot.serve_svc) if s
        )
        if n
    )
    dangling = [c for c in snapshot.owned if c["metadata"]["name"] not in claimed]
    # A pending cluster dropped because the spec went back to the active one's (it has
    # no delete-after yet: traffic never left it), until it is gone.
    was_rolling_back = conditions.is_true(service, report.ROLLBACK_IN_PROGRESS)
    if stepwise:
        rolling_back = draining is not None
    else:
        rolling_back = (
            active is not None
            and not decided.need_new
            and any(was_rolling_back or not _delete_after_set(c) for c in dangling)
        )
    retired, due = _retire(
        tuple(dangling), now, snapshot.validated.spec, "no longer serving or being prepared"
    )
    ops.extend(retired)
    wake.extend(due)

    # 5. Serve
    # A new cluster is needed but cannot be created yet: Serve waits for it (the serving
    # cluster keeps its config, which belongs with its own image).
    target = decided.target
    target_name = target["metadata"]["name"] if target is not None else None
    other = decided.other if stepwise else None
    # A third spec mid-upgrade: its Serve config waits for its own cluster (the active
    # one keeps the config that goes with its image while traffic returns to it).
    hold_config = decided.need_new and draining is not None
    view = snapshot.serve
    if view is not None and view.cluster != target_name:
        view = None
    serve_config = snapshot.validated.serve_config
    apps: dict[str, Any] | None = None
    ready = polled = False
    failure: Exception | None = None
    submit: Submit | None = None
    serve_annotation: Annotate | None = None
    relabel: Relabel | None = None
    if target is not None and view is not None and serve_config:
        if view.failure is not None or view.details is None or view.client is None:
            failure = view.failure
        else:
            details = view.details
            want = view.config_hash or clusters.serve_config_hash(serve_config)
            have = (target["metadata"].get("annotations") or {}).get(
                clusters.SERVE_CONFIG_ANNOTATION
            )
            if submits(target, details, serve_config, want) and not hold_config:
                body: Mapping[str, Any] = serve_config
                if stepwise:  # Serve's target_capacity goes with every config (KubeRay's)
                    capacity = _capacity_to_submit(
                        service, target, view, upgrading=active is not None and target is pending
                    )
                    body = {**serve_config, "target_capacity": capacity}
                submit = Submit(view.cluster, view.client, body)
            if have != want and not hold_config:
                serve_annotation = Annotate(target, {clusters.SERVE_CONFIG_ANNOTATION: want})
            if submit is not None and asks_proxy(service, view.head, details):
                relabel = Relabel(view.head, None, view.client)  # asked after the PUT
            else:
                relabel = _relabel(service, view)
            apps = report.applications(details)
            ready = (
                submit is None
                and bool(apps)
                and all(
                    a.get("status") == dashboard.ApplicationStatus.RUNNING for a in apps.values()
                )
            )
            polled = True
    serving = dataclasses.replace(
        base,
        events=tuple(events),
        clusters=tuple(ops),
        submit=submit,
        serve_annotation=serve_annotation,
        relabel=relabel,
        relabel_serving=_relabel_serving(service, snapshot.serving_head, active, target),
        target=target_name,
        slow_dashboard_factor=settings.slow_dashboard_factor,
    )

    # 5b. incremental upgrades: the next step, the Gateway and the route
    steps: _Steps | None = None
    if stepwise:
        steps = _incremental(
            snapshot, target, other, active, view, ready, submit, failure, now, settings
        )
        serving = dataclasses.replace(
            serving,
            capacity=steps.capacity,
            capacity_message=steps.capacity_message,
            cluster_services=steps.cluster_services,
            gateway_points=steps.points,
        )
        if steps.failure is not None and failure is None:
            failure = steps.failure
        if steps.wake is not None:
            wake.append(steps.wake)

    # 6. traffic
    switch = (
        ready and target is not None and failure is None
        if steps is None
        else target is not None and (steps.promote or (other is None and ready and failure is None))
    )
    if switch and target is not None:
        moved = _route(snapshot, target, active, now, serve=steps is None)
        if moved.points:
            # Traffic just moved: the serve service's endpoints follow within about a
            # second (an EndpointSlice event wakes us). Report the new state once, with
            # them, rather than now and again then.
            return dataclasses.replace(
                serving,
                delete_after=moved.delete_after,
                points=moved.points,
                switched=moved.switched,
                wake=(ENDPOINTS_GRACE,),
                memory=Memory(poll=None, moved=now),
            )
        serving = dataclasses.replace(serving, delete_after=moved.delete_after)

    # 7. status and when to look again
    def cluster_report(cluster: Obj | None) -> report.ClusterReport | None:
        if cluster is None:
            return None
        name = cluster["metadata"]["name"]
        found = steps.reports.get(name) if steps is not None else None
        other_view = snapshot.other_serve if steps is not None else None
        read = (
            apps
            if cluster is target
            else report.applications(other_view.details)
            if other_view is not None and other_view.cluster == name and other_view.details
            else None
        )
        return report.ClusterReport(
            name=name,
            cluster_status=cluster.get("status"),
            applications=read,
            target_capacity=found[0] if found else None,
            traffic_routed_percent=found[1] if found else None,
            last_traffic_migrated_time=found[2] if found else None,
        )

    endpoints = snapshot.endpoints
    if steps is not None:
        endpoints = sum(
            snapshot.cluster_endpoints.get(c["metadata"]["name"], 0)
            for c in (active, pending or draining)
            if c is not None
        )
    observed = report.Observed(
        active=cluster_report(active),
        pending=cluster_report(pending or draining if steps is not None else pending),
        num_serve_endpoints=endpoints,
        rolling_back=rolling_back,
        rollback_message=_ROLLBACK_MESSAGE if steps is not None and rolling_back else None,
        serve_error=getattr(failure, "refusal", None),
    )
    serving = dataclasses.replace(serving, observed=observed)
    if memory.moved is not None:
        waited = (now - memory.moved).total_seconds()
        if endpoints == 0 and waited < ENDPOINTS_GRACE and failure is None:
            # Woken by our own Service writes, before the EndpointSlice: not yet.
            return dataclasses.replace(serving, wake=(ENDPOINTS_GRACE - waited,))
        memory = dataclasses.replace(memory, moved=None)
    written = report.compute(service, observed, now=clock.rfc3339(now))
    poll = None
    if polled:
        poll, memory = _next_poll(
            memory,
            written,
            steady=ready and pending is None and draining is None,
            settings=settings,
        )
    deadline = _initializing_deadline(snapshot, written, now)
    if deadline is not None:
        wake.append(deadline)
    return dataclasses.replace(
        serving,
        status=written,
        error=failure,
        wake=tuple(wake),
        poll=poll,
        memory=memory,
    )


_ROLLBACK_MESSAGE = "Goal state changed mid-upgrade, rolling back to original cluster."


@dataclasses.dataclass(frozen=True)
class _Steps:
    """What an incremental upgrade does this pass (:func:`_incremental`)."""

    capacity: Submit | None = None
    capacity_message: str | None = None
    cluster_services: tuple[Obj, ...] = ()
    points: tuple[Point, ...] = ()
    promote: bool = False
    """The upgrade is done: point the head Service at the target."""
    failure: Exception | None = None
    wake: float | None = None
    reports: Mapping[str, tuple[int | None, int | None, str | None]] = dataclasses.field(
        default_factory=dict
    )
    """By cluster: (targetCapacity, trafficRoutedPercent, lastTrafficMigratedTime)."""


def _serve_capacity(view: ServeView | None) -> int | None:
    """Serve's ``target_capacity`` as ``view`` read it (None: 100 %); None when Serve was
    not read or runs no application (nothing was submitted yet)."""
    if view is None or view.details is None or not view.details.applications:
        return None
    value = view.details.target_capacity
    return 100 if value is None else round(value)


def _recorded(service: Mapping[str, Any], cluster: str, key: str) -> Any:
    """What the status last said of ``cluster``'s ``key``."""
    status = service.get("status") or {}
    for entry in (status.get("activeServiceStatus"), status.get("pendingServiceStatus")):
        if isinstance(entry, Mapping) and entry.get("rayClusterName") == cluster:
            return entry.get(key)
    return None


def _capacity_to_submit(
    service: Mapping[str, Any], cluster: Obj, view: ServeView, *, upgrading: bool
) -> int:
    """The ``target_capacity`` that goes with a config PUT to ``cluster``: what Serve runs,
    else what the status last said (a restarted head), else 0 for a cluster an upgrade
    moves to and 100 otherwise (KubeRay v1.7.0's starting values)."""
    known = _serve_capacity(view)
    if known is not None:
        return known
    recorded = _recorded(service, cluster["metadata"]["name"], "targetCapacity")
    if isinstance(recorded, int) and not isinstance(recorded, bool):
        return recorded
    return 0 if upgrading else 100


def _running_config(
    cluster: Obj, view: ServeView, serve_config: Mapping[str, Any] | None
) -> Mapping[str, Any] | None:
    """The Serve config ``cluster`` runs: the spec's when its ``serve-config-hash`` says so,
    else rebuilt from what Serve reports as deployed; None when it cannot be known."""
    have = (cluster["metadata"].get("annotations") or {}).get(clusters.SERVE_CONFIG_ANNOTATION)
    if serve_config and have == (view.config_hash or clusters.serve_config_hash(serve_config)):
        return serve_config
    if view.details is None or not view.details.applications:
        return None
    applications = []
    for app in view.details.applications.values():
        deployed = (app.model_extra or {}).get("deployed_app_config")
        if not isinstance(deployed, Mapping):
            return None
        applications.append(dict(deployed))
    return {"applications": applications}


def _written(current: Obj | None, desired: Obj) -> list[Point]:
    """The Gateway's or the route's write: created, updated when a managed field differs
    (:func:`controllers.rayservice.gateway.merged`), or none."""
    if current is None:
        return [Point(None, desired)]
    changed = gateway.merged(current, desired)
    return [Point(current, changed)] if changed is not None else []


def _serve_port(cluster: Obj) -> int:
    ports = raycluster.serve_ports(cluster)
    named = next((p for p in ports if p.get("name") == "serve"), ports[0] if ports else None)
    return int(named["port"]) if named is not None else 8000


def _incremental(
    snapshot: Snapshot,
    target: Obj | None,
    other: Obj | None,
    active: Obj | None,
    view: ServeView | None,
    ready: bool,
    submit: Submit | None,
    failure: Exception | None,
    now: datetime.datetime,
    settings: Settings,
) -> _Steps:
    """An incremental upgrade's pass: the per-cluster serve Services to create, the
    Gateway, the next step (:func:`controllers.rayservice.incremental.next_step`: moving
    to ``target`` from ``other``), the HTTPRoute that results, and what the status says
    of each cluster."""
    service = snapshot.service
    spec = snapshot.validated.spec
    assert spec is not None
    assert spec.upgrade_strategy is not None
    options = spec.upgrade_strategy.cluster_upgrade_options
    assert options is not None  # validated
    creates = []
    for cluster in (active, target, other):
        if cluster is None or cluster["metadata"]["name"] in snapshot.cluster_services:
            continue
        if cluster["metadata"].get("deletionTimestamp"):
            continue
        with contextlib.suppress(ValueError):  # no serving port: nothing to route to
            creates.append(services.cluster_serve_service(service, cluster))
    points = _written(snapshot.gateway, gateway.gateway(service, options.gateway_class_name))
    if active is None:  # the route comes once a cluster serves (KubeRay's order)
        capacity = _serve_capacity(view) if target is not None else None
        first: dict[str, tuple[int | None, int | None, str | None]] = {}
        if target is not None:
            first[target["metadata"]["name"]] = (capacity, None, None)
        return _Steps(cluster_services=tuple(creates), points=tuple(points), reports=first)

    active_name = active["metadata"]["name"]
    current = gateway.weights(snapshot.route) if snapshot.route is not None else {}
    stamp = gateway.migrated_at(snapshot.route)
    capacities: dict[str, int | None] = {}
    for cluster, seen in ((target, view), (other, snapshot.other_serve)):
        if cluster is not None:
            name = cluster["metadata"]["name"]
            capacities[name] = _serve_capacity(
                seen if seen is not None and seen.cluster == name else None
            )
    weights = {active_name: 100}
    capacity_put: Submit | None = None
    message = None
    problem: Exception | None = None
    wake = None
    promote = False
    if other is not None and target is not None:
        to, frm = target["metadata"]["name"], other["metadata"]["name"]
        weights = {to: current.get(to, 0), frm: current.get(frm, 0)}
        if sum(weights.values()) != 100:  # no route yet, or not of our making
            weights = {n: 100 if n == active_name else 0 for n in weights}
        last = clock.parse_rfc3339(stamp) or clock.parse_rfc3339(
            _recorded(service, to, "lastTrafficMigratedTime")
        )
        step: incremental.Step
        if submit is not None or failure is not None:
            step = incremental.Wait("the Serve config is being submitted")
        else:
            step = incremental.next_step(
                incremental.Side(to, capacities.get(to), weights[to], ready),
                incremental.Side(frm, capacities.get(frm), weights[frm], True),
                incremental.Options(
                    max_surge=int(options.max_surge_percent or 100),
                    step=int(options.step_size_percent),
                    interval=float(options.interval_seconds),
                ),
                since=(now - last).total_seconds() if last is not None else None,
                routable=gateway.gateway_ready(snapshot.gateway)
                and gateway.route_ready(snapshot.route, snapshot.gateway),
            )
        if isinstance(step, incremental.SetCapacity):
            cluster, seen = (target, view) if step.cluster == to else (other, snapshot.other_serve)
            running = (
                _running_config(cluster, seen, snapshot.validated.serve_config)
                if seen is not None and seen.client is not None
                else None
            )
            if running is None or seen is None or seen.client is None:
                problem = ServeFailed(
                    f"cannot set Serve's target_capacity of RayCluster {step.cluster}: the "
                    "config it runs is not known"
                )
            else:
                capacity_put = Submit(
                    step.cluster, seen.client, {**running, "target_capacity": step.value}
                )
                capacities[step.cluster] = step.value
                message = (
                    f"Updated target_capacity of serve applications to {step.value} on "
                    f"RayCluster {step.cluster}"
                )
                wake = settings.serve_poll_interval
        elif isinstance(step, incremental.MoveTraffic):
            weights = {to: step.to, frm: 100 - step.to}
        elif isinstance(step, incremental.Done):
            weights = {to: 100}
            promote = target is not active
        else:
            wake = step.after
    by_name = {c["metadata"]["name"]: c for c in (active, target, other) if c is not None}
    order = [name for name in by_name if name in weights]  # the active cluster first
    backends = [gateway.Backend(name, _serve_port(by_name[name]), weights[name]) for name in order]
    unchanged = snapshot.route is not None and current == weights and stamp
    migrated = stamp if unchanged and stamp else clock.rfc3339(now)
    points += _written(snapshot.route, gateway.route(service, backends, migrated_at=migrated))
    reports: dict[str, tuple[int | None, int | None, str | None]] = {
        name: (
            capacities.get(name)
            if capacities.get(name) is not None
            else _recorded(service, name, "targetCapacity"),
            weights.get(name),
            migrated if name in weights else None,
        )
        for name in by_name
    }
    return _Steps(
        capacity=capacity_put,
        capacity_message=message,
        cluster_services=tuple(creates),
        points=tuple(points),
        promote=promote,
        failure=problem,
        wake=wake,
        reports=reports,
    )


def _new_cluster(
    snapshot: Snapshot, config: Mapping[str, Any], *, autoscaled: bool = False
) -> tuple[Obj | None, Create | None, Event | None]:
    """The cluster to create for ``config`` (named after its hash), its creation, and a
    Warning when a foreign cluster holds the first name; ``(None, None, None)`` while
    the name is held by one of ours being deleted."""
    service = snapshot.service
    existing = snapshot.names_in_use or {}
    goal = clusters.spec_hash(config)
    name = clusters.cluster_name(service["metadata"]["name"], goal, existing)
    if name in existing:
        return None, None, None  # ours, same hash, being deleted: wait until it is gone
    first = clusters.cluster_name(service["metadata"]["name"], goal, {})
    event = None
    if first != name and existing.get(first) == "":
        event = Event(
            "Warning",
            "RayClusterNameTaken",
            f"RayCluster {first} exists and is not owned by this RayService; "
            f"using the name {name} instead",
            "Create",
        )
    desired = clusters.desired_cluster(service, name)
    if autoscaled:  # an incremental upgrade's: it grows with Serve's target_capacity (KubeRay)
        for group in desired["spec"].get("workerGroupSpecs") or ():
            if isinstance(group, dict):
                group.pop("replicas", None)
    return desired, Create(desired), event


@dataclasses.dataclass(frozen=True)
class _Routing:
    delete_after: Annotate | None
    points: tuple[Point, ...]
    switched: str | None


def _route(
    snapshot: Snapshot, target: Obj, active: Obj | None, now: datetime.datetime, *, serve: bool
) -> _Routing:
    """Both services pointed at ``target`` (only the head Service without ``serve``: an
    incremental upgrade routes through its HTTPRoute); a switch first stamps the old active
    cluster's ``delete-after`` (absent, or left in the past by an abandoned switch: a
    fresh delay; one still ahead was written by this switch before a crash: kept)."""
    service = snapshot.service
    switching = active is not None and active is not target
    stamp = switched = None
    if switching and active is not None:
        spec = snapshot.validated.spec
        delay = spec.ray_cluster_deletion_delay_seconds if spec is not None else 60
        stamped = _delete_after(active, now) if _delete_after_set(active) else None
        if stamped is None or stamped <= now:
            after = clock.rfc3339(now + datetime.timedelta(seconds=delay))
            stamp = Annotate(active, {clusters.DELETE_AFTER_ANNOTATION: after})
        switched = (
            f"Traffic moved from RayCluster {active['metadata']['name']} "
            f"to {target['metadata']['name']}"
        )
    points = []
    wanted = [(snapshot.head_svc, services.head_service(service, target))]
    if serve:
        wanted.append((snapshot.serve_svc, services.serve_service(service, target)))
    for current, desired in wanted:
        if current is None:
            points.append(Point(None, desired))
            continue
        changed = services.retargeted(current, desired)
        if changed is not None:
            points.append(Point(current, changed))
    return _Routing(stamp, tuple(points), switched)


def submits(
    cluster: Mapping[str, Any],
    details: dashboard.ServeDetails,
    serve_config: Mapping[str, Any],
    want: str,
) -> bool:
    """Whether ``serve_config`` (its hash ``want``) is to be PUT to ``cluster``: its
    ``serve-config-hash`` is another config's (or absent), or Serve runs no application
    (a restarted head) - unless Serve already runs exactly this config (a PUT made before
    a crash)."""
    have = (cluster["metadata"].get("annotations") or {}).get(clusters.SERVE_CONFIG_ANNOTATION)
    if have == want and details.applications:
        return False
    return not _runs(details, serve_config)


def asks_proxy(
    service: Mapping[str, Any], head: Mapping[str, Any], details: dashboard.ServeDetails
) -> bool:
    """Whether the head's Serve proxy must be asked for its health (``/-/healthz``): not
    when the head is excluded from the serve service (its label is ``false`` anyway),
    nor when Serve reports it ``HEALTHY`` and the label already says so."""
    if (service.get("spec") or {}).get("excludeHeadPodFromServeSvc"):
        return False
    current = (head["metadata"].get("labels") or {}).get(raycluster.SERVE_LABEL)
    reported = proxy_status(details, (head.get("status") or {}).get("podIP"))
    return not (reported == "HEALTHY" and current == "true")


def _relabel(service: Mapping[str, Any], view: ServeView) -> Relabel | None:
    """The head pod's ``ray.io/serve`` follows its Serve proxy (``false`` when the head
    is excluded from the serve service); None when it already does."""
    head = view.head
    current = (head["metadata"].get("labels") or {}).get(raycluster.SERVE_LABEL)
    if (service.get("spec") or {}).get("excludeHeadPodFromServeSvc"):
        want = "false"
    elif view.proxy_healthy is None:
        return None  # not asked: Serve reports it HEALTHY and the label says so (asks_proxy)
    else:
        want = "true" if view.proxy_healthy else "false"
    return None if current == want else Relabel(head, want)


def _relabel_serving(
    service: Mapping[str, Any],
    view: ProxyView | None,
    active: Obj | None,
    target: Obj | None,
) -> Relabel | None:
    """The active head's ``ray.io/serve`` while Serve runs on another cluster: it follows
    its proxy (``false`` when the head is excluded), so a dead proxy leaves the serve
    service even when the upgrade never completes; None when it already does."""
    if view is None or active is None or active is target:
        return None
    if view.cluster != active["metadata"]["name"]:
        return None
    if (service.get("spec") or {}).get("excludeHeadPodFromServeSvc"):
        want = "false"
    elif view.healthy is None:
        return None
    else:
        want = "true" if view.healthy else "false"
    current = (view.head["metadata"].get("labels") or {}).get(raycluster.SERVE_LABEL)
    return None if current == want else Relabel(view.head, want)


def _warn_once(
    service: Mapping[str, Any],
    condition_reason: str,
    event_reason: str,
    message: str,
    *,
    action: str = "Reconcile",
) -> tuple[Event, ...]:
    """A Warning, unless the status already reports exactly this (each repeat would be
    a write: the recorder's count PATCH)."""
    ready = conditions.of(service, report.READY)
    generation = int(service["metadata"].get("generation") or 0)
    if (
        ready is not None
        and ready.get("reason") == condition_reason
        and ready.get("message") == message
        and int(ready.get("observedGeneration") or 0) == generation
    ):
        return ()
    return (Event("Warning", event_reason, message, action),)


def _timed_out(snapshot: Snapshot, now: datetime.datetime) -> _TimedOut | None:
    """None: not timed out. Otherwise when (see :class:`_TimedOut`)."""
    service = snapshot.service
    ready = conditions.of(service, report.READY)
    if (
        ready is not None
        and ready.get("status") == "False"
        and ready.get("reason") == "InitializingTimeout"
    ):
        return _TimedOut(None)  # terminal: whatever the spec says now
    if snapshot.endpoints > 0:
        return None
    timeout = snapshot.validated.initializing_timeout
    since = clock.parse_rfc3339(report.initializing_since(service))
    if timeout is None or since is None:
        return None
    spent = (now - since).total_seconds()
    if spent < timeout:
        return None
    return _TimedOut(
        f"RayService failed to become ready within the configured timeout of {timeout:g}s. "
        f"Time spent initializing: {spent:.0f}s"
    )


def _initializing_deadline(
    snapshot: Snapshot, written: Mapping[str, Any], now: datetime.datetime
) -> float | None:
    timeout = snapshot.validated.initializing_timeout
    since = clock.parse_rfc3339(report.initializing_since({**snapshot.service, "status": written}))
    if timeout is None or since is None:
        return None
    return max(0.05, timeout - (now - since).total_seconds())


def _next_poll(
    memory: Memory, written: Mapping[str, Any], *, steady: bool, settings: Settings
) -> tuple[float, Memory]:
    fingerprint = equality.normalize(dict(written), report.VOLATILE)
    previous = memory.poll
    if steady and previous is not None and previous.fingerprint == fingerprint:
        interval = min(previous.interval * 2, settings.serve_poll_max)
    else:
        interval = settings.serve_poll_interval
    return interval, dataclasses.replace(memory, poll=Poll(fingerprint, interval))


def _retire(
    dangling: tuple[Obj, ...], now: datetime.datetime, spec: Any, why: str
) -> tuple[tuple[ClusterOp, ...], tuple[float, ...]]:
    """What happens to clusters no role claims (KubeRay v1.7.0's
    ``cleanUpRayClusterInstance``): one without a ``delete-after`` gets one,
    ``rayClusterDeletionDelaySeconds`` from now (deleted at once when that is 0); one
    whose ``delete-after`` passed is deleted; the others are waited for. Returns the
    writes and the seconds until the next one is due."""
    delay = spec.ray_cluster_deletion_delay_seconds if spec is not None else 60
    ops: list[ClusterOp] = []
    wake: list[float] = []
    for cluster in dangling:
        if cluster["metadata"].get("deletionTimestamp"):
            continue
        after = _delete_after(cluster, now)
        if after is None and delay > 0:
            stamp = clock.rfc3339(now + datetime.timedelta(seconds=delay))
            ops.append(Annotate(cluster, {clusters.DELETE_AFTER_ANNOTATION: stamp}))
            wake.append(float(delay))
        elif after is None or after <= now:
            ops.append(Delete(cluster, why))
        else:
            wake.append((after - now).total_seconds())
    return tuple(ops), tuple(wake)


def _delete_after_set(cluster: Mapping[str, Any]) -> bool:
    return clusters.DELETE_AFTER_ANNOTATION in (cluster["metadata"].get("annotations") or {})


def _delete_after(cluster: Mapping[str, Any], now: datetime.datetime) -> datetime.datetime | None:
    """When ``cluster`` is due: its ``delete-after`` (``now`` when garbled), None without one."""
    annotations = cluster["metadata"].get("annotations") or {}
    if clusters.DELETE_AFTER_ANNOTATION not in annotations:
        return None
    return clock.parse_rfc3339(annotations.get(clusters.DELETE_AFTER_ANNOTATION)) or now


def _runs(details: dashboard.ServeDetails, config: Mapping[str, Any]) -> bool:
    """Whether Serve already runs exactly ``config``'s applications (a PUT made before a
    crash, whose annotation was never written): the same application names, and every
    field the config sets equal in what Serve reports as deployed (Serve may add its
    defaults, such as ``route_prefix: /``)."""
    wanted = {str(a.get("name") or "default"): a for a in config.get("applications") or ()}
    deployed: dict[str, Mapping[str, Any]] = {}
    for name, app in details.applications.items():
        reported = (app.model_extra or {}).get("deployed_app_config")
        deployed[name] = reported if isinstance(reported, Mapping) else {}
    if not wanted or set(wanted) != set(deployed):
        return False
    return all(
        all(deployed[name].get(key) == value for key, value in app.items())
        for name, app in wanted.items()
    )


def proxy_status(details: dashboard.ServeDetails, ip: str | None) -> str | None:
    """What Serve reports of the proxy on the node at ``ip`` (``HEALTHY``...), if anything."""
    proxies = (details.model_extra or {}).get("proxies") or {}
    for proxy in proxies.values():
        if isinstance(proxy, Mapping) and ip and proxy.get("node_ip") == ip:
            value = proxy.get("status")
            return str(value) if value is not None else None
    return None
