"""How a controller that talks to Ray dashboards retries a failed pass.

:func:`rate_limiter`: per object 0.5 s doubling to 5 min (an unreachable dashboard is
asked about twice in its first 2 s, not hundreds of times), and at most 10 retries per
second overall with bursts of 100, as client-go's default bucket. The RayService and
RayJob controllers use it.

>>> limiter = rate_limiter()
>>> [limiter.when("a") for _ in range(3)]
[0.5, 1.0, 2.0]
"""

from __future__ import annotations

from runtime.workqueue import ratelimiter

__all__ = ["rate_limiter"]


def rate_limiter() -> ratelimiter.RateLimiter:
    """A fresh limiter (see the module docstring)."""
    return ratelimiter.MaxOf(
        ratelimiter.ItemExponentialFailure(base=0.5, max_delay=300.0),
        ratelimiter.TokenBucket(qps=10.0, burst=100),
    )
