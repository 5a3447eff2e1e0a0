"""Sources: where a controller's requests come from.

A :class:`Source` is started once by its controller with the controller's work
queue and from then on adds :class:`~runtime.reconcile.Request` keys to it.
``start`` **must not block**: it wires the source up and returns (an informer
keeps running elsewhere; a channel just remembers the queue).

A source that feeds from a cache may also be a :class:`SyncingSource`: the
controller then waits for ``wait_for_sync()`` (bounded by its
``cache_sync_timeout``) before its workers take the first key, so no reconcile
ever sees a half-filled cache.

:class:`Channel` is the in-process source: requests handed to :meth:`Channel.send`
are added to every queue it was started with (requests sent before start are
kept and delivered on start). Use it for triggers that do not come from the
API server (a webhook, a timer, a test).

:class:`Kind` is the informer-backed source: changes to one resource, seen
through a :class:`~runtime.cache.Cache`, filtered by predicates and mapped to
requests by a handler (the object itself by default, or its controller owner).
It is a :class:`SyncingSource`. With ``delay`` > 0 its requests are added
after that many seconds (``add_after``): a burst of changes to a parent's
children - pods turning Running one by one - then costs one reconcile that
sees them all, instead of one per change, and a status written once instead
of once per step. The queue keeps the earliest time for a key, so the first
change of a burst sets when the reconcile runs; later changes ride along.

>>> import asyncio
>>> from runtime.reconcile import Request
>>> from runtime.workqueue import Queue
>>> async def demo():
...     channel = Channel()
...     channel.send(Request("ns", "early"))
...     q = Queue()
...     await channel.start(q)
...     channel.send(Request("ns", "late"))
...     return [str(await q.get()), str(await q.get())]
>>> asyncio.run(demo())
['ns/early', 'ns/late']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from runtime import handler as handler_
from runtime import predicate as predicate_
from runtime import reconcile
from runtime.cache import cache as cache_
from runtime.cache import informer as informer_
from runtime.client import resources

__all__ = ["Channel", "Kind", "RequestQueue", "Source", "SyncingSource"]


class RequestQueue(Protocol):
    """The part of a work queue a source may use."""

    def add(self, item: reconcile.Request) -> None: ...

    def add_after(self, item: reconcile.Request, delay: float) -> None: ...


@runtime_checkable
class Source(Protocol):
    """Feeds requests into a controller's queue."""

    async def start(self, queue: RequestQueue) -> None:
        """Start adding requests to ``queue``; must return without waiting for events."""
        ...


@runtime_checkable
class SyncingSource(Source, Protocol):
    """A source backed by a cache that must be filled before reconciling."""

    async def wait_for_sync(self) -> None:
        """Return once the backing cache holds a complete view."""
        ...


class Channel:
    """An in-process source: :meth:`send` adds a request to every started queue."""

    def __init__(self) -> None:
        self._queues: list[RequestQueue] = []
        self._pending: list[reconcile.Request] = []

    async def start(self, queue: RequestQueue) -> None:
        self._queues.append(queue)
        for request in self._pending:
            queue.add(request)
        self._pending.clear()

    def send(self, request: reconcile.Request) -> None:
        """Enqueue ``request`` now (or on start, if no queue is attached yet)."""
        if not self._queues:
            self._pending.append(request)
            return
        for queue in self._queues:
            queue.add(request)


class Kind:
    """Changes to ``resource`` from ``cache``, filtered by ``predicates`` (all must
    pass) and mapped to requests by ``handler`` (default: the object itself),
    enqueued ``delay`` seconds later (default 0: at once)."""

    def __init__(
        self,
        cache: cache_.Cache,
        resource: resources.Resource,
        handler: handler_.EventHandler | None = None,
        predicates: Sequence[predicate_.Predicate] = (),
        *,
        delay: float = 0.0,
    ) -> None:
        if delay < 0:
            raise ValueError("delay must be >= 0")
        self.cache = cache
        self.resource = resource
        self.handler = handler or handler_.for_object()
        self.predicates = tuple(predicates)
        self.delay = delay

    async def start(self, queue: RequestQueue) -> None:
        handler, predicates, delay = self.handler, self.predicates, self.delay

        def on_event(event: informer_.Event) -> None:
            for predicate in predicates:
                if not predicate(event):
                    return
            for request in handler(event):
                if delay:
                    queue.add_after(request, delay)
                else:
                    queue.add(request)

        informer = self.cache.informer(self.resource)
        informer.add_handler(on_event)
        informer.start()  # idempotent; a manager's cache may have started it already

    async def wait_for_sync(self) -> None:
        await self.cache.informer(self.resource).wait_for_sync()

    def __repr__(self) -> str:
        return f"Kind({self.resource})"
