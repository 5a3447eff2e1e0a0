"""A manager whose reconcile is slow: marks the ConfigMap "started", sleeps, marks it
"finished".

    slow_manager.py KUBECONFIG NAMESPACE [RECONCILE_SECONDS [SHUTDOWN_BUDGET]]

With the defaults (3 s, 30 s) it shows that SIGTERM lets an in-flight reconcile finish;
with a reconcile longer than the budget (600 s, 120 s) a first SIGTERM leaves the process
waiting, which shows that a second one exits at once."""

from __future__ import annotations

import asyncio
import sys

import runtime

CM = runtime.client.resources.default_registry.for_kind("v1", "ConfigMap")


async def main(kubeconfig: str, namespace: str, seconds: float, budget: float) -> int:
    runtime.log.configure("json")
    client = await runtime.client.Client.from_kubeconfig(kubeconfig)
    manager = runtime.Manager(
        client,
        runtime.ManagerOptions(
            name="slow-manager",
            namespace=namespace,
            metrics_bind_address="0",
            health_probe_bind_address="0",
            graceful_shutdown_timeout=budget,
        ),
    )

    async def reconcile(request: runtime.Request) -> runtime.Result:
        obj = await manager.cache.get(CM, request.namespace, request.name)
        if (obj["metadata"].get("annotations") or {}).get("slow/phase"):
            return runtime.Result()
        patch = {"metadata": {"annotations": {"slow/phase": "started"}}}
        await client.patch(CM, request.namespace, request.name, patch)
        await asyncio.sleep(seconds)
        patch = {"metadata": {"annotations": {"slow/phase": "finished"}}}
        await client.patch(CM, request.namespace, request.name, patch)
        return runtime.Result()

    (
        runtime.Builder(manager)
        .for_(CM)
        .named("slow")
        .with_options(graceful_shutdown_timeout=budget)
        .complete(reconcile)
    )
    return await runtime.manager.serve(manager)


if __name__ == "__main__":
    given = sys.argv[3:5]
    seconds, budget = (float(a) for a in [*given, *["3", "30"][len(given) :]])
    raise SystemExit(asyncio.run(main(sys.argv[1], sys.argv[2], seconds, budget)))
