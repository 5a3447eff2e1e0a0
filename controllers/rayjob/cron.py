"""Cron schedules as a RayCronJob's ``spec.schedule`` holds them: robfig/cron v3.0.1's
``ParseStandard`` (what KubeRay v1.7.0 parses them with) and its ``Next``, exactly.

:func:`parse` takes

- **five fields**, separated by whitespace: minute (0-59), hour (0-23), day of month
  (1-31), month (1-12 or ``JAN``-``DEC``), day of week (0-6 or ``SUN``-``SAT``; 7 is
  refused, as robfig does); names in any case. Each field is a comma-separated list of
  ``*`` or ``?`` (every value), ``N``, ``N-M`` (names too: ``MON-FRI``), each with an
  optional ``/step`` (``*/15``, ``5/15`` = ``5-59/15``, ``1-10/3``). Empty list items
  are dropped, as robfig drops them (``1,,2`` is ``1,2``; a field of only commas
  matches nothing, and such a schedule never fires);
- **descriptors**: ``@yearly`` = ``@annually`` (``0 0 1 1 *``), ``@monthly``
  (``0 0 1 * *``), ``@weekly`` (``0 0 * * 0``), ``@daily`` = ``@midnight``
  (``0 0 * * *``), ``@hourly`` (``0 * * * *``), and ``@every <Go duration>``
  (:mod:`controllers.goduration`: ``@every 1h30m``): every that long after the time
  asked about, at least 1 s and in whole seconds (robfig rounds shorter ones, zero and
  negative ones too, up to 1 s, and drops the fraction of a second), whatever the zone.
  A descriptor is the whole text (``"@daily "`` with a space is refused, as robfig does).

A :class:`ValueError` (:class:`CronError`) names the field and what is wrong with it.
The zone is :func:`parse`'s argument; robfig's ``TZ=<zone> `` / ``CRON_TZ=<zone> `` prefix
is read too (it wins over the argument), although a RayCronJob refuses it in its
schedule (its zone is ``spec.timeZone``: :mod:`controllers.rayjob.validation`).

**Day of month and day of week** (robfig's and Vixie cron's rule): when either field is
unrestricted (starts with ``*`` or ``?`` and has no step above 1) a day must match both;
when both are restricted, a day matches when either does (``0 0 13 * 5``: the 13th
*and* every Friday). ``*/2`` counts as restricted.

**Next** (:meth:`Schedule.next`): the first whole second strictly after ``after`` that
matches, computed on the wall clock of the schedule's zone (``after``'s own zone when
:func:`parse` got none, as robfig treats ``time.Local``), returned in ``after``'s zone;
None when nothing matches within five years (robfig's "zero time": a schedule such as
``0 0 30 2 *`` never fires). Daylight saving time is handled as robfig does, because
robfig steps through wall-clock fields with Go's ``time`` arithmetic:

- a time in a **skipped** hour (spring forward) does not run that day: ``30 2 * * *`` in
  ``America/New_York`` runs at 02:30 on every day but the one that has no 02:30;
  a schedule of every hour (``0 * * * *``) has one run fewer that day;
- a time in a **repeated** hour (fall back) runs **twice**, once at each offset
  (``30 1 * * *``: 01:30 EDT and 01:30 EST, an hour apart);
- likewise ``0 0 * * *`` does not run on a day that has no midnight (zones that change
  at 00:00, such as ``America/Havana``); other times of that day run as usual.

>>> from zoneinfo import ZoneInfo
>>> utc = dt.timezone.utc
>>> parse("*/15 9-17 * * MON-FRI").next(dt.datetime(2024, 1, 5, 17, 50, tzinfo=utc))
datetime.datetime(2024, 1, 8, 9, 0, tzinfo=datetime.timezone.utc)
>>> parse("@every 90m").next(dt.datetime(2024, 1, 1, 0, 0, 0, 500000, tzinfo=utc))
datetime.datetime(2024, 1, 1, 1, 30, tzinfo=datetime.timezone.utc)
>>> ny = ZoneInfo("America/New_York")
>>> str(parse("30 2 * * *", ny).next(dt.datetime(2024, 3, 10, 0, 0, tzinfo=ny)))
'2024-03-11 02:30:00-04:00'
>>> parse("0 0 * * 8")
Traceback (most recent call last):
...
controllers.rayjob.cron.CronError: day of week: the end of range 8 is above the maximum 6 in '8'
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
import zoneinfo
from collections.abc import Mapping

from controllers import goduration

__all__ = ["CronError", "Every", "Schedule", "Spec", "load_zone", "parse"]

_STAR = 1 << 63
"""robfig's ``starBit``: the field was ``*`` or ``?`` (with no step above 1)."""
_MONTHS = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
        start=1,
    )
}
_DAYS = {
    name: number for number, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))
}
_INT = re.compile(r"[+-]?[0-9]+")  # Go's strconv.Atoi
_EVERY = "@every "
_YEARS_AHEAD = 5
_SPACES = re.compile("[\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+")
"""Go's ``unicode.IsSpace`` (``strings.Fields``), which Python's ``str.split`` is not quite."""


class CronError(ValueError):
    """A schedule that does not parse; the message names the field."""


@dataclasses.dataclass(frozen=True)
class _Bounds:
    name: str
    low: int
    high: int
    names: Mapping[str, int] | None = None


_MINUTE = _Bounds("minute", 0, 59)
_HOUR = _Bounds("hour", 0, 23)
_DOM = _Bounds("day of month", 1, 31)
_MONTH = _Bounds("month", 1, 12, _MONTHS)
_DOW = _Bounds("day of week", 0, 6, _DAYS)
_FIELDS = (_MINUTE, _HOUR, _DOM, _MONTH, _DOW)


def _bits(low: int, high: int, step: int) -> int:
    return sum(1 << i for i in range(low, high + 1, step))


def _all(bounds: _Bounds) -> int:
    return _bits(bounds.low, bounds.high, 1) | _STAR


def _number(text: str, bounds: _Bounds, expr: str, names: bool = True) -> int:
    if names and bounds.names is not None and text.lower() in bounds.names:
        return bounds.names[text.lower()]
    if not _INT.fullmatch(text):
        raise CronError(f"{bounds.name}: {text!r} is not a number in {expr!r}")
    value = int(text)
    if value < 0:
        raise CronError(f"{bounds.name}: negative number {value} in {expr!r}")
    return value


def _range(expr: str, bounds: _Bounds) -> int:
    """robfig's ``getRange``: ``*``/``?``/``N``/``N-M``, then an optional ``/step``."""
    range_and_step = expr.split("/")
    low_and_high = range_and_step[0].split("-")
    extra = 0
    if low_and_high[0] in ("*", "?"):  # what follows a '-' is ignored, as robfig does
        start, end, extra = bounds.low, bounds.high, _STAR
    else:
        start = _number(low_and_high[0], bounds, expr)
        if len(low_and_high) == 1:
            end = start
        elif len(low_and_high) == 2:
            end = _number(low_and_high[1], bounds, expr)
        else:
            raise CronError(f"{bounds.name}: too many '-' in {expr!r}")
    if len(range_and_step) == 1:
        step = 1
    elif len(range_and_step) == 2:
        step = _number(range_and_step[1], bounds, expr, names=False)
        if len(low_and_high) == 1:  # "N/step" is "N-max/step"
            end = bounds.high
        if step > 1:
            extra = 0
    else:
        raise CronError(f"{bounds.name}: too many '/' in {expr!r}")
    if start < bounds.low:
        raise CronError(
            f"{bounds.name}: the start of range {start} is below the minimum {bounds.low} "
            f"in {expr!r}"
        )
    if end > bounds.high:
        raise CronError(
            f"{bounds.name}: the end of range {end} is above the maximum {bounds.high} in {expr!r}"
        )
    if start > end:
        raise CronError(
            f"{bounds.name}: the range starts after it ends ({start} > {end}) in {expr!r}"
        )
    if step == 0:
        raise CronError(f"{bounds.name}: the step must be positive in {expr!r}")
    return _bits(start, end, step) | extra


def _field(text: str, bounds: _Bounds) -> int:
    bits = 0
    for part in text.split(","):
        if part:  # Go's strings.FieldsFunc drops empty items
            bits |= _range(part, bounds)
    return bits


_EPOCH = dt.datetime(1970, 1, 1)
_AWARE_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_SECOND = dt.timedelta(seconds=1)


def _offset(instant: int, zone: dt.tzinfo) -> int:
    offset = dt.datetime.fromtimestamp(instant, zone).utcoffset()
    return int(offset.total_seconds()) if offset is not None else 0


def _unix(moment: dt.datetime) -> int:
    """Whole seconds since the epoch, rounded down (``moment`` aware)."""
    return (moment - _AWARE_EPOCH) // _SECOND


def _date(
    year: int, month: int, day: int, hour: int, minute: int, second: int, zone: dt.tzinfo
) -> int:
    """Go's ``time.Date`` (fields normalised, a wall time in a gap or an overlap resolved
    as Go resolves it) as a POSIX timestamp."""
    year += (month - 1) // 12
    month = (month - 1) % 12 + 1
    wall = dt.datetime(year, month, 1) + dt.timedelta(
        days=day - 1, hours=hour, minutes=minute, seconds=second
    )
    unix = (wall - _EPOCH) // _SECOND
    first = _offset(unix, zone)
    return unix - _offset(unix - first, zone)


@dataclasses.dataclass(frozen=True)
class Spec:
    """A five-field schedule: one bit per allowed value of each field (bit 63: ``*``)."""

    minute: int
    hour: int
    dom: int
    month: int
    dow: int
    zone: dt.tzinfo | None = None
    """The zone of the wall clock; None: the zone of the time asked about."""

    def _day_matches(self, wall: dt.datetime) -> bool:
        dom = bool(1 << wall.day & self.dom)
        dow = bool(1 << ((wall.weekday() + 1) % 7) & self.dow)
        if self.dom & _STAR or self.dow & _STAR:
            return dom and dow
        return dom or dow

    def next(self, after: dt.datetime) -> dt.datetime | None:
        """The first matching whole second after ``after`` (aware), in ``after``'s zone;
        None when there is none within five years."""
        if after.tzinfo is None:
            raise ValueError("next() needs an aware datetime")
        zone = self.zone or after.tzinfo
        t = _unix(after) + 1  # the upcoming second

        def wall(instant: int) -> dt.datetime:
            return dt.datetime.fromtimestamp(instant, zone)

        added = False
        year_limit = wall(t).year + _YEARS_AHEAD
        while True:  # robfig's WRAP
            w = wall(t)
            if w.year > year_limit:
                return None
            wrapped = False
            while not (1 << w.month & self.month):
                if not added:
                    added = True
                    t = _date(w.year, w.month, 1, 0, 0, 0, zone)
                    w = wall(t)
                t = _date(w.year, w.month + 1, w.day, w.hour, w.minute, w.second, zone)
                w = wall(t)
                if w.month == 1:
                    wrapped = True
                    break
            if wrapped:
                continue
            while not self._day_matches(w):
                if not added:
                    added = True
                    t = _date(w.year, w.month, w.day, 0, 0, 0, zone)
                    w = wall(t)
                t = _date(w.year, w.month, w.day + 1, w.hour, w.minute, w.second, zone)
                w = wall(t)
                if w.hour != 0:  # midnight moved by DST
                    t += (24 - w.hour) * 3600 if w.hour > 12 else -w.hour * 3600
                    w = wall(t)
                if w.day == 1:
                    wrapped = True
                    break
            if wrapped:
                continue
            while not (1 << w.hour & self.hour):
                if not added:
                    added = True
                    t = _date(w.year, w.month, w.day, w.hour, 0, 0, zone)
                t += 3600
                w = wall(t)
                if w.hour == 0:
                    wrapped = True
                    break
            if wrapped:
                continue
            while not (1 << w.minute & self.minute):
                if not added:
                    added = True
                    t -= t % 60  # Go's Truncate: on the absolute time line
                t += 60
                w = wall(t)
                if w.minute == 0:
                    wrapped = True
                    break
            if wrapped:
                continue
            if w.second != 0:  # the seconds field is "0"
                if not added:
                    added = True
                t += 60 - w.second
                continue  # robfig's seconds loop ends in a wrap at :00
            return dt.datetime.fromtimestamp(t, after.tzinfo)


@dataclasses.dataclass(frozen=True)
class Every:
    """``@every <duration>``: a fixed delay (whole seconds, at least one)."""

    seconds: int

    def next(self, after: dt.datetime) -> dt.datetime | None:
        """``after`` plus the delay, its fraction of a second dropped (robfig's)."""
        if after.tzinfo is None:
            raise ValueError("next() needs an aware datetime")
        moment = _unix(after) + self.seconds  # on the time line, not the wall clock
        return dt.datetime.fromtimestamp(moment, after.tzinfo)


Schedule = Spec | Every
"""What :func:`parse` returns: both have ``next(after) -> datetime | None``."""


_DESCRIPTORS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def load_zone(name: str) -> dt.tzinfo | None:
    """Go's ``time.LoadLocation``: ``""`` and ``UTC`` are UTC, ``Local`` the local zone."""
    if name in ("", "UTC"):
        return dt.UTC
    if name == "Local":
        return None
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise CronError(f"unknown time zone {name!r}: {exc}") from None


def parse(expr: str, zone: dt.tzinfo | None = None) -> Schedule:
    """The schedule ``expr`` (see the module docstring), on the wall clock of ``zone``
    (None: the zone of each time :meth:`Spec.next` is asked about).

    >>> parse("@weekly") == parse("0 0 * * SUN")
    True
    >>> parse("@every 1.5s")
    Every(seconds=1)
    """
    if not expr:
        raise CronError("the schedule is empty")
    if expr.startswith(("TZ=", "CRON_TZ=")):
        if " " not in expr:
            raise CronError(f"{expr!r}: a time zone prefix must be followed by a schedule")
        prefix, rest = expr.split(" ", 1)
        zone = load_zone(prefix.partition("=")[2])
        expr = rest.strip()  # Go's strings.TrimSpace
        if not expr:
            raise CronError("the schedule is empty")
    if expr.startswith("@"):
        if expr in _DESCRIPTORS:
            return parse(_DESCRIPTORS[expr], zone)
        if expr.startswith(_EVERY):
            duration = goduration.parse(expr[len(_EVERY) :])
            if duration is None:
                raise CronError(
                    f"{expr!r}: {expr[len(_EVERY) :]!r} is not a Go duration (such as '90s', "
                    "'5m', '1h30m')"
                )
            return Every(max(1, math.floor(duration)))
        raise CronError(
            f"unknown descriptor {expr!r} (one of {', '.join(sorted(_DESCRIPTORS))}, "
            "'@every <duration>')"
        )
    fields = [field for field in _SPACES.split(expr) if field]
    if len(fields) != len(_FIELDS):
        raise CronError(
            f"expected exactly {len(_FIELDS)} fields (minute, hour, day of month, month, day "
            f"of week), found {len(fields)} in {expr!r}"
        )
    minute, hour, dom, month, dow = (
        _field(text, bounds) for text, bounds in zip(fields, _FIELDS, strict=True)
    )
    return Spec(minute, hour, dom, month, dow, zone)
