from __future__ import annotations

import itertools

from runtime import metrics
from runtime.testing import clock as fake
from runtime.workqueue import ratelimiting

_names = itertools.count()


def sample(name: str, queue: str, suffix: str = "") -> float | None:
    return metrics.registry.get_sample_value(name + suffix, {"controller": queue, "name": queue})


async def test_named_queue_reports_client_go_series() -> None:
    clock = fake.FakeClock()
    name = f"metrics-test-{next(_names)}"
    q: ratelimiting.RateLimitingQueue[str] = ratelimiting.RateLimitingQueue(name, clock=clock)
    q.add("a")
    q.add("a")  # collapsed: not an add
    q.add("b")
    assert sample("workqueue_adds_total", name) == 2
    assert sample("workqueue_depth", name) == 2
    clock.advance(2)
    key = await q.get()
    assert sample("workqueue_depth", name) == 1
    assert sample("workqueue_queue_duration_seconds", name, "_count") == 1
    assert sample("workqueue_queue_duration_seconds", name, "_sum") == 2
    clock.advance(3)
    assert sample("workqueue_unfinished_work_seconds", name) == 3
    assert sample("workqueue_longest_running_processor_seconds", name) == 3
    q.done(key)
    assert sample("workqueue_work_duration_seconds", name, "_sum") == 3
    assert sample("workqueue_unfinished_work_seconds", name) == 0
    q.add_rate_limited("c")
    q.add_after("d", 1)
    assert sample("workqueue_retries_total", name) == 2


async def test_histogram_buckets_are_client_gos() -> None:
    name = f"metrics-test-{next(_names)}"
    clock = fake.FakeClock()
    q: ratelimiting.RateLimitingQueue[str] = ratelimiting.RateLimitingQueue(name, clock=clock)
    q.add("a")
    clock.advance(0.5)
    await q.get()
    le = {"controller": name, "name": name, "le": "1.0"}
    below = {"controller": name, "name": name, "le": "0.1"}
    bucket = "workqueue_queue_duration_seconds_bucket"
    assert metrics.registry.get_sample_value(bucket, le) == 1
    assert metrics.registry.get_sample_value(bucket, below) == 0
    assert metrics.registry.get_sample_value(bucket, {**le, "le": "1e-08"}) == 0
    assert metrics.registry.get_sample_value(bucket, {**le, "le": "+Inf"}) == 1
    q.done("a")


async def test_unnamed_queue_reports_nothing() -> None:
    before = {m.name: len(m.samples) for m in metrics.registry.collect()}
    q: ratelimiting.RateLimitingQueue[str] = ratelimiting.RateLimitingQueue()
    q.add("a")
    await q.get()
    q.done("a")
    after = {m.name: len(m.samples) for m in metrics.registry.collect()}
    assert before == after


async def test_re_add_while_processing_measures_latency_from_the_re_add() -> None:
    clock = fake.FakeClock()
    name = f"metrics-test-{next(_names)}"
    q: ratelimiting.RateLimitingQueue[str] = ratelimiting.RateLimitingQueue(name, clock=clock)
    q.add("a")
    await q.get()
    clock.advance(1)
    q.add("a")  # while processing: waits for done
    assert sample("workqueue_depth", name) == 1
    clock.advance(2)
    q.done("a")
    assert sample("workqueue_work_duration_seconds", name, "_sum") == 3
    await q.get()
    assert sample("workqueue_queue_duration_seconds", name, "_sum") == 2  # 0 for the first get
    assert sample("workqueue_depth", name) == 0
    q.done("a")


async def test_series_carry_controller_and_name_labels_like_controller_runtime() -> None:
    name = f"metrics-test-{next(_names)}"
    q: ratelimiting.RateLimitingQueue[str] = ratelimiting.RateLimitingQueue(name)
    q.add("a")
    labels = {"controller": name, "name": name}
    assert metrics.registry.get_sample_value("workqueue_adds_total", labels) == 1
    assert metrics.registry.get_sample_value("workqueue_depth", labels) == 1
    await q.get()
    assert metrics.registry.get_sample_value("workqueue_queue_duration_seconds_count", labels) == 1
    q.done("a")
