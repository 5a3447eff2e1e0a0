"""Work-queue metrics under client-go's names, labelled by queue ``name``.

Only named queues report. Series (all with label ``name``):

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
Queues that share a name share their series (the name is the identity, as in
client-go); give each controller's queue its own name.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable
from typing import Any

from runtime import clock as clock_
from runtime import metrics

__all__ = ["QueueMetrics", "for_name"]

_BUCKETS = metrics.exponential_buckets(10e-9, 10, 12)

_depth = metrics.Family("workqueue_depth", "Current depth of workqueue", "gauge", ("name",))
_adds = metrics.Family(
    "workqueue_adds_total", "Total number of adds handled by workqueue", "counter", ("name",)
)
_latency = metrics.Family(
    "workqueue_queue_duration_seconds",
    "How long in seconds an item stays in workqueue before being requested",
    "histogram",
    ("name",),
    buckets=_BUCKETS,
)
_work = metrics.Family(
    "workqueue_work_duration_seconds",
    "How long in seconds processing an item from workqueue takes",
    "histogram",
    ("name",),
    buckets=_BUCKETS,
)
_unfinished = metrics.Family(
    "workqueue_unfinished_work_seconds",
    "How many seconds of work has been done that is in progress and hasn't been observed "
    "by work_duration. Large values indicate stuck threads.",
    "gauge",
    ("name",),
)
_longest = metrics.Family(
    "workqueue_longest_running_processor_seconds",
    "How many seconds has the longest running processor for workqueue been running.",
    "gauge",
    ("name",),
)
_retries = metrics.Family(
    "workqueue_retries_total", "Total number of retries handled by workqueue", "counter", ("name",)
)

_by_name: dict[str, QueueMetrics] = {}


class QueueMetrics:
    """The series of one named queue. Methods are called by the queue, in the loop thread."""

    __slots__ = (
        "_add_times",
        "_now",
        "_processing_start",
        "adds",
        "depth",
        "latency",
        "name",
        "retries",
        "work",
    )

    def __init__(self, name: str, clock: clock_.Clock) -> None:
        self.name = name
        self._now = clock.now
        self.depth = _depth.gauge(name)
        self.adds = _adds.counter(name)
        self.latency = _latency.histogram(name)
        self.work = _work.histogram(name)
        self.retries = _retries.counter(name)
        self._add_times: dict[Any, float] = {}
        self._processing_start: dict[Any, float] = {}
        _unfinished.func_gauge(self.unfinished_work_seconds, name)
        _longest.func_gauge(self.longest_running_processor_seconds, name)

    # add/get/done run on every queue operation: plain arithmetic, one clock read each.

    def add(self, item: Hashable) -> None:
        self.adds.value += 1
        self.depth.value += 1
        if item not in self._add_times:
            self._add_times[item] = self._now()

    def get(self, item: Hashable) -> None:
        now = self._now()
        self.depth.value -= 1
        start = self._add_times.pop(item, None)
        if start is not None:
            hist = self.latency
            hist.counts[bisect.bisect_left(hist.bounds, now - start)] += 1
            hist.sum += now - start
        self._processing_start[item] = now

    def done(self, item: Hashable) -> None:
        start = self._processing_start.pop(item, None)
        if start is not None:
            took = self._now() - start
            hist = self.work
            hist.counts[bisect.bisect_left(hist.bounds, took)] += 1
            hist.sum += took

    def retry(self) -> None:
        self.retries.value += 1

    def unfinished_work_seconds(self) -> float:
        now = self._now()
        return sum(now - t for t in list(self._processing_start.values()))

    def longest_running_processor_seconds(self) -> float:
        starts = list(self._processing_start.values())
        return self._now() - min(starts) if starts else 0.0


def for_name(name: str, clock: clock_.Clock) -> QueueMetrics:
    """The series for queue ``name`` (created on first use; later queues reuse them).

    The clock of the latest queue to claim a name is the one used for its timings.
    """
    existing = _by_name.get(name)
    if existing is not None:
        existing._now = clock.now
        return existing
    created = _by_name[name] = QueueMetrics(name, clock)
    return created
