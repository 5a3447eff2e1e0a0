"""Rate limiters: how long a key waits before it is retried.

A :class:`RateLimiter` answers three questions about a key:

- ``when(key)``: the delay before the key's next attempt. Calling it **records an
  attempt** (a failure, or a token taken), so call it once per requeue;
- ``forget(key)``: the key succeeded; reset what is tracked for it;
- ``num_requeues(key)``: how many attempts are on record for it.

The limiters (client-go's, same defaults):

- :class:`ItemExponentialFailure`: per key, ``base * 2**failures`` capped at ``max_delay``
  (5 ms, 10 ms, 20 ms, ... 1000 s); ``forget`` resets the key.
- :class:`TokenBucket`: one bucket shared by **all** keys, ``qps`` tokens per second
  and ``burst`` capacity; ``when`` reserves a token and returns how long until it
  is available. It bounds the overall retry rate however many keys fail at once.
- :class:`MaxOf`: asks every limiter (each records the attempt) and returns the
  largest delay.

:func:`default_controller_rate_limiter` is ``MaxOf(ItemExponentialFailure(5 ms, 1000 s),
TokenBucket(10 qps, burst 100))``, like client-go's ``DefaultControllerRateLimiter``.

>>> from runtime.testing.clock import FakeClock
>>> limiter = ItemExponentialFailure(base=0.005, max_delay=1000)
>>> [limiter.when("k") for _ in range(4)], limiter.num_requeues("k")
([0.005, 0.01, 0.02, 0.04], 4)
>>> limiter.forget("k"); limiter.when("k")
0.005
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol, runtime_checkable

from runtime import clock as clock_

__all__ = [
    "ItemExponentialFailure",
    "MaxOf",
    "RateLimiter",
    "TokenBucket",
    "default_controller_rate_limiter",
]


@runtime_checkable
class RateLimiter(Protocol):
    """Decides how long a key waits before its next attempt (see the module docstring)."""

    def when(self, item: Hashable) -> float:
        """Seconds to wait before retrying ``item``; records one attempt."""
        ...

    def forget(self, item: Hashable) -> None:
        """Stop tracking ``item`` (it succeeded)."""
        ...

    def num_requeues(self, item: Hashable) -> int:
        """Attempts on record for ``item``."""
        ...


class ItemExponentialFailure:
    """Per-key exponential backoff: ``base * 2**n`` seconds after n prior failures, capped."""

    def __init__(self, base: float = 0.005, max_delay: float = 1000.0) -> None:
        if base <= 0 or max_delay < base:
            raise ValueError(f"need 0 < base <= max_delay, got base={base} max_delay={max_delay}")
        self.base = base
        self.max_delay = max_delay
        self._failures: dict[Hashable, int] = {}

    def when(self, item: Hashable) -> float:
        n = self._failures.get(item, 0)
        self._failures[item] = n + 1
        if n > 1000:  # 2**n overflows a float long before; the cap applies anyway
            return self.max_delay
        return min(self.base * 2.0**n, self.max_delay)

    def forget(self, item: Hashable) -> None:
        self._failures.pop(item, None)

    def num_requeues(self, item: Hashable) -> int:
        return self._failures.get(item, 0)


class TokenBucket:
    """One token bucket shared by all keys: ``qps`` per second, ``burst`` capacity.

    ``when`` reserves a token: 0 while tokens are left, otherwise the time until
    the reserved token is refilled. Starts full.
    """

    def __init__(
        self, qps: float = 10.0, burst: int = 100, *, clock: clock_.Clock | None = None
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"need qps > 0 and burst >= 1, got qps={qps} burst={burst}")
        self.qps = float(qps)
        self.burst = burst
        self._clock = clock or clock_.REAL_CLOCK
        self._tokens = float(burst)
        self._last = self._clock.now()

    def when(self, item: Hashable) -> float:
        now = self._clock.now()
        elapsed = max(now - self._last, 0.0)
        self._last = now
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps) - 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def forget(self, item: Hashable) -> None:
        return None

    def num_requeues(self, item: Hashable) -> int:
        return 0


class MaxOf:
    """The largest delay of several limiters; each of them records every attempt."""

    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise ValueError("MaxOf needs at least one rate limiter")
        self.limiters = limiters

    def when(self, item: Hashable) -> float:
        return max([limiter.when(item) for limiter in self.limiters])

    def forget(self, item: Hashable) -> None:
        for limiter in self.limiters:
            limiter.forget(item)

    def num_requeues(self, item: Hashable) -> int:
        return max(limiter.num_requeues(item) for limiter in self.limiters)


def default_controller_rate_limiter(clock: clock_.Clock | None = None) -> MaxOf:
    """Per-key exponential 5 ms -> 1000 s, and overall 10 qps with burst 100."""
    return MaxOf(
        ItemExponentialFailure(base=0.005, max_delay=1000.0),
        TokenBucket(qps=10.0, burst=100, clock=clock),
    )
