from __future__ import annotations

import itertools

import pytest

from runtime.testing import clock as fake
from runtime.workqueue import ratelimiter, ratelimiting


def test_exponential_doubles_from_5ms_and_caps() -> None:
    limiter = ratelimiter.ItemExponentialFailure(base=0.005, max_delay=1000)
    delays = [limiter.when("k") for _ in range(25)]
    assert delays[:5] == pytest.approx([0.005, 0.01, 0.02, 0.04, 0.08])
    assert all(b == min(a * 2, 1000) for a, b in itertools.pairwise(delays))
    assert delays[-1] == 1000
    assert limiter.num_requeues("k") == 25


def test_exponential_is_per_key_and_reset_by_forget() -> None:
    limiter = ratelimiter.ItemExponentialFailure()
    limiter.when("a")
    limiter.when("a")
    assert limiter.when("b") == 0.005
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == 0.005


def test_exponential_survives_huge_failure_counts() -> None:
    limiter = ratelimiter.ItemExponentialFailure(base=1, max_delay=60)
    for _ in range(5000):
        delay = limiter.when("k")
    assert delay == 60


def test_token_bucket_bursts_then_paces() -> None:
    clock = fake.FakeClock()
    bucket = ratelimiter.TokenBucket(qps=10, burst=100, clock=clock)
    delays = [bucket.when(i) for i in range(120)]
    assert delays[:100] == [0.0] * 100
    assert delays[100:] == pytest.approx([0.1 * n for n in range(1, 21)])
    clock.advance(10)  # refills, but never beyond burst
    assert [bucket.when("x") for _ in range(3)] == pytest.approx([0.0, 0.0, 0.0])


def test_max_of_picks_the_largest_delay_and_forgets_everywhere() -> None:
    clock = fake.FakeClock()
    exp = ratelimiter.ItemExponentialFailure(base=1, max_delay=100)
    bucket = ratelimiter.TokenBucket(qps=1, burst=1, clock=clock)
    limiter = ratelimiter.MaxOf(exp, bucket)
    assert limiter.when("k") == 1  # exp 1 s, bucket 0
    assert limiter.when("k") == 2  # exp 2 s, bucket 1 s
    assert limiter.when("k") == 4  # exp 4 s, bucket 2 s
    assert limiter.num_requeues("k") == 3
    limiter.forget("k")
    assert limiter.num_requeues("k") == 0


def test_default_controller_rate_limiter_is_exponential_and_bucket() -> None:
    limiter = ratelimiter.default_controller_rate_limiter(fake.FakeClock())
    kinds = {type(x) for x in limiter.limiters}
    assert kinds == {ratelimiter.ItemExponentialFailure, ratelimiter.TokenBucket}
    assert limiter.when("k") == 0.005


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        (lambda: ratelimiter.ItemExponentialFailure(base=0), "base"),
        (lambda: ratelimiter.ItemExponentialFailure(base=2, max_delay=1), "base"),
        (lambda: ratelimiter.TokenBucket(qps=0), "qps"),
        (lambda: ratelimiter.TokenBucket(burst=0), "burst"),
        (lambda: ratelimiter.MaxOf(), "at least one"),
    ],
)
def test_bad_parameters_are_rejected(factory: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        factory()  # type: ignore[operator]


async def test_1000_rate_limited_adds_release_100_then_10_per_second() -> None:
    clock = fake.FakeClock()
    q: ratelimiting.RateLimitingQueue[int] = ratelimiting.RateLimitingQueue(
        rate_limiter=ratelimiter.TokenBucket(qps=10, burst=100, clock=clock), clock=clock
    )
    for i in range(1000):
        q.add_rate_limited(i)
    assert len(q) == 100
    for second in range(1, 6):
        clock.advance(1)
        assert len(q) == 100 + 10 * second


async def test_default_limiter_queue_releases_burst_after_5ms() -> None:
    clock = fake.FakeClock()
    q: ratelimiting.RateLimitingQueue[int] = ratelimiting.RateLimitingQueue(clock=clock)
    for i in range(1000):
        q.add_rate_limited(i)
    assert len(q) == 0
    clock.advance(0.005)
    assert len(q) == 100
    clock.advance(1)
    assert len(q) == 110


async def test_forget_resets_a_keys_backoff_in_the_queue() -> None:
    clock = fake.FakeClock()
    q: ratelimiting.RateLimitingQueue[str] = ratelimiting.RateLimitingQueue(clock=clock)
    for _ in range(3):
        q.add_rate_limited("k")
    assert q.num_requeues("k") == 3
    q.forget("k")
    assert q.num_requeues("k") == 0
