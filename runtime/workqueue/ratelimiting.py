"""The rate-limited queue: a delaying queue whose retries are paced by a :class:`RateLimiter`.

- ``add_rate_limited(key)``: ``add_after(key, limiter.when(key))``; records an attempt.
- ``forget(key)``: the key succeeded; its backoff starts again from the bottom.
  (It does not remove the key from the queue.)
- ``num_requeues(key)``: attempts the limiter has on record.

The default limiter is :func:`~runtime.workqueue.ratelimiter.default_controller_rate_limiter`
on the queue's clock.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

from runtime import clock as clock_
from runtime.workqueue import delaying, ratelimiter

__all__ = ["RateLimitingQueue"]

T = TypeVar("T", bound=Hashable)


class RateLimitingQueue(delaying.DelayingQueue[T]):
    """A :class:`~runtime.workqueue.delaying.DelayingQueue` plus a rate limiter."""

    def __init__(
        self,
        name: str = "",
        *,
        rate_limiter: ratelimiter.RateLimiter | None = None,
        clock: clock_.Clock | None = None,
    ) -> None:
        super().__init__(name, clock=clock)
        self.rate_limiter = rate_limiter or ratelimiter.default_controller_rate_limiter(self._clock)

    def add_rate_limited(self, item: T) -> None:
        """Add ``item`` after the delay its rate limiter gives (records an attempt)."""
        self.add_after(item, self.rate_limiter.when(item))

    def forget(self, item: T) -> None:
        """Reset the rate limiter's record of ``item``."""
        self.rate_limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return self.rate_limiter.num_requeues(item)
