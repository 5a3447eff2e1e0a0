"""Time, injectable.

Everything in the framework that waits or measures time takes a :class:`Clock`
so that tests can drive time by hand instead of sleeping (see
:class:`runtime.testing.clock.FakeClock`).

A clock gives two things:

- ``now()``: a monotonic reading in seconds (only differences are meaningful);
- ``call_later(delay, callback)``: run ``callback()`` once, ``delay`` seconds from
  now, on the event loop; returns a handle whose ``cancel()`` stops it.

:class:`RealClock` uses :func:`time.monotonic` and the running event loop's own
timer (``loop.call_later``), so a pending timer costs no task and no polling.

Wall time, where the API wants it, is written and read by :func:`rfc3339` and
:func:`parse_rfc3339` (UTC, whole seconds: metav1.Time's wire form), and written with
microseconds by :func:`micro_time` (metav1.MicroTime's wire form: a Lease's
``renewTime``, an Event's ``eventTime``).

>>> clock = RealClock()
>>> a = clock.now(); b = clock.now()
>>> b >= a
True
>>> moment = datetime.datetime(2026, 1, 1, 12, 0, 30, 999, tzinfo=datetime.UTC)
>>> rfc3339(moment), parse_rfc3339("2026-01-01T12:00:30Z") == moment.replace(microsecond=0)
('2026-01-01T12:00:30Z', True)
>>> micro_time(moment)
'2026-01-01T12:00:30.000999Z'
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "RealClock", "TimerHandle", "micro_time", "parse_rfc3339", "rfc3339"]


@runtime_checkable
class TimerHandle(Protocol):
    """A scheduled callback; ``cancel()`` is idempotent."""

    def cancel(self) -> None: ...


@runtime_checkable
class Clock(Protocol):
    """Monotonic time plus one-shot timers."""

    def now(self) -> float:
        """Seconds on a monotonic scale."""
        ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        """Run ``callback()`` once after ``delay`` seconds (``<= 0``: as soon as possible)."""
        ...


class RealClock:
    """Wall-clock time: :func:`time.monotonic` and the event loop's timers.

    ``call_later`` must be called from a running event loop.
    """

    __slots__ = ()

    # The builtin itself, not a wrapper: this sits on every queue operation's path.
    now = staticmethod(time.monotonic)

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_later(max(delay, 0.0), callback)


REAL_CLOCK: Clock = RealClock()
"""The shared default clock."""


def rfc3339(moment: datetime.datetime | None = None) -> str:
    """``moment`` (default: now) as the API writes a ``metav1.Time``: UTC, whole
    seconds, ``Z``. A naive ``moment`` is taken as local time."""
    when = moment if moment is not None else datetime.datetime.now(datetime.UTC)
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(moment: datetime.datetime | None = None) -> str:
    """``moment`` (default: now) as the API writes a ``metav1.MicroTime``: UTC,
    microseconds, ``Z``. A naive ``moment`` is taken as local time."""
    when = moment if moment is not None else datetime.datetime.now(datetime.UTC)
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(text: str | None) -> datetime.datetime | None:
    """The time ``text`` (RFC 3339) names, timezone-aware; None when absent or garbled."""
    if not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=datetime.UTC)
