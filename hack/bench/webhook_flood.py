"""Benchmark: a flood of maximum-size bodies at the operator's webhook server.

Issue 37, finding 2: the webhook port takes bodies from anyone who reaches it. What a
flood of large or junk bodies costs the manager's process - its memory against the Helm
chart's limit, its event loop, its leader Lease.

Starts etcd + kube-apiserver (``runtime.testing.controlplane``, binaries from
``hack/controlplane/build.sh``), installs ``config/crd/bases`` and runs
``rayservice-manager`` as its own process with ``ENABLE_WEBHOOKS=true``, its webhook
server on loopback with a self-signed certificate, and leader election on (the Lease
``ray-operator-leader`` in ``default``). Once it is ready and holds the Lease, for each
kind of body in ``--kinds`` a child process sends ``--requests`` (default 100) POSTs of
``--body-mib`` MiB (default 4, the server's cap) at once, each on its own connection, to
``/validate-ray-io-v1-rayservice``:

- ``junk``: ``[{},{},...]``;
- ``nested``: a valid-looking AdmissionReview whose object holds ``[{},{},...]`` (what a
  parse costs most);
- ``review``: a valid AdmissionReview of a RayService (``config/samples``) padded to the
  size by an annotation (a real, if unlikely, body at the cap).

Meanwhile this process sends a small valid review every 50 ms over one kept-alive
connection and ``GET /healthz`` on the probe port likewise (each waits for the last
answer), samples the manager's ``VmRSS`` every 20 ms and reads the Lease every 250 ms.

Figures, per flood (``floods.<kind>``): ``codes`` (HTTP status: count; ``error`` for a
connection that failed), ``seconds``, ``peak_rss_mib`` (sampled), ``probe_ms_p50`` and
``probe_ms_max`` (the small review), ``healthz_ms_max``, ``probe_failures`` (probes that
got no 200). Overall: ``peak_rss_mib`` (the manager's ``VmHWM`` over its life),
``baseline_rss_mib`` (before the floods), ``rss_limit_mib`` (the chart's
``resources.limits.memory``), ``under_limit``, ``stall_ms_max`` (the slowest probe or
``/healthz`` of all floods: how long the event loop was held), ``lease_renewals`` (new
``renewTime`` values seen from the first flood's start to the last one's end),
``lease_max_gap_s`` (the longest time in that window without a renewal, counted from the
renewal before it), ``lease_renewed`` (that gap under the renew deadline, 10 s, with the
same holder throughout) and ``manager_alive`` (else ``manager_exit_code``: the floods stop
at the first one it does not survive).

``--code DIR`` runs the manager from another checkout (e.g. ``git worktree add
/tmp/old HEAD`` made before a change), DIR first on its ``PYTHONPATH``. The manager is
killed once its RSS passes ``--rss-kill-mib`` (default 2048, to spare the machine):
``killed_at_rss_mib``. Last stdout line: one JSON object (with an ``error`` key and exit
status 1 if the run could not finish); progress goes to stderr. Usage:
``.venv/bin/python hack/bench/webhook_flood.py [--requests 100] [--body-mib 4]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import itertools
import json
import logging
import os
import pathlib
import shutil
import signal
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import _common  # hack/bench/_common.py (this script's directory)
import aiohttp
import structlog
import yaml

from runtime import tls
from runtime.testing import controlplane, process

ROOT = _common.ROOT
PATH = "/validate-ray-io-v1-rayservice"
LEASE = "/apis/coordination.k8s.io/v1/namespaces/default/leases/ray-operator-leader"
RENEW_DEADLINE = 10.0
KINDS = ("junk", "nested", "review")
MiB = 1024 * 1024
HEADLINE = (
    "bench", "code", "requests", "body_bytes", "peak_rss_mib", "rss_limit_mib", "under_limit",
    "stall_ms_max", "lease_renewed", "lease_max_gap_s", "manager_alive",
)  # fmt: skip

log = _common.logger("webhook_flood", clock_time=True)


# -- the bodies ------------------------------------------------------------------------------


def review(obj: dict[str, Any], uid: str = "bench") -> dict[str, Any]:
    return {
        "kind": "AdmissionReview",  # the API server's order: kind, apiVersion, request
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": uid,
            "kind": {"group": "ray.io", "version": "v1", "kind": "RayService"},
            "resource": {"group": "ray.io", "version": "v1", "resource": "rayservices"},
            "operation": "CREATE", "name": obj["metadata"]["name"], "namespace": "default",
            "userInfo": {"username": "bench", "groups": ["system:authenticated"]},
            "object": obj, "oldObject": None, "dryRun": False,
        },
    }  # fmt: skip


def rayservice() -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load(
        (ROOT / "config/samples/ray_v1_rayservice.yaml").read_text()
    )
    obj["metadata"]["namespace"] = "default"
    return obj


def body(kind: str, size: int) -> bytes:
    """A body of ``kind`` (see the module docstring) of ``size`` bytes, give or take 3."""
    if kind == "junk":
        return b"[" + b"{}," * max(0, (size - 4) // 3) + b"{}]"
    obj = rayservice()
    if kind == "nested":
        obj["spec"]["x"] = []
        bare = json.dumps(review(obj), separators=(",", ":")).encode()
        filler = b"{}," * max(0, (size - len(bare) - 2) // 3) + b"{}"
        return bare.replace(b'"x":[]', b'"x":[' + filler + b"]")
    obj["metadata"].setdefault("annotations", {})["bench/pad"] = ""
    unpadded = len(json.dumps(review(obj), separators=(",", ":")).encode())
    obj["metadata"]["annotations"]["bench/pad"] = "x" * max(0, size - unpadded)
    return json.dumps(review(obj), separators=(",", ":")).encode()


# -- the child that floods -------------------------------------------------------------------


async def flood(port: int, ca: pathlib.Path, kind: str, requests: int, size: int) -> None:
    """``--send``: ``requests`` POSTs of a ``kind`` body at once; prints their codes."""
    data = body(kind, size)
    context = ssl.create_default_context(cafile=str(ca))
    codes: dict[str, int] = {}
    url = f"https://127.0.0.1:{port}{PATH}"
    timeout = aiohttp.ClientTimeout(total=300)

    async def one(session: aiohttp.ClientSession) -> None:
        try:
            async with session.post(url, data=io.BytesIO(data), ssl=context, headers={
                "Content-Type": "application/json"}) as response:  # fmt: skip
                await response.read()
                code = str(response.status)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            code = f"error {type(exc).__name__}"
        codes[code] = codes.get(code, 0) + 1

    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(one(session) for _ in range(requests)))
    print(json.dumps(dict(sorted(codes.items()))), flush=True)


# -- the probes ------------------------------------------------------------------------------


class Probes:
    """What runs beside a flood: small reviews, ``/healthz``, RSS samples, Lease reads."""

    def __init__(self, manager: _common.Manager, cp: controlplane.ControlPlane,
                 webhook_port: int, ca: pathlib.Path, kill_mib: float) -> None:  # fmt: skip
        self.manager, self.cp, self.kill_mib = manager, cp, kill_mib
        self.port = webhook_port
        self.url = f"https://127.0.0.1:{webhook_port}{PATH}"
        self.healthz = f"http://127.0.0.1:{manager.probe_port}/healthz"
        self.context = ssl.create_default_context(cafile=str(ca))
        self.small = json.dumps(review(rayservice(), uid="probe")).encode()
        self.renewals: list[tuple[float, str]] = []  # (renewTime as epoch s, holder)
        self.killed_at: float | None = None

    def rss(self) -> float:
        try:
            return self.manager.memory_mib("VmRSS")
        except (OSError, process.ChildExited):
            return 0.0

    async def sample_rss(self, into: list[float], stop: asyncio.Event) -> None:
        while not stop.is_set():
            rss = self.rss()
            into.append(rss)
            if rss > self.kill_mib and self.killed_at is None:
                self.killed_at = rss
                log(f"the manager's RSS passed {self.kill_mib:.0f} MiB: killed")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.manager.pid, signal.SIGKILL)
            await asyncio.sleep(0.02)

    async def probe(self, get: Any, into: list[float], failures: list[str],
                    stop: asyncio.Event) -> None:  # fmt: skip
        while not stop.is_set():
            began = time.perf_counter()
            try:
                status = await get()
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                status = type(exc).__name__
            into.append((time.perf_counter() - began) * 1000)
            if status != 200:
                failures.append(str(status))
            await asyncio.sleep(0.05)

    async def read_lease(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(controlplane.ApiError, OSError):
                lease = await asyncio.to_thread(self.cp.request, "GET", LEASE, timeout=2)
                spec = lease.get("spec") or {}
                if spec.get("renewTime"):
                    renewed = _common.moment(spec["renewTime"]).timestamp()
                    if not self.renewals or self.renewals[-1][0] != renewed:
                        self.renewals.append((renewed, str(spec.get("holderIdentity"))))
            await asyncio.sleep(0.25)

    async def run(self, kind: str, args: argparse.Namespace, size: int) -> dict[str, Any]:
        rss: list[float] = []
        probe_ms: list[float] = []
        healthz_ms: list[float] = []
        failures: list[str] = []
        stop = asyncio.Event()
        timeout = aiohttp.ClientTimeout(total=60)
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1), timeout=timeout) as a,
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1), timeout=timeout) as b,
        ):

            async def small() -> int:
                async with a.post(self.url, data=self.small, ssl=self.context, headers={
                    "Content-Type": "application/json"}) as response:  # fmt: skip
                    answer = await response.json()
                    return response.status if answer["response"]["allowed"] else -1

            async def healthz() -> int:
                async with b.get(self.healthz) as response:
                    await response.read()
                    return response.status

            tasks = [
                asyncio.create_task(self.sample_rss(rss, stop)),
                asyncio.create_task(self.probe(small, probe_ms, failures, stop)),
                asyncio.create_task(self.probe(healthz, healthz_ms, failures, stop)),
            ]
            await asyncio.sleep(0.3)  # the probes' connections are up and warm
            began = time.monotonic()
            child = await asyncio.create_subprocess_exec(
                sys.executable, __file__, "--send", kind, "--port", str(self.port),
                "--ca", str(args.ca), "--requests", str(args.requests),
                "--body-bytes", str(size), stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, _ = await child.communicate()
            seconds = time.monotonic() - began
            await asyncio.sleep(0.3)  # the answers to the last probes
            stop.set()
            await asyncio.gather(*tasks)
        lines = out.decode().strip().splitlines()
        codes = json.loads(lines[-1]) if lines else {"error": "the sender printed nothing"}
        return {
            "codes": codes,
            "seconds": round(seconds, 2),
            "peak_rss_mib": round(max(rss, default=0.0), 1),
            "probe_ms_p50": round(statistics.median(probe_ms), 1) if probe_ms else None,
            "probe_ms_max": round(max(probe_ms, default=0.0), 1),
            "healthz_ms_max": round(max(healthz_ms, default=0.0), 1),
            "probe_failures": len(failures),
        }


def lease_figures(renewals: list[tuple[float, str]], start: float, end: float) -> dict[str, Any]:
    """Renewals seen in the window ``[start, end]`` (epoch seconds), and its longest gap."""
    before = [t for t, _ in renewals if t < start]
    within = [t for t, _ in renewals if start <= t <= end]
    marks = [before[-1] if before else start, *within, end]
    gap = max(b - a for a, b in itertools.pairwise(marks))
    holders = {h for t, h in renewals if t >= (before[-1] if before else start)}
    return {
        "lease_renewals": len(within),
        "lease_max_gap_s": round(gap, 2),
        "lease_renewed": bool(before) and gap < RENEW_DEADLINE and len(holders) == 1,
        "lease_holders": sorted(holders),
    }


# -- the run ---------------------------------------------------------------------------------


def chart_limit_mib() -> float:
    values = yaml.safe_load((ROOT / "helm-chart/rayservice-operator/values.yaml").read_text())
    text = str(values["resources"]["limits"]["memory"])
    units = {"Ki": 1 / 1024, "Mi": 1.0, "Gi": 1024.0}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text) / MiB


@contextlib.contextmanager
def workdir() -> Iterator[pathlib.Path]:
    path = pathlib.Path(tempfile.mkdtemp(prefix="bench-webhook-flood-"))
    try:
        yield path
    finally:
        if not os.environ.get("BENCH_KEEP_DIR"):
            shutil.rmtree(path, ignore_errors=True)
        else:
            log(f"kept {path}")


def start_manager(code: pathlib.Path, kubeconfig: pathlib.Path, work: pathlib.Path,
                  webhook_port: int, certs: pathlib.Path) -> _common.Manager:  # fmt: skip
    metrics_port, probe_port = controlplane.free_ports(2)
    command = [
        sys.executable, "-m", "controllers.main", "--kubeconfig", str(kubeconfig),
        "--metrics-bind-address", f"127.0.0.1:{metrics_port}",
        "--health-probe-bind-address", f"127.0.0.1:{probe_port}",
        f"--webhook-bind-address=127.0.0.1:{webhook_port}", f"--webhook-cert-dir={certs}",
        "--leader-elect=true", "--leader-election-namespace=default", "--log-format=json",
    ]  # fmt: skip
    path = [str(code), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "ENABLE_WEBHOOKS": "true"}
    return _common.Manager(command, log_path=work / "manager.log", metrics_port=metrics_port,
                           probe_port=probe_port, cwd=code, env=env)  # fmt: skip


async def wait_leader(cp: controlplane.ControlPlane, within: float) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with contextlib.suppress(controlplane.ApiError):
            lease = await asyncio.to_thread(cp.request, "GET", LEASE)
            if (lease.get("spec") or {}).get("holderIdentity"):
                return
        await asyncio.sleep(0.2)
    raise _common.BenchError(f"no holder of the Lease within {within} s")


async def run(args: argparse.Namespace, result: dict[str, Any]) -> None:
    size = int(args.body_mib * MiB)
    with workdir() as work:
        certs = work / "certs"
        tls.self_signed(certs, ip_addresses=["127.0.0.1"])
        args.ca = certs / "ca.crt"
        options = controlplane.Options(bin_dir=_common.bin_dir(args.bin_dir), start_timeout=120)
        with controlplane.running(options) as cp:
            assert cp.kubeconfig is not None
            cp.install_crds(ROOT / "config/crd/bases")
            (webhook_port,) = controlplane.free_ports(1)
            manager = start_manager(args.code, cp.kubeconfig, work, webhook_port, certs)
            try:
                result["manager_ready_s"] = round(await manager.wait_ready(90), 2)
                await wait_leader(cp, 30)
                probes = Probes(manager, cp, webhook_port, args.ca, args.rss_kill_mib)
                stop_lease = asyncio.Event()
                lease_task = asyncio.create_task(probes.read_lease(stop_lease))
                await asyncio.sleep(0.5)
                result["baseline_rss_mib"] = round(probes.rss(), 1)
                floods: dict[str, Any] = {}
                start = time.time()
                for kind in args.kinds:
                    log(f"flood of {args.requests} {kind} bodies of {size} bytes")
                    floods[kind] = await probes.run(kind, args, size)
                    log(f"{kind}: {json.dumps(floods[kind])}")
                    if manager.popen.poll() is not None:
                        break
                end = time.time()
                await asyncio.sleep(0.3)
                stop_lease.set()
                await lease_task
                alive = manager.popen.poll() is None
                result["manager_alive"] = alive
                if not alive:
                    result["manager_exit_code"] = manager.popen.returncode
                    log(f"the manager exited; last lines of its log:\n{manager.tail(8)}")
                result["peak_rss_mib"] = round(manager.memory_mib("VmHWM"), 1) if alive else (
                    max(f["peak_rss_mib"] for f in floods.values()))  # fmt: skip
                result["under_limit"] = alive and result["peak_rss_mib"] < result["rss_limit_mib"]
                result["stall_ms_max"] = max(
                    max(f["probe_ms_max"], f["healthz_ms_max"]) for f in floods.values()
                )
                result.update(lease_figures(probes.renewals, start, end))
                if probes.killed_at is not None:
                    result["killed_at_rss_mib"] = round(probes.killed_at, 1)
                result["floods"] = floods
                result["manager_cpu_s"] = round(manager.cpu_seconds(), 2) if alive else None
            except BaseException:
                log(f"last lines of the manager's log:\n{manager.tail(20)}")
                raise
            finally:
                manager.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=100, help="per flood; default 100")
    parser.add_argument("--body-mib", type=float, default=4.0, help="body size; default 4")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help=f"floods, in order; default {','.join(KINDS)}")  # fmt: skip
    parser.add_argument("--code", type=pathlib.Path, default=ROOT,
                        help="the checkout the manager runs from; default this one")  # fmt: skip
    parser.add_argument("--rss-kill-mib", type=float, default=2048.0, help="default 2048")
    parser.add_argument(
        "--bin-dir", type=pathlib.Path, default=None,
        help="control-plane binaries; default $CONTROLPLANE_BIN_DIR or build.sh",
    )  # fmt: skip
    parser.add_argument("--send", choices=KINDS, help=argparse.SUPPRESS)  # the flooding child
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ca", type=pathlib.Path, help=argparse.SUPPRESS)
    parser.add_argument("--body-bytes", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.send:
        asyncio.run(flood(args.port, args.ca, args.send, args.requests, args.body_bytes))
        return 0
    args.kinds = [k for k in args.kinds.split(",") if k]
    if args.requests < 1 or args.body_mib <= 0 or not set(args.kinds) <= set(KINDS):
        parser.error(f"--requests >= 1, --body-mib > 0, --kinds among {','.join(KINDS)}")
    args.code = args.code.resolve()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    result: dict[str, Any] = {
        "bench": "webhook_flood", "code": str(args.code), "requests": args.requests,
        "body_bytes": int(args.body_mib * MiB), "rss_limit_mib": chart_limit_mib(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }  # fmt: skip
    return _common.finish(
        run(args, result),
        result,
        headline=HEADLINE,
        expected=(_common.BenchError, controlplane.ControlPlaneError),
        log=log,
    )


if __name__ == "__main__":
    sys.exit(main())
