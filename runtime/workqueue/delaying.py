"""Delayed adds: :meth:`DelayingQueue.add_after` queues a key once a delay has passed.

Contract (client-go's delaying queue):

- ``add_after(key, delay)`` with ``delay <= 0`` is an immediate
  :meth:`~runtime.workqueue.queue.Queue.add`.
- Otherwise the key waits in a min-heap ordered by ready time, outside the queue.
  If the key is already waiting, the **earlier** ready time wins: a later
  ``add_after`` never postpones a key, an earlier one brings it forward.
- When a key's time comes it is :meth:`add`-ed, so every rule of the plain queue
  applies (it collapses with a pending add, waits for a worker holding it, ...).
- One timer, armed for the earliest ready time on the clock's ``call_later``, does
  the waking; there is no polling loop and no background task.
- Memory is bounded by the number of waiting keys: bringing a key forward leaves
  its old heap entry behind, and the heap is rebuilt without them once they
  outnumber the waiting keys (plus a small slack).
- After shutdown, ``add_after`` is ignored and waiting keys are dropped.
- Each ``add_after`` counts one ``workqueue_retries_total`` for a named queue.

**A reconcile's own requeue** (:meth:`DelayingQueue.requeue_after`, beyond client-go):
each key has one more timer, which a newer call **replaces**, also by a later one, and
:meth:`DelayingQueue.cancel_requeue` drops. A controller sets it from each finished
pass (``Result(requeue_after=...)``): the newest pass, which saw the newest state,
says when to look again, so a poll timer an older pass asked for does not cause an
extra pass. Waits of ``add_after`` (event delays, backoff) are independent of it: it
neither postpones nor cancels them. It counts in ``workqueue_retries_total`` as
``add_after`` does, and ``waiting`` counts keys with either timer.

>>> from runtime.testing.clock import FakeClock
>>> clock = FakeClock()
>>> q = DelayingQueue(clock=clock)
>>> q.add_after("a", 10); q.add_after("a", 30); q.add_after("b", 5)
>>> clock.advance(5); len(q), q.waiting
(1, 1)
>>> clock.advance(5); len(q), q.waiting
(2, 0)
>>> q = DelayingQueue(clock=clock)
>>> q.requeue_after("a", 2); q.requeue_after("a", 10)  # a newer pass: in 10 s
>>> clock.advance(5); len(q), q.waiting
(0, 1)
>>> clock.advance(5); len(q), q.waiting
(1, 0)
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from typing import TypeVar

from runtime import clock as clock_
from runtime.workqueue import queue

__all__ = ["DelayingQueue"]

# Stale heap entries tolerated beyond one per waiting key before the heap is rebuilt.
_SLACK = 64

T = TypeVar("T", bound=Hashable)


class DelayingQueue(queue.Queue[T]):
    """A :class:`~runtime.workqueue.queue.Queue` with :meth:`add_after`."""

    def __init__(self, name: str = "", *, clock: clock_.Clock | None = None) -> None:
        super().__init__(name, clock=clock)
        # key -> (ready time, sequence) of its live heap entry; other entries are stale.
        self._ready_at: dict[T, tuple[float, int]] = {}
        self._heap: list[tuple[float, int, T]] = []
        self._seq = itertools.count()
        self._timer: clock_.TimerHandle | None = None
        self._timer_at = float("inf")
        # key -> the timer of its reconcile's own requeue (requeue_after).
        self._requeues: dict[T, clock_.TimerHandle] = {}

    @property
    def waiting(self) -> int:
        """Number of keys waiting for their delay to pass (either timer)."""
        if not self._requeues:
            return len(self._ready_at)
        return len(self._ready_at.keys() | self._requeues.keys())

    def requeue_after(self, item: T, delay: float) -> None:
        """Add ``item`` after ``delay`` seconds, replacing the time of this method's last
        call for ``item`` (see the module docstring); ``add_after``'s waits stay."""
        if self._shutting_down:
            return
        if self._metrics is not None:
            self._metrics.retries += 1
        self.cancel_requeue(item)
        if delay <= 0:
            self.add(item)
            return

        def due() -> None:
            if self._requeues.pop(item, None) is not None:
                self.add(item)

        self._requeues[item] = self._clock.call_later(delay, due)

    def cancel_requeue(self, item: T) -> None:
        """Drop ``item``'s :meth:`requeue_after` timer, if it has one."""
        handle = self._requeues.pop(item, None)
        if handle is not None:
            handle.cancel()

    def add_after(self, item: T, delay: float) -> None:
        """Add ``item`` after ``delay`` seconds (see the module docstring)."""
        if self._shutting_down:
            return
        if self._metrics is not None:
            self._metrics.retries += 1
        if delay <= 0:
            self.add(item)
            return
        ready = self._clock.now() + delay
        current = self._ready_at.get(item)
        if current is not None and current[0] <= ready:
            return
        seq = next(self._seq)
        self._ready_at[item] = (ready, seq)
        heap = self._heap
        heapq.heappush(heap, (ready, seq, item))
        if current is not None and len(heap) > 2 * len(self._ready_at) + _SLACK:
            self._compact()
        if ready < self._timer_at:
            self._arm(ready)

    def shutdown(self) -> None:
        super().shutdown()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = float("inf")
        self._heap.clear()
        self._ready_at.clear()
        for handle in self._requeues.values():
            handle.cancel()
        self._requeues.clear()

    def _compact(self) -> None:
        """Drop the stale entries left by keys brought forward (amortised O(1) per add)."""
        self._heap = [(ready, seq, item) for item, (ready, seq) in self._ready_at.items()]
        heapq.heapify(self._heap)

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self._clock.call_later(when - self._clock.now(), self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._timer_at = float("inf")
        now = self._clock.now()
        heap = self._heap
        while heap and heap[0][0] <= now:
            ready, seq, item = heapq.heappop(heap)
            if self._ready_at.get(item) != (ready, seq):
                continue  # superseded by an earlier ready time
            del self._ready_at[item]
            self.add(item)
        while heap and self._ready_at.get(heap[0][2]) != heap[0][:2]:
            heapq.heappop(heap)
        if heap:
            self._arm(heap[0][0])
