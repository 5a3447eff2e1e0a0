"""config/ on the real API server, with the control plane's own kubectl.

- ``kubectl kustomize config/default`` renders exactly one Deployment, whose image is
  ``rayservice-operator:latest``; the namespaced overlay renders the same minus the
  ClusterRole and its binding, plus a Role and a RoleBinding in each watched namespace.
- ``/metrics``: plain HTTP on the pod's loopback only in config/default; on every
  interface behind the reviews with config/overlays/metrics-secure, or plain with the
  component config/components/metrics-plain. The components config/components/network-policy
  (the metrics port from the namespace ``monitoring``) and network-policy-webhooks (the
  webhook port from the API server's addresses, a placeholder until a patch names them)
  render NetworkPolicies the API server accepts, and refuses the placeholder.
- ``kubectl apply --dry-run=server -k`` accepts every object of config/default and of
  config/overlays/namespaced (validation, admission and RBAC's escalation checks run as
  for a real apply) and names each one it rendered, no more and no fewer. A server dry
  run creates nothing, so the namespaces the objects go into are created for real first
  (and deleted after): a dry-run-created namespace does not exist for the objects in it,
  which would fail with NotFound.
- The manager's pod, as the Deployment's template makes it, is admitted in a namespace
  with config/default's Namespace labels (Pod Security ``restricted`` enforced), and the
  same pod without its security context is refused there: the check can fail.
- ``make kind-manifests`` (what ``make kind-e2e`` installs) renders config/default with
  only the image changed to ``rayservice-operator:e2e``.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import json
import os
import pathlib
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from pydantic_settings import CliApp

from controllers import main as main_
from runtime.testing import controlplane

ROOT = pathlib.Path(__file__).parents[2]
SYSTEM_NAMESPACE = "rayservice-operator-system"
KUSTOMIZATIONS = {
    "config/default": (SYSTEM_NAMESPACE,),
    # The overlay's Roles go into the namespaces it watches; they must exist.
    "config/overlays/namespaced": (SYSTEM_NAMESPACE, "team-a", "team-b"),
    "config/overlays/metrics-secure": (SYSTEM_NAMESPACE,),
}
APPLIED = re.compile(r"^(\S+/\S+) (created|configured|unchanged) \(server dry run\)$")


def kubectl(
    cp: controlplane.ControlPlane, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(cp.bin_dir / "kubectl"), "--kubeconfig", str(cp.kubeconfig), *args],
        cwd=ROOT, input=stdin, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def render(cp: controlplane.ControlPlane, path: str | pathlib.Path) -> list[dict[str, Any]]:
    done = kubectl(cp, "kustomize", str(path))
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def resource_name(obj: dict[str, Any]) -> str:
    """How kubectl names an object it applied: ``<kind>[.<group>]/<name>``."""
    group = obj["apiVersion"].rpartition("/")[0]
    kind = obj["kind"].lower() + (f".{group}" if group else "")
    return f"{kind}/{obj['metadata']['name']}"


def only(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind]
    assert len(found) == 1, f"{len(found)} objects of kind {kind}"
    return found[0]


def _gone(cp: controlplane.ControlPlane, name: str) -> bool:
    try:
        cp.request("GET", f"/api/v1/namespaces/{name}")
    except controlplane.ApiError as exc:
        if exc.status == 404:
            return True
        raise
    return False


def _wait_gone(cp: controlplane.ControlPlane, name: str, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not _gone(cp, name):
        assert time.monotonic() < deadline, f"namespace {name} still there after {within} s"
        time.sleep(0.2)


@contextlib.contextmanager
def real_namespaces(
    cp: controlplane.ControlPlane, names: tuple[str, ...], labels: dict[str, str] | None = None
) -> Iterator[None]:
    """The namespaces exist (Active) while the block runs; those created here are deleted
    after, and waited for, so a later test can create them again."""
    created = []
    try:
        for name in names:
            existing = None
            with contextlib.suppress(controlplane.ApiError):
                existing = cp.request("GET", f"/api/v1/namespaces/{name}")
            if existing is not None and existing["status"].get("phase") == "Active":
                continue
            if existing is not None:  # Terminating: left by an earlier test
                _wait_gone(cp, name)
            cp.request(
                "POST", "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": name, "labels": labels or {}}},
            )  # fmt: skip
            created.append(name)
        yield
    finally:
        for name in created:
            cp.request("DELETE", f"/api/v1/namespaces/{name}")
        for name in created:
            _wait_gone(cp, name)


def test_config_default_renders_one_deployment_with_the_latest_image(
    control_plane: controlplane.ControlPlane,
) -> None:
    objs = render(control_plane, "config/default")
    deployment = only(objs, "Deployment")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert [c["image"] for c in containers] == ["rayservice-operator:latest"]
    assert only(objs, "Namespace")["metadata"]["name"] == SYSTEM_NAMESPACE
    namespaced = [o for o in objs if "namespace" in o["metadata"]]
    assert {o["metadata"]["namespace"] for o in namespaced} == {SYSTEM_NAMESPACE}
    assert {o["kind"] for o in objs} == {
        "CustomResourceDefinition", "Namespace", "ServiceAccount", "Role", "ClusterRole",
        "RoleBinding", "ClusterRoleBinding", "Deployment",
    }  # fmt: skip


def test_the_namespaced_overlay_swaps_the_cluster_role_for_roles(
    control_plane: controlplane.ControlPlane,
) -> None:
    default = render(control_plane, "config/default")
    overlay = render(control_plane, "config/overlays/namespaced")
    kinds = collections.Counter(o["kind"] for o in overlay)
    assert kinds["ClusterRole"] == kinds["ClusterRoleBinding"] == 0
    roles = {(o["metadata"].get("namespace"), o["kind"]) for o in overlay if o["kind"] in (
        "Role", "RoleBinding")}  # fmt: skip
    assert {("team-a", "Role"), ("team-b", "Role"), ("team-a", "RoleBinding"),
            ("team-b", "RoleBinding")} <= roles  # fmt: skip
    args = only(overlay, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    default_args = only(default, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == [*default_args, "--namespace=team-a,team-b"]


def test_the_metrics_secure_overlay_adds_the_flags_the_certificate_and_the_roles(
    control_plane: controlplane.ControlPlane,
) -> None:
    default = render(control_plane, "config/default")
    overlay = render(control_plane, "config/overlays/metrics-secure")
    pod = only(overlay, "Deployment")["spec"]["template"]["spec"]
    default_args = only(default, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    cert_dir = "/etc/rayservice-operator/metrics-cert"
    args = pod["containers"][0]["args"]
    # config/default's loopback-only /metrics moves to every interface, behind the reviews.
    assert default_args[1] == "--metrics-bind-address=127.0.0.1:8080"
    on_every_interface = [*default_args[:1], "--metrics-bind-address=:8080", *default_args[2:]]
    assert args == [*on_every_interface, "--metrics-secure", f"--metrics-cert-path={cert_dir}"]
    settings = CliApp.run(main_.Settings, cli_args=main_._go_booleans(args))
    assert settings.metrics_secure
    assert str(settings.metrics_cert_path) == cert_dir
    [mount] = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == cert_dir]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "rayservice-operator-metrics-cert"
    roles = {o["metadata"]["name"]: o for o in overlay if o["kind"] == "ClusterRole"}
    assert roles["rayservice-operator-metrics-reader"]["rules"] == [
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}
    ]
    [bound] = [o for o in overlay if o["kind"] == "ClusterRoleBinding"
               and o["roleRef"]["name"] == "rayservice-operator-metrics-auth-role"]  # fmt: skip
    assert bound["subjects"] == [{"kind": "ServiceAccount", "name": "rayservice-operator-manager",
                                  "namespace": SYSTEM_NAMESPACE}]  # fmt: skip
    assert "rayservice-operator-metrics-auth-role" in roles


def with_components(
    where: pathlib.Path, base: str, *components: str, patches: list[dict[str, Any]] | None = None
) -> pathlib.Path:
    """A kustomization of a user's in ``where``: ``base`` with ``components`` (paths of this
    repository) and ``patches``."""
    where.mkdir(parents=True, exist_ok=True)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(ROOT / base, where)],
        "components": [os.path.relpath(ROOT / c, where) for c in components],
        "patches": patches or [],
    }  # fmt: skip
    (where / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return where


def manager_settings(objs: list[dict[str, Any]]) -> main_.Settings:
    args = only(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    return CliApp.run(main_.Settings, cli_args=main_._go_booleans(args))


API_SERVER_CIDR = {
    "target": {"kind": "NetworkPolicy", "name": "rayservice-operator-manager-webhooks"},
    "patch": yaml.safe_dump([{"op": "replace", "path": "/spec/ingress/0/from/0/ipBlock/cidr",
                              "value": "10.0.0.0/24"}]),
}  # fmt: skip


def test_config_default_serves_plain_metrics_on_the_pods_loopback_only(
    control_plane: controlplane.ControlPlane, tmp_path: pathlib.Path
) -> None:
    settings = manager_settings(render(control_plane, "config/default"))
    assert (settings.metrics_bind_address, settings.metrics_secure) == ("127.0.0.1:8080", False)
    # Plain HTTP on every interface, as KubeRay serves it, is a component to add knowingly.
    plain = with_components(tmp_path / "plain", "config/default",
                            "config/components/metrics-plain")  # fmt: skip
    settings = manager_settings(render(control_plane, plain))
    assert (settings.metrics_bind_address, settings.metrics_secure) == (":8080", False)


def test_the_network_policy_components_admit_prometheus_and_the_api_server_only(
    control_plane: controlplane.ControlPlane, tmp_path: pathlib.Path
) -> None:
    metrics_only = render(control_plane, with_components(
        tmp_path / "metrics", "config/overlays/metrics-secure", "config/components/network-policy"
    ))  # fmt: skip
    policy = only(metrics_only, "NetworkPolicy")
    pod = only(metrics_only, "Deployment")["spec"]["template"]
    assert policy["metadata"]["namespace"] == SYSTEM_NAMESPACE
    assert set(policy["spec"]["podSelector"]["matchLabels"].items()) <= set(
        pod["metadata"]["labels"].items()
    )
    assert policy["spec"]["policyTypes"] == ["Ingress"], "egress (API server, Ray) stays open"
    assert policy["spec"]["ingress"] == [{
        "from": [{"namespaceSelector": {"matchLabels": {
            "kubernetes.io/metadata.name": "monitoring"}}}],
        "ports": [{"port": "metrics", "protocol": "TCP"}],
    }]  # fmt: skip
    # With the webhooks: their port, from the API server's addresses (named by a patch).
    webhooks = with_components(
        tmp_path / "webhooks", "config/overlays/webhooks", "config/components/network-policy",
        "config/components/network-policy-webhooks", patches=[API_SERVER_CIDR],
    )  # fmt: skip
    objs = render(control_plane, webhooks)
    policies = {o["metadata"]["name"]: o for o in objs if o["kind"] == "NetworkPolicy"}
    assert policies["rayservice-operator-manager-webhooks"]["spec"]["ingress"] == [{
        "from": [{"ipBlock": {"cidr": "10.0.0.0/24"}}],
        "ports": [{"port": "webhook-server", "protocol": "TCP"}],
    }]  # fmt: skip
    container = only(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert {p["name"] for p in container["ports"]} >= {"metrics", "webhook-server"}
    # The API server takes both as rendered; the webhooks' one is refused until the
    # placeholder is replaced (on purpose: a wrong range would refuse every webhook call).
    with real_namespaces(control_plane, (SYSTEM_NAMESPACE,)):
        accepted = kubectl(control_plane, "apply", "--dry-run=server", "-f", "-",
                           stdin=yaml.safe_dump_all(policies.values()))  # fmt: skip
        placeholder = render(control_plane, with_components(
            tmp_path / "unset", "config/overlays/webhooks",
            "config/components/network-policy-webhooks",
        ))  # fmt: skip
        refused = kubectl(control_plane, "apply", "--dry-run=server", "-f", "-",
                          stdin=yaml.safe_dump(only(placeholder, "NetworkPolicy")))  # fmt: skip
    assert accepted.returncode == 0, accepted.stderr
    assert refused.returncode != 0
    assert "API-SERVER-CIDR" in refused.stderr, refused.stderr


@pytest.mark.parametrize("kustomization", sorted(KUSTOMIZATIONS))
def test_server_dry_run_accepts_and_names_every_object(
    control_plane: controlplane.ControlPlane, kustomization: str
) -> None:
    expected = collections.Counter(resource_name(o) for o in render(control_plane, kustomization))
    with real_namespaces(control_plane, KUSTOMIZATIONS[kustomization]):
        done = kubectl(control_plane, "apply", "--dry-run=server", "-k", kustomization)
    assert done.returncode == 0, done.stderr + done.stdout
    matches = [(line, APPLIED.match(line)) for line in done.stdout.splitlines()]
    assert all(match for _, match in matches), done.stdout
    applied = collections.Counter(match[1] for _, match in matches if match)
    assert applied == expected
    assert "deployment.apps/rayservice-operator-manager" in applied


def _manager_pod(namespace: str, objs: list[dict[str, Any]]) -> dict[str, Any]:
    template = copy.deepcopy(only(objs, "Deployment")["spec"]["template"])
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "manager", "namespace": namespace,
                     "labels": template["metadata"]["labels"]},
        "spec": template["spec"],
    }  # fmt: skip


def test_the_manager_pod_passes_the_restricted_pod_security_level(
    control_plane: controlplane.ControlPlane,
) -> None:
    objs = render(control_plane, "config/default")
    labels = only(objs, "Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    namespace = f"psa-{secrets.token_hex(4)}"
    pod = _manager_pod(namespace, objs)
    unsafe = copy.deepcopy(pod)
    del unsafe["spec"]["securityContext"]
    for container in unsafe["spec"]["containers"]:
        del container["securityContext"]
    with real_namespaces(control_plane, (namespace,), labels=labels):
        admitted = kubectl(control_plane, "create", "--dry-run=server", "-f", "-",
                           stdin=json.dumps(pod))  # fmt: skip
        refused = kubectl(control_plane, "create", "--dry-run=server", "-f", "-",
                          stdin=json.dumps(unsafe))  # fmt: skip
    assert admitted.returncode == 0, admitted.stderr
    assert admitted.stdout.strip() == "pod/manager created (server dry run)"
    assert "Warning" not in admitted.stderr, admitted.stderr
    assert refused.returncode != 0
    assert 'violates PodSecurity "restricted:latest"' in refused.stderr, refused.stderr


def test_make_kind_manifests_changes_only_the_image(
    control_plane: controlplane.ControlPlane, tmp_path: pathlib.Path
) -> None:
    make = shutil.which("make")
    assert make is not None, "make is not installed"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS", "KIND_"))}
    out = tmp_path / "kind"
    done = subprocess.run(
        [make, "-s", "-C", str(ROOT), "kind-manifests", f"KIND_DIR={out}"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    kind = render(control_plane, out)
    default = render(control_plane, "config/default")
    deployment = only(kind, "Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "rayservice-operator:e2e"
    container["image"] = "rayservice-operator:latest"
    assert kind == default
