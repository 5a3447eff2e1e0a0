"""config/overlays/webhooks: its pieces agree with each other and with the code, and the
API server accepts them.

Rendered with the control plane's ``kubectl kustomize``: the Deployment turns on
``ENABLE_WEBHOOKS``, exposes ``webhook-server`` (9443, the manager's default
``--webhook-bind-address``) and mounts the Certificate's Secret at the manager's default
``--webhook-cert-dir``; the Service selects the manager's pods on that port; the
Certificate names the Service's cluster DNS name; the webhook configuration calls that
Service at the paths :func:`controllers.webhooks.setup` registers, and asks cert-manager
to inject that Certificate's CA. ``kubectl apply --dry-run=server`` accepts every object
but the two cert-manager ones (cert-manager's CRDs are not installed here).
"""

from __future__ import annotations

import pathlib
from typing import Any

import yaml

from controllers import main as main_
from controllers import webhooks
from runtime import manager
from runtime.testing import controlplane, fake
from tests.integration import test_manifests_server as manifests

OVERLAY = "config/overlays/webhooks"


def by_kind(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return manifests.only(objs, kind)


def test_the_webhooks_overlay_wires_manager_service_certificate_and_configuration(
    control_plane: controlplane.ControlPlane,
) -> None:
    objs = manifests.render(control_plane, OVERLAY)
    deployment = by_kind(objs, "Deployment")
    pod = deployment["spec"]["template"]
    [container] = pod["spec"]["containers"]
    assert {"name": "ENABLE_WEBHOOKS", "value": "true"} in container["env"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    default_port = int(main_.Settings.model_fields["webhook_bind_address"].default.split(":")[1])
    assert ports["webhook-server"] == default_port == 9443
    cert_dir = str(main_.Settings.model_fields["webhook_cert_dir"].default)
    [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == cert_dir]
    [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]

    certificate = by_kind(objs, "Certificate")
    assert volume["secret"]["secretName"] == certificate["spec"]["secretName"]
    service = by_kind(objs, "Service")
    namespace = service["metadata"]["namespace"]
    dns = f"{service['metadata']['name']}.{namespace}.svc"
    assert dns in certificate["spec"]["dnsNames"]
    assert service["spec"]["ports"] == [
        {"name": "webhook", "port": 443, "protocol": "TCP", "targetPort": "webhook-server"}
    ]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()

    config = by_kind(objs, "ValidatingWebhookConfiguration")
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        f"{certificate['metadata']['namespace']}/{certificate['metadata']['name']}"
    )
    mgr = manager.Manager(fake.FakeClient(), manager.Options(name="t"))  # type: ignore[arg-type]
    paths = webhooks.setup(mgr)
    assert [h["clientConfig"]["service"] for h in config["webhooks"]] == [
        {"name": service["metadata"]["name"], "namespace": namespace, "path": path}
        for path in paths
    ]


def test_the_api_server_accepts_the_overlay(
    control_plane: controlplane.ControlPlane, tmp_path: pathlib.Path
) -> None:
    objs = [
        o for o in manifests.render(control_plane, OVERLAY)
        if not o["apiVersion"].startswith("cert-manager.io/")
    ]  # fmt: skip
    path = tmp_path / "overlay.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    with manifests.real_namespaces(control_plane, (manifests.SYSTEM_NAMESPACE,)):
        done = manifests.kubectl(control_plane, "apply", "--dry-run=server", "-f", str(path))
    assert done.returncode == 0, done.stderr + done.stdout
    applied = {m[1] for line in done.stdout.splitlines() if (m := manifests.APPLIED.match(line))}
    assert applied == {manifests.resource_name(o) for o in objs}
    assert (
        "validatingwebhookconfiguration.admissionregistration.k8s.io/"
        f"{webhooks.CONFIGURATION_NAME}" in applied
    )
