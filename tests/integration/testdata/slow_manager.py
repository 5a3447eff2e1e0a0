"""A manager whose reconcile takes 3 s: marks the ConfigMap "started", sleeps, marks it
"finished". Used to show that SIGTERM lets an in-flight reconcile finish."""

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
            namespace=namespace, metrics_bind_address="0", health_probe_bind_address="0"
        ),
    )

    async def reconcile(request: runtime.Request) -> runtime.Result:
        obj = await manager.cache.get(CM, request.namespace, request.name)
        if (obj["metadata"].get("annotations") or {}).get("slow/phase"):
            return runtime.Result()
        patch = {"metadata": {"annotations": {"slow/phase": "started"}}}
        await client.patch(CM, request.namespace, request.name, patch)
        await asyncio.sleep(3)
        patch = {"metadata": {"annotations": {"slow/phase": "finished"}}}
        await client.patch(CM, request.namespace, request.name, patch)
        return runtime.Result()

    runtime.Builder(manager).for_(CM).named("slow").complete(reconcile)
    return await runtime.manager.serve(manager)


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(sys.argv[1], sys.argv[2])))
