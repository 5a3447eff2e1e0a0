"""Work-queue metrics under client-go's names, labelled by queue ``name``.

Only named queues report. Series (all with labels ``controller`` and ``name``, both
the queue's name, as controller-runtime labels them; a controller names its queue
after itself):

- ``workqueue_depth`` (gauge): keys added and not yet handed to a worker;
- ``workqueue_adds_total`` (counter): adds that were not collapsed into a pending one;
- ``workqueue_queue_duration_seconds`` (histogram): time from add to get;
- ``workqueue_work_duration_seconds`` (histogram): time from get to done;
- ``workqueue_unfinished_work_seconds`` (gauge): summed age of keys being processed,
  computed at scrape time;
- ``workqueue_longest_running_processor_seconds`` (gauge): age of the oldest key
  being processed, computed at scrape time;
- ``workqueue_retries_total`` (counter): delayed adds (``add_after`` / rate-limited adds).

Histogram buckets are client-go's: 10 ns times powers of ten, 12 buckets.

The queue updates these itself, on its hot path, as plain attribute arithmetic
(see :mod:`runtime.metrics` for why); this module owns the series and computes
the scrape-time gauges from the queues' processing timestamps. Queues that share
a name share their series (the name is the identity, as in client-go); controller
names are unique in a process (:mod:`runtime.controller`), so their queues' are.
"""

from __future__ import annotations

import weakref
from typing import Protocol

from runtime import clock as clock_
from runtime import metrics

__all__ = ["QueueMetrics", "for_queue"]

_BUCKETS = metrics.exponential_buckets(10e-9, 10, 12)
_LABELS = ("controller", "name")  # both the queue name, as controller-runtime sets them

_depth = metrics.Family("workqueue_depth", "Current depth of workqueue", "gauge", _LABELS)
_adds = metrics.Family(
    "workqueue_adds_total", "Total number of adds handled by workqueue", "counter", _LABELS
)
_latency = metrics.Family(
    "workqueue_queue_duration_seconds",
    "How long in seconds an item stays in workqueue before being requested",
    "histogram",
    _LABELS,
    buckets=_BUCKETS,
)
_work = metrics.Family(
    "workqueue_work_duration_seconds",
    "How long in seconds processing an item from workqueue takes",
    "histogram",
    _LABELS,
    buckets=_BUCKETS,
)
_unfinished = metrics.Family(
    "workqueue_unfinished_work_seconds",
    "How many seconds of work has been done that is in progress and hasn't been observed "
    "by work_duration. Large values indicate stuck threads.",
    "gauge",
    _LABELS,
)
_longest = metrics.Family(
    "workqueue_longest_running_processor_seconds",
    "How many seconds has the longest running processor for workqueue been running.",
    "gauge",
    _LABELS,
)
_retries = metrics.Family(
    "workqueue_retries_total", "Total number of retries handled by workqueue", "counter", _LABELS
)


class TimedQueue(Protocol):
    """What the scrape-time gauges read from a queue."""

    _clock: clock_.Clock

    def processing_since(self) -> list[float]: ...


class QueueMetrics:
    """The series of one queue name; the queue updates the fields directly."""

    __slots__ = ("__weakref__", "adds", "depth", "latency", "name", "queues", "retries", "work")

    def __init__(self, name: str) -> None:
        self.name = name
        self.adds = 0
        self.depth = 0
        self.retries = 0
        self.latency = _latency.histogram(name, name)
        self.work = _work.histogram(name, name)
        self.queues: weakref.WeakSet[TimedQueue] = weakref.WeakSet()
        _adds.func(lambda: self.adds, name, name)
        _depth.func(lambda: self.depth, name, name)
        _retries.func(lambda: self.retries, name, name)
        _unfinished.func(self.unfinished_work_seconds, name, name)
        _longest.func(self.longest_running_processor_seconds, name, name)

    def _ages(self) -> list[float]:
        ages: list[float] = []
        for queue in list(self.queues):
            now = queue._clock.now()
            ages.extend(now - started for started in queue.processing_since())
        return ages

    def unfinished_work_seconds(self) -> float:
        return sum(self._ages())

    def longest_running_processor_seconds(self) -> float:
        return max(self._ages(), default=0.0)


_by_name: dict[str, QueueMetrics] = {}


def for_queue(name: str, queue: TimedQueue) -> QueueMetrics:
    """The series for queue ``name`` (created on first use), with ``queue`` attached."""
    found = _by_name.get(name)
    if found is None:
        found = _by_name[name] = QueueMetrics(name)
    found.queues.add(queue)
    return found
