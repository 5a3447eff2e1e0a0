"""Benchmark: spec churn - every RayService's ``spec.serveConfigV2`` changed once a second.

Issue 25, item 5: what one operator process costs the API server and the Ray heads while
users keep changing their Serve configs, and how soon the last config is served.

Starts a fresh control plane (etcd + kube-apiserver with an audit log + kube-controller-
manager + kube-scheduler + kwok, with the pod network; ``runtime.testing.controlplane``,
binaries from ``hack/controlplane/build.sh``; needs root), the Ray simulator
(``tests.support.raysim``, ``--deploy-delay`` seconds from a Serve PUT to ``RUNNING``),
installs ``config/crd/bases`` and runs ``rayservice-manager --use-kubernetes-proxy
--leader-elect=false`` as its own process (``hack/bench/compare.py``'s ``ours``). Then:

1. **ready**: creates ``--services`` RayServices (``hack/bench/rayservice.py``'s shape:
   two applications, one head, one worker) over a few namespaces, waits until every one
   is Ready (``rayservice.py``'s rule) and ``--settle-seconds`` more;
2. **churn**: every ``--interval`` seconds for ``--seconds`` seconds, changes
   ``spec.serveConfigV2`` of every RayService (a JSON merge patch of the spec: the
   benchmark's own writes never conflict; change ``k`` sets ``user_config: {churn: k}``
   on the ``fruit`` application's ``MangoStand`` deployment). A tick that falls behind
   is not made up for: ``changes`` counts the patches actually made;
3. **converge**: asks every active head's dashboard directly (``GET
   /api/serve/applications/?api_type=declarative`` at its pod IP, every 0.1 s) until it
   runs the last config; ``last_config_s`` is the time from the last change (the last
   patch answered) until every head runs its service's last config. Then waits until
   every RayService reports it (``observedGeneration`` current, Ready, every
   application ``RUNNING``) and ``--settle-seconds`` more.

Counted over the window from just before the first change until then (the writes that
report the last config, ``DEPLOYING`` -> ``RUNNING`` included), per change (``changes``:
spec changes made, all services):

- ``status_writes_per_change``: PUT or PATCH of ``rayservices/status`` and
  ``rayclusters/status`` (kube-apiserver's ``apiserver_request_total``; only the operator
  writes them), each apart too (``rayservice_status_writes_per_change``,
  ``raycluster_status_writes_per_change``), and ``status_writes_per_serve_put``: per
  change the operator acted on (one worker that cannot keep up with the changes folds
  several into one pass and one PUT, which lowers the per-change figures);
- ``serve_puts_per_change``: Serve config PUTs the heads got (the simulator's counts);
- ``conflicts``: the operator's writes answered 409 (audit log: its User-Agent
  ``rayservice-operator``), ``conflicts_pct`` per cent of ``changes``, and
  ``conflicts_by_kind``; ``conflicts_all_clients`` every client's (``apiserver_request_total``);
- ``other_writes_per_change``: the operator's other writes (create, update, patch,
  delete; proxy data-plane requests and status writes left out) by ``verb
  resource[/subresource]`` (audit log), and ``writes_all_clients_by_kind`` every
  client's (the benchmark's own spec patches are ``PATCH rayservices``);
- ``status_write_outcomes``: the manager's ``status_writes_total`` deltas by kind and
  outcome (``written``, ``skipped``, ``stale``, ``conflict_resolved``) and
  ``reconciles`` its ``controller_runtime_reconcile_total`` deltas by controller and
  result: where the writes were decided.

Also ``last_config_s`` (above), ``reported_s`` (from the last change until every
RayService reports it), ``churn_lag_s`` (how far the last tick started behind its
schedule), ``manager_cpu_s``, ``manager_rss_mib``.

If something does not converge in time (or the manager dies) the last line is still one
JSON object, with an ``error`` key, and the exit status is 1. Last stdout line: one JSON
object; progress goes to stderr. ``BENCH_KEEP_DIR=1`` keeps the work directory (audit
log, manager log). Usage: ``.venv/bin/python hack/bench/churn.py --services 20 --seconds 60
--interval 1``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import logging
import os
import pathlib
import sys
import time
from collections.abc import Mapping
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import _common  # noqa: E402  # hack/bench/_common.py (this script's directory)
import aiohttp  # noqa: E402
import compare as compare_bench  # noqa: E402  # hack/bench/compare.py: audit log, operator
import raycluster as raycluster_bench  # noqa: E402  # hack/bench/raycluster.py: PODS_PER_NODE
import rayservice as rayservice_bench  # noqa: E402  # hack/bench/rayservice.py: the services
import structlog  # noqa: E402

import api.v1 as v1  # noqa: E402
from runtime.client import client as client_  # noqa: E402
from runtime.testing import controlplane  # noqa: E402
from tests.support import raysim  # noqa: E402

__all__ = ["main", "serve_config", "version_of"]

USER_AGENT = "bench-churn/1"
OPERATOR = compare_bench.OPERATOR_USER_AGENTS["ours"]
SELECTOR = "bench=rayservice"
CHURNED = ("fruit", "MangoStand")
"""The application and deployment whose ``user_config`` each change sets."""
_PLAIN = "{name: MangoStand, ray_actor_options: {num_cpus: 0.1}}"
_CHURNED = "{{name: MangoStand, user_config: {{churn: {}}}, ray_actor_options: {{num_cpus: 0.1}}}}"

HEADLINE = (
    "bench", "services", "seconds", "interval", "changes", "status_writes_per_change",
    "serve_puts_per_change", "conflicts", "conflicts_pct", "last_config_s",
)  # fmt: skip
"""The keys every run reports, first and in this order; the others follow."""

STATUS_BODIES = {
    "level": "Request",
    "verbs": ["update", "patch"],
    "resources": [{"group": "ray.io", "resources": ["rayservices", "rayservices/status"]}],
}
"""With ``--audit-bodies``: the RayServices' spec and status writes with their bodies."""

BenchError = _common.BenchError


log = _common.logger("bench churn")


def serve_config(version: int) -> str:
    """``rayservice.py``'s Serve config with change ``version`` in it (0: unchanged).

    >>> "user_config: {churn: 7}," in serve_config(7), serve_config(0) == serve_config(0)
    (True, True)
    """
    assert _PLAIN in rayservice_bench.SERVE_CONFIG
    if version == 0:
        return rayservice_bench.SERVE_CONFIG
    return rayservice_bench.SERVE_CONFIG.replace(_PLAIN, _CHURNED.format(version))


def version_of(answer: Mapping[str, Any]) -> int:
    """The change a head runs, from its ``GET /api/serve/applications/`` answer (0: none).

    >>> version_of({"applications": {"fruit": {"deployed_app_config": {"deployments": [
    ...     {"name": "MangoStand", "user_config": {"churn": 7}}]}}}})
    7
    """
    app = (answer.get("applications") or {}).get(CHURNED[0]) or {}
    for deployment in (app.get("deployed_app_config") or {}).get("deployments") or ():
        if deployment.get("name") == CHURNED[1]:
            return int((deployment.get("user_config") or {}).get("churn") or 0)
    return 0


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def manager_counters(manager: _common.Manager) -> dict[str, float]:
    """The manager's ``status_writes_total`` and ``controller_runtime_reconcile_total``."""
    out: dict[str, float] = {}
    for name, labels, value in manager.metrics():
        if name == "status_writes_total":
            key = f"status {labels.get('kind')} {labels.get('outcome')}"
        elif name == "controller_runtime_reconcile_total":
            key = f"reconcile {labels.get('controller')} {labels.get('result')}"
        else:
            continue
        out[key] = out.get(key, 0.0) + value
    return out


def reported(obj: Mapping[str, Any]) -> bool:
    """Ready, every application ``RUNNING``, and the status is of the current spec."""
    status = obj.get("status") or {}
    generation = (obj.get("metadata") or {}).get("generation")
    return rayservice_bench.ready(obj) and status.get("observedGeneration") == generation


async def churn(
    client: client_.Client, keys: list[tuple[str, str]], args: argparse.Namespace
) -> tuple[int, float, float]:
    """Change every service's Serve config once per ``args.interval`` for
    ``args.seconds``: (changes made, monotonic time the last one was answered, how late
    the last tick started)."""
    ticks = max(1, round(args.seconds / args.interval))
    started = time.monotonic()
    changes, lag, last = 0, 0.0, started
    for tick in range(1, ticks + 1):
        due = started + (tick - 1) * args.interval
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        lag = time.monotonic() - due
        body = {"spec": {"serveConfigV2": serve_config(tick)}}
        await asyncio.gather(*(client.patch(v1.RAYSERVICES, ns, name, body) for ns, name in keys))
        last = time.monotonic()
        changes += len(keys)
        if tick % 10 == 0:
            log(f"tick {tick} of {ticks} (started {lag:.2f} s late)")
    return changes, last, lag


async def wait_heads(heads: Mapping[tuple[str, str], str], version: int, within: float) -> None:
    """Until every head (pod IP by service) runs change ``version``."""
    pending = dict(heads)
    deadline = time.monotonic() + within
    timeout = aiohttp.ClientTimeout(total=5)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def runs(ip: str) -> bool:
            url = f"http://{ip}:8265/api/serve/applications/?api_type=declarative"
            try:
                async with session.get(url) as answer:
                    return answer.status == 200 and version_of(await answer.json()) == version
            except (aiohttp.ClientError, TimeoutError, ValueError):
                return False

        while pending:
            done = await asyncio.gather(*(runs(ip) for ip in pending.values()))
            pending = {k: ip for (k, ip), ok in zip(pending.items(), done, strict=True) if not ok}
            if not pending:
                return
            if time.monotonic() > deadline:
                raise BenchError(
                    f"{len(pending)} heads do not run change {version} {within:.0f} s after "
                    f"the last change, e.g. {sorted(pending)[:3]}"
                )
            await asyncio.sleep(0.1)


async def run(args: argparse.Namespace, result: dict[str, Any]) -> None:
    count = args.services
    namespaces = [f"bench-rs-{j}" for j in range(min(rayservice_bench.MAX_NAMESPACES, count))]
    nodes = max(2, (count * 2 * 2) // raycluster_bench.PODS_PER_NODE + 1)
    t0 = time.monotonic()
    with rayservice_bench.workdir() as work:
        audit_log = work / "audit.log"
        policy = compare_bench.AUDIT_POLICY
        if args.audit_bodies:
            policy = {**policy, "rules": [STATUS_BODIES, *policy["rules"]]}
        (work / "audit-policy.json").write_text(json.dumps(policy))
        flags = [f"--audit-policy-file={work / 'audit-policy.json'}",
                 f"--audit-log-path={audit_log}", "--audit-log-mode=blocking"]  # fmt: skip
        options = controlplane.Options(
            bin_dir=_common.bin_dir(args.bin_dir), controller_manager=True, scheduler=True,
            kwok=True, nodes=nodes, pod_network=True, start_timeout=120,
            extra_apiserver_flags=flags,
        )  # fmt: skip
        with (
            controlplane.running(options) as cp,
            raysim.running(cp, deploy_delay=args.deploy_delay, log_path=work / "raysim.log") as sim,
        ):
            assert cp.kubeconfig is not None
            cp.install_crds(rayservice_bench.CRD_DIR)
            await _common.make_namespaces(cp, namespaces)
            log(f"control plane and simulator up in {time.monotonic() - t0:.1f} s")
            manager = _common.Manager.ours(cp.kubeconfig, work, [
                "--use-kubernetes-proxy", "--log-level", args.manager_log_level,
                "--log-format", "json", "--leader-elect=false",
            ])  # fmt: skip
            try:
                result["manager_ready_s"] = round(await manager.wait_ready(60), 2)
                window = await scenario(args, cp, sim, manager, namespaces, result)
                result["manager_rss_mib"] = round(manager.memory_mib(), 1)
                result["manager_cpu_s"] = round(manager.cpu_seconds(), 2)
            except BaseException:
                log(f"last lines of the manager's log:\n{manager.tail(20)}")
                raise
            finally:
                manager.stop()
        # The control plane has stopped: the audit log is complete.
        audit_figures(audit_log, window, result)
    result["total_s"] = round(time.monotonic() - t0, 1)


async def scenario(
    args: argparse.Namespace,
    cp: controlplane.ControlPlane,
    sim: raysim.Simulator,
    manager: _common.Manager,
    namespaces: list[str],
    result: dict[str, Any],
) -> tuple[datetime.datetime, datetime.datetime]:
    """Ready, churn, converge (module docstring); the churn window, for the audit log."""
    count = args.services
    client = await client_.Client.from_kubeconfig(
        cp.kubeconfig, options=client_.Options(user_agent=USER_AGENT)
    )
    v1.add_to_registry(client.registry)
    async with client:
        started = time.monotonic()
        await asyncio.gather(*(
            client.create(rayservice_bench.rayservice(
                f"bench-{i}", namespaces[i % len(namespaces)], args.deletion_delay))
            for i in range(count)
        ))  # fmt: skip
        ready_s = await rayservice_bench.wait_until(
            client, manager, count, args.ready_timeout, started, "Ready",
            lambda s, _names: rayservice_bench.ready(s),
        )  # fmt: skip
        result["time_to_ready_s"] = round(ready_s, 2)
        log(f"all {count} Ready in {ready_s:.1f} s; settling {args.settle_seconds} s")
        await asyncio.sleep(args.settle_seconds)
        listed = await client.list(v1.RAYSERVICES, None, label_selector=SELECTOR)
        ips = await rayservice_bench.head_ips(client)
        heads: dict[tuple[str, str], str] = {}
        for s in listed.items:
            key = (s["metadata"]["namespace"], s["metadata"]["name"])
            ip = ips.get((key[0], rayservice_bench.active(s)))
            if ip is None:
                raise BenchError(f"no live head pod for {key}")
            heads[key] = ip

        # -- churn -----------------------------------------------------------------------
        before = rayservice_bench.api_counts(cp)
        plane_before = rayservice_bench.data_plane(sim)
        counters_before = manager_counters(manager)
        window_from = now()
        log(f"changing {count} Serve configs every {args.interval} s for {args.seconds} s")
        changes, last_change, lag = await churn(client, sorted(heads), args)
        manager.check_alive()
        ticks = changes // count
        log(f"{changes} changes made; waiting for change {ticks} on every head")
        await wait_heads(heads, ticks, args.converge_timeout)
        result["last_config_s"] = round(time.monotonic() - last_change, 2)
        log(f"every head runs the last config {result['last_config_s']} s after the last change")
        reported_s = await rayservice_bench.wait_until(
            client, manager, count, args.converge_timeout, last_change,
            "reporting the last config (Ready, RUNNING, observedGeneration)",
            lambda s, _names: reported(s),
        )  # fmt: skip
        result["reported_s"] = round(reported_s, 2)
        await asyncio.sleep(args.settle_seconds)
        after = rayservice_bench.api_counts(cp)
        plane_after = rayservice_bench.data_plane(sim)
        counters_after = manager_counters(manager)
        window_to = now()

    delta = rayservice_bench.minus(after, before)
    svc_writes = compare_bench.status_writes(delta, "rayservices")
    cluster_writes = compare_bench.status_writes(delta, "rayclusters")
    plane = rayservice_bench.minus(plane_after, plane_before)
    puts = sum(n for k, n in plane.items() if k.startswith("dashboard PUT "))
    result.update(
        changes=changes,
        status_writes_per_change=round((svc_writes + cluster_writes) / changes, 3),
        serve_puts_per_change=round(puts / changes, 3),
        last_config_s=result.pop("last_config_s"),
        status_writes_per_serve_put=round((svc_writes + cluster_writes) / max(puts, 1), 3),
        rayservice_status_writes_per_change=round(svc_writes / changes, 3),
        raycluster_status_writes_per_change=round(cluster_writes / changes, 3),
        serve_puts=int(puts),
        churn_lag_s=round(lag, 2),
        conflicts_all_clients=rayservice_bench.conflicts(delta),
        writes_all_clients_by_kind=rayservice_bench.writes_by_kind(delta),
        status_write_outcomes={
            k[len("status "):]: int(n)
            for k, n in sorted(rayservice_bench.minus(counters_after, counters_before).items())
            if k.startswith("status ") and n
        },
        reconciles={
            k[len("reconcile "):]: int(n)
            for k, n in sorted(rayservice_bench.minus(counters_after, counters_before).items())
            if k.startswith("reconcile ") and n
        },
    )  # fmt: skip
    return window_from, window_to


def audit_figures(
    path: pathlib.Path,
    window: tuple[datetime.datetime, datetime.datetime],
    result: dict[str, Any],
) -> None:
    """The operator's conflicts and other writes in ``window``, from the audit log."""
    changes = result["changes"]
    conflicts: dict[str, int] = {}
    others: dict[str, int] = {}
    for stamp, client, what, proxy, code in compare_bench.audit_events(path):
        verb = what.split(" ")[0]
        if client != OPERATOR or proxy or verb not in compare_bench.AUDIT_WRITE_VERBS:
            continue
        if not window[0] <= stamp < window[1]:
            continue
        if code == 409:
            conflicts[what] = conflicts.get(what, 0) + 1
        if not what.endswith("/status"):
            others[what] = others.get(what, 0) + 1
    total = sum(conflicts.values())
    result["conflicts"] = total
    result["conflicts_pct"] = round(100 * total / changes, 2)
    result["conflicts_by_kind"] = dict(sorted(conflicts.items()))
    result["other_writes_per_change"] = {
        k: round(n / changes, 3) for k, n in sorted(others.items())
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--services", type=int, default=20, help="default 20")
    parser.add_argument("--seconds", type=float, default=60.0, help="of churn; default 60")
    parser.add_argument(
        "--interval", type=float, default=1.0, help="seconds between changes; default 1"
    )
    parser.add_argument(
        "--deploy-delay",
        type=float,
        default=3.0,
        help="the simulator's seconds from a Serve PUT to RUNNING (default 3)",
    )
    parser.add_argument(
        "--deletion-delay",
        type=int,
        default=10,
        help="rayClusterDeletionDelaySeconds of every RayService (default 10)",
    )
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=5.0,
        help="after all Ready, and after the last config is reported (default 5)",
    )
    parser.add_argument(
        "--ready-timeout", type=float, default=None, help="default 120 + 2 s per service"
    )
    parser.add_argument(
        "--converge-timeout",
        type=float,
        default=60.0,
        help="seconds after the last change for the heads and the status (default 60)",
    )
    parser.add_argument(
        "--audit-bodies",
        action="store_true",
        help="audit the RayServices' writes with their bodies (read them with BENCH_KEEP_DIR=1)",
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
    args = parser.parse_args(argv)
    if args.services < 1 or args.seconds <= 0 or args.interval <= 0:
        parser.error("--services >= 1, --seconds > 0, --interval > 0")
    if args.ready_timeout is None:
        args.ready_timeout = 120.0 + 2.0 * args.services
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    result: dict[str, Any] = {
        "bench": "churn", "services": args.services, "seconds": args.seconds,
        "interval": args.interval, "deploy_delay": args.deploy_delay,
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }  # fmt: skip
    return _common.finish(
        run(args, result),
        result,
        headline=HEADLINE,
        expected=(BenchError, controlplane.ControlPlaneError, raysim.SimulatorError),
        log=log,
    )


if __name__ == "__main__":
    raise SystemExit(main())
