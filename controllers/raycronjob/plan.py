"""Plan: from a RayCronJob and the clock to the RayJob of the tick that is due, and when
to look again. Pure: no client, no cache, no event loop.

- **The tick**: the first time of ``spec.schedule`` (in ``spec.timeZone``, else the
  operator's zone) after ``status.lastScheduleTime``, else after the RayCronJob's
  creation. Not yet due: nothing, a look again at it.
- **The RayJob**: ``<cron>-<the tick in Unix minutes>`` (so a tick's RayJob has one name:
  a second create is ``AlreadyExists``, and a restarted operator never makes two), in
  the RayCronJob's namespace, label ``ray.io/cronjob-name``, annotation
  ``ray.io/cronjob-scheduled-timestamp`` (the tick, UTC RFC 3339), spec a copy of
  ``spec.jobTemplate``, controlled by the RayCronJob. ``lastScheduleTime`` becomes the
  tick (not the time the RayJob was made).
- **Missed ticks** (the operator was down, or the RayCronJob suspended): only the latest
  tick that is due gets its RayJob; the ones before it are skipped, and a Warning
  ``MissedSchedules`` says how many. KubeRay v1.7.0 creates a RayJob for every missed
  tick, back to back (a minutely schedule after a day down: 1,440 RayJobs, each with its
  cluster); a Kubernetes CronJob runs only the latest missed one, and so do we.
- ``spec.suspend``: nothing is created (``lastScheduleTime`` stays, so the ticks missed
  meanwhile are skipped when it resumes, as above).

>>> import datetime
>>> cron = {"metadata": {"name": "nightly", "namespace": "ns", "uid": "u",
...         "creationTimestamp": "2026-01-01T00:00:00Z"},
...         "spec": {"schedule": "0 3 * * *", "timeZone": "UTC",
...                  "jobTemplate": {"entrypoint": "python etl.py"}}}
>>> p = plan(cron, now=datetime.datetime(2026, 1, 1, 3, 0, 5, tzinfo=datetime.UTC))
>>> p.create["metadata"]["name"], p.last_schedule_time
('nightly-29453940', '2026-01-01T03:00:00Z')
>>> round(p.requeue_after)
86395
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

from controllers.rayjob import cron as cron_
from controllers.rayjob import names
from runtime import clock

__all__ = ["MAX_MISSED", "CronPlan", "plan"]

Obj = dict[str, Any]
MAX_MISSED = 100_000
"""Ticks counted at most when looking for the latest one due (a schedule of every second
after years of downtime is not walked tick by tick for ever)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class CronPlan:
    """One pass's decision."""

    create: Obj | None = None
    """The RayJob to create (its controller reference is set when it is made)."""
    last_schedule_time: str | None = None
    """The new ``status.lastScheduleTime``; None: unchanged."""
    missed: int = 0
    """Due ticks skipped for the latest one."""
    requeue_after: float | None = None
    """Seconds until the next tick."""


def _zone(cron: Mapping[str, Any]) -> datetime.tzinfo | None:
    name = (cron.get("spec") or {}).get("timeZone")
    return cron_.load_zone(name) if name else None


def plan(cron: Mapping[str, Any], *, now: datetime.datetime) -> CronPlan:
    """The pass's decision for a valid RayCronJob (see the module docstring)."""
    spec = cron.get("spec") or {}
    if spec.get("suspend"):
        return CronPlan()
    zone = _zone(cron) or now.astimezone().tzinfo
    schedule = cron_.parse(str(spec["schedule"]), zone)
    status = cron.get("status") or {}
    base = clock.parse_rfc3339(status.get("lastScheduleTime")) or clock.parse_rfc3339(
        cron["metadata"].get("creationTimestamp")
    )
    base = (base or now).astimezone(zone)
    tick = schedule.next(base)
    if tick is None:
        return CronPlan()  # no tick within five years (robfig's horizon): nothing to wait for
    if tick > now:
        return CronPlan(requeue_after=_until(tick, now))
    missed = 0
    following = schedule.next(tick)
    while following is not None and following <= now and missed < MAX_MISSED:
        tick, missed = following, missed + 1
        following = schedule.next(tick)
    return CronPlan(
        create=rayjob_for(cron, tick),
        last_schedule_time=clock.rfc3339(tick),
        missed=missed,
        requeue_after=None if following is None else _until(following, now),
    )


def _until(tick: datetime.datetime, now: datetime.datetime) -> float:
    return max((tick - now).total_seconds(), 0.05)


def rayjob_for(cron: Mapping[str, Any], tick: datetime.datetime) -> Obj:
    """The RayJob of ``tick``."""
    meta = cron["metadata"]
    minutes = int(tick.timestamp()) // 60
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {
            "name": f"{meta['name']}-{minutes}",
            "namespace": meta["namespace"],
            "labels": {names.CRONJOB_NAME_LABEL: meta["name"]},
            "annotations": {names.CRONJOB_SCHEDULED_TIMESTAMP_ANNOTATION: clock.rfc3339(tick)},
        },
        "spec": copy.deepcopy(dict((cron.get("spec") or {}).get("jobTemplate") or {})),
    }
