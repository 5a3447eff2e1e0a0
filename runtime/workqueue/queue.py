"""The work queue: a FIFO of keys with client-go's at-most-one-worker-per-key rule.

Three structures do the work:

- the FIFO ``queue`` of keys ready to be handed out;
- the ``dirty`` set: keys that need processing (queued, or re-added while processing);
- the ``processing`` set: keys a worker holds between :meth:`Queue.get` and :meth:`Queue.done`.

Rules, which are the contract:

1. :meth:`Queue.add` of a key that is already dirty does nothing: several adds
   before a worker takes the key collapse into one.
2. :meth:`Queue.add` of a key that is being processed marks it dirty but does not
   queue it: no two workers ever hold the same key. When the holder calls
   :meth:`Queue.done`, the key is queued again, once.
3. :meth:`Queue.get` hands out keys in FIFO order and waits while the queue is
   empty. After :meth:`Queue.shutdown` it still hands out what is queued, then
   raises :class:`ShutDown`.
4. After shutdown, adds are ignored. Waiting for the keys being processed to be
   done is the caller's business (a controller waits for its workers).

:meth:`Queue.wait_idle` waits until nothing is queued and nothing is being processed
(tests await it instead of letting the loop spin: "every event so far is handled").

Every key that :meth:`Queue.get` returns must be passed to :meth:`Queue.done`,
also when processing fails. The queue belongs to one event loop and is not
thread-safe. Keys must be hashable; :class:`runtime.reconcile.Request` is the
usual key.

>>> import asyncio
>>> async def demo():
...     q = Queue()
...     q.add("a"); q.add("b"); q.add("a")     # the second "a" collapses
...     first = await q.get()
...     q.add(first)                           # re-added while processing: not queued yet
...     order = [first, await q.get()]
...     q.done("a")                            # now "a" is queued again, once
...     q.done("b")
...     order.append(await q.get())
...     return order, len(q)
>>> asyncio.run(demo())
(['a', 'b', 'a'], 0)
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
from collections.abc import Hashable
from typing import Generic, TypeVar

from runtime import clock as clock_
from runtime.workqueue import metrics

__all__ = ["Queue", "ShutDown"]

T = TypeVar("T", bound=Hashable)


class ShutDown(Exception):
    """Raised by :meth:`Queue.get` once the queue is shut down and empty."""


class Queue(Generic[T]):
    """A FIFO work queue with dirty/processing sets (see the module docstring).

    ``name`` turns on the ``workqueue_*`` metrics for this queue; an unnamed queue
    reports none and reads no clock. ``clock`` is used for the metrics' timings.
    """

    def __init__(self, name: str = "", *, clock: clock_.Clock | None = None) -> None:
        self.name = name
        self._clock = clock or clock_.REAL_CLOCK
        self._queue: collections.deque[T] = collections.deque()
        self._dirty: set[T] = set()
        # Key -> when it was handed out (0.0 for an unnamed queue): the processing set.
        self._processing: dict[T, float] = {}
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._idle_waiters: list[asyncio.Future[None]] = []
        self._shutting_down = False
        # Metrics keep their timestamps beside the keys, so timing costs no extra lookups:
        # when each queued key was added (in step with _queue), and adds of keys that
        # were being processed at the time.
        self._metrics = metrics.for_queue(name, self) if name else None
        self._queued_at: collections.deque[float] = collections.deque()
        self._readded_at: dict[T, float] = {}
        self._now = self._clock.now

    def __len__(self) -> int:
        """Keys queued and ready to be handed out (not those being processed)."""
        return len(self._queue)

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    @property
    def processing(self) -> int:
        """Number of keys handed out and not yet done."""
        return len(self._processing)

    @property
    def getters(self) -> int:
        """Number of :meth:`get` calls waiting for a key."""
        return sum(1 for waiter in self._waiters if not waiter.done())

    def processing_since(self) -> list[float]:
        """When each key now being processed was handed out (named queues only)."""
        return list(self._processing.values())

    def add(self, item: T) -> None:
        """Mark ``item`` as needing processing (see rules 1, 2 and 4)."""
        if self._shutting_down or item in self._dirty:
            return
        self._dirty.add(item)
        m = self._metrics
        if m is not None:
            m.adds += 1
            m.depth += 1
            if item in self._processing:
                self._readded_at[item] = self._now()
                return
            self._queued_at.append(self._now())
        elif item in self._processing:
            return
        self._queue.append(item)
        if self._waiters:
            self._wake_one()

    async def get(self) -> T:
        """The next key; waits while none is ready. Raises :class:`ShutDown`."""
        while not self._queue:
            if self._shutting_down:
                raise ShutDown
            await self._wait()
        item = self._queue.popleft()
        m = self._metrics
        if m is not None:
            now = self._now()
            m.depth -= 1
            waited = now - self._queued_at.popleft()
            hist = m.latency
            hist.counts[bisect.bisect_left(hist.bounds, waited)] += 1
            hist.sum += waited
            self._processing[item] = now
        else:
            self._processing[item] = 0.0
        self._dirty.discard(item)
        return item

    def done(self, item: T) -> None:
        """Finish processing ``item``; queue it again if it was added meanwhile."""
        started = self._processing.pop(item, None)
        m = self._metrics
        if m is not None and started is not None:
            took = self._now() - started
            hist = m.work
            hist.counts[bisect.bisect_left(hist.bounds, took)] += 1
            hist.sum += took
        if item in self._dirty:
            if m is not None:
                readded = self._readded_at.pop(item, None)
                self._queued_at.append(self._now() if readded is None else readded)
            self._queue.append(item)
            if self._waiters:
                self._wake_one()
        elif self._idle_waiters and self.idle:
            for waiter in self._idle_waiters:
                if not waiter.done():
                    waiter.set_result(None)
            self._idle_waiters.clear()

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing being processed (keys waiting for a delay do not count)."""
        return not self._queue and not self._processing

    async def wait_idle(self) -> None:
        """Return once the queue is :attr:`idle`: every key added so far has been handed
        out and done. Keys that are queued then need a worker, or this waits forever."""
        while not self.idle:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._idle_waiters.append(waiter)
            await waiter

    def shutdown(self) -> None:
        """Ignore further adds; wake every waiting :meth:`get` (they raise once empty)."""
        self._shutting_down = True
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    async def _wait(self) -> None:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                # Woken and cancelled at once: pass the wake-up on, or a key would wait.
                self._wake_one()
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
