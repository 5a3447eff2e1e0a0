"""Field selectors, parsed once and matched against objects.

The syntax is apimachinery's (``fields.ParseSelector``), so a selector accepted
here is one the apiserver parses the same way:

- comma-separated terms, all of which must hold: ``path=value``, ``path==value``
  (equal) and ``path!=value`` (not equal); empty terms are skipped, and ``""``
  selects everything;
- in a value, ``\\``, ``,`` and ``=`` are escaped with a backslash
  (:func:`escape`); any other escape, or a trailing backslash, is a ``ValueError``;
- the path is the field's JSON path with dots (``metadata.name``, ``spec.nodeName``,
  ``status.phase``).

:meth:`Selector.matches` reads the path in an object as the apiserver does for the
fields it supports: a missing field reads as ``""`` (so ``spec.nodeName=`` selects
unscheduled pods), booleans as ``true``/``false``, numbers in decimal. Which fields
may be selected on is the server's business (each kind supports a few; others are a
400 there): matching here never refuses a path.

>>> sel = parse("status.phase!=Succeeded,spec.nodeName=node-1")
>>> sel.matches({"spec": {"nodeName": "node-1"}, "status": {"phase": "Running"}})
True
>>> parse("spec.nodeName=").matches({"spec": {}})
True
>>> parse(r"metadata.name=a\\,b").terms
(('metadata.name', '=', 'a,b'),)
>>> parse("metadata.name")
Traceback (most recent call last):
...
ValueError: invalid field selector 'metadata.name': 'metadata.name' has no operator (=, ==, !=)
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

__all__ = ["Selector", "escape", "parse"]

_OPERATORS = ("!=", "==", "=")
_ESCAPABLE = frozenset("\\,=")


@dataclasses.dataclass(frozen=True, slots=True)
class Selector:
    """A parsed field selector: ``terms`` are ``(path, "=" or "!=", value)``."""

    terms: tuple[tuple[str, str, str], ...]

    def matches(self, obj: Mapping[str, Any]) -> bool:
        for path, op, value in self.terms:
            if (field_value(obj, path) == value) != (op == "="):
                return False
        return True

    def __str__(self) -> str:
        return ",".join(f"{path}{op}{escape(value)}" for path, op, value in self.terms)


def escape(value: str) -> str:
    """``value`` with ``\\``, ``,`` and ``=`` escaped, for a term of a selector."""
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The value at the dotted ``path`` of ``obj`` as a selector compares it."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
        if value is None:
            return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


@functools.lru_cache(maxsize=256)
def parse(selector: str) -> Selector:
    """Parse ``selector``; ``ValueError`` names it and what is wrong."""
    terms = []
    for term in _split(selector, ","):
        if not term:
            continue
        path, op, raw = _split_term(selector, term)
        terms.append((path, "!=" if op == "!=" else "=", _unescape(selector, raw)))
    return Selector(tuple(terms))


def _split(text: str, separator: str) -> list[str]:
    """``text`` split at unescaped ``separator`` (escapes are kept)."""
    parts, start, i = [], 0, 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == separator:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts


def _split_term(selector: str, term: str) -> tuple[str, str, str]:
    """At the first operator (escapes are not skipped here: apimachinery does not)."""
    for i in range(len(term)):
        for op in _OPERATORS:
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op) :]
    raise ValueError(f"invalid field selector {selector!r}: {term!r} has no operator (=, ==, !=)")


def _unescape(selector: str, raw: str) -> str:
    out, i = [], 0
    while i < len(raw):
        char = raw[i]
        if char == "\\":
            if i + 1 == len(raw) or raw[i + 1] not in _ESCAPABLE:
                raise ValueError(
                    f"invalid field selector {selector!r}: invalid escape in {raw!r} "
                    "(only \\\\, \\, and \\= are)"
                )
            out.append(raw[i + 1])
            i += 2
            continue
        if char in ",=":
            raise ValueError(f"invalid field selector {selector!r}: unescaped {char!r} in {raw!r}")
        out.append(char)
        i += 1
    return "".join(out)
