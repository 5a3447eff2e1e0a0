"""How late the event loop runs what is due: the manager's ``event_loop_lag_seconds``.

One asyncio loop runs every reconcile, decodes every watch event and dispatches every
informer handler; when it is busy, everything waits, whatever the work queues and the
rate limiters say. :func:`watch` measures that wait: every ``interval`` seconds it asks
to be woken and observes, in the histogram ``event_loop_lag_seconds`` (no labels), how
many seconds after the due time it actually ran (0 on an idle loop, the length of the
longest callback in the way on a busy one). Its own cost is one timer per interval.

>>> import asyncio
>>> async def demo() -> bool:
...     stop = asyncio.Event()
...     task = asyncio.ensure_future(watch(stop, interval=0.01))
...     await asyncio.sleep(0.05)
...     stop.set()
...     await task
...     return HISTOGRAM.histogram().count > 0
>>> asyncio.run(demo())
True
"""

from __future__ import annotations

import asyncio

from runtime import metrics

__all__ = ["BUCKETS", "HISTOGRAM", "watch"]

BUCKETS = metrics.exponential_buckets(0.001, 2, 13)
"""1 ms to 4.096 s."""

HISTOGRAM = metrics.Family(
    "event_loop_lag_seconds",
    "Seconds after its due time the event loop ran a timer, sampled every interval",
    "histogram",
    (),
    buckets=BUCKETS,
)


async def watch(stop: asyncio.Event, interval: float = 0.25) -> None:
    """Sample the lag every ``interval`` seconds until ``stop`` is set."""
    loop = asyncio.get_running_loop()
    child = HISTOGRAM.histogram()
    stopped = asyncio.ensure_future(stop.wait())
    try:
        while True:
            due = loop.time() + interval
            done, _ = await asyncio.wait({stopped}, timeout=interval)
            if done:
                return
            child.observe(max(0.0, loop.time() - due))
    finally:
        stopped.cancel()
