"""Benchmark: the informer cache against a real kube-apiserver.

Starts etcd + kube-apiserver (``runtime.testing.controlplane``, binaries from
``hack/controlplane/build.sh``), creates ``--objects`` ConfigMaps (labelled, a
little data, like small owned objects), then measures:

- ``sync_s``: a new cache's first read (paginated list into a store), median of 3;
  ``sync_watch_list_s``: the same through one streaming watch (``watch_list=True``);
- ``bytes_per_object``: memory held per cached object (tracemalloc; the store with
  the label index that the selector lists below build), and
  ``bytes_per_json_byte``: that over the object's JSON size on the wire without
  managedFields (target <= 4.0; a plain ``json.loads`` dict is ~6x) - also reported
  for a plain ``json.loads`` store, side by side;
- ``get_ns``: one ``await cache.get(...)``, loop included, median of 5 passes of
  100,000 (target <= 2,000 ns);
- ``list_by_label_us``: ``await cache.list(..., label_selector=...)`` over all objects;
- ``gets_to_apiserver_during_reconciles``: GET/LIST requests the apiserver counted
  (its own ``/metrics``) while a controller ran 1,000 reconciles that each read 3
  objects through the cache (target 0); ``..._uncached`` is the same reconciles
  reading with direct GETs, for comparison.

Last stdout line: one JSON object. Usage:
``.venv/bin/python hack/bench/cache.py [--objects 10000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import pathlib
import statistics
import time
import tracemalloc
from typing import Any

import _common  # hack/bench/_common.py (this script's directory)
import structlog

from runtime import controller, reconcile, source
from runtime.cache import cache as cache_
from runtime.cache import store as store_
from runtime.client import client as client_
from runtime.client import resources
from runtime.testing import controlplane

ROOT = pathlib.Path(__file__).resolve().parents[2]
CM = resources.default_registry.for_kind("v1", "ConfigMap")
NS = "bench"


log = _common.logger()


def gets_and_lists(cp: controlplane.ControlPlane) -> float:
    return sum(
        n for (verb, resource, _), n in cp.request_counts().items()
        if resource == "configmaps" and verb in ("GET", "LIST")
    )  # fmt: skip


async def populate(client: client_.Client, count: int) -> None:
    await client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    sem = asyncio.Semaphore(64)

    async def one(i: int) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": f"obj-{i:05d}",
                "labels": {
                    "app": f"app-{i % 50}",
                    "tier": ("front", "back")[i % 2],
                    "app.kubernetes.io/managed-by": "bench",
                },
                "annotations": {"bench/index": str(i)},
            },
            "data": {"config.yaml": f"replicas: {i % 5}\nport: {8000 + i % 100}\n"},
        }
        async with sem:
            await client.create(body, namespace=NS)

    await asyncio.gather(*(one(i) for i in range(count)))


async def main(count: int) -> dict[str, Any]:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    options = controlplane.Options(bin_dir=_common.bin_dir(), start_timeout=120)
    with controlplane.running(options) as cp:
        client = await client_.Client.from_kubeconfig(cp.kubeconfig)
        async with client:
            started = time.perf_counter()
            await populate(client, count)
            log(f"created {count} configmaps in {time.perf_counter() - started:.1f} s")

            # Wire size without managedFields, from a plain list.
            listed = await client.list(CM, NS)
            wire = statistics.mean(
                len(json.dumps(store_.default_transform(o), separators=(",", ":")))
                for o in listed.items
            )

            syncs = []
            for _ in range(3):
                cache = cache_.Cache(client, namespace=NS)
                t0 = time.perf_counter()
                await cache.list(CM, NS)
                syncs.append(time.perf_counter() - t0)
                await cache.stop()
            watch_list_syncs = []
            for _ in range(3):
                cache = cache_.Cache(client, namespace=NS, watch_list=True)
                t0 = time.perf_counter()
                await cache.list(CM, NS)
                watch_list_syncs.append(time.perf_counter() - t0)
                await cache.stop()
            log(f"sync: list {[round(s, 2) for s in syncs]} s, "
                f"watch-list {[round(s, 2) for s in watch_list_syncs]} s")  # fmt: skip

            # Memory per object, ours vs a plain json.loads store, side by side.
            raw_pages = [json.dumps(o) for o in listed.items]
            del listed
            gc.collect()
            tracemalloc.start()
            base = tracemalloc.get_traced_memory()[0]
            plain = {i: json.loads(text) for i, text in enumerate(raw_pages)}
            for obj in plain.values():
                obj["metadata"].pop("managedFields", None)
            plain_bytes = (tracemalloc.get_traced_memory()[0] - base) / count
            del plain
            gc.collect()
            base = tracemalloc.get_traced_memory()[0]
            store = store_.Store()
            for text in raw_pages:
                store.upsert(json.loads(text))
            # Count the index the label-selector lists below build (label "app").
            assert store.by_label("app", "app-1")
            gc.collect()
            ours_bytes = (tracemalloc.get_traced_memory()[0] - base) / count
            tracemalloc.stop()
            del store, raw_pages
            log(f"bytes/object: ours {ours_bytes:.0f}, json {plain_bytes:.0f}, wire {wire:.0f}")

            cache = cache_.Cache(client, namespace=NS)
            await cache.list(CM, NS)
            names = [f"obj-{i:05d}" for i in range(count)]
            n = 100_000
            keys = [names[i % count] for i in range(n)]
            passes = []
            for _ in range(5):
                t0 = time.perf_counter_ns()
                for name in keys:
                    await cache.get(CM, NS, name)
                passes.append((time.perf_counter_ns() - t0) / n)
            get_ns = statistics.median(passes)
            lists = []
            for i in range(50):
                t0 = time.perf_counter()
                found = await cache.list(CM, NS, label_selector=f"app=app-{i},tier in (front,back)")
                lists.append(time.perf_counter() - t0)
            assert found, "the selector matches objects"
            log(f"get {get_ns:.0f} ns, list by label {statistics.median(lists) * 1e6:.0f} us")

            async def run_reconciles(read_through_cache: bool) -> float:
                done = 0
                finished = asyncio.Event()

                async def reconciler(request: reconcile.Request) -> reconcile.Result:
                    nonlocal done
                    i = int(request.name.split("-")[1])
                    for j in (i, (i + 1) % count, (i + 2) % count):
                        if read_through_cache:
                            await cache.get(CM, NS, names[j])
                        else:
                            await client.get(CM, NS, names[j])
                    done += 1
                    if done == 1000:
                        finished.set()
                    return reconcile.Result()

                channel = source.Channel()
                ctrl = controller.Controller(
                    f"bench-cache-{read_through_cache}", reconciler,
                    options=controller.Options(max_concurrent_reconciles=4),
                )  # fmt: skip
                ctrl.watch(channel)
                before = gets_and_lists(cp)
                stop = asyncio.Event()
                task = asyncio.create_task(ctrl.start(stop))
                for i in range(1000):
                    channel.send(reconcile.Request(NS, names[i]))
                await finished.wait()
                stop.set()
                await task
                return gets_and_lists(cp) - before

            cached_reads = await run_reconciles(True)
            direct_reads = await run_reconciles(False)
            await cache.stop()
            log(
                f"GET/LIST in 1000 reconciles: cached {cached_reads:.0f}, direct {direct_reads:.0f}"
            )

    return {
        "bench": "cache",
        "objects": count,
        "sync_s": round(statistics.median(syncs), 3),
        "sync_s_min": round(min(syncs), 3),
        "sync_s_max": round(max(syncs), 3),
        "sync_watch_list_s": round(statistics.median(watch_list_syncs), 3),
        "bytes_per_object": round(ours_bytes),
        "bytes_per_json_byte": round(ours_bytes / wire, 2),
        "plain_json_bytes_per_json_byte": round(plain_bytes / wire, 2),
        "get_ns": round(get_ns),
        "get_ns_min": round(min(passes)),
        "get_ns_max": round(max(passes)),
        "list_by_label_us": round(statistics.median(lists) * 1e6, 1),
        "gets_to_apiserver_during_reconciles": cached_reads,
        "gets_to_apiserver_during_reconciles_uncached": direct_reads,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=10_000)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.objects))))
