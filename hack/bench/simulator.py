"""Benchmark: one Ray simulator answering for N kwok head pods; its memory and GET latency.

Starts etcd + kube-apiserver + kube-scheduler + kwok with enough fake nodes (one /24 of
pod IPs each, at most ``PODS_PER_NODE`` pods) and the pod network
(``runtime.testing.controlplane``, binaries from ``hack/controlplane/build.sh``; needs
root), then the simulator (``tests.support.raysim``: the host part and the part inside the pod
namespace; it checks that the pod CIDR routes into the namespace before anything
dials a pod IP). It creates ``--heads`` pods labelled as Ray heads (no operator), waits
until each is Running with an IP **and** answers ``GET :8265/api/gcs_healthz`` at that
IP, PUTs a one-application Serve config to every head and waits until each reports it
``RUNNING``, so the bodies measured are the size a real head returns.

Where the numbers come from:

- ``rss_mib``: ``VmRSS`` of the simulator's two processes (host + inside), summed, read
  from ``/proc/<pid>/status`` after the latency run; ``rss_peak_mib``: their ``VmHWM``
  summed; both also per process. Target: < 300 MiB for 500 heads.
- ``get_p99_ms`` (and p50, max): wall time of ``--requests`` ``GET
  /api/serve/applications/?api_type=declarative`` requests, from this process over the
  pod network, round-robin over the heads, ``--concurrency`` in flight at once (aiohttp,
  keep-alive pooling), each timed from send to the whole body read. Target: p99 < 20 ms.
- ``heads_answering_s``: from the first pod create to the last head answering.

If something fails, the last line is still one JSON object, with an ``error`` key, and
the exit status is 1. Last stdout line: one JSON object; progress goes to stderr. Usage:
``.venv/bin/python hack/bench/simulator.py [--heads 500] [--requests 5000] [--concurrency 4]``.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import math
import os
import pathlib
import sys
import time
import traceback
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import _common  # noqa: E402  # hack/bench/_common.py (this script's directory)
import aiohttp  # noqa: E402

from runtime.client import client as client_  # noqa: E402
from runtime.client import resources  # noqa: E402
from runtime.testing import controlplane  # noqa: E402
from tests.support import raysim  # noqa: E402

PODS_PER_NODE = 200
NAMESPACE = "bench-raysim"
PODS = resources.Resource("", "v1", "Pod", "pods")
HEAD_LABELS = {"ray.io/node-type": "head", "ray.io/is-ray-node": "yes"}


BenchError = _common.BenchError


log = _common.logger("raysim-bench", clock_time=True)


def proc_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise BenchError(f"no {field} for pid {pid}")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


def head_pod(index: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"head-{index}", "namespace": NAMESPACE, "labels": HEAD_LABELS},
        "spec": {
            "containers": [{
                "name": "ray-head", "image": "rayproject/ray:2.60.0",
                "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}},
            }]
        },
    }  # fmt: skip


async def gather_bounded(limit: int, coros: list[Any]) -> list[Any]:
    gate = asyncio.Semaphore(limit)

    async def one(coro: Any) -> Any:
        async with gate:
            return await coro

    return await asyncio.gather(*(one(c) for c in coros))


async def run(args: argparse.Namespace, result: dict[str, Any]) -> None:
    heads = args.heads
    nodes = math.ceil(heads / PODS_PER_NODE) + 1
    result.update(nodes=nodes, requests=args.requests, concurrency=args.concurrency,
                  load_avg_1m=round(os.getloadavg()[0], 2))  # fmt: skip
    options = controlplane.Options(
        bin_dir=_common.bin_dir(args.bin_dir), scheduler=True, kwok=True, nodes=nodes,
        pod_network=True, start_timeout=120,
    )  # fmt: skip
    t0 = time.monotonic()
    with controlplane.running(options) as cp:
        assert cp.kubeconfig is not None
        assert cp.pod_network is not None
        network = ipaddress.ip_network(cp.pod_network.cidr)
        log(f"control plane up with {nodes} kwok nodes in {time.monotonic() - t0:.1f} s")
        with raysim.running(cp, deploy_delay=args.deploy_delay) as sim:
            log(f"simulator up (pids {sim.pids()})")
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
            cp.request("POST", "/api/v1/namespaces", namespace)
            api = await client_.Client.from_kubeconfig(cp.kubeconfig)
            async with (
                api,
                aiohttp.ClientSession(
                    timeout=aiohttp.ClientTimeout(total=10, connect=5),
                    connector=aiohttp.TCPConnector(limit=max(8, args.concurrency)),
                ) as http,
            ):

                def url(ip: str, port: int, path: str) -> str:
                    if ipaddress.ip_address(ip) not in network:
                        raise BenchError(f"{ip} is outside the pod network {network}")
                    return f"http://{ip}:{port}{path}"

                started = time.monotonic()
                await gather_bounded(32, [api.create(head_pod(i)) for i in range(heads)])
                log(f"{heads} pods created in {time.monotonic() - started:.1f} s")
                deadline = time.monotonic() + args.timeout
                ips: list[str] = []
                replaced = 0
                next_index = heads
                while True:
                    listed = await api.list(PODS, NAMESPACE)
                    live = [p for p in listed.items if not p["metadata"].get("deletionTimestamp")]
                    running = [
                        p for p in live
                        if (p.get("status") or {}).get("phase") == "Running"
                        and (p.get("status") or {}).get("podIP")
                    ]  # fmt: skip
                    ips = [p["status"]["podIP"] for p in running]
                    if len(running) == heads == len(live):
                        # kwok v0.7.0 sometimes gives two pods one IP when hundreds start
                        # at once; a pod sharing an IP is replaced until every IP is unique.
                        by_ip: dict[str, list[dict[str, Any]]] = {}
                        for pod in running:
                            by_ip.setdefault(pod["status"]["podIP"], []).append(pod)
                        extra = [pod for group in by_ip.values() for pod in group[1:]]
                        if not extra:
                            break
                        log(f"{len(extra)} pods share an IP with another; replacing them")
                        for pod in extra:
                            await api.delete(
                                PODS, NAMESPACE, pod["metadata"]["name"], grace_period_seconds=0
                            )
                            await api.create(head_pod(next_index))
                            next_index += 1
                        replaced += len(extra)
                    if time.monotonic() > deadline:
                        raise BenchError(f"only {len(ips)}/{heads} pods Running in time")
                    await asyncio.sleep(1.0)
                result["duplicate_ip_pods_replaced"] = replaced
                log(f"all Running with distinct IPs after {time.monotonic() - started:.1f} s")

                async def answers(ip: str) -> None:
                    while True:
                        try:
                            async with http.get(url(ip, 8265, "/api/gcs_healthz")) as response:
                                if response.status == 200:
                                    return
                        except aiohttp.ClientError:
                            pass
                        if time.monotonic() > deadline:
                            raise BenchError(f"{ip} never answered")
                        await asyncio.sleep(0.2)

                await gather_bounded(32, [answers(ip) for ip in ips])
                result["heads_answering_s"] = round(time.monotonic() - started, 2)
                log(f"all {heads} heads answer after {result['heads_answering_s']} s")

                async def deploy(ip: str) -> None:
                    config = {"applications": [{
                        "name": "fruit", "route_prefix": "/fruit",
                        "import_path": "fruit.deployment_graph",
                        "deployments": [{"name": "MangoStand", "num_replicas": 1},
                                        {"name": "FruitMarket", "num_replicas": 1}],
                    }]}  # fmt: skip
                    apps = url(ip, 8265, "/api/serve/applications/")
                    async with http.put(apps, json=config) as response:
                        if response.status != 200:
                            raise BenchError(f"PUT at {ip}: {response.status}")
                    while True:
                        async with http.get(apps) as response:
                            body = await response.json()
                        if body["applications"]["fruit"]["status"] == "RUNNING":
                            return
                        if time.monotonic() > deadline:
                            raise BenchError(f"{ip}: never RUNNING")
                        await asyncio.sleep(0.2)

                await gather_bounded(32, [deploy(ip) for ip in ips])
                log("every head RUNNING its application")

                latencies: list[float] = []
                sizes: set[int] = set()
                queue = list(range(args.requests))

                async def worker() -> None:
                    while queue:
                        i = queue.pop()
                        target = url(ips[i % len(ips)], 8265, "/api/serve/applications/")
                        t = time.perf_counter()
                        async with http.get(target, params={"api_type": "declarative"}) as r:
                            body = await r.read()
                            if r.status != 200:
                                raise BenchError(f"GET {target}: {r.status}")
                        latencies.append(time.perf_counter() - t)
                        sizes.add(len(body))

                t = time.monotonic()
                await asyncio.gather(*(worker() for _ in range(args.concurrency)))
                elapsed = time.monotonic() - t
                state = sim.state()
                pids = sim.pids()
                rss = [proc_kib(pid, "VmRSS") for pid in pids]
                hwm = [proc_kib(pid, "VmHWM") for pid in pids]
                if len(state["ips"]) != heads:
                    raise BenchError(f"the simulator knows {len(state['ips'])} heads, not {heads}")
                ms = [x * 1000 for x in latencies]
                result.update(
                    rss_mib=round(sum(rss) / 1024, 1),
                    rss_peak_mib=round(sum(hwm) / 1024, 1),
                    host_rss_mib=round(rss[0] / 1024, 1),
                    inside_rss_mib=round(rss[1] / 1024, 1),
                    get_p50_ms=round(percentile(ms, 0.50), 2),
                    get_p99_ms=round(percentile(ms, 0.99), 2),
                    get_max_ms=round(max(ms), 2),
                    gets_per_s=round(len(ms) / elapsed, 1),
                    body_bytes=sorted(sizes)[-1],
                )
                log(json.dumps(result))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--heads", type=int, default=500)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--deploy-delay", type=float, default=1.0)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for set-up")
    parser.add_argument("--bin-dir", type=pathlib.Path)
    args = parser.parse_args()
    result: dict[str, Any] = {"bench": "raysim", "heads": args.heads}
    code = 0
    try:
        asyncio.run(run(args, result))
    except Exception as exc:  # the last line must be JSON whatever happened
        traceback.print_exc()
        result["error"] = f"{type(exc).__name__}: {exc}"
        code = 1
    result["targets"] = {"rss_mib": 300, "get_p99_ms": 20}
    print(json.dumps(result))
    return code


if __name__ == "__main__":
    sys.exit(main())
