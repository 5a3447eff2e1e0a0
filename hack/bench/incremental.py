"""Benchmark: ``NewClusterWithIncrementalUpgrade``, our operator and KubeRay v1.7.0 side by side.

Issue 23: an incremental upgrade through the Gateway API, measured, and what each operator
writes while nothing happens (KubeRay v1.7.0 was seen rewriting an idle RayService's status
every second). One control plane, one Ray simulator and one Traefik (the GatewayClass
``traefik``, ``tests/support/gateway.py``) serve both operators, **one after the other**:
``--operator ours`` runs ours only (what CI runs), ``kuberay`` KubeRay only, ``both`` ours
and then KubeRay. Each operator gets namespaces of its own (``inc-<operator>-<j>``) and is
told to watch only those; before the next operator starts, the previous one's RayServices
are deleted (while it still runs: KubeRay's finalizer) and the benchmark waits until their
clusters, pods, Gateways and HTTPRoutes are gone, so Traefik serves one operator's routes
at a time. Then that operator stops.

The operator processes, both reaching the Ray heads through the API server's proxy:

- ``ours``: ``rayservice-manager --dashboard-address-mode kubernetes-proxy
  --leader-elect=false --gateway-classes=traefik --namespace <its namespaces>`` (the class
  must be allowed: none is by default), run from this checkout (the child's
  ``PYTHONPATH`` starts with it: :meth:`_common.Manager.ours`);
- ``kuberay``: KubeRay v1.7.0's operator (``--kuberay-bin``, default the binary
  ``KUBERAY_VERSION=v1.7.0 hack/peers/kuberay.sh`` builds) as ``compare.py`` runs v1.5.0
  (``--use-kubernetes-proxy``, no leader election, the admin kubeconfig), plus
  ``--watch-namespace <its namespaces>`` and ``--feature-gates
  RayServiceIncrementalUpgrade=true`` (its default, spelled out).

Installed before either starts (both operators ask at start-up whether the Gateway API is
served): the Gateway API v1.4.1 CRDs and the GatewayClass (``gateway.running``), this
repository's RayCluster and RayService CRDs (``config/crd/bases``; the v1 schema KubeRay's
has, its v1.7.0 status fields included) and, when KubeRay runs, its v1.7.0 RayJob CRD
(``--kuberay-crds``), which it watches: as ``compare.py`` does for v1.5.0.

The scenario, per operator:

1. **init**: ``--services`` RayServices at once (``rayservice.py``'s shape plus
   ``enableInTreeAutoscaling: true`` and ``upgradeStrategy: {type:
   NewClusterWithIncrementalUpgrade, clusterUpgradeOptions: {maxSurgePercent:
   --max-surge, stepSizePercent: --step, intervalSeconds: --interval,
   gatewayClassName: traefik}}``, ``rayClusterDeletionDelaySeconds: --deletion-delay``);
   wait until all are Ready (``Ready=True``, every application ``RUNNING``,
   ``numServeEndpoints > 0``) and a request through Traefik's entry point
   (``GET <traefik>/fruit``) is answered 200, then ``--settle-seconds``;
2. **idle before**: ``--idle-seconds`` of nothing changing;
3. **upgrade**: a loop sends ``GET /fruit`` through Traefik one after the other
   (``--traffic-interval`` apart, 5 s timeout each) from just before the change until the
   old clusters are gone; ``rayVersion`` of every RayService changes; **finished** is,
   per service, the HTTPRoute ``<name>-httproute`` sending 100 % to the new cluster's
   ``<cluster>-serve-svc`` (every other backend 0), the status naming the new cluster
   active and none pending, ``UpgradeInProgress`` not ``True`` and Ready as in 1;
4. **cleanup**: until every old cluster is deleted (``--deletion-delay`` after the
   switch) and its pods and Services are gone (the garbage collector's deletes stay out
   of the next window), then ``--settle-seconds``;
5. **idle after**: ``--idle-seconds`` more.

Every Gateway listens on Traefik's one entry point with the same rule (``PathPrefix /``,
no hostname), so with N > 1 Traefik spreads the requests over the routes sharing it (at
N = 50, some 10 to 20 services answer); which cluster answered is read from the
simulator's ``x-raysim-pod`` header (``detail.traffic.answered_by_cluster``).

What is counted: kube-apiserver's own ``apiserver_request_total`` (``/metrics``) per phase,
and its audit log (level Metadata, watches left out), which names every request's client
by its User-Agent product (``rayservice-operator``, ``kuberay-operator``; this script is
``bench-incremental``). Per operator (``ours``, ``kuberay``):

- ``idle_{before,after}_status_writes_per_min_per_svc``: PUT/PATCH of ``rayservices/status``
  (only the operator writes it) per idle minute per service; ``..._raycluster_...`` the
  same for ``rayclusters/status``; ``idle_{before,after}_operator_writes_per_min``: every
  write of the operator (audit; create, update, patch, delete) per idle minute;
  ``idle_{before,after}_writes_all_clients_per_min``: every write the API server took
  (metric), but the control plane's Lease renewals;
  ``idle_{before,after}_dashboard_requests_per_min_per_svc``: requests the simulated heads
  got (dashboard, Serve proxy, agent);
- ``upgrade_status_writes_per_svc`` (from the spec change to finished, per service),
  ``upgrade_status_writes_per_step`` (that / ``ceil(100 / --step)``, the traffic steps of
  an upgrade), ``upgrade_route_writes_per_svc`` (PUT/PATCH ``httproutes``: the steps the
  operator took), ``upgrade_operator_writes_per_svc``, ``upgrade_serve_puts_per_svc``
  (Serve config and ``target_capacity`` PUTs the heads got);
- ``time_to_ready_s``, ``time_to_upgraded_s`` (from the first spec change to the poll that
  sees the last service finished), ``time_to_old_deleted_s`` (to the end of 4);
- ``requests``, ``failed_requests`` (anything but 200: the answer's status or the
  exception's name, by kind in ``detail.traffic.failed_by``);
- ``writes_per_svc``: the operator's writes from the first create to the end of idle
  after, per service; ``writes_all_clients_per_svc`` every client's (Leases aside);
  ``conflicts``: the operator's writes answered 409;
- ``peak_rss_mib``, ``cpu_s`` of the operator process (``_common.Manager``).

``detail`` holds the writes by ``verb resource[/subresource]`` per phase (the operator's,
from the audit log; all clients', from the metric), the traffic by answering cluster, and
the per-phase windows. If KubeRay's upgrade does not finish within ``--upgrade-timeout``,
its run records ``upgrade_error`` (with the services' conditions and the last lines of its
log) and skips the later phases; its idle-before figures stand.

Last stdout line: ``{"bench": "incremental", "services", "idle_seconds", ...options,
"ours": {...}, "kuberay": {...}, "ratios": {ours / kuberay}}`` (``ratios`` with both),
or with an ``error`` key and exit status 1 when a run failed. Progress goes to stderr.
Usage: ``.venv/bin/python hack/bench/incremental.py --services 50 --operator both``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import copy
import dataclasses
import datetime
import json
import logging
import math
import os
import pathlib
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Iterable, Mapping
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import _common  # noqa: E402  # hack/bench/_common.py (this script's directory)
import aiohttp  # noqa: E402
import compare  # noqa: E402  # hack/bench/compare.py: KubeRay's process, the audit log
import raycluster as raycluster_bench  # noqa: E402
import rayservice as rayservice_bench  # noqa: E402  # the RayService shape, counting helpers
import structlog  # noqa: E402

import api.v1 as v1  # noqa: E402
from controllers.rayservice import gateway as gateway_objects  # noqa: E402
from runtime.client import client as client_  # noqa: E402
from runtime.client import errors, resources  # noqa: E402
from runtime.testing import controlplane  # noqa: E402
from tests.support import gateway, raysim  # noqa: E402

__all__ = ["main"]

OPERATORS = ("ours", "kuberay")
BENCH_USER_AGENT = "bench-incremental/1"
LABEL = "bench=incremental"
APP_PATH = "/fruit"
"""The path the traffic loop asks for: ``rayservice.py``'s application ``fruit``."""
NEW_RAY_VERSION = "2.61.0"
PODS = rayservice_bench.PODS
SERVICES = resources.default_registry.for_kind("v1", "Service")
KUBERAY_CACHE = pathlib.Path(
    os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
) / "rayservice-operator/peers/kuberay/v1.7.0"  # fmt: skip
PHASES = ("init", "idle_before", "upgrade", "cleanup", "idle_after")
UPGRADE_CONDITION = "UpgradeInProgress"

FIGURES = (
    "time_to_ready_s",
    "idle_before_status_writes_per_min_per_svc", "idle_after_status_writes_per_min_per_svc",
    "upgrade_status_writes_per_svc", "upgrade_status_writes_per_step", "writes_per_svc",
    "time_to_upgraded_s", "requests", "failed_requests",
)  # fmt: skip
"""The issue's figures, first in every run and in this order."""

MORE_FIGURES = (
    "idle_before_raycluster_status_writes_per_min_per_svc",
    "idle_after_raycluster_status_writes_per_min_per_svc",
    "idle_before_operator_writes_per_min", "idle_after_operator_writes_per_min",
    "idle_before_writes_all_clients_per_min", "idle_after_writes_all_clients_per_min",
    "idle_before_dashboard_requests_per_min_per_svc",
    "idle_after_dashboard_requests_per_min_per_svc",
    "init_status_writes_per_svc", "upgrade_raycluster_status_writes_per_svc",
    "upgrade_route_writes_per_svc", "upgrade_operator_writes_per_svc",
    "upgrade_serve_puts_per_svc", "time_to_old_deleted_s", "writes_all_clients_per_svc",
    "conflicts", "peak_rss_mib", "cpu_s",
)  # fmt: skip
"""The other figures a run reports (ratios too)."""


log = _common.logger("bench incremental")


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


# -- the services --------------------------------------------------------------------------


def incremental_service(name: str, namespace: str, args: argparse.Namespace) -> dict[str, Any]:
    """``rayservice.py``'s RayService, upgraded incrementally through the Gateway API."""
    body = rayservice_bench.rayservice(name, namespace, args.deletion_delay)
    body["metadata"]["labels"] = {"bench": "incremental"}
    body["spec"]["upgradeStrategy"] = {
        "type": "NewClusterWithIncrementalUpgrade",
        "clusterUpgradeOptions": {
            "maxSurgePercent": args.max_surge, "stepSizePercent": args.step,
            "intervalSeconds": args.interval, "gatewayClassName": gateway.GATEWAY_CLASS,
        },
    }  # fmt: skip
    body["spec"]["rayClusterConfig"]["enableInTreeAutoscaling"] = True
    return body


def key_of(obj: Mapping[str, Any]) -> tuple[str, str]:
    return (obj["metadata"]["namespace"], obj["metadata"]["name"])


def condition(obj: Mapping[str, Any], kind: str) -> str:
    """The status (``"True"``, ``"False"``, ...) of condition ``kind``; ``""`` if absent."""
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == kind:
            return str(cond.get("status") or "")
    return ""


def pending(obj: Mapping[str, Any]) -> str:
    status = obj.get("status") or {}
    return str((status.get("pendingServiceStatus") or {}).get("rayClusterName") or "")


def route_weights(route: Mapping[str, Any] | None) -> dict[str, int]:
    """``{backend Service name: weight}`` of a route's first rule (weight 1 when unset, as
    the Gateway API defaults it)."""
    rules = ((route or {}).get("spec") or {}).get("rules") or [{}]
    return {
        str(ref.get("name")): int(ref.get("weight", 1)) for ref in rules[0].get("backendRefs") or ()
    }


def all_on(route: Mapping[str, Any] | None, cluster: str) -> bool:
    """The route sends everything to ``cluster``'s serve Service."""
    weights = route_weights(route)
    mine = f"{cluster}-serve-svc"
    return weights.get(mine, 0) > 0 and all(w == 0 for n, w in weights.items() if n != mine)


@dataclasses.dataclass
class World:
    """One poll of the operator's namespaces."""

    services: dict[tuple[str, str], dict[str, Any]]
    clusters: set[tuple[str, str]]
    routes: dict[tuple[str, str], dict[str, Any]]
    gateways: dict[tuple[str, str], dict[str, Any]]
    pods: dict[str, tuple[str, str]]
    """Pod IP -> (namespace, ``ray.io/cluster``) of every live Ray pod."""
    leftovers: set[tuple[str, str]]
    """(namespace, ``ray.io/cluster``) of every pod (terminating ones too) and Service."""


async def observe(client: client_.Client, namespaces: Iterable[str]) -> World:
    world = World({}, set(), {}, {}, {}, set())
    for ns in namespaces:
        services, clusters, routes, gateways, pods, kube_services = await asyncio.gather(
            client.list(v1.RAYSERVICES, ns, label_selector=LABEL),
            client.list(v1.RAYCLUSTERS, ns),
            client.list(gateway_objects.HTTPROUTES, ns),
            client.list(gateway_objects.GATEWAYS, ns),
            client.list(PODS, ns, label_selector="ray.io/cluster"),
            client.list(SERVICES, ns, label_selector="ray.io/cluster"),
        )  # fmt: skip
        world.services.update((key_of(s), s) for s in services.items)
        world.clusters.update(key_of(c) for c in clusters.items)
        world.routes.update((key_of(r), r) for r in routes.items)
        world.gateways.update((key_of(g), g) for g in gateways.items)
        for obj in (*pods.items, *kube_services.items):
            world.leftovers.add((ns, obj["metadata"]["labels"]["ray.io/cluster"]))
        for pod in pods.items:
            ip = (pod.get("status") or {}).get("podIP")
            if ip and not pod["metadata"].get("deletionTimestamp"):
                world.pods[ip] = (ns, pod["metadata"]["labels"]["ray.io/cluster"])
    return world


async def wait_for(
    client: client_.Client,
    process: _common.Manager,
    namespaces: list[str],
    count: int,
    within: float,
    what: str,
    done: Any,
    seen_pods: dict[str, tuple[str, str]] | None = None,
) -> float:
    """Seconds until ``done(service, world)`` holds for all ``count`` services (polling
    every 0.5 s); :class:`_common.BenchError` with one that does not after ``within``."""
    started = time.monotonic()
    last_report = 0.0
    while True:
        process.check_alive()
        world = await observe(client, namespaces)
        if seen_pods is not None:
            seen_pods.update(world.pods)
        good = sum(1 for s in world.services.values() if done(s, world))
        elapsed = time.monotonic() - started
        if good == count and len(world.services) == count:
            return elapsed
        if elapsed > within:
            sample = next((s for s in world.services.values() if not done(s, world)), None)
            if sample is None:
                raise _common.BenchError(
                    f"{len(world.services)} RayServices instead of {count} after {within:.0f} s"
                )
            ns, name = key_of(sample)
            route = world.routes.get((ns, name + gateway_objects.ROUTE_SUFFIX))
            raise _common.BenchError(
                f"{good} of {count} RayServices {what} after {within:.0f} s; one that is not, "
                f"{ns}/{name}: conditions "
                f"{json.dumps((sample.get('status') or {}).get('conditions'))}, active "
                f"{rayservice_bench.active(sample)!r}, pending {pending(sample)!r}, "
                f"route weights {route_weights(route)}"
            )
        if elapsed - last_report >= 10:
            last_report = elapsed
            log(f"{elapsed:.0f} s: {good} of {count} {what}")
        await asyncio.sleep(0.5)


# -- traffic -------------------------------------------------------------------------------


class Traffic:
    """Requests through Traefik, one after the other, until stopped: what answered."""

    def __init__(self, url: str, interval: float) -> None:
        self.url, self.interval = url, interval
        self.requests = 0
        self.failed: collections.Counter[str] = collections.Counter()
        self.by_pod: collections.Counter[str] = collections.Counter()
        self.first_failures: list[tuple[float, str, str]] = []
        self.origin = time.monotonic()
        """Failure times are seconds from this (the scenario sets it to the spec change)."""
        self._stop = asyncio.Event()

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=5, connect=2)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            while not self._stop.is_set():
                try:
                    async with http.get(self.url) as answer:
                        body = (await answer.read()).decode(errors="replace")
                        outcome = "" if answer.status == 200 else str(answer.status)
                        if not outcome:
                            self.by_pod[answer.headers.get(raysim_header(), "?")] += 1
                except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                    outcome, body = type(exc).__name__, str(exc)
                self.requests += 1
                if outcome:
                    self.failed[outcome] += 1
                    if len(self.first_failures) < 10:
                        at = round(time.monotonic() - self.origin, 2)
                        self.first_failures.append((at, outcome, body.strip()[:60]))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), self.interval)

    def stop(self) -> None:
        self._stop.set()


def raysim_header() -> str:
    from tests.support.raysim import inside  # the simulator's own constant

    return inside.POD_HEADER


async def probe(url: str, within: float) -> float:
    """Seconds until ``GET url`` answers 200."""
    started = time.monotonic()
    last = ""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5, connect=2)) as http:
        while time.monotonic() - started < within:
            try:
                async with http.get(url) as answer:
                    last = f"{answer.status} {(await answer.text())[:80]!r}"
                    if answer.status == 200:
                        return time.monotonic() - started
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                last = type(exc).__name__
            await asyncio.sleep(0.5)
    raise _common.BenchError(f"{url} not answered 200 within {within:.0f} s (last: {last})")


# -- counting ------------------------------------------------------------------------------


def sum_writes(delta: rayservice_bench.Counts, resource: str, sub: str = "") -> float:
    return sum(
        n for (verb, res, s, _), n in delta.items()
        if res == resource and s == sub and verb in ("PUT", "PATCH")
    )  # fmt: skip


def writes_all_clients(delta: rayservice_bench.Counts) -> int:
    return sum(
        n for k, n in rayservice_bench.writes_by_kind(delta).items()
        if k not in rayservice_bench.CONTROL_PLANE_WRITES
    )  # fmt: skip


@dataclasses.dataclass
class Marks:
    """What one operator's run recorded for the audit log, read once the control plane
    has stopped (the log is complete then)."""

    operator: str
    count: int
    idle_minutes: float
    windows: dict[str, tuple[datetime.datetime, datetime.datetime]]


def audit_figures(events: list[Any], marks: Marks) -> tuple[dict[str, Any], dict[str, Any]]:
    """The operator's writes per phase and over the run, from the audit log."""
    who = compare.OPERATOR_USER_AGENTS[marks.operator]

    def writes(window: tuple[datetime.datetime, datetime.datetime], code: int | None = None
               ) -> dict[str, int]:  # fmt: skip
        frm, to = window
        found = compare.tally(events, lambda t, w, p, c: (
            frm <= t < to and not p and w.split(" ")[0] in compare.AUDIT_WRITE_VERBS
            and (code is None or c == code)))  # fmt: skip
        return found.get(who, {})

    figures: dict[str, Any] = {}
    detail: dict[str, Any] = {}
    for phase in PHASES:
        if phase in marks.windows:
            detail[phase] = writes(marks.windows[phase])
    for phase in ("idle_before", "idle_after"):
        if phase in detail:
            figures[f"{phase}_operator_writes_per_min"] = round(
                sum(detail[phase].values()) / marks.idle_minutes, 2
            )
    if "upgrade" in detail:
        figures["upgrade_operator_writes_per_svc"] = round(
            sum(detail["upgrade"].values()) / marks.count, 3
        )
    run = writes(marks.windows["run"])
    figures["writes_per_svc"] = round(sum(run.values()) / marks.count, 3)
    figures["conflicts"] = sum(writes(marks.windows["run"], 409).values())
    detail["run"] = run
    return figures, detail


# -- one operator --------------------------------------------------------------------------


@dataclasses.dataclass
class Shared:
    """What both operators' runs share."""

    args: argparse.Namespace
    cp: controlplane.ControlPlane
    sim: raysim.Simulator
    traefik: gateway.Traefik
    work: pathlib.Path


def start_operator(shared: Shared, operator: str, namespaces: list[str]) -> _common.Manager:
    args = shared.args
    work = shared.work / operator
    work.mkdir(exist_ok=True)
    assert shared.cp.kubeconfig is not None
    if operator == "kuberay":
        return compare.kuberay(args.kuberay_bin, shared.cp.kubeconfig, work, extra=[
            f"--watch-namespace={','.join(namespaces)}",
            "--feature-gates=RayServiceIncrementalUpgrade=true",
        ])  # fmt: skip
    return _common.Manager.ours(shared.cp.kubeconfig, work, [
        "--dashboard-address-mode", "kubernetes-proxy", "--leader-elect=false",
        "--log-level", args.manager_log_level, "--log-format", "json",
        f"--gateway-classes={gateway.GATEWAY_CLASS}",
        *(f"--namespace={ns}" for ns in namespaces),
    ])  # fmt: skip


def make_namespaces(cp: controlplane.ControlPlane, namespaces: list[str]) -> None:
    for ns in namespaces:
        cp.request("POST", "/api/v1/namespaces",
                   {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})  # fmt: skip
    deadline = time.monotonic() + 60
    for ns in namespaces:  # kube-controller-manager makes the default accounts
        while True:
            try:
                cp.request("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default")
                break
            except controlplane.ApiError as exc:
                if exc.status != 404 or time.monotonic() > deadline:
                    raise _common.BenchError(f"no default ServiceAccount in {ns}") from exc
                time.sleep(0.1)


async def run_operator(shared: Shared, operator: str, result: dict[str, Any],
                       marks: Marks, last: bool) -> None:  # fmt: skip
    """The scenario of the module docstring for ``operator``; figures into ``result``."""
    args, cp = shared.args, shared.cp
    count = args.services
    spread = min(rayservice_bench.MAX_NAMESPACES, count)
    namespaces = [f"inc-{operator}-{j}" for j in range(spread)]
    make_namespaces(cp, namespaces)
    process = start_operator(shared, operator, namespaces)
    try:
        result["operator_ready_s"] = round(await process.wait_ready(60), 2)
        log(f"{operator}: ready in {result['operator_ready_s']} s (pid {process.popen.pid})")
        client = await client_.Client.from_kubeconfig(
            cp.kubeconfig, options=client_.Options(user_agent=BENCH_USER_AGENT)
        )
        v1.add_to_registry(client.registry)
        async with client:
            await scenario(shared, operator, process, client, namespaces, result, marks)
            result["peak_rss_mib"] = round(process.memory_mib(), 1)
            result["cpu_s"] = round(process.cpu_seconds(), 2)
            if not last:
                await clean_up(client, process, namespaces)
    except BaseException:
        log(f"{operator}: last lines of its log:\n{process.tail(20)}")
        raise
    finally:
        process.stop()
        if os.environ.get("BENCH_KEEP_DIR"):
            log(f"{operator}: log {process.log_path}")


async def scenario(
    shared: Shared,
    operator: str,
    process: _common.Manager,
    client: client_.Client,
    namespaces: list[str],
    result: dict[str, Any],
    marks: Marks,
) -> None:
    args, cp, sim = shared.args, shared.cp, shared.sim
    count = args.services
    windows = marks.windows
    url = shared.traefik.url + APP_PATH
    counts: dict[str, rayservice_bench.Counts] = {}
    planes: dict[str, dict[str, int]] = {}

    def mark(name: str) -> None:
        counts[name] = rayservice_bench.api_counts(cp)
        planes[name] = rayservice_bench.data_plane(sim)

    def delta(frm: str, to: str) -> rayservice_bench.Counts:
        return rayservice_bench.minus(counts[to], counts[frm])

    # -- init ------------------------------------------------------------------------------
    mark("start")
    t_start = now()
    await asyncio.gather(*(
        client.create(incremental_service(f"inc-{i}", namespaces[i % len(namespaces)], args))
        for i in range(count)
    ))  # fmt: skip
    ready_s = await wait_for(
        client, process, namespaces, count, args.ready_timeout, "Ready",
        lambda s, _w: rayservice_bench.ready(s),
    )  # fmt: skip
    result["time_to_ready_s"] = round(ready_s, 2)
    result["gateway_answered_s"] = round(await probe(url, 60), 2)
    log(f"{operator}: all {count} Ready in {ready_s:.1f} s, Traefik answers; "
        f"settling {args.settle_seconds} s")  # fmt: skip
    await asyncio.sleep(args.settle_seconds)
    mark("ready")
    windows["init"] = (t_start, now())
    first = {k: rayservice_bench.active(s) for k, s in
             (await observe(client, namespaces)).services.items()}  # fmt: skip
    init = delta("start", "ready")
    result["init_status_writes_per_svc"] = round(
        sum_writes(init, "rayservices", "status") / count, 3)  # fmt: skip

    # -- idle before -----------------------------------------------------------------------
    await idle(shared, operator, process, "idle_before", result, windows, mark, counts, planes)

    # -- upgrade ---------------------------------------------------------------------------
    traffic = Traffic(url, args.traffic_interval)
    sending = asyncio.create_task(traffic.run())
    seen_pods: dict[str, tuple[str, str]] = dict((await observe(client, namespaces)).pods)
    try:
        await asyncio.sleep(1.0)  # traffic flows before the change
        mark("upgrade_from")
        t_upgrade = now()
        upgrade_started = traffic.origin = time.monotonic()
        for ns in namespaces:
            for s in (await client.list(v1.RAYSERVICES, ns, label_selector=LABEL)).items:
                changed = copy.deepcopy(s)
                changed["spec"]["rayClusterConfig"]["rayVersion"] = NEW_RAY_VERSION
                try:
                    await client.update(changed)
                except errors.Conflict as exc:
                    raise _common.BenchError(
                        f"the benchmark's own update conflicted: {exc}"
                    ) from exc

        def finished(s: Mapping[str, Any], world: World) -> bool:
            key = key_of(s)
            new = rayservice_bench.active(s)
            route = world.routes.get((key[0], key[1] + gateway_objects.ROUTE_SUFFIX))
            return (
                new not in ("", first.get(key, ""))
                and not pending(s)
                and condition(s, UPGRADE_CONDITION) != "True"
                and rayservice_bench.ready(s)
                and all_on(route, new)
            )

        try:
            upgrade_s = await wait_for(
                client, process, namespaces, count, args.upgrade_timeout,
                "upgraded (all traffic on the new cluster, none pending)", finished, seen_pods,
            )  # fmt: skip
        except _common.BenchError as exc:
            if operator != "kuberay":
                raise
            # KubeRay not finishing is a finding, not a failed benchmark: say why, keep
            # what was measured.
            mark("upgrade_to")
            windows["upgrade"] = (t_upgrade, now())
            result["upgrade_error"] = str(exc)
            result["upgrade_log_tail"] = process.tail(30)
            log(f"{operator}: the upgrade did not finish: {exc}")
            traffic_figures(traffic, seen_pods, result)
            upgrade_figures(delta("upgrade_from", "upgrade_to"), planes, result, count, args)
            windows["run"] = (t_start, now())
            return
        result["time_to_upgraded_s"] = round(upgrade_s, 2)
        mark("upgrade_to")
        windows["upgrade"] = (t_upgrade, now())
        log(f"{operator}: all {count} upgraded in {upgrade_s:.1f} s; waiting for the old clusters")

        # -- cleanup -----------------------------------------------------------------------
        def old_gone(s: Mapping[str, Any], world: World) -> bool:
            old = (key_of(s)[0], first.get(key_of(s), ""))
            return old not in world.clusters and old not in world.leftovers

        old = {(k[0], c) for k, c in first.items()}
        gone_s = await wait_for(
            client, process, namespaces, count, args.deletion_delay + 120.0,
            "with the old cluster, its pods and Services gone", old_gone, seen_pods,
        )  # fmt: skip
        result["time_to_old_deleted_s"] = round(time.monotonic() - upgrade_started, 2)
        log(f"{operator}: old clusters gone {gone_s:.1f} s after finishing ({len(old)})")
    finally:
        traffic.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await sending
    traffic_figures(traffic, seen_pods, result)
    await asyncio.sleep(args.settle_seconds)
    mark("cleaned")
    windows["cleanup"] = (windows["upgrade"][1], now())
    upgrade_figures(delta("upgrade_from", "upgrade_to"), planes, result, count, args)
    detail = result.setdefault("detail", {})
    detail.setdefault("writes_all_clients_by_kind", {})["cleanup"] = (
        rayservice_bench.writes_by_kind(delta("upgrade_to", "cleaned"))
    )

    # -- idle after ------------------------------------------------------------------------
    await idle(shared, operator, process, "idle_after", result, windows, mark, counts, planes,
               frm="cleaned")  # fmt: skip
    windows["run"] = (t_start, now())
    whole = delta("start", "idle_after")
    result["writes_all_clients_per_svc"] = round(writes_all_clients(whole) / count, 3)
    detail["writes_all_clients_by_kind"]["init"] = rayservice_bench.writes_by_kind(init)


async def idle(
    shared: Shared, operator: str, process: _common.Manager, phase: str,
    result: dict[str, Any], windows: dict[str, Any], mark: Any, counts: Any, planes: Any,
    frm: str = "ready",
) -> None:  # fmt: skip
    args = shared.args
    count, minutes = args.services, args.idle_seconds / 60
    log(f"{operator}: {phase} for {args.idle_seconds} s")
    t_from = now()
    await asyncio.sleep(args.idle_seconds)
    process.check_alive()
    mark(phase)
    windows[phase] = (t_from, now())
    window = rayservice_bench.minus(counts[phase], counts[frm])
    plane = rayservice_bench.minus(planes[phase], planes[frm])
    result[f"{phase}_status_writes_per_min_per_svc"] = round(
        sum_writes(window, "rayservices", "status") / minutes / count, 3)  # fmt: skip
    result[f"{phase}_raycluster_status_writes_per_min_per_svc"] = round(
        sum_writes(window, "rayclusters", "status") / minutes / count, 3)  # fmt: skip
    result[f"{phase}_writes_all_clients_per_min"] = round(writes_all_clients(window) / minutes, 2)
    result[f"{phase}_dashboard_requests_per_min_per_svc"] = round(
        sum(plane.values()) / minutes / count, 3)  # fmt: skip
    detail = result.setdefault("detail", {})
    detail.setdefault("writes_all_clients_by_kind", {})[phase] = rayservice_bench.writes_by_kind(
        window
    )
    detail.setdefault("data_plane_by_kind", {})[phase] = {
        k: n for k, n in sorted(plane.items()) if n}  # fmt: skip


def upgrade_figures(
    window: rayservice_bench.Counts, planes: Mapping[str, Mapping[str, int]],
    result: dict[str, Any], count: int, args: argparse.Namespace,
) -> None:  # fmt: skip
    status = sum_writes(window, "rayservices", "status") / count
    steps = math.ceil(100 / args.step)
    result["upgrade_status_writes_per_svc"] = round(status, 3)
    result["upgrade_status_writes_per_step"] = round(status / steps, 3)
    result["upgrade_raycluster_status_writes_per_svc"] = round(
        sum_writes(window, "rayclusters", "status") / count, 3)  # fmt: skip
    result["upgrade_route_writes_per_svc"] = round(sum_writes(window, "httproutes") / count, 3)
    plane = rayservice_bench.minus(planes["upgrade_to"], planes["upgrade_from"])
    result["upgrade_serve_puts_per_svc"] = round(
        sum(n for k, n in plane.items() if k.startswith("dashboard PUT ")) / count, 3)  # fmt: skip
    detail = result.setdefault("detail", {})
    detail.setdefault("writes_all_clients_by_kind", {})["upgrade"] = (
        rayservice_bench.writes_by_kind(window)
    )
    detail.setdefault("data_plane_by_kind", {})["upgrade"] = {
        k: n for k, n in sorted(plane.items()) if n}  # fmt: skip


def traffic_figures(
    traffic: Traffic, pods: Mapping[str, tuple[str, str]], result: dict[str, Any]
) -> None:
    result["requests"] = traffic.requests
    result["failed_requests"] = sum(traffic.failed.values())
    by_cluster: collections.Counter[str] = collections.Counter()
    for ip, n in traffic.by_pod.items():
        ns, cluster = pods.get(ip, ("?", ip))
        by_cluster[f"{ns}/{cluster}"] += n
    result.setdefault("detail", {})["traffic"] = {
        "failed_by": dict(traffic.failed),
        "first_failures": traffic.first_failures,
        "answered_by_cluster": dict(sorted(by_cluster.items())),
    }


async def clean_up(client: client_.Client, process: _common.Manager, namespaces: list[str]) -> None:
    """Delete the RayServices (the operator still running) and wait until nothing of
    theirs is left: the next operator's routes are then the only ones Traefik serves."""
    log("deleting the RayServices before the next operator")
    for ns in namespaces:
        for s in (await client.list(v1.RAYSERVICES, ns, label_selector=LABEL)).items:
            with contextlib.suppress(errors.NotFound):
                await client.delete(v1.RAYSERVICES, ns, s["metadata"]["name"],
                                    propagation_policy="Background")  # fmt: skip
    deadline = time.monotonic() + 180
    while True:
        process.check_alive()
        world = await observe(client, namespaces)
        left = (len(world.services), len(world.clusters), len(world.routes),
                len(world.gateways), len(world.leftovers))  # fmt: skip
        if not any(left):
            return
        if time.monotonic() > deadline:
            raise _common.BenchError(
                f"still there 180 s after deleting (services, clusters, routes, gateways, "
                f"clusters with pods or Services): {left}"
            )
        await asyncio.sleep(1.0)


# -- the run -------------------------------------------------------------------------------


def ratios(ours: Mapping[str, Any], kuberay: Mapping[str, Any]) -> dict[str, float | None]:
    """ours / kuberay per figure (``None`` where KubeRay's is 0 or missing)."""
    out: dict[str, float | None] = {}
    for k in (*FIGURES, *MORE_FIGURES):
        a, b = ours.get(k), kuberay.get(k)
        if isinstance(a, int | float) and isinstance(b, int | float):
            out[k] = round(a / b, 3) if b else None
    return out


def ordered(result: dict[str, Any]) -> dict[str, Any]:
    first = {k: result.pop(k) for k in FIGURES if k in result}
    detail = result.pop("detail", {})
    return {**first, **result, "detail": detail}


async def run_all(args: argparse.Namespace, summary: dict[str, Any]) -> None:
    operators = OPERATORS if args.operator == "both" else (args.operator,)
    count = args.services
    nodes = max(2, (count * 2 * 2 * 2) // raycluster_bench.PODS_PER_NODE + 1)
    t0 = time.monotonic()
    with rayservice_bench.workdir() as work:
        audit_log = work / "audit.log"
        (work / "audit-policy.json").write_text(json.dumps(compare.AUDIT_POLICY))
        flags = [f"--audit-policy-file={work / 'audit-policy.json'}",
                 f"--audit-log-path={audit_log}", "--audit-log-mode=blocking"]  # fmt: skip
        crd_dir = work / "crds"
        crd_dir.mkdir()
        for path in rayservice_bench.CRD_DIR.glob("*.yaml"):
            shutil.copy(path, crd_dir / path.name)
        if "kuberay" in operators:
            shutil.copy(args.kuberay_crds / "ray.io_rayjobs.yaml", crd_dir / "ray.io_rayjobs.yaml")
        options = controlplane.Options(
            bin_dir=args.bin_dir, controller_manager=True, scheduler=True, kwok=True,
            nodes=nodes, pod_network=True, start_timeout=120, extra_apiserver_flags=flags,
        )  # fmt: skip
        results: dict[str, dict[str, Any]] = {}
        all_marks: list[Marks] = []
        with (
            controlplane.running(options) as cp,
            raysim.running(cp, deploy_delay=args.deploy_delay, log_path=work / "raysim.log") as sim,
            gateway.running(cp, work / "traefik") as traefik,
        ):
            assert cp.kubeconfig is not None
            cp.install_crds(crd_dir)
            log(f"control plane, simulator and Traefik ({traefik.url}) up in "
                f"{time.monotonic() - t0:.1f} s")  # fmt: skip
            shared = Shared(args, cp, sim, traefik, work)
            for i, operator in enumerate(operators):
                result: dict[str, Any] = {"load_avg_1m": round(os.getloadavg()[0], 2)}
                results[operator] = result
                marks = Marks(operator, count, args.idle_seconds / 60, {})
                all_marks.append(marks)
                log(f"{operator}: starting")
                t1 = time.monotonic()
                await run_operator(shared, operator, result, marks, last=i == len(operators) - 1)
                result["total_s"] = round(time.monotonic() - t1, 1)
        # The control plane has stopped: the audit log is complete.
        events = compare.audit_events(audit_log)
        for marks in all_marks:
            if "run" not in marks.windows:
                continue
            figures, detail = audit_figures(events, marks)
            results[marks.operator].update(figures)
            results[marks.operator].setdefault("detail", {})["operator_writes_by_kind"] = detail
            results[marks.operator]["detail"]["windows"] = {
                k: [a.isoformat(), b.isoformat()] for k, (a, b) in marks.windows.items()
            }
    for operator, result in results.items():
        summary[operator] = ordered(result)
    if len(results) == 2:
        summary["ratios"] = ratios(summary["ours"], summary["kuberay"])
    summary["total_s"] = round(time.monotonic() - t0, 1)


def main(argv: list[str] | None = None) -> int:
    # fmt: off
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add = parser.add_argument
    add("--services", type=int, required=True)
    add("--operator", default="both", choices=["both", *OPERATORS],
        help="ours, KubeRay v1.7.0, or ours then KubeRay (default both)")
    add("--idle-seconds", type=float, default=60.0,
        help="each idle window, before and after the upgrade (default 60)")
    add("--max-surge", type=int, default=50, help="maxSurgePercent (default 50)")
    add("--step", type=int, default=50, help="stepSizePercent (default 50)")
    add("--interval", type=int, default=5, help="intervalSeconds (default 5)")
    add("--deletion-delay", type=int, default=10,
        help="rayClusterDeletionDelaySeconds (default 10)")
    add("--deploy-delay", type=float, default=3.0,
        help="the simulator's seconds from a Serve PUT to RUNNING (default 3)")
    add("--settle-seconds", type=float, default=5.0,
        help="after all Ready / the old clusters gone, before counting (default 5)")
    add("--traffic-interval", type=float, default=0.05,
        help="seconds between requests through the gateway (default 0.05)")
    add("--ready-timeout", type=float, default=None, help="default 120 + 3 s per service")
    add("--upgrade-timeout", type=float, default=None,
        help="default 180 + 4 intervals + 4 s per service")
    add("--manager-log-level", default="info", choices=["debug", "info", "warning", "error"])
    add("--kuberay-bin", type=pathlib.Path, default=None,
        help=f"default {KUBERAY_CACHE}/bin/kuberay-operator")
    add("--kuberay-crds", type=pathlib.Path, default=None,
        help=f"KubeRay v1.7.0's CRD directory (its RayJob's); default {KUBERAY_CACHE}/crds, "
        "else what KUBERAY_VERSION=v1.7.0 hack/peers/kuberay.sh --crds prints")
    add("--bin-dir", type=pathlib.Path, default=None,
        help="control-plane binaries; default $CONTROLPLANE_BIN_DIR or build.sh")
    # fmt: on
    args = parser.parse_args(argv)
    if args.services < 1 or args.idle_seconds <= 0:
        parser.error("--services >= 1, --idle-seconds > 0")
    if not (0 < args.step <= args.max_surge <= 100) or args.interval <= 0:
        parser.error("0 < --step <= --max-surge <= 100 and --interval > 0 (KubeRay's rules)")
    if args.ready_timeout is None:
        args.ready_timeout = 120.0 + 3.0 * args.services
    if args.upgrade_timeout is None:
        args.upgrade_timeout = 180.0 + 4 * args.interval + 4.0 * args.services
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    summary: dict[str, Any] = {
        "bench": "incremental", "services": args.services, "operators": args.operator,
        "idle_seconds": args.idle_seconds,
        "cluster_upgrade_options": {"maxSurgePercent": args.max_surge,
                                    "stepSizePercent": args.step,
                                    "intervalSeconds": args.interval},
        "deletion_delay": args.deletion_delay, "deploy_delay": args.deploy_delay,
    }  # fmt: skip
    status = 0
    try:
        args.bin_dir = _common.bin_dir(args.bin_dir)
        if args.operator != "ours":
            args.kuberay_bin = args.kuberay_bin or KUBERAY_CACHE / "bin/kuberay-operator"
            if not os.access(args.kuberay_bin, os.X_OK):
                raise _common.BenchError(
                    f"no KubeRay v1.7.0 binary at {args.kuberay_bin}: build it with "
                    "KUBERAY_VERSION=v1.7.0 hack/peers/kuberay.sh, or give --kuberay-bin"
                )
            args.kuberay_crds = args.kuberay_crds or kuberay_crds()
        asyncio.run(run_all(args, summary))
        errors_ = [f"{op}: {summary[op]['upgrade_error']}" for op in OPERATORS
                   if "upgrade_error" in summary.get(op, {})]  # fmt: skip
        if errors_:
            log("upgrade not finished: " + "; ".join(e.splitlines()[0] for e in errors_))
    except (
        _common.BenchError, controlplane.ControlPlaneError, raysim.SimulatorError,
        gateway.GatewayError, subprocess.CalledProcessError,
    ) as exc:  # fmt: skip
        log(f"error: {exc}")
        summary["error"] = str(exc).splitlines()[0]
        status = 1
    except Exception as exc:  # still one JSON line last, with the traceback above
        traceback.print_exc()
        summary["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
        status = 1
    print(json.dumps(summary), flush=True)
    return status


def kuberay_crds() -> pathlib.Path:
    if (KUBERAY_CACHE / "crds/ray.io_rayjobs.yaml").exists():
        return KUBERAY_CACHE / "crds"
    done = subprocess.run(
        [str(compare.KUBERAY_SH), "--crds"], capture_output=True, text=True, check=True,
        env={**os.environ, "KUBERAY_VERSION": "v1.7.0"},
    )  # fmt: skip
    return pathlib.Path(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    raise SystemExit(main())
