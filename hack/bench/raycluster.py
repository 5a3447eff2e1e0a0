"""Benchmark: N RayClusters brought to ``ready`` by ``rayservice-manager``, then left alone.

Starts etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok
(``runtime.testing.controlplane``, binaries from ``hack/controlplane/build.sh``; no pod
network: kwok gives pods IPs and nothing connects to them) with enough fake nodes for
every pod (one /24 of pod IPs each), installs ``config/crd/bases``, starts the manager
as its own process (``rayservice-manager --kubeconfig ... --metrics-bind-address
127.0.0.1:<free> --health-probe-bind-address 127.0.0.1:<free>``) and waits for its
``/readyz``. Then it creates ``--clusters`` RayClusters ``bench-<i>`` at once (one head
and ``--workers-per-cluster`` workers in one group, small requests; spread over a few
namespaces), waits (bounded by ``--ready-timeout``) until every one has
``status.state == "ready"``, and watches ``--steady-seconds`` more of nothing happening.

Where the numbers come from:

- ``time_to_all_ready_s``: from the first create to the poll (every 0.25 s) that sees
  the last cluster ready.
- ``status_writes_per_cluster``: kube-apiserver's own ``apiserver_request_total``
  (``/metrics``), write verbs on ``rayclusters/status`` from creation to all-ready, / N
  (only the manager writes that subresource). Target <= 2.
- ``writes_per_cluster``: every non-read request **the manager** made from creation to
  all-ready, / N. kube-apiserver's metric has no per-client label, and the scheduler,
  kwok and kube-controller-manager write pods, bindings, events and EndpointSlices at
  the same time, so this is read from the manager's own ``/metrics``:
  ``rest_client_requests_total{method}``, which our client counts per HTTP request
  (retries included), like client-go. Target <= ``objects_created_per_cluster`` +
  ``status_writes_per_cluster``. The apiserver's view of the writes only the manager
  makes (pod and service creates, ``rayclusters`` and ``rayclusters/status`` writes) is
  reported beside it (``apiserver_manager_writes_per_cluster``) as a cross-check; it
  leaves events out (the scheduler writes them too), so it can only be lower.
- ``objects_created_per_cluster``: apiserver-counted creates of pods, services,
  service accounts, roles and role bindings, / N (the namespaces' default service
  accounts are made before counting starts).
- ``steady_writes_per_min``: the manager's non-read requests per minute during the
  steady window (target 0); ``non_watch_requests_per_min_steady``: all its requests but
  watches in that window (reads from its cache should make this 0 as well);
  ``steady_apiserver_manager_writes_per_min`` and ``steady_status_writes``: the
  apiserver's view of the same window.
- ``manager_rss_mib``: the manager's peak RSS (``VmHWM`` in ``/proc/<pid>/status``);
  ``manager_cpu_s``: its user + system CPU seconds, children included
  (:meth:`runtime.testing.process.ChildProcess.cpu_seconds`), both read at
  the end, before it is stopped.
- ``conflicts``: 409 answers the manager got from creation to all-ready;
  ``reconciles``, ``status_writes_skipped``, ``manager_events_written`` and
  ``manager_writes_by_method``: the manager's own counters over that interval
  (``steady_reconciles`` over the steady window).
- ``last_pod_created_s``, ``last_pod_ready_s``: where the time to ready went, from the
  pods' own timestamps (1 s resolution): the last pod's creation and the last pod's
  Ready transition, in seconds after the first create.

Targets are reported, not asserted. If the clusters are not all ready in time (or the
manager dies), the last line is still one JSON object, with an ``error`` key, and the
exit status is 1. Last stdout line: one JSON object; progress goes to stderr. Usage:
``.venv/bin/python hack/bench/raycluster.py --clusters 200 [--steady-seconds 120]
[--workers-per-cluster 2]``.
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
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from typing import Any

import _common  # hack/bench/_common.py (this script's directory)
import structlog

import api.v1 as v1
from runtime.client import client as client_
from runtime.client import resources
from runtime.testing import controlplane

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "config/crd/bases"
PODS = resources.default_registry.for_kind("v1", "Pod")

PODS_PER_NODE = 200
"""Pods per fake node: kwok gives each node a /24 of pod IPs (254 usable)."""

MAX_NAMESPACES = 4
"""The clusters are spread round-robin over at most this many namespaces."""

READ_VERBS = frozenset({"GET", "LIST", "WATCH", "WATCHLIST", "CONNECT", "HEAD", "OPTIONS"})
"""Everything else (POST, PUT, PATCH, DELETE, DELETECOLLECTION, CREATE, UPDATE, APPLY)
is a write, in the apiserver's metric and in the manager's."""

CREATED_KINDS = ("pods", "services", "serviceaccounts", "roles", "rolebindings")
"""Objects the manager creates for a cluster (the last three with the autoscaler only)."""

HEADLINE = (
    "bench", "clusters", "time_to_all_ready_s", "status_writes_per_cluster",
    "writes_per_cluster", "steady_writes_per_min", "manager_rss_mib", "manager_cpu_s",
)  # fmt: skip
"""The keys every run reports, first and in this order; the others follow."""

Counts = dict[tuple[str, str, str], float]
"""``apiserver_request_total`` summed by (verb, resource, subresource)."""


BenchError = _common.BenchError


log = _common.logger("bench raycluster")


# -- counting ------------------------------------------------------------------------------

Sample = tuple[str, tuple[tuple[str, str], ...]]
"""A metric sample's name and its sorted labels."""


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """What kube-apiserver and the manager had counted at one moment (or, subtracted, in
    an interval)."""

    api: Counts
    """``apiserver_request_total`` by (verb, resource, subresource)."""
    manager: dict[Sample, float]
    """The manager's own ``/metrics``."""

    def __sub__(self, earlier: Snapshot) -> Snapshot:
        def minus(now: Mapping[Any, float], then: Mapping[Any, float]) -> dict[Any, float]:
            return {key: now.get(key, 0.0) - then.get(key, 0.0) for key in now.keys() | then}

        return Snapshot(minus(self.api, earlier.api), minus(self.manager, earlier.manager))

    def requests(self, verb: str, resource: str, subresource: str = "") -> int:
        return int(self.api.get((verb, resource, subresource), 0.0))

    def status_writes(self) -> float:
        """Writes of ``rayclusters/status`` (only the manager makes them)."""
        return sum(
            n for (verb, resource, sub), n in self.api.items()
            if resource == "rayclusters" and sub == "status" and verb not in READ_VERBS
        )  # fmt: skip

    def creates(self) -> float:
        """Creates of the kinds the manager makes for a cluster."""
        return sum(
            n for (verb, resource, sub), n in self.api.items()
            if resource in CREATED_KINDS and sub == "" and verb in ("POST", "CREATE")
        )  # fmt: skip

    def manager_only_writes(self, bench_creates: int) -> float:
        """Writes only the manager makes, as the apiserver counted them: creates of the
        objects it owns, other writes of services, and every RayCluster write (any
        subresource) but the benchmark's own ``bench_creates``. Pod deletes are left
        out: kwok finishes each one with a delete of its own."""
        total = self.creates() - bench_creates
        for (verb, resource, sub), n in self.api.items():
            if verb in READ_VERBS:
                continue
            if resource == "rayclusters" or (
                resource == "services" and sub == "" and verb not in ("POST", "CREATE")
            ):
                total += n
        return total

    def total(self, name: str, **match: str) -> float:
        """The sum of the manager's samples of ``name`` whose labels include ``match``."""
        return sum(
            value for (sample, labels), value in self.manager.items()
            if sample == name and all((k, v) in labels for k, v in match.items())
        )  # fmt: skip

    def manager_requests(self) -> dict[str, float]:
        """The manager's ``rest_client_requests_total`` by method."""
        out: dict[str, float] = {}
        for (sample, labels), value in self.manager.items():
            if sample == "rest_client_requests_total":
                method = dict(labels).get("method", "")
                out[method] = out.get(method, 0.0) + value
        return out

    def manager_writes(self) -> float:
        return sum(n for m, n in self.manager_requests().items() if m not in READ_VERBS)

    def manager_non_watch(self) -> float:
        return sum(n for m, n in self.manager_requests().items() if m != "WATCH")


def snapshot(manager: _common.Manager, cp: controlplane.ControlPlane) -> Snapshot:
    """The apiserver's counts and the manager's metrics, read now."""
    api = cp.request_counts()
    samples: dict[Sample, float] = {}
    for name, labels, value in manager.metrics():
        key = (name, tuple(sorted(labels.items())))
        samples[key] = samples.get(key, 0.0) + value
    return Snapshot(api, samples)


# -- the clusters --------------------------------------------------------------------------


def raycluster(name: str, namespace: str, workers: int) -> dict[str, Any]:
    def template(container: str) -> dict[str, Any]:
        return {"spec": {"containers": [{
            "name": container, "image": "rayproject/ray:2.60.0",
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                          "limits": {"cpu": "1", "memory": "1Gi"}},
        }]}}  # fmt: skip

    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "namespace": namespace, "labels": {"bench": "raycluster"}},
        "spec": {
            "rayVersion": "2.60.0",
            "headGroupSpec": {"rayStartParams": {}, "template": template("ray-head")},
            "workerGroupSpecs": [{
                "groupName": "workers", "replicas": workers, "minReplicas": 0,
                "maxReplicas": max(workers, 1) * 2, "rayStartParams": {},
                "template": template("ray-worker"),
            }],
        },
    }  # fmt: skip


async def wait_all_ready(
    client: client_.Client, manager: _common.Manager, count: int, within: float, started: float
) -> float:
    """Seconds from ``started`` until every cluster is ready; :class:`BenchError` if not."""
    last_report = 0.0
    states: dict[str, int] = {}
    while True:
        manager.check_alive()
        listed = await client.list(v1.RAYCLUSTERS, None, label_selector="bench=raycluster")
        states = {}
        for item in listed.items:
            state = (item.get("status") or {}).get("state") or "<none>"
            states[state] = states.get(state, 0) + 1
        elapsed = time.monotonic() - started
        if states.get("ready", 0) == count:
            return elapsed
        if elapsed > within:
            raise BenchError(
                f"{states.get('ready', 0)} of {count} RayClusters ready after {within:.0f} s "
                f"(states: {states}); is the RayCluster reconciler registered by "
                f"controllers.setup?\nlast lines of the manager log:\n{manager.tail(10)}"
            )
        if elapsed - last_report >= 10:
            last_report = elapsed
            log(f"{elapsed:.0f} s: states {states}")
        await asyncio.sleep(0.25)


async def pod_timeline(client: client_.Client, started_wall: float) -> dict[str, float]:
    """Where the time to ready went, from the pods' own timestamps (1 s resolution): the
    last pod's creation (the manager's part) and the last pod's Ready transition
    (scheduler and kwok), in seconds after the first RayCluster create (+-1 s)."""
    listed = await client.list(PODS, None, label_selector="ray.io/is-ray-node=yes")

    def seconds(stamp: str) -> float:
        return max(0.0, round(_common.moment(stamp).timestamp() - started_wall, 1))

    created = [seconds(p["metadata"]["creationTimestamp"]) for p in listed.items]
    ready = [
        seconds(c["lastTransitionTime"])
        for p in listed.items
        for c in (p.get("status") or {}).get("conditions") or []
        if c.get("type") == "Ready" and c.get("status") == "True"
    ]
    return {
        "last_pod_created_s": max(created, default=-1.0),
        "last_pod_ready_s": max(ready, default=-1.0),
    }


@contextlib.contextmanager
def workdir() -> Iterator[pathlib.Path]:
    path = pathlib.Path(tempfile.mkdtemp(prefix="bench-raycluster-"))
    try:
        yield path
    finally:
        if not os.environ.get("BENCH_KEEP_DIR"):
            shutil.rmtree(path, ignore_errors=True)


async def run(args: argparse.Namespace, result: dict[str, Any]) -> None:
    count, workers = args.clusters, args.workers_per_cluster
    nodes = math.ceil(count * (1 + workers) / PODS_PER_NODE) + 1
    namespaces = [f"bench-ns-{j}" for j in range(min(MAX_NAMESPACES, count))]
    result.update(
        nodes=nodes, namespaces=len(namespaces), workers_per_cluster=workers,
        steady_seconds=args.steady_seconds, load_avg_1m=round(os.getloadavg()[0], 2),
    )  # fmt: skip
    options = controlplane.Options(
        bin_dir=_common.bin_dir(args.bin_dir), controller_manager=True, scheduler=True, kwok=True,
        nodes=nodes, start_timeout=120,
    )  # fmt: skip
    manager_args = ["--log-level", args.manager_log_level, "--log-format", "json",
                    "--leader-elect=false"]  # fmt: skip
    if args.reconcile_concurrency:
        manager_args += ["--reconcile-concurrency", str(args.reconcile_concurrency)]
    t0 = time.monotonic()
    with workdir() as work, controlplane.running(options) as cp:
        assert cp.kubeconfig is not None
        cp.install_crds(CRD_DIR)
        for namespace in namespaces:
            cp.request(
                "POST",
                "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            )
        # kube-controller-manager makes each namespace's default ServiceAccount; let it
        # happen before counting, so the creates counted below are the manager's.
        deadline = time.monotonic() + 60
        for namespace in namespaces:
            while True:
                try:
                    cp.request("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/default")
                    break
                except controlplane.ApiError as exc:
                    if exc.status != 404 or time.monotonic() > deadline:
                        raise BenchError(f"no default ServiceAccount in {namespace}") from exc
                    await asyncio.sleep(0.1)
        log(f"control plane up with {nodes} kwok nodes in {time.monotonic() - t0:.1f} s")

        manager = _common.Manager.ours(cp.kubeconfig, work, manager_args)
        try:
            result["manager_ready_s"] = round(await manager.wait_ready(60), 2)
            log(f"manager ready in {result['manager_ready_s']} s (pid {manager.popen.pid})")
            client = await client_.Client.from_kubeconfig(cp.kubeconfig)
            v1.add_to_registry(client.registry)
            async with client:
                before = snapshot(manager, cp)
                started, started_wall = time.monotonic(), time.time()
                await asyncio.gather(*(
                    client.create(raycluster(f"bench-{i}", namespaces[i % len(namespaces)],
                                             workers))
                    for i in range(count)
                ))  # fmt: skip
                result["create_s"] = round(time.monotonic() - started, 2)
                log(f"created {count} RayClusters in {result['create_s']} s")
                ready_s = await wait_all_ready(client, manager, count, args.ready_timeout,
                                               started)  # fmt: skip
                at_ready = snapshot(manager, cp)
                result["time_to_all_ready_s"] = round(ready_s, 2)
                log(f"all {count} ready in {ready_s:.1f} s; steady for {args.steady_seconds} s")
                result.update(await pod_timeline(client, started_wall))
                rising = at_ready - before
                result.update(
                    status_writes_per_cluster=round(rising.status_writes() / count, 3),
                    writes_per_cluster=round(rising.manager_writes() / count, 3),
                    objects_created_per_cluster=round(rising.creates() / count, 3),
                    apiserver_manager_writes_per_cluster=round(
                        rising.manager_only_writes(count) / count, 3),
                    pods_created=rising.requests("POST", "pods"),
                    services_created=rising.requests("POST", "services"),
                    pods_deleted=rising.requests("DELETE", "pods"),
                    conflicts=int(rising.total("rest_client_requests_total", code="409")),
                    manager_writes_by_method={
                        method: int(n) for method, n in sorted(rising.manager_requests().items())
                        if method not in READ_VERBS and n
                    },
                    reconciles=int(rising.total("controller_runtime_reconcile_total")),
                    status_writes_skipped=int(rising.total("status_writes_total",
                                                           outcome="skipped")),
                    manager_events_written=int(rising.total("events_written_total")),
                )  # fmt: skip

                # The steady window: nothing changes, nobody polls.
                await asyncio.sleep(args.steady_seconds)
                steady = snapshot(manager, cp) - at_ready
                minutes = args.steady_seconds / 60
                result.update(
                    steady_writes_per_min=round(steady.manager_writes() / minutes, 3),
                    non_watch_requests_per_min_steady=round(
                        steady.manager_non_watch() / minutes, 3),
                    steady_apiserver_manager_writes_per_min=round(
                        steady.manager_only_writes(0) / minutes, 3),
                    steady_status_writes=int(steady.status_writes()),
                    steady_reconciles=int(steady.total("controller_runtime_reconcile_total")),
                )  # fmt: skip
                result["manager_rss_mib"] = round(manager.memory_mib(), 1)
                result["manager_cpu_s"] = round(manager.cpu_seconds(), 2)
        finally:
            manager.stop()
    result["total_s"] = round(time.monotonic() - t0, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clusters", type=int, required=True)
    parser.add_argument("--steady-seconds", type=float, default=120.0)
    parser.add_argument("--workers-per-cluster", type=int, default=2)
    parser.add_argument(
        "--ready-timeout",
        type=float,
        default=None,
        help="seconds to wait for all ready; default 120 + 2 s per cluster",
    )
    parser.add_argument(
        "--reconcile-concurrency",
        type=int,
        default=None,
        help="passed to the manager; default the manager's own",
    )
    parser.add_argument(
        "--manager-log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    parser.add_argument(
        "--bin-dir",
        type=pathlib.Path,
        default=None,
        help="control-plane binaries; default $CONTROLPLANE_BIN_DIR or build.sh",
    )
    args = parser.parse_args(argv)  # fmt: skip
    if args.clusters < 1 or args.workers_per_cluster < 0 or args.steady_seconds <= 0:
        parser.error("--clusters >= 1, --workers-per-cluster >= 0, --steady-seconds > 0")
    if args.ready_timeout is None:
        args.ready_timeout = 120.0 + 2.0 * args.clusters
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    result: dict[str, Any] = {"bench": "raycluster", "clusters": args.clusters}
    return _common.finish(
        run(args, result),
        result,
        headline=HEADLINE,
        expected=(BenchError, controlplane.ControlPlaneError),
        log=log,
    )


if __name__ == "__main__":
    raise SystemExit(main())
