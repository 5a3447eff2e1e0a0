"""``python -m examples.secretsync --kubeconfig PATH``: run the SecretSync operator.

Install its CRD first: ``kubectl apply -f examples/secretsync/config/crd.yaml``.
"""

from __future__ import annotations

import argparse
import asyncio

import runtime
from examples.secretsync import secretsync


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Copy Secrets into other namespaces.")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--leader-elect", action="store_true")
    parser.add_argument("--metrics-bind-address", default="127.0.0.1:8080")
    parser.add_argument("--health-probe-bind-address", default="127.0.0.1:8081")
    args = parser.parse_args(argv)
    runtime.log.configure("auto")
    client = await runtime.client.Client.from_kubeconfig(args.kubeconfig)
    manager = runtime.Manager(
        client,
        runtime.ManagerOptions(
            name="secretsync",  # its Lease "secretsync-leader", field manager, Events' source
            leader_election=args.leader_elect,
            metrics_bind_address=args.metrics_bind_address,
            health_probe_bind_address=args.health_probe_bind_address,
        ),
    )
    secretsync.build(manager)
    return await runtime.manager.serve(manager)


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
