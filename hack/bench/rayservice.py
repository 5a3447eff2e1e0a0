"""Benchmark: N RayServices brought to Ready by ``rayservice-manager``, left alone, then upgraded.

The issue-13 experiment (KubeRay v1.5.0 was measured the same way): what the API server
and the Ray heads see of one operator process running RayServices.

Starts etcd + kube-apiserver + kube-controller-manager (EndpointSlices, garbage
collection) + kube-scheduler + kwok with the pod network
(``runtime.testing.controlplane``, binaries from ``hack/controlplane/build.sh``; needs
root), the Ray simulator (``tests.support.raysim``: something answers at every head pod's IP the
way a Ray head does; ``--deploy-delay`` seconds from a Serve PUT to ``RUNNING``),
installs ``config/crd/bases``, starts the manager as its own process
(``rayservice-manager --kubeconfig ... --dashboard-address-mode <mode> --metrics-bind-address
127.0.0.1:<free> --health-probe-bind-address 127.0.0.1:<free>``) and waits for its
``/readyz``. Then:

1. **init**: creates ``--services`` RayServices ``bench-<i>`` at once (the shape of
   ``config/samples/ray_v1_rayservice.yaml``: two applications, one head, one worker,
   ``rayClusterDeletionDelaySeconds: --deletion-delay``), spread over a few namespaces,
   and waits (bounded by ``--ready-timeout``) until every one is Ready (condition
   ``Ready=True``, every application ``RUNNING``, ``numServeEndpoints > 0``), then
   ``--settle-seconds`` more for the writes a convergence triggers (the last
   EndpointSlice update and the status write it causes) plus ``2 * --serve-poll-max``
   for the manager's poll interval to reach its ceiling (writes meanwhile count as
   init), so the steady window measures the steady rate;
2. **steady**: ``--steady-seconds`` of nothing changing;
3. **unhealthy**: flips application ``UNHEALTHY_APP`` of every RayService to
   ``UNHEALTHY`` through the simulator's fault switch (``unhealthy=``, at its active
   head's IP) and, watching the RayServices, takes per service the time from just
   before its flip until ``status.activeServiceStatus.applicationStatuses.<app>.status``
   says ``UNHEALTHY`` (bounded by ``3 * --serve-poll-max + 30`` s). Once Ready and
   unchanged the reconciler polls each dashboard at doubling intervals up to
   ``--serve-poll-max``, so the worst case is about that maximum after the steady
   window. Then the fault is undone (``healthy=``) and the benchmark waits until every
   service is Ready (the application ``RUNNING``) again, then ``--settle-seconds`` more.
   The fault adds status writes (two per service: to ``UNHEALTHY`` and back), counted
   as ``unhealthy_status_writes`` and kept out of the steady and upgrade figures;
4. **upgrade**: changes ``spec.rayClusterConfig.rayVersion`` of every RayService and
   waits until each is Ready on a *new* active cluster with its old cluster deleted
   (after its deletion delay), then ``--settle-seconds`` more.

What is counted, from kube-apiserver's own ``apiserver_request_total`` (``/metrics``),
per phase (the benchmark's own requests are few and named below):

- ``init_status_writes``, ``steady_status_writes``, ``unhealthy_status_writes``,
  ``upgrade_status_writes``: PUT or PATCH of ``rayservices/status`` (only the manager
  writes it) in that phase's window only, **per service** (/ N);
- ``steady_writes_all_kinds``: every request whose verb is not a read (GET, LIST,
  WATCH, ...) or a proxy ``CONNECT`` (data-plane traffic, counted apart) in the steady
  window, of any resource and by any client - the benchmark itself makes none then -
  except the control plane's own Lease renewals (``PUT leases``: kube-apiserver's
  identity Lease every 10 s, with or without an operator; the manager holds no Lease
  with ``--leader-elect=false``), which are ``steady_control_plane_writes`` (``leases``
  lists the Leases there are); ``steady_writes_by_kind`` breaks all of them down by
  ``verb resource[/subresource]``;
- ``conflicts``: 409 answers the manager got over the whole run (its own
  ``rest_client_requests_total{code="409"}``); ``conflicts_all_clients``: every write
  answered 409 (``apiserver_request_total``), kube-controller-manager's included -
  none are the benchmark's (it creates fresh objects and updates the specs it has
  just read);
- ``writes_by_kind`` per phase (``init``, ``unhealthy``, ``upgrade``; ``steady`` is
  ``steady_writes_by_kind``): the write verbs
  by resource, all clients (kube-controller-manager's EndpointSlices, kwok's pod
  status and the scheduler's bindings included), for reading where the writes went.

From the Ray simulator's request counts (every HTTP request a head IP got, by port,
method and path; connections reset before a request too):

- ``dashboard_requests_per_min_steady``: requests to the heads (dashboard, Serve
  proxy and agent ports) per minute during the steady window, **per service**;
  ``data_plane_steady_by_kind`` breaks them down by ``port method path``;
- ``serve_puts``: Serve config PUTs over the whole run (one per cluster and config is
  the floor: 2 per service here);
- ``time_to_ready_s`` (from the first create to the poll that sees the last Ready),
  ``upgrade_s`` (from the first spec change to the last old cluster gone);
- ``unhealthy_report_s_max``, ``unhealthy_report_s_p50``: the worst and the median
  (lower median) of the per-service times to report ``UNHEALTHY`` (phase 3), and
  ``unhealthy_recovered_s`` (from undoing the fault to the poll that sees the last
  service Ready again).

If something does not converge in time (or the manager dies), the last line is still
one JSON object, with an ``error`` key, and the exit status is 1. Last stdout line: one
JSON object; progress goes to stderr. Usage: ``.venv/bin/python hack/bench/rayservice.py
--services 1 --steady-seconds 900``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import logging
import os
import pathlib
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import _common  # noqa: E402  # hack/bench/_common.py (this script's directory)
import raycluster as raycluster_bench  # noqa: E402  # hack/bench/raycluster.py: manager, metrics
import structlog  # noqa: E402

import api.v1 as v1  # noqa: E402
from runtime.client import client as client_  # noqa: E402
from runtime.client import errors, resources  # noqa: E402
from runtime.testing import controlplane  # noqa: E402
from tests.support import raysim  # noqa: E402

CRD_DIR = ROOT / "config/crd/bases"
PODS = resources.default_registry.for_kind("v1", "Pod")
MAX_NAMESPACES = 4
READ_VERBS = raycluster_bench.READ_VERBS
"""Reads (and ``CONNECT``, the proxy subresources' verb: data-plane traffic)."""

CONTROL_PLANE_WRITES = frozenset({"PUT leases"})
"""Writes the control plane makes on its own, operator or not: kube-apiserver renews its
identity Lease (``kube-system/apiserver-<id>``) every 10 s, kube-controller-manager and
kube-scheduler theirs. The manager runs with ``--leader-elect=false`` and holds no Lease.
They are reported as ``steady_control_plane_writes``, not in ``steady_writes_all_kinds``."""

HEADLINE = (
    "bench", "services", "init_status_writes", "time_to_ready_s", "steady_seconds",
    "steady_status_writes", "steady_writes_all_kinds", "upgrade_status_writes", "conflicts",
    "dashboard_requests_per_min_steady", "unhealthy_report_s_max", "unhealthy_report_s_p50",
)  # fmt: skip
"""The keys every run reports, first and in this order; the others follow."""

SERVE_CONFIG = """\
applications:
  - name: fruit
    route_prefix: /fruit
    import_path: fruit.deployment_graph
    deployments:
      - {name: FruitMarket, ray_actor_options: {num_cpus: 0.1}}
      - {name: MangoStand, ray_actor_options: {num_cpus: 0.1}}
  - name: calculator
    route_prefix: /calc
    import_path: conditional_dag.serve_dag
    deployments:
      - {name: Router, ray_actor_options: {num_cpus: 0.1}}
      - {name: Adder, ray_actor_options: {num_cpus: 0.1}}
"""
"""The sample's two applications (without its remote ``working_dir``: nothing downloads)."""

UNHEALTHY_APP = "fruit"
"""The application the unhealthy phase flips, in every RayService."""

Counts = dict[tuple[str, str, str, str], float]
"""``apiserver_request_total`` by (verb, resource, subresource, code)."""


BenchError = _common.BenchError


log = _common.logger("bench rayservice")


# -- counting ------------------------------------------------------------------------------


def api_counts(cp: controlplane.ControlPlane) -> Counts:
    """``apiserver_request_total`` summed by (verb, resource, subresource, code)."""
    counts: Counts = {}
    for name, labels, value in _common.parse_metrics(cp.metrics()):
        if name != "apiserver_request_total":
            continue
        key = (labels.get("verb", ""), labels.get("resource", ""),
               labels.get("subresource", ""), labels.get("code", ""))  # fmt: skip
        counts[key] = counts.get(key, 0.0) + value
    return counts


def minus(now: Mapping[Any, float], then: Mapping[Any, float]) -> dict[Any, float]:
    return {k: now.get(k, 0.0) - then.get(k, 0.0) for k in now.keys() | then.keys()}


def status_writes(delta: Counts) -> float:
    return sum(
        n
        for (verb, res, sub, _), n in delta.items()
        if res == "rayservices" and sub == "status" and verb in ("PUT", "PATCH")
    )


def writes_by_kind(delta: Counts) -> dict[str, int]:
    out: dict[str, int] = {}
    for (verb, res, sub, _), n in delta.items():
        if verb in READ_VERBS or not n:
            continue
        key = f"{verb} {res}" + (f"/{sub}" if sub else "")
        out[key] = out.get(key, 0) + int(n)
    return dict(sorted(out.items()))


def conflicts(delta: Counts) -> int:
    return int(sum(n for (verb, _, _, code), n in delta.items()
                   if code == "409" and verb not in READ_VERBS))  # fmt: skip


def data_plane(sim: raysim.Simulator) -> dict[str, int]:
    """The simulator's request counts, by ``port method path`` (all head IPs)."""
    out: dict[str, int] = {}
    for (_, port, method, path), n in sim.requests().items():
        key = f"{port} {method or 'RESET'} {path}".rstrip()
        out[key] = out.get(key, 0) + n
    return out


# -- the services --------------------------------------------------------------------------


def rayservice(
    name: str, namespace: str, deletion_delay: int, *, workers: bool = True
) -> dict[str, Any]:
    """The benchmark's RayService: the sample's two applications on a head and (unless
    ``workers`` is false: head-only, ``compare.py --head-only``) one worker group of one."""

    def template(container: str, ports: list[dict[str, Any]]) -> dict[str, Any]:
        return {"spec": {"containers": [{
            "name": container, "image": "rayproject/ray:2.60.0", "ports": ports,
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                          "limits": {"cpu": "1", "memory": "1Gi"}},
        }]}}  # fmt: skip

    head_ports = [
        {"name": n, "containerPort": p}
        for n, p in (("gcs", 6379), ("dashboard", 8265), ("client", 10001), ("serve", 8000))
    ]
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": name, "namespace": namespace, "labels": {"bench": "rayservice"}},
        "spec": {
            "upgradeStrategy": {"type": "NewCluster"},
            "rayClusterDeletionDelaySeconds": deletion_delay,
            "serveConfigV2": SERVE_CONFIG,
            "rayClusterConfig": {
                "rayVersion": "2.60.0",
                "headGroupSpec": {"rayStartParams": {"dashboard-host": "0.0.0.0"},
                                  "template": template("ray-head", head_ports)},
                "workerGroupSpecs": [{
                    "groupName": "serve-workers", "replicas": 1, "minReplicas": 1,
                    "maxReplicas": 3, "rayStartParams": {}, "template": template("ray-worker", []),
                }] if workers else [],
            },
        },
    }  # fmt: skip


def ready(obj: Mapping[str, Any]) -> bool:
    status = obj.get("status") or {}
    cond = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), None)
    apps = (status.get("activeServiceStatus") or {}).get("applicationStatuses") or {}
    return (
        bool(cond and cond.get("status") == "True")
        and bool(apps)
        and all(a.get("status") == "RUNNING" for a in apps.values())
        and int(status.get("numServeEndpoints") or 0) > 0
    )


def active(obj: Mapping[str, Any]) -> str:
    status = obj.get("status") or {}
    return str((status.get("activeServiceStatus") or {}).get("rayClusterName") or "")


async def wait_until(
    client: client_.Client,
    manager: _common.Manager,
    count: int,
    within: float,
    started: float,
    what: str,
    done: Any,
    seen: dict[tuple[str, str], float] | None = None,
) -> float:
    """Seconds from ``started`` until ``done(services, clusters)`` holds for all ``count``;
    ``seen`` gets, per RayService (namespace, name), the seconds of the first poll that
    found it done. Polls every 0.25 s (every ``count / 1000`` s above 250 services)."""
    last_report = 0.0
    while True:
        manager.check_alive()
        services = await client.list(v1.RAYSERVICES, None, label_selector="bench=rayservice")
        clusters = await client.list(v1.RAYCLUSTERS, None)
        names = {(c["metadata"]["namespace"], c["metadata"]["name"]) for c in clusters.items}
        good_ones = [s for s in services.items if done(s, names)]
        good = len(good_ones)
        if seen is not None:
            at = time.monotonic() - started
            for s in good_ones:
                seen.setdefault((s["metadata"]["namespace"], s["metadata"]["name"]), at)
        elapsed = time.monotonic() - started
        if good == count:
            return elapsed
        if elapsed > within:
            sample = next((s for s in services.items if not done(s, names)), {})
            raise BenchError(
                f"{good} of {count} RayServices {what} after {within:.0f} s; one that is not: "
                f"{json.dumps((sample.get('status') or {}).get('conditions'))}\n"
                f"last lines of the manager log:\n{manager.tail(10)}"
            )
        if elapsed - last_report >= 10:
            last_report = elapsed
            log(f"{elapsed:.0f} s: {good} of {count} {what}")
        await asyncio.sleep(max(0.25, count / 1000))


def app_status(obj: Mapping[str, Any], app: str) -> str:
    """``status.activeServiceStatus.applicationStatuses.<app>.status`` (``""`` if absent)."""
    status = obj.get("status") or {}
    apps = (status.get("activeServiceStatus") or {}).get("applicationStatuses") or {}
    return str((apps.get(app) or {}).get("status") or "")


async def head_ips(client: client_.Client) -> dict[tuple[str, str], str]:
    """The pod IP of every live head, by (namespace, ``ray.io/cluster``)."""
    pods = await client.list(PODS, None, label_selector="ray.io/node-type=head")
    return {
        (p["metadata"]["namespace"], p["metadata"]["labels"]["ray.io/cluster"]): p["status"][
            "podIP"
        ]
        for p in pods.items
        if not p["metadata"].get("deletionTimestamp") and (p.get("status") or {}).get("podIP")
    }


async def time_to_unhealthy(
    client: client_.Client, sim: raysim.Simulator, within: float
) -> dict[tuple[str, str], float]:
    """Flip :data:`UNHEALTHY_APP` of every RayService to ``UNHEALTHY`` at its active head
    and watch the RayServices: seconds per service from just before its flip until its
    status says ``UNHEALTHY``."""
    listed = await client.list(v1.RAYSERVICES, None, label_selector="bench=rayservice")
    ips = await head_ips(client)
    flipped_at: dict[tuple[str, str], float] = {}
    reported: dict[tuple[str, str], float] = {}
    version: str | None = listed.resource_version

    async def watch() -> None:
        nonlocal version
        while len(reported) < len(listed.items):
            async for event in client.watch(
                v1.RAYSERVICES, None, resource_version=version, timeout_seconds=300,
                label_selector="bench=rayservice",
            ):  # fmt: skip
                obj = event["object"]
                version = obj["metadata"].get("resourceVersion", version)
                key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
                if event["type"] == "BOOKMARK" or key in reported or key not in flipped_at:
                    continue
                if app_status(obj, UNHEALTHY_APP) == "UNHEALTHY":
                    reported[key] = time.monotonic() - flipped_at[key]
                    if len(reported) == len(listed.items):
                        return

    watching = asyncio.create_task(watch())
    try:
        await asyncio.sleep(0.5)  # the watch is open before the first flip
        for s in listed.items:
            key = (s["metadata"]["namespace"], s["metadata"]["name"])
            ip = ips.get((key[0], active(s)))
            if ip is None:
                raise BenchError(f"no live head pod for {key} (cluster {active(s)!r})")
            flipped_at[key] = time.monotonic()
            answer = await asyncio.to_thread(sim.fault, ip, unhealthy=UNHEALTHY_APP)
            if not answer.get("ok"):
                raise BenchError(f"the simulator did not flip {key} at {ip}: {answer}")
        try:
            await asyncio.wait_for(asyncio.shield(watching), within)
        except TimeoutError:
            missing = sorted(set(flipped_at) - set(reported))
            raise BenchError(
                f"{len(missing)} RayServices not reported UNHEALTHY within {within:.0f} s "
                f"of the flip, e.g. {missing[:3]}"
            ) from None
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
    for s in listed.items:
        key = (s["metadata"]["namespace"], s["metadata"]["name"])
        answer = await asyncio.to_thread(sim.fault, ips[(key[0], active(s))], healthy=UNHEALTHY_APP)
        if not answer.get("ok"):
            raise BenchError(f"the simulator did not undo the fault of {key}: {answer}")
    return reported


@contextlib.contextmanager
def workdir() -> Iterator[pathlib.Path]:
    path = pathlib.Path(tempfile.mkdtemp(prefix="bench-rayservice-"))
    try:
        yield path
    finally:
        if not os.environ.get("BENCH_KEEP_DIR"):
            shutil.rmtree(path, ignore_errors=True)
        else:
            log(f"kept {path}")


async def run(args: argparse.Namespace, result: dict[str, Any]) -> None:
    count = args.services
    namespaces = [f"bench-rs-{j}" for j in range(min(MAX_NAMESPACES, count))]
    nodes = max(2, (count * 2 * 2) // raycluster_bench.PODS_PER_NODE + 1)
    result.update(
        steady_seconds=args.steady_seconds, address_mode=args.dashboard_address_mode,
        serve_poll_max=args.serve_poll_max, deploy_delay=args.deploy_delay,
        deletion_delay=args.deletion_delay, load_avg_1m=round(os.getloadavg()[0], 2),
    )  # fmt: skip
    options = controlplane.Options(
        bin_dir=_common.bin_dir(args.bin_dir), controller_manager=True, scheduler=True,
        kwok=True, nodes=nodes, pod_network=True, start_timeout=120,
    )  # fmt: skip
    manager_args = [
        "--log-level", args.manager_log_level, "--log-format", "json", "--leader-elect=false",
        "--dashboard-address-mode", args.dashboard_address_mode,
        "--serve-poll-max", str(args.serve_poll_max),
    ]  # fmt: skip
    t0 = time.monotonic()
    with (
        workdir() as work,
        controlplane.running(options) as cp,
        raysim.running(cp, deploy_delay=args.deploy_delay, log_path=work / "raysim.log") as sim,
    ):
        assert cp.kubeconfig is not None
        cp.install_crds(CRD_DIR)
        for namespace in namespaces:
            cp.request(
                "POST",
                "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            )
        deadline = time.monotonic() + 60
        for namespace in namespaces:  # let kube-controller-manager make the default accounts
            while True:
                try:
                    cp.request("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/default")
                    break
                except controlplane.ApiError as exc:
                    if exc.status != 404 or time.monotonic() > deadline:
                        raise BenchError(f"no default ServiceAccount in {namespace}") from exc
                    await asyncio.sleep(0.1)
        log(f"control plane and simulator up in {time.monotonic() - t0:.1f} s")

        manager = _common.Manager.ours(cp.kubeconfig, work, manager_args)
        try:
            result["manager_ready_s"] = round(await manager.wait_ready(60), 2)
            log(f"manager ready in {result['manager_ready_s']} s (pid {manager.popen.pid})")
            client = await client_.Client.from_kubeconfig(cp.kubeconfig)
            v1.add_to_registry(client.registry)
            async with client:
                # -- init ------------------------------------------------------------------
                before = api_counts(cp)
                started = time.monotonic()
                await asyncio.gather(*(
                    client.create(rayservice(f"bench-{i}", namespaces[i % len(namespaces)],
                                             args.deletion_delay))
                    for i in range(count)
                ))  # fmt: skip
                ready_s = await wait_until(
                    client, manager, count, args.ready_timeout, started, "Ready",
                    lambda s, _names: ready(s),
                )  # fmt: skip
                result["time_to_ready_s"] = round(ready_s, 2)
                warmup = args.settle_seconds + 2 * args.serve_poll_max
                log(f"all {count} Ready in {ready_s:.1f} s; settling {warmup} s")
                # Settle, and let the poll interval climb to its ceiling (2, 4, 8, 10 s):
                # the steady window measures the steady rate. Writes meanwhile count as init.
                await asyncio.sleep(warmup)
                at_ready = api_counts(cp)
                init = minus(at_ready, before)
                result["init_status_writes"] = round(status_writes(init) / count, 3)
                first_clusters = {
                    (s["metadata"]["namespace"], s["metadata"]["name"]): active(s)
                    for s in (await client.list(v1.RAYSERVICES, None,
                                                label_selector="bench=rayservice")).items
                }  # fmt: skip

                # -- steady ----------------------------------------------------------------
                plane_before = data_plane(sim)
                log(f"steady for {args.steady_seconds} s")
                await asyncio.sleep(args.steady_seconds)
                after_steady = api_counts(cp)
                plane_after = data_plane(sim)
                steady = minus(after_steady, at_ready)
                steady_writes = writes_by_kind(steady)
                result["steady_status_writes"] = round(status_writes(steady) / count, 3)
                result["steady_writes_all_kinds"] = sum(
                    n for kind, n in steady_writes.items() if kind not in CONTROL_PLANE_WRITES
                )
                result["steady_control_plane_writes"] = sum(
                    n for kind, n in steady_writes.items() if kind in CONTROL_PLANE_WRITES
                )
                result["leases"] = sorted(
                    f"{lease['metadata']['namespace']}/{lease['metadata']['name']}"
                    for lease in cp.request("GET", "/apis/coordination.k8s.io/v1/leases")["items"]
                )
                plane = {k: n for k, n in minus(plane_after, plane_before).items() if n}
                minutes = args.steady_seconds / 60
                result["dashboard_requests_per_min_steady"] = round(
                    sum(plane.values()) / minutes / count, 3
                )

                # -- unhealthy -------------------------------------------------------------
                log(f"flipping {UNHEALTHY_APP!r} of every service to UNHEALTHY")
                reported = await time_to_unhealthy(client, sim, 3 * args.serve_poll_max + 30)
                times = sorted(reported.values())
                result["unhealthy_report_s_max"] = round(times[-1], 2)
                result["unhealthy_report_s_p50"] = round(times[(len(times) - 1) // 2], 2)
                log(f"UNHEALTHY reported within {times[-1]:.1f} s; undone, waiting for Ready")
                recovered_started = time.monotonic()
                recovered_s = await wait_until(
                    client, manager, count, 3 * args.serve_poll_max + 30, recovered_started,
                    "Ready again", lambda s, _names: ready(s),
                )  # fmt: skip
                result["unhealthy_recovered_s"] = round(recovered_s, 2)
                await asyncio.sleep(args.settle_seconds)
                after_unhealthy = api_counts(cp)
                unhealthy = minus(after_unhealthy, after_steady)
                result["unhealthy_status_writes"] = round(status_writes(unhealthy) / count, 3)

                # -- upgrade ---------------------------------------------------------------
                upgrade_started = time.monotonic()
                for s in (await client.list(v1.RAYSERVICES, None,
                                            label_selector="bench=rayservice")).items:  # fmt: skip
                    changed = copy.deepcopy(s)
                    changed["spec"]["rayClusterConfig"]["rayVersion"] = "2.61.0"
                    try:
                        await client.update(changed)
                    except errors.Conflict as exc:
                        raise BenchError(f"the benchmark's own update conflicted: {exc}") from exc

                def upgraded(s: Mapping[str, Any], names: set[tuple[str, str]]) -> bool:
                    key = (s["metadata"]["namespace"], s["metadata"]["name"])
                    old = first_clusters.get(key, "")
                    return ready(s) and active(s) not in ("", old) and (key[0], old) not in names

                upgrade_s = await wait_until(
                    client, manager, count, args.upgrade_timeout, upgrade_started,
                    "upgraded (Ready on a new cluster, the old one deleted)", upgraded,
                )  # fmt: skip
                result["upgrade_s"] = round(upgrade_s, 2)
                log(f"all {count} upgraded in {upgrade_s:.1f} s; settling {args.settle_seconds} s")
                await asyncio.sleep(args.settle_seconds)
                at_end = api_counts(cp)
                upgrade = minus(at_end, after_unhealthy)
                result["upgrade_status_writes"] = round(status_writes(upgrade) / count, 3)
                # The manager's own 409s (its client counts every answer); other clients'
                # are reported apart (kube-controller-manager's Endpoints controller gets
                # some when it races its own informer).
                result["conflicts"] = int(sum(
                    value for name, labels, value in manager.metrics()
                    if name == "rest_client_requests_total" and labels.get("code") == "409"
                ))  # fmt: skip
                result["conflicts_all_clients"] = conflicts(minus(at_end, before))

                result["steady_writes_by_kind"] = steady_writes
                result["data_plane_steady_by_kind"] = dict(sorted(plane.items()))
                result["serve_puts"] = sum(
                    n for k, n in data_plane(sim).items() if k.startswith("dashboard PUT ")
                )
                result["writes_by_kind"] = {
                    "init": writes_by_kind(init), "unhealthy": writes_by_kind(unhealthy),
                    "upgrade": writes_by_kind(upgrade),
                }  # fmt: skip
                result["manager_rss_mib"] = round(manager.memory_mib(), 1)
                result["manager_cpu_s"] = round(manager.cpu_seconds(), 2)
        finally:
            manager.stop()
    result["total_s"] = round(time.monotonic() - t0, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--services", type=int, required=True)
    parser.add_argument("--steady-seconds", type=float, default=120.0)
    parser.add_argument(
        "--deletion-delay",
        type=int,
        default=10,
        help="rayClusterDeletionDelaySeconds of every RayService (default 10)",
    )
    parser.add_argument(
        "--deploy-delay",
        type=float,
        default=3.0,
        help="the simulator's seconds from a Serve PUT to RUNNING (default 3)",
    )
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=5.0,
        help="after all Ready / all upgraded, before counting (default 5)",
    )
    parser.add_argument("--dashboard-address-mode", default="kubernetes-proxy",
                        choices=["pod-ip", "kubernetes-proxy"],
                        help="as KubeRay's --use-kubernetes-proxy by default")  # fmt: skip
    parser.add_argument("--serve-poll-max", type=float, default=10.0)
    parser.add_argument("--ready-timeout", type=float, default=None,
                        help="default 120 + 2 s per service")  # fmt: skip
    parser.add_argument("--upgrade-timeout", type=float, default=None,
                        help="default 120 + the deletion delay + 2 s per service")  # fmt: skip
    parser.add_argument(
        "--manager-log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    parser.add_argument(
        "--bin-dir",
        type=pathlib.Path,
        default=None,
        help="control-plane binaries; default $CONTROLPLANE_BIN_DIR or build.sh",
    )
    args = parser.parse_args(argv)
    if args.services < 1 or args.steady_seconds <= 0 or args.deletion_delay < 0:
        parser.error("--services >= 1, --steady-seconds > 0, --deletion-delay >= 0")
    if args.ready_timeout is None:
        args.ready_timeout = 120.0 + 2.0 * args.services
    if args.upgrade_timeout is None:
        args.upgrade_timeout = 120.0 + args.deletion_delay + 2.0 * args.services
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    result: dict[str, Any] = {"bench": "rayservice", "services": args.services}
    return _common.finish(
        run(args, result),
        result,
        headline=HEADLINE,
        expected=(BenchError, controlplane.ControlPlaneError, raysim.SimulatorError),
        log=log,
    )


if __name__ == "__main__":
    raise SystemExit(main())
