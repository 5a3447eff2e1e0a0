"""``python -m examples.secretsync --kubeconfig PATH``: run the SecretSync operator.

Install its CRD first: ``kubectl apply -f examples/secretsync/config/crd.yaml``.

Its admission webhooks (:mod:`examples.secretsync.webhooks`) are off unless
``--webhooks`` is given, as they need a webhook configuration installed
(``config/webhook.yaml``) and a certificate the API server trusts:

- ``--webhook-bind-address`` (default ``127.0.0.1:9443``, where the URLs of
  ``config/webhook.yaml`` point; ``:9443`` in a cluster);
- ``--webhook-cert-dir DIR``: serve ``DIR/tls.crt`` and ``DIR/tls.key`` (re-read
  when rotated). Without it, a CA and a certificate for ``127.0.0.1`` are generated
  at start (into the framework's default cert dir,
  ``$TMPDIR/k8s-webhook-server/serving-certs``), and the CA is written into the
  ``secretsync`` Validating- and MutatingWebhookConfigurations: enough on your
  machine, one replica.
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib

import runtime
from examples.secretsync import secretsync

CONFIGURATION = "secretsync"
"""The name of both webhook configurations in ``config/webhook.yaml``."""


def webhook_options(
    bind_address: str, cert_dir: pathlib.Path | None
) -> runtime.webhook.server.Options:
    """Certificates from ``cert_dir``, or self-signed with the CA injected (see above)."""
    if cert_dir is not None:
        return runtime.webhook.server.Options(bind_address=bind_address, cert_dir=cert_dir)
    return runtime.webhook.server.Options(
        bind_address=bind_address,
        self_signed=runtime.webhook.server.SelfSigned(
            ip_addresses=["127.0.0.1"],
            validating_configurations=[CONFIGURATION],
            mutating_configurations=[CONFIGURATION],
        ),
    )


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Copy Secrets into other namespaces.")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--leader-elect", action="store_true")
    parser.add_argument("--metrics-bind-address", default="127.0.0.1:8080")
    parser.add_argument("--health-probe-bind-address", default="127.0.0.1:8081")
    parser.add_argument("--webhooks", action="store_true", help="serve the admission webhooks")
    parser.add_argument("--webhook-bind-address", default="127.0.0.1:9443")
    parser.add_argument("--webhook-cert-dir", type=pathlib.Path, default=None)
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
            webhook=(
                webhook_options(args.webhook_bind_address, args.webhook_cert_dir)
                if args.webhooks
                else runtime.webhook.server.Options()  # no server runs: nothing registered
            ),
        ),
    )
    secretsync.build(manager, webhooks=args.webhooks)
    return await runtime.manager.serve(manager)


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
