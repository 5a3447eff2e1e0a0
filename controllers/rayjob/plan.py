"""Plan: one pure function from a :class:`~controllers.rayjob.snapshot.Snapshot` and the
clock to every write of one step of a RayJob: KubeRay v1.7.0's state machine
(``status.jobDeploymentStatus``), one step per plan.

No client, no cache, no event loop: an import-linter contract in ``pyproject.toml`` holds
this module and everything it imports to that. The objects it plans are built by the pure
builders (:mod:`~controllers.rayjob.cluster`, :mod:`~controllers.rayjob.submitter`); the
random name suffixes are drawn by the caller and passed in (``suffixes``).

:func:`plan` returns a :class:`Plan`: the writes in order (creates, deletes, an update, a
submission to Ray, the RayJob's own deletion), then the status, the Events, and when to
look again. :func:`finalize` plans a RayJob being deleted (:class:`Finalize`).

**One step per plan, and the step's ids first.** ``New`` -> ``Initializing`` writes only
the status - the submission id, the cluster's name and the attempt's start - and the
next step, planned on the RayJob as written, creates what they name; so an operator
killed between two writes never creates a second cluster or submits a job twice
(KubeRay's rule, kept).
A step that needs no event from outside asks to be looked at again at once
(:data:`IMMEDIATE`) instead of KubeRay's 3 s; the reconciler then plans the next step in
the same pass, on the RayJob its writes left (``CHAINED_STEPS``).

**The states** (KubeRay's transition table; what differs is listed under "Deliberately
not as KubeRay" below):

- ``New`` (``""``): the finalizer; ``Initializing`` with ``jobId`` (``spec.jobId`` or
  ``<name>-<5 random>``; none in ``InteractiveMode``), ``rayClusterName``
  (``clusterSelector``'s ``ray.io/cluster`` or ``<name>-<5 random>``), ``startTime``.
- ``Initializing``: ``spec.suspend`` -> ``Suspending``; a deadline passed -> ``Failed``
  (``DeadlineExceeded``, ``PreRunningDeadlineExceeded``); the cluster created when
  missing (with ``clusterSelector``: a Warning ``RayClusterNotFound`` and a look again);
  its status copied while it is not ``ready`` (when its ``state`` or ``reason`` changes:
  see below); once ready and its head Service found,
  ``dashboardURL`` is set and the job goes to ``Waiting`` (``InteractiveMode``), or to
  ``Running`` (with the submitter Job created, ``K8sJobMode``).
- ``Waiting``: the pre-running deadline; ``spec.jobId`` set -> ``Running``.
- ``Running``: suspend; the active deadline; Ray's terminal status older than the grace
  period with the submitter still running -> ``Complete`` / ``Failed``
  (``JobDeploymentStatusTransitionGracePeriodExceeded``); the dashboard failing for longer
  than the status-check timeout -> ``Failed`` (``JobStatusCheckTimeoutExceeded``); the
  cluster re-created if deleted and the RayJob's head Service made to point at it; the
  submitter failed -> ``Failed`` (``AppFailed`` if Ray said ``FAILED``, else
  ``SubmissionFailed``); the submitter finished 30 s ago with Ray's job not terminal ->
  ``Failed``; then Ray's answer: unknown job -> submitted (``HTTPMode``), or ``Failed``
  when the submitter finished; a terminal status (with the submitter finished, where there
  is one) -> ``Complete`` (``SUCCEEDED``, ``STOPPED``) or ``Failed`` (``AppFailed``).
- A pass ending ``Failed`` counts ``status.failed``; ``Failed`` with attempts left
  (``failed <= backoffLimit``, not ``DeadlineExceeded`` nor
  ``JobStatusCheckTimeoutExceeded``) becomes ``Retrying``. ``Complete`` with
  ``SUCCEEDED`` counts ``status.succeeded``.
- ``Retrying`` / ``Suspending``: the cluster (not a selected one) and the submitter Job
  deleted, waited for, then the attempt's fields cleared -> ``New`` / ``Suspended``.
- ``Suspended``: ``spec.suspend`` false -> ``New``.
- ``Complete`` / ``Failed``: the deletion policy (``shutdownAfterJobFinishes`` with
  ``ttlSecondsAfterFinished``, the legacy ``onSuccess`` / ``onFailure``, or the
  ``deletionRules``, all timed from ``endTime``; nothing for a selected cluster).

**Deliberately not as KubeRay** (each in docs/operator/kuberay.md):

- ``ValidationFailed`` is not a dead end polled every 3 s: no look again until the spec
  changes, and a spec that became valid starts the job from ``New`` (attempt counters
  kept), once the cluster and submitter Job of the attempt it interrupted are deleted
  (a Normal ``Restarted`` Event). A finished job (``Complete`` / ``Failed``) edited into
  an invalid spec keeps its status (KubeRay overwrites it with ``ValidationFailed``); the
  Warning is recorded and its deletion policy waits until the spec is valid again.
- No 3 s polling: ``Initializing`` waits for the cluster's own changes (it is watched);
  ``Running`` asks the dashboard every :attr:`Options.poll_interval` while the job is
  young, then at a tenth of its age, at most :attr:`Options.poll_max` (with a submitter,
  whose end wakes the pass, :attr:`Options.poll_max_submitter`); terminal states wait for
  their next deletion rule only. A pass woken between two polls (the cluster's status,
  the submitter's pod) does not ask Ray (:func:`poll_at`; the snapshot's ``next_poll``)
  and writes nothing new, so Ray's passing states are written at most once per poll.
- ``rayClusterStatus`` is not a live mirror: while the cluster comes up it is copied when
  the cluster's ``state`` or ``reason`` changes (not on each condition or replica count:
  KubeRay writes the RayJob for each), then at the transition to ``Running`` and at each
  poll.
- ``HTTPMode``: Ray answering that the submission id exists already is a submission that
  succeeded (a pass killed after its POST), not a failure.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import json
from collections.abc import Mapping
from typing import Any, Literal

import yaml

import api.v1 as v1
from api.v1 import rayjob as rayjob_
from controllers.ray import jobs
from controllers.rayjob import cluster as cluster_
from controllers.rayjob import names, submitter
from controllers.rayjob import snapshot as snapshot_
from runtime import clock
from runtime.client import resources

__all__ = [
    "IMMEDIATE",
    "JOBS",
    "SERVICES",
    "Create",
    "Delete",
    "DeleteSelf",
    "Event",
    "Finalize",
    "Options",
    "Plan",
    "Submit",
    "Update",
    "finalize",
    "has_submitter",
    "plan",
    "poll_at",
]

Obj = dict[str, Any]
State = rayjob_.JobDeploymentStatus
Reason = rayjob_.JobFailedReason
Mode = rayjob_.SubmissionMode

JOBS = resources.default_registry.for_kind("batch/v1", "Job")
SERVICES = resources.default_registry.for_kind("v1", "Service")
IMMEDIATE = 0.05
"""Seconds before the next pass when a step needs nothing from outside."""
SUBMITTER_FINISHED_TIMEOUT = 30.0
"""Seconds a finished submitter waits for Ray's job to end (KubeRay's constant)."""
REQUEUE_DELETION_SLACK = 2.0
"""Seconds added to a deletion rule's due time (KubeRay's)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    """How the RayJob reconciler decides. Every field states its default."""

    poll_interval: float = 3.0
    """Seconds between dashboard polls of a young running job. Default 3 s (KubeRay's)."""
    poll_max: float = 10.0
    """Longest interval between polls of a running job without a submitter (``HTTPMode``,
    ``InteractiveMode``). Default 10 s."""
    poll_max_submitter: float = 30.0
    """Longest interval with a submitter (its end wakes the pass). Default 30 s."""
    transition_grace_period: float = 300.0
    """Seconds Ray's job may be terminal while the submitter still runs (KubeRay's
    ``RAYJOB_DEPLOYMENT_STATUS_TRANSITION_GRACE_PERIOD_SECONDS``). Default 300."""
    status_check_timeout: float = 300.0
    """Seconds the dashboard may fail before the job fails (KubeRay's
    ``RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS``). Default 300."""
    delete_rayjob_after_finish: bool = False
    """``shutdownAfterJobFinishes`` deletes the RayJob, not its cluster (KubeRay's
    ``DELETE_RAYJOB_CR_AFTER_JOB_FINISHES``). Default off."""
    login_shell: bool = False
    """The submitter's command runs in a login shell (``ENABLE_LOGIN_SHELL``). Default off."""
    deletion_policy: bool = True
    """The ``RayJobDeletionPolicy`` gate (Beta in v1.7.0, on). Default on."""
    sidecar_restart: bool = False
    """The ``SidecarSubmitterRestart`` gate (Alpha, off). Default off."""
    cluster_domain: str = "cluster.local"
    """The DNS domain of ``status.dashboardURL``. Default ``cluster.local``."""


# -- what a plan holds --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """An Event on the RayJob."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str
    action: str


@dataclasses.dataclass(frozen=True, slots=True)
class Create:
    """Create ``obj`` with the RayJob as its controller; ``what`` names it in the Events
    (``Created<what>`` / ``FailedToCreate<what>``). One that exists meanwhile is left
    alone."""

    resource: resources.Resource
    obj: Obj
    what: Literal["RayCluster", "RayJobSubmitter", "Service"]


@dataclasses.dataclass(frozen=True, slots=True)
class Delete:
    """Delete ``namespace/name`` (background propagation); one gone already is fine."""

    resource: resources.Resource
    namespace: str
    name: str
    what: Literal["RayCluster", "RayJobSubmitter"]


@dataclasses.dataclass(frozen=True, slots=True)
class Update:
    """Replace ``obj`` (conditional on its resourceVersion): the RayCluster's workers
    suspended (``DeleteWorkers``) or the RayJob's head Service repointed."""

    resource: resources.Resource
    obj: Obj
    what: Literal["RayCluster", "Service"]


@dataclasses.dataclass(frozen=True, slots=True)
class Submit:
    """POST the job to the dashboard (``HTTPMode``). On a refusal the status is
    ``failed_status`` instead of the plan's (the check-failure time recorded)."""

    request: jobs.JobSubmitRequest
    failed_status: Obj


@dataclasses.dataclass(frozen=True, slots=True)
class DeleteSelf:
    """Delete the RayJob itself (its children go by owner references)."""


Write = Create | Delete | Update | Submit | DeleteSelf


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan:
    """Every write of one pass, in order: ``add_finalizer``, ``writes``, the status,
    ``events`` (recorded as they are reached: a write that fails records its own Warning
    and ends the pass with its error)."""

    add_finalizer: bool = False
    writes: tuple[Write, ...] = ()
    status: Obj | None = None
    """The whole new status; None: leave it."""
    events: tuple[Event, ...] = ()
    requeue_after: float | None = None
    """Look again after that long; None: only when something watched changes."""
    state: str = ""
    """The ``jobDeploymentStatus`` the pass ends in (metrics)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Finalize:
    """A RayJob being deleted: stop its Ray job (when it may still run), then drop the
    finalizer."""

    stop_job_id: str | None
    """The submission id to stop; None: nothing to stop."""


# -- the state machine --------------------------------------------------------------------


def plan(
    s: snapshot_.Snapshot,
    *,
    now: datetime.datetime,
    options: Options,
    suffixes: tuple[str, str] = ("aaaaa", "bbbbb"),
) -> Plan:
    """The pass's writes (see the module docstring). ``suffixes``: two fresh random
    name suffixes (the cluster's, the submission id's), used only on ``New``."""
    old: Mapping[str, Any] = s.obj.get("status") or {}
    state = str(old.get("jobDeploymentStatus") or "")
    if s.invalid is not None or s.job is None:
        reason, message = s.invalid or ("InvalidRayJobSpec", "the RayJob cannot be read")
        return _invalid(s, old, state, reason, message)
    job = s.job
    step = _Step(s=s, job=job, now=now, options=options, status=copy.deepcopy(dict(old)))
    if state == State.VALIDATION_FAILED:  # fixed: what the invalid attempt made goes first
        step.tear_down(State.NEW)
        if step.state == State.NEW:
            step.events.append(
                Event("Normal", "Restarted", "Starting again: the spec is valid again", "Update")
            )
        return step.result(state)
    if state == State.NEW:
        return step.new(suffixes)
    if state == State.INITIALIZING:
        step.initializing()
    elif state == State.WAITING:
        step.waiting()
    elif state == State.RUNNING:
        step.running()
    elif state in (State.RETRYING, State.SUSPENDING):
        step.tear_down(State.NEW if state == State.RETRYING else State.SUSPENDED)
    elif state == State.SUSPENDED:
        if not job.spec.suspend:
            return step.restart(None)
        return Plan(state=state)
    elif state in (State.COMPLETE, State.FAILED):
        return step.finished()
    else:  # a state no version of KubeRay writes: start again rather than poll for ever
        return step.restart(f"unknown jobDeploymentStatus {state!r}")
    return step.result(state)


def poll_at(
    s: snapshot_.Snapshot,
    *,
    last_poll: datetime.datetime | None,
    now: datetime.datetime,
    options: Options,
) -> datetime.datetime | None:
    """When a ``Running`` pass over ``s`` (read without the dashboard) should next ask
    the dashboard about the job; None: now. ``last_poll``: when it was last asked about
    this attempt's job (None: not since the operator started).

    Now when never asked, when the submitter has finished (its end is what the pass
    waits for) or once the poll interval since ``last_poll`` is over; the interval grows
    with the job's age (:attr:`Options.poll_interval` while young, a tenth of its age,
    at most :attr:`Options.poll_max` or, with a submitter, whose end wakes the pass,
    :attr:`Options.poll_max_submitter`). Other events (the cluster's status, the
    submitter's progress) do not make a poll due: they wake the pass, which then asks
    Ray nothing and writes nothing new.
    """
    if last_poll is None or s.job is None:
        return None
    if _submitter_finished(s, s.job, now, options)[0] is not None:
        return None
    status = s.obj.get("status") or {}
    due = last_poll + datetime.timedelta(seconds=_poll_interval(s.job, status, now, options))
    return due if due > now else None


def has_submitter(job: v1.RayJob) -> bool:
    """Whether ``job``'s mode has a submitter whose end moves it on (``K8sJobMode``'s Job,
    ``SidecarMode``'s container)."""
    return _mode(job) in (Mode.K8S_JOB, Mode.SIDECAR)


def _mode(job: v1.RayJob) -> str:
    return job.spec.submission_mode or Mode.K8S_JOB.value


def _submitter_finished(
    s: snapshot_.Snapshot, job: v1.RayJob, now: datetime.datetime, options: Options
) -> tuple[datetime.datetime | None, bool]:
    """When the submitter finished (None: it runs, or there is none) and whether it
    failed."""
    mode = _mode(job)
    if mode == Mode.K8S_JOB:
        return _job_finished(s.submitter, now)
    if mode == Mode.SIDECAR:
        return _sidecar_finished(s.head_pods, now, restart=options.sidecar_restart)
    return None, False


def _poll_interval(
    job: v1.RayJob, status: Mapping[str, Any], now: datetime.datetime, options: Options
) -> float:
    started = clock.parse_rfc3339(status.get("startTime")) or now
    age = (now - started).total_seconds()
    ceiling = options.poll_max_submitter if has_submitter(job) else options.poll_max
    return min(ceiling, max(options.poll_interval, age / 10))


def finalize(s: snapshot_.Snapshot) -> Finalize:
    """A RayJob being deleted: its Ray job is stopped unless Ray reported it terminal."""
    old: Mapping[str, Any] = s.obj.get("status") or {}
    job_id = old.get("jobId")
    status = str(old.get("jobStatus") or "")
    terminal = status in (v1.rayjob.JobStatus.STOPPED, "SUCCEEDED", "FAILED")
    return Finalize(stop_job_id=str(job_id) if job_id and not terminal else None)


def _invalid(
    s: snapshot_.Snapshot, old: Mapping[str, Any], state: str, reason: str, message: str
) -> Plan:
    meta = s.obj.get("metadata") or {}
    note = f"{meta.get('namespace')}/{meta.get('name')}: {message}"
    event = Event("Warning", reason, note, "Validate")
    if state in (State.COMPLETE, State.FAILED):
        return Plan(events=(event,), state=state)  # a finished job keeps its status
    status = dict(copy.deepcopy(old))
    status.update(
        jobDeploymentStatus=State.VALIDATION_FAILED.value,
        reason=Reason.VALIDATION_FAILED.value,
        message=message,
    )
    return Plan(status=status, events=(event,), state=State.VALIDATION_FAILED.value)


@dataclasses.dataclass(kw_only=True)
class _Step:
    """One pass's working state: the status being computed and the writes so far."""

    s: snapshot_.Snapshot
    job: v1.RayJob
    now: datetime.datetime
    options: Options
    status: Obj
    writes: list[Write] = dataclasses.field(default_factory=list)
    events: list[Event] = dataclasses.field(default_factory=list)
    requeue: float | None = None

    # -- helpers --------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return str(self.s.obj["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.s.obj["metadata"]["namespace"])

    @property
    def mode(self) -> str:
        return _mode(self.job)

    @property
    def selector(self) -> str | None:
        selected = (self.job.spec.cluster_selector or {}).get(names.CLUSTER_SELECTOR_KEY)
        return selected or None

    def look_again(self, seconds: float | None) -> None:
        if seconds is None:
            return
        seconds = max(seconds, IMMEDIATE)
        self.requeue = seconds if self.requeue is None else min(self.requeue, seconds)

    def go(self, state: State, reason: Reason | None = None, message: str | None = None) -> None:
        self.status["jobDeploymentStatus"] = state.value
        if reason is not None:
            self.status["reason"] = reason.value
        if message is not None:
            self.status["message"] = message

    @property
    def state(self) -> str:
        return str(self.status.get("jobDeploymentStatus") or "")

    def started(self) -> datetime.datetime:
        return clock.parse_rfc3339(self.status.get("startTime")) or self.now

    def _deadline(self, seconds: int | None) -> datetime.datetime | None:
        if seconds is None or seconds <= 0:
            return None
        return self.started() + datetime.timedelta(seconds=seconds)

    def deadlines(self, *, active: bool, pre_running: bool) -> bool:
        """A deadline passed: the job ``Failed``; else a look at the nearest one."""
        checks: list[tuple[Reason, int | None, str]] = []
        if active:
            checks.append(
                (Reason.DEADLINE_EXCEEDED, self.job.spec.active_deadline_seconds, "active")
            )
        if pre_running:
            checks.append(
                (
                    Reason.PRE_RUNNING_DEADLINE_EXCEEDED,
                    self.job.spec.pre_running_deadline_seconds,
                    "preRunning",
                )
            )
        for reason, seconds, field in checks:
            due = self._deadline(seconds)
            if due is None:
                continue
            if self.now >= due:
                self.go(
                    State.FAILED,
                    reason,
                    f"The RayJob has passed its {field}DeadlineSeconds ({seconds} s) "
                    f"since {self.status.get('startTime')}",
                )
                return True
            self.look_again((due - self.now).total_seconds())
        return False

    def cluster_model(self) -> v1.RayCluster | None:
        if self.s.cluster is None:
            return None
        try:
            return v1.RayCluster.model_validate(self.s.cluster)
        except ValueError:
            return None

    def copy_cluster_status(self, *, on_state_change: bool = False) -> None:
        """``rayClusterStatus`` from the cluster; ``on_state_change``: only when its
        ``state`` or ``reason`` differs from the copy's (a cluster still coming up)."""
        if self.s.cluster is None or not self.s.cluster.get("status"):
            return
        found = self.s.cluster["status"]
        if on_state_change:
            copied = self.status.get("rayClusterStatus") or {}
            if all(found.get(key) == copied.get(key) for key in ("state", "reason")):
                return
        self.status["rayClusterStatus"] = copy.deepcopy(dict(found))

    def ensure_cluster(self) -> bool:
        """The cluster exists (created now if it did not, unless selected); whether it did."""
        if self.s.cluster is not None and not self.s.cluster["metadata"].get("deletionTimestamp"):
            return True
        name = str(self.status.get("rayClusterName") or "")
        if self.selector is not None:
            self.events.append(
                Event(
                    "Warning",
                    "RayClusterNotFound",
                    f"RayCluster {self.namespace}/{name} set by the clusterSelector is not found",
                    "Validate",
                )
            )
            self.look_again(self.options.poll_interval)
            return False
        if self.s.cluster is None and self.job.spec.ray_cluster_spec is not None:
            obj = cluster_.ray_cluster(
                self.job,
                name,
                sidecar_restart=self.options.sidecar_restart,
                login_shell=self.options.login_shell,
            )
            self.writes.append(Create(v1.RAYCLUSTERS, obj, "RayCluster"))
        return False

    def cluster_ready(self) -> bool:
        cluster = self.s.cluster
        return cluster is not None and (cluster.get("status") or {}).get("state") == "ready"

    def has_submitter(self) -> bool:
        return has_submitter(self.job)

    def submitter_finished(self) -> tuple[datetime.datetime | None, bool]:
        return _submitter_finished(self.s, self.job, self.now, self.options)

    # -- the states -----------------------------------------------------------------------

    def new(self, suffixes: tuple[str, str]) -> Plan:
        cluster_suffix, job_suffix = suffixes
        if self.mode != Mode.INTERACTIVE:
            self.status["jobId"] = self.job.spec.job_id or names.job_id(self.job, job_suffix)
        self.status["rayClusterName"] = self.selector or names.cluster_name(
            self.job, cluster_suffix
        )
        self.status["jobStatus"] = ""
        self.status["startTime"] = clock.rfc3339(self.now)
        self.status.setdefault("succeeded", 0)
        self.status.setdefault("failed", 0)
        self.go(State.INITIALIZING)
        return Plan(
            add_finalizer=True,
            status=self.status,
            requeue_after=IMMEDIATE,
            state=State.INITIALIZING.value,
        )

    def restart(self, why: str | None) -> Plan:
        """Back to ``New`` with the attempt's fields cleared (``Suspended`` resumed, a
        state no version of KubeRay writes)."""
        _clear_attempt(self.status)
        self.go(State.NEW)
        if why is not None:
            self.events.append(Event("Normal", "Restarted", f"Starting again: {why}", "Update"))
        return Plan(
            status=self.status,
            events=tuple(self.events),
            requeue_after=IMMEDIATE,
            state=State.NEW.value,
        )

    def initializing(self) -> None:
        if self.job.spec.suspend:
            self.go(State.SUSPENDING)
            self.look_again(IMMEDIATE)
            return
        if self.deadlines(active=True, pre_running=True):
            return
        if not self.ensure_cluster():
            return
        if not self.cluster_ready() or self.s.head_service is None:
            self.copy_cluster_status(on_state_change=True)
            if self.selector is not None:  # not ours, not watched
                self.look_again(self.options.poll_interval)
            return
        cluster = self.cluster_model()
        if cluster is None:
            return
        self.copy_cluster_status()
        self.status["dashboardURL"] = cluster_.dashboard_url(
            cluster, self.s.head_service, self.options.cluster_domain
        )
        if self.mode == Mode.INTERACTIVE:
            self.go(State.WAITING)
            return
        if self.mode == Mode.K8S_JOB and self.s.submitter is None:
            shaped = self._submitter_job(cluster)
            self.writes.append(Create(JOBS, shaped, "RayJobSubmitter"))
        self.go(State.RUNNING)
        self.look_again(self.options.poll_interval)

    def _submitter_job(self, cluster: v1.RayCluster) -> Obj:
        job = v1.RayJob.model_validate({**self.s.obj, "status": self.status})
        return submitter.job(job, cluster, login_shell=self.options.login_shell)

    def waiting(self) -> None:
        if self.deadlines(active=False, pre_running=True):
            return
        if self.job.spec.job_id:
            self.status["jobId"] = self.job.spec.job_id
            self.go(State.RUNNING)
            self.look_again(IMMEDIATE)

    def running(self) -> None:
        if self.job.spec.suspend:
            self.go(State.SUSPENDING)
            self.look_again(IMMEDIATE)
            return
        if self.deadlines(active=True, pre_running=False):
            return
        if self._grace_period_over() or self._status_check_timed_out():
            return
        if self.ensure_cluster():
            self._job_service()
        finished, failed = self.submitter_finished()
        if failed:
            reason = (
                Reason.APP_FAILED
                if self.status.get("jobStatus") == "FAILED"
                else Reason.SUBMISSION_FAILED
            )
            self.go(State.FAILED, reason, _submitter_message(self.mode, self.s))
        if finished is not None:
            since = (self.now - finished).total_seconds()
            view = self.s.dashboard
            ray_terminal = view is not None and view.info is not None and _terminal(view.info)
            if since >= SUBMITTER_FINISHED_TIMEOUT and not ray_terminal:
                self.status["jobStatus"] = "FAILED"
                self.go(
                    State.FAILED,
                    Reason.TRANSITION_GRACE_PERIOD_EXCEEDED,
                    "The submitter finished "
                    f"{int(SUBMITTER_FINISHED_TIMEOUT)} s ago but Ray's job did not end",
                )
                return
            if not ray_terminal:
                self.look_again(SUBMITTER_FINISHED_TIMEOUT - since)
        if self.state == State.FAILED:
            return
        self._ray_answer(finished)
        if self.state != State.RUNNING:
            return
        if self.s.dashboard is None and self.s.next_poll is not None:
            self.look_again((self.s.next_poll - self.now).total_seconds())
        else:
            self.look_again(_poll_interval(self.job, self.status, self.now, self.options))

    def _grace_period_over(self) -> bool:
        job_status = str(self.status.get("jobStatus") or "")
        if job_status not in ("STOPPED", "SUCCEEDED", "FAILED"):
            return False
        ended = clock.parse_rfc3339((self.status.get("rayJobInfo") or {}).get("endTime"))
        if ended is None:
            return False
        due = ended + datetime.timedelta(seconds=self.options.transition_grace_period)
        if self.now < due:
            self.look_again((due - self.now).total_seconds())
            return False
        if job_status == "FAILED":
            self.go(
                State.FAILED,
                Reason.TRANSITION_GRACE_PERIOD_EXCEEDED,
                "Ray's job ended but the submitter did not finish within "
                f"{int(self.options.transition_grace_period)} s",
            )
        else:
            self.go(State.COMPLETE)
        return True

    def _status_check_timed_out(self) -> bool:
        since = clock.parse_rfc3339(self.status.get("jobStatusCheckFailureStartTime"))
        if since is None:
            return False
        due = since + datetime.timedelta(seconds=self.options.status_check_timeout)
        if self.now < due:
            return False
        self.go(
            State.FAILED,
            Reason.STATUS_CHECK_TIMEOUT_EXCEEDED,
            f"The dashboard could not be asked about the job for "
            f"{int(self.options.status_check_timeout)} s",
        )
        return True

    def _job_service(self) -> None:
        """The RayJob's ``<rayjob>-head-svc``, pointing at the current cluster."""
        if self.selector is not None:
            return
        cluster = self.cluster_model()
        if cluster is None:
            return
        wanted = cluster_.head_service(self.job, cluster)
        current = self.s.job_service
        if current is None:
            self.writes.append(Create(SERVICES, wanted, "Service"))
            return
        selected = ((current.get("spec") or {}).get("selector") or {}).get("ray.io/cluster")
        if selected == cluster.metadata.get("name"):
            return
        updated = copy.deepcopy(dict(current))
        spec = copy.deepcopy(wanted["spec"])
        if (current.get("spec") or {}).get("clusterIP"):
            spec["clusterIP"] = current["spec"]["clusterIP"]
        updated["spec"] = spec
        self.writes.append(Update(SERVICES, updated, "Service"))

    def _ray_answer(self, finished: datetime.datetime | None) -> None:
        view = self.s.dashboard
        if view is None:
            return
        if view.error is not None:
            self.status.setdefault("jobStatusCheckFailureStartTime", clock.rfc3339(self.now))
            return
        if view.info is None:  # Ray does not know the job
            if self.mode == Mode.HTTP:
                failed = copy.deepcopy(self.status)
                failed.setdefault("jobStatusCheckFailureStartTime", clock.rfc3339(self.now))
                self.writes.append(Submit(_request(self.job, self.status), failed))
                self.status.pop("jobStatusCheckFailureStartTime", None)
            elif finished is not None:
                self.go(
                    State.FAILED,
                    Reason.APP_FAILED,
                    "The submitter finished but Ray does not know the job",
                )
            return
        info = view.info
        self.status.pop("jobStatusCheckFailureStartTime", None)
        self.status["jobStatus"] = info.status
        self.status["message"] = info.message or ""
        self.status["reason"] = ""
        times = {
            key: clock.rfc3339(datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC))
            for key, ms in (("startTime", info.start_time), ("endTime", info.end_time))
            if ms
        }
        if times:
            self.status["rayJobInfo"] = times
        self.copy_cluster_status()
        if not _terminal(info) or (self.has_submitter() and finished is None):
            return
        if info.status == "FAILED":
            self.go(State.FAILED, Reason.APP_FAILED)
        else:
            self.go(State.COMPLETE)
            self.status["reason"] = ""

    def tear_down(self, then: State) -> None:
        """The cluster (not a selected one) and the submitter Job deleted and waited for;
        then the attempt's fields cleared and ``then``."""
        waiting = False
        if self.selector is None and self.s.cluster is not None:
            waiting = True
            if not self.s.cluster["metadata"].get("deletionTimestamp"):
                name = self.s.cluster["metadata"]["name"]
                self.writes.append(Delete(v1.RAYCLUSTERS, self.namespace, name, "RayCluster"))
        if self.mode == Mode.K8S_JOB and self.s.submitter is not None:
            waiting = True
            if not self.s.submitter["metadata"].get("deletionTimestamp"):
                self.writes.append(
                    Delete(
                        JOBS, self.namespace, names.submitter_job_name(self.job), "RayJobSubmitter"
                    )
                )
        if waiting:
            return  # their deletions are watched
        _clear_attempt(self.status)
        self.go(then)
        if then == State.NEW:
            self.look_again(IMMEDIATE)

    def finished(self) -> Plan:
        """``Complete`` / ``Failed``: the deletion policy, timed from ``endTime``."""
        state = self.state
        if self.selector is not None:
            return Plan(state=state)
        ended = clock.parse_rfc3339(self.status.get("endTime")) or self.now
        strategy = self.job.spec.deletion_strategy
        if self.options.deletion_policy and strategy is not None:
            if strategy.deletion_rules is not None:
                self._rules(strategy.deletion_rules, ended)
            else:
                self._legacy(strategy, ended)
        elif self.job.spec.shutdown_after_job_finishes:
            due = ended + datetime.timedelta(seconds=self.job.spec.ttl_seconds_after_finished or 0)
            if self.now < due:
                self.look_again((due - self.now).total_seconds() + REQUEUE_DELETION_SLACK)
            elif self.options.delete_rayjob_after_finish:
                self.writes.append(DeleteSelf())
            else:
                self._delete_cluster()
        return Plan(
            writes=tuple(self.writes),
            events=tuple(self.events),
            requeue_after=self.requeue,
            state=state,
        )

    def _delete_cluster(self) -> None:
        cluster = self.s.cluster
        if cluster is not None and not cluster["metadata"].get("deletionTimestamp"):
            self.writes.append(
                Delete(v1.RAYCLUSTERS, self.namespace, cluster["metadata"]["name"], "RayCluster")
            )

    def _delete_workers(self) -> None:
        cluster = self.s.cluster
        if cluster is None or cluster["metadata"].get("deletionTimestamp"):
            return
        groups = (cluster.get("spec") or {}).get("workerGroupSpecs") or []
        if all(g.get("suspend") for g in groups):
            return
        updated = copy.deepcopy(dict(cluster))
        for group in updated["spec"].get("workerGroupSpecs") or []:
            group["suspend"] = True
        self.writes.append(Update(v1.RAYCLUSTERS, updated, "RayCluster"))

    def _act(self, policy: str) -> None:
        if policy == rayjob_.DeletionPolicyType.DELETE_SELF:
            self.writes.append(DeleteSelf())
        elif policy == rayjob_.DeletionPolicyType.DELETE_CLUSTER:
            self._delete_cluster()
        elif policy == rayjob_.DeletionPolicyType.DELETE_WORKERS:
            self._delete_workers()

    def _legacy(self, strategy: rayjob_.DeletionStrategy, ended: datetime.datetime) -> None:
        job_status = self.status.get("jobStatus")
        chosen = (
            strategy.on_success
            if job_status == "SUCCEEDED"
            else strategy.on_failure
            if job_status == "FAILED"
            else None
        )
        if chosen is None or chosen.policy in (None, rayjob_.DeletionPolicyType.DELETE_NONE):
            return
        due = ended + datetime.timedelta(seconds=self.job.spec.ttl_seconds_after_finished or 0)
        if self.now < due:
            self.look_again((due - self.now).total_seconds() + REQUEUE_DELETION_SLACK)
            return
        self._act(chosen.policy)

    def _done(self, policy: str) -> bool:
        cluster = self.s.cluster
        gone = cluster is None or bool(cluster["metadata"].get("deletionTimestamp"))
        if policy == rayjob_.DeletionPolicyType.DELETE_CLUSTER:
            return gone
        if policy == rayjob_.DeletionPolicyType.DELETE_WORKERS:
            groups = ((cluster or {}).get("spec") or {}).get("workerGroupSpecs") or []
            return gone or all(g.get("suspend") for g in groups)
        return policy == rayjob_.DeletionPolicyType.DELETE_NONE

    def _rules(self, rules: list[rayjob_.DeletionRule], ended: datetime.datetime) -> None:
        impact = {"DeleteSelf": 3, "DeleteCluster": 2, "DeleteWorkers": 1, "DeleteNone": 0}
        due_now: list[rayjob_.DeletionRule] = []
        for rule in rules:
            condition = rule.condition
            matches = (
                condition.job_status is not None
                and condition.job_status == self.status.get("jobStatus")
            ) or (
                condition.job_deployment_status is not None
                and condition.job_deployment_status == self.state
            )
            if not matches:
                continue
            due = ended + datetime.timedelta(seconds=condition.ttl_seconds)
            if self.now < due:
                self.look_again((due - self.now).total_seconds() + REQUEUE_DELETION_SLACK)
            elif not self._done(rule.policy):
                due_now.append(rule)
        if due_now:
            chosen = max(due_now, key=lambda r: (impact[r.policy], -due_now.index(r)))
            self._act(chosen.policy)

    # -- the end of a pass ----------------------------------------------------------------

    def result(self, before: str) -> Plan:
        """Counters, ``Retrying``, ``endTime`` (KubeRay's checkBackoffLimit, then the write)."""
        if self.state in (State.FAILED, State.COMPLETE) and before not in (
            State.FAILED,
            State.COMPLETE,
        ):
            if self.state == State.FAILED:
                self.status["failed"] = int(self.status.get("failed") or 0) + 1
                limit = self.job.spec.backoff_limit
                no_retry = (Reason.DEADLINE_EXCEEDED, Reason.STATUS_CHECK_TIMEOUT_EXCEEDED)
                if (
                    limit is not None
                    and self.status["failed"] <= limit
                    and self.status.get("reason") not in no_retry
                ):
                    self.go(State.RETRYING)
                    self.look_again(IMMEDIATE)
            elif self.status.get("jobStatus") == "SUCCEEDED":
                self.status["succeeded"] = int(self.status.get("succeeded") or 0) + 1
            self.status.setdefault("succeeded", 0)
            self.status.setdefault("failed", 0)
            if self.state in (State.FAILED, State.COMPLETE):
                self.status["endTime"] = clock.rfc3339(self.now)
                self.look_again(IMMEDIATE)  # the deletion policy's first look
        if self.state != before and self.requeue is None:
            self.look_again(IMMEDIATE)
        return Plan(
            writes=tuple(self.writes),
            status=self.status,
            events=tuple(self.events),
            requeue_after=self.requeue,
            state=self.state,
        )


# -- pure helpers --------------------------------------------------------------------------

_ATTEMPT = (
    "rayClusterStatus",
    "rayClusterName",
    "dashboardURL",
    "jobId",
    "message",
    "reason",
    "rayJobInfo",
    "jobStatusCheckFailureStartTime",
)


def _clear_attempt(status: Obj) -> None:
    for key in _ATTEMPT:
        status.pop(key, None)
    status["jobStatus"] = ""


def _terminal(info: jobs.JobInfo) -> bool:
    return info.status in ("STOPPED", "SUCCEEDED", "FAILED")


def _condition(obj: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any] | None:
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            found: Mapping[str, Any] = condition
            return found
    return None


def _job_finished(
    job: Mapping[str, Any] | None, now: datetime.datetime
) -> tuple[datetime.datetime | None, bool]:
    """When a batch Job finished (its ``Complete`` or ``Failed`` condition) and whether it
    failed."""
    for kind, failed in (("Failed", True), ("Complete", False)):
        condition = _condition(job, kind)
        if condition is not None:
            at = clock.parse_rfc3339(condition.get("lastTransitionTime"))
            completion = clock.parse_rfc3339(
                ((job or {}).get("status") or {}).get("completionTime")
            )
            return (at or completion or now), failed
    return None, False


def _sidecar_finished(
    head_pods: tuple[Mapping[str, Any], ...], now: datetime.datetime, *, restart: bool
) -> tuple[datetime.datetime | None, bool]:
    """When the head's submitter container terminated and whether it failed (a missing
    head pod is a failure)."""
    if len(head_pods) != 1:
        return (now, True) if not head_pods else (None, False)
    for container in (head_pods[0].get("status") or {}).get("containerStatuses") or []:
        if container.get("name") != names.SUBMITTER_CONTAINER:
            continue
        terminated = (container.get("state") or {}).get("terminated")
        if restart:
            exhausted = (
                container.get("lastState", {}).get("terminated") is not None
                and not (terminated and terminated.get("exitCode") == 0)
                and int(container.get("restartCount") or 0) >= 2
            )
            if exhausted:
                at = clock.parse_rfc3339(container["lastState"]["terminated"].get("finishedAt"))
                return at or now, True
            if terminated and terminated.get("exitCode") == 0:
                return clock.parse_rfc3339(terminated.get("finishedAt")) or now, False
            return None, False
        if terminated:
            at = clock.parse_rfc3339(terminated.get("finishedAt"))
            return at or now, terminated.get("exitCode") != 0
    return None, False


def _submitter_message(mode: str, s: snapshot_.Snapshot) -> str:
    if mode == Mode.SIDECAR:
        if not s.head_pods:
            return "The head pod was not found"
        return "The submitter container failed"
    condition = _condition(s.submitter, "Failed") or {}
    return (
        f"The submitter Job failed. Reason: {condition.get('reason', '')}. "
        f"Message: {condition.get('message', '')}"
    )


def _request(job: v1.RayJob, status: Mapping[str, Any]) -> jobs.JobSubmitRequest:
    """The dashboard's job submission request (``HTTPMode``; KubeRay's ConvertRayJobToReq:
    the runtime environment's YAML and the resources' JSON decoded)."""
    spec = job.spec
    runtime_env = yaml.safe_load(spec.runtime_env_yaml) if spec.runtime_env_yaml else None
    resources = json.loads(spec.entrypoint_resources) if spec.entrypoint_resources else None
    return jobs.JobSubmitRequest(
        entrypoint=(spec.entrypoint or "").strip(),
        submission_id=str(status.get("jobId") or "") or None,
        metadata=dict(spec.metadata) if spec.metadata else None,
        runtime_env=runtime_env,
        entrypoint_num_cpus=spec.entrypoint_num_cpus,
        entrypoint_num_gpus=spec.entrypoint_num_gpus,
        entrypoint_resources=resources,
    )
