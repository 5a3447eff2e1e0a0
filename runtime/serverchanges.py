"""What the API server does to a status it is sent, learned per kind so that the
status writer compares on the server's terms (step 4 of :mod:`runtime.status`).

A CRD's structural schema prunes fields it does not declare and fills in defaults;
a webhook may rewrite values. :class:`ServerChanges` remembers, per apiVersion and
kind, each field the server was seen to prune, default or rewrite (list positions
generalised to ``[*]``), rewrites a desired status as the server would keep it
(:meth:`ServerChanges.means`), forgets a change a later write contradicts or that
was not seen for ``relearn_after`` seconds, and holds at most ``max_learned``.

>>> changes = ServerChanges()
>>> key = ("example.com/v1", "Database")
>>> changes.learn(key, {"extra": 1, "a": 1}, {"a": 1})   # the schema pruned "extra"
>>> changes.learned(), changes.means(key, {"a": 1}, {"extra": 2, "a": 1})
([('Database', 'status.extra', 'pruned')], True)
"""

from __future__ import annotations

import collections
import copy
import dataclasses
from collections.abc import Collection, Iterator
from typing import Any

import structlog

from runtime import clock as clock_
from runtime import equality, metrics

__all__ = ["ServerChanges", "TypeKey"]

TypeKey = tuple[str, str]
"""``(apiVersion, kind)``."""

_mismatches = metrics.Family(
    "status_write_mismatch_total",
    "Status writes whose answer differed from what was sent, by kind and field "
    "(pruned or defaulted by a CRD schema, or rewritten by the server)",
    "counter",
    ("kind", "field"),
)
_MAX_MISMATCH_SERIES = 256
_mismatch_series: set[tuple[str, str]] = set()

_Path = tuple[str | None, ...]  # keys; None is "any list position"
_PRUNED, _DEFAULTED, _REWRITTEN = "pruned", "defaulted", "rewritten"
_ORDER = {_PRUNED: 0, _DEFAULTED: 1, _REWRITTEN: 2}  # the order a server applies them in
_VARIES = object()  # a default that differs per object


def _field(path: _Path) -> str:
    return "status" + "".join("[*]" if key is None else f".{key}" for key in path)


def _diff(sent: Any, kept: Any, path: _Path = ()) -> Iterator[tuple[_Path, str, Any, Any]]:
    """``(path, change, sent value, kept value)`` for each place ``kept`` differs from
    ``sent`` (both normalised)."""
    if isinstance(sent, dict) and isinstance(kept, dict):
        for key in sent:
            if key not in kept:
                yield (*path, key), _PRUNED, sent[key], None
            else:
                yield from _diff(sent[key], kept[key], (*path, key))
        for key in kept:
            if key not in sent:
                yield (*path, key), _DEFAULTED, None, kept[key]
    elif isinstance(sent, list) and isinstance(kept, list) and len(sent) == len(kept):
        for s, k in zip(sent, kept, strict=True):
            yield from _diff(s, k, (*path, None))
    elif sent != kept:
        yield path, _REWRITTEN, sent, kept


def _canonical(value: Any) -> Any:
    """A hashable value equal for semantically equal normalised values."""
    if isinstance(value, dict):
        return ("{}", tuple(sorted((k, _canonical(v)) for k, v in value.items())))
    if isinstance(value, list):
        return ("[]", tuple(_canonical(v) for v in value))
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _parents(want: Any, have: Any, path: _Path) -> Iterator[tuple[Any, Any]]:
    """The containers at ``path`` in ``want`` with their counterparts in ``have``
    (``None`` where ``have`` has none)."""
    if not path:
        yield want, have
        return
    key, rest = path[0], path[1:]
    if key is None:
        if isinstance(want, list):
            for i, item in enumerate(want):
                other = have[i] if isinstance(have, list) and i < len(have) else None
                yield from _parents(item, other, rest)
    elif isinstance(want, dict) and key in want:
        yield from _parents(want[key], have.get(key) if isinstance(have, dict) else None, rest)


def _slots(container: Any, key: str | None) -> list[Any]:
    if key is None:
        return list(range(len(container))) if isinstance(container, list) else []
    return [key] if isinstance(container, dict) else []


@dataclasses.dataclass(frozen=True, slots=True)
class _Rule:
    path: _Path
    change: str
    sent: Any  # the canonical sent value (rewritten only)


def _contradicted(rule: _Rule, sent: Any, kept: Any) -> bool:
    """Whether a write of ``sent`` that the server kept as ``kept`` shows that ``rule``
    no longer holds (the field was kept, no default was filled in, the value stayed)."""
    *head, last = rule.path
    for sent_parent, kept_parent in _parents(sent, kept, tuple(head)):
        for slot in _slots(sent_parent, last):
            if isinstance(sent_parent, dict):
                sent_has = slot in sent_parent
                kept_has = isinstance(kept_parent, dict) and slot in kept_parent
            else:
                sent_has = True
                kept_has = isinstance(kept_parent, list) and slot < len(kept_parent)
            if rule.change == _PRUNED and sent_has and kept_has:
                return True
            if rule.change == _DEFAULTED and not sent_has and not kept_has:
                return True
            if (
                rule.change == _REWRITTEN
                and sent_has
                and kept_has
                and _canonical(sent_parent[slot]) == rule.sent
                and _canonical(kept_parent[slot]) == rule.sent
            ):
                return True
    return False


class ServerChanges:
    """See the module docstring."""

    def __init__(
        self,
        *,
        volatile: Collection[str] = (),
        max_learned: int = 256,
        relearn_after: float = 600.0,
        clock: clock_.Clock | None = None,
    ) -> None:
        """``volatile``: field names never compared (at any depth). ``max_learned``:
        how many changes to remember, default 256. ``relearn_after``: seconds a
        learned change is trusted without being seen again, default 600.
        ``clock``: default :class:`runtime.clock.RealClock`."""
        self.volatile = frozenset(volatile)
        self.max_learned = max_learned
        self.relearn_after = relearn_after
        self.clock = clock or clock_.RealClock()
        self.log = structlog.get_logger("runtime.status")
        # (apiVersion, kind) -> rule -> the kept value, and when each rule was last seen
        # (oldest first).
        self._learned: dict[TypeKey, dict[_Rule, Any]] = {}
        self._order: collections.OrderedDict[tuple[TypeKey, _Rule], float] = (
            collections.OrderedDict()
        )
        self._warned: collections.OrderedDict[tuple[str, str], None] = collections.OrderedDict()

    def learned(self) -> list[tuple[str, str, str]]:
        """What the server was seen to change, as ``(kind, field, change)``, oldest first."""
        return [(kind[1], _field(rule.path), rule.change) for kind, rule in self._order]

    def means(self, type_key: TypeKey, have: Any, want: Any) -> bool:
        """Whether status ``have`` already means ``want``, on the server's terms (the
        changes learned for ``type_key`` applied to ``want``)."""
        have_n, want_n = self._top(have), self._top(want)
        if have_n == want_n:
            return True
        rules = self._learned.get(type_key)
        if not rules:
            return False
        expired = self.clock.now() - self.relearn_after
        for rule in [r for r in rules if self._order[(type_key, r)] < expired]:
            self._forget(type_key, rule)  # trusted long enough: let a write confirm it
        for rule in sorted(rules, key=lambda r: _ORDER[r.change]):
            self._apply(rule, rules[rule], want_n, have_n)
        return bool(have_n == want_n)

    @staticmethod
    def _apply(rule: _Rule, kept: Any, want: Any, have: Any) -> None:
        """Rewrite ``want`` (and, for a default that varies, ``have``) in place, as the
        server would treat ``want``."""
        *head, last = rule.path
        for want_parent, have_parent in list(_parents(want, have, tuple(head))):
            for slot in _slots(want_parent, last):
                present = slot in want_parent if isinstance(want_parent, dict) else True
                if rule.change == _PRUNED:
                    want_parent.pop(slot, None)
                elif rule.change == _DEFAULTED and not present:
                    if kept is _VARIES:
                        if isinstance(have_parent, dict):
                            have_parent.pop(slot, None)
                    else:
                        want_parent[slot] = copy.deepcopy(kept)
                elif (
                    rule.change == _REWRITTEN
                    and present
                    and _canonical(want_parent[slot]) == rule.sent
                ):
                    want_parent[slot] = copy.deepcopy(kept)

    def learn(self, type_key: TypeKey, sent: Any, kept: Any) -> None:
        sent_n, kept_n = self._top(sent), self._top(kept)
        rules = self._learned.setdefault(type_key, {})
        for rule in [r for r in rules if _contradicted(r, sent_n, kept_n)]:
            self._forget(type_key, rule)  # e.g. the CRD's schema has the field now
        if sent_n == kept_n:
            return
        kind = type_key[1]
        counted: set[str] = set()
        for path, change, sent_value, kept_value in _diff(sent_n, kept_n):
            if not path:
                continue  # not a status object at all: nothing to learn from
            field = _field(path)
            if field not in counted:
                counted.add(field)
                self._count_mismatch(kind, field)
            rule = _Rule(path, change, _canonical(sent_value) if change == _REWRITTEN else None)
            known = rule in rules
            value = kept_value
            if change == _DEFAULTED and known:
                previous = rules[rule]
                if previous is _VARIES or _canonical(previous) != _canonical(kept_value):
                    value = _VARIES
            rules[rule] = value
            self._order.pop((type_key, rule), None)
            self._order[(type_key, rule)] = self.clock.now()
            if (kind, field) not in self._warned:
                self._warned[(kind, field)] = None
                if len(self._warned) > self.max_learned:
                    self._warned.popitem(last=False)
                self.log.warning(
                    "the API server changed a status field it was sent; later status "
                    "writes are compared on its terms",
                    kind=kind,
                    field=field,
                    change=change,
                )
        while len(self._order) > self.max_learned:
            self._forget(*next(iter(self._order)))

    def _forget(self, type_key: TypeKey, rule: _Rule) -> None:
        del self._order[(type_key, rule)]
        rules = self._learned[type_key]
        del rules[rule]
        if not rules:
            del self._learned[type_key]

    @staticmethod
    def _count_mismatch(kind: str, field: str) -> None:
        if (kind, field) not in _mismatch_series:
            if len(_mismatch_series) >= _MAX_MISMATCH_SERIES:
                field = "other"
            _mismatch_series.add((kind, field))
        _mismatches.counter(kind, field).inc()

    def _top(self, value: Any) -> Any:
        return equality.normalize_top(value, self.volatile)
