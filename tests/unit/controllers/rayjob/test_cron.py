"""controllers/rayjob/cron.py against robfig/cron v3.0.1 itself.

``cron_golden.json`` was written by a Go program that runs robfig/cron v3.0.1's
``ParseStandard`` and ``Next`` (the module KubeRay v1.7.0 uses) on each case: the zone,
the expression, the time asked about (a wall time in that zone, as Go's
``time.ParseInLocation`` reads it) and the next ticks (``"zero"``: none within five
years), or ``error`` when robfig refuses the expression. To write it again:
``cron_golden.go`` (``package main``, in a module requiring ``github.com/robfig/cron/v3
v3.0.1``) reads one case per line (``{"zone", "expr", "after", "n"}``) on stdin.
"""

from __future__ import annotations

import datetime as dt
import json
import pathlib
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from controllers.rayjob import cron

GOLDEN = json.loads((pathlib.Path(__file__).parent / "cron_golden.json").read_text())


def _after(case: dict[str, str]) -> dt.datetime:
    zone = ZoneInfo(case["zone"])
    wall = dt.datetime.fromisoformat(case["after"])
    unix = cron._date(wall.year, wall.month, wall.day, wall.hour, wall.minute, wall.second, zone)
    return dt.datetime.fromtimestamp(unix, zone).replace(microsecond=wall.microsecond)


@pytest.mark.parametrize(
    "case", GOLDEN, ids=[f"{c['zone']}|{c['expr']}|{c['after']}" for c in GOLDEN]
)
def test_matches_robfig(case: dict[str, Any]) -> None:
    if case.get("error"):
        with pytest.raises(cron.CronError):
            cron.parse(case["expr"])
        return
    schedule = cron.parse(case["expr"])
    moment: dt.datetime | None = _after(case)
    got = []
    for _ in case["next"]:
        assert moment is not None
        moment = schedule.next(moment)
        if moment is None:
            got.append("zero")
            break
        got.append(moment.isoformat().replace("+00:00", "Z"))
    assert got == case["next"]


def test_the_zone_argument_is_the_wall_clock() -> None:
    """A schedule with a zone (``spec.timeZone``) counts on that zone's wall clock and
    answers in the zone of the time asked about."""
    tokyo = ZoneInfo("Asia/Tokyo")
    schedule = cron.parse("0 9 * * *", tokyo)
    got = schedule.next(dt.datetime(2023, 12, 31, 12, 0, tzinfo=dt.UTC))
    assert got == dt.datetime(2024, 1, 1, 0, 0, tzinfo=dt.UTC)
    assert got is not None
    assert got.tzinfo is dt.UTC
    assert cron.parse("TZ=Asia/Tokyo 0 9 * * *") == schedule
    with pytest.raises(cron.CronError, match="unknown time zone 'Mars/Base'"):
        cron.parse("CRON_TZ=Mars/Base 0 9 * * *")


@pytest.mark.parametrize("expr", ["0 0 * * *", "@every 5m"])
def test_naive_times_are_refused(expr: str) -> None:
    with pytest.raises(ValueError, match="aware"):
        cron.parse(expr).next(dt.datetime(2024, 1, 1))


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("* * * *", "expected exactly 5 fields"),
        ("60 * * * *", "minute: the end of range 60 is above the maximum 59"),
        ("* * 0 * *", "day of month: the start of range 0 is below the minimum 1"),
        ("* * * 13 *", "month: the end of range 13"),
        ("5-1 * * * *", "minute: the range starts after it ends"),
        ("*/0 * * * *", "minute: the step must be positive"),
        ("x * * * *", "minute: 'x' is not a number"),
        ("@every 5", "'5' is not a Go duration"),
        ("@fortnightly", "unknown descriptor"),
        ("", "empty"),
    ],
)
def test_messages_name_the_field(expr: str, message: str) -> None:
    with pytest.raises(cron.CronError, match=message.replace("*", r"\*")):
        cron.parse(expr)


def test_every_is_whole_seconds_and_at_least_one() -> None:
    assert cron.parse("@every 1h30m") == cron.Every(5400)
    assert cron.parse("@every 999ms") == cron.Every(1)
    assert cron.parse("@every -1h") == cron.Every(1)


def test_every_counts_real_time_across_dst() -> None:
    ny = ZoneInfo("America/New_York")
    got = cron.parse("@every 1h").next(dt.datetime(2024, 3, 10, 1, 30, tzinfo=ny))
    assert got is not None
    assert got.isoformat() == "2024-03-10T03:30:00-04:00"
