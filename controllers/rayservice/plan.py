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
   (:func:`controllers.rayservice.status.resumed`). **Timeout**: an
   ``ray.io/initializing-timeout`` that passed before the service was ever ready is
   terminal (KubeRay v1.7.0): ``InitializingTimeout`` and a Warning once, then no
   status write, whatever the spec becomes (only a suspend and resume starts it
   afresh); its clusters are dangling (step 4);
3. **foreign Services**: a head or serve Service of our name that we do not control
   is never touched; ``ServiceNotOwned`` is reported instead;
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
7. **status** (:func:`controllers.rayservice.status.compute`), and when to look
   again: the next dashboard poll (2 s while converging, doubling to 10 s while
   ready and unchanged; never sooner than ``slow_dashboard_factor`` times what the
   dashboard took), the next ``delete-after``, the initializing deadline.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any, Literal

from controllers.ray import dashboard
from controllers.raycluster import interface as raycluster
from controllers.rayservice import clusters, services, validation
from controllers.rayservice import status as status_
from runtime import clock, equality, objects, reconcile

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
    points: tuple[Point, ...] = ()
    """The head Service, then the serve Service, created or pointed at the target."""
    switched: str | None = None
    """``SwitchedTraffic``'s message when traffic moves to another cluster."""
    status: Obj | None = None
    """The status to hand to the writer; None: no report this pass."""
    report: status_.Observed | None = None
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
        assert self.report is not None
        assert self.now is not None
        report = self.report

        def unread(cluster: status_.ClusterReport | None) -> status_.ClusterReport | None:
            if cluster is None or cluster.name != self.target:
                return cluster
            return dataclasses.replace(cluster, applications=None)

        observed = dataclasses.replace(
            report,
            active=unread(report.active),
            pending=unread(report.pending),
            serve_error=serve_error,
        )
        return status_.compute(self.service, observed, now=clock.rfc3339(self.now))


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

    @property
    def target(self) -> Obj | None:
        """Where Serve runs this pass: the pending cluster, else the active one."""
        return self.pending if self.need_new else self.active


@dataclasses.dataclass(frozen=True)
class _TimedOut:
    message: str | None
    """The message when the timeout passed in this pass; None when it passed earlier."""


def _foreign(snapshot: Snapshot) -> list[Obj]:
    return [
        s
        for s in (snapshot.head_svc, snapshot.serve_svc)
        if s is not None and not objects.is_controlled_by(s, snapshot.service)
    ]


SuspendPhase = Literal["requested", "deleting", "suspended", "resuming"]


def suspend_phase(snapshot: Snapshot) -> SuspendPhase | None:
    """Where a suspend stands (KubeRay v1.7.0's ``handleSuspend``), from the persisted
    conditions first: ``Suspended`` is ``suspended`` while ``spec.suspend`` holds, else
    ``resuming``; a committed ``Suspending`` is ``deleting`` whatever the spec says
    (atomic); otherwise ``spec.suspend`` is ``requested``. None: not suspending."""
    service = snapshot.service
    spec = snapshot.validated.spec
    wanted = bool(spec is not None and spec.suspend)
    if _condition_true(service, status_.SUSPENDED):
        return "suspended" if wanted else "resuming"
    if _condition_true(service, status_.SUSPENDING):
        return "deleting"
    return "requested" if wanted else None


def _stops(snapshot: Snapshot, now: datetime.datetime) -> bool:
    return (
        snapshot.validated.spec is None
        or suspend_phase(snapshot) in ("requested", "deleting", "suspended")
        or _timed_out(snapshot, now) is not None
        or bool(_foreign(snapshot))
    )


def roles(snapshot: Snapshot, now: datetime.datetime, *, zero_downtime: bool) -> Roles | None:
    """The clusters' roles; None when the pass stops before the clusters (invalid,
    suspended, timed out, or a Service of our name we do not control).
    ``zero_downtime``: :attr:`Settings.zero_downtime`."""
    if _stops(snapshot, now):
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
        or (active is not None and not new_cluster_upgrades(spec, zero_downtime))
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
    return Roles(live, active, active_match, pending, pending_match, need_new)


def new_cluster_upgrades(spec: Any, zero_downtime: bool) -> bool:
    """Whether a changed ``rayClusterConfig`` is rolled out on a new cluster (KubeRay
    v1.7.0's ``isZeroDowntimeUpgradeEnabled``): ``spec.upgradeStrategy.type`` decides
    when it is set (``NewCluster``: yes; ``None``: no); otherwise ``zero_downtime``
    (the operator's ``ENABLE_ZERO_DOWNTIME``, not ``false``) does.

    >>> from types import SimpleNamespace as S
    >>> new_cluster_upgrades(S(upgrade_strategy=None), False)
    False
    >>> new_cluster_upgrades(S(upgrade_strategy=S(type="NewCluster")), False)
    True
    >>> new_cluster_upgrades(S(upgrade_strategy=S(type="None")), True)
    False
    """
    strategy = spec.upgrade_strategy
    kind = strategy.type if strategy is not None else None
    if kind:
        return str(kind) == "NewCluster"
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

    def status(observed: status_.Observed) -> Obj:
        return status_.compute(service, observed, now=now_text)

    if checked.spec is None:
        message = "; ".join(checked.problems)
        observed = status_.Observed(
            num_serve_endpoints=endpoints,
            problem=status_.Problem(reason="ValidationFailed", message=message),
        )
        return dataclasses.replace(
            base,
            events=_warn_once(
                service, "ValidationFailed", "InvalidRayServiceSpec", message, action="Validate"
            ),
            status=status(observed),
            report=observed,
            error=reconcile.TerminalError(message),
            memory=dataclasses.replace(memory, poll=None),
        )
    phase = suspend_phase(snapshot)
    if phase == "resuming":  # the pass goes on from a re-armed Initializing
        service = {**service, "status": status_.resumed(service, now=now_text)}
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
        observed = status_.Observed(num_serve_endpoints=endpoints, timed_out=timed_out.message)
        return dataclasses.replace(
            base,
            events=(Event("Warning", "RayServiceInitializingTimeout", timed_out.message),),
            clusters=retired,
            status=status(observed),
            report=observed,
            wake=wake,
            memory=Memory(),
        )

    foreign = _foreign(snapshot)
    if foreign:
        message = "; ".join(
            f"Service {s['metadata']['name']} exists and is not controlled by this RayService"
            for s in foreign
        )
        observed = status_.Observed(
            num_serve_endpoints=endpoints,
            problem=status_.Problem(reason="ServiceNotOwned", message=message),
        )
        return dataclasses.replace(
            base,
            events=_warn_once(service, "ServiceNotOwned", "ServiceNotOwned", message),
            status=status(observed),
            report=observed,
            wake=(settings.serve_poll_max,),
        )

    decided = roles(snapshot, now, zero_downtime=settings.zero_downtime)
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
        observed = status_.Observed(suspend="requested")
        return dataclasses.replace(
            base,
            status=status_.compute(service, observed, now=now_text),
            report=observed,
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
    observed = status_.Observed(suspend="deleting" if left else "suspended")
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
        status=status_.compute(service, observed, now=now_text),
        report=observed,
        memory=memory,
    )


def _converge(
    snapshot: Snapshot,
    decided: Roles,
    base: Plan,
    now: datetime.datetime,
    settings: Settings,
) -> Plan:
    """Steps 4 to 7 of the module docstring."""
    service = snapshot.service
    memory = base.memory
    config = (service.get("spec") or {}).get("rayClusterConfig") or {}
    ops: list[ClusterOp] = []
    events: list[Event] = []
    wake: list[float] = []

    # 4. clusters
    active, pending = decided.active, decided.pending
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
        else:
            pending, created, event = _new_cluster(snapshot, config)
            if created is not None:
                ops.append(created)
            if event is not None:
                events.append(event)
            if pending is None:  # its name is still held by a cluster being deleted
                wake.append(settings.serve_poll_interval)
    claimed = {c["metadata"]["name"] for c in (active, pending) if c is not None}
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
    was_rolling_back = _condition_true(service, status_.ROLLBACK_IN_PROGRESS)
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
    target = pending if decided.need_new else active
    target_name = target["metadata"]["name"] if target is not None else None
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
            if submits(target, details, serve_config, want):
                submit = Submit(view.cluster, view.client, serve_config)
            if have != want:
                serve_annotation = Annotate(target, {clusters.SERVE_CONFIG_ANNOTATION: want})
            if submit is not None and asks_proxy(service, view.head, details):
                relabel = Relabel(view.head, None, view.client)  # asked after the PUT
            else:
                relabel = _relabel(service, view)
            apps = status_.applications(details)
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

    # 6. traffic
    if ready and target is not None and failure is None:
        moved = _route(snapshot, target, active, now)
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
    def report(cluster: Obj | None) -> status_.ClusterReport | None:
        if cluster is None:
            return None
        return status_.ClusterReport(
            name=cluster["metadata"]["name"],
            cluster_status=cluster.get("status"),
            applications=apps if cluster is target else None,
        )

    observed = status_.Observed(
        active=report(active),
        pending=report(pending),
        num_serve_endpoints=snapshot.endpoints,
        rolling_back=rolling_back,
        serve_error=getattr(failure, "refusal", None),
    )
    serving = dataclasses.replace(serving, report=observed)
    if memory.moved is not None:
        waited = (now - memory.moved).total_seconds()
        if snapshot.endpoints == 0 and waited < ENDPOINTS_GRACE and failure is None:
            # Woken by our own Service writes, before the EndpointSlice: not yet.
            return dataclasses.replace(serving, wake=(ENDPOINTS_GRACE - waited,))
        memory = dataclasses.replace(memory, moved=None)
    written = status_.compute(service, observed, now=clock.rfc3339(now))
    poll = None
    if polled:
        poll, memory = _next_poll(
            memory, written, steady=ready and pending is None, settings=settings
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


def _new_cluster(
    snapshot: Snapshot, config: Mapping[str, Any]
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
    return desired, Create(desired), event


@dataclasses.dataclass(frozen=True)
class _Routing:
    delete_after: Annotate | None
    points: tuple[Point, ...]
    switched: str | None


def _route(snapshot: Snapshot, target: Obj, active: Obj | None, now: datetime.datetime) -> _Routing:
    """Both services pointed at ``target``; a switch first stamps the old active
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
    for current, desired in (
        (snapshot.head_svc, services.head_service(service, target)),
        (snapshot.serve_svc, services.serve_service(service, target)),
    ):
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
    ready = status_.condition(service.get("status"), status_.READY)
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
    ready = status_.condition(service.get("status"), status_.READY)
    if (
        ready is not None
        and ready.get("status") == "False"
        and ready.get("reason") == "InitializingTimeout"
    ):
        return _TimedOut(None)  # terminal: whatever the spec says now
    if snapshot.endpoints > 0:
        return None
    timeout = snapshot.validated.initializing_timeout
    since = clock.parse_rfc3339(status_.initializing_since(service))
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
    since = clock.parse_rfc3339(status_.initializing_since({**snapshot.service, "status": written}))
    if timeout is None or since is None:
        return None
    return max(0.05, timeout - (now - since).total_seconds())


def _next_poll(
    memory: Memory, written: Mapping[str, Any], *, steady: bool, settings: Settings
) -> tuple[float, Memory]:
    fingerprint = equality.normalize(dict(written), status_.VOLATILE)
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


def _condition_true(service: Mapping[str, Any], type_: str) -> bool:
    found = status_.condition(service.get("status"), type_)
    return found is not None and found.get("status") == "True"


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
