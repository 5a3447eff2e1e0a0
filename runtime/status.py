"""The status writer: write status only when it changed, safely under concurrency.

``await writer.update(obj, new_status)`` is the one call a reconciler makes at
the end of a pass. It decides, in order:

1. **Skip** when ``new_status`` means the same as ``obj["status"]`` (see
   :func:`equal`: key order does not matter, ``1 == 1.0``, ``None``, ``{}`` and
   ``[]`` equal an absent key, quantities compare by value), ignoring the fields
   named in ``volatile`` (e.g. ``lastUpdateTime``, at any depth) - **on the
   server's terms** (step 4). Nothing is sent; the outcome is ``SKIPPED``. This
   is the rule that removes KubeRay's write-per-reconcile.
2. Otherwise **write** the status subresource carrying ``obj``'s
   resourceVersion (optimistic concurrency), after stamping the ``stamps``
   fields (e.g. ``lastUpdateTime`` = now) - only on a real write. Outcome
   ``WRITTEN``. With a ``latest`` reader (the cache: ``StatusWriter(client,
   latest=cache)``), the object is first looked up there: another writer may have
   changed it since the pass read it (a label, an annotation, a finalizer). A newer
   copy of the **same generation** is the base of the write instead (its
   resourceVersion, and step 1 against its status), so a metadata change elsewhere
   costs no 409; a newer generation means the status is stale: ``STALE`` at once,
   without a request (the change's own watch event has queued the next pass).
3. On **409 Conflict**, re-read the object from the API server (not the cache,
   which may be what is stale) and:

   - if its ``metadata.generation`` differs from the generation ``new_status`` was
     computed from (``obj``'s), the status is stale: return ``STALE`` and let the
     caller requeue and recompute (never write a status computed for an old spec);
   - if the fresh status already means ``new_status`` (as in step 1), return
     ``CONFLICT_RESOLVED`` without writing;
   - else write again on the fresh resourceVersion; ``CONFLICT_RESOLVED`` on
     success. Attempts are bounded (``max_attempts``, default 5, tenacity with a
     jittered 10 ms wait, like client-go's ``RetryOnConflict``); running out
     raises the last :class:`~runtime.client.errors.Conflict`.
4. After every write, **compare what the server kept with what was sent**. A
   CRD's structural schema prunes fields it does not declare and fills in
   defaults; a webhook may rewrite values. Left alone that is a loop: the
   stored status never equals the desired one, so every reconcile writes, each
   write's new ``lastUpdateTime`` is a watch event, and the event is another
   reconcile. So for each differing field the writer logs one warning (per
   kind and field, while remembered), counts
   ``status_write_mismatch_total{kind,field}`` (per write), and **learns the
   change per kind** (apiVersion and kind; list positions are generalised to
   ``[*]``, so ``status.conditions[*].extra`` covers every condition):

   - *pruned*: the field is dropped from the desired status before comparing
     (whatever its value: the server keeps none);
   - *defaulted*: where the desired status leaves the field out, the server's
     value is filled in before comparing; if objects of the kind get different
     values (a webhook, not a schema), the field is left to the server: where
     the desired status leaves it out, it is not compared;
   - *rewritten*: where the desired status has the value that was sent, the
     value the server kept is compared instead.

   Step 1 compares ``new_status`` after these rewrites, so a status the server
   changes is written once, not on every reconcile, and what one object taught
   applies to every object of its kind. The body sent is always ``new_status``
   as given (plus stamps). A learned change is forgotten when a later write
   shows it no longer happens, and after ``relearn_after`` seconds (default
   600) without being seen again - so a CRD upgraded under a running operator
   costs at most one write per kind to notice. What is learned is bounded: at
   most ``max_learned`` changes (default 256) per writer, least recently seen
   forgotten first.

Every outcome is counted in ``status_writes_total{kind,outcome}``.

The written object is returned by the client to the cache (write-through), so
the next reconcile compares against what was just written; :attr:`Result.obj`
may therefore be the cache's own object: treat it as read-only.

>>> equal({"a": 1, "b": None, "lastUpdateTime": "x"}, {"a": 1.0, "lastUpdateTime": "y"},
...       volatile={"lastUpdateTime"})
True
>>> equal({"limits": {"cpu": "1000m"}, "labels": {}}, {"limits": {"cpu": 1}})
True
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import datetime
import enum
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, Protocol

import structlog
import tenacity

from runtime import clock as clock_
from runtime import metrics, quantity
from runtime.client import errors, resources

__all__ = [
    "LatestReader",
    "Outcome",
    "Result",
    "StatusClient",
    "StatusWriter",
    "equal",
    "normalize",
    "rfc3339_now",
]

Obj = dict[str, Any]

_writes = metrics.Family(
    "status_writes_total",
    "Status updates by kind and outcome (written, skipped, conflict_resolved, stale)",
    "counter",
    ("kind", "outcome"),
)
_mismatches = metrics.Family(
    "status_write_mismatch_total",
    "Status writes whose answer differed from what was sent, by kind and field "
    "(pruned or defaulted by a CRD schema, or rewritten by the server)",
    "counter",
    ("kind", "field"),
)
_MAX_MISMATCH_SERIES = 256
_mismatch_series: set[tuple[str, str]] = set()

# Where Kubernetes has a resource.Quantity (see normalize): the values of maps
# under these keys (ResourceRequirements, ResourceList fields) ...
QUANTITY_MAPS = frozenset({
    "limits", "requests", "capacity", "allocatable", "allocatedResources", "hard", "used",
    "overhead",
})  # fmt: skip
# ... and these (parent key, key) fields.
QUANTITY_FIELDS = frozenset({("emptyDir", "sizeLimit"), ("resourceFieldRef", "divisor")})
# Fields where an empty object means something that absence does not (see normalize).
MEANINGFUL_EMPTY = frozenset({"emptyDir", "podSelector", "namespaceSelector", "labelSelector"})


class Outcome(enum.Enum):
    WRITTEN = "written"
    SKIPPED = "skipped"
    CONFLICT_RESOLVED = "conflict_resolved"
    STALE = "stale"


@dataclasses.dataclass(frozen=True, slots=True)
class Result:
    """What happened, and the object as the server has it now (``obj`` if nothing was
    sent). Read-only: after a write it may be the object the cache holds."""

    outcome: Outcome
    obj: Obj
    writes: int = 0

    @property
    def requeue(self) -> bool:
        """True when the caller should requeue (the status was computed for an old spec)."""
        return self.outcome is Outcome.STALE


class LatestReader(Protocol):
    """Where the newest known copy of an object is (a cache's ``get``)."""

    async def get(self, resource: resources.Resource, namespace: str | None, name: str) -> Obj: ...


class StatusClient(Protocol):
    """The client calls the writer needs (satisfied by :class:`runtime.client.Client`
    and by :class:`runtime.testing.fake.FakeClient`)."""

    def resource_for(self, obj: Obj) -> resources.Resource: ...

    async def get(self, resource: resources.Resource, namespace: str | None, name: str) -> Obj: ...

    async def update_status(self, obj: Obj) -> Obj: ...


def normalize(value: Any, volatile: Collection[str] = ()) -> Any:
    """``value`` in a form where ``==`` is semantic equality (a new structure; ``value``
    is not modified). The rules, like apimachinery's ``equality.Semantic.DeepEqual``:

    - keys whose value is ``None``, ``{}`` or ``[]`` (after normalising it) are
      dropped, at every depth: Kubernetes omits empty maps and lists, so they
      mean the same as absent ones (list items are kept: ``[{}]`` is not ``[]``).
      Except for the keys in :data:`MEANINGFUL_EMPTY`, where ``{}`` is a value:
      ``emptyDir: {}`` is a volume source, and an empty ``podSelector``,
      ``namespaceSelector`` or ``labelSelector`` selects everything where an
      absent one selects nothing or only the own namespace. ``selector`` is not
      among them (a Service's is a map the server drops when empty), so an empty
      label selector under that name is taken for an absent one;
    - keys named in ``volatile`` are dropped, at every depth;
    - **quantities**, only where Kubernetes types a field ``resource.Quantity``:
      the values of a map under a key in :data:`QUANTITY_MAPS` (``limits``,
      ``requests``, ``capacity``, ``allocatable``, ``allocatedResources``,
      ``hard``, ``used``, ``overhead``) and the fields in :data:`QUANTITY_FIELDS`
      (``emptyDir.sizeLimit``, ``resourceFieldRef.divisor``) become
      :class:`runtime.quantity.Quantity` values when they parse as one, so
      ``"1000m"``, ``"1"`` and ``1`` are equal there. Everywhere else a string is
      a string: an env var ``"1"`` is not ``"1000m"``, and a ConfigMap key named
      ``sizeLimit`` is not a quantity. (Quantities under generic names - a
      LimitRange's ``max``/``default``, an HPA target's ``value`` - are left out
      on purpose and compare as written);
    - numbers compare as Python numbers (``1 == 1.0``); an empty string, ``0`` and
      ``False`` are values, not absence.
    """
    return _normalize(value, frozenset(volatile), None)


def _normalize(value: Any, volatile: frozenset[str], parent: str | None) -> Any:
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if key in volatile:
                continue
            if (parent, key) in QUANTITY_FIELDS:
                item = _quantity(item, volatile)
            elif key in QUANTITY_MAPS and isinstance(item, Mapping):
                item = {k: _quantity(v, volatile) for k, v in item.items() if v is not None}
            else:
                item = _normalize(item, volatile, key)
            if not _empty(item) or (key in MEANINGFUL_EMPTY and item == {}):
                out[key] = item
        return out
    if isinstance(value, list | tuple):
        return [_normalize(item, volatile, None) for item in value]
    return value


def _quantity(value: Any, volatile: frozenset[str]) -> Any:
    parsed = quantity.parse_or_none(value)
    return parsed if parsed is not None else _normalize(value, volatile, None)


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, dict | list) and not value)


def _top(value: Any, volatile: frozenset[str]) -> Any:
    normal = _normalize(value, volatile, None)
    return {} if _empty(normal) else normal


def equal(a: Any, b: Any, *, volatile: Collection[str] = ()) -> bool:
    """Semantic equality of two JSON values (the rules are :func:`normalize`'s)."""
    frozen = frozenset(volatile)
    return bool(_top(a, frozen) == _top(b, frozen))


def rfc3339_now() -> str:
    """Now, as Kubernetes writes timestamps (``2024-01-02T03:04:05Z``)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- what the server does to what we write ---------------------------------------------------

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


class StatusWriter:
    """See the module docstring."""

    def __init__(
        self,
        client: StatusClient,
        *,
        volatile: Collection[str] = (),
        stamps: Mapping[str, Callable[[], Any]] | None = None,
        max_attempts: int = 5,
        max_learned: int = 256,
        relearn_after: float = 600.0,
        clock: clock_.Clock | None = None,
        latest: LatestReader | None = None,
    ) -> None:
        """``volatile``: field names ignored by the comparison at any depth.
        ``stamps``: top-level status fields set to ``factory()`` on every real write.
        ``max_learned``: how many server changes to remember (step 4), default 256.
        ``relearn_after``: seconds a learned change is trusted without being seen
        again, default 600. ``clock``: default :class:`runtime.clock.RealClock`.
        ``latest``: where to find a newer copy of the object before writing (step 2)."""
        self.client = client
        self.volatile = frozenset(volatile)
        self.stamps = dict(stamps or {})
        self.max_attempts = max_attempts
        self.max_learned = max_learned
        self.relearn_after = relearn_after
        self.clock = clock or clock_.RealClock()
        self.latest = latest
        self.log = structlog.get_logger("runtime.status")
        # (apiVersion, kind) -> rule -> the kept value, and when each rule was last seen
        # (oldest first).
        self._learned: dict[tuple[str, str], dict[_Rule, Any]] = {}
        self._order: collections.OrderedDict[tuple[tuple[str, str], _Rule], float] = (
            collections.OrderedDict()
        )
        self._warned: collections.OrderedDict[tuple[str, str], None] = collections.OrderedDict()

    def learned(self) -> list[tuple[str, str, str]]:
        """What the server was seen to change, as ``(kind, field, change)``, oldest first."""
        return [(kind[1], _field(rule.path), rule.change) for kind, rule in self._order]

    async def update(self, obj: Obj, new_status: Mapping[str, Any]) -> Result:
        """Write ``new_status`` for ``obj`` if it means something new (see the module docstring).

        ``obj`` is not modified (it may be a read-only cached object).
        """
        kind = str(obj.get("kind", ""))
        type_key = (str(obj.get("apiVersion", "")), kind)
        generation = obj.get("metadata", {}).get("generation")
        obj = await self._newest(obj)
        if obj.get("metadata", {}).get("generation") != generation:
            return self._count(kind, Result(Outcome.STALE, obj))
        if self._means(type_key, obj.get("status"), new_status):
            return self._count(kind, Result(Outcome.SKIPPED, obj))
        current = obj
        writes = 0
        conflicted = False
        retrying = tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception_type(errors.Conflict),
            wait=tenacity.wait_random(0.005, 0.015),
            stop=tenacity.stop_after_attempt(self.max_attempts),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                if conflicted:
                    meta = obj["metadata"]
                    current = await self.client.get(
                        self.client.resource_for(obj), meta.get("namespace"), meta["name"]
                    )
                    if current.get("metadata", {}).get("generation") != generation:
                        return self._count(kind, Result(Outcome.STALE, current, writes))
                    if self._means(type_key, current.get("status"), new_status):
                        return self._count(kind, Result(Outcome.CONFLICT_RESOLVED, current, writes))
                body = self._body(current, new_status)
                try:
                    written = await self.client.update_status(body)
                    writes += 1
                except errors.Conflict:
                    conflicted = True
                    raise
        self._learn(type_key, body["status"], written.get("status"))
        outcome = Outcome.CONFLICT_RESOLVED if conflicted else Outcome.WRITTEN
        return self._count(kind, Result(outcome, written, writes))

    async def _newest(self, obj: Obj) -> Obj:
        """``obj``, or the ``latest`` reader's copy of it when that one is newer."""
        if self.latest is None:
            return obj
        meta = obj.get("metadata", {})
        try:
            found = await self.latest.get(
                self.client.resource_for(obj), meta.get("namespace"), meta["name"]
            )
        except (errors.NotFound, LookupError):
            return obj  # gone, or not readable there: the write will tell
        mine, theirs = meta.get("resourceVersion"), found.get("metadata", {}).get("resourceVersion")
        if not mine or not theirs or mine == theirs:
            return obj
        try:
            newer = int(theirs) > int(mine)  # etcd's revisions; opaque to clients in theory
        except ValueError:
            newer = True
        return found if newer else obj

    def _means(self, type_key: tuple[str, str], have: Any, want: Any) -> bool:
        """Whether status ``have`` already means ``want``, on the server's terms."""
        have_n, want_n = _top(have, self.volatile), _top(want, self.volatile)
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

    def _learn(self, type_key: tuple[str, str], sent: Any, kept: Any) -> None:
        sent_n, kept_n = _top(sent, self.volatile), _top(kept, self.volatile)
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

    def _forget(self, type_key: tuple[str, str], rule: _Rule) -> None:
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

    def _body(self, current: Obj, new_status: Mapping[str, Any]) -> Obj:
        status = copy.deepcopy(dict(new_status))
        for field, factory in self.stamps.items():
            status[field] = factory()
        body = {k: v for k, v in current.items() if k != "status"}
        body["metadata"] = dict(current["metadata"])
        body["status"] = status
        return body

    @staticmethod
    def _count(kind: str, result: Result) -> Result:
        _writes.counter(kind, result.outcome.value).inc()
        return result
