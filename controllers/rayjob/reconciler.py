"""The RayJob reconciler: one pass moves a RayJob through KubeRay v1.7.0's state machine,
a step at a time (:mod:`controllers.rayjob.plan` says which, and what differs from
KubeRay); steps that need nothing from outside follow in the same pass.

One :meth:`Reconciler.reconcile`:

1. reads the RayJob from the cache; gone: nothing (its metrics series are dropped);
2. skips one whose ``spec.managedBy`` names another controller (MultiKueue's): nothing is
   touched, not even its finalizer, as KubeRay;
3. being deleted: stops its Ray job unless Ray reported it terminal (a failure is only
   logged), then removes the finalizer ``ray.io/rayjob-finalizer``; its cluster, submitter
   Job and Service go by owner references;
4. otherwise, up to :data:`CHAINED_STEPS` steps: observe
   (:mod:`~controllers.rayjob.observe`) -> plan (pure) -> act
   (:mod:`~controllers.rayjob.act`): the finalizer, the writes, the status through the
   diff-gated :class:`~runtime.status.StatusWriter` (no write when nothing changed), the
   Events, and when to look again. A ``Running`` job's dashboard is asked only when a
   poll is due (:func:`controllers.rayjob.plan.poll_at`); the reconciler remembers when
   it last asked (:attr:`Reconciler.polls`), so that the submitter's progress or the
   cluster's status waking a pass costs neither a request to Ray nor a status write.

With a :class:`MetricsObserver`, each pass reports the state it ended in and a RayJob
found gone (KubeRay's ``kuberay_job_execution_duration_seconds``).
"""

from __future__ import annotations

import dataclasses
import datetime
import random
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import structlog

import api.v1 as v1
from controllers.ray import dashboard, tokens
from controllers.rayjob import act, names, observe
from controllers.rayjob import plan as plan_
from runtime import events, reconcile
from runtime import status as runtime_status
from runtime.cache import cache as cache_
from runtime.client import errors

__all__ = ["CHAINED_STEPS", "MetricsObserver", "Options", "Reconciler"]

CHAINED_STEPS = 3
"""Steps one pass takes at most: a step whose plan looks again at once
(:data:`controllers.rayjob.plan.IMMEDIATE`) is followed in the same pass, on the RayJob
as its own writes left it (e.g. ``New`` -> ``Initializing`` and the cluster's creation;
``Complete`` and its deletion policy), rather than through the work queue."""


class MetricsObserver(Protocol):
    """What the reconciler tells the metrics (:mod:`controllers.metrics`)."""

    def job_passed(self, before: Mapping[str, Any], state: str, now: datetime.datetime) -> object:
        """A pass over ``before`` (the RayJob as read) ended in ``state``."""
        ...

    def job_forgotten(self, namespace: str, name: str) -> object:
        """The RayJob ``namespace/name`` is gone."""
        ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    """How the reconciler reaches Ray and decides. Every field states its default."""

    address_mode: dashboard.Mode = "service"
    """How dashboards are addressed (:func:`controllers.ray.dashboard.address`). Default
    ``service``."""
    plan: plan_.Options = dataclasses.field(default_factory=plan_.Options)
    """The state machine's settings (:class:`controllers.rayjob.plan.Options`)."""


class Reconciler:
    """See the module docstring. ``rng``: draws the random name suffixes (tests seed it)."""

    def __init__(
        self,
        client: Any,
        cache: cache_.Cache,
        recorder: events.Recorder,
        dashboards: dashboard.DashboardFactory,
        options: Options | None = None,
        *,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
        metrics: MetricsObserver | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.client = client
        self.cache = cache
        self.recorder = recorder
        self.options = options or Options()
        self.clock = clock
        self.metrics = metrics
        self.rng = rng or random.SystemRandom()
        self.writer = runtime_status.StatusWriter(
            client, volatile=v1.rayjob.RayJobStatus.VOLATILE_FIELDS, latest=cache
        )  # no stamps: a RayJob's status has no lastUpdateTime
        self.executor = act.Executor(client, recorder, self.writer)
        self.reach = observe.Reach(
            dashboards=dashboards,
            tokens=tokens.Tokens(client),
            mode=self.options.address_mode,
            cluster_domain=self.options.plan.cluster_domain,
        )
        self.log = structlog.get_logger("controllers.rayjob")
        self.polls: dict[tuple[str, str], tuple[str | None, str | None, datetime.datetime]] = {}
        """``(namespace, name)`` -> ``(uid, jobId, when)`` of the last dashboard poll of a
        ``Running`` RayJob (memory only: after a restart the first pass asks)."""

    async def reconcile(self, request: reconcile.Request) -> reconcile.Result:
        try:
            obj = await self.cache.get(v1.RAYJOBS, request.namespace, request.name)
        except errors.NotFound:
            self.polls.pop((request.namespace, request.name), None)
            if self.metrics is not None:
                self.metrics.job_forgotten(request.namespace, request.name)
            return reconcile.Result()
        managed_by = (obj.get("spec") or {}).get("managedBy")
        if managed_by not in (None, "", v1.rayjob.MANAGED_BY_KUBERAY):
            return reconcile.Result()
        if obj["metadata"].get("deletionTimestamp"):
            if not _has_finalizer(obj):
                return reconcile.Result()
            seen = await observe.deleting(obj, cache=self.cache, reach=self.reach)
            return await self.executor.finalize(
                obj, plan_.finalize(seen.snapshot), client=seen.client
            )
        key = (request.namespace, request.name)
        for _ in range(CHAINED_STEPS):
            now = self.clock()
            seen = await observe.observe(
                obj,
                cache=self.cache,
                reach=self.reach,
                options=self.options.plan,
                now=now,
                last_poll=self._last_poll(key, obj),
            )
            suffixes = (names.random_suffix(self.rng), names.random_suffix(self.rng))
            decided = plan_.plan(
                seen.snapshot, now=now, options=self.options.plan, suffixes=suffixes
            )
            acted = await self.executor.act(obj, decided, client=seen.client)
            self._remember_poll(key, obj, seen, decided, now)
            if self.metrics is not None:
                self.metrics.job_passed(obj, decided.state, now)
            if acted.obj is None or acted.result.requeue_after != plan_.IMMEDIATE:
                break
            obj = acted.obj  # the next step needs nothing from outside: take it now
        return acted.result

    def _last_poll(self, key: tuple[str, str], obj: Mapping[str, Any]) -> datetime.datetime | None:
        """When the dashboard was last asked about ``obj``'s current job (None: never)."""
        polled = self.polls.get(key)
        job_id = (obj.get("status") or {}).get("jobId")
        if polled is None or polled[:2] != (obj["metadata"].get("uid"), job_id):
            return None
        return polled[2]

    def _remember_poll(
        self,
        key: tuple[str, str],
        obj: Mapping[str, Any],
        seen: observe.Seen,
        decided: plan_.Plan,
        now: datetime.datetime,
    ) -> None:
        """A pass that asked the dashboard, or that started a submitter (nothing to ask
        before it has had a poll interval to submit), counts as a poll; a job no longer
        ``Running`` is forgotten."""
        if decided.state != v1.rayjob.JobDeploymentStatus.RUNNING:
            self.polls.pop(key, None)
            return
        before = (obj.get("status") or {}).get("jobDeploymentStatus")
        job = seen.snapshot.job
        started_submitter = before != decided.state and job is not None and plan_.has_submitter(job)
        if seen.snapshot.dashboard is not None or started_submitter:
            job_id = (decided.status or obj.get("status") or {}).get("jobId")
            self.polls[key] = (obj["metadata"].get("uid"), job_id, now)


def _has_finalizer(obj: Mapping[str, Any]) -> bool:
    return names.FINALIZER in (obj["metadata"].get("finalizers") or [])
