"""The status writer: write status only when it changed, safely under concurrency.

``await writer.update(obj, new_status)`` is the one call a reconciler makes at
the end of a pass. It decides, in order:

1. **Skip** when ``new_status`` means the same as ``obj["status"]``. "The same"
   is semantic: key order does not matter, ``1 == 1.0``, a key whose value is
   ``None`` equals an absent key, and the fields named in ``volatile`` (e.g.
   ``lastUpdateTime``, at any depth) are ignored. Nothing is sent; the outcome is
   ``SKIPPED``. This is the rule that removes KubeRay's write-per-reconcile.
2. Otherwise **write** the status subresource carrying ``obj``'s
   resourceVersion (optimistic concurrency), after stamping the ``stamps``
   fields (e.g. ``lastUpdateTime`` = now) - only on a real write. Outcome
   ``WRITTEN``.
3. On **409 Conflict**, re-read the object from the API server (not the cache,
   which may be what is stale) and:

   - if its ``metadata.generation`` differs from the generation ``new_status`` was
     computed from (``obj``'s), the status is stale: return ``STALE`` and let the
     caller requeue and recompute (never write a status computed for an old spec);
   - if the fresh status already means ``new_status``, return ``CONFLICT_RESOLVED``
     without writing;
   - else write again on the fresh resourceVersion; ``CONFLICT_RESOLVED`` on
     success. Attempts are bounded (``max_attempts``, default 5, tenacity with a
     jittered 10 ms wait, like client-go's ``RetryOnConflict``); running out
     raises the last :class:`~runtime.client.errors.Conflict`.

Every outcome is counted in ``status_writes_total{kind,outcome}``.

The written object is returned by the client to the cache (write-through), so
the next reconcile compares against what was just written.

>>> equal({"a": 1, "b": None, "lastUpdateTime": "x"}, {"a": 1.0, "lastUpdateTime": "y"},
...       volatile={"lastUpdateTime"})
True
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import enum
from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol

import tenacity

from runtime import metrics
from runtime.client import errors, resources

__all__ = ["Outcome", "Result", "StatusClient", "StatusWriter", "equal", "normalize", "rfc3339_now"]

Obj = dict[str, Any]

_writes = metrics.Family(
    "status_writes_total",
    "Status updates by kind and outcome (written, skipped, conflict_resolved, stale)",
    "counter",
    ("kind", "outcome"),
)


class Outcome(enum.Enum):
    WRITTEN = "written"
    SKIPPED = "skipped"
    CONFLICT_RESOLVED = "conflict_resolved"
    STALE = "stale"


@dataclasses.dataclass(frozen=True, slots=True)
class Result:
    """What happened, and the object as the server has it now (``obj`` if nothing was sent)."""

    outcome: Outcome
    obj: Obj
    writes: int = 0

    @property
    def requeue(self) -> bool:
        """True when the caller should requeue (the status was computed for an old spec)."""
        return self.outcome is Outcome.STALE


class StatusClient(Protocol):
    """The client calls the writer needs (satisfied by :class:`runtime.client.Client`
    and by :class:`runtime.testing.fake.FakeClient`)."""

    def resource_for(self, obj: Obj) -> resources.Resource: ...

    async def get(self, resource: resources.Resource, namespace: str | None, name: str) -> Obj: ...

    async def update_status(self, obj: Obj) -> Obj: ...


def normalize(value: Any, volatile: Collection[str] = ()) -> Any:
    """``value`` with ``None``-valued and volatile keys dropped, at every depth."""
    if isinstance(value, Mapping):
        return {
            k: normalize(v, volatile)
            for k, v in value.items()
            if v is not None and k not in volatile
        }
    if isinstance(value, list | tuple):
        return [normalize(v, volatile) for v in value]
    return value


def equal(a: Any, b: Any, *, volatile: Collection[str] = ()) -> bool:
    """Semantic equality of two JSON values (see the module docstring)."""
    return bool(normalize(a or {}, volatile) == normalize(b or {}, volatile))


def rfc3339_now() -> str:
    """Now, as Kubernetes writes timestamps (``2024-01-02T03:04:05Z``)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class StatusWriter:
    """See the module docstring."""

    def __init__(
        self,
        client: StatusClient,
        *,
        volatile: Collection[str] = (),
        stamps: Mapping[str, Callable[[], Any]] | None = None,
        max_attempts: int = 5,
    ) -> None:
        """``volatile``: field names ignored by the comparison at any depth.
        ``stamps``: top-level status fields set to ``factory()`` on every real write."""
        self.client = client
        self.volatile = frozenset(volatile)
        self.stamps = dict(stamps or {})
        self.max_attempts = max_attempts

    async def update(self, obj: Obj, new_status: Mapping[str, Any]) -> Result:
        """Write ``new_status`` for ``obj`` if it means something new (see the module docstring).

        ``obj`` is not modified (it may be a read-only cached object).
        """
        kind = str(obj.get("kind", ""))
        if equal(obj.get("status"), new_status, volatile=self.volatile):
            return self._count(kind, Result(Outcome.SKIPPED, obj))
        generation = obj.get("metadata", {}).get("generation")
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
                    if equal(current.get("status"), new_status, volatile=self.volatile):
                        return self._count(kind, Result(Outcome.CONFLICT_RESOLVED, current, writes))
                try:
                    written = await self.client.update_status(self._body(current, new_status))
                    writes += 1
                except errors.Conflict:
                    conflicted = True
                    raise
        outcome = Outcome.CONFLICT_RESOLVED if conflicted else Outcome.WRITTEN
        return self._count(kind, Result(outcome, written, writes))

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
