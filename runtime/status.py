"""The status writer: write status only when it changed, safely under concurrency.

``await writer.update(obj, new_status)`` is the one call a reconciler makes at
the end of a pass. It decides, in order:

1. **Skip** when ``new_status`` means the same as ``obj["status"]`` (see
   :func:`runtime.equality.equal`: key order does not matter, ``1 == 1.0``, ``None``, ``{}`` and
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
   without a request (the change's own watch event has queued the next pass). The
   lookup and the write are made in the client's write turn for the object
   (:meth:`runtime.client.client.Client.writing`), so a write of this process to the
   same object (another controller's annotation) is either answered, and in the
   cache, before the lookup, or sent after this write: never a 409 between them.
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
the next reconcile compares against what was just written; :attr:`WriteResult.obj`
may therefore be the cache's own object: treat it as read-only.

Semantic equality is :mod:`runtime.equality`; what the server changes is learned by
:class:`runtime.serverchanges.ServerChanges`.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import enum
from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol

import tenacity

from runtime import clock as clock_
from runtime import metrics, serverchanges
from runtime.client import errors, resources

__all__ = ["LatestReader", "Outcome", "StatusClient", "StatusWriter", "WriteResult"]

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
class WriteResult:
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
        self.clock = clock or clock_.RealClock()
        self.latest = latest
        self.server = serverchanges.ServerChanges(
            volatile=volatile,
            max_learned=max_learned,
            relearn_after=relearn_after,
            clock=self.clock,
        )
        """What the server was seen to change (step 4 of the module docstring)."""

    def learned(self) -> list[tuple[str, str, str]]:
        """What the server was seen to change, as ``(kind, field, change)``, oldest first."""
        return self.server.learned()

    async def update(self, obj: Obj, new_status: Mapping[str, Any]) -> WriteResult:
        """Write ``new_status`` for ``obj`` if it means something new (see the module docstring).

        ``obj`` is not modified (it may be a read-only cached object).
        """
        async with self._turn(obj):
            return await self._update(obj, new_status)

    def _turn(self, obj: Obj) -> contextlib.AbstractAsyncContextManager[Any]:
        """The client's write turn for ``obj`` (:meth:`runtime.client.client.Client.writing`),
        held from reading the newest copy to the answer: another writer of this process
        (an annotation, a finalizer) is not sent meanwhile, so it cannot make this write a
        409. A client without turns (a fake) has none."""
        writing = getattr(self.client, "writing", None)
        if writing is None:
            return contextlib.nullcontext()
        meta = obj.get("metadata", {})
        turn: contextlib.AbstractAsyncContextManager[Any] = writing(
            self.client.resource_for(obj), meta.get("namespace"), meta["name"]
        )
        return turn

    async def _update(self, obj: Obj, new_status: Mapping[str, Any]) -> WriteResult:
        kind = str(obj.get("kind", ""))
        type_key = (str(obj.get("apiVersion", "")), kind)
        generation = obj.get("metadata", {}).get("generation")
        obj = await self._newest(obj)
        if obj.get("metadata", {}).get("generation") != generation:
            return self._count(kind, WriteResult(Outcome.STALE, obj))
        if self.server.means(type_key, obj.get("status"), new_status):
            return self._count(kind, WriteResult(Outcome.SKIPPED, obj))
        body = self._body(obj, new_status)
        # The first write runs outside tenacity (its loop costs ~35 us of CPU even when
        # nothing is retried); a conflict enters the loop as its attempt 1, replayed
        # without a request, so the waits and the attempt bound are the same.
        try:
            written = await self.client.update_status(body)
        except errors.Conflict as exc:
            if self.max_attempts <= 1:
                raise
            first: errors.Conflict | None = exc
        else:
            self.server.learn(type_key, body["status"], written.get("status"))
            return self._count(kind, WriteResult(Outcome.WRITTEN, written, 1))
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
                if first is not None:
                    replayed, first = first, None
                    conflicted = True
                    raise replayed
                if conflicted:
                    meta = obj["metadata"]
                    current = await self.client.get(
                        self.client.resource_for(obj), meta.get("namespace"), meta["name"]
                    )
                    if current.get("metadata", {}).get("generation") != generation:
                        return self._count(kind, WriteResult(Outcome.STALE, current, writes))
                    if self.server.means(type_key, current.get("status"), new_status):
                        return self._count(
                            kind, WriteResult(Outcome.CONFLICT_RESOLVED, current, writes)
                        )
                body = self._body(current, new_status)
                try:
                    written = await self.client.update_status(body)
                    writes += 1
                except errors.Conflict:
                    conflicted = True
                    raise
        self.server.learn(type_key, body["status"], written.get("status"))
        outcome = Outcome.CONFLICT_RESOLVED if conflicted else Outcome.WRITTEN
        return self._count(kind, WriteResult(outcome, written, writes))

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

    def _body(self, current: Obj, new_status: Mapping[str, Any]) -> Obj:
        status = copy.deepcopy(dict(new_status))
        for field, factory in self.stamps.items():
            status[field] = factory()
        body = {k: v for k, v in current.items() if k != "status"}
        body["metadata"] = dict(current["metadata"])
        body["status"] = status
        return body

    @staticmethod
    def _count(kind: str, result: WriteResult) -> WriteResult:
        _writes.counter(kind, result.outcome.value).inc()
        return result
