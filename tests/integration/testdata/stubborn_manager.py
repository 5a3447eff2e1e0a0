"""A manager whose reconcile never finishes: marks the ConfigMap "started", then sleeps for
ten minutes. Shutdown budget and controller grace are two minutes, so a first SIGTERM
leaves the process waiting; used to show that a second SIGTERM exits at once."""

from __future__ import annotations

import asyncio
import sys

import runtime

CM = runtime.client.resources.default_registry.for_kind("v1", "ConfigMap")


async def main(kubeconfig: str, namespace: str) -> int:
    runtime.log.configure("json")
    client = await runtime.client.Client.from_kubeconfig(kubeconfig)
    manager = runtime.Manager(
        client,
        runtime.ManagerOptions(
            namespace=namespace,
            metrics_bind_address="0",
            health_probe_bind_address="0",
            graceful_shutdown_timeout=120,
        ),
    )

    async def reconcile(request: runtime.Request) -> runtime.Result:
        patch = {"metadata": {"annotations": {"stubborn/phase": "started"}}}
        await client.patch(CM, request.namespace, request.name, patch)
        await asyncio.sleep(600)
        return runtime.Result()

    (
        runtime.Builder(manager)
        .for_(CM)
        .named("stubborn")
        .with_options(graceful_shutdown_timeout=120)
        .complete(reconcile)
    )
    return await runtime.manager.serve(manager)


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(sys.argv[1], sys.argv[2])))
