"""KubeRay v1.7.0's own Deployments start ``rayservice-manager`` unchanged.

``testdata/kuberay-v1.7.0/deployments.json`` records the operator container of KubeRay's
Helm chart rendered with its default values and with the values users set most
(``watchNamespace``, ``singleNamespaceInstall``, ``featureGates``, ``batchScheduler``,
``logging``, ``useKubernetesProxy``, ``env``, ``configuration``), and of its kustomize
manifest (``hack/golden/kuberay_deployments.py`` writes it from KubeRay's source).

Each is run here as a pod would run it: our binary in place of ``/manager``, with exactly
the recorded arguments and environment, against the real control plane. Three things
differ, because a pod's filesystem and network are not this test's: the kubeconfig
comes from ``$KUBECONFIG`` (a pod has its service account), ``/metrics`` and the probes
bind loopback ports chosen here (``$RAYSERVICE_METRICS_BIND_ADDRESS``/``..._PROBE_...``:
KubeRay's arguments never set them, so the variables apply; with ``--config`` the
file's ``metricsAddr``/``probeAddr`` are set instead), and a path under ``/etc`` or
``/tmp/kuberay-logs`` (a mounted volume in the pod) is a file of this test's ``tmp_path``.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
import yaml

from runtime.testing import controlplane, process

RECORD = pathlib.Path(__file__).parent / "testdata" / "kuberay-v1.7.0" / "deployments.json"
DEPLOYMENTS: dict[str, Any] = json.loads(RECORD.read_text())["deployments"]
BINARY = pathlib.Path(sys.executable).with_name("rayservice-manager")
ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def crds(control_plane: controlplane.ControlPlane) -> list[str]:
    return control_plane.install_crds(ROOT / "config/crd/bases")


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except (urllib.error.URLError, OSError):
        return 0, ""


CLUSTER = {
    "apiVersion": "ray.io/v1",
    "kind": "RayCluster",
    "metadata": {"name": "mine"},
    "spec": {"headGroupSpec": {"template": {"spec": {"containers": [
        {"name": "ray-head", "image": "rayproject/ray:2.60.0"}]}}}},
}  # fmt: skip


def recorded(name: str) -> dict[str, Any]:
    return dict(DEPLOYMENTS[name])


class Started:
    def __init__(self, child: process.ChildProcess, metrics: int, probes: int) -> None:
        self.child, self.metrics, self.probes = child, metrics, probes

    def wait_ready(self, within: float = 60.0) -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            self.child.check_alive()
            if _get(self.probes, "/readyz")[0] == 200:
                return
            time.sleep(0.2)
        raise AssertionError(f"/readyz not 200 within {within} s:\n{self.child.tail()}")


def start(
    name: str, cp: controlplane.ControlPlane, tmp_path: pathlib.Path, namespace: str
) -> Started:
    """The recorded container ``name`` as our binary (see the module docstring)."""
    recorded = DEPLOYMENTS[name]
    metrics, probes = controlplane.free_ports(2)
    args: list[str] = []
    for arg in recorded["args"]:
        if arg == "/etc/kuberay/config.yaml":
            config = yaml.safe_load(recorded["config"])
            config.update(metricsAddr=f"127.0.0.1:{metrics}", probeAddr=f"127.0.0.1:{probes}")
            arg = str(tmp_path / "config.yaml")
            pathlib.Path(arg).write_text(yaml.safe_dump(config))
        elif arg.startswith("/tmp/kuberay-logs/"):
            arg = str(tmp_path / pathlib.Path(arg).name)
        args.append(arg)
    env = {
        **os.environ,
        **{e["name"]: e["value"] for e in recorded["env"]},
        "KUBECONFIG": str(cp.kubeconfig),
        "POD_NAMESPACE": namespace,  # a pod's own namespace: the Lease goes there
        "RAYSERVICE_METRICS_BIND_ADDRESS": f"127.0.0.1:{metrics}",
        "RAYSERVICE_HEALTH_PROBE_BIND_ADDRESS": f"127.0.0.1:{probes}",
    }
    assert recorded["command"] == ["/manager"]
    child = process.ChildProcess(
        [str(BINARY), *args], log_path=tmp_path / "manager.log", cwd=ROOT, env=env
    )
    return Started(child, metrics, probes)


RUNNING = sorted(n for n in DEPLOYMENTS if n != "helm-batch-scheduler")


@pytest.mark.parametrize("name", RUNNING)
def test_kuberay_deployment_arguments_start_the_manager(
    name: str, control_plane: controlplane.ControlPlane, tmp_path: pathlib.Path, namespace: str
) -> None:
    control_plane.request("POST", f"/apis/ray.io/v1/namespaces/{namespace}/rayclusters", CLUSTER)
    started = start(name, control_plane, tmp_path, namespace)
    try:
        started.wait_ready()
        assert _get(started.metrics, "/metrics")[0] == 200  # KubeRay's probes GET /metrics
        # Its chart turns KubeRay's metrics on (in flags or in the Configuration); a
        # series appears for the RayCluster when its namespace is watched.
        watched = not any(a in ("--watch-namespace",) for a in recorded(name)["args"])
        expected = recorded(name)["source"].startswith("helm-chart") and watched
        name_ = CLUSTER["metadata"]["name"]
        series = f'kuberay_cluster_info{{name="{name_}",namespace="{namespace}"'

        def scraped() -> bool:
            return series in _get(started.metrics, "/metrics")[1]

        deadline = time.monotonic() + (10 if expected else 3)
        while not scraped() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert scraped() is expected, name
        # Leader election is on in every one of them (KubeRay's default): the Lease is
        # taken in the pod's namespace.
        lease = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        deadline = time.monotonic() + 30
        while not control_plane.request("GET", lease)["items"]:
            assert time.monotonic() < deadline, "no leader Lease taken"
            started.child.check_alive()
            time.sleep(0.2)
    finally:
        code = started.child.popen.poll()
        started.child.stop()
    assert code is None, started.child.tail()
    assert started.child.popen.returncode == 0, started.child.tail()
    log = started.child.log_path.read_text()
    records = [json.loads(line) for line in log.splitlines() if line]
    errors = [r for r in records if r.get("level") == "error" and r.get("namespace") == namespace]
    assert errors == []  # other tests' namespaces may be terminating meanwhile: not ours
    gates = next(json.loads(line) for line in log.splitlines() if "loaded feature gates" in line)
    if name == "helm-feature-gates":
        assert gates["gates"]["RayClusterStatusConditions"] is False
        assert "RayClusterStatusConditions=false" in gates["not_followed"]
        # the RayCronJob gate is followed: its controller runs (and logged no error above)
        assert gates["gates"]["RayCronJob"] is True
        assert "RayCronJob=true" not in gates["not_followed"]
    if name == "helm-log-file":
        lines = (tmp_path / "operator.log").read_text().splitlines()
        assert lines
        assert all(json.loads(line)["event"] for line in lines)
        assert any("caches synced" in line for line in lines)


def test_a_batch_scheduler_we_lack_exits_with_a_clear_message(
    control_plane: controlplane.ControlPlane, tmp_path: pathlib.Path, namespace: str
) -> None:
    started = start("helm-batch-scheduler", control_plane, tmp_path, namespace)
    assert started.child.popen.wait(30) == 2
    output = started.child.tail()
    assert "--batch-scheduler" in output
    assert "'volcano' is not integrated" in output
    assert "supported: none" in output
