"""Benchmark: a flood of junk bearer tokens at a secure ``/metrics`` beside a controller's GETs.

Issue 37, finding 1: every bearer token the manager has not seen costs a TokenReview;
sent through the manager's own client, they took the controllers' client-side rate
limit (30 junk tokens pushed a controller GET from 0.04 s to 5.3 s at 5 requests a
second). Now they go through a client of their own, at most 16 in flight, the rest
answered 429 (:mod:`runtime.delegatedauth`). This measures both sides in one run.

Starts etcd + kube-apiserver (``runtime.testing.controlplane``, binaries from
``hack/controlplane/build.sh``), creates a ConfigMap, and runs a manager as its own
process (this script with ``--serve``): the framework's :class:`runtime.manager.Manager`
with ``metrics_secure`` (a self-signed certificate, the default reviews budget), as the
control plane's admin (exempt from the API server's priority and fairness: only the
client side can delay it), its client limited to ``--qps`` requests a second with bursts
of ``--burst`` (5 and 10, as the issue measured), and one runnable, a stand-in
controller, that GETs the ConfigMap through that client every ``--get-interval``
seconds, on schedule whether or not the previous GET has returned, and writes each
GET's start (wall clock) and latency to a file. Then two windows of ``--seconds`` each:

1. ``no_flood``: the GETs alone;
2. ``flood``: ``--tokens`` distinct junk bearer tokens (JWT-sized) sent to ``/metrics``
   over HTTPS, evenly over the window, at most ``--concurrency`` requests at a time. Each
   token is new to the manager, so each needs a TokenReview. The window ends when the
   last one is answered.

A GET counts in the window it started in. Reported side by side (``no_flood``,
``flood``): ``get_p50_ms``, ``get_p99_ms``, ``get_max_ms``, ``gets`` and the manager's
CPU seconds (``manager_cpu_s``); for the flood: ``token_reviews_sent`` and
``subject_access_reviews_sent`` (kube-apiserver's own ``apiserver_request_total`` over
the flood), ``answers`` (HTTP status -> count), ``answered_429``, ``answered_401``,
``flood_answer_p50_ms``/``p99_ms`` (how soon the flood's requests were answered) and
``flood_s`` (how long it took); ``review_options`` is the manager's reviews budget.

If something fails the last line is still one JSON object, with an ``error`` key, and
the exit status is 1. Last stdout line: one JSON object; progress goes to stderr. Usage:
``.venv/bin/python hack/bench/metrics_flood.py [--tokens 1000] [--seconds 10]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import math
import os
import pathlib
import secrets
import ssl
import sys
import tempfile
import time
from typing import Any

import _common  # hack/bench/_common.py (this script's directory)
import aiohttp
import structlog

from runtime import delegatedauth, manager
from runtime.client import client as client_
from runtime.client import resources
from runtime.testing import controlplane

SCRIPT = pathlib.Path(__file__).resolve()
CM = resources.default_registry.for_kind("v1", "ConfigMap")
NS = "default"
NAME = "metrics-flood-probe"
HEADLINE = ("bench", "tokens", "seconds", "qps", "burst", "get_p50_ms", "get_p99_ms",
            "token_reviews_sent", "answered_429")  # fmt: skip

log = _common.logger("bench metrics_flood")


# -- the manager (``--serve``) ------------------------------------------------------------


class Prober:
    """A stand-in controller: GETs the ConfigMap through the manager's client every
    ``interval`` seconds (each GET its own task, on schedule) and appends ``<start, wall
    clock> <seconds>`` per GET to ``samples``."""

    needs_leader_election = False

    def __init__(self, client: client_.Client, interval: float, samples: pathlib.Path) -> None:
        self.client, self.interval, self.samples = client, interval, samples

    async def start(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        pending: set[asyncio.Task[None]] = set()
        with self.samples.open("a", buffering=1) as out:

            async def one() -> None:
                wall, began = time.time(), loop.time()
                await self.client.get(CM, NS, NAME)
                out.write(f"{wall:.6f} {loop.time() - began:.6f}\n")

            next_at = loop.time()
            while not stop.is_set():
                task = asyncio.create_task(one())
                pending.add(task)
                task.add_done_callback(pending.discard)
                next_at += self.interval
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), max(next_at - loop.time(), 0))
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)


async def serve(args: argparse.Namespace) -> int:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    client = await client_.Client.from_kubeconfig(
        args.kubeconfig, options=client_.Options(qps=args.qps, burst=args.burst)
    )
    mgr = manager.Manager(client, manager.Options(
        name="metrics-flood", metrics_bind_address=f"127.0.0.1:{args.metrics_port}",
        health_probe_bind_address=f"127.0.0.1:{args.probe_port}", metrics_secure=True,
    ))  # fmt: skip
    mgr.add(Prober(client, args.get_interval, args.samples))
    return await manager.serve(mgr)


# -- the benchmark --------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (nearest rank) of ``values``, None when there are none.

    >>> percentile([0.3, 0.1, 0.2, 0.4], 50), percentile([0.3, 0.1, 0.2, 0.4], 99)
    (0.2, 0.4)
    >>> percentile([], 50) is None
    True
    """
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(math.ceil(q / 100 * len(ordered)), 1) - 1]


def ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 2)


def samples_of(path: pathlib.Path) -> list[tuple[float, float]]:
    """``(start, seconds)`` of every GET the manager has finished so far."""
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            found.append((float(parts[0]), float(parts[1])))
    return found


def reviews_sent(cp: controlplane.ControlPlane) -> tuple[float, float]:
    counts = cp.request_counts()
    return (
        sum(n for (_, res, _), n in counts.items() if res == "tokenreviews"),
        sum(n for (_, res, _), n in counts.items() if res == "subjectaccessreviews"),
    )


def junk_token() -> str:
    """A JWT-sized bearer token nobody issued (base64url header, claims, signature)."""
    claims = secrets.token_urlsafe(450)
    return f"eyJhbGciOiJSUzI1NiIsImtpZCI6Imp1bmsifQ.{claims}.{secrets.token_urlsafe(256)}"


@dataclasses.dataclass
class Flood:
    answers: dict[str, int]
    latencies: list[float]
    began: float
    ended: float


async def flood(port: int, tokens: int, seconds: float, concurrency: int) -> Flood:
    """``tokens`` junk tokens to ``/metrics`` evenly over ``seconds``, ``concurrency`` at once."""
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    answers: dict[str, int] = {}
    latencies: list[float] = []
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(ssl=insecure, limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        began, start = time.time(), loop.time()

        async def one(i: int) -> None:
            await asyncio.sleep(max(start + i * seconds / tokens - loop.time(), 0))
            headers = {"Authorization": f"Bearer {junk_token()}"}
            async with gate:
                sent = loop.time()
                try:
                    async with session.get(
                        f"https://127.0.0.1:{port}/metrics", headers=headers
                    ) as response:
                        await response.read()
                        key = str(response.status)
                except (aiohttp.ClientError, TimeoutError) as exc:
                    key = type(exc).__name__
                latencies.append(loop.time() - sent)
                answers[key] = answers.get(key, 0) + 1

        await asyncio.gather(*(one(i) for i in range(tokens)))
    return Flood(dict(sorted(answers.items())), latencies, began, time.time())


def window(samples: list[tuple[float, float]], began: float, ended: float) -> list[float]:
    return [seconds for start, seconds in samples if began <= start < ended]


async def run(args: argparse.Namespace, result: dict[str, Any]) -> None:
    options = controlplane.Options(bin_dir=_common.bin_dir(args.bin_dir), start_timeout=120)
    with (
        tempfile.TemporaryDirectory(prefix="bench-metrics-flood-") as tmp,
        controlplane.running(options) as cp,
    ):
        assert cp.kubeconfig is not None
        work = pathlib.Path(tmp)
        cp.request("POST", f"/api/v1/namespaces/{NS}/configmaps", {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": NAME},
            "data": {"probe": "yes"},
        })  # fmt: skip
        metrics_port, probe_port = controlplane.free_ports(2)
        samples = work / "gets.txt"
        inherited = os.environ.get("PYTHONPATH", "").split(os.pathsep)
        path = [str(_common.ROOT), *filter(None, inherited)]
        child = _common.Manager(
            [sys.executable, str(SCRIPT), "--serve", "--kubeconfig", str(cp.kubeconfig),
             "--metrics-port", str(metrics_port), "--probe-port", str(probe_port),
             "--qps", str(args.qps), "--burst", str(args.burst),
             "--get-interval", str(args.get_interval), "--samples", str(samples)],
            log_path=work / "manager.log", metrics_port=metrics_port, probe_port=probe_port,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
        )  # fmt: skip
        try:
            await child.wait_ready(60)
            await asyncio.sleep(1.0)  # the first GETs (new connections) out of the way
            log(f"manager ready; {args.seconds} s without a flood")
            quiet_began, cpu_before = time.time(), child.cpu_seconds()
            await asyncio.sleep(args.seconds)
            quiet_ended, cpu_quiet = time.time(), child.cpu_seconds()
            log(f"flood: {args.tokens} junk tokens over {args.seconds} s")
            reviews_before = reviews_sent(cp)
            flooded = await flood(metrics_port, args.tokens, args.seconds, args.concurrency)
            cpu_flood = child.cpu_seconds()
            reviews_after = reviews_sent(cp)
            log(f"flood answered in {flooded.ended - flooded.began:.1f} s: {flooded.answers}")
            # The GETs started before the flood ended: wait for their answers.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 120
            while not any(start >= flooded.ended for start, _ in samples_of(samples)):
                child.check_alive()
                if loop.time() > deadline:
                    raise _common.BenchError(
                        f"the GETs started in the flood never finished:\n{child.tail()}"
                    )
                await asyncio.sleep(0.2)
            await asyncio.sleep(max(1.0, args.get_interval))
            child.check_alive()
            seen = samples_of(samples)
        finally:
            child.stop()
    quiet = window(seen, quiet_began, quiet_ended)
    during = window(seen, flooded.began, flooded.ended)
    answers = flooded.answers
    result.update({
        "get_p50_ms": {"no_flood": ms(percentile(quiet, 50)), "flood": ms(percentile(during, 50))},
        "get_p99_ms": {"no_flood": ms(percentile(quiet, 99)), "flood": ms(percentile(during, 99))},
        "token_reviews_sent": reviews_after[0] - reviews_before[0],
        "answered_429": answers.get("429", 0),
        "answered_401": answers.get("401", 0),
        "answers": answers,
        "subject_access_reviews_sent": reviews_after[1] - reviews_before[1],
        "get_max_ms": {"no_flood": ms(max(quiet, default=None)),
                       "flood": ms(max(during, default=None))},
        "gets": {"no_flood": len(quiet), "flood": len(during)},
        "manager_cpu_s": {"no_flood": round(cpu_quiet - cpu_before, 2),
                          "flood": round(cpu_flood - cpu_quiet, 2)},
        "flood_s": round(flooded.ended - flooded.began, 2),
        "flood_answer_p50_ms": ms(percentile(flooded.latencies, 50)),
        "flood_answer_p99_ms": ms(percentile(flooded.latencies, 99)),
        "review_options": {
            k: v for k, v in dataclasses.asdict(delegatedauth.Options()).items()
            if k in ("review_timeout", "max_reviews_in_flight", "review_qps", "review_burst")
        },
    })  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1000, help="junk tokens in the flood")
    parser.add_argument("--seconds", type=float, default=10.0, help="each window's length")
    parser.add_argument("--concurrency", type=int, default=50, help="flood requests at once")
    parser.add_argument("--qps", type=float, default=5.0, help="the manager client's rate")
    parser.add_argument("--burst", type=int, default=10, help="the manager client's burst")
    parser.add_argument("--get-interval", type=float, default=0.25, help="seconds between GETs")
    parser.add_argument(
        "--bin-dir", type=pathlib.Path, default=None,
        help="control-plane binaries; default $CONTROLPLANE_BIN_DIR or build.sh",
    )  # fmt: skip
    serving = parser.add_argument_group("the manager process (--serve; the benchmark starts it)")
    serving.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    serving.add_argument("--kubeconfig", type=pathlib.Path, help=argparse.SUPPRESS)
    serving.add_argument("--metrics-port", type=int, help=argparse.SUPPRESS)
    serving.add_argument("--probe-port", type=int, help=argparse.SUPPRESS)
    serving.add_argument("--samples", type=pathlib.Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return asyncio.run(serve(args))
    if args.tokens < 1 or args.seconds <= 0 or args.concurrency < 1 or args.get_interval <= 0:
        parser.error("--tokens, --concurrency >= 1; --seconds, --get-interval > 0")
    if args.qps * args.get_interval < 1:
        parser.error("--get-interval must leave the GETs within --qps (interval >= 1 / qps)")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    result: dict[str, Any] = {
        "bench": "metrics_flood", "tokens": args.tokens, "seconds": args.seconds,
        "qps": args.qps, "burst": args.burst, "concurrency": args.concurrency,
        "get_interval": args.get_interval, "load_avg_1m": round(os.getloadavg()[0], 2),
    }  # fmt: skip
    return _common.finish(
        run(args, result),
        result,
        headline=HEADLINE,
        expected=(_common.BenchError, controlplane.ControlPlaneError),
        log=log,
    )


if __name__ == "__main__":
    raise SystemExit(main())
