"""Benchmark: the work queue and the controller engine must never be what limits an operator.

Prints progress to stderr and, as its last stdout line, one JSON object:

- ``add_get_done_per_s``: one consumer cycling 10,000 distinct keys through a named
  (metrics on) ``RateLimitingQueue``: all adds, then get + done for each. Target >= 200,000.
- ``noop_reconciles_per_s``: the full controller engine (queue, default rate limiter,
  metrics, structlog context, per-reconcile timeout) with 4 workers and a reconciler
  that returns success at once, 10,000 keys sent through a channel source.
  Target >= 25,000.
- ``queue_p99_us``: p99 of one add + get + done cycle on an idle named queue, in us.
- ``metrics_on_vs_off_ratio``: named-queue throughput over unnamed-queue throughput,
  measured side by side in each round (what the metrics cost, robust to machine noise).

Each figure is the median of ``--rounds`` rounds (default 5); ``*_min``/``*_max``
give the spread. Usage: ``.venv/bin/python hack/bench/workqueue.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import time

import structlog

from runtime import controller, reconcile, source
from runtime.workqueue import ratelimiting

KEYS = 10_000
WORKERS = 4


async def add_get_done(round_: int, named: bool = True) -> float:
    q: ratelimiting.RateLimitingQueue[reconcile.Request] = ratelimiting.RateLimitingQueue(
        f"bench-queue-{round_}" if named else ""
    )
    keys = [reconcile.Request("bench", f"obj-{i}") for i in range(KEYS)]
    started = time.perf_counter()
    for key in keys:
        q.add(key)
    for _ in range(KEYS):
        key = await q.get()
        q.done(key)
    elapsed = time.perf_counter() - started
    q.shutdown()
    return KEYS / elapsed


async def cycle_latency_p99_us(round_: int) -> float:
    q: ratelimiting.RateLimitingQueue[reconcile.Request] = ratelimiting.RateLimitingQueue(
        f"bench-latency-{round_}"
    )
    samples = []
    for i in range(KEYS):
        key = reconcile.Request("bench", f"obj-{i}")
        t0 = time.perf_counter()
        q.add(key)
        got = await q.get()
        q.done(got)
        samples.append(time.perf_counter() - t0)
    q.shutdown()
    return statistics.quantiles(samples, n=100)[98] * 1e6


async def noop_reconciles(round_: int) -> float:
    done = 0
    finished = asyncio.Event()

    async def noop(request: reconcile.Request) -> reconcile.Result:
        nonlocal done
        done += 1
        if done == KEYS:
            finished.set()
        return reconcile.Result()

    channel = source.Channel()
    ctrl = controller.Controller(
        f"bench-engine-{round_}",
        noop,
        options=controller.Options(max_concurrent_reconciles=WORKERS, reconcile_timeout=30),
    )
    ctrl.watch(channel)
    stop = asyncio.Event()
    task = asyncio.create_task(ctrl.start(stop))
    await asyncio.sleep(0)
    keys = [reconcile.Request("bench", f"obj-{i}") for i in range(KEYS)]
    started = time.perf_counter()
    for key in keys:
        channel.send(key)
    await finished.wait()
    elapsed = time.perf_counter() - started
    stop.set()
    await task
    return KEYS / elapsed


def spread(name: str, values: list[float], digits: int) -> dict[str, float]:
    return {
        name: round(statistics.median(values), digits),
        f"{name}_min": round(min(values), digits),
        f"{name}_max": round(max(values), digits),
    }


async def main(rounds: int) -> dict[str, object]:
    # Production-like logging: info and above, rendered to stderr.
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    queue_rates, engine_rates, p99s, ratios = [], [], [], []
    for i in range(rounds):
        queue_rates.append(await add_get_done(i))
        # Side by side in the same round: the same queue without metrics.
        ratios.append(queue_rates[-1] / await add_get_done(i, named=False))
        engine_rates.append(await noop_reconciles(i))
        p99s.append(await cycle_latency_p99_us(i))
        print(
            f"round {i + 1}/{rounds}: queue {queue_rates[-1]:,.0f}/s, "
            f"engine {engine_rates[-1]:,.0f}/s, cycle p99 {p99s[-1]:.1f} us",
            file=sys.stderr,
        )
    return {
        "bench": "workqueue",
        **spread("add_get_done_per_s", queue_rates, 0),
        **spread("noop_reconciles_per_s", engine_rates, 0),
        "keys": KEYS,
        "workers": WORKERS,
        **spread("queue_p99_us", p99s, 2),
        **spread("metrics_on_vs_off_ratio", ratios, 2),
        "rounds": rounds,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.rounds))))
