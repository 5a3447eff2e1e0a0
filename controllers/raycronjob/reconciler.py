"""The RayCronJob reconciler: one pass creates the RayJob of the tick that is due (at most
one) and records the tick.

1. reads the RayCronJob from the cache; gone: nothing (its RayJobs go by owner
   references);
2. invalid (:func:`controllers.rayjob.validation.cron_problems`): a Warning
   ``InvalidRayCronJobSpec`` with the problems, once per spec (a change of the spec is
   what wakes the pass again: no polling, and no Event on every watch event, KubeRay's
   repeat); suspended: a Normal ``SuspendedRayCronJob`` once per spec, nothing created;
3. otherwise :func:`controllers.raycronjob.plan.plan`: the RayJob created (an existing one
   of that name is the tick's already: fine), a Warning ``MissedSchedules`` when due
   ticks were skipped, ``status.lastScheduleTime`` written (diff-gated), and a look again
   at the next tick.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
from collections.abc import Callable
from typing import Any

import structlog

import api.v1 as v1
from controllers.raycronjob import plan as plan_
from controllers.rayjob import validation
from runtime import events, objects, reconcile
from runtime import status as runtime_status
from runtime.cache import cache as cache_
from runtime.client import errors

__all__ = ["Reconciler"]


class Reconciler:
    """See the module docstring."""

    def __init__(
        self,
        client: Any,
        cache: cache_.Cache,
        recorder: events.Recorder,
        *,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self.client = client
        self.cache = cache
        self.recorder = recorder
        self.clock = clock
        self.writer = runtime_status.StatusWriter(client, volatile=(), latest=cache)
        self.log = structlog.get_logger("controllers.raycronjob")
        self._told: dict[tuple[str, str], tuple[int, str]] = {}
        """The generation (and reason) last reported per RayCronJob: an Event once per spec."""

    def _once(self, obj: Any, kind: str, reason: str, message: str, action: str) -> None:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        told = (int(obj["metadata"].get("generation") or 0), reason)
        if self._told.get(key) == told:
            return
        self._told[key] = told
        self.recorder.event(obj, kind, reason, message, action=action)  # type: ignore[arg-type]

    async def reconcile(self, request: reconcile.Request) -> reconcile.Result:
        try:
            obj = await self.cache.get(v1.RAYCRONJOBS, request.namespace, request.name)
        except errors.NotFound:
            self._told.pop((request.namespace, request.name), None)
            return reconcile.Result()
        if obj["metadata"].get("deletionTimestamp"):
            return reconcile.Result()
        try:
            cron = v1.RayCronJob.model_validate(obj)
            problems = validation.cron_problems(cron)
        except ValueError as exc:
            problems = [str(exc)]
        if problems:
            message = "; ".join(problems)
            self._once(obj, "Warning", "InvalidRayCronJobSpec", message, "Validate")
            return reconcile.Result()
        if (obj.get("spec") or {}).get("suspend"):
            self._once(
                obj, "Normal", "SuspendedRayCronJob", "The RayCronJob is suspended", "Suspend"
            )
            return reconcile.Result()
        self._told.pop((request.namespace, request.name), None)
        decided = plan_.plan(obj, now=self.clock())
        if decided.create is not None:
            made = objects.set_controller_reference(obj, copy.deepcopy(decided.create))
            with contextlib.suppress(errors.AlreadyExists):  # made by an earlier pass
                await self.client.create(made, namespace=request.namespace)
        if decided.missed:
            self.recorder.event(
                obj,
                "Warning",
                "MissedSchedules",
                f"{decided.missed} scheduled times were missed; only the latest, "
                f"{decided.last_schedule_time}, got a RayJob",
                action="Create",
            )
        if decided.last_schedule_time is not None:
            status = dict(obj.get("status") or {})
            status["lastScheduleTime"] = decided.last_schedule_time
            result = await self.writer.update(obj, status)
            if result.outcome is runtime_status.Outcome.STALE:
                raise RuntimeError("the RayCronJob changed while its status was computed; again")
        if decided.requeue_after is not None:
            return reconcile.Result(requeue_after=decided.requeue_after)
        return reconcile.Result()
