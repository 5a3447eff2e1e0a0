"""Benchmark: the operator's memory does not grow with other teams' Pods.

Starts etcd + kube-apiserver (``runtime.testing.controlplane``, binaries from
``hack/controlplane/build.sh``), installs the CRDs and runs **two** ``rayservice-manager``
processes side by side against it:

- ``filtered``: ``python -m controllers.main``, the binary as shipped (its cache holds
  only Ray pods, ``controllers.setup.cache_by_resource``);
- ``unfiltered``: the same code with ``controllers.setup.cache_by_resource`` replaced by ``{}``
  before ``main()`` runs (a one-line ``python -c`` wrapper here: no switch in the
  product), i.e. the cache as it was before per-resource options.

Once both are ready it reads each one's ``process_resident_memory_bytes`` from its
``/metrics``, creates ``--pods`` Pods that are not Ray's (no ``ray.io/node-type``; each
with a ``--annotation-bytes`` annotation; nothing schedules them, they need not run),
waits until both RSS figures are steady, and reports each manager's RSS growth
(target: < 5 MiB filtered). The Pods' LIST/WATCH requests and the watch events the
apiserver sent for pods come from kube-apiserver's own ``/metrics``; the events sent to
the managers are those minus what the apiserver's own pod watchers got (each gets every
pod: ``pods x watchers open before the managers started``) - the unfiltered manager's
alone, if the filter works.

Last stdout line: one JSON object. Usage:
``.venv/bin/python hack/bench/cache_filter.py [--pods 3000] [--annotation-bytes 2048]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import pathlib
import sys
import tempfile
import time
from typing import Any

import _common  # hack/bench/_common.py (this script's directory)

from runtime.client import client as client_
from runtime.client import errors, resources
from runtime.testing import controlplane

CRD_DIR = _common.ROOT / "config/crd/bases"
NS = "other-team"
POD = resources.default_registry.for_kind("v1", "Pod")
SA = resources.default_registry.for_kind("v1", "ServiceAccount")
UNFILTERED = (
    "import sys, controllers; from controllers import main; "
    "controllers.setup.cache_by_resource = lambda: {}; sys.exit(main.main())"
)
"""The unfiltered manager: the same code, with the operator's cache options left out."""


log = _common.logger()


def start_manager(
    command: list[str],
    kubeconfig: pathlib.Path,
    log_path: pathlib.Path,
    name: str,
    args: list[str],
) -> _common.Manager:
    """The manager's ``main()`` run by this interpreter (so both run the same code, the
    one on ``PYTHONPATH``), serving ``/metrics`` and ``/readyz`` on free loopback ports."""
    metrics_port, probe_port = controlplane.free_ports(2)
    return _common.Manager(
        [*command, "--kubeconfig", str(kubeconfig),
         "--metrics-bind-address", f"127.0.0.1:{metrics_port}",
         "--health-probe-bind-address", f"127.0.0.1:{probe_port}", *args],
        log_path=log_path, metrics_port=metrics_port, probe_port=probe_port, name=name,
    )  # fmt: skip


def rss_mib(manager: _common.Manager) -> float:
    for name, _, value in manager.metrics():
        if name == "process_resident_memory_bytes":
            return value / 2**20
    raise _common.BenchError(f"{manager.name} exports no process_resident_memory_bytes")


async def steady_rss(
    managers: list[_common.Manager], within: float, min_wait: float
) -> list[float]:
    """Each manager's RSS once none moved by more than 0.25 MiB over 3 samples 1 s apart."""
    started = time.monotonic()
    history: list[list[float]] = []
    while True:
        history.append([rss_mib(m) for m in managers])
        recent = history[-3:]
        waited = time.monotonic() - started
        if len(recent) == 3 and waited >= min_wait:
            spread = [max(s[i] for s in recent) - min(s[i] for s in recent)
                      for i in range(len(managers))]  # fmt: skip
            if max(spread) <= 0.25:
                return history[-1]
        if waited > within:
            raise _common.BenchError(f"RSS not steady within {within} s: {history[-3:]}")
        await asyncio.sleep(1.0)


def pod_requests(cp: controlplane.ControlPlane) -> dict[str, float]:
    counts: dict[str, float] = {}
    for (verb, resource, _), n in cp.request_counts().items():
        if resource == "pods" and verb in ("LIST", "WATCH", "GET"):
            counts[verb] = counts.get(verb, 0) + n
    return counts


def pod_watches_open(cp: controlplane.ControlPlane) -> dict[str, float]:
    """Open pod watches by scope (kube-apiserver's ``apiserver_longrunning_requests``)."""
    samples = _common.parse_metrics(cp.metrics())
    return {
        labels.get("scope", ""): value for name, labels, value in samples
        if name == "apiserver_longrunning_requests" and labels.get("resource") == "pods"
        and labels.get("verb") == "WATCH"
    }  # fmt: skip


def pod_watch_events(cp: controlplane.ControlPlane) -> float:
    return sum(
        value for name, labels, value in _common.parse_metrics(cp.metrics())
        if name == "apiserver_watch_events_total" and labels.get("resource") == "pods"
    )  # fmt: skip


async def create_pods(client: client_.Client, count: int, annotation_bytes: int) -> None:
    await client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    # Pods need their namespace's default ServiceAccount (no controller-manager here).
    with contextlib.suppress(errors.AlreadyExists):
        await client.create({"apiVersion": "v1", "kind": "ServiceAccount",
                             "metadata": {"name": "default"}}, namespace=NS)  # fmt: skip
    sem = asyncio.Semaphore(32)

    async def one(i: int) -> None:
        blob = f"{i:06d}" + "x" * (annotation_bytes - 6)
        body = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"web-{i:05d}", "labels": {"app": "web", "team": "other"},
                         "annotations": {"other-team.example/blob": blob}},
            "spec": {"automountServiceAccountToken": False,
                     "containers": [{"name": "web", "image": "nginx:1.27"}]},
        }  # fmt: skip
        async with sem:
            await client.create(body, namespace=NS)

    await asyncio.gather(*(one(i) for i in range(count)))


async def main(args: argparse.Namespace) -> dict[str, Any]:
    options = controlplane.Options(bin_dir=_common.bin_dir(args.bin_dir), start_timeout=120)
    manager_args = ["--log-level", "warning", "--log-format", "json", "--leader-elect=false"]
    with (
        tempfile.TemporaryDirectory(prefix="bench-cache-filter-") as tmp,
        controlplane.running(options) as cp,
    ):
        assert cp.kubeconfig is not None
        work = pathlib.Path(tmp)
        cp.install_crds(CRD_DIR)
        # kube-apiserver watches every pod itself (the Node authorizer's graph): its events
        # count in apiserver_watch_events_total too, and are taken out below.
        other_watchers = sum(pod_watches_open(cp).values())
        filtered = start_manager(
            [sys.executable, "-m", "controllers.main"], cp.kubeconfig, work / "filtered.log",
            "the filtered manager", manager_args,
        )  # fmt: skip
        unfiltered = start_manager(
            [sys.executable, "-c", UNFILTERED], cp.kubeconfig, work / "unfiltered.log",
            "the unfiltered manager", manager_args,
        )  # fmt: skip
        managers = [filtered, unfiltered]
        try:
            for m in managers:
                await m.wait_ready(90)
            before = await steady_rss(managers, within=60, min_wait=3)
            log(f"ready; RSS filtered {before[0]:.1f} MiB, unfiltered {before[1]:.1f} MiB")
            requests_before, events_before = pod_requests(cp), pod_watch_events(cp)
            client = await client_.Client.from_kubeconfig(cp.kubeconfig)
            async with client:
                started = time.monotonic()
                await create_pods(client, args.pods, args.annotation_bytes)
                log(f"created {args.pods} pods in {time.monotonic() - started:.1f} s")
            after = await steady_rss(managers, within=120, min_wait=5)
            requests = {
                verb: n - requests_before.get(verb, 0) for verb, n in pod_requests(cp).items()
            }
            events = pod_watch_events(cp) - events_before
            log(f"after; RSS filtered {after[0]:.1f} MiB, unfiltered {after[1]:.1f} MiB")
        finally:
            for m in managers:
                m.stop()
    growth = [round(a - b, 2) for a, b in zip(after, before, strict=True)]
    return {
        "bench": "cache_filter",
        "pods": args.pods,
        "annotation_bytes": args.annotation_bytes,
        "rss_before_mib": {"filtered": round(before[0], 2), "unfiltered": round(before[1], 2)},
        "rss_after_mib": {"filtered": round(after[0], 2), "unfiltered": round(after[1], 2)},
        "rss_growth_mib": {"filtered": growth[0], "unfiltered": growth[1]},
        "target_growth_mib_filtered": 5.0,
        "pod_requests_during_creation": requests,
        "pod_watch_events_sent_by_apiserver": events,
        "pod_watchers_besides_the_managers": other_watchers,
        "pod_watch_events_sent_to_the_managers": events - other_watchers * args.pods,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pods", type=int, default=3000)
    parser.add_argument("--annotation-bytes", type=int, default=2048)
    parser.add_argument("--bin-dir", type=pathlib.Path, default=None)
    print(json.dumps(asyncio.run(main(parser.parse_args()))))
