"""Prometheus metrics for the framework's hot paths, and the registry they live in.

``registry`` is the framework's :class:`prometheus_client.CollectorRegistry`
(controller-runtime's ``metrics.Registry``): the work queues and controllers
register here, and the manager serves it on ``/metrics``. Users may register
their own collectors in it too. Like controller-runtime's (which carries the
process and Go runtime collectors), it also carries the process collector
(``process_*``: CPU, memory, open file descriptors, start time), the Python GC
collector (``python_gc_*``) and ``python_info``.

Why not ``prometheus_client.Counter`` directly: its ``inc``/``observe`` take a
lock and cost 1.3-3 us each (measured on our 2-core machines), which alone would
cap a work queue at about 100,000 add/get/done cycles per second. The metrics
here are updated by the single event-loop thread with plain arithmetic (about
0.2-0.4 us) and are turned into ``prometheus_client`` metric families only when
scraped. Consequently:

- update them only from the event loop thread (reads from a scrape thread are safe);
- a family's children are created once per label set and live as long as the family.

>>> fam = Family("demo_total", "Demo.", "counter", ("name",), registry=None)
>>> c = fam.counter("a"); c.inc(); c.inc(2)
>>> [(s.name, s.labels, s.value) for s in next(iter(fam.collect())).samples]
[('demo_total', {'name': 'a'}, 3.0)]
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

import prometheus_client
from prometheus_client import CollectorRegistry
from prometheus_client import metrics_core as core
from prometheus_client.registry import Collector

__all__ = [
    "Counter",
    "Family",
    "FuncGauge",
    "Gauge",
    "Histogram",
    "exponential_buckets",
    "registry",
]

registry = CollectorRegistry(auto_describe=True)
"""The registry the manager serves on ``/metrics``."""

prometheus_client.ProcessCollector(registry=registry)
prometheus_client.GCCollector(registry=registry)
prometheus_client.PlatformCollector(registry=registry)

Kind = Literal["counter", "gauge", "histogram"]


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """``count`` upper bounds ``start, start*factor, ...`` (like Prometheus' ExponentialBuckets).

    >>> exponential_buckets(1, 10, 3)
    (1, 10, 100)
    """
    if start <= 0 or factor <= 1 or count < 1:
        raise ValueError("need start > 0, factor > 1, count >= 1")
    return tuple(start * factor**i for i in range(count))


class Counter:
    """A monotonically increasing value."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def get(self) -> float:
        return self.value


class Gauge:
    """A value that goes up and down."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount

    def set(self, value: float) -> None:
        self.value = value

    def get(self) -> float:
        return self.value


class FuncGauge:
    """A gauge whose value is computed by ``fn()`` at scrape time."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[], float]) -> None:
        self.fn = fn

    def get(self) -> float:
        return self.fn()


class Histogram:
    """Counts of observations per bucket (upper bounds, ``+Inf`` implied) and their sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)


Child = Counter | Gauge | FuncGauge | Histogram


class Family(Collector):
    """One metric name with fixed label names; one child per label-value tuple.

    ``registry=None`` leaves the family unregistered (useful in tests).
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        kind: Kind,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float] = (),
        registry: CollectorRegistry | None = registry,
    ) -> None:
        if kind == "histogram" and not buckets:
            raise ValueError(f"histogram {name} needs buckets")
        self.name = name
        self.documentation = documentation
        self.kind: Kind = kind
        self.labelnames = tuple(labelnames)
        self.buckets = tuple(sorted(buckets))
        self._children: dict[tuple[str, ...], Child] = {}
        if registry is not None:
            registry.register(self)

    def _child(self, labelvalues: tuple[str, ...], make: Callable[[], Child]) -> Child:
        if len(labelvalues) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {labelvalues}")
        child = self._children.get(labelvalues)
        if child is None:
            child = self._children[labelvalues] = make()
        return child

    def counter(self, *labelvalues: str) -> Counter:
        child = self._child(labelvalues, Counter)
        assert isinstance(child, Counter)
        return child

    def gauge(self, *labelvalues: str) -> Gauge:
        child = self._child(labelvalues, Gauge)
        assert isinstance(child, Gauge)
        return child

    def func(self, fn: Callable[[], float], *labelvalues: str) -> FuncGauge:
        """Set (or replace) the function that computes this child's value at scrape time
        (for a counter family: a value that only grows)."""
        child = self._child(labelvalues, lambda: FuncGauge(fn))
        assert isinstance(child, FuncGauge)
        child.fn = fn
        return child

    def histogram(self, *labelvalues: str) -> Histogram:
        child = self._child(labelvalues, lambda: Histogram(self.buckets))
        assert isinstance(child, Histogram)
        return child

    def remove(self, *labelvalues: str) -> None:
        self._children.pop(labelvalues, None)

    def _empty(self) -> core.Metric:
        if self.kind == "counter":
            return core.CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        if self.kind == "gauge":
            return core.GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)
        return core.HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def describe(self) -> Iterable[core.Metric]:
        return [self._empty()]

    def collect(self) -> Iterable[core.Metric]:
        family = self._empty()
        for labelvalues, child in list(self._children.items()):
            values = list(labelvalues)
            if isinstance(child, Histogram):
                counts = list(child.counts)
                cumulative, acc = [], 0
                for bound, n in zip((*child.bounds, float("inf")), counts, strict=True):
                    acc += n
                    cumulative.append((_format_bound(bound), acc))
                assert isinstance(family, core.HistogramMetricFamily)
                family.add_metric(values, cumulative, child.sum)
            else:
                assert isinstance(family, core.CounterMetricFamily | core.GaugeMetricFamily)
                family.add_metric(values, child.get())
        return [family]


def _format_bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))
