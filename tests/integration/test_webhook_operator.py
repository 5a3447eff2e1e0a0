"""The operator's validating webhooks (``ENABLE_WEBHOOKS=true``) on the real kube-apiserver.

``rayservice-manager`` runs as its own process with ``ENABLE_WEBHOOKS=true``, its
serving certificate in ``--webhook-cert-dir`` (made here with :mod:`runtime.tls`), and
:func:`controllers.webhooks.configuration` - what ``config/webhook`` holds - is installed
with its Service reference swapped for the manager's loopback URL and the CA, limited to
the test's namespace. Then, as with KubeRay v1.7.0's webhooks:

- a RayService whose name is too long, and one with a bad ``ray.io/initializing-timeout``,
  are refused with the validation message (HTTP 422 Invalid, ``RayService.ray.io "<name>"
  is invalid: ...``); a valid one is created;
- a RayService upgraded incrementally through a GatewayClass that ``--gateway-classes``
  does not list is refused naming the flag; one through a listed class is created;
- a RayCluster with a worker group name used twice is refused;
- a RayJob whose name is too long is refused (KubeRay's only RayJob rule);
- a RayCronJob with a schedule that does not parse is refused, with the ``RayCronJob``
  gate off (the webhook is served either way); an update that leaves the schedule as it
  was (a finalizer added and removed) passes, one that breaks it is refused;
- ``/readyz`` includes the webhook server.
"""

from __future__ import annotations

import base64
import copy
import os
import pathlib
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from controllers import webhooks
from runtime import tls
from runtime.testing import controlplane
from tests.integration import helpers

ROOT = helpers.ROOT


def sample(kind: str) -> dict[str, Any]:
    path = ROOT / f"config/samples/ray_v1_{kind}.yaml"
    return yaml.safe_load(path.read_text())  # type: ignore[no-any-return]


def readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz?verbose", timeout=2) as r:
            return r.status, r.read().decode()
    except OSError as exc:
        return 0, str(exc)


@pytest.fixture
def operator(
    control_plane: controlplane.ControlPlane, namespace: str, tmp_path: pathlib.Path
) -> Iterator[tuple[int, bytes]]:
    """The manager with webhooks on: (its probe port, the CA of its serving cert)."""
    control_plane.install_crds(ROOT / "config/crd/bases")
    certs = tmp_path / "certs"
    ca, _ = tls.self_signed(certs, ip_addresses=["127.0.0.1"])
    webhook_port, probe_port = controlplane.free_ports(2)
    log = tmp_path / "manager.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "controllers.main", "--kubeconfig",
             str(control_plane.kubeconfig), f"--namespace={namespace}", "--no-leader-elect",
             "--metrics-bind-address=0", f"--health-probe-bind-address=127.0.0.1:{probe_port}",
             f"--webhook-bind-address=127.0.0.1:{webhook_port}", f"--webhook-cert-dir={certs}",
             "--gateway-classes=traefik"],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "ENABLE_WEBHOOKS": "true"},
        )  # fmt: skip
    try:

        def ready() -> str | None:
            if proc.poll() is not None:
                pytest.fail(f"the manager exited: {log.read_text()[-3000:]}")
            status, text = readyz(probe_port)
            return text if status == 200 else None

        text = helpers.eventually_sync(ready, 60, "the manager ready")
        assert "[+]webhook ok" in text, text
        config = webhooks.configuration("unused", "unused")
        config["metadata"]["name"] = f"{webhooks.CONFIGURATION_NAME}-{namespace}"
        for hook in config["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {
                "url": f"https://127.0.0.1:{webhook_port}{path}",
                "caBundle": base64.b64encode(ca.bundle()).decode(),
            }
            hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
        base = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
        control_plane.request("POST", base, config)
        try:
            yield probe_port, ca.bundle()
        finally:
            control_plane.request("DELETE", f"{base}/{config['metadata']['name']}")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.returncode != 0:
            print(log.read_text()[-5000:])


def create(cp: controlplane.ControlPlane, namespace: str, plural: str, obj: Any) -> Any:
    return cp.request("POST", f"/apis/ray.io/v1/namespaces/{namespace}/{plural}", obj)


def refusal(cp: controlplane.ControlPlane, namespace: str, plural: str, obj: Any) -> Any:
    """The API's refusal of ``obj``, once the webhook configuration is in effect (until
    then the object may be created: it is deleted and tried again)."""

    def attempt() -> Any:
        try:
            create(cp, namespace, plural, obj)
        except controlplane.ApiError as exc:
            return exc
        name = obj["metadata"]["name"]
        cp.request("DELETE", f"/apis/ray.io/v1/namespaces/{namespace}/{plural}/{name}")
        return None

    return helpers.eventually_sync(attempt, 20, f"{plural} refused")


def test_invalid_rayservice_and_raycluster_are_refused_with_the_validation_message(
    control_plane: controlplane.ControlPlane, namespace: str, operator: tuple[int, bytes]
) -> None:
    long_name = "r" * 48
    service = sample("rayservice")
    service["metadata"] = {"name": long_name}
    refused = refusal(control_plane, namespace, "rayservices", service)
    assert refused.status == 422
    message = refused.body["message"]
    assert message == (
        'admission webhook "vrayservice.ray.io" denied the request: '
        f'RayService.ray.io "{long_name}" is invalid: metadata.name {long_name!r} has 48 '
        "characters; a RayService name must have at most 47 (its RayClusters are named "
        "<name>-<5 characters>, at most 53)"
    )
    assert refused.body["reason"] == "Invalid"

    timed = copy.deepcopy(service)
    timed["metadata"] = {"name": "timed", "annotations": {"ray.io/initializing-timeout": "soon"}}
    refused = create_refused(control_plane, namespace, "rayservices", timed)
    assert "annotation ray.io/initializing-timeout has an invalid value 'soon'" in refused

    valid = copy.deepcopy(service)
    valid["metadata"] = {"name": "valid"}
    assert create(control_plane, namespace, "rayservices", valid)["metadata"]["name"] == "valid"

    public = copy.deepcopy(service)
    public["metadata"] = {"name": "public"}
    public["spec"]["upgradeStrategy"] = {
        "type": "NewClusterWithIncrementalUpgrade",
        "clusterUpgradeOptions": {"stepSizePercent": 25, "intervalSeconds": 30,
                                  "gatewayClassName": "public-lb"},
    }  # fmt: skip
    refused = create_refused(control_plane, namespace, "rayservices", public)
    assert (
        'RayService.ray.io "public" is invalid: spec.upgradeStrategy.clusterUpgradeOptions.'
        "gatewayClassName 'public-lb' is not allowed by the operator (allowed: 'traefik')"
    ) in refused, refused
    assert "--gateway-classes=public-lb,traefik" in refused
    options = public["spec"]["upgradeStrategy"]["clusterUpgradeOptions"]
    options["gatewayClassName"] = "traefik"
    assert create(control_plane, namespace, "rayservices", public)["metadata"]["name"] == "public"

    cluster = sample("raycluster")
    cluster["metadata"] = {"name": "twins"}
    cluster["spec"]["workerGroupSpecs"].append(
        copy.deepcopy(cluster["spec"]["workerGroupSpecs"][0])
    )
    refused = create_refused(control_plane, namespace, "rayclusters", cluster)
    assert refused == (
        'admission webhook "vraycluster.ray.io" denied the request: RayCluster.ray.io "twins" '
        "is invalid: worker group names must be unique: 'workers' appears more than once"
    )


def test_invalid_rayjob_and_raycronjob_are_refused(
    control_plane: controlplane.ControlPlane, namespace: str, operator: tuple[int, bytes]
) -> None:
    long_name = "j" * 48
    job = sample("rayjob")
    job["metadata"] = {"name": long_name}
    refused = refusal(control_plane, namespace, "rayjobs", job)
    assert (refused.status, refused.body["reason"]) == (422, "Invalid")
    assert refused.body["message"].startswith(
        'admission webhook "vrayjob.ray.io" denied the request: '
        f'RayJob.ray.io "{long_name}" is invalid: metadata.name {long_name!r} has 48 '
        "characters; a RayJob name must have at most 47"
    ), refused.body["message"]

    cron = sample("raycronjob")
    cron["metadata"] = {"name": "nightly"}
    cron["spec"]["schedule"] = "0 25 * * *"
    refused = create_refused(control_plane, namespace, "raycronjobs", cron)
    assert refused.startswith(
        'admission webhook "vraycronjob.ray.io" denied the request: RayCronJob.ray.io '
        "\"nightly\" is invalid: spec.schedule '0 25 * * *' is not a cron schedule"
    ), refused
    cron["spec"]["schedule"] = "0 3 * * *"
    stored = create(control_plane, namespace, "raycronjobs", cron)
    path = f"/apis/ray.io/v1/namespaces/{namespace}/raycronjobs/nightly"
    stored["metadata"]["finalizers"] = ["example.com/keep"]
    stored = control_plane.request("PUT", path, stored)
    stored["metadata"]["finalizers"] = []
    stored = control_plane.request("PUT", path, stored)
    assert not stored["metadata"].get("finalizers")
    stored["spec"]["timeZone"] = "Mars/Olympus"
    with pytest.raises(controlplane.ApiError) as broken:
        control_plane.request("PUT", path, stored)
    assert "spec.timeZone 'Mars/Olympus' is not a time zone" in broken.value.body["message"]


def create_refused(cp: controlplane.ControlPlane, namespace: str, plural: str, obj: Any) -> str:
    with pytest.raises(controlplane.ApiError) as refused:
        create(cp, namespace, plural, obj)
    return str(refused.value.body["message"])
