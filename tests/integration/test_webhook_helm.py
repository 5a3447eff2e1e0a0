"""The chart's ``webhooks`` values: the operator's validating webhooks, rendered with
``helm template`` and checked against the code and against each other.

- off by default: no webhook objects, no ``ENABLE_WEBHOOKS``;
- ``webhooks.enabled``: the webhook configuration is :func:`controllers.webhooks.configuration`
  for the chart's Service (same names, paths, rules, failure policy); the Service selects
  the manager's pods on the port the manager listens on (``--webhook-bind-address``, as
  ``rayservice-manager`` parses the rendered args); the Secret is mounted at the
  manager's default ``--webhook-cert-dir``; with ``certManager`` (the default) an Issuer
  and a Certificate for the Service's DNS name into that Secret, and the CA injected;
- ``certManager: false``: the given Secret and ``caBundle`` instead, and no cert-manager
  objects; without a ``caBundle`` the template fails naming it;
- the API server accepts what is rendered (a server dry run, cert-manager's kinds aside).
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import yaml

from controllers import webhooks
from runtime.testing import controlplane
from tests.integration import test_helm as charts
from tests.integration import test_manifests_server as manifests
from tests.support import tools

Obj = dict[str, Any]
RELEASE, NAMESPACE = "ops-ray", "ops"


@pytest.fixture(scope="module")
def helm() -> pathlib.Path:
    return tools.built("hack/helm/install.sh")


def test_off_by_default(helm: pathlib.Path) -> None:
    objs = charts.template(helm)
    assert not [o for o in objs if "webhook" in o["metadata"]["name"].lower()]
    container = charts.manager_container(objs)
    assert "ENABLE_WEBHOOKS" not in {e["name"] for e in container["env"]}


def test_enabled_with_cert_manager(helm: pathlib.Path) -> None:
    objs = charts.template(helm, "--set", "webhooks.enabled=true", "--set", "webhooks.port=9555",
                           namespace=NAMESPACE, release=RELEASE)  # fmt: skip
    container = charts.manager_container(objs)
    assert {"name": "ENABLE_WEBHOOKS", "value": "true"} in container["env"]
    settings = charts.parse(container["args"])
    assert settings.webhook_bind_address == ":9555"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["webhook-server"] == 9555
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "webhook-cert"]
    assert pathlib.Path(mount["mountPath"]) == settings.webhook_cert_dir
    pod = charts.only(objs, "Deployment")["spec"]["template"]
    [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "webhook-cert"]

    service = _webhook_service(objs)
    assert service["spec"]["ports"][0]["targetPort"] == "webhook-server"
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    name = service["metadata"]["name"]

    config = charts.only(objs, "ValidatingWebhookConfiguration")
    assert config["webhooks"] == webhooks.configuration(name, NAMESPACE)["webhooks"]
    certificate = charts.only(objs, "Certificate")
    assert f"{name}.{NAMESPACE}.svc" in certificate["spec"]["dnsNames"]
    assert certificate["spec"]["secretName"] == volume["secret"]["secretName"]
    issuer = charts.only(objs, "Issuer")
    assert certificate["spec"]["issuerRef"] == {"kind": "Issuer",
                                                "name": issuer["metadata"]["name"]}  # fmt: skip
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        f"{NAMESPACE}/{certificate['metadata']['name']}"
    )


def _webhook_service(objs: list[Obj]) -> Obj:
    [service] = [o for o in objs if o["kind"] == "Service" and
                 o["metadata"]["name"].endswith("-webhook")]  # fmt: skip
    return service


def test_enabled_with_a_secret_of_your_own(helm: pathlib.Path) -> None:
    objs = charts.template(
        helm, "--set", "webhooks.enabled=true", "--set", "webhooks.certManager=false",
        "--set", "webhooks.secretName=mine", "--set", "webhooks.caBundle=Q0E=",
        namespace=NAMESPACE, release=RELEASE,
    )  # fmt: skip
    assert not [o for o in objs if o["apiVersion"].startswith("cert-manager.io/")]
    config = charts.only(objs, "ValidatingWebhookConfiguration")
    assert "annotations" not in config["metadata"]
    assert {h["clientConfig"]["caBundle"] for h in config["webhooks"]} == {"Q0E="}
    pod = charts.only(objs, "Deployment")["spec"]["template"]
    [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "webhook-cert"]
    assert volume["secret"]["secretName"] == "mine"

    done = charts.run(str(helm), "template", RELEASE, str(charts.CHART), "--set",
                      "webhooks.enabled=true", "--set", "webhooks.certManager=false")  # fmt: skip
    assert done.returncode != 0
    assert "needs webhooks.caBundle" in done.stderr


def test_the_api_server_accepts_the_rendered_webhooks(
    helm: pathlib.Path, control_plane: controlplane.ControlPlane, tmp_path: pathlib.Path
) -> None:
    objs = [
        o for o in charts.template(helm, "--set", "webhooks.enabled=true",
                                   namespace=NAMESPACE, release=RELEASE)
        if not o["apiVersion"].startswith("cert-manager.io/")
    ]  # fmt: skip
    path = tmp_path / "chart.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    with manifests.real_namespaces(control_plane, (NAMESPACE,)):
        done = manifests.kubectl(control_plane, "apply", "--dry-run=server", "-f", str(path))
    assert done.returncode == 0, done.stderr + done.stdout
    assert "validatingwebhookconfiguration.admissionregistration.k8s.io/" in done.stdout
