"""Plan: one pure function from a :class:`~controllers.rayservice.snapshot.Snapshot` (what
:mod:`controllers.rayservice.observe` read, its roles decided) with the clock, the
reconciler's hints (:class:`Memory`) and options (:class:`Settings`), to a :class:`Plan`:
every write of the pass in the order :mod:`controllers.rayservice.act` makes them, the
status, the error, and when to look again.

A plan is plain frozen data: it names clusters and objects, never a client (act resolves
a cluster's name to its dashboard client), and its error is a :class:`Failure` act
raises. Two plans compare with ``==``. No client, no cache, no event loop, no aiohttp: an
import-linter contract holds the module and everything it imports to that.

The decisions, step by step (invalid, suspend, timeout, foreign objects, clusters, Serve,
an incremental upgrade's step, traffic, status) are told once, in docs/architecture.md
(2.7b and 2.7c); each step here is a function returning its part of the plan.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any, Literal

from controllers.ray import serve
from controllers.raycluster import interface as raycluster
from controllers.rayservice import clusters, gateway, incremental, report, roles, services, serving
from controllers.rayservice import snapshot as snapshot_
from runtime import clock, conditions, equality, objects

__all__ = [
    "ENDPOINTS_GRACE",
    "Annotate",
    "ClusterOp",
    "Create",
    "Delete",
    "Event",
    "Failure",
    "Keep",
    "Memory",
    "Plan",
    "Point",
    "Poll",
    "Relabel",
    "Settings",
    "Submit",
    "UpdateInPlace",
    "plan",
]

Obj = dict[str, Any]

ENDPOINTS_GRACE = 3.0
"""Seconds after traffic moved during which a report waits for the serve endpoints."""


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
class Failure:
    """The error a pass ends with, as data: act raises it once everything else is done."""

    message: str
    terminal: bool = False
    """A :class:`~runtime.reconcile.TerminalError`: no retry until the object changes."""
    refusal: str | None = None
    """Serve's answer when it refused the config (shown in the status)."""


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
    """Delete ``obj`` (a cluster, or in a suspend one of the RayService's Services; its
    uid as a precondition), saying ``why`` in the Event."""

    obj: Obj
    why: str


@dataclasses.dataclass(frozen=True)
class Submit:
    """PUT ``config`` to the dashboard of ``cluster`` (act knows its client by that name)."""

    cluster: str
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
    its Serve proxy answers (through ``cluster``'s dashboard client) once the config is
    submitted (the PUT starts the proxy: asked before it, it would say no for one more
    poll)."""

    pod: Obj
    value: str | None
    cluster: str | None = None


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
    gateway_classes: gateway.GatewayClasses = dataclasses.field(
        default_factory=gateway.GatewayClasses
    )
    """The classes an incremental upgrade's Gateway may have (``--gateway-classes``);
    none by default: such a RayService reports ``GatewayClassNotAllowed``."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan:
    """Every write of one pass, in the order they are made, and what comes after."""

    events: tuple[Event, ...] = ()
    """Warnings decided from the snapshot (sent first)."""
    clusters: tuple[ClusterOp, ...] = ()
    """Cluster writes: the active one's, the pending one's, then the dangling ones'
    (their ``delete-after``, or their deletion)."""
    delete_services: tuple[Delete, ...] = ()
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
    """What :attr:`status` was computed from: act computes the status again from it when
    the PUT was refused, or changed a running config
    (:func:`controllers.rayservice.report.after_put`)."""
    reread: bool = False
    """The PUT changes a config the target already runs: Serve's applications are read
    again after it, so that the status reports what Serve runs then (a first config, on
    a new cluster, has nothing to correct: its applications come with the next poll)."""
    target: str | None = None
    """The cluster Serve runs on this pass."""
    error: Failure | None = None
    """Raised once everything else is done (retry with backoff, or never)."""
    wake: tuple[float, ...] = ()
    """Seconds until something is due (a ``delete-after``, the initializing deadline)."""
    poll: float | None = None
    """Seconds until the next dashboard poll, before the slow-dashboard floor."""
    deploying: bool = False
    """The target's Serve applications are being deployed (a config submitted this pass,
    or one not ``RUNNING``): what the next poll looks for is their change
    (:mod:`controllers.rayservice.poller` may poll off the worker)."""
    slow_dashboard_factor: float = 0.0
    memory: Memory = Memory()
    """What to remember for the next pass."""
    service: Obj = dataclasses.field(default_factory=dict)
    now: datetime.datetime | None = None

    def poll_after(self, spent: float) -> float | None:
        """When to poll the dashboard, given that it took ``spent`` seconds (at least
        ``slow_dashboard_factor`` times that: fairness to the other RayServices)."""
        if self.poll is None:
            return None
        return max(self.poll, spent * self.slow_dashboard_factor)

    def requeue_after(self, spent: float) -> float | None:
        """When to look again, given that the dashboard took ``spent`` seconds."""
        wake = list(self.wake)
        poll = self.poll_after(spent)
        if poll is not None:
            wake.append(poll)
        positive = [w for w in wake if w > 0]
        return min(positive) if positive else None


# -- the plan -------------------------------------------------------------------------------


def plan(
    snapshot: snapshot_.Snapshot,
    *,
    now: datetime.datetime,
    memory: Memory,
    settings: Settings,
) -> Plan:
    """The pass for ``snapshot``, whose roles observe decided
    (:func:`controllers.rayservice.roles.decide`); docs/architecture.md (2.7b) walks
    through it."""
    base = Plan(service=snapshot.service, now=now, memory=memory)
    if snapshot.validated.spec is None:
        message = "; ".join(snapshot.validated.problems)
        return _problem(
            snapshot, base, "ValidationFailed", "InvalidRayServiceSpec", message,
            action="Validate", error=Failure(message, terminal=True),
            memory=dataclasses.replace(memory, poll=None),
        )  # fmt: skip
    phase = roles.suspend_phase(snapshot)
    if phase == "resuming":  # the pass goes on from a re-armed Initializing
        service = {**snapshot.service, "status": report.resumed(snapshot.service, now=_text(now))}
        snapshot = dataclasses.replace(snapshot, service=service)
        base = dataclasses.replace(base, service=service)
    elif phase is not None:
        return _suspend(snapshot, phase, base, settings)
    stopped = (
        _timeout(snapshot, base, now)
        or _not_ours(snapshot, base, settings)
        or _without_gateway_api(snapshot, base, settings)
        or _gateway_class_refused(snapshot, base, settings)
    )
    if stopped is not None:
        return stopped
    assert snapshot.roles is not None, "observe decides the roles (roles.decide)"
    return _converge(snapshot, snapshot.roles, base, now, settings)


def _text(now: datetime.datetime | None) -> str:
    return clock.rfc3339(now) if now is not None else ""


def _reported(base: Plan, observed: report.Observed, **changes: Any) -> Plan:
    """``base`` with the status computed from ``observed``, and ``changes``."""
    status = report.compute(base.service, observed, now=_text(base.now))
    return dataclasses.replace(base, status=status, observed=observed, **changes)


def _problem(
    snapshot: snapshot_.Snapshot,
    base: Plan,
    reason: str,
    event_reason: str,
    message: str,
    *,
    action: str = "Reconcile",
    **changes: Any,
) -> Plan:
    """A pass that stops on a problem: ``Ready=False`` with ``reason``, and a Warning once."""
    observed = report.Observed(
        num_serve_endpoints=snapshot.endpoints,
        problem=report.Problem(reason=reason, message=message),
    )
    events = _warn_once(snapshot.service, reason, event_reason, message, action=action)
    return _reported(base, observed, events=events, **changes)


def _timeout(snapshot: snapshot_.Snapshot, base: Plan, now: datetime.datetime) -> Plan | None:
    """An initializing timeout (terminal): every cluster is dangling, deleted after the
    deletion delay; the status is written once, when it times out, and never again."""
    passed = roles.timed_out(snapshot, now)
    if passed is None:
        return None
    retired, wake = _retire(
        snapshot.owned, now, snapshot.validated.spec, "the RayService did not become ready in time"
    )
    if passed.message is None:  # it passed before
        return dataclasses.replace(base, clusters=retired, wake=wake, memory=Memory())
    observed = report.Observed(num_serve_endpoints=snapshot.endpoints, timed_out=passed.message)
    return _reported(
        base, observed, clusters=retired, wake=wake, memory=Memory(),
        events=(Event("Warning", "RayServiceInitializingTimeout", passed.message),),
    )  # fmt: skip


def _not_ours(snapshot: snapshot_.Snapshot, base: Plan, settings: Settings) -> Plan | None:
    """Objects of our names that we do not control: reported, never touched."""
    found = roles.foreign(snapshot, settings.incremental)
    if not found:
        return None
    message = "; ".join(roles.not_ours(snapshot, s) for s in found)
    kind = roles.kind_of(snapshot, found[0])
    reason = "GatewayNotOwned" if kind in ("Gateway", "HTTPRoute") else "ServiceNotOwned"
    return _problem(snapshot, base, reason, reason, message, wake=(settings.serve_poll_max,))


def _without_gateway_api(
    snapshot: snapshot_.Snapshot, base: Plan, settings: Settings
) -> Plan | None:
    """An incremental upgrade where the API server serves no Gateway API: terminal."""
    if snapshot.gateway_api or not roles.incremental_mode(
        snapshot.validated.spec, settings.incremental
    ):
        return None
    message = (
        f"spec.upgradeStrategy.type {roles.INCREMENTAL!r} needs the Gateway API "
        "(gateway.networking.k8s.io/v1 Gateway and HTTPRoute), which the API server "
        "did not serve when the operator started: install its CRDs and a gateway "
        "controller, then restart the operator"
    )
    reason = "GatewayAPIUnavailable"
    return _problem(snapshot, base, reason, reason, message, error=Failure(message, terminal=True))


def _gateway_class_refused(
    snapshot: snapshot_.Snapshot, base: Plan, settings: Settings
) -> Plan | None:
    """An incremental upgrade through a GatewayClass the operator does not allow
    (``--gateway-classes``): terminal, nothing written; a Gateway of that class (made
    before, or by KubeRay) is left as it is. Allowing the class means restarting the
    operator, whose first pass plans the RayService again."""
    if not roles.incremental_mode(snapshot.validated.spec, settings.incremental):
        return None
    message = settings.gateway_classes.refusal(_upgrade_options(snapshot).gateway_class_name)
    if message is None:
        return None
    reason = "GatewayClassNotAllowed"
    return _problem(snapshot, base, reason, reason, message, error=Failure(message, terminal=True))


def _suspend(
    snapshot: snapshot_.Snapshot, phase: roles.SuspendPhase, base: Plan, settings: Settings
) -> Plan:
    """A suspend at ``phase`` (:func:`controllers.rayservice.roles.suspend_phase`; not
    ``resuming``). ``requested`` only commits (the status; the deletions come the pass
    after, as KubeRay's); ``deleting`` deletes every cluster and the head and serve Services
    it controls, and is ``suspended`` once none is left; ``suspended`` writes nothing."""
    service = snapshot.service
    base = dataclasses.replace(base, memory=Memory())
    if phase == "suspended":
        return base
    if phase == "requested":
        return _reported(
            base, report.Observed(suspend="requested"), wake=(settings.serve_poll_interval,)
        )
    why = "the RayService is suspended"
    ours = [
        s
        for s in (snapshot.head_svc, snapshot.serve_svc)
        if s is not None and objects.is_controlled_by(s, service)
    ]
    left = bool(snapshot.owned or ours)
    spec = snapshot.validated.spec
    resume = not left and not (spec is not None and spec.suspend)
    return _reported(
        base,
        report.Observed(suspend="deleting" if left else "suspended"),
        # Suspended while the spec already says resume (it turned false meanwhile): no
        # event will come, so look again.
        wake=(settings.serve_poll_interval,) if resume else (),
        clusters=tuple(
            Delete(c, why) for c in snapshot.owned if not c["metadata"].get("deletionTimestamp")
        ),
        delete_services=tuple(
            Delete(s, why) for s in ours if not s["metadata"].get("deletionTimestamp")
        ),
    )


def _converge(
    snapshot: snapshot_.Snapshot,
    decided: snapshot_.Roles,
    base: Plan,
    now: datetime.datetime,
    settings: Settings,
) -> Plan:
    """The clusters, Serve, (an incremental upgrade's step,) traffic, then the report."""
    stepwise = roles.incremental_mode(snapshot.validated.spec, settings.incremental)
    held = _clusters(snapshot, decided, now, settings, stepwise=stepwise)
    served = _serve(snapshot, decided, stepwise=stepwise)
    steps = _incremental(snapshot, decided, served, now, settings) if stepwise else None
    failure = served.failure or (steps.failure if steps is not None else None)
    stepped: dict[str, Any] = {}
    wake = held.wake
    if steps is not None:  # the incremental upgrade's writes
        stepped = {
            "capacity": steps.capacity,
            "capacity_message": steps.capacity_message,
            "cluster_services": steps.cluster_services,
            "gateway_points": steps.points,
        }
        wake += (steps.wake,) if steps.wake is not None else ()
    serving = dataclasses.replace(
        base,
        events=held.events,
        clusters=held.ops,
        submit=served.submit,
        serve_annotation=served.serve_annotation,
        relabel=served.relabel,
        relabel_serving=_relabel_serving(
            snapshot.service, snapshot.serving_head, decided.active, decided.target
        ),
        target=_name(decided.target),
        slow_dashboard_factor=settings.slow_dashboard_factor,
        **stepped,
    )
    moved = _traffic(snapshot, decided, served, steps, failure, now)
    if moved is not None and moved.points:
        # Traffic just moved: the serve service's endpoints follow within about a second
        # (an EndpointSlice event wakes us). Report the new state once, with them, rather
        # than now and again then.
        return dataclasses.replace(
            serving,
            delete_after=moved.delete_after,
            points=moved.points,
            switched=moved.switched,
            wake=(ENDPOINTS_GRACE,),
            memory=Memory(poll=None, moved=now),
        )
    if moved is not None:
        serving = dataclasses.replace(serving, delete_after=moved.delete_after)
    done = _Pass(snapshot, decided, held, served, steps, failure)
    return _report(done, serving, wake, settings)


def _name(cluster: Obj | None) -> str | None:
    return cluster["metadata"]["name"] if cluster is not None else None


@dataclasses.dataclass(frozen=True)
class _Held:
    """What happens to the clusters this pass (:func:`_clusters`)."""

    ops: tuple[ClusterOp, ...]
    events: tuple[Event, ...]
    wake: tuple[float, ...]
    pending: Obj | None
    """The pending cluster: found, or about to be created."""
    rolling_back: bool


def _clusters(
    snapshot: snapshot_.Snapshot,
    decided: snapshot_.Roles,
    now: datetime.datetime,
    settings: Settings,
    *,
    stepwise: bool,
) -> _Held:
    """The active cluster kept or updated in place; the pending one found, updated in
    place or created; the dangling ones stamped or deleted; whether a rollback runs."""
    service = snapshot.service
    active, pending = decided.active, decided.pending
    ops: list[ClusterOp] = []
    events: list[Event] = []
    wake: list[float] = []
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
        elif decided.draining is None:  # a rollback first brings everything back (KubeRay's)
            config = (service.get("spec") or {}).get("rayClusterConfig") or {}
            pending, created, event = _new_cluster(
                snapshot, config, autoscaled=stepwise and active is not None
            )
            ops.extend([created] if created is not None else [])
            events.extend([event] if event is not None else [])
            if pending is None:  # its name is still held by a cluster being deleted
                wake.append(settings.serve_poll_interval)
    dangling = _dangling(snapshot, (active, pending, decided.draining))
    retired, due = _retire(
        dangling, now, snapshot.validated.spec, "no longer serving or being prepared"
    )
    return _Held(
        ops=(*ops, *retired),
        events=tuple(events),
        wake=(*wake, *due),
        pending=pending,
        rolling_back=_rolling_back(service, decided, dangling, stepwise=stepwise),
    )


def _dangling(
    snapshot: snapshot_.Snapshot, claimed_by_roles: tuple[Obj | None, ...]
) -> tuple[Obj, ...]:
    """Owned clusters no role claims and no Service selects: never delete what a service
    selects, even when the two disagree (a crash between re-pointing one and the other):
    traffic may still go there."""
    claimed = {c["metadata"]["name"] for c in claimed_by_roles if c is not None}
    claimed.update(
        n
        for n in (
            services.selected_cluster(s) for s in (snapshot.head_svc, snapshot.serve_svc) if s
        )
        if n
    )
    return tuple(c for c in snapshot.owned if c["metadata"]["name"] not in claimed)


def _rolling_back(
    service: Obj, decided: snapshot_.Roles, dangling: tuple[Obj, ...], *, stepwise: bool
) -> bool:
    """A pending cluster dropped because the spec went back to the active one's (it has no
    delete-after yet: traffic never left it), until it is gone; in an incremental upgrade,
    while a cluster is drained."""
    if stepwise:
        return decided.draining is not None
    was_rolling_back = conditions.is_true(service, report.ROLLBACK_IN_PROGRESS)
    return (
        decided.active is not None
        and not decided.need_new
        and any(was_rolling_back or not _delete_after_set(c) for c in dangling)
    )


@dataclasses.dataclass(frozen=True)
class _Served:
    """Serve on the target this pass (:func:`_serve`)."""

    view: snapshot_.ServeView | None = None
    """The target's dashboard view, if it was read."""
    submit: Submit | None = None
    serve_annotation: Annotate | None = None
    relabel: Relabel | None = None
    apps: Obj | None = None
    """The target's applications as the status reports them."""
    ready: bool = False
    """Every application of the target runs, and nothing is submitted."""
    polled: bool = False
    failure: Failure | None = None


def _serve(snapshot: snapshot_.Snapshot, decided: snapshot_.Roles, *, stepwise: bool) -> _Served:
    """The target's Serve config PUT and hash annotation, its head's label, and whether
    its applications all run. A new cluster that cannot be created yet: Serve waits for it
    (the serving cluster keeps its config, which belongs with its own image)."""
    service, target = snapshot.service, decided.target
    view = snapshot.serve
    if view is None or target is None or view.cluster != _name(target):
        return _Served()
    serve_config = snapshot.validated.serve_config
    if not serve_config:
        return _Served(view=view)
    if view.details is None:
        return _Served(view=view, failure=Failure(view.failure) if view.failure else None)
    details = view.details
    # A third spec mid-upgrade: its Serve config waits for its own cluster (the active
    # one keeps the config that goes with its image while traffic returns to it).
    hold_config = decided.need_new and decided.draining is not None
    want = view.config_hash or clusters.serve_config_hash(serve_config)
    submit = None
    if serving.submits(target, details, serve_config, want) and not hold_config:
        body: Mapping[str, Any] = serve_config
        if stepwise:  # Serve's target_capacity goes with every config (KubeRay's)
            upgrading = decided.active is not None and target is decided.pending
            capacity = _capacity_to_submit(service, target, view, upgrading=upgrading)
            body = {**serve_config, "target_capacity": capacity}
        submit = Submit(view.cluster, body)
    have = (target["metadata"].get("annotations") or {}).get(clusters.SERVE_CONFIG_ANNOTATION)
    annotation = None
    if have != want and not hold_config:
        annotation = Annotate(target, {clusters.SERVE_CONFIG_ANNOTATION: want})
    if submit is not None and serving.asks_proxy(service, view.head, details):
        relabel: Relabel | None = Relabel(view.head, None, view.cluster)  # asked after the PUT
    else:
        relabel = _relabel(service, view)
    apps = report.applications(details)
    running = bool(apps) and all(
        a.get("status") == serve.ApplicationStatus.RUNNING for a in apps.values()
    )
    return _Served(
        view=view, submit=submit, serve_annotation=annotation, relabel=relabel, apps=apps,
        ready=submit is None and running, polled=True,
    )  # fmt: skip


def _traffic(
    snapshot: snapshot_.Snapshot,
    decided: snapshot_.Roles,
    served: _Served,
    steps: _Steps | None,
    failure: Failure | None,
    now: datetime.datetime,
) -> _Routing | None:
    """Once the target's applications all run (or an incremental upgrade is done), the
    services are created or pointed at it; None when traffic stays where it is."""
    target = decided.target
    if target is None:
        return None
    if steps is None:
        switch = served.ready and failure is None
    else:
        switch = steps.promote or (decided.other is None and served.ready and failure is None)
    if not switch:
        return None
    return _route(snapshot, target, decided.active, now, serve=steps is None)


@dataclasses.dataclass(frozen=True)
class _Pass:
    """What the steps of a converging pass decided, for its report."""

    snapshot: snapshot_.Snapshot
    decided: snapshot_.Roles
    held: _Held
    served: _Served
    steps: _Steps | None
    failure: Failure | None


def _report(done: _Pass, serving: Plan, wake: tuple[float, ...], settings: Settings) -> Plan:
    """The status, and when to look again: the next poll, the next ``delete-after``, the
    initializing deadline."""
    snapshot, decided, held, served = done.snapshot, done.decided, done.held, done.served
    failure = done.failure
    now = serving.now
    assert now is not None
    observed = _observed(done)
    serving = dataclasses.replace(serving, observed=observed)
    memory = serving.memory
    if memory.moved is not None:
        waited = (now - memory.moved).total_seconds()
        if observed.num_serve_endpoints == 0 and waited < ENDPOINTS_GRACE and failure is None:
            # Woken by our own Service writes, before the EndpointSlice: not yet.
            return dataclasses.replace(serving, wake=(ENDPOINTS_GRACE - waited,))
        memory = dataclasses.replace(memory, moved=None)
    written = report.compute(snapshot.service, observed, now=_text(now))
    poll = None
    if served.polled:
        steady = served.ready and held.pending is None and decided.draining is None
        poll, memory = _next_poll(memory, written, steady=steady, settings=settings)
    deploying = served.polled and not served.ready and failure is None and done.steps is None
    deadline = _initializing_deadline(snapshot, written, now)
    return dataclasses.replace(
        serving,
        status=written,
        reread=serving.submit is not None and bool(served.apps),
        error=failure,
        wake=(*wake, *((deadline,) if deadline is not None else ())),
        poll=poll,
        deploying=deploying,
        memory=memory,
    )


def _observed(done: _Pass) -> report.Observed:
    """What the status reports of the active and the pending (or drained) cluster."""
    snapshot, decided, held, served, steps = (
        done.snapshot, done.decided, done.held, done.served, done.steps
    )  # fmt: skip
    failure = done.failure
    target = decided.target
    other_view = snapshot.other_serve if steps is not None else None

    def cluster_report(cluster: Obj | None) -> report.ClusterReport | None:
        if cluster is None:
            return None
        name = cluster["metadata"]["name"]
        found = steps.reports.get(name) if steps is not None else None
        read = (
            served.apps
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

    active, pending = decided.active, held.pending
    endpoints = snapshot.endpoints
    if steps is not None:
        pending = pending or decided.draining
        endpoints = sum(
            snapshot.cluster_endpoints.get(c["metadata"]["name"], 0)
            for c in (active, pending)
            if c is not None
        )
    return report.Observed(
        active=cluster_report(active),
        pending=cluster_report(pending),
        num_serve_endpoints=endpoints,
        rolling_back=held.rolling_back,
        rollback_message=_ROLLBACK_MESSAGE if steps is not None and held.rolling_back else None,
        serve_error=failure.refusal if failure is not None else None,
    )


_ROLLBACK_MESSAGE = "Goal state changed mid-upgrade, rolling back to original cluster."


# -- incremental upgrades ---------------------------------------------------------------------


Reports = Mapping[str, tuple[int | None, int | None, str | None]]
"""By cluster: (targetCapacity, trafficRoutedPercent, lastTrafficMigratedTime)."""


@dataclasses.dataclass(frozen=True)
class _Steps:
    """What an incremental upgrade does this pass (:func:`_incremental`)."""

    capacity: Submit | None = None
    capacity_message: str | None = None
    cluster_services: tuple[Obj, ...] = ()
    points: tuple[Point, ...] = ()
    promote: bool = False
    """The upgrade is done: point the head Service at the target."""
    failure: Failure | None = None
    wake: float | None = None
    reports: Reports = dataclasses.field(default_factory=dict)


def _incremental(
    snapshot: snapshot_.Snapshot,
    decided: snapshot_.Roles,
    served: _Served,
    now: datetime.datetime,
    settings: Settings,
) -> _Steps:
    """An incremental upgrade's pass: the per-cluster serve Services to create, the
    Gateway, the next step (:func:`controllers.rayservice.incremental.next_step`: moving
    to the target from :attr:`~controllers.rayservice.snapshot.Roles.other`), the
    HTTPRoute that results, and what the status says of each cluster."""
    service = snapshot.service
    options = _upgrade_options(snapshot)
    active, target, other = decided.active, decided.target, decided.other
    creates = _serve_services(snapshot, (active, target, other))
    points = _written(snapshot.gateway, gateway.gateway(service, options.gateway_class_name))
    if active is None:  # the route comes once a cluster serves (KubeRay's order)
        first: dict[str, tuple[int | None, int | None, str | None]] = {}
        if target is not None:
            first[target["metadata"]["name"]] = (_serve_capacity(served.view), None, None)
        return _Steps(cluster_services=creates, points=tuple(points), reports=first)
    current = gateway.weights(snapshot.route) if snapshot.route is not None else {}
    capacities: dict[str, int | None] = {}
    for cluster, seen in ((target, served.view), (other, snapshot.other_serve)):
        if cluster is not None:
            name = cluster["metadata"]["name"]
            capacities[name] = _serve_capacity(
                seen if seen is not None and seen.cluster == name else None
            )
    step = _Step(weights={active["metadata"]["name"]: 100})
    if other is not None and target is not None:
        step = _step(
            snapshot, active["metadata"]["name"], target, other, served, current, capacities, now,
            settings,
        )  # fmt: skip
        capacities.update(step.capacities)
    by_name = {c["metadata"]["name"]: c for c in (active, target, other) if c is not None}
    migrated, route_points = _route_write(snapshot, by_name, current, step.weights, now)
    reports: dict[str, tuple[int | None, int | None, str | None]] = {
        name: (
            capacities.get(name)
            if capacities.get(name) is not None
            else _recorded(service, name, "targetCapacity"),
            step.weights.get(name),
            migrated if name in step.weights else None,
        )
        for name in by_name
    }
    return _Steps(
        capacity=step.capacity,
        capacity_message=step.message,
        cluster_services=creates,
        points=(*points, *route_points),
        promote=step.promote and target is not active,
        failure=step.failure,
        wake=step.wake,
        reports=reports,
    )


def _upgrade_options(snapshot: snapshot_.Snapshot) -> Any:
    spec = snapshot.validated.spec
    assert spec is not None
    assert spec.upgrade_strategy is not None
    options = spec.upgrade_strategy.cluster_upgrade_options
    assert options is not None  # validated
    return options


def _serve_services(
    snapshot: snapshot_.Snapshot, candidates: tuple[Obj | None, ...]
) -> tuple[Obj, ...]:
    """The per-cluster serve Services to create: for each live cluster that has none."""
    creates = []
    for cluster in candidates:
        if cluster is None or cluster["metadata"]["name"] in snapshot.cluster_services:
            continue
        if cluster["metadata"].get("deletionTimestamp"):
            continue
        with contextlib.suppress(ValueError):  # no serving port: nothing to route to
            creates.append(services.cluster_serve_service(snapshot.service, cluster))
    return tuple(creates)


@dataclasses.dataclass(frozen=True)
class _Step:
    """The step an incremental upgrade takes this pass (:func:`_step`)."""

    weights: Mapping[str, int]
    capacity: Submit | None = None
    message: str | None = None
    capacities: Mapping[str, int | None] = dataclasses.field(default_factory=dict)
    """Serve capacities the step sets."""
    promote: bool = False
    failure: Failure | None = None
    wake: float | None = None


def _step(
    snapshot: snapshot_.Snapshot,
    active_name: str,
    target: Obj,
    other: Obj,
    served: _Served,
    current: Mapping[str, int],
    capacities: Mapping[str, int | None],
    now: datetime.datetime,
    settings: Settings,
) -> _Step:
    """The next step from ``other`` to ``target``: a Serve ``target_capacity`` PUT, new
    route weights, done, or a wait."""
    to, frm = target["metadata"]["name"], other["metadata"]["name"]
    weights = {to: current.get(to, 0), frm: current.get(frm, 0)}
    if sum(weights.values()) != 100:  # no route yet, or not of our making
        weights = {n: 100 if n == active_name else 0 for n in weights}
    if served.submit is not None or served.failure is not None:
        return _Step(weights=weights)  # the Serve config is being submitted: wait
    options = _upgrade_options(snapshot)
    last = clock.parse_rfc3339(gateway.migrated_at(snapshot.route)) or clock.parse_rfc3339(
        _recorded(snapshot.service, to, "lastTrafficMigratedTime")
    )
    step = incremental.next_step(
        incremental.Side(to, capacities.get(to), weights[to], served.ready),
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
        return _set_capacity(snapshot, step, target, other, served, weights, settings)
    if isinstance(step, incremental.MoveTraffic):
        return _Step(weights={to: step.to, frm: 100 - step.to})
    if isinstance(step, incremental.Done):
        return _Step(weights={to: 100}, promote=True)
    return _Step(weights=weights, wake=step.after)


def _set_capacity(
    snapshot: snapshot_.Snapshot,
    step: incremental.SetCapacity,
    target: Obj,
    other: Obj,
    served: _Served,
    weights: Mapping[str, int],
    settings: Settings,
) -> _Step:
    """A Serve ``target_capacity`` PUT: the config the cluster runs, with the new value."""
    to = target["metadata"]["name"]
    cluster, seen = (target, served.view) if step.cluster == to else (other, snapshot.other_serve)
    running = (
        _running_config(cluster, seen, snapshot.validated.serve_config)
        if seen is not None and seen.details is not None
        else None
    )
    if running is None:
        return _Step(
            weights=weights,
            failure=Failure(
                f"cannot set Serve's target_capacity of RayCluster {step.cluster}: the "
                "config it runs is not known"
            ),
        )
    return _Step(
        weights=weights,
        capacity=Submit(step.cluster, {**running, "target_capacity": step.value}),
        capacities={step.cluster: step.value},
        message=(
            f"Updated target_capacity of serve applications to {step.value} on "
            f"RayCluster {step.cluster}"
        ),
        wake=settings.serve_poll_interval,
    )


def _route_write(
    snapshot: snapshot_.Snapshot,
    by_name: Mapping[str, Obj],
    current: Mapping[str, int],
    weights: Mapping[str, int],
    now: datetime.datetime,
) -> tuple[str, list[Point]]:
    """The HTTPRoute with ``weights`` (the active cluster first), stamped when they change;
    the stamp it carries and its write, if any."""
    stamp = gateway.migrated_at(snapshot.route)
    order = [name for name in by_name if name in weights]
    backends = [gateway.Backend(name, _serve_port(by_name[name]), weights[name]) for name in order]
    unchanged = snapshot.route is not None and dict(current) == dict(weights) and stamp
    migrated = stamp if unchanged and stamp else clock.rfc3339(now)
    desired = gateway.route(snapshot.service, backends, migrated_at=migrated)
    return migrated, _written(snapshot.route, desired)


def _serve_capacity(view: snapshot_.ServeView | None) -> int | None:
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
    service: Mapping[str, Any], cluster: Obj, view: snapshot_.ServeView, *, upgrading: bool
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
    cluster: Obj, view: snapshot_.ServeView, serve_config: Mapping[str, Any] | None
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
    return int(named["port"]) if named is not None else serve.DEFAULT_SERVE_PORT


def _new_cluster(
    snapshot: snapshot_.Snapshot, config: Mapping[str, Any], *, autoscaled: bool = False
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
    snapshot: snapshot_.Snapshot,
    target: Obj,
    active: Obj | None,
    now: datetime.datetime,
    *,
    serve: bool,
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


def _relabel(service: Mapping[str, Any], view: snapshot_.ServeView) -> Relabel | None:
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
    view: snapshot_.ProxyView | None,
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


def _initializing_deadline(
    snapshot: snapshot_.Snapshot, written: Mapping[str, Any], now: datetime.datetime
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
