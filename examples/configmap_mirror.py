"""A complete operator in one file: mirror ConfigMaps labelled ``mirror=true``.

For every ConfigMap ``X`` with the label ``mirror=true`` it keeps a ConfigMap
``X-mirror`` with the same data, owned by ``X`` (so deleting ``X`` deletes the
mirror, through the garbage collector). It uses only the public ``runtime``
facade, and is the walkthrough in docs/writing-a-reconciler.md:

1. the reconciler reads from the **cache** (no API reads per reconcile),
2. writes with **create_or_update** (no write when nothing changed),
3. records an **Event** when it creates a mirror,
4. the **Builder** wires it: ``for_`` the ConfigMaps, ``owns`` the mirrors,
5. the **Manager** runs it with probes, metrics and optional leader election.

Run it against any cluster: ``python -m examples.configmap_mirror --kubeconfig ~/.kube/config``.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
from typing import Any

import runtime

CONFIGMAPS = runtime.client.builtin("ConfigMap")
LABEL = "mirror"
NAME = "configmap-mirror"
"""The operator's name: everything that identifies it to the cluster derives from it."""


class Mirror:
    """The reconciler: level-based, it reads the world and converges it."""

    def __init__(self, manager: runtime.Manager) -> None:
        self.cache = manager.cache
        self.client = manager.client
        self.events = manager.events

    async def reconcile(self, request: runtime.Request) -> runtime.Result:
        try:
            source = await self.cache.get(CONFIGMAPS, request.namespace, request.name)
        except runtime.client.NotFound:
            return runtime.Result()  # deleted: the garbage collector removes its mirror
        labels = source["metadata"].get("labels") or {}
        if labels.get(LABEL) != "true" or request.name.endswith("-mirror"):
            return runtime.Result()

        def mutate(mirror: dict[str, Any]) -> None:
            # `source` is a read-only cached object: copy what we take from it.
            mirror["data"] = copy.deepcopy(source.get("data") or {})
            runtime.objects.set_controller_reference(source, mirror)

        operation, _ = await runtime.objects.create_or_update(
            self.client, CONFIGMAPS, request.namespace, f"{request.name}-mirror", mutate,
            cache=self.cache,
        )  # fmt: skip
        if operation is runtime.objects.Operation.CREATED:
            self.events.event(source, "Normal", "Mirrored", f"created {request.name}-mirror")
        return runtime.Result()


def build(manager: runtime.Manager, **options: Any) -> runtime.Controller:
    """Register the mirror controller with ``manager``."""
    return (
        runtime.Builder(manager)
        .for_(CONFIGMAPS)
        .owns(CONFIGMAPS)
        .named(NAME)
        .with_options(**options)
        .complete(Mirror(manager))
    )


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Mirror ConfigMaps labelled mirror=true.")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", default=None)
    parser.add_argument("--leader-elect", action="store_true")
    parser.add_argument("--metrics-bind-address", default="127.0.0.1:8080")
    parser.add_argument("--health-probe-bind-address", default="127.0.0.1:8081")
    defaults = runtime.ManagerOptions(name=NAME)
    parser.add_argument(
        "--leader-elect-lease-duration",
        type=int,
        default=int(defaults.lease_duration),
        help="whole seconds",
    )
    parser.add_argument(
        "--leader-elect-renew-deadline", type=float, default=defaults.renew_deadline
    )
    parser.add_argument("--leader-elect-retry-period", type=float,
                        default=defaults.retry_period)  # fmt: skip
    args = parser.parse_args(argv)
    runtime.log.configure("json")
    client = await runtime.client.Client.from_kubeconfig(args.kubeconfig)
    manager = runtime.Manager(
        client,
        runtime.ManagerOptions(
            name=NAME,  # its Lease "configmap-mirror-leader", field manager, Events' source
            namespace=args.namespace,
            leader_election=args.leader_elect,
            lease_duration=args.leader_elect_lease_duration,
            renew_deadline=args.leader_elect_renew_deadline,
            retry_period=args.leader_elect_retry_period,
            metrics_bind_address=args.metrics_bind_address,
            health_probe_bind_address=args.health_probe_bind_address,
        ),
    )
    build(manager)
    return await runtime.manager.serve(manager)


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
