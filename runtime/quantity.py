"""Kubernetes resource quantities (``"500m"``, ``"1Gi"``, ``2``), parsed to exact values.

The API server rewrites every ``resource.Quantity`` it stores into a canonical
spelling (``"1000m"`` comes back as ``"1"``, ``"1024Mi"`` as ``"1Gi"``, ``2`` as
``"2"``), so a controller must compare quantities by value, never by text.
:func:`parse` reads the grammar kube-apiserver accepts::

    quantity        ::= sign? number suffix
    sign            ::= "+" | "-"
    number          ::= digits | digits "." digits? | "." digits      (ASCII digits)
    suffix          ::= binarySI | decimalSI | decimalExponent
    binarySI        ::= "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei"          (2^10 ... 2^60)
    decimalSI       ::= "n" | "u" | "m" | "" | "k" | "M" | "G" | "T" | "P" | "E"
    decimalExponent ::= ("e" | "E") sign? digits                        (10^n)

and keeps the value exactly (a :class:`fractions.Fraction`, never a float),
rounded as the server rounds it: a non-zero magnitude is rounded **up** to a
whole number of nano units (``"0.1n"`` is ``"1n"``), and a binary-SI amount is
capped at ``2**63 - 1``. JSON numbers are quantities too (the server parses the
number's text): ``2`` and ``0.5`` mean ``"2"`` and ``"500m"``; booleans are not.
Decimal exponents beyond +-1000 are refused, to keep parsing cheap (no real
quantity has one).

Two :class:`Quantity` objects are equal when their values are; a quantity is
never equal to a plain number or string, so comparisons stay explicit.

>>> parse("1000m") == parse("1") == parse(1), parse("1Gi") == parse("1024Mi")
(True, True)
>>> parse("1.5Gi").value == 1536 * 2**20, parse("250m").value
(True, Fraction(1, 4))
>>> parse_or_none("1 Gi") is None
True
"""

from __future__ import annotations

import dataclasses
import fractions
import math
import re

__all__ = ["Quantity", "parse", "parse_or_none"]

_GRAMMAR = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<binary>[KMGTPE]i)|(?P<exp>[eE][+-]?[0-9]+)|(?P<si>[numkMGTPE]?))",
    re.ASCII,
)
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_NANO = 10**9
_BINARY_CAP = 2**63 - 1
_MAX_EXPONENT = 1000  # far beyond any real quantity; keeps a hostile "1e999999999" cheap


@dataclasses.dataclass(frozen=True, slots=True)
class Quantity:
    """An exact quantity value (see the module docstring)."""

    value: fractions.Fraction


def parse(text: str | int | float) -> Quantity:
    """The value of a quantity string or JSON number; :class:`ValueError` if it is not one."""
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise ValueError(f"not a quantity: {text!r}")
    if isinstance(text, float) and not math.isfinite(text):
        raise ValueError(f"not a quantity: {text!r}")
    raw = text if isinstance(text, str) else repr(text)
    match = _GRAMMAR.fullmatch(raw)
    if match is None:
        raise ValueError(f"not a quantity: {raw!r}")
    whole, _, decimals = match["number"].partition(".")
    magnitude = fractions.Fraction(int(whole or "0") * 10 ** len(decimals) + int(decimals or "0"),
                                   10 ** len(decimals))  # fmt: skip
    binary = match["binary"]
    if binary:
        magnitude *= 2 ** _BINARY_SI[binary]
    else:
        exponent = int(match["exp"][1:]) if match["exp"] else _DECIMAL_SI[match["si"]]
        if abs(exponent) > _MAX_EXPONENT:
            raise ValueError(f"quantity exponent out of range: {raw!r}")
        magnitude *= fractions.Fraction(10) ** exponent
    # The server keeps nano precision, rounding any remainder away from zero...
    magnitude = fractions.Fraction(math.ceil(magnitude * _NANO), _NANO)
    # ... and caps binary-SI amounts (decimal ones are not capped).
    if binary and magnitude > _BINARY_CAP:
        magnitude = fractions.Fraction(_BINARY_CAP)
    return Quantity(-magnitude if match["sign"] == "-" else magnitude)


def parse_or_none(value: object) -> Quantity | None:
    """:func:`parse` for values that may not be quantities at all: ``None`` for those."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    try:
        return parse(value)
    except ValueError:
        return None
