"""Label selectors, parsed once and matched against cached objects.

The syntax is Kubernetes': comma-separated requirements, each ``key=value``,
``key==value``, ``key!=value``, ``key in (a,b)``, ``key notin (a,b)``, ``key``
(exists) or ``!key`` (does not exist). All must hold.

>>> sel = parse("app=web, tier in (front,edge), !canary")
>>> sel.matches({"app": "web", "tier": "edge"}), sel.matches({"app": "web", "tier": "db"})
(True, False)
>>> parse("").matches({})
True
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping

__all__ = ["Selector", "parse"]

_REQUIREMENT = re.compile(
    r"""^\s*(?:
        (?P<not>!)\s*(?P<nkey>[\w./-]+)
      | (?P<skey>[\w./-]+)\s+(?P<op>in|notin)\s*\((?P<values>[^)]*)\)
      | (?P<ekey>[\w./-]+)\s*(?P<eop>==|=|!=)\s*(?P<value>[\w./-]*)
      | (?P<key>[\w./-]+)
    )\s*$""",
    re.VERBOSE,
)


@dataclasses.dataclass(frozen=True, slots=True)
class _Requirement:
    key: str
    op: str  # "in", "notin", "exists", "!exists"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!exists":
            return self.key not in labels
        if self.op == "in":
            return labels.get(self.key) in self.values
        return labels.get(self.key) not in self.values


@dataclasses.dataclass(frozen=True, slots=True)
class Selector:
    """A parsed selector; :meth:`matches` takes an object's labels."""

    requirements: tuple[_Requirement, ...]

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def narrowest(self) -> tuple[str, list[str]] | None:
        """``(label key, values)``: every match carries one of these values for that key
        (from the equality or ``in`` requirement with the fewest values), for looking
        candidates up in a label index; ``None`` if no requirement narrows them."""
        narrowing = [r for r in self.requirements if r.op == "in"]
        if not narrowing:
            return None
        best = min(narrowing, key=lambda r: len(r.values))
        return best.key, sorted(best.values)


def _split(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p for p in parts if p.strip()]


@functools.lru_cache(maxsize=512)
def parse(text: str) -> Selector:
    """Parse a label selector; raises ``ValueError`` with the offending part."""
    requirements = []
    for part in _split(text):
        m = _REQUIREMENT.match(part)
        if m is None:
            raise ValueError(f"invalid label selector requirement {part.strip()!r} in {text!r}")
        if m["nkey"]:
            requirements.append(_Requirement(m["nkey"], "!exists"))
        elif m["skey"]:
            values = frozenset(v.strip() for v in m["values"].split(",") if v.strip())
            requirements.append(_Requirement(m["skey"], m["op"], values))
        elif m["ekey"]:
            op = "notin" if m["eop"] == "!=" else "in"
            requirements.append(_Requirement(m["ekey"], op, frozenset({m["value"]})))
        else:
            requirements.append(_Requirement(m["key"], "exists"))
    return Selector(tuple(requirements))
