"""The benchmark's Widget controller on our framework (``runtime/``), as its own process.

It keeps every ``widgets.bench.example.com`` object's status equal to a function of
its spec (:func:`desired_status`): ``area = size * size``, ``label = color.upper()``,
``observedGeneration = metadata.generation``. The same controller on Kopf is
``kopf_widgets.py`` beside this file; ``hack/bench/frameworks.py`` runs both.

How, on the public ``runtime`` facade only (as docs/writing-a-reconciler.md):
the reconciler reads the Widget from the manager's **cache** (no GET per
reconcile) and hands the status to a :class:`runtime.status.StatusWriter`, which
writes the ``status`` subresource only when it means something new (one PUT per
spec change, none on the watch event of its own write). The **Builder** wires it
``for_`` Widgets; the **Manager** runs it with its metrics and probe servers.

The one option set away from its default, as a user would for this workload:
``max_concurrent_reconciles`` (``--concurrency``, **64** here; the framework's default
is 1, like controller-runtime's). A reconcile here is one cache read and, after a spec
change, one status PUT, so a worker spends nearly all its time waiting for the API
server, and the workers are what bounds the writes in flight. With 16 workers, while
the bench's 32 patches in flight kept kube-apiserver busy, the status writes got about
a third of its throughput and ~1,000 Widgets were still queued when the last patch was
answered (``converge_s`` 2.3-3.4 s at 2,000 Widgets); with 48-64 the writes keep pace
(0.07-0.2 s). Kopf, its peer, runs one task per object with no limit. The cost is one
pooled TLS connection per worker in flight (asyncio gives each a 256 KiB read buffer:
peak RSS ~+15 MiB at 64). Everything else is the framework's default, the work queue's
rate limiter included (it paces retries only, and nothing fails here).

Usage: ``.venv/bin/python hack/bench/frameworks/ours.py --kubeconfig K
[--concurrency 64] [--metrics-bind-address 127.0.0.1:0] [--health-probe-bind-address
127.0.0.1:0] [--user-agent frameworks-bench/ours]``. SIGTERM stops it after in-flight
reconciles.

>>> desired_status({"metadata": {"generation": 3}, "spec": {"size": 4, "color": "red"}})
{'area': 16, 'label': 'RED', 'observedGeneration': 3}
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import sys
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3]))

import runtime

__all__ = ["WIDGETS", "Widgets", "build", "desired_status", "main"]

WIDGETS = runtime.client.resources.Resource("bench.example.com", "v1", "Widget", "widgets")
"""Where Widgets are served (``widgets-crd.yaml`` beside this file)."""


def desired_status(widget: dict[str, Any]) -> dict[str, Any]:
    """The status a Widget must have: a pure function of its spec and generation."""
    spec = widget.get("spec") or {}
    return {
        "area": int(spec.get("size", 0)) ** 2,
        "label": str(spec.get("color", "")).upper(),
        "observedGeneration": widget["metadata"].get("generation"),
    }


class Widgets:
    """The reconciler: read the Widget from the cache, write its status if it differs."""

    def __init__(self, manager: runtime.Manager) -> None:
        self.cache = manager.cache
        self.writer = runtime.status.StatusWriter(manager.client)

    async def reconcile(self, request: runtime.Request) -> runtime.Result:
        try:
            widget = await self.cache.get(WIDGETS, request.namespace, request.name)
        except runtime.client.NotFound:
            return runtime.Result()
        # A STALE outcome (the spec changed while we wrote) needs nothing more: the new
        # generation's watch event reconciles the Widget again.
        await self.writer.update(widget, desired_status(widget))
        return runtime.Result()


def build(manager: runtime.Manager, concurrency: int) -> runtime.Controller:
    """Register the Widget controller with ``manager``."""
    manager.client.registry.register(WIDGETS)
    return (
        runtime.Builder(manager)
        .for_(WIDGETS)
        .named("widgets")
        .with_options(max_concurrent_reconciles=concurrency)
        .complete(Widgets(manager))
    )


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Keep Widgets' status a function of spec.")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--concurrency", type=int, default=64, help="reconcile workers")
    parser.add_argument("--metrics-bind-address", default="127.0.0.1:0")
    parser.add_argument("--health-probe-bind-address", default="127.0.0.1:0")
    parser.add_argument("--user-agent", default="frameworks-bench/ours")
    parser.add_argument("--log-level", default="info",
                        choices=["debug", "info", "warning", "error"])  # fmt: skip
    args = parser.parse_args(argv)
    runtime.log.configure("json", args.log_level)
    client = await runtime.client.Client.from_kubeconfig(
        args.kubeconfig,
        options=runtime.client.Options(name="frameworks-bench", user_agent=args.user_agent),
    )
    manager = runtime.Manager(
        client,
        runtime.ManagerOptions(
            name="frameworks-bench",
            metrics_bind_address=args.metrics_bind_address,
            health_probe_bind_address=args.health_probe_bind_address,
        ),
    )
    build(manager, args.concurrency)
    return await runtime.manager.serve(manager)


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
