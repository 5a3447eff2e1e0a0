"""Benchmark: our operator and KubeRay (v1.7.0), one after the other, on the same workload.

Issue 15, items 1-2: "fewer writes than KubeRay" measured, not claimed. One invocation
runs ``--rounds`` rounds; each round runs the scenario of ``hack/bench/rayservice.py``
once with our operator and once with KubeRay (alternating, in that order; ``--operator
ours|kuberay`` runs only one), each on a **fresh** control plane and Ray simulator, so the
two operators never run at the same time and neither sees the other's objects. Only the
operator process differs:

- ``ours``: ``rayservice-manager --use-kubernetes-proxy`` (our RayCluster and RayService
  controllers in one process);
- ``kuberay``: KubeRay's operator at ``--kuberay-version`` (default v1.7.0, what users
  run; v1.5.0 is the one the Go module proxy serves, so CI's test uses it) with its
  RayCluster, RayService and RayJob controllers and its default feature gates, built once
  by ``hack/peers/kuberay.sh`` (cached; reused here, built only if missing: v1.7.0 from a
  KubeRay checkout named by ``$KUBERAY_SOURCE``), run as
  ``CLUSTER_DOMAIN=cluster.local <bin> --kubeconfig <kc> --enable-leader-election=false
  --metrics-addr 127.0.0.1:<p> --health-probe-bind-address 127.0.0.1:<p>
  --use-kubernetes-proxy`` with a minimal environment.

Both talk to the Ray heads through the API server's ``services/proxy`` and
``pods/proxy`` subresources; the API server dials the simulator at the pod IPs through
the harness's pod network (nothing leaves 127.0.0.0/8 and the pod network). Every run
installs the same CRDs: this repository's RayCluster and RayService
(``config/crd/bases``; same v1 status schema as KubeRay's) plus KubeRay's RayJob (from
its module, ``kuberay.sh --crds``), which KubeRay watches and ours ignores: one control
plane state for both.

The scenario (``rayservice.py``'s, with its helpers): ``--services`` RayServices created
at once (a head and one worker each, or with ``--head-only`` a head only: the pod
network's nodes hold about 3,000 pods, so N = 1,000 runs head-only) -> all Ready
(``Ready=True``, every application ``RUNNING``, ``numServeEndpoints > 0``),
``--settle-seconds``; ``--steady-seconds`` of nothing changing; a ``rayVersion`` change
of all -> all upgraded (Ready on a new cluster, the old one deleted after
``rayClusterDeletionDelaySeconds`` = ``--deletion-delay``, the same for both),
``--settle-seconds``; all deleted -> no RayService, RayCluster or pod left
(``time_to_deleted_s``), ``--settle-seconds``.

Figures per run (one JSON object per operator per round on stdout). kube-apiserver counts
(``apiserver_request_total``, all clients) and writes an audit log (level ``Metadata``,
watches left out) that names each request's client by its User-Agent product:
``kuberay-operator`` (KubeRay), ``rayservice-operator`` (ours; also the simulator's pod
watch re-lists, one per 240 s at most, reads only), ``bench-compare`` (this script),
``kwok``, ``kube-controller-manager``, ``kube-scheduler``, ``kube-apiserver``. The
simulator counts what the heads got.

- ``{init,steady,upgrade}_status_writes_per_svc``: PUT/PATCH of ``rayservices/status``
  plus ``rayclusters/status`` (only the operator writes them) / N, and each apart
  (``{phase}_rayservice_status_writes_per_svc``, ``{phase}_raycluster_...``);
- ``steady_nonwatch_requests_per_min``: **the operator's** requests in the steady window
  per minute, watches and the proxy subresources left out; ``steady_proxy_requests_per_min``
  its ``services/proxy`` and ``pods/proxy`` requests; ``steady_nonwatch_incl_proxy_per_min``
  both (the issue's target); ``steady_nonwatch_all_clients_per_min`` and
  ``steady_proxy_all_clients_per_min``: the same from ``apiserver_request_total``, every
  client (the control plane's Lease renewals and garbage collector included), non-resource
  paths (``/metrics``, this script's reads) left out;
- ``conflicts``: the operator's writes answered 409 over the run (``conflicts_per_svc``
  / N); ``conflicts_all_clients`` every client's (kube-controller-manager's EndpointSlice
  deletes, too);
- ``writes_all``: the operator's writes (create, update, patch, delete; not the proxy's
  data-plane PUTs) from the first create to the end, i.e. over the whole life of the
  services (create -> Ready -> upgrade -> delete); ``writes_per_svc`` the same / N;
  ``writes_all_clients``: every client's but the control plane's Lease renewals (pods'
  status from kwok, bindings, EndpointSlices, events ... ride along);
- ``dashboard_requests_per_min_per_svc``: requests the simulated heads got in the steady
  window (dashboard, Serve proxy and agent ports) per minute per service;
  ``serve_puts``: Serve config PUTs over the run;
- ``time_to_ready_s``, ``time_to_upgraded_s`` (``rayservice.py``'s); ``peak_rss_mib``
  (``VmHWM``) and ``cpu_s`` (user + system, its waited-for children included:
  :meth:`runtime.testing.process.ChildProcess.cpu_seconds`) of the operator process, read
  before it stops.

``detail["phases"]``: per phase (``init``: create -> all Ready; ``steady``; ``upgrade``;
``delete``) its seconds, each process's CPU seconds and cores busy on average (the
operator, kube-apiserver, etcd, kwok, kube-controller-manager, kube-scheduler, the
simulator: :func:`cpu_snapshot`) and the operator's histograms observed in it
(:data:`RUNTIME_METRICS`: our client-side limiter's waits, our event-loop lag, both
operators' work-queue wait and work). ``detail["rps_timeline"]``: the operator's requests
per second of the run by ``verb resource`` (proxy subresources left out) and every
client's, from the audit log.

``detail["timeline"]``: where each service's start-up time went, from the audit log
(:func:`timeline`, :data:`TIMELINE_EVENTS`): per step the median, p90 and max over the
services of its seconds after the service's create (``timeline_p50_s``: the medians).
``--profile DIR`` runs our manager under cProfile (``DIR/ours-n<N>.prof``; its top
functions by own and by cumulative time in ``detail``): slower, for finding costs only.

``detail`` holds the breakdowns by ``verb resource[/subresource]``: the steady window's
requests (all clients, from the metric) and by client (audit), the writes per phase (all
clients), the operator's writes, the conflicts by client, the data-plane requests by
``port method path``.

The last stdout line: ``{"bench": "compare", "services", "steady_seconds", "rounds",
"kuberay_version", "head_only", "ours": {medians}, "kuberay": {medians},
"ratios": {ours / kuberay}}``, or with an
``error`` key (exit status 1) if a run failed. Progress goes to stderr. Usage:
``.venv/bin/python hack/bench/compare.py --services 50 --steady-seconds 120 --rounds 1``.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import datetime
import itertools
import json
import logging
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import _common  # noqa: E402  # hack/bench/_common.py (this script's directory)
import raycluster as raycluster_bench  # noqa: E402  # hack/bench/raycluster.py: Manager
import rayservice as rayservice_bench  # noqa: E402  # hack/bench/rayservice.py: the scenario
import structlog  # noqa: E402

import api.v1 as v1  # noqa: E402
from runtime.client import client as client_  # noqa: E402
from runtime.client import errors  # noqa: E402
from runtime.testing import controlplane  # noqa: E402
from runtime.testing import process as process_  # noqa: E402
from tests.support import raysim  # noqa: E402

__all__ = ["main"]

OPERATORS = ("ours", "kuberay")
DEFAULT_KUBERAY = "v1.7.0"
"""The peer: what KubeRay users run now (``--kuberay-version``; v1.5.0 is served by the Go
module proxy, v1.7.0 is built from a checkout given as ``$KUBERAY_SOURCE``)."""
KUBERAY_SH = ROOT / "hack/peers/kuberay.sh"
PROXY_SUBRESOURCES = frozenset({("services", "proxy"), ("pods", "proxy")})
WATCH_VERBS = frozenset({"WATCH", "WATCHLIST"})
BENCH_USER_AGENT = "bench-compare/1"
OPERATOR_USER_AGENTS = {"ours": "rayservice-operator", "kuberay": "kuberay-operator"}
"""User-Agent products: our runtime client's default; KubeRay's client (client-go)."""
AUDIT_WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})

FIGURES = (
    "init_status_writes_per_svc", "steady_status_writes_per_svc",
    "upgrade_status_writes_per_svc", "steady_nonwatch_requests_per_min",
    "dashboard_requests_per_min_per_svc", "conflicts_per_svc", "time_to_ready_s",
    "time_to_upgraded_s", "writes_per_svc", "time_to_deleted_s", "peak_rss_mib", "cpu_s",
)  # fmt: skip
"""The issue's per-operator figures (``hack/bench/results/<date>.json``), first, in order."""

MORE_FIGURES = (
    *(f"{phase}_{kind}_status_writes_per_svc"
      for phase in ("init", "steady", "upgrade") for kind in ("rayservice", "raycluster")),
    "steady_proxy_requests_per_min", "steady_nonwatch_incl_proxy_per_min", "conflicts",
    "writes_all", "serve_puts", "steady_nonwatch_all_clients_per_min",
    "steady_proxy_all_clients_per_min", "conflicts_all_clients", "writes_all_clients",
)  # fmt: skip
"""The other figures each run reports (summarised as medians and ratios too)."""

AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [{"level": "None", "verbs": ["watch"]}, {"level": "Metadata"}],
}
"""One event per finished request but watches: who (User-Agent), what, when."""


log = _common.logger("bench compare")


# -- the operator processes ----------------------------------------------------------------


def _kuberay_sh(version: str, *flags: str, **kwargs: Any) -> str:
    """The last stdout line of ``hack/peers/kuberay.sh`` for KubeRay ``version``."""
    env = {**os.environ, "KUBERAY_VERSION": version}
    done = subprocess.run([str(KUBERAY_SH), *flags], stdout=subprocess.PIPE, text=True,
                          check=True, env=env, **kwargs)  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


def kuberay_binary(version: str = DEFAULT_KUBERAY) -> pathlib.Path:
    """KubeRay ``version``'s cached binary (built by ``kuberay.sh`` only if it is missing:
    from the Go module proxy, or from ``$KUBERAY_SOURCE``, a git checkout of KubeRay, for
    a tag the proxy does not serve)."""
    path = pathlib.Path(_kuberay_sh(version, "--print-bin"))
    if not path.exists():
        log(f"building KubeRay {version} with hack/peers/kuberay.sh (once; minutes)")
        path = pathlib.Path(_kuberay_sh(version))
    return path


def rayjob_crd(version: str = DEFAULT_KUBERAY) -> pathlib.Path:
    return pathlib.Path(_kuberay_sh(version, "--crds")) / "ray.io_rayjobs.yaml"


def kuberay(
    binary: pathlib.Path,
    kubeconfig: pathlib.Path,
    workdir: pathlib.Path,
    extra: Sequence[str] = (),
) -> _common.Manager:
    """KubeRay's operator as a child process (``/readyz``, ``/metrics``, RSS, CPU, stop:
    :class:`_common.Manager`'s), in ``kubernetes-proxy`` mode, without leader election;
    ``extra`` flags after those (``incremental.py``'s ``--watch-namespace``)."""
    metrics_port, probe_port = controlplane.free_ports(2)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/root"),
        "CLUSTER_DOMAIN": "cluster.local",
    }
    command = [
        str(binary), "--kubeconfig", str(kubeconfig), "--enable-leader-election=false",
        "--metrics-addr", f"127.0.0.1:{metrics_port}",
        "--health-probe-bind-address", f"127.0.0.1:{probe_port}",
        "--use-kubernetes-proxy", *extra,
    ]  # fmt: skip
    return _common.Manager(
        command,
        log_path=workdir / "kuberay.log",
        metrics_port=metrics_port,
        probe_port=probe_port,
        name="KubeRay",
        cwd=workdir,
        env=env,
    )


def start_operator(
    operator: str, kubeconfig: pathlib.Path, work: pathlib.Path, args: argparse.Namespace
) -> _common.Manager:
    if operator == "kuberay":
        return kuberay(args.kuberay_bin, kubeconfig, work, args.kuberay_flag)
    profile = args.profile / f"ours-n{args.services}.prof" if args.profile else None
    return _common.Manager.ours(kubeconfig, work, [
        "--use-kubernetes-proxy", "--log-level", args.manager_log_level, "--log-format", "json",
        "--leader-elect=false",  # as KubeRay above: no Lease writes in either's counts
        *args.ours_flag,
    ], profile=profile)  # fmt: skip


# -- counting ------------------------------------------------------------------------------


def status_writes(delta: rayservice_bench.Counts, resource: str) -> float:
    return sum(
        n for (verb, res, sub, _), n in delta.items()
        if res == resource and sub == "status" and verb in ("PUT", "PATCH")
    )  # fmt: skip


def kind(verb: str, resource: str, sub: str) -> str:
    return f"{verb} {resource}" + (f"/{sub}" if sub else "")


def nonwatch(delta: rayservice_bench.Counts) -> tuple[dict[str, int], dict[str, int]]:
    """Non-watch resource requests by kind: (API requests, proxy subresource requests)."""
    api: dict[str, int] = {}
    proxy: dict[str, int] = {}
    for (verb, res, sub, _), n in delta.items():
        if verb in WATCH_VERBS or not res or not n:
            continue
        into = proxy if (res, sub) in PROXY_SUBRESOURCES else api
        into[kind(verb, res, sub)] = into.get(kind(verb, res, sub), 0) + int(n)
    return dict(sorted(api.items())), dict(sorted(proxy.items()))


def phase_figures(prefix: str, delta: rayservice_bench.Counts, count: int) -> dict[str, float]:
    services = status_writes(delta, "rayservices") / count
    clusters = status_writes(delta, "rayclusters") / count
    return {
        f"{prefix}_status_writes_per_svc": round(services + clusters, 3),
        f"{prefix}_rayservice_status_writes_per_svc": round(services, 3),
        f"{prefix}_raycluster_status_writes_per_svc": round(clusters, 3),
    }


Tally = dict[str, dict[str, int]]
"""Requests by client (User-Agent product) and ``verb resource[/subresource]``."""


def audit_files(path: pathlib.Path) -> Iterator[Iterator[str]]:
    """The lines of the audit log ``path`` and of its rotated parts, oldest first:
    kube-apiserver rotates it at 100 MB (``<stem>-<time>.log`` beside it), which N = 1,000
    passes; reading ``path`` alone then misses the run's beginning."""
    for part in [*sorted(path.parent.glob(f"{path.stem}-*{path.suffix}")), path]:
        with open(part, errors="replace") as lines:
            yield lines


def audit_events(path: pathlib.Path) -> list[tuple[datetime.datetime, str, str, bool, int]]:
    """(finished at, client, kind, is a proxy subresource, HTTP code) of each audited request
    on a resource (non-resource paths such as ``/metrics`` left out)."""
    out = []
    for lines in audit_files(path):
        for line in lines:
            try:
                event = json.loads(line)
                stamp = _common.moment(event.get("stageTimestamp"))
            except (ValueError, KeyError):
                continue
            ref = event.get("objectRef") or {}
            resource, sub = str(ref.get("resource") or ""), str(ref.get("subresource") or "")
            if not resource:
                continue
            client = str(event.get("userAgent") or "-").split("/")[0].split(" ")[0]
            code = int((event.get("responseStatus") or {}).get("code") or 0)
            proxy = (resource, sub) in PROXY_SUBRESOURCES
            out.append((stamp, client, kind(str(event.get("verb")), resource, sub), proxy, code))
    return out


def tally(events: list[tuple[datetime.datetime, str, str, bool, int]], keep: Any) -> Tally:
    out: Tally = {}
    for stamp, client, what, proxy, code in events:
        if keep(stamp, what, proxy, code):
            per = out.setdefault(client, {})
            per[what] = per.get(what, 0) + 1
    return {c: dict(sorted(k.items())) for c, k in sorted(out.items())}


def operator_figures(
    path: pathlib.Path,
    operator: str,
    windows: Mapping[str, tuple[datetime.datetime, datetime.datetime]],
    minutes: float,
    count: int,
) -> tuple[dict[str, float], dict[str, Any]]:
    """The operator's own requests, from the audit log: figures and breakdowns."""
    events = audit_events(path)
    who = OPERATOR_USER_AGENTS[operator]
    steady_from, steady_to = windows["steady"]
    run_from, run_to = windows["run"]
    steady = tally(events, lambda t, _w, _p, _c: steady_from <= t < steady_to)
    writes = tally(events, lambda t, w, p, _c: (
        run_from <= t < run_to and not p and w.split(" ")[0] in AUDIT_WRITE_VERBS))  # fmt: skip
    conflicts = tally(events, lambda t, w, _p, c: (
        run_from <= t < run_to and c == 409 and w.split(" ")[0] in AUDIT_WRITE_VERBS))  # fmt: skip
    rps: dict[str, Any] = {"t0": run_from.isoformat(), "operator": {}, "all_clients": []}
    for stamp, client, what, proxy_, _code in events:
        if not run_from <= stamp < run_to:
            continue
        second = int((stamp - run_from).total_seconds())
        total = rps["all_clients"]
        total.extend([0] * (second + 1 - len(total)))
        total[second] += 1
        if client == who and not proxy_:
            series = rps["operator"].setdefault(what, [])
            series.extend([0] * (second + 1 - len(series)))
            series[second] += 1
    mine = steady.get(who, {})
    proxy = sum(n for k, n in mine.items() if k.split(" ")[1].endswith("/proxy"))
    api = sum(mine.values()) - proxy
    figures = {
        "steady_nonwatch_requests_per_min": round(api / minutes, 2),
        "steady_proxy_requests_per_min": round(proxy / minutes, 2),
        "steady_nonwatch_incl_proxy_per_min": round((api + proxy) / minutes, 2),
        "conflicts_per_svc": round(sum(conflicts.get(who, {}).values()) / count, 3),
        "conflicts": sum(conflicts.get(who, {}).values()),
        "writes_all": sum(writes.get(who, {}).values()),
        "writes_per_svc": round(sum(writes.get(who, {}).values()) / count, 2),
    }
    return figures, {
        "steady_by_client": steady,
        "operator_writes_by_kind": writes.get(who, {}),
        "conflicts_by_client": conflicts,
        "rps_timeline": rps,
    }


def reconciles(process: _common.Manager) -> dict[str, float]:
    """``controller_runtime_reconcile_total`` by controller (``<controller> errors``: the
    failed ones), and the seconds spent in reconciles (``<controller> seconds``, the
    histogram's sum): both operators export
    them; empty if the metrics endpoint does not answer."""
    out: dict[str, float] = {}
    try:
        samples = process.metrics()
    except (OSError, _common.BenchError):
        return out
    for name, labels, value in samples:
        if name == "controller_runtime_reconcile_total":
            out[labels.get("controller", "")] = out.get(labels.get("controller", ""), 0) + value
            if labels.get("result") == "error":
                key = labels.get("controller", "") + " errors"
                out[key] = out.get(key, 0) + value
        elif name == "controller_runtime_reconcile_time_seconds_sum":
            key = labels.get("controller", "") + " seconds"
            out[key] = round(out.get(key, 0) + value, 3)
    return out


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its waited-for children; 0 once it is gone."""
    try:
        return process_.cpu_seconds(pid)
    except OSError:
        return 0.0


def cpu_snapshot(
    cp: controlplane.ControlPlane, sim: raysim.Simulator, process: _common.Manager
) -> dict[str, float]:
    """CPU seconds so far of each process on the machine's 2 cores: the operator, every
    control-plane component (kube-apiserver, etcd, kwok, ...) and the Ray simulator."""
    out = {name: proc_cpu_seconds(pid) for name, pid in cp.pids().items()}
    out["simulator"] = sum(proc_cpu_seconds(pid) for pid in sim.pids())
    out["operator"] = process.cpu_seconds()
    return out


RUNTIME_METRICS = (
    "rest_client_rate_limiter_duration_seconds",
    "event_loop_lag_seconds",
    "workqueue_queue_duration_seconds",
    "workqueue_work_duration_seconds",
)
"""The operator's histograms read at each phase's end (:func:`runtime_snapshot`): the
client-side limiter's waits (ours; controller-runtime does not export it), the event
loop's lag (ours), and the work queues' wait and work (both)."""


def runtime_snapshot(process: _common.Manager) -> dict[str, Any]:
    """``{metric: {"sum", "count", "buckets": {le: cumulative}}}`` of
    :data:`RUNTIME_METRICS`, every label set added up (the work queues' by queue name
    too, under ``"<metric> <name>"``); empty if ``/metrics`` does not answer."""
    out: dict[str, Any] = {}
    try:
        samples = process.metrics()
    except (OSError, _common.BenchError):
        return out
    for name, labels, value in samples:
        for metric in RUNTIME_METRICS:
            if not name.startswith(metric):
                continue
            suffix = name[len(metric) :]
            keys = [metric]
            if metric.startswith("workqueue_") and labels.get("name"):
                keys.append(f"{metric} {labels['name']}")
            for key in keys:
                row = out.setdefault(key, {"sum": 0.0, "count": 0.0, "buckets": {}})
                if suffix == "_sum":
                    row["sum"] += value
                elif suffix == "_count":
                    row["count"] += value
                elif suffix == "_bucket":
                    le = labels.get("le", "+Inf")
                    row["buckets"][le] = row["buckets"].get(le, 0.0) + value
    return out


def histogram_delta(after: Mapping[str, Any], before: Mapping[str, Any]) -> dict[str, Any]:
    """Per metric of two :func:`runtime_snapshot` s: ``count``, ``sum`` (s), ``mean`` (s),
    ``p50``/``p99``/``max`` (the upper bound of the bucket that holds them, s) of what was
    observed between them."""
    out: dict[str, Any] = {}
    for key, row in after.items():
        old = before.get(key, {"sum": 0.0, "count": 0.0, "buckets": {}})
        count = row["count"] - old["count"]
        total = row["sum"] - old["sum"]
        buckets = sorted(
            ((float(le), n - old["buckets"].get(le, 0.0)) for le, n in row["buckets"].items()),
        )
        figures: dict[str, Any] = {
            "count": int(count), "sum": round(total, 3),
            "mean": round(total / count, 4) if count else 0.0,
        }  # fmt: skip
        for label, share in (("p50", 0.5), ("p99", 0.99), ("max", 1.0)):
            figures[label] = next(
                (le if le != float("inf") else None
                 for le, n in buckets if count and n >= share * count),
                None,
            )  # fmt: skip
        out[key] = figures
    return out


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


# -- one run -------------------------------------------------------------------------------


async def run_one(args: argparse.Namespace, operator: str, result: dict[str, Any]) -> None:
    """The scenario against ``operator`` on a fresh control plane; figures into ``result``."""
    count = args.services
    namespaces = [f"bench-rs-{j}" for j in range(min(rayservice_bench.MAX_NAMESPACES, count))]
    pods = 1 if args.head_only else 2  # per RayCluster; two clusters per service in an upgrade
    nodes = max(2, (count * pods * 2) // raycluster_bench.PODS_PER_NODE + 1)
    t0 = time.monotonic()
    with rayservice_bench.workdir() as work:
        audit_log = work / "audit.log"
        (work / "audit-policy.json").write_text(json.dumps(AUDIT_POLICY))
        flags = [f"--audit-policy-file={work / 'audit-policy.json'}",
                 f"--audit-log-path={audit_log}", "--audit-log-mode=blocking"]  # fmt: skip
        crd_dir = work / "crds"
        crd_dir.mkdir()
        for path in [*rayservice_bench.CRD_DIR.glob("*.yaml"), args.rayjob_crd]:
            shutil.copy(path, crd_dir / path.name)
        options = controlplane.Options(
            bin_dir=args.bin_dir, controller_manager=True, scheduler=True, kwok=True,
            nodes=nodes, pod_network=True, start_timeout=120, extra_apiserver_flags=flags,
        )  # fmt: skip
        windows: dict[str, tuple[datetime.datetime, datetime.datetime]] = {}
        with (
            controlplane.running(options) as cp,
            raysim.running(cp, deploy_delay=args.deploy_delay, log_path=work / "raysim.log") as sim,
        ):
            assert cp.kubeconfig is not None
            cp.install_crds(crd_dir)
            for namespace in namespaces:
                body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
                cp.request("POST", "/api/v1/namespaces", body)
            deadline = time.monotonic() + 60
            for namespace in namespaces:  # kube-controller-manager makes the default accounts
                while True:
                    try:
                        cp.request("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/default")
                        break
                    except controlplane.ApiError as exc:
                        if exc.status != 404 or time.monotonic() > deadline:
                            raise rayservice_bench.BenchError(
                                f"no default ServiceAccount in {namespace}") from exc  # fmt: skip
                        await asyncio.sleep(0.1)
            log(f"{operator}: control plane and simulator up in {time.monotonic() - t0:.1f} s")

            process = start_operator(operator, cp.kubeconfig, work, args)
            try:
                result["operator_ready_s"] = round(await process.wait_ready(60), 2)
                log(f"{operator}: ready in {result['operator_ready_s']} s "
                    f"(pid {process.popen.pid})")  # fmt: skip
                await scenario(args, operator, cp, sim, process, namespaces, result, windows)
                result["peak_rss_mib"] = round(process.memory_mib(), 1)
                result["cpu_s"] = round(process.cpu_seconds(), 2)
            except BaseException:
                log(f"{operator}: last lines of its log:\n{process.tail(20)}")
                raise
            finally:
                process.stop()
                if os.environ.get("BENCH_KEEP_DIR"):
                    log(f"{operator}: log {process.log_path}")
        # The control plane has stopped: the audit log is complete.
        figures, breakdowns = operator_figures(
            audit_log, operator, windows, args.steady_seconds / 60, count
        )
        result.update(figures)
        result["detail"].update(breakdowns)
        result["detail"]["timeline"] = timeline(
            audit_log, operator, windows["init"], result.pop("ready_at")
        )
        result["timeline_p50_s"] = {
            event: row["p50"] for event, row in result["detail"]["timeline"].items()
        }
        result["detail"]["upgrade_timeline"] = timeline(
            audit_log, operator, windows["upgrade"], result.pop("upgraded_at"), start="update"
        )
        if args.profile and operator == "ours":
            prof = args.profile / f"ours-n{count}.prof"
            if prof.exists():
                result["detail"]["profile_top_tottime"] = _common.profile_top(prof)
                result["detail"]["profile_top_cumtime"] = _common.profile_top(prof, 40, "cumtime")
    result["total_s"] = round(time.monotonic() - t0, 1)


async def scenario(
    args: argparse.Namespace,
    operator: str,
    cp: controlplane.ControlPlane,
    sim: raysim.Simulator,
    process: _common.Manager,
    namespaces: list[str],
    result: dict[str, Any],
    windows: dict[str, tuple[datetime.datetime, datetime.datetime]],
) -> None:
    count = args.services
    detail: dict[str, Any] = {}
    result["detail"] = detail
    client = await client_.Client.from_kubeconfig(
        cp.kubeconfig, options=client_.Options(user_agent=BENCH_USER_AGENT)
    )
    v1.add_to_registry(client.registry)
    selector = "bench=rayservice"
    async with client:
        # -- init --------------------------------------------------------------------------
        before = rayservice_bench.api_counts(cp)
        marks: list[tuple[str, float, dict[str, float], dict[str, Any]]] = []

        planes: dict[str, dict[str, int]] = {}

        def mark(phase: str) -> None:  # the end of ``phase`` (``start``: the beginning)
            marks.append((phase, time.monotonic(), cpu_snapshot(cp, sim, process),
                          runtime_snapshot(process)))  # fmt: skip
            planes[phase] = rayservice_bench.data_plane(sim)

        mark("start")
        started = time.monotonic()
        run_from = now()
        await asyncio.gather(*(
            client.create(rayservice_bench.rayservice(
                f"bench-{i}", namespaces[i % len(namespaces)], args.deletion_delay,
                workers=not args.head_only))
            for i in range(count)
        ))  # fmt: skip
        seen: dict[tuple[str, str], float] = {}
        ready_s = await rayservice_bench.wait_until(
            client, process, count, args.ready_timeout, started, "Ready",
            lambda s, _names: rayservice_bench.ready(s), seen,
        )  # fmt: skip
        result["ready_at"] = {
            key: run_from + datetime.timedelta(seconds=at) for key, at in seen.items()
        }
        windows["init"] = (run_from, now())
        mark("init")
        result["time_to_ready_s"] = round(ready_s, 2)
        log(f"{operator}: all {count} Ready in {ready_s:.1f} s; settling {args.settle_seconds} s")
        await asyncio.sleep(args.settle_seconds)
        at_ready = rayservice_bench.api_counts(cp)
        reconciled = reconciles(process)
        detail["reconciles_init"] = reconciled
        init = rayservice_bench.minus(at_ready, before)
        listed = await client.list(v1.RAYSERVICES, None, label_selector=selector)
        first_clusters = {
            (s["metadata"]["namespace"], s["metadata"]["name"]): rayservice_bench.active(s)
            for s in listed.items
        }

        # -- steady ------------------------------------------------------------------------
        plane_before = rayservice_bench.data_plane(sim)
        steady_from = now()
        log(f"{operator}: steady for {args.steady_seconds} s")
        await asyncio.sleep(args.steady_seconds)
        process.check_alive()
        steady_to = now()
        mark("steady")
        windows["steady"] = (steady_from, steady_to)
        after_steady = rayservice_bench.api_counts(cp)
        plane_after = rayservice_bench.data_plane(sim)
        steady = rayservice_bench.minus(after_steady, at_ready)
        minutes = args.steady_seconds / 60
        api, proxy = nonwatch(steady)
        plane = {k: n for k, n in rayservice_bench.minus(plane_after, plane_before).items() if n}

        # -- upgrade -----------------------------------------------------------------------
        upgrade_started = time.monotonic()
        upgrade_from = now()
        for s in (await client.list(v1.RAYSERVICES, None, label_selector=selector)).items:
            changed = copy.deepcopy(s)
            changed["spec"]["rayClusterConfig"]["rayVersion"] = "2.61.0"
            try:
                await client.update(changed)
            except errors.Conflict as exc:
                raise rayservice_bench.BenchError(
                    f"the benchmark's own update conflicted: {exc}") from exc  # fmt: skip

        def upgraded(s: Mapping[str, Any], names: set[tuple[str, str]]) -> bool:
            key = (s["metadata"]["namespace"], s["metadata"]["name"])
            old = first_clusters.get(key, "")
            new = rayservice_bench.active(s)
            return rayservice_bench.ready(s) and new not in ("", old) and (key[0], old) not in names

        seen = {}
        upgrade_s = await rayservice_bench.wait_until(
            client, process, count, args.upgrade_timeout, upgrade_started,
            "upgraded (Ready on a new cluster, the old one deleted)", upgraded, seen,
        )  # fmt: skip
        result["upgraded_at"] = {
            key: upgrade_from + datetime.timedelta(seconds=at) for key, at in seen.items()
        }
        windows["upgrade"] = (upgrade_from, now())
        mark("upgrade")
        result["time_to_upgraded_s"] = round(upgrade_s, 2)
        log(f"{operator}: all {count} upgraded in {upgrade_s:.1f} s; "
            f"settling {args.settle_seconds} s")  # fmt: skip
        await asyncio.sleep(args.settle_seconds)
        at_end = rayservice_bench.api_counts(cp)
        upgrade = rayservice_bench.minus(at_end, after_steady)
        detail["reconciles_steady_and_upgrade"] = rayservice_bench.minus(
            reconciles(process), reconciled
        )

        # -- delete ------------------------------------------------------------------------
        delete_started = time.monotonic()
        listed = await client.list(v1.RAYSERVICES, None, label_selector=selector)
        await asyncio.gather(*(
            client.delete(v1.RAYSERVICES, s["metadata"]["namespace"], s["metadata"]["name"])
            for s in listed.items
        ))  # fmt: skip
        result["time_to_deleted_s"] = round(await gone(
            client, process, args.upgrade_timeout, delete_started), 2)  # fmt: skip
        mark("delete")
        log(f"{operator}: all deleted in {result['time_to_deleted_s']:.1f} s; "
            f"settling {args.settle_seconds} s")  # fmt: skip
        await asyncio.sleep(args.settle_seconds)
        at_deleted = rayservice_bench.api_counts(cp)
        delete = rayservice_bench.minus(at_deleted, at_end)
        windows["run"] = (run_from, now())
        whole = rayservice_bench.minus(at_deleted, before)

    # Where each phase's time went: every process's CPU (seconds, and cores busy on
    # average), the operator's limiter waits, event-loop lag and work-queue wait/work.
    detail["phases"] = {}
    for (_, t_from, cpu_from, rt_from), (phase, t_to, cpu_to, rt_to) in itertools.pairwise(marks):
        seconds = t_to - t_from
        cpu = {name: round(cpu_to[name] - cpu_from.get(name, 0.0), 2) for name in cpu_to}
        detail["phases"][phase] = {
            "seconds": round(seconds, 2),
            "cpu_s": cpu,
            "cores_busy": {name: round(v / seconds, 2) for name, v in cpu.items() if seconds},
            "histograms": histogram_delta(rt_to, rt_from),
        }
    # What the operator asked the dashboards in each phase, and the API server's proxy
    # requests (every client's) that carried it.
    detail["data_plane_by_phase"] = {}
    for prev, phase in itertools.pairwise(planes):
        delta = rayservice_bench.minus(planes[phase], planes[prev])
        detail["data_plane_by_phase"][phase] = {k: n for k, n in sorted(delta.items()) if n}
    detail["proxy_by_phase"] = {
        phase: nonwatch(delta)[1] for phase, delta in (("init", init), ("upgrade", upgrade))
    }
    conflicts = rayservice_bench.conflicts(whole)
    result.update(phase_figures("init", init, count))
    result.update(phase_figures("steady", steady, count))
    result.update(phase_figures("upgrade", upgrade, count))
    result["steady_nonwatch_all_clients_per_min"] = round(sum(api.values()) / minutes, 2)
    result["steady_proxy_all_clients_per_min"] = round(sum(proxy.values()) / minutes, 2)
    result["dashboard_requests_per_min_per_svc"] = round(sum(plane.values()) / minutes / count, 3)
    result["conflicts_all_clients"] = conflicts
    result["writes_all_clients"] = sum(
        n for k, n in rayservice_bench.writes_by_kind(whole).items()
        if k not in rayservice_bench.CONTROL_PLANE_WRITES
    )  # fmt: skip
    result["serve_puts"] = sum(
        n for k, n in rayservice_bench.data_plane(sim).items() if k.startswith("dashboard PUT ")
    )
    detail["steady_nonwatch_by_kind"] = api
    detail["steady_proxy_by_kind"] = proxy
    detail["data_plane_steady_by_kind"] = dict(sorted(plane.items()))
    detail["writes_by_kind"] = {
        phase: rayservice_bench.writes_by_kind(delta)
        for phase, delta in (
            ("init", init),
            ("steady", steady),
            ("upgrade", upgrade),
            ("delete", delete),
        )
    }
    detail["conflicts_by_kind"] = {
        kind(verb, res, sub): int(n)
        for (verb, res, sub, code), n in whole.items()
        if code == "409" and n and verb not in rayservice_bench.READ_VERBS
    }


async def gone(
    client: client_.Client, process: _common.Manager, within: float, started: float
) -> float:
    """Seconds from ``started`` until no RayService, RayCluster or pod is left."""
    while True:
        process.check_alive()
        left = [len((await client.list(r, None)).items)
                for r in (v1.RAYSERVICES, v1.RAYCLUSTERS, rayservice_bench.PODS)]  # fmt: skip
        elapsed = time.monotonic() - started
        if not any(left):
            return elapsed
        if elapsed > within:
            raise rayservice_bench.BenchError(
                f"(RayServices, RayClusters, pods) left {within:.0f} s after deleting: {left}"
            )
        await asyncio.sleep(0.5)


TIMELINE_EVENTS = (
    "cluster_created", "head_pod_bound", "head_pod_running", "head_svc_created",
    "first_dashboard_get", "first_dashboard_ok", "first_serve_put", "serve_svc_created",
    "cluster_annotated", "services_updated",
    "old_cluster_deleted", "first_status_write", "last_status_write", "ready_seen",
)  # fmt: skip
"""Per RayService, in the start-up window, seconds after the benchmark's create answered:
the operator's first RayCluster create; the scheduler's binding and kwok's first status
patch of the head pod; the operator's first create of a head Service, first dashboard
GET through the API server's proxy (whatever it answered) and first one answered 2xx,
first Serve PUT
(``services/proxy`` or ``pods/proxy``), create of ``<name>-serve-svc``, first and last
RayService status write before Ready was seen; the benchmark's first poll that saw it
Ready (all applications RUNNING and endpoints). In the upgrade (``upgrade_timeline``),
from the benchmark's spec update: the same, and the operator's first RayCluster patch
(an annotation), Service update (traffic moved) and RayCluster delete; ``ready_seen`` is
then the first poll that saw it upgraded."""

_SERVICE_NAME = re.compile(r"^(bench-\d+)(?:-|$)")


def timeline(
    path: pathlib.Path,
    operator: str,
    window: tuple[datetime.datetime, datetime.datetime],
    ready_at: Mapping[tuple[str, str], datetime.datetime],
    start: str = "create",
) -> dict[str, dict[str, float]]:
    """Where each RayService's start-up time went (:data:`TIMELINE_EVENTS`), from the audit
    log: per event the median (``p50``), ``p90`` and ``max`` over the services of its
    seconds after the service was created (``start="update"``: after the benchmark's update
    of it), and ``n``, the services that had it."""
    who = OPERATOR_USER_AGENTS[operator]
    created: dict[tuple[str, str], datetime.datetime] = {}
    first: dict[str, dict[tuple[str, str], datetime.datetime]] = {e: {} for e in TIMELINE_EVENTS}
    last_status: dict[tuple[str, str], datetime.datetime] = {}

    def mark(event: str, key: tuple[str, str], at: datetime.datetime) -> None:
        first[event].setdefault(key, at)

    for lines in audit_files(path):
        for line in lines:
            try:
                event = json.loads(line)
                at = _common.moment(event.get("stageTimestamp"))
            except (ValueError, KeyError):
                continue
            if not window[0] <= at <= window[1]:
                continue
            ref = event.get("objectRef") or {}
            name = str(ref.get("name") or "")
            match = _SERVICE_NAME.match(name)
            if not match:
                continue
            key = (str(ref.get("namespace") or ""), match.group(1))
            client = str(event.get("userAgent") or "-").split("/")[0].split(" ")[0]
            what = (event.get("verb"), ref.get("resource"), ref.get("subresource") or "")
            code = int((event.get("responseStatus") or {}).get("code") or 0)
            if client == who and what[0] == "get" and (what[1], what[2]) in PROXY_SUBRESOURCES:
                mark("first_dashboard_get", key, at)
                if 200 <= code < 300:
                    mark("first_dashboard_ok", key, at)
                continue
            if code >= 300:
                continue
            if client == BENCH_USER_AGENT.split("/")[0]:
                if what == (start, "rayservices", ""):
                    created.setdefault(key, at)
            elif client == who:
                if what == ("create", "rayclusters", ""):
                    mark("cluster_created", key, at)
                elif what == ("create", "services", "") and name.endswith("-head-svc"):
                    mark("head_svc_created", key, at)
                elif what == ("create", "services", "") and name == f"{key[1]}-serve-svc":
                    mark("serve_svc_created", key, at)
                elif what[0] == "update" and (what[1], what[2]) in PROXY_SUBRESOURCES:
                    mark("first_serve_put", key, at)
                elif what == ("patch", "rayclusters", ""):
                    mark("cluster_annotated", key, at)
                elif what == ("update", "services", ""):
                    mark("services_updated", key, at)
                elif what == ("delete", "rayclusters", ""):
                    mark("old_cluster_deleted", key, at)
                elif (what[1:] == ("rayservices", "status") and what[0] in ("update", "patch")
                      and (key not in ready_at or at <= ready_at[key])):  # fmt: skip
                    mark("first_status_write", key, at)
                    last_status[key] = max(at, last_status.get(key, at))
            elif "-head" in name and what == ("create", "pods", "binding"):
                mark("head_pod_bound", key, at)
            elif "-head" in name and what[1:] == ("pods", "status"):
                mark("head_pod_running", key, at)
    first["last_status_write"] = last_status
    first["ready_seen"] = dict(ready_at)
    out: dict[str, dict[str, float]] = {}
    for event in TIMELINE_EVENTS:
        offsets = sorted(
            (at - created[key]).total_seconds() for key, at in first[event].items()
            if key in created
        )  # fmt: skip
        if offsets:
            out[event] = {
                "p50": round(statistics.median(offsets), 2),
                "p90": round(offsets[min(len(offsets) - 1, int(0.9 * len(offsets)))], 2),
                "max": round(offsets[-1], 2),
                "n": len(offsets),
            }
    return out


# -- rounds and the summary ----------------------------------------------------------------


def medians(runs: list[dict[str, Any]]) -> dict[str, float]:
    """The median of every figure over the rounds (:data:`FIGURES` first), and of
    ``operator_ready_s``, ``total_s``, ``load_avg_1m``."""
    keys = [*FIGURES, *MORE_FIGURES, "operator_ready_s", "total_s", "load_avg_1m"]
    return {
        k: round(statistics.median(r[k] for r in runs), 3)
        for k in keys
        if all(k in r for r in runs)
    }


def ratios(ours: Mapping[str, float], kuberay: Mapping[str, float]) -> dict[str, float | None]:
    """ours / kuberay per figure (``None`` where KubeRay's is 0)."""
    return {
        k: (round(ours[k] / kuberay[k], 3) if kuberay[k] else None)
        for k in (*FIGURES, *MORE_FIGURES)
        if k in ours and k in kuberay
    }


async def run_all(args: argparse.Namespace, summary: dict[str, Any]) -> None:
    operators = OPERATORS if args.operator == "both" else (args.operator,)
    runs: dict[str, list[dict[str, Any]]] = {op: [] for op in operators}
    for round_ in range(1, args.rounds + 1):
        for operator in operators:
            result: dict[str, Any] = {
                "bench": "compare-run", "operator": operator, "round": round_,
                "services": args.services, "steady_seconds": args.steady_seconds,
                "deletion_delay": args.deletion_delay, "deploy_delay": args.deploy_delay,
                "load_avg_1m": round(os.getloadavg()[0], 2),
            }  # fmt: skip
            log(f"round {round_}: {operator}")
            try:
                await run_one(args, operator, result)
            except BaseException as exc:
                result["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
                print(json.dumps(result), flush=True)
                raise
            first = {k: result.pop(k) for k in ("bench", "operator", "round", *FIGURES)
                     if k in result}  # fmt: skip
            detail = result.pop("detail", {})
            print(json.dumps({**first, **result, "detail": detail}), flush=True)
            runs[operator].append({**first, **result})
    for operator in operators:
        summary[operator] = medians(runs[operator])
    if len(operators) == 2:
        summary["ratios"] = ratios(summary["ours"], summary["kuberay"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--services", type=int, required=True)
    parser.add_argument("--steady-seconds", type=float, default=120.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--operator",
        default="both",
        choices=["both", *OPERATORS],
        help="which operator process to run (default both, alternating)",
    )
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
    parser.add_argument(
        "--ready-timeout", type=float, default=None, help="default 120 + 2 s per service"
    )
    parser.add_argument(
        "--upgrade-timeout",
        type=float,
        default=None,
        help="default 120 + the deletion delay + 2 s per service",
    )
    parser.add_argument(
        "--manager-log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    parser.add_argument(
        "--head-only",
        action="store_true",
        help="RayServices without worker groups (one pod per RayCluster; for N = 1,000)",
    )
    parser.add_argument(
        "--profile",
        type=pathlib.Path,
        default=None,
        help="run our manager under cProfile, its output in DIR/ours-n<N>.prof, its top "
        "functions in the report's detail",
    )
    parser.add_argument(
        "--ours-flag",
        action="append",
        default=[],
        help="one more flag for rayservice-manager (repeatable; e.g. --ours-flag=--qps=200)",
    )
    parser.add_argument(
        "--kuberay-version",
        default=DEFAULT_KUBERAY,
        help=f"the KubeRay peer (default {DEFAULT_KUBERAY}; v1.5.0 needs no checkout)",
    )
    parser.add_argument(
        "--kuberay-flag",
        action="append",
        default=[],
        help="one more flag for KubeRay's operator (repeatable; e.g. --kuberay-flag=--qps=-1)",
    )
    parser.add_argument(
        "--kuberay-bin",
        type=pathlib.Path,
        default=None,
        help="default: hack/peers/kuberay.sh's cached binary (built if missing)",
    )
    parser.add_argument(
        "--bin-dir",
        type=pathlib.Path,
        default=None,
        help="control-plane binaries; default $CONTROLPLANE_BIN_DIR or build.sh",
    )
    args = parser.parse_args(argv)  # fmt: skip
    if args.services < 1 or args.steady_seconds <= 0 or args.rounds < 1:
        parser.error("--services >= 1, --steady-seconds > 0, --rounds >= 1")
    if args.ready_timeout is None:
        args.ready_timeout = 120.0 + 2.0 * args.services
    if args.upgrade_timeout is None:
        args.upgrade_timeout = 120.0 + args.deletion_delay + 2.0 * args.services
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    summary: dict[str, Any] = {
        "bench": "compare", "services": args.services, "steady_seconds": args.steady_seconds,
        "rounds": args.rounds, "kuberay_version": args.kuberay_version,
        "head_only": args.head_only,
    }  # fmt: skip
    status = 0
    try:
        args.bin_dir = _common.bin_dir(args.bin_dir)
        if args.profile:
            args.profile = args.profile.resolve()
            args.profile.mkdir(parents=True, exist_ok=True)
        if args.operator != "ours":
            args.kuberay_bin = args.kuberay_bin or kuberay_binary(args.kuberay_version)
        args.rayjob_crd = rayjob_crd(args.kuberay_version)
        asyncio.run(run_all(args, summary))
    except (
        rayservice_bench.BenchError, raycluster_bench.BenchError,
        controlplane.ControlPlaneError, raysim.SimulatorError, subprocess.CalledProcessError,
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


if __name__ == "__main__":
    raise SystemExit(main())
