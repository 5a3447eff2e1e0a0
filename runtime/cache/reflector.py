"""The reflector: keeps a :class:`~runtime.cache.store.Store` equal to the server, by list + watch.

Contract (client-go's reflector, in our words):

1. **List** every page (500 per page); the first list asks for
   ``resourceVersion=0`` (served from the apiserver's watch cache, cheap), a
   relist asks for ``""`` (a consistent read from etcd). The store is
   **replaced** (:meth:`~runtime.cache.store.Store.replace` with the list's
   resourceVersion; a namespaced reflector replaces only its namespace's part of
   a store it may share with others): objects that vanished are reported as
   deletes, but what our own writes put in the store after the list's snapshot is
   neither rolled back nor reported deleted.
2. **Watch** from the list's resourceVersion with ``allowWatchBookmarks=true`` and
   a random ``timeoutSeconds`` in [5 min, 10 min] (so many clients do not
   reconnect in step). ADDED/MODIFIED upsert, DELETED removes (leaving a
   tombstone at its resourceVersion), BOOKMARK only advances the resourceVersion.
   A watch that ends normally is resumed from the last resourceVersion seen,
   without a list.
3. **410 Gone** (or an ``Expired`` error event) means our resourceVersion was
   compacted away: relist (consistent) and replace.
4. Transport and API errors (connection lost, 5xx, a watch silent past the
   client's inactivity timeout, an undecodable line) back off and resume the watch
   (or retry the list). **Any other exception** - a bug, a surprise from a library -
   is logged with its traceback, backed off, and followed by a consistent relist,
   since the store may have missed events: the loop ends only when cancelled, so
   a cache never stays "synced" while frozen. Every error (not 410) counts in
   ``reflector_errors_total{resource}``. The backoff is 0.8 s doubling up to 30 s,
   each wait drawn uniformly from (0, that] (full jitter, never above the cap),
   and starts over after 2 min without errors.
5. A watch event older than what the store holds (a write-through of our own
   newer write got there first) does not roll the store back, nor does one at or
   below a tombstone bring a deleted object back.

6. ``label_selector`` and ``field_selector`` are sent on every list and watch: the
   store holds only the objects that match, and an object that stops matching
   arrives as DELETED (the server sends that), so it leaves the store.

7. ``watch_list=True`` replaces step 1 by one watch with ``sendInitialEvents``
   (WatchList, on by default in the apiserver since 1.32): the initial state
   arrives as ADDED events up to a BOOKMARK annotated
   ``k8s.io/initial-events-end``, the store is replaced there, and the same
   stream goes on as the watch. A server that refuses it gets list+watch.

Every change is reported to ``on_event(type, obj, old)`` with type ``"add"``,
``"update"`` or ``"delete"``, in the order the server sent them; ``on_synced()``
is called after the first successful list.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Callable

import aiohttp
import structlog

from runtime import clock as clock_
from runtime import metrics
from runtime.cache import store as store_
from runtime.client import client as client_
from runtime.client import errors, resources

__all__ = ["Backoff", "EventHandler", "Reflector"]

EventHandler = Callable[[str, store_.Obj, store_.Obj | None], None]

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
"""The annotation on the BOOKMARK that ends a watch-list's initial events."""


_errors = metrics.Family(
    "reflector_errors_total",
    "List and watch errors by resource (any error but 410 Gone); each is backed off",
    "counter",
    ("resource",),
)

_TRANSIENT = (errors.ApiError, aiohttp.ClientError, TimeoutError, json.JSONDecodeError)
"""Errors after which the watch is resumed (or the list retried) without a relist."""


class Backoff:
    """Exponential backoff with full jitter: the ``n``-th wait in a row is drawn uniformly
    from ``(0, d]`` with ``d = min(initial * 2**n, cap)``, so it never exceeds ``cap``;
    the sequence starts over once ``reset_after`` seconds passed since the last failure."""

    def __init__(
        self, initial: float = 0.8, cap: float = 30.0, reset_after: float = 120.0,
        clock: clock_.Clock | None = None, rng: random.Random | None = None,
    ) -> None:  # fmt: skip
        self.initial, self.cap, self.reset_after = initial, cap, reset_after
        self._clock = clock or clock_.REAL_CLOCK
        self._rng = rng or random.Random()
        self._next = initial
        self._last_failure: float | None = None

    def next(self) -> float:
        now = self._clock.now()
        if self._last_failure is not None and now - self._last_failure > self.reset_after:
            self._next = self.initial
        self._last_failure = now
        ceiling = min(self._next, self.cap)
        self._next = min(self._next * 2, self.cap)
        return ceiling * (1.0 - self._rng.random())  # random() is in [0, 1)


class Reflector:
    """Lists and watches one resource into a store (see the module docstring)."""

    def __init__(
        self,
        client: client_.Client,
        resource: resources.Resource,
        store: store_.Store,
        on_event: EventHandler,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        on_synced: Callable[[], None] | None = None,
        page_size: int = 500,
        min_watch_timeout: int = 300,
        backoff: Backoff | None = None,
        watch_list: bool = False,
    ) -> None:
        self.client = client
        self.resource = resource
        self.store = store
        self.on_event = on_event
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.on_synced = on_synced
        self.page_size = page_size
        self.min_watch_timeout = min_watch_timeout
        self.backoff = backoff or Backoff()
        self.watch_list = watch_list
        self.resource_version: str | None = None
        self.lists = 0
        """Lists done so far (the first, plus one per relist)."""
        self.log = structlog.get_logger("runtime.cache").bind(resource=str(resource))

    async def run(self) -> None:
        """List and watch until cancelled."""
        relist_consistent = False
        need_list = True
        while True:
            try:
                if need_list and self.watch_list:
                    try:
                        await self._watch_list()  # lists and goes on watching, one stream
                        need_list = False
                        continue
                    except (errors.BadRequest, errors.Invalid, errors.Forbidden) as exc:
                        self.log.warning("watch-list refused; using list+watch", error=str(exc))
                        self.watch_list = False
                if need_list:
                    await self._list("" if relist_consistent else "0")
                    need_list = False
                await self._watch()
            except asyncio.CancelledError:
                raise
            except errors.Gone as exc:
                self.log.info("resourceVersion expired; relisting", error=str(exc))
                need_list, relist_consistent = True, True
            except _TRANSIENT as exc:
                _errors.counter(str(self.resource)).inc()
                delay = self.backoff.next()
                self.log.warning(
                    "list/watch failed; backing off", error=repr(exc), retry_in_s=round(delay, 2)
                )
                await asyncio.sleep(delay)
            except Exception as exc:
                _errors.counter(str(self.resource)).inc()
                delay = self.backoff.next()
                self.log.error(
                    "list/watch failed unexpectedly; backing off, then relisting",
                    error=repr(exc), retry_in_s=round(delay, 2), exc_info=exc,
                )  # fmt: skip
                need_list, relist_consistent = True, True
                await asyncio.sleep(delay)

    async def _list(self, resource_version: str) -> None:
        result = await self.client.list(
            self.resource,
            self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            resource_version=resource_version,
            page_size=self.page_size,
        )
        self._replace(result.items, result.resource_version)

    def _replace(self, items: list[store_.Obj], resource_version: str) -> None:
        scope = self.namespace if self.resource.namespaced else None
        upserted, deleted = self.store.replace(items, resource_version, namespace=scope)
        self.resource_version = resource_version
        self.lists += 1
        for obj, old in upserted:
            self.on_event("add" if old is None else "update", obj, old)
        for gone in deleted:
            self.on_event("delete", gone, None)
        if self.lists == 1 and self.on_synced is not None:
            self.on_synced()

    def _timeout(self) -> int:
        return random.randint(self.min_watch_timeout, 2 * self.min_watch_timeout)

    async def _watch_list(self) -> None:
        """The initial state as a stream of ADDED events ending at a BOOKMARK annotated
        ``k8s.io/initial-events-end``, then the same stream goes on as a watch. No big list
        response is ever held in memory (``watch_list=True``)."""
        events = self.client.watch(
            self.resource,
            self.namespace,
            timeout_seconds=self._timeout(),
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            allow_bookmarks=True,
            send_initial_events=True,
        )
        initial: list[store_.Obj] = []
        async for event in events:
            obj = event.get("object") or {}
            meta = obj.get("metadata") or {}
            if event.get("type") == "ADDED":
                initial.append(obj)
            elif event.get("type") == "BOOKMARK":
                annotations = meta.get("annotations") or {}
                if annotations.get(INITIAL_EVENTS_END) == "true":
                    self._replace(initial, meta.get("resourceVersion", ""))
                    break
        else:
            raise TimeoutError("the watch ended before its initial events did")
        await self._consume(events)

    async def _watch(self) -> None:
        events = self.client.watch(
            self.resource,
            self.namespace,
            resource_version=self.resource_version,
            timeout_seconds=self._timeout(),
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            allow_bookmarks=True,
        )
        await self._consume(events)

    async def _consume(self, events: AsyncIterator[client_.WatchEvent]) -> None:
        store = self.store
        async for event in events:
            kind = event.get("type")
            obj = event.get("object") or {}
            rv = obj.get("metadata", {}).get("resourceVersion")
            if kind == "BOOKMARK":
                self.resource_version = rv
                continue
            if kind in ("ADDED", "MODIFIED"):
                applied = store.upsert_if_newer(obj)
                if applied is not None:
                    stored, old = applied
                    self.on_event("add" if old is None else "update", stored, old)
            elif kind == "DELETED":
                gone = store.delete(store_.key_for(obj), rv)
                if gone is not None:
                    self.on_event("delete", gone, None)
            if rv:
                self.resource_version = rv
