"""The RayCronJob plan: the tick that is due, its RayJob, the latest missed tick only, and
when to look again (:func:`controllers.raycronjob.plan.plan`, fixed clocks)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from controllers.raycronjob import plan as plan_

UTC = datetime.UTC


def cron(schedule: str = "*/5 * * * *", *, last: str | None = None, **spec: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCronJob",
        "metadata": {"name": "etl", "namespace": "ns", "uid": "u",
                     "creationTimestamp": "2026-03-01T10:00:00Z"},
        "spec": {"schedule": schedule, "timeZone": "UTC",
                 "jobTemplate": {"entrypoint": "python etl.py"}, **spec},
    }  # fmt: skip
    if last is not None:
        obj["status"] = {"lastScheduleTime": last}
    return obj


def at(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_before_the_first_tick_nothing_is_made_and_the_tick_is_awaited() -> None:
    p = plan_.plan(cron(), now=at("2026-03-01T10:03:00"))
    assert p.create is None
    assert p.last_schedule_time is None
    assert p.requeue_after == pytest.approx(120)


def test_a_due_tick_makes_its_rayjob() -> None:
    p = plan_.plan(cron(), now=at("2026-03-01T10:05:01"))
    assert p.create is not None
    meta = p.create["metadata"]
    tick = at("2026-03-01T10:05:00")
    assert meta["name"] == f"etl-{int(tick.timestamp()) // 60}"
    assert meta["labels"] == {"ray.io/cronjob-name": "etl"}
    assert meta["annotations"] == {"ray.io/cronjob-scheduled-timestamp": "2026-03-01T10:05:00Z"}
    assert p.create["spec"] == {"entrypoint": "python etl.py"}
    assert p.last_schedule_time == "2026-03-01T10:05:00Z"
    assert p.missed == 0
    assert p.requeue_after == pytest.approx(299)


def test_the_next_tick_counts_from_the_last_one_handled() -> None:
    p = plan_.plan(cron(last="2026-03-01T10:05:00Z"), now=at("2026-03-01T10:06:00"))
    assert p.create is None
    assert p.requeue_after == pytest.approx(240)


def test_after_downtime_only_the_latest_missed_tick_gets_a_rayjob() -> None:
    p = plan_.plan(cron(last="2026-03-01T10:05:00Z"), now=at("2026-03-01T11:02:00"))
    assert p.last_schedule_time == "2026-03-01T11:00:00Z"
    assert p.missed == 10  # 10:10 ... 10:55
    assert p.create is not None
    assert p.create["metadata"]["name"].startswith("etl-")


def test_suspended_makes_nothing() -> None:
    assert plan_.plan(cron(suspend=True), now=at("2026-03-02T00:00:00")) == plan_.CronPlan()


def test_the_time_zone_decides_the_tick() -> None:
    obj = cron("0 9 * * *", timeZone="Asia/Tokyo")  # 09:00 JST = 00:00 UTC
    p = plan_.plan(obj, now=at("2026-03-02T00:00:30"))
    assert p.last_schedule_time == "2026-03-02T00:00:00Z"


def test_a_schedule_that_never_fires_makes_nothing_and_waits_for_nothing() -> None:
    assert plan_.plan(cron("0 0 30 2 *"), now=at("2026-03-02T00:00:00")) == plan_.CronPlan()
