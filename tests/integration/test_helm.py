"""The Helm chart (``helm-chart/rayservice-operator``) agrees with ``config/`` and installs.

Rendered with ``helm template`` (no server): the chart's ``crds/`` are byte-for-byte
``config/crd/bases``; the ClusterRole's rules are ``config/rbac/role.yaml``'s, and the
leader-election Role's ``config/rbac/leader_election_role.yaml``'s; the Deployment has
``config/manager/manager.yaml``'s security context, and its args, built from the values,
are flags ``rayservice-manager`` accepts with the meaning the values give them. With
``watchNamespace`` (or ``singleNamespaceInstall``) a Role and a RoleBinding in each
watched namespace replace the ClusterRole, and the manager gets ``--namespace``.

On the real control plane: ``helm lint`` passes; ``helm install`` into a fresh namespace
(Pod Security ``restricted`` enforced, so the Deployment's pod is only admitted if its
security context is right) creates what the chart renders; ``rayservice-manager`` run on
the host as the chart's ServiceAccount (a TokenRequest token: exactly the chart's RBAC)
with the installed Deployment's args acquires its Lease and answers ``/readyz`` (its
caches synced, which needs list and watch on every kind it reconciles), and releases the
Lease on SIGTERM; ``helm uninstall`` removes everything the release created except the
CRDs, which Helm never deletes for a chart's ``crds/`` (asserted). If ray.io CRDs are
already installed (other modules install ``config/crd/bases``), the install uses
``--skip-crds`` and the test checks they are left untouched.

The helm binary comes from ``hack/helm/install.sh`` (built once from the Go module proxy).
"""

from __future__ import annotations

import filecmp
import os
import pathlib
import secrets
import signal
import socket
import subprocess
import sys
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from pydantic_settings import CliApp

from controllers import main as main_
from runtime.testing import controlplane
from tests.integration import helpers
from tests.support import tools

ROOT = pathlib.Path(__file__).parents[2]
CHART = ROOT / "helm-chart/rayservice-operator"
CONFIG_CRDS = ROOT / "config/crd/bases"
CRD_NAMES = ("rayclusters.ray.io", "rayservices.ray.io")
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "runAsGroup": 65532,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}

Obj = dict[str, Any]


@pytest.fixture(scope="session")
def helm() -> pathlib.Path:
    """Build (or reuse) helm; fail loudly if that fails."""
    return tools.built("hack/helm/install.sh")


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)


def template(
    helm: pathlib.Path, *flags: str, namespace: str = "ops", release: str = "rayservice-operator"
) -> list[Obj]:
    done = run(str(helm), "template", release, str(CHART), "--namespace", namespace, *flags)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def only(objs: list[Obj], kind: str) -> Obj:
    found = [o for o in objs if o["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind}s: {[o['metadata']['name'] for o in found]}"
    return found[0]


def config(path: str) -> Obj:
    doc: Obj = yaml.safe_load((ROOT / path).read_text())
    return doc


def manager_container(objs: list[Obj]) -> Obj:
    containers = only(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["manager"]
    container: Obj = containers[0]
    return container


def test_chart_version_and_crds_agree_with_the_project(helm: pathlib.Path) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["appVersion"] == pyproject["project"]["version"]
    ours = sorted(p.name for p in CONFIG_CRDS.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == ours
    _, mismatch, errors = filecmp.cmpfiles(CONFIG_CRDS, CHART / "crds", ours, shallow=False)
    assert (mismatch, errors) == ([], []), "copy config/crd/bases/*.yaml to the chart's crds/"
    rendered = [o for o in template(helm, "--include-crds") if o["kind"].endswith("Definition")]
    assert sorted(o["metadata"]["name"] for o in rendered) == sorted(CRD_NAMES)
    assert template(helm, "--skip-crds") == template(helm), "crds/ are not rendered by default"


def test_cluster_role_has_the_rules_of_config_rbac(helm: pathlib.Path) -> None:
    objs = template(helm, namespace="ops", release="rso")
    role, binding = only(objs, "ClusterRole"), only(objs, "ClusterRoleBinding")
    account = only(objs, "ServiceAccount")
    assert role["rules"] == config("config/rbac/role.yaml")["rules"]
    assert account["metadata"] == {**account["metadata"], "name": "rso-rayservice-operator",
                                   "namespace": "ops"}  # fmt: skip
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}  # fmt: skip
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "rso-rayservice-operator",
                                    "namespace": "ops"}]  # fmt: skip
    # Leader election: config/rbac's Role, in the release's namespace, for the same account.
    election = only(objs, "Role")
    assert election["rules"] == config("config/rbac/leader_election_role.yaml")["rules"]
    assert election["metadata"]["namespace"] == "ops"
    election_binding = only(objs, "RoleBinding")
    assert election_binding["metadata"]["namespace"] == "ops"
    assert election_binding["roleRef"]["name"] == election["metadata"]["name"]
    assert election_binding["subjects"] == binding["subjects"]


def test_proxy_subresources_only_with_use_kubernetes_proxy(helm: pathlib.Path) -> None:
    def proxy_rules(objs: list[Obj]) -> list[Obj]:
        role = only(objs, "ClusterRole")
        return [r for r in role["rules"] if any(x.endswith("/proxy") for x in r["resources"])]

    default = template(helm)
    assert proxy_rules(default) == []
    assert "--use-kubernetes-proxy" not in manager_container(default)["args"]
    proxied = template(helm, "--set", "useKubernetesProxy=true")
    assert (
        proxy_rules(proxied) == config("config/overlays/kubernetes-proxy/proxy_role.yaml")["rules"]
    )
    args = manager_container(proxied)["args"]
    assert CliApp.run(main_.Settings, cli_args=args).dashboard_address_mode == "kubernetes-proxy"
    namespaced = template(helm, "--set", "useKubernetesProxy=true", "--set", "watchNamespace={a}")
    role = next(o for o in namespaced if o["kind"] == "Role" and o["metadata"]["namespace"] == "a")
    assert [r for r in role["rules"] if "services/proxy" in r["resources"]]


def test_deployment_has_the_security_context_of_config_manager(helm: pathlib.Path) -> None:
    objs = template(helm)
    pod = only(objs, "Deployment")["spec"]["template"]["spec"]
    kustomized = config("config/manager/manager.yaml")["spec"]["template"]["spec"]
    assert pod["securityContext"] == POD_SECURITY == kustomized["securityContext"]
    assert manager_container(objs)["securityContext"] == CONTAINER_SECURITY
    assert kustomized["containers"][0]["securityContext"] == CONTAINER_SECURITY
    assert pod["serviceAccountName"] == only(objs, "ServiceAccount")["metadata"]["name"]
    env = {e["name"]: e for e in manager_container(objs)["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}


def test_values_become_manager_flags_it_accepts(helm: pathlib.Path) -> None:
    default = manager_container(template(helm))
    assert default["image"] == "rayservice-operator:0.1.0"
    assert default["args"] == [
        "--leader-elect", "--leader-election-id=rayservice-operator-leader",
        "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081",
        "--log-format=json", "--log-level=info", "--reconcile-concurrency=1",
    ]  # fmt: skip
    settings = CliApp.run(main_.Settings, cli_args=default["args"])
    assert (settings.leader_elect, settings.namespace, settings.log_format) == (True, [], "json")
    assert [p["containerPort"] for p in default["ports"]] == [8080, 8081]

    objs = template(
        helm, "--set", "image.repository=example.com/rso", "--set", "image.tag=v9",
        "--set", "leaderElectionEnabled=false", "--set", "metrics.enabled=false",
        "--set", "logging.stdoutEncoder=console", "--set", "logging.level=debug",
        "--set", "reconcileConcurrency=4", "--set", "replicas=2",
        "--set", "nodeSelector.pool=ops", "--set", "resources.limits.memory=1Gi",
    )  # fmt: skip
    changed = manager_container(objs)
    assert changed["image"] == "example.com/rso:v9"
    settings = CliApp.run(main_.Settings, cli_args=changed["args"])
    assert settings.leader_elect is False
    assert settings.metrics_bind_address == "0"
    assert (settings.log_format, settings.log_level) == ("console", "debug")
    assert settings.reconcile_concurrency == 4
    assert [p["name"] for p in changed["ports"]] == ["health"]
    assert changed["resources"]["limits"]["memory"] == "1Gi"
    pod_spec = only(objs, "Deployment")["spec"]
    assert pod_spec["replicas"] == 2
    assert pod_spec["template"]["spec"]["nodeSelector"] == {"pool": "ops"}
    assert not [o for o in objs if o["kind"] in ("Role", "RoleBinding")], "no election, no Role"

    refused = run(str(helm), "template", "x", str(CHART), "--set", "logging.stdoutEncoder=xml")
    assert refused.returncode != 0
    assert "stdoutEncoder" in refused.stderr


def test_watch_namespace_grants_roles_in_those_namespaces_only(helm: pathlib.Path) -> None:
    objs = template(helm, "--set", "watchNamespace={team-b,team-a,team-b}", namespace="ops")
    assert not [o for o in objs if o["kind"].startswith("Cluster")]
    rules = config("config/rbac/role.yaml")["rules"]
    roles = {o["metadata"]["namespace"]: o for o in objs if o["kind"] == "Role"}
    bindings = {o["metadata"]["namespace"]: o for o in objs if o["kind"] == "RoleBinding"}
    account = {"kind": "ServiceAccount", "name": "rayservice-operator", "namespace": "ops"}
    assert sorted(roles) == sorted(bindings) == ["ops", "team-a", "team-b"]
    for namespace in ("team-a", "team-b"):
        assert roles[namespace]["rules"] == rules, namespace
        assert bindings[namespace]["roleRef"]["name"] == roles[namespace]["metadata"]["name"]
        assert bindings[namespace]["subjects"] == [account]
    assert roles["ops"]["rules"] == config("config/rbac/leader_election_role.yaml")["rules"]
    args = manager_container(objs)["args"]
    assert "--namespace=team-a,team-b" in args
    assert CliApp.run(main_.Settings, cli_args=args).namespace == ["team-a", "team-b"]

    single = template(helm, "--set", "singleNamespaceInstall=true", namespace="ops")
    assert not [o for o in single if o["kind"].startswith("Cluster")]
    assert sorted(o["rules"] == rules for o in single if o["kind"] == "Role") == [False, True]
    assert "--namespace=ops" in manager_container(single)["args"]


def test_helm_lint_passes(helm: pathlib.Path) -> None:
    done = run(str(helm), "lint", "--strict", str(CHART))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout
    namespaced = run(str(helm), "lint", "--strict", str(CHART), "--set", "watchNamespace={a}")
    assert namespaced.returncode == 0, namespaced.stdout + namespaced.stderr


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def exists(cp: controlplane.ControlPlane, path: str) -> bool:
    try:
        cp.request("GET", path)
    except controlplane.ApiError as exc:
        if exc.status == 404:
            return False
        raise
    return True


@pytest.fixture
def release_namespace(control_plane: controlplane.ControlPlane) -> Iterator[str]:
    """A fresh namespace that enforces the ``restricted`` Pod Security Standard, as
    config/manager/namespace.yaml does: the chart's pod must pass it to be created."""
    name = f"helm-{secrets.token_hex(4)}"
    control_plane.request("POST", "/api/v1/namespaces", {
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}},
    })  # fmt: skip
    yield name
    control_plane.request("DELETE", f"/api/v1/namespaces/{name}")


def test_install_run_as_the_charts_account_and_uninstall(
    helm: pathlib.Path,
    control_plane: controlplane.ControlPlane,
    release_namespace: str,
    tmp_path: pathlib.Path,
) -> None:
    ns, release = release_namespace, f"rso-{secrets.token_hex(3)}"
    fullname = f"{release}-rayservice-operator"
    base = [str(helm), "--kubeconfig", str(control_plane.kubeconfig), "--namespace", ns]
    crds_before = {n: exists(control_plane, f"{CRD_PATH}/{n}") for n in CRD_NAMES}
    assert len(set(crds_before.values())) == 1, f"only some ray.io CRDs installed: {crds_before}"
    preinstalled = crds_before[CRD_NAMES[0]]
    uids = {
        n: control_plane.request("GET", f"{CRD_PATH}/{n}")["metadata"]["uid"]
        for n in CRD_NAMES if preinstalled
    }  # fmt: skip
    created: dict[str, str] = {
        "ServiceAccount": f"/api/v1/namespaces/{ns}/serviceaccounts/{fullname}",
        "ClusterRole": f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{fullname}",
        "ClusterRoleBinding": f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{fullname}",
        "Role": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles/"
        f"{fullname}-leader-election",
        "RoleBinding": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings/"
        f"{fullname}-leader-election",
        "Deployment": f"/apis/apps/v1/namespaces/{ns}/deployments/{fullname}",
    }
    records = f"/api/v1/namespaces/{ns}/secrets?labelSelector=owner%3Dhelm,name%3D{release}"
    manager: subprocess.Popen[bytes] | None = None
    try:
        install = [*base, "install", release, str(CHART)]
        done = run(*install, *(["--skip-crds"] if preinstalled else []))
        assert done.returncode == 0, done.stderr
        for kind, path in created.items():
            assert exists(control_plane, path), kind
        assert len(control_plane.request("GET", records)["items"]) == 1, "helm's release record"
        for name in CRD_NAMES:
            assert exists(control_plane, f"{CRD_PATH}/{name}"), f"{name} not installed from crds/"
        # The restricted Pod Security Standard admits the Deployment's pod (kwok runs it).
        pods = f"/api/v1/namespaces/{ns}/pods?labelSelector=app.kubernetes.io/instance%3D{release}"
        helpers.eventually_sync(
            lambda: control_plane.request("GET", pods)["items"], what="the chart's pod created"
        )

        manifest = run(*base, "get", "manifest", release)
        assert manifest.returncode == 0, manifest.stderr
        objs = [d for d in yaml.safe_load_all(manifest.stdout) if d]
        args = manager_container(objs)["args"]
        port = free_port()
        kubeconfig = control_plane.service_account_kubeconfig(ns, fullname)
        log = tmp_path / "manager.log"
        with open(log, "wb") as out:
            manager = subprocess.Popen(
                [str(pathlib.Path(sys.executable).parent / "rayservice-manager"),
                 "--kubeconfig", str(kubeconfig), *args,
                 "--metrics-bind-address", "0",
                 "--health-probe-bind-address", f"127.0.0.1:{port}",
                 "--leader-election-namespace", ns],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                env={**os.environ, "POD_NAMESPACE": ns},
            )  # fmt: skip
        lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{fullname}-leader"

        def holder() -> str | None:
            assert manager is not None
            assert manager.poll() is None, log.read_text()[-3000:]
            if not exists(control_plane, lease_path):
                return None
            identity: str | None = control_plane.request("GET", lease_path)["spec"].get(
                "holderIdentity"
            )
            return identity

        helpers.eventually_sync(holder, within=30, what="the Lease held")
        helpers.eventually_sync(lambda: ready(port), within=30, what="/readyz 200")
        # RBAC denials name the account ("User system:serviceaccount:... cannot list ...");
        # other 403s (another test's namespace being terminated) are not the chart's doing.
        denied = [line for line in log.read_text().splitlines()
                  if f"system:serviceaccount:{ns}:" in line and "cannot" in line]  # fmt: skip
        assert denied == [], denied[:3]
        manager.send_signal(signal.SIGTERM)
        assert manager.wait(timeout=45) == 0, log.read_text()[-3000:]
        released = control_plane.request("GET", lease_path)["spec"]
        assert not released.get("holderIdentity"), f"Lease not released: {released}"
    finally:
        if manager is not None and manager.poll() is None:
            manager.kill()
            manager.wait()
        uninstall = run(*base, "uninstall", release, "--wait", "--timeout", "60s")
    assert uninstall.returncode == 0, uninstall.stderr

    for kind, path in created.items():
        assert not exists(control_plane, path), f"{kind} left behind by helm uninstall"
    replicasets = f"/apis/apps/v1/namespaces/{ns}/replicasets"
    helpers.eventually_sync(
        lambda: not control_plane.request("GET", replicasets)["items"],
        what="the Deployment's ReplicaSet garbage-collected",
    )
    assert control_plane.request("GET", records)["items"] == [], "helm's release record left"
    # Helm's policy for a chart's crds/: installed once, never upgraded or deleted.
    for name in CRD_NAMES:
        crd = control_plane.request("GET", f"{CRD_PATH}/{name}")
        assert crd["metadata"].get("deletionTimestamp") is None, name
        if preinstalled:
            assert crd["metadata"]["uid"] == uids[name], f"{name} replaced despite --skip-crds"
