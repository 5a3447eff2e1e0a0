"""Go's ``time.ParseDuration``, exactly: the durations KubeRay's annotations hold.

:func:`parse` gives the seconds of a duration string as a :class:`fractions.Fraction`
(exact: ``"1.1s"`` is 11/10), or None when Go would refuse it: a unit is required
except for ``"0"``, units are ``ns``, ``us`` (``µs``, ``μs``), ``ms``, ``s``, ``m``,
``h``, terms may have fractions, a sign may lead, and the total must fit Go's int64
nanoseconds.

>>> parse("1h30m"), parse("-2.5s"), parse("0"), parse("90"), parse("1d")
(Fraction(5400, 1), Fraction(-5, 2), Fraction(0, 1), None, None)
"""

from __future__ import annotations

import fractions
import re

__all__ = ["parse"]

_GO_UNITS = {
    "ns": fractions.Fraction(1, 10**9),
    "us": fractions.Fraction(1, 10**6),
    "\u00b5s": fractions.Fraction(1, 10**6),  # micro sign
    "\u03bcs": fractions.Fraction(1, 10**6),  # Greek small letter mu
    "ms": fractions.Fraction(1, 10**3),
    "s": fractions.Fraction(1),
    "m": fractions.Fraction(60),
    "h": fractions.Fraction(3600),
}
_GO_TERM = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]*)")
_GO_MAX_SECONDS = fractions.Fraction(2**63 - 1, 10**9)


def parse(text: str) -> fractions.Fraction | None:
    """Seconds of a Go duration string (``"1h30m"``, ``"-2.5s"``), else None."""
    rest = text
    sign = 1
    if rest[:1] in ("+", "-"):
        sign = -1 if rest[0] == "-" else 1
        rest = rest[1:]
    if rest == "0":
        return fractions.Fraction(0)
    if not rest:
        return None
    total = fractions.Fraction(0)
    while rest:
        term = _GO_TERM.match(rest)
        if term is None:  # pragma: no cover - the pattern matches any string
            return None
        whole, fraction, unit = term.group(1), term.group(2), term.group(3)
        if not whole and not fraction:  # "." or a unit without a number
            return None
        if unit not in _GO_UNITS:
            return None
        number = fractions.Fraction(int(whole or "0"))
        if fraction:
            number += fractions.Fraction(int(fraction), 10 ** len(fraction))
        total += number * _GO_UNITS[unit]
        if total > _GO_MAX_SECONDS:
            return None
        rest = rest[term.end() :]
    return sign * total
