"""The event-loop lag histogram: its name and type, and that it sees a blocked loop."""

from __future__ import annotations

import asyncio
import time

from runtime import manager
from runtime import metrics as runtime_metrics
from runtime._internal import looplag


def test_its_name_type_and_labels() -> None:
    families = runtime_metrics.registry.collect()
    (family,) = [m for m in families if m.name == "event_loop_lag_seconds"]
    assert family.type == "histogram"
    assert looplag.HISTOGRAM.labelnames == ()
    assert looplag.HISTOGRAM.buckets[0] == 0.001
    assert looplag.HISTOGRAM.buckets[-1] == 4.096


async def test_a_callback_that_blocks_the_loop_is_seen_as_lag() -> None:
    child = looplag.HISTOGRAM.histogram()
    before_count, before_sum = child.count, child.sum
    stop = asyncio.Event()
    task = asyncio.ensure_future(looplag.watch(stop, interval=0.02))
    await asyncio.sleep(0.05)
    time.sleep(0.2)  # noqa: ASYNC251  # on purpose: the whole loop is blocked: the timer due meanwhile runs late
    await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, 1)
    assert child.count - before_count >= 3
    assert child.sum - before_sum >= 0.15  # the blocked 0.2 s, less the interval's head start


async def test_it_stops_at_once_when_asked() -> None:
    stop = asyncio.Event()
    task = asyncio.ensure_future(looplag.watch(stop, interval=30))
    await asyncio.sleep(0)
    t0 = time.monotonic()
    stop.set()
    await asyncio.wait_for(task, 1)
    assert time.monotonic() - t0 < 0.5


def test_the_manager_samples_every_quarter_second_by_default() -> None:
    assert manager.Options(name="x").event_loop_lag_interval == 0.25
