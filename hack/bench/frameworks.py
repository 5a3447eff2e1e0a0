"""Benchmark: the same small controller on our framework and on Kopf, same workload.

The controller keeps a Widget's status a function of its spec (``status.area = size *
size``, ``status.label = color.upper()``, ``status.observedGeneration =
metadata.generation``; CRD ``widgets.bench.example.com`` in
``hack/bench/frameworks/widgets-crd.yaml``). ``hack/bench/frameworks/ours.py`` is it on
``runtime/`` (cache + ``StatusWriter``; ``--ours-concurrency`` reconcile workers, default 64,
why in its docstring);
``hack/bench/frameworks/kopf_widgets.py`` is it on Kopf (``@kopf.on.create/update/resume``,
status through the ``patch`` kwarg, Kopf's defaults otherwise), run with Kopf's CLI
``kopf run --standalone --all-namespaces`` and ``KUBECONFIG``; Kopf comes from PyPI into a
venv of its own (``hack/peers/kopf.sh``; ``--kopf-venv`` to give one).

For each framework in turn (``--frameworks``, default ``ours,kopf``), on a **fresh**
control plane each (etcd + kube-apiserver only, ``runtime.testing.controlplane``, with
kube-apiserver's audit log on):

1. start the operator as its own process; create one canary Widget and wait until it
   converges (so the operator is up and watching before anything is timed);
2. create ``--objects`` Widgets at once (``--concurrency`` requests in flight, default 32)
   and wait until every status matches its spec;
3. change every spec (a merge patch of ``size`` and ``color``), the same way, and wait
   until every status matches the new spec and generation;
4. read the operator's CPU and peak RSS, stop it (SIGTERM), count its API requests.

Convergence is seen through the bench's own watch of the Widgets (one LIST and one WATCH,
not polling; again each time kube-apiserver closes it for falling behind,
``bench_watch_restarts``), so the bench adds no load while it waits; a Widget counts as converged
when its spec is the one the bench last sent and its status is the function of it, with
``observedGeneration`` equal to its generation. Each phase is bounded by ``--timeout``.

Figures per framework (one JSON line each):

- ``converge_s``: from the moment the last spec update was answered to the watch event
  that showed the last Widget converged (``update_converge_from_first_s``: from the
  first update sent; ``create_converge_s``: the same for phase 2, from the last create).
- ``cpu_s``: the operator process's user + system CPU seconds, children included
  (``/proc/<pid>/stat`` utime, stime, cutime, cstime), its whole life (start-up
  included; ``cpu_startup_s`` is the part used before the canary converged).
- ``peak_rss_mib``: ``VmHWM`` of ``/proc/<pid>/status``, read just before it is stopped
  (``rss_startup_mib``: ``VmRSS`` when the canary converged: imports and start-up).
- ``api_requests``: every request the operator made over its life, from kube-apiserver's
  audit log (level Metadata, all requests), picked by the operator's User-Agent
  (``frameworks-bench/ours`` or ``kopf/<version>``): ``apiserver_request_total`` has no
  client label, so the audit log is what separates the operator's requests from the
  bench's own (creates, patches, its watch) and the apiserver's loopback traffic.
  ``api_requests_by`` breaks them down by verb and resource (``VERB resource/sub``);
  ``api_writes`` counts the non-read ones.
- the cross-check with ``/metrics``: ``apiserver_request_total_delta`` is the change of
  ``apiserver_request_total`` (all clients) over the operator's life;
  ``audited_by_agent`` the audit log's requests in the same interval by User-Agent
  (``<none>``: the harness's own, e.g. the ``/metrics`` reads); ``metrics_minus_audit``
  (with ``metrics_minus_audit_by``) is the metric's change minus the audited resource
  requests that had finished (the metric counts nothing else): 0 when both agree.

Last stdout line: ``{"bench": "frameworks", "objects": N, "ours": {...}, "kopf": {...},
"ratios": {...}}`` where each framework holds ``converge_s``, ``cpu_s``, ``peak_rss_mib``
and ``api_requests``, and ``ratios`` is ours / kopf for each (below 1: ours is better).
If a run fails, the last line is still one JSON object, with an ``error`` key, and the
exit status is 1. ``--profile DIR`` runs each operator under ``python -m cProfile`` (its
output in ``DIR/<framework>.prof``, its top functions by own time in the report as
``profile_top_tottime``): that slows them down, so it is for seeing where the time goes,
not for the figures. Progress goes to stderr. Usage:
``.venv/bin/python hack/bench/frameworks.py --objects 2000``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import _common  # hack/bench/_common.py (this script's directory)
import aiohttp
import structlog

from runtime.client import client as client_
from runtime.client import errors, resources
from runtime.testing import controlplane

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = ROOT / "hack/bench/frameworks"
KOPF_SH = ROOT / "hack/peers/kopf.sh"
WIDGETS = resources.Resource("bench.example.com", "v1", "Widget", "widgets")
NAMESPACE = "frameworks-bench"
CANARY = "canary"
FRAMEWORKS = ("ours", "kopf")
BENCH_AGENT = "frameworks-bench/driver"
COLORS = ("red", "green", "blue", "amber", "teal")
HEADLINE = ("converge_s", "cpu_s", "peak_rss_mib", "api_requests")
"""The figures of the final line, per framework (issue 15's results format)."""

READ_VERBS = frozenset({"get", "list", "watch"})
"""The audit log's verbs that do not write."""

AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata"}],
}


BenchError = _common.BenchError


log = _common.logger("bench frameworks")


# -- the workload ----------------------------------------------------------------------------


def spec_for(index: int, round_: int) -> dict[str, Any]:
    """Widget ``index``'s spec in ``round_`` (0: as created, 1: after the update).

    >>> spec_for(3, 0), spec_for(3, 1)
    ({'size': 4, 'color': 'amber'}, {'size': 5, 'color': 'teal'})
    """
    return {"size": index % 100 + 1 + round_, "color": COLORS[(index + round_) % len(COLORS)]}


def converged(widget: dict[str, Any], spec: dict[str, Any]) -> bool:
    """Whether ``widget`` has ``spec`` and the status the controller must give it.

    >>> w = {"metadata": {"generation": 2}, "spec": {"size": 3, "color": "red"},
    ...      "status": {"area": 9, "label": "RED", "observedGeneration": 2}}
    >>> converged(w, {"size": 3, "color": "red"}), converged(w, {"size": 4, "color": "red"})
    (True, False)
    """
    status = widget.get("status") or {}
    return widget.get("spec") == spec and (
        status.get("area"),
        status.get("label"),
        status.get("observedGeneration"),
    ) == (spec["size"] ** 2, spec["color"].upper(), widget["metadata"].get("generation"))


def widget(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": WIDGETS.api_version,
        "kind": WIDGETS.kind,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


class Tracker:
    """The bench's view of the Widgets, from its own LIST + WATCH: which ones have the spec
    the bench last sent and the matching status, and when the last one got there."""

    def __init__(self, client: client_.Client) -> None:
        self.client = client
        self.objects: dict[str, dict[str, Any]] = {}
        self.expected: dict[str, dict[str, Any]] = {}
        self.done: set[str] = set()
        self.all_done = asyncio.Event()
        self.all_done_at = 0.0
        self.restarts = 0
        self.task: asyncio.Task[None] | None = None

    def expect(self, specs: dict[str, dict[str, Any]]) -> None:
        """From now on, wait for these specs (and their statuses)."""
        self.expected = specs
        self.done = {n for n, s in specs.items() if n in self.objects and
                     converged(self.objects[n], s)}  # fmt: skip
        self.all_done = asyncio.Event()
        self._check()

    def _see(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        self.objects[name] = obj
        spec = self.expected.get(name)
        if spec is None:
            return
        if converged(obj, spec):
            self.done.add(name)
        else:
            self.done.discard(name)
        self._check()

    def _check(self) -> None:
        if not self.all_done.is_set() and len(self.done) == len(self.expected):
            self.all_done_at = time.monotonic()
            self.all_done.set()

    async def _run(self) -> None:
        while True:
            listed = await self.client.list(WIDGETS, NAMESPACE)
            for obj in listed.items:
                self._see(obj)
            version = listed.resource_version
            try:
                async for event in self.client.watch(WIDGETS, NAMESPACE,
                                                     resource_version=version):  # fmt: skip
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self._see(event["object"])
                why = "closed by the server"
            except (errors.ApiError, aiohttp.ClientError, TimeoutError, OSError) as exc:
                why = f"{type(exc).__name__}: {exc}"
            # kube-apiserver closes a watch that falls behind; the bench's own lags while
            # it sends requests itself.
            self.restarts += 1
            log(f"the bench's watch ended ({why}); listing again")

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name="frameworks-bench-tracker")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def wait(self, within: float, what: str, alive: Callable[[], None]) -> float:
        """Wait until every expected Widget converged; when that was (monotonic)."""
        deadline = time.monotonic() + within
        while not self.all_done.is_set():
            alive()
            if self.task is not None and self.task.done():
                self.task.result()  # raises what killed the watch
                raise BenchError("the bench's watch stopped")
            if time.monotonic() > deadline:
                raise BenchError(
                    f"{what}: {len(self.done)} of {len(self.expected)} Widgets converged "
                    f"after {within:.0f} s"
                )
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.all_done.wait(), 1.0)
        return self.all_done_at


async def bounded(jobs: list[Callable[[], Awaitable[Any]]], concurrency: int) -> float:
    """Run ``jobs`` with at most ``concurrency`` in flight; when the last one was answered."""
    gate = asyncio.Semaphore(concurrency)

    async def one(job: Callable[[], Awaitable[Any]]) -> None:
        async with gate:
            await job()

    await asyncio.gather(*(one(job) for job in jobs))
    return time.monotonic()


# -- the operator process --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Framework:
    """How to start one framework's operator and how to recognise its requests."""

    name: str
    version: str
    command: list[str]
    user_agent_prefix: str
    env: dict[str, str]


def framework(name: str, kubeconfig: pathlib.Path, args: argparse.Namespace) -> Framework:
    """How to run ``name``'s operator; under ``python -m cProfile`` with ``--profile``."""
    if name == "ours":
        python, version = pathlib.Path(sys.executable), "runtime/ (this tree)"
        script = [
            str(HERE / "ours.py"),
            "--kubeconfig",
            str(kubeconfig),
            "--concurrency",
            str(args.ours_concurrency),
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address",
            "0",
            "--user-agent",
            "frameworks-bench/ours",
        ]
        agent, env = "frameworks-bench/ours", {}
    else:
        venv = kopf_venv(args.kopf_venv)
        python = venv / "bin/python"
        version = subprocess.run(
            [str(venv / "bin/kopf"), "--version"], capture_output=True, text=True, check=True
        ).stdout.strip()
        script = [
            str(venv / "bin/kopf"),
            "run",
            "--standalone",
            "--all-namespaces",
            str(HERE / "kopf_widgets.py"),
        ]
        agent, env = "kopf/", {"KUBECONFIG": str(kubeconfig)}
    if args.profile is None:
        command = script if name == "kopf" else [str(python), *script]
    else:
        profile = args.profile / f"{name}.prof"
        command = [str(python), "-m", "cProfile", "-o", str(profile), *script]
    return Framework(name, version, command, agent, env)  # fmt: skip


def kopf_venv(given: pathlib.Path | None) -> pathlib.Path:
    """``given``, else what ``hack/peers/kopf.sh`` installs (or finds cached) and prints."""
    if given is not None:
        return given
    done = subprocess.run([str(KOPF_SH)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BenchError(f"hack/peers/kopf.sh failed:\n{done.stderr[-2000:]}")
    return pathlib.Path(done.stdout.strip().splitlines()[-1])


def start(spec: Framework, workdir: pathlib.Path) -> _common.Child:
    """One framework's operator as a child process, with its resource use."""
    return _common.Child(
        spec.command,
        log_path=workdir / f"{spec.name}.log",
        name=f"the {spec.name} operator",
        cwd=ROOT,
        env={**os.environ, **spec.env},
    )


# -- counting --------------------------------------------------------------------------------


def audit_events(path: pathlib.Path) -> list[dict[str, Any]]:
    """One entry per request (the audit log has one per stage; keep the last seen)."""
    by_id: dict[str, dict[str, Any]] = {}
    with contextlib.suppress(FileNotFoundError), open(path) as lines:
        for line in lines:
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                by_id[event["auditID"]] = event
    return list(by_id.values())


def _stamp(text: str) -> float:
    return _common.moment(text).timestamp()


def request_key(event: dict[str, Any]) -> str:
    """``VERB resource/subresource`` (or ``VERB <path>`` for non-resource requests).

    >>> request_key({"verb": "patch", "objectRef": {"resource": "widgets",
    ...              "subresource": "status"}})
    'patch widgets/status'
    >>> request_key({"verb": "get", "requestURI": "/apis/bench.example.com/v1?x=1"})
    'get /apis/bench.example.com/v1'
    """
    ref = event.get("objectRef")
    if not ref:
        return f"{event['verb']} {event.get('requestURI', '').partition('?')[0]}"
    sub = ref.get("subresource")
    return f"{event['verb']} {ref.get('resource', '')}{'/' + sub if sub else ''}"


def agent_of(event: dict[str, Any]) -> str:
    """The User-Agent's product, e.g. ``kopf/1.45.2`` or ``kube-apiserver/v1.35.4``."""
    return str(event.get("userAgent") or "<none>").split(" ")[0]


def count_requests(events: list[dict[str, Any]], prefix: str) -> dict[str, Any]:
    mine = [e for e in events if str(e.get("userAgent") or "").startswith(prefix)]
    by: dict[str, int] = {}
    codes: dict[str, int] = {}
    for event in mine:
        key = request_key(event)
        by[key] = by.get(key, 0) + 1
        code = str((event.get("responseStatus") or {}).get("code", "?"))
        codes[code] = codes.get(code, 0) + 1
    return {
        "api_requests": len(mine),
        "api_writes": sum(1 for e in mine if e["verb"] not in READ_VERBS),
        "api_requests_by": dict(sorted(by.items(), key=lambda kv: (-kv[1], kv[0]))),
        "api_response_codes": dict(sorted(codes.items())),
    }


def by_agent(events: list[dict[str, Any]], since: float, until: float) -> dict[str, int]:
    out: dict[str, int] = {}
    for event in events:
        if since <= _stamp(event["requestReceivedTimestamp"]) <= until:
            out[agent_of(event)] = out.get(agent_of(event), 0) + 1
    return dict(sorted(out.items()))


AUDIT_TO_METRIC_VERB = {
    "get": "GET", "list": "LIST", "watch": "WATCH", "create": "POST", "update": "PUT",
    "patch": "PATCH", "delete": "DELETE", "deletecollection": "DELETE",
}  # fmt: skip


def metrics_minus_audit(
    delta: dict[tuple[str, str, str], float], events: list[dict[str, Any]], since: float,
    until: float,
) -> dict[str, int]:  # fmt: skip
    """Where ``apiserver_request_total``'s change and the audit log's requests received in
    the same interval differ, by ``VERB resource/subresource`` (non-zero entries only;
    none expected). Only resource requests are compared: the metric counts them when they
    finish, so the audit side leaves out those still running; non-resource paths (which
    the metric counts with an empty resource) are left out on both sides.

    >>> delta = {("GET", "widgets", ""): 2.0, ("GET", "", "/readyz"): 1.0}
    >>> event = {"requestReceivedTimestamp": "2026-01-01T00:00:01Z", "verb": "get",
    ...          "stageTimestamp": "2026-01-01T00:00:01Z", "objectRef": {"resource": "widgets"}}
    >>> metrics_minus_audit(delta, [event], 0.0, 2e9)
    {'GET widgets': 1}
    """
    audited: dict[tuple[str, str, str], int] = {}
    for event in events:
        if not since <= _stamp(event["requestReceivedTimestamp"]) <= until:
            continue
        if not event.get("objectRef") or _stamp(event["stageTimestamp"]) > until:
            # Not in the metric: non-resource requests (discovery, /metrics itself), and
            # (not yet) requests still running at its last read (the bench's own watch).
            continue
        ref = event.get("objectRef") or {}
        verb = AUDIT_TO_METRIC_VERB.get(event["verb"], event["verb"].upper())
        key = (verb, ref.get("resource", ""), ref.get("subresource", ""))
        audited[key] = audited.get(key, 0) + 1
    out = {}
    # Resource requests only, on both sides: the metric also counts some non-resource
    # paths (``GET /readyz`` with an empty resource), e.g. a health probe that happened
    # to fall inside the window, which the audit side leaves out above.
    resource_keys = {key for key in delta if key[1]}
    for key in sorted(resource_keys | audited.keys()):
        difference = int(delta.get(key, 0.0)) - audited.get(key, 0)
        if difference:
            out[" ".join(key[:2]) + (f"/{key[2]}" if key[2] else "")] = difference
    return out


# -- one framework ---------------------------------------------------------------------------


@contextlib.contextmanager
def workdir(name: str) -> Iterator[pathlib.Path]:
    path = pathlib.Path(tempfile.mkdtemp(prefix=f"bench-frameworks-{name}-"))
    try:
        yield path
    finally:
        if os.environ.get("BENCH_KEEP_DIR"):
            log(f"kept {path}")
        else:
            shutil.rmtree(path, ignore_errors=True)


async def run_one(name: str, args: argparse.Namespace, result: dict[str, Any]) -> None:
    count = args.objects
    with workdir(name) as work:
        audit_log = work / "audit.log"
        (work / "audit-policy.json").write_text(json.dumps(AUDIT_POLICY))
        options = controlplane.Options(
            bin_dir=_common.bin_dir(args.bin_dir), start_timeout=120,
            extra_apiserver_flags=[
                f"--audit-policy-file={work / 'audit-policy.json'}",
                f"--audit-log-path={audit_log}", "--audit-log-mode=blocking",
            ],
        )  # fmt: skip
        t0 = time.monotonic()
        with controlplane.running(options) as cp:
            assert cp.kubeconfig is not None
            cp.install_crds(HERE)
            cp.request("POST", "/api/v1/namespaces",
                       {"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": NAMESPACE}})  # fmt: skip
            spec = framework(name, cp.kubeconfig, args)
            log(f"{name}: control plane up in {time.monotonic() - t0:.1f} s")
            client = await client_.Client.from_kubeconfig(
                cp.kubeconfig, options=client_.Options(user_agent=BENCH_AGENT)
            )
            client.registry.register(WIDGETS)
            async with client:
                tracker = Tracker(client)
                tracker.start()
                try:
                    await measure(name, count, args, cp, client, tracker, spec, work, result)
                finally:
                    await tracker.stop()
                    result["bench_watch_restarts"] = tracker.restarts
            events = audit_events(audit_log)
            result.update(count_requests(events, spec.user_agent_prefix))
            window = result.pop("_window")
            delta = result.pop("_metrics_delta")
            result["apiserver_request_total_delta"] = int(sum(delta.values()))
            result["audited_by_agent"] = by_agent(events, *window)
            differences = metrics_minus_audit(delta, events, *window)
            result["metrics_minus_audit"] = sum(differences.values())
            result["metrics_minus_audit_by"] = differences
            bench = count_requests(events, BENCH_AGENT)
            result["bench_requests"] = bench["api_requests"]
            result["bench_requests_by"] = bench["api_requests_by"]


async def measure(
    name: str, count: int, args: argparse.Namespace, cp: controlplane.ControlPlane,
    client: client_.Client, tracker: Tracker, spec: Framework, work: pathlib.Path,
    result: dict[str, Any],
) -> None:  # fmt: skip
    names = [f"w-{i:05d}" for i in range(count)]
    window_start = time.time()
    before = cp.request_counts()
    result["operator"] = {"version": spec.version, "command": spec.command}
    operator = start(spec, work)
    log(f"{name}: operator started (pid {operator.popen.pid}): {' '.join(spec.command)}")
    try:
        # 1. The canary: the operator is up and watching.
        started = time.monotonic()
        canary_spec = {"size": 2, "color": "canary"}
        tracker.expect({CANARY: canary_spec})
        await client.create(widget(CANARY, canary_spec))
        await tracker.wait(args.startup_timeout, "the canary", operator.check_alive)
        result["startup_s"] = round(time.monotonic() - started, 2)
        result["cpu_startup_s"] = round(operator.cpu_seconds(), 2)
        result["rss_startup_mib"] = round(operator.memory_mib("VmRSS"), 1)
        log(f"{name}: canary converged {result['startup_s']} s after the operator started")

        # 2. N creates at once.
        tracker.expect({n: spec_for(i, 0) for i, n in enumerate(names)})
        first = time.monotonic()
        last = await bounded(
            [functools.partial(client.create, widget(n, spec_for(i, 0)))
             for i, n in enumerate(names)],
            args.concurrency,
        )  # fmt: skip
        done_at = await tracker.wait(args.timeout, "after the creates", operator.check_alive)
        result["created_converged"] = len(tracker.done)
        result["create_s"] = round(last - first, 2)
        result["create_converge_s"] = round(done_at - last, 2)
        result["create_converge_from_first_s"] = round(done_at - first, 2)
        log(f"{name}: {count} created in {result['create_s']} s, all converged "
            f"{result['create_converge_s']} s after the last create")  # fmt: skip

        # 3. N spec updates at once.
        tracker.expect({n: spec_for(i, 1) for i, n in enumerate(names)})
        first = time.monotonic()
        last = await bounded(
            [functools.partial(client.patch, WIDGETS, NAMESPACE, n, {"spec": spec_for(i, 1)})
             for i, n in enumerate(names)],
            args.concurrency,
        )  # fmt: skip
        done_at = await tracker.wait(args.timeout, "after the updates", operator.check_alive)
        result["updated_converged"] = len(tracker.done)
        result["update_s"] = round(last - first, 2)
        result["converge_s"] = round(done_at - last, 2)
        result["update_converge_from_first_s"] = round(done_at - first, 2)
        log(f"{name}: {count} updated in {result['update_s']} s, all converged "
            f"{result['converge_s']} s after the last update")  # fmt: skip

        # 4. Resource use, read while it still runs.
        result["cpu_s"] = round(operator.cpu_seconds(), 2)
        result["peak_rss_mib"] = round(operator.memory_mib("VmHWM"), 1)
    finally:
        result["stop_s"] = round(operator.stop(), 2)
        result["operator_exit_code"] = operator.popen.returncode
        if args.profile is not None and (args.profile / f"{name}.prof").exists():
            result["profiled"] = True
            result["profile_top_tottime"] = _common.profile_top(args.profile / f"{name}.prof")
        if "cpu_s" not in result:
            log(f"{name}: last lines of the operator's log:\n{operator.tail()}")
    after = cp.request_counts()
    result["_metrics_delta"] = {
        key: after.get(key, 0.0) - before.get(key, 0.0) for key in after.keys() | before
    }
    result["_window"] = (window_start, time.time())


# -- main ------------------------------------------------------------------------------------


async def run(
    args: argparse.Namespace, frameworks: list[str], results: dict[str, dict[str, Any]]
) -> None:
    """Each framework in turn; ``results`` gets each one's figures as they come (so a
    failure still leaves the earlier ones), each printed as one JSON line."""
    for name in frameworks:
        result: dict[str, Any] = {}
        try:
            await run_one(name, args, result)
        finally:
            result.pop("_window", None)
            first = {key: result.pop(key) for key in HEADLINE if key in result}
            results[name] = {"bench": "frameworks", "framework": name,
                             "objects": args.objects, **first, **result}  # fmt: skip
            print(json.dumps(results[name]), flush=True)


def summary(objects: int, results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The final line: the headline figures per framework and ours / kopf."""
    out: dict[str, Any] = {"bench": "frameworks", "objects": objects}
    for name, result in results.items():
        out[name] = {key: result.get(key) for key in HEADLINE}
    ours, kopf = out.get("ours"), out.get("kopf")
    if ours and kopf:
        out["ratios"] = {
            key: round(ours[key] / kopf[key], 3) if ours[key] is not None and kopf[key] else None
            for key in HEADLINE
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--objects", type=int, required=True)
    parser.add_argument(
        "--frameworks",
        default=",".join(FRAMEWORKS),
        help="comma-separated, run in this order; default ours,kopf",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=32,
        help="the bench's requests in flight when creating and updating",
    )
    parser.add_argument(
        "--ours-concurrency", type=int, default=64, help="reconcile workers of our controller"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds each phase may take to converge; default 120 + 0.5 s per object",
    )
    parser.add_argument("--startup-timeout", type=float, default=120.0)
    parser.add_argument(
        "--profile",
        type=pathlib.Path,
        default=None,
        help="run each operator under cProfile, write DIR/<framework>.prof "
        "and put its top functions in the report (slows them down: "
        "for finding where the time goes, not for the figures)",
    )
    parser.add_argument(
        "--kopf-venv",
        type=pathlib.Path,
        default=None,
        help="a venv with kopf; default what hack/peers/kopf.sh installs",
    )
    parser.add_argument(
        "--bin-dir",
        type=pathlib.Path,
        default=None,
        help="control-plane binaries; default $CONTROLPLANE_BIN_DIR or build.sh",
    )
    args = parser.parse_args(argv)  # fmt: skip
    frameworks = [f for f in args.frameworks.split(",") if f]
    if args.objects < 1 or not frameworks or set(frameworks) - set(FRAMEWORKS):
        parser.error(f"--objects >= 1; --frameworks from {FRAMEWORKS}")
    if args.timeout is None:
        args.timeout = 120.0 + 0.5 * args.objects
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
        args.profile = args.profile.resolve()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    results: dict[str, dict[str, Any]] = {}
    status = 0
    error = None
    try:
        asyncio.run(run(args, frameworks, results))
    except (BenchError, controlplane.ControlPlaneError) as exc:
        log(f"error: {exc}")
        error = str(exc).splitlines()[0]
    except Exception as exc:  # anything else: still one JSON line last, traceback above
        traceback.print_exc()
        error = f"{type(exc).__name__}: {exc}".splitlines()[0]
    final = summary(args.objects, results)
    final["load_avg_1m"] = round(os.getloadavg()[0], 2)
    if error is not None:
        final["error"] = error
        status = 1
    print(json.dumps(final))
    return status


if __name__ == "__main__":
    raise SystemExit(main())
