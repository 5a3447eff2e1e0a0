"""Work queues with client-go semantics, and rate limiters.

- :mod:`runtime.workqueue.queue`: :class:`Queue` (FIFO + dirty + processing sets),
  :class:`ShutDown`;
- :mod:`runtime.workqueue.delaying`: :class:`DelayingQueue` (``add_after``);
- :mod:`runtime.workqueue.ratelimiting`: :class:`RateLimitingQueue`
  (``add_rate_limited``, ``forget``);
- :mod:`runtime.workqueue.ratelimiter`: :class:`ItemExponentialFailure`, :class:`TokenBucket`,
  :class:`MaxOf`, :func:`default_controller_rate_limiter`;
- :mod:`runtime.workqueue.metrics`: the ``workqueue_*`` series of named queues.
"""

from runtime.workqueue.delaying import DelayingQueue
from runtime.workqueue.queue import Queue, ShutDown
from runtime.workqueue.ratelimiter import (
    ItemExponentialFailure,
    MaxOf,
    RateLimiter,
    TokenBucket,
    default_controller_rate_limiter,
)
from runtime.workqueue.ratelimiting import RateLimitingQueue

__all__ = [
    "DelayingQueue",
    "ItemExponentialFailure",
    "MaxOf",
    "Queue",
    "RateLimiter",
    "RateLimitingQueue",
    "ShutDown",
    "TokenBucket",
    "default_controller_rate_limiter",
]
