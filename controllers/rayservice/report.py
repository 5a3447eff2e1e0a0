"""A RayService's status, computed in one pure function from what one reconcile observed.

:func:`compute` takes the RayService (its previous status included) and an
:class:`Observed` - which clusters are active and pending, what their dashboards
said, how many serve endpoints are ready - and returns the new ``status``. The
reconciler hands it to a :class:`runtime.status.StatusWriter`, which writes only
when it means something new, so the rules here decide what a write is:

- ``observedGeneration``: the RayService's ``metadata.generation``;
- ``activeServiceStatus`` / ``pendingServiceStatus``: the cluster's name, its
  ``applicationStatuses`` (``{app: {status, message, serveDeploymentStatuses:
  {deployment: {status, message}}}}``) and a copy of the RayCluster's status
  (``rayClusterStatus``, informational: the writer ignores it when comparing, see
  :data:`VOLATILE`, so it is refreshed only when a write happens anyway).
  Applications not read in this pass (the cluster is not the one being polled)
  keep what the previous status said about the same cluster; a cluster that left
  its role leaves its applications with it;
- ``numServeEndpoints``: the distinct pods ready behind the serve service
  (:func:`controllers.rayservice.services.ready_endpoints`, KubeRay v1.7.0's count);
- condition ``Ready`` (KubeRay's rules): ``True``/``NonZeroServeEndpoints`` while
  the serve service has a ready endpoint; ``False``/``ZeroServeEndpoints`` when
  that drops to zero after having been ready (and while it stays zero: such a
  service does not go back to ``Initializing``, KubeRay's rule); otherwise ``False``/
  ``Initializing`` (first seen), which turns into ``False``/``InitializingTimeout``
  once the ``ray.io/initializing-timeout`` has passed since the condition's
  ``lastTransitionTime``. That is terminal (KubeRay v1.7.0): the clusters are removed
  and the status is not computed again, whatever the spec becomes, until a suspend
  and resume re-arms ``Initializing`` (:mod:`controllers.rayservice.plan`);
  ``False`` with a :class:`Problem`'s reason (``ValidationFailed``, ``ServiceNotOwned``)
  for a spec that cannot be reconciled: then everything else the status said about
  the clusters is kept as it was (the pass never looked at them), as KubeRay sets
  only ``Ready``. While ``Ready`` is ``False`` and Serve refuses the config
  (:attr:`Observed.serve_error`), its message says so;
- condition ``UpgradeInProgress``: ``True``/``BothActivePendingClustersExist``,
  ``False``/``NoPendingCluster`` (only an active cluster), ``False``/``Initializing``
  before any cluster served, ``Unknown``/``NoActiveCluster`` when the active
  cluster went away after the service had one;
- condition ``RollbackInProgress`` (KubeRay v1.7): ``True``/``RollbackInProgress``
  while a pending cluster is dropped because the spec went back to the active
  cluster's (``True``/``DesiredClusterSpecChanged``, KubeRay's, while an incremental
  upgrade's traffic and capacity return to the active cluster); ``False``/
  ``RollbackComplete`` when that ends (a ``False`` one is kept; KubeRay removes it);
- ``targetCapacity``, ``trafficRoutedPercent`` and ``lastTrafficMigratedTime`` of each
  cluster (``NewClusterWithIncrementalUpgrade`` only): Serve's ``target_capacity``, the
  cluster's weight in the HTTPRoute and when the weights last changed, as the objects
  say (:class:`ClusterReport`): they change only when a step is taken, so an idle
  service is never written (KubeRay v1.7.0 rewrites its status every 2 s there);
- conditions ``Suspending`` / ``Suspended`` (KubeRay v1.7.0's ``handleSuspend``),
  by :attr:`Observed.suspend`: ``requested`` (the first pass to see ``spec.suspend``;
  the commit point: from then on the suspend runs to completion whatever the spec
  says) sets ``Suspending=True``/``SuspendRequested`` and ``Ready``,
  ``UpgradeInProgress`` and ``RollbackInProgress`` ``False``/``SuspendInProgress``,
  and drops the cluster statuses and the endpoint count; ``deleting`` sets
  ``Suspending``'s reason to ``SuspendInProgress``; ``suspended`` sets
  ``Suspending=False`` and ``Suspended=True``, and ``Ready``, ``UpgradeInProgress``
  and ``RollbackInProgress`` ``False``, all ``SuspendComplete``. On resume
  (:func:`resumed`) ``Suspended`` turns ``False``/``RayServiceResumed`` and ``Ready``
  and ``UpgradeInProgress`` start ``Initializing`` afresh (a new initializing
  timeout). Nothing else changes these two conditions;
- ``serviceStatus``: ``Running`` iff ``Ready`` is ``True``, else empty (deprecated).

``lastUpdateTime`` is stamped by the writer on real writes only. A condition's
``lastTransitionTime`` moves only when its ``status`` does.

>>> svc = {"metadata": {"generation": 1}, "spec": {}, "status": {}}
>>> new = compute(svc, Observed(active=None, pending=ClusterReport(name="demo-abcde")),
...               now="2026-12-01T00:00:00Z")
>>> [(c["type"], c["status"], c["reason"]) for c in new["conditions"]]
[('Ready', 'False', 'Initializing'), ('UpgradeInProgress', 'False', 'Initializing')]
>>> new["pendingServiceStatus"]["rayClusterName"], new["serviceStatus"]
('demo-abcde', '')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from api.v1 import rayservice as rayservice_
from controllers.ray import serve
from runtime import conditions

__all__ = [
    "MAX_APPLICATIONS",
    "MAX_DEPLOYMENTS",
    "MAX_MESSAGE",
    "ROLLBACK_IN_PROGRESS",
    "SUSPENDED",
    "SUSPENDING",
    "VOLATILE",
    "ClusterReport",
    "Observed",
    "Problem",
    "after_put",
    "applications",
    "compute",
    "initializing_since",
    "resumed",
]

Obj = dict[str, Any]

READY = rayservice_.ConditionType.READY.value
UPGRADE_IN_PROGRESS = rayservice_.ConditionType.UPGRADE_IN_PROGRESS.value
ROLLBACK_IN_PROGRESS = "RollbackInProgress"
SUSPENDING = "Suspending"
SUSPENDED = "Suspended"
SUSPEND_REQUESTED = "SuspendRequested"
SUSPEND_IN_PROGRESS = "SuspendInProgress"
SUSPEND_COMPLETE = "SuspendComplete"
RESUMED = "RayServiceResumed"
_REASONS = rayservice_.ConditionReason

VOLATILE = frozenset({*rayservice_.RayServiceStatus.VOLATILE_FIELDS, "rayClusterStatus"})
"""Fields the status writer ignores when comparing: the write stamp, and the embedded
RayCluster statuses (informational; refreshed when a write happens anyway)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClusterReport:
    """One of the RayService's clusters as this pass saw it."""

    name: str
    cluster_status: Mapping[str, Any] | None = None
    """The RayCluster's own status (copied as ``rayClusterStatus``)."""
    applications: Mapping[str, Any] | None = None
    """``applicationStatuses`` read from its dashboard in this pass (see
    :func:`applications`), or ``None`` when not read: the previous status's are kept."""
    target_capacity: int | None = None
    """``targetCapacity`` (incremental upgrades): Serve's, or what this pass sets."""
    traffic_routed_percent: int | None = None
    """``trafficRoutedPercent`` (incremental upgrades): its weight in the HTTPRoute."""
    last_traffic_migrated_time: str | None = None
    """``lastTrafficMigratedTime`` (incremental upgrades): when the weights last changed."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Problem:
    """Why the RayService cannot be reconciled (``Ready=False`` with this reason)."""

    reason: str
    message: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Observed:
    """What one reconcile pass found; every field states its default."""

    active: ClusterReport | None = None
    """The cluster the RayService's services select. Default none."""
    pending: ClusterReport | None = None
    """The cluster being prepared (the first one, or an upgrade's). Default none."""
    num_serve_endpoints: int = 0
    """Distinct ready pods behind ``<svc>-serve-svc``. Default 0."""
    rolling_back: bool = False
    """A pending cluster is being dropped because the spec returned to the active one's."""
    rollback_message: str | None = None
    """With :attr:`rolling_back` in an incremental upgrade: KubeRay v1.7.0's message (the
    reason is then ``DesiredClusterSpecChanged``)."""
    suspend: Literal["requested", "deleting", "suspended"] | None = None
    """Where a suspend stands (see the module docstring); the rest is then ignored.
    Default: not suspending."""
    problem: Problem | None = None
    """A spec that cannot be reconciled (reason ``ValidationFailed``). Default none."""
    timed_out: str | None = None
    """The message of an initializing timeout that passed in this pass, if one did."""
    serve_error: str | None = None
    """Serve refused the config (its answer): shown in ``Ready``'s message while it is
    ``False``."""


def initializing_since(service: Mapping[str, Any]) -> str | None:
    """When the RayService's current ``Initializing`` began (``Ready``'s
    ``lastTransitionTime``), if it is initializing for its current generation."""
    ready = conditions.of(service, READY)
    generation = int((service.get("metadata") or {}).get("generation") or 0)
    if ready is None or ready.get("reason") != _REASONS.INITIALIZING:
        return None
    if int(ready.get("observedGeneration") or 0) != generation:
        return None
    since: str | None = ready.get("lastTransitionTime")
    return since


MAX_APPLICATIONS = 100
"""Applications copied into the status (by name; the rest are left out)."""
MAX_DEPLOYMENTS = 100
"""Deployments of one application copied into the status."""
MAX_MESSAGE = 1000
"""Characters of a Serve message copied into the status (longer ones lose their middle)."""


def applications(details: serve.ServeDetails) -> dict[str, Any]:
    """``applicationStatuses`` from a dashboard answer (KubeRay's shape), bounded: at
    most :data:`MAX_APPLICATIONS` applications of :data:`MAX_DEPLOYMENTS` deployments,
    messages cut to :data:`MAX_MESSAGE` characters, so what a head answers can never
    outgrow the object (etcd's limit) or the operator's memory.

    >>> apps = {f"a{i}": {"status": "RUNNING", "message": "x" * 5000} for i in range(300)}
    >>> found = applications(serve.ServeDetails.model_validate({"applications": apps}))
    >>> len(found), len(found["a0"]["message"])
    (100, 1000)
    """
    result: dict[str, Any] = {}
    for name, app in sorted(details.applications.items())[:MAX_APPLICATIONS]:
        deployments = {
            dep_name: _without_empty({"status": dep.status, "message": _cut(dep.message)})
            for dep_name, dep in sorted(app.deployments.items())[:MAX_DEPLOYMENTS]
        }
        entry = _without_empty({"status": app.status, "message": _cut(app.message)})
        if deployments:
            entry["serveDeploymentStatuses"] = deployments
        result[name] = entry
    return result


def _cut(message: str) -> str:
    """At most :data:`MAX_MESSAGE` characters: the start and the end (a traceback's last
    line is the exception) around a marker."""
    if len(message) <= MAX_MESSAGE:
        return message
    marker = "\n... (cut) ...\n"
    head = (MAX_MESSAGE - len(marker)) // 4
    tail = MAX_MESSAGE - len(marker) - head
    return message[:head] + marker + message[-tail:]


def _without_empty(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v not in (None, "")}


def _cluster_status(report: ClusterReport | None, previous: Mapping[str, Any] | None) -> Obj | None:
    if report is None:
        return None
    entry: Obj = {"rayClusterName": report.name}
    if report.cluster_status:
        entry["rayClusterStatus"] = dict(report.cluster_status)
    apps = report.applications
    if apps is None and previous and previous.get("rayClusterName") == report.name:
        apps = previous.get("applicationStatuses")
    if apps:
        entry["applicationStatuses"] = dict(apps)
    for key, value in (
        ("targetCapacity", report.target_capacity),
        ("trafficRoutedPercent", report.traffic_routed_percent),
        ("lastTrafficMigratedTime", report.last_traffic_migrated_time),
    ):
        if value is not None:
            entry[key] = value
    return entry


def _initializing(serve_error: str | None) -> str:
    base = "RayService is initializing"
    return f"{base}; {serve_error}" if serve_error else base


class _Table:
    """The conditions of the status being computed, by type, over the previous ones
    (:func:`runtime.conditions.make`'s ``lastTransitionTime`` rule)."""

    def __init__(self, old: Mapping[str, Any], generation: int, now: str) -> None:
        self.previous = {c.get("type"): c for c in old.get("conditions") or ()}
        self.made: dict[str, Obj] = {}
        self.generation = generation
        self.now = now

    def set(self, type_: str, status: str, reason: str, message: str) -> None:
        self.made[type_] = conditions.make(
            type_, status, reason, message, generation=self.generation, now=self.now,
            previous=self.previous.get(type_),
        )  # fmt: skip

    def keep(self, *types: str) -> None:
        """The previous conditions of ``types`` (all when none is named) as they were,
        where none was made."""
        for type_, cond in self.previous.items():
            if type_ is not None and type_ not in self.made and (not types or type_ in types):
                self.made[type_] = dict(cond)

    def listed(self) -> list[Obj]:
        return [self.made[t] for t in _ORDER if t in self.made]


def compute(service: Mapping[str, Any], observed: Observed, *, now: str) -> Obj:
    """The RayService's new ``status`` (see the module docstring)."""
    old: Mapping[str, Any] = service.get("status") or {}
    generation = int((service.get("metadata") or {}).get("generation") or 0)
    table = _Table(old, generation, now)
    new: Obj = {"observedGeneration": generation}
    if observed.suspend is not None:
        _suspending(observed.suspend, table.set)
        table.keep()
        new["numServeEndpoints"] = 0
        new["conditions"] = table.listed()
        new["serviceStatus"] = ""
        return new
    if observed.problem is not None and observed.active is None and observed.pending is None:
        # A problem stops the pass before the clusters are looked at: what the status said
        # about them still holds (only Ready reports the problem, as KubeRay's does).
        kept = {k: v for k, v in old.items()
                if k not in ("conditions", "lastUpdateTime", "observedGeneration")}  # fmt: skip
        new.update(kept)
        new["numServeEndpoints"] = observed.num_serve_endpoints
        table.set(READY, "False", observed.problem.reason, observed.problem.message)
        table.keep()
        new["conditions"] = table.listed()
        new["serviceStatus"] = ""
        return new
    active = _cluster_status(observed.active, old.get("activeServiceStatus"))
    pending = _cluster_status(observed.pending, old.get("pendingServiceStatus"))
    if active is not None:
        new["activeServiceStatus"] = active
    if pending is not None:
        new["pendingServiceStatus"] = pending
    new["numServeEndpoints"] = observed.num_serve_endpoints
    _ready(table, observed)
    _upgrade(table, active is not None, pending is not None)
    _rollback(table, observed)
    table.keep(ROLLBACK_IN_PROGRESS, SUSPENDING, SUSPENDED)
    new["conditions"] = table.listed()
    ready = table.made.get(READY)
    new["serviceStatus"] = "Running" if ready is not None and ready["status"] == "True" else ""
    return new


def _ready(table: _Table, observed: Observed) -> None:
    """``Ready``: the serve endpoints, a problem, a timeout, or initializing."""
    old_ready = table.previous.get(READY)
    was_ready = old_ready is not None and (
        old_ready.get("status") == "True"
        or old_ready.get("reason") == _REASONS.ZERO_SERVE_ENDPOINTS
    )  # once ready, zero endpoints stay ZeroServeEndpoints: it is not initializing again
    if observed.problem is not None:
        table.set(READY, "False", observed.problem.reason, observed.problem.message)
    elif observed.num_serve_endpoints > 0:
        table.set(READY, "True", _REASONS.NON_ZERO_SERVE_ENDPOINTS,
                  "Number of serve endpoints is greater than 0")  # fmt: skip
    elif was_ready:
        table.set(
            READY, "False", _REASONS.ZERO_SERVE_ENDPOINTS, "Number of serve endpoints dropped to 0"
        )
    elif observed.timed_out is not None:
        table.set(READY, "False", _REASONS.INITIALIZING_TIMEOUT, observed.timed_out)
    elif (
        old_ready is not None
        and old_ready.get("status") == "False"
        and old_ready.get("reason") == _REASONS.INITIALIZING_TIMEOUT
    ):
        table.made[READY] = dict(old_ready)  # terminal
    elif (
        old_ready is not None
        and old_ready.get("reason") == _REASONS.INITIALIZING
        and int(old_ready.get("observedGeneration") or 0) == table.generation
    ):
        table.made[READY] = dict(old_ready)  # initializing: keep its start time
        table.made[READY]["message"] = _initializing(observed.serve_error)
    else:
        table.set(READY, "False", _REASONS.INITIALIZING, _initializing(observed.serve_error))
        if old_ready is not None and old_ready.get("status") == "False":
            table.made[READY]["lastTransitionTime"] = table.now  # a new generation: afresh
    ready_now = table.made[READY]
    if ready_now["reason"] == _REASONS.ZERO_SERVE_ENDPOINTS and observed.serve_error:
        ready_now["message"] = f"Number of serve endpoints dropped to 0; {observed.serve_error}"


def _upgrade(table: _Table, active: bool, pending: bool) -> None:
    """``UpgradeInProgress``: both clusters, the active one only, or none."""
    old_upgrade = table.previous.get(UPGRADE_IN_PROGRESS)
    if active and pending:
        table.set(UPGRADE_IN_PROGRESS, "True", _REASONS.BOTH_ACTIVE_PENDING_CLUSTERS_EXIST,
                  "Both active and pending Ray clusters exist")  # fmt: skip
    elif active:
        table.set(UPGRADE_IN_PROGRESS, "False", _REASONS.NO_PENDING_CLUSTER,
                  "Active Ray cluster exists and no pending Ray cluster")  # fmt: skip
    elif old_upgrade is None or old_upgrade.get("reason") in (
        _REASONS.INITIALIZING,
        _REASONS.INITIALIZING_TIMEOUT,
    ):
        table.set(UPGRADE_IN_PROGRESS, "False", _REASONS.INITIALIZING, "RayService is initializing")
    else:
        none = "No active Ray cluster exists, and the RayService is not initializing"
        table.set(UPGRADE_IN_PROGRESS, "Unknown", _REASONS.NO_ACTIVE_CLUSTER, none)


def _rollback(table: _Table, observed: Observed) -> None:
    """``RollbackInProgress``: present once it has happened."""
    old_rollback = table.previous.get(ROLLBACK_IN_PROGRESS)
    if observed.rolling_back and observed.rollback_message is not None:
        table.set(
            ROLLBACK_IN_PROGRESS, "True", "DesiredClusterSpecChanged", observed.rollback_message
        )
    elif observed.rolling_back:
        back = "The spec returned to the active cluster's; dropping the pending cluster"
        table.set(ROLLBACK_IN_PROGRESS, "True", ROLLBACK_IN_PROGRESS, back)
    elif old_rollback is not None and old_rollback.get("status") == "True":
        table.set(ROLLBACK_IN_PROGRESS, "False", "RollbackComplete", "No rollback in progress")


def after_put(
    service: Mapping[str, Any],
    observed: Observed,
    *,
    target: str | None,
    applications: Obj | None,
    now: str,
    refusal: str | None = None,
) -> Obj:
    """The status once act made the PUT to ``target``: its ``applications`` as Serve
    reports them after it (KubeRay v1.7.0 reads them after submitting too: else the write
    reports the new generation with the replaced config's applications, and the next pass
    writes again to correct them); when Serve refused the config (``refusal``, its answer
    for ``Ready``'s message), ``applications`` is None: the status keeps what it said."""

    def reread(cluster: ClusterReport | None) -> ClusterReport | None:
        if cluster is None or cluster.name != target:
            return cluster
        return dataclasses.replace(cluster, applications=applications)

    changed = dataclasses.replace(
        observed, active=reread(observed.active), pending=reread(observed.pending)
    )
    if refusal is not None:
        changed = dataclasses.replace(changed, serve_error=refusal)
    return compute(service, changed, now=now)


_ORDER = (READY, UPGRADE_IN_PROGRESS, ROLLBACK_IN_PROGRESS, SUSPENDING, SUSPENDED)
"""The order of the conditions in a status."""


def _suspending(phase: str, set_: Any) -> None:
    """The conditions of a suspend at ``phase`` (module docstring), through ``set_``."""
    if phase == "requested":
        set_(SUSPENDING, "True", SUSPEND_REQUESTED,
             "Spec.Suspend is true; will delete all Kubernetes resources owned by this "
             "RayService.")  # fmt: skip
        set_(READY, "False", SUSPEND_IN_PROGRESS, "RayService is suspending.")
        set_(UPGRADE_IN_PROGRESS, "False", SUSPEND_IN_PROGRESS, "No upgrade in progress.")
        set_(ROLLBACK_IN_PROGRESS, "False", SUSPEND_IN_PROGRESS, "No rollback in progress.")
    elif phase == "deleting":
        waiting = "Waiting for all Kubernetes resources owned by this RayService to be deleted."
        set_(SUSPENDING, "True", SUSPEND_IN_PROGRESS, waiting)
    else:
        done = "All owned resources have been deleted."
        set_(SUSPENDING, "False", SUSPEND_COMPLETE, done)
        set_(SUSPENDED, "True", SUSPEND_COMPLETE, done)
        set_(READY, "False", SUSPEND_COMPLETE, "RayService is suspended.")
        set_(UPGRADE_IN_PROGRESS, "False", SUSPEND_COMPLETE, "No upgrade in progress.")
        set_(ROLLBACK_IN_PROGRESS, "False", SUSPEND_COMPLETE, "No rollback in progress.")


def resumed(service: Mapping[str, Any], *, now: str) -> Obj:
    """The status a suspended RayService resumes from (``spec.suspend`` turned false):
    ``Suspended=False``/``RayServiceResumed``, ``Ready`` and ``UpgradeInProgress``
    ``False``/``Initializing`` since ``now`` (KubeRay v1.7.0's ``handleSuspend``).

    >>> svc = {"metadata": {"generation": 3}, "status": {"conditions": [
    ...     {"type": "Ready", "status": "False", "reason": "SuspendComplete"},
    ...     {"type": "Suspended", "status": "True", "reason": "SuspendComplete"}]}}
    >>> [c["reason"] for c in resumed(svc, now="t")["conditions"]]
    ['Initializing', 'Initializing', 'RayServiceResumed']
    """
    old: Mapping[str, Any] = service.get("status") or {}
    generation = int((service.get("metadata") or {}).get("generation") or 0)
    made = {c.get("type"): dict(c) for c in old.get("conditions") or ()}
    again = "RayService is initializing after resuming from suspend."
    for type_, status, reason, message in (
        (SUSPENDED, "False", RESUMED, "Spec.Suspend is false; RayService has resumed."),
        (READY, "False", _REASONS.INITIALIZING, again),
        (UPGRADE_IN_PROGRESS, "False", _REASONS.INITIALIZING, again),
    ):
        made[type_] = {
            "type": type_, "status": status, "reason": str(reason), "message": message,
            "lastTransitionTime": now, "observedGeneration": generation,
        }  # fmt: skip
    return {
        **old,
        "observedGeneration": generation,
        "conditions": [made[t] for t in _ORDER if t in made],
    }
