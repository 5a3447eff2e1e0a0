"""The Helm chart (``helm-chart/rayservice-operator``) agrees with ``config/`` and installs.

Rendered with ``helm template`` (no server): the chart's ``crds/`` are byte-for-byte
``config/crd/bases``; the ClusterRole's rules are ``config/rbac/role.yaml``'s, and the
leader-election Role's ``config/rbac/leader_election_role.yaml``'s; the Deployment has
``config/manager/manager.yaml``'s security context, and its args, built from the values,
are flags ``rayservice-manager`` accepts with the meaning the values give them. With
``watchNamespace`` (or ``singleNamespaceInstall``) a Role and a RoleBinding in each
watched namespace replace the ClusterRole, and the manager gets ``--namespace``.
``/metrics`` is secure by default (``--metrics-secure``, a self-signed certificate or the
``metrics.secure.certSecret`` mounted, the ClusterRoles of
``config/overlays/metrics-secure``, an HTTPS ServiceMonitor endpoint with Prometheus'
token); ``metrics.secure.enabled=false`` is KubeRay's plain HTTP. ``networkPolicy`` (off
by default, on in ``values-hardened.yaml``) admits only the metrics port from the
namespaces named and the webhook port from the API server's addresses.

KubeRay v1.7.0's own values file (``testdata/kuberay-v1.7.0/values.yaml``, verbatim)
renders, every argument is a flag ``rayservice-manager --help`` lists, and each of its
keys has KubeRay's meaning: ``featureGates`` -> ``--feature-gates``; ``configuration``
-> a ConfigMap that ``controllers.configuration`` parses and that, through ``--config``,
gives the manager the very settings the flags would; ``logging`` -> a log file on an
emptyDir; ``kubeClient`` -> ``--qps``/``--burst``; ``env``, ``labels``, ``annotations``,
the probe and security-context overrides; ``metrics.serviceMonitor`` -> a ServiceMonitor
of the metrics Service; ``rbacEnable``/``crNamespacedRbacEnable``. Every object the schema
defines is closed: an unknown key, top-level or nested, fails naming it, and a batch
scheduler fails at template time (none is integrated).

On the real control plane: ``helm lint`` passes; ``helm install`` into a fresh namespace
(Pod Security ``restricted`` enforced, so the Deployment's pod is only admitted if its
security context is right) creates what the chart renders; ``rayservice-manager`` run on
the host as the chart's ServiceAccount (a TokenRequest token: exactly the chart's RBAC)
with the installed Deployment's args acquires its Lease and answers ``/readyz`` (its
caches synced, which needs list and watch on every kind it reconciles), serves
``/metrics`` only to a token of an account the chart bound to the reader role (401
without one, 403 for another account), and releases the Lease on SIGTERM; ``helm
uninstall`` removes everything the release created except the CRDs, which Helm never
deletes for a chart's ``crds/`` (asserted). If ray.io CRDs are
already installed (other modules install ``config/crd/bases``), the install uses
``--skip-crds`` and the test checks they are left untouched.

The helm binary comes from ``hack/helm/install.sh`` (built once from the Go module proxy).
"""

from __future__ import annotations

import filecmp
import json
import os
import pathlib
import re
import secrets
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from pydantic_settings import CliApp

import runtime
from controllers import configuration
from controllers import main as main_
from controllers.rayservice import gateway as gateway_objects
from runtime.testing import controlplane
from tests.integration import helpers
from tests.support import tools

ROOT = pathlib.Path(__file__).parents[2]
CHART = ROOT / "helm-chart/rayservice-operator"
CONFIG_CRDS = ROOT / "config/crd/bases"
CRD_NAMES = (
    "rayclusters.ray.io",
    "rayservices.ray.io",
    "rayjobs.ray.io",
    "raycronjobs.ray.io",
)
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


def parse(args: list[str]) -> main_.Settings:
    """``args`` read as ``rayservice-manager`` reads them (Go's boolean forms included)."""
    return CliApp.run(main_.Settings, cli_args=main_._go_booleans(args))


def manager_container(objs: list[Obj]) -> Obj:
    containers = only(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["manager"]
    container: Obj = containers[0]
    return container


def test_chart_version_and_crds_agree_with_the_project(helm: pathlib.Path) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["appVersion"] == runtime.__version__  # the one written version
    ours = sorted(p.name for p in CONFIG_CRDS.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == ours
    _, mismatch, errors = filecmp.cmpfiles(CONFIG_CRDS, CHART / "crds", ours, shallow=False)
    assert (mismatch, errors) == ([], []), "copy config/crd/bases/*.yaml to the chart's crds/"
    rendered = [o for o in template(helm, "--include-crds") if o["kind"].endswith("Definition")]
    assert sorted(o["metadata"]["name"] for o in rendered) == sorted(CRD_NAMES)
    assert template(helm, "--skip-crds") == template(helm), "crds/ are not rendered by default"


def named(objs: list[Obj], kind: str, name: str) -> Obj:
    [found] = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def test_cluster_role_has_the_rules_of_config_rbac(helm: pathlib.Path) -> None:
    objs = template(helm, namespace="ops", release="rso")
    role = named(objs, "ClusterRole", "rso-rayservice-operator")
    binding = named(objs, "ClusterRoleBinding", "rso-rayservice-operator")
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
        role = named(objs, "ClusterRole", "rayservice-operator")
        return [r for r in role["rules"] if any(x.endswith("/proxy") for x in r["resources"])]

    default = template(helm)
    assert proxy_rules(default) == []
    assert "--use-kubernetes-proxy" not in manager_container(default)["args"]
    proxied = template(helm, "--set", "useKubernetesProxy=true")
    assert (
        proxy_rules(proxied) == config("config/overlays/kubernetes-proxy/proxy_role.yaml")["rules"]
    )
    args = manager_container(proxied)["args"]
    assert parse(args).dashboard_address_mode == "kubernetes-proxy"
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
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_values_become_manager_flags_it_accepts(helm: pathlib.Path) -> None:
    default = manager_container(template(helm))
    assert default["image"] == "rayservice-operator:0.1.0"
    assert default["args"] == [
        "--leader-elect", "--leader-election-id=rayservice-operator-leader",
        "--metrics-bind-address=:8080", "--enable-metrics", "--health-probe-bind-address=:8081",
        "--log-format=json", "--log-level=info", "--reconcile-concurrency=1",
        "--qps=100", "--burst=200", "--metrics-secure",
    ]  # fmt: skip
    settings = parse(default["args"])
    assert (settings.leader_elect, settings.namespace, settings.log_format) == (True, [], "json")
    assert (settings.enable_metrics, settings.qps, settings.burst) == (True, 100, 200)
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
    settings = parse(changed["args"])
    assert settings.leader_elect is False, "the manager's default is on: it needs the flag"
    assert (settings.metrics_bind_address, settings.enable_metrics) == ("0", False)
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


METRICS_AUTH_OBJECTS = [
    ("ClusterRole", "rayservice-operator-metrics-auth"),
    ("ClusterRole", "rayservice-operator-metrics-reader"),
    ("ClusterRoleBinding", "rayservice-operator-metrics-auth"),
]


def cluster_scoped(objs: list[Obj]) -> list[tuple[str, str]]:
    return sorted((o["kind"], o["metadata"]["name"]) for o in objs
                  if o["kind"].startswith("Cluster"))  # fmt: skip


def test_watch_namespace_grants_roles_in_those_namespaces_only(helm: pathlib.Path) -> None:
    objs = template(helm, "--set", "watchNamespace={team-b,team-a,team-b}", namespace="ops")
    # Cluster-scoped only what secure metrics need (TokenReviews and SubjectAccessReviews
    # are cluster-scoped); with plain metrics, nothing.
    assert cluster_scoped(objs) == METRICS_AUTH_OBJECTS
    plain = ("--set", "metrics.secure.enabled=false")
    assert cluster_scoped(template(helm, "--set", "watchNamespace={a}", *plain)) == []
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
    assert parse(args).namespace == ["team-a", "team-b"]

    single = template(helm, "--set", "singleNamespaceInstall=true", namespace="ops")
    assert cluster_scoped(single) == METRICS_AUTH_OBJECTS
    assert sorted(o["rules"] == rules for o in single if o["kind"] == "Role") == [False, True]
    assert "--namespace=ops" in manager_container(single)["args"]
    # Both: watchNamespace names the namespaces, as in KubeRay's chart.
    both = template(helm, "--set", "singleNamespaceInstall=true", "--set", "watchNamespace={a}")
    assert sorted(o["metadata"]["namespace"] for o in both if o["kind"] == "Role") == ["a", "ops"]
    assert "--namespace=a" in manager_container(both)["args"]


def test_helm_lint_passes(helm: pathlib.Path) -> None:
    done = run(str(helm), "lint", "--strict", str(CHART))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout
    namespaced = run(str(helm), "lint", "--strict", str(CHART), "--set", "watchNamespace={a}")
    assert namespaced.returncode == 0, namespaced.stdout + namespaced.stderr


# --- KubeRay's values file --------------------------------------------------------------------

KUBERAY_VALUES = pathlib.Path(__file__).parent / "testdata/kuberay-v1.7.0/values.yaml"
"""KubeRay v1.7.0's ``helm-chart/kuberay-operator/values.yaml``, verbatim."""


def manager_help() -> tuple[set[str], set[str]]:
    """The flags ``rayservice-manager --help`` lists, and the booleans among them (those
    listed with a ``--no-`` twin)."""
    done = subprocess.run(
        [sys.executable, "-m", "controllers.main", "--help"],
        cwd=ROOT, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", done.stdout))
    return flags, {f for f in flags if f"--no-{f[2:]}" in flags}


def assert_listed_flags(args: list[str]) -> None:
    """Every argument is a flag ``--help`` lists (with its value, if it takes one)."""
    flags, booleans = manager_help()
    expecting_value = False
    for arg in args:
        if expecting_value:
            expecting_value = False
            continue
        name, eq, _ = arg.partition("=")
        assert name in flags, f"{arg!r} is not a flag of rayservice-manager"
        expecting_value = not eq and name not in booleans and not name.startswith("--no-")


def refused(helm: pathlib.Path, *flags: str) -> str:
    done = run(str(helm), "template", "x", str(CHART), *flags)
    assert done.returncode != 0, f"{flags} rendered"
    return done.stderr


def test_kuberays_values_file_renders_a_manager_that_starts(helm: pathlib.Path) -> None:
    kuberay = yaml.safe_load(KUBERAY_VALUES.read_text())
    objs = template(helm, "-f", str(KUBERAY_VALUES), release="kuberay-operator", namespace="ray")
    deployment = only(objs, "Deployment")
    container = manager_container(objs)
    assert deployment["metadata"]["name"] == "kuberay-operator"
    assert container["image"] == "quay.io/kuberay/operator:v1.7.0"
    # Its command: the image has /manager (a copy of the console script, Dockerfile).
    assert container["command"] == [kuberay["operatorCommand"]] == ["/manager"]
    assert "--from=builder /opt/venv/bin/rayservice-manager /manager" in (
        (ROOT / "Dockerfile").read_text()
    )
    assert_listed_flags(container["args"])
    settings = parse(container["args"])
    assert (settings.leader_elect, settings.enable_metrics) == (True, True)
    assert (settings.qps, settings.burst, settings.reconcile_concurrency) == (100, 200, 1)
    gates = settings.gates()
    for gate in kuberay["featureGates"]:
        assert gates.enabled(gate["name"]) is gate["enabled"], gate
    assert settings.metrics_bind_address == ":8080"
    assert settings.health_probe_bind_address == ":8081"
    # Its probe timings and container security context; our pod security context stays.
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe] == {"httpGet": container[probe]["httpGet"], **kuberay[probe]}
    assert container["securityContext"] == {**CONTAINER_SECURITY, **kuberay["securityContext"]}
    assert deployment["spec"]["template"]["spec"]["securityContext"] == POD_SECURITY
    assert container["resources"]["limits"] == kuberay["resources"]["limits"]
    # `env:` with only comments is null: the chart's own variables only.
    assert [e["name"] for e in container["env"]] == [
        "POD_NAMESPACE", "POD_NAME", "PYTHONDONTWRITEBYTECODE"
    ]  # fmt: skip
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == kuberay["componentOverride"]
    assert deployment["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "kuberay-operator",
        "app.kubernetes.io/instance": "kuberay-operator",
    }
    assert only(objs, "ServiceAccount")["metadata"]["name"] == kuberay["serviceAccount"]["name"]
    service = only(objs, "Service")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"][0]["port"] == kuberay["service"]["port"]
    assert not [o for o in objs if o["kind"] in ("ConfigMap", "ServiceMonitor")]
    lint = run(str(helm), "lint", "--strict", str(CHART), "-f", str(KUBERAY_VALUES))
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_every_key_of_kuberays_values_file_is_declared_by_our_schema() -> None:
    """KubeRay's keys, nested ones too, and those its file only mentions in comments."""
    schema = json.loads((CHART / "values.schema.json").read_text())

    def resolve(node: Obj) -> Obj:
        ref = node.get("$ref", "")
        return resolve(schema["definitions"][ref.rpartition("/")[2]]) if ref else node

    def missing(values: Obj, node: Obj, path: str) -> list[str]:
        node = resolve(node)
        if node.get("additionalProperties") is not False:
            return []  # an open object (a Kubernetes type or a map of strings)
        out = []
        for key, value in values.items():
            if key not in node["properties"]:
                out.append(f"{path}{key}")
            elif isinstance(value, dict):
                out += missing(value, node["properties"][key], f"{path}{key}.")
            elif isinstance(value, list) and value and isinstance(value[0], dict):
                item = resolve(node["properties"][key]).get("items", {})
                out += [m for v in value for m in missing(v, item, f"{path}{key}[].")]
        return out

    values = yaml.safe_load(KUBERAY_VALUES.read_text())
    values |= {"watchNamespace": ["a"], "useKubernetesProxy": True}  # commented out there
    assert missing(values, schema, "") == []
    assert missing({"metrics": {"nope": 1}}, schema, "") == ["metrics.nope"], "the check checks"


def test_unknown_keys_fail_naming_them(helm: pathlib.Path) -> None:
    assert "additional properties 'watchNamespaces' not allowed" in refused(
        helm, "--set", "watchNamespaces={a}"
    )
    nested = refused(helm, "--set", "metrics.serviceMonitor.intervall=10s")
    assert "/metrics/serviceMonitor" in nested
    assert "additional properties 'intervall' not allowed" in nested
    gate = refused(
        helm, "--set", "featureGates[0].name=RayCronJob",
        "--set", "featureGates[0].enabled=true", "--set", "featureGates[0].on=true",
    )  # fmt: skip
    assert "additional properties 'on' not allowed" in gate
    assert "additional properties 'fileNmae' not allowed" in refused(
        helm, "--set", "logging.fileNmae=x.log"
    )


def test_batch_scheduler_fails_at_template_time(helm: pathlib.Path) -> None:
    for flags in (
        ["--set", "batchScheduler.name=volcano"],
        ["--set", "batchScheduler.enabled=true"],
    ):
        message = refused(helm, *flags)
        assert "no batch scheduler is integrated in rayservice-operator" in message, message
    assert "volcano" in refused(helm, "--set", "batchScheduler.name=volcano")


def test_feature_gates_become_the_flag(helm: pathlib.Path) -> None:
    assert not [a for a in manager_container(template(helm))["args"] if "gates" in a]
    args = manager_container(template(
        helm, "--set", "featureGates[0].name=RayCronJob", "--set", "featureGates[0].enabled=true",
        "--set", "featureGates[1].name=RayClusterStatusConditions",
        "--set", "featureGates[1].enabled=false",
    ))["args"]  # fmt: skip
    assert "--feature-gates=RayCronJob=true,RayClusterStatusConditions=false" in args
    gates = parse(args).gates()
    assert (gates.enabled("RayCronJob"), gates.enabled("RayClusterStatusConditions")) == (
        True, False
    )  # fmt: skip


def test_gateway_classes_become_the_flag_or_the_configuration_field(helm: pathlib.Path) -> None:
    """``gatewayClasses`` (ours): the GatewayClasses the manager may create Gateways of. Empty
    (the default): no flag, no field, no class allowed; a list: ``--gateway-classes``, or
    with ``configuration.enabled`` the Configuration's ``gatewayClasses``."""
    default = manager_container(template(helm))["args"]
    assert not [a for a in default if "gateway-classes" in a]
    assert parse(default).gateway_classes == []
    classes = ("--set", "gatewayClasses={traefik,istio}")
    args = manager_container(template(helm, *classes))["args"]
    assert "--gateway-classes=traefik,istio" in args
    assert parse(args).classes() == gateway_objects.GatewayClasses.parse(["traefik", "istio"])
    objs = template(helm, *classes, "--set", "configuration.enabled=true")
    config = configuration.parse(only(objs, "ConfigMap")["data"]["config.yaml"])
    assert config.gateway_classes == ["traefik", "istio"]
    assert not [a for a in manager_container(objs)["args"] if "gateway-classes" in a]
    off = template(helm, "--set", "configuration.enabled=true")
    config = configuration.parse(only(off, "ConfigMap")["data"]["config.yaml"])
    assert "gateway_classes" not in config.model_fields_set
    refused = run(str(helm), "template", "x", str(CHART), "--set", "gatewayClasses=traefik")
    assert refused.returncode != 0
    assert "gatewayClasses" in refused.stderr


RICH = (
    "--set", "watchNamespace={team-a,team-b}", "--set", "useKubernetesProxy=true",
    "--set", "kubeClient.qps=50.5", "--set", "kubeClient.burst=70",
    "--set", "reconcileConcurrency=3", "--set", "leaderElectionEnabled=false",
    "--set", "logging.baseDir=/tmp/kuberay-logs", "--set", "logging.fileName=operator.log",
    "--set", "logging.fileEncoder=console", "--set", "logging.stdoutEncoder=console",
    "--set", "featureGates[0].name=RayCronJob", "--set", "featureGates[0].enabled=true",
    "--set", "metrics.port=9090", "--set", "probePort=9091",
    "--set", "gatewayClasses={traefik}",
)  # fmt: skip


def test_configuration_enabled_is_a_configmap_the_manager_reads_as_the_flags(
    helm: pathlib.Path,
) -> None:
    """The same values, as flags or as KubeRay's Configuration file, give the manager the
    same settings (``--config`` replaces flags exactly as ``rayservice-manager`` does)."""
    flagged = parse(manager_container(template(helm, *RICH))["args"])
    objs = template(
        helm, *RICH, "--set", "configuration.enabled=true",
        "--set", "configuration.defaultPodLabels.team=ray",
        "--set", "configuration.defaultContainerEnvs[0].name=RAY_X",
        "--set-string", "configuration.defaultContainerEnvs[0].value=1",
        "--set", "configuration.headSidecarContainers[0].name=fluentbit",
        "--set", "configuration.headSidecarContainers[0].image=fluent/fluent-bit:1.9",
    )  # fmt: skip
    configmap = only(objs, "ConfigMap")
    assert configmap["metadata"]["name"] == "rayservice-operator-config"
    config = configuration.parse(configmap["data"]["config.yaml"])
    assert config.default_pod_labels == {"team": "ray"}
    assert config.default_container_envs == [{"name": "RAY_X", "value": "1"}]
    assert config.head_sidecar_containers == [{"name": "fluentbit",
                                               "image": "fluent/fluent-bit:1.9"}]  # fmt: skip
    container = manager_container(objs)
    assert container["args"][0] == "--config=/etc/kuberay/config.yaml"
    assert_listed_flags(container["args"])
    pod = only(objs, "Deployment")["spec"]["template"]
    [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "operator-config"]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert {"name": "operator-config", "mountPath": "/etc/kuberay", "readOnly": True} in (
        container["volumeMounts"]
    )
    assert pod["metadata"]["annotations"]["checksum/config"], "a new config rolls the pod"
    configured = parse(container["args"])
    overridden = main_._apply(config, configured, container["args"])
    assert overridden == [], "the chart passes no flag the file replaces"
    fields = (
        "leader_elect", "leader_election_id", "namespace", "metrics_bind_address",
        "health_probe_bind_address", "enable_metrics", "reconcile_concurrency", "qps", "burst",
        "dashboard_address_mode", "log_format", "log_level", "log_file_path", "log_file_encoder",
        "feature_gates", "gateway_classes",
    )  # fmt: skip
    assert {f: getattr(configured, f) for f in fields} == {f: getattr(flagged, f) for f in fields}
    assert (flagged.qps, flagged.burst, flagged.namespace) == (50.5, 70, ["team-a", "team-b"])
    assert flagged.dashboard_address_mode == "kubernetes-proxy"
    # Metrics off: the file says so too.
    off = template(helm, "--set", "configuration.enabled=true", "--set", "metrics.enabled=false")
    config = configuration.parse(only(off, "ConfigMap")["data"]["config.yaml"])
    assert (config.metrics_addr, config.enable_metrics) == ("0", False)


def test_logging_to_a_file_mounts_an_empty_dir_there(helm: pathlib.Path) -> None:
    objs = template(
        helm, "--set", "logging.baseDir=/var/log/kuberay", "--set", "logging.fileName=op.log",
        "--set", "logging.fileEncoder=console", "--set", "logging.sizeLimit=1Gi",
    )  # fmt: skip
    container = manager_container(objs)
    settings = parse(container["args"])
    assert settings.log_file_path == pathlib.Path("/var/log/kuberay/op.log")
    assert settings.log_file_encoder == "console"
    assert {"name": "kuberay-logs", "mountPath": "/var/log/kuberay"} in container["volumeMounts"]
    volumes = only(objs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "kuberay-logs", "emptyDir": {"sizeLimit": "1Gi"}} in volumes
    # Only a directory and a name make a file, as in KubeRay's chart.
    half = manager_container(template(helm, "--set", "logging.baseDir=/var/log/kuberay"))
    assert not [a for a in half["args"] if a.startswith("--log-file")]
    assert [m["name"] for m in half["volumeMounts"]] == ["tmp"]


def test_kube_client_env_labels_annotations_and_overrides(helm: pathlib.Path) -> None:
    objs = template(
        helm, "--set", "kubeClient.qps=1000000", "--set", "kubeClient.burst=1000000",
        "--set", "env[0].name=CLUSTER_DOMAIN", "--set", "env[0].value=example.org",
        "--set", "labels.team=ray", "--set", "podLabels.tier=ops",
        "--set", "annotations.owner=ray-team", "--set", "podAnnotations.note=x",
        "--set", "livenessProbe.failureThreshold=7", "--set", "readinessProbe.periodSeconds=3",
        "--set", "securityContext.runAsNonRoot=true", "--set", "podSecurityContext.fsGroup=2000",
        "--set", "priorityClassName=system-cluster-critical", "--set", "operatorCommand=/manager",
        "--set", "componentOverride=operator",
    )  # fmt: skip
    container = manager_container(objs)
    settings = parse(container["args"])
    assert (settings.qps, settings.burst) == (1_000_000, 1_000_000)
    assert container["env"][-1] == {"name": "CLUSTER_DOMAIN", "value": "example.org"}
    assert container["command"] == ["/manager"]
    deployment = only(objs, "Deployment")
    pod = deployment["spec"]["template"]
    assert deployment["metadata"]["labels"]["team"] == "ray"
    assert "tier" not in deployment["metadata"]["labels"]
    assert (pod["metadata"]["labels"]["team"], pod["metadata"]["labels"]["tier"]) == ("ray", "ops")
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "operator"
    assert pod["metadata"]["annotations"] == {"owner": "ray-team", "note": "x"}
    assert set(deployment["spec"]["selector"]["matchLabels"].items()) <= set(
        pod["metadata"]["labels"].items()
    )
    assert container["livenessProbe"]["failureThreshold"] == 7
    assert container["readinessProbe"]["periodSeconds"] == 3
    assert container["securityContext"] == {**CONTAINER_SECURITY, "runAsNonRoot": True}
    assert pod["spec"]["securityContext"] == {**POD_SECURITY, "fsGroup": 2000}
    assert pod["spec"]["priorityClassName"] == "system-cluster-critical"
    # A label that would break the selector is not taken.
    clash = only(template(helm, "--set", "labels.app\\.kubernetes\\.io/name=other"), "Deployment")
    assert clash["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == (
        "rayservice-operator"
    )


def test_rbac_enable_and_cr_namespaced_rbac_enable(helm: pathlib.Path) -> None:
    rbac = {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    assert not [o for o in template(helm, "--set", "rbacEnable=false") if o["kind"] in rbac]
    objs = template(helm, "--set", "watchNamespace={a}", "--set", "crNamespacedRbacEnable=false")
    left = sorted((o["kind"], o["metadata"]["name"]) for o in objs if o["kind"] in rbac)
    assert left == [("ClusterRole", "rayservice-operator-metrics-auth"),
                    ("ClusterRole", "rayservice-operator-metrics-reader"),
                    ("ClusterRoleBinding", "rayservice-operator-metrics-auth"),
                    ("Role", "rayservice-operator-leader-election"),
                    ("RoleBinding", "rayservice-operator-leader-election")]  # fmt: skip


def test_service_monitor_scrapes_the_metrics_service(helm: pathlib.Path) -> None:
    assert not [o for o in template(helm) if o["kind"] == "ServiceMonitor"]
    objs = template(
        helm, "--set", "metrics.secure.enabled=false",  # plain HTTP, KubeRay's way
        "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.port=9090",
        "--set", "metrics.serviceMonitor.additionalLabels.release=prometheus",
        "--set", "metrics.serviceMonitor.namespace=monitoring", "--set", "service.port=80",
        namespace="ops",
    )  # fmt: skip
    monitor, service = only(objs, "ServiceMonitor"), only(objs, "Service")
    pod = only(objs, "Deployment")["spec"]["template"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == "monitoring"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint == {"path": "/metrics", "port": "http", "interval": "30s", "honorLabels": True}
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["ops"]}
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert set(selector.items()) <= set(service["metadata"]["labels"].items())
    [port] = service["spec"]["ports"]
    assert (port["name"], port["port"], port["targetPort"]) == ("http", 80, "metrics")
    assert set(service["spec"]["selector"].items()) <= set(pod["metadata"]["labels"].items())
    container = manager_container(objs)
    assert {"name": "metrics", "containerPort": 9090, "protocol": "TCP"} in container["ports"]
    assert parse(container["args"]).metrics_bind_address == ":9090"
    # Without metrics there is nothing to scrape: no Service, and a monitor is refused.
    assert not [
        o for o in template(helm, "--set", "metrics.enabled=false") if o["kind"] == "Service"
    ]
    assert "metrics.serviceMonitor.enabled needs metrics.enabled" in refused(
        helm, "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.enabled=false"
    )


def test_metrics_are_secure_by_default_with_a_self_signed_certificate(
    helm: pathlib.Path,
) -> None:
    """The chart's default, unlike the binary's (KubeRay's plain HTTP on every interface):
    ``/metrics`` over HTTPS to callers allowed ``get`` on it, a certificate made at start,
    the ServiceMonitor scraping with Prometheus' token."""
    objs = template(helm, "--set", "metrics.serviceMonitor.enabled=true", namespace="ops",
                    release="rso")  # fmt: skip
    container = manager_container(objs)
    settings = parse(container["args"])
    assert (settings.metrics_secure, settings.metrics_cert_path) == (True, None), "self-signed"
    assert settings.metrics_bind_address == ":8080"
    assert [m["name"] for m in container["volumeMounts"]] == ["tmp"]
    roles = sorted(o["metadata"]["name"] for o in objs if o["kind"] == "ClusterRole")
    assert roles == ["rso-rayservice-operator", "rso-rayservice-operator-metrics-auth",
                     "rso-rayservice-operator-metrics-reader"]  # fmt: skip
    [port] = only(objs, "Service")["spec"]["ports"]
    [endpoint] = only(objs, "ServiceMonitor")["spec"]["endpoints"]
    assert (port["name"], endpoint["port"], endpoint["scheme"]) == ("https", "https", "https")
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    # No CA to check a self-signed certificate against: TLS without verification, the token
    # still required (kubebuilder's scaffold does the same); certSecret gives a checked one.
    assert endpoint["tlsConfig"] == {"insecureSkipVerify": True}
    # No scraper is bound to the reader role unless named.
    assert not [o for o in objs if o["kind"] == "ClusterRoleBinding"
                and o["roleRef"]["name"].endswith("-metrics-reader")]  # fmt: skip


def test_metrics_plain_is_a_choice_that_drops_the_flag_and_the_review_roles(
    helm: pathlib.Path,
) -> None:
    objs = template(helm, "--set", "metrics.secure.enabled=false")
    settings = parse(manager_container(objs)["args"])
    assert (settings.metrics_secure, settings.metrics_bind_address) == (False, ":8080")
    assert [o["metadata"]["name"] for o in objs if o["kind"] == "ClusterRole"] == [
        "rayservice-operator"
    ]
    assert only(objs, "Service")["spec"]["ports"][0]["name"] == "http"


def test_metrics_secure_with_a_certificate_secret_and_named_readers(helm: pathlib.Path) -> None:
    objs = template(
        helm, "--set", "metrics.secure.certSecret=mc",
        "--set", "metrics.serviceMonitor.enabled=true", "--set", "watchNamespace={a}",
        "--set", "metrics.secure.readerServiceAccounts[0].name=prometheus",
        "--set", "metrics.secure.readerServiceAccounts[0].namespace=monitoring",
        namespace="ops", release="rso",
    )  # fmt: skip
    container = manager_container(objs)
    settings = parse(container["args"])
    assert settings.metrics_secure
    cert_dir = str(settings.metrics_cert_path)
    [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == cert_dir]
    pod = only(objs, "Deployment")["spec"]["template"]["spec"]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume == {"name": mount["name"], "secret": {"secretName": "mc"}}
    # Cluster-scoped roles even with watchNamespace: the reviews are cluster-scoped.
    roles = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ClusterRole"}
    overlay = "config/overlays/metrics-secure"
    auth, reader = (roles[f"rso-rayservice-operator-metrics-{x}"] for x in ("auth", "reader"))
    assert auth["rules"] == config(f"{overlay}/metrics_auth_role.yaml")["rules"]
    assert reader["rules"] == config(f"{overlay}/metrics_reader_role.yaml")["rules"]
    bindings = {o["roleRef"]["name"]: o for o in objs if o["kind"] == "ClusterRoleBinding"}
    assert bindings["rso-rayservice-operator-metrics-auth"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "rso-rayservice-operator", "namespace": "ops"}
    ]
    assert bindings["rso-rayservice-operator-metrics-reader"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}
    ]
    [endpoint] = only(objs, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["tlsConfig"] == {"serverName": "rso-rayservice-operator.ops.svc",
                                     "ca": {"secret": {"name": "mc", "key": "ca.crt"}}}  # fmt: skip
    assert "additional properties 'nme' not allowed" in refused(
        helm, "--set", "metrics.secure.readerServiceAccounts[0].nme=x"
    )
    # metrics.enabled=false: no metrics at all, so nothing to secure and no review roles.
    off = template(helm, "--set", "metrics.enabled=false")
    assert "--metrics-secure" not in manager_container(off)["args"]
    assert len([o for o in off if o["kind"] == "ClusterRole"]) == 1


# --- the NetworkPolicy ------------------------------------------------------------------------

HARDENED = CHART / "values-hardened.yaml"


def test_the_network_policy_is_off_by_default_and_on_in_the_hardened_values(
    helm: pathlib.Path,
) -> None:
    assert not [o for o in template(helm) if o["kind"] == "NetworkPolicy"]
    objs = template(helm, "-f", str(HARDENED), namespace="ops")
    policy = only(objs, "NetworkPolicy")
    pod = only(objs, "Deployment")["spec"]["template"]
    assert policy["metadata"]["namespace"] == "ops"
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert set(selector.items()) <= set(pod["metadata"]["labels"].items())
    assert policy["spec"]["policyTypes"] == ["Ingress"], "egress (API server, Ray) stays open"
    # Only the metrics port, only from the namespace the values name.
    assert policy["spec"]["ingress"] == [{
        "from": [{"namespaceSelector": {"matchExpressions": [{
            "key": "kubernetes.io/metadata.name", "operator": "In", "values": ["monitoring"]}]}}],
        "ports": [{"port": "metrics", "protocol": "TCP"}],
    }]  # fmt: skip
    assert parse(manager_container(objs)["args"]).metrics_secure, "and the metrics secured"
    lint = run(str(helm), "lint", "--strict", str(CHART), "-f", str(HARDENED))
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_the_network_policy_admits_the_webhook_port_from_the_api_server_only(
    helm: pathlib.Path, control_plane: controlplane.ControlPlane, namespace: str
) -> None:
    on = ("-f", str(HARDENED), "--set", "webhooks.enabled=true")
    message = refused(helm, *on)
    assert "networkPolicy.apiServerCIDRs" in message, message
    cidrs = ("--set", "networkPolicy.apiServerCIDRs={10.0.0.0/24,10.9.0.1/32}")
    both = only(template(helm, *on, *cidrs, namespace=namespace), "NetworkPolicy")
    assert [r["ports"][0]["port"] for r in both["spec"]["ingress"]] == ["metrics", "webhook-server"]
    # The API server takes it as rendered (validation of the peers, the named ports).
    policies = f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies"
    control_plane.request("POST", f"{policies}?dryRun=All", both)
    objs = template(helm, *on, *cidrs, "--set", "networkPolicy.metricsNamespaces=null")
    [rule] = only(objs, "NetworkPolicy")["spec"]["ingress"]
    assert rule == {"from": [{"ipBlock": {"cidr": "10.0.0.0/24"}},
                             {"ipBlock": {"cidr": "10.9.0.1/32"}}],
                    "ports": [{"port": "webhook-server", "protocol": "TCP"}]}  # fmt: skip
    # Nothing named: nothing reaches the pod (a policy with no ingress rule).
    none = template(helm, "--set", "networkPolicy.enabled=true")
    assert only(none, "NetworkPolicy")["spec"].get("ingress") in (None, [])


def scrape(port: int, token: str | None) -> int:
    """The status of a GET of ``https://127.0.0.1:<port>/metrics`` (the chart's default
    certificate is self-signed: not checked here), with ``token`` as the bearer token."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    request = urllib.request.Request(f"https://127.0.0.1:{port}/metrics", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def account_token(cp: controlplane.ControlPlane, namespace: str, name: str) -> str:
    answer = cp.request(
        "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
         "spec": {"expirationSeconds": 600}},
    )  # fmt: skip
    return str(answer["status"]["token"])


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
        "Service": f"/api/v1/namespaces/{ns}/services/{fullname}",
        # Secure metrics, the default: the reviews' role, and the reader's, bound to "reader".
        "metrics-auth ClusterRole": f"/apis/rbac.authorization.k8s.io/v1/clusterroles/"
        f"{fullname}-metrics-auth",
        "metrics-reader ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/"
        f"clusterrolebindings/{fullname}-metrics-reader",
    }
    for account in ("reader", "stranger"):
        control_plane.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": account}})  # fmt: skip
    records = f"/api/v1/namespaces/{ns}/secrets?labelSelector=owner%3Dhelm,name%3D{release}"
    manager: subprocess.Popen[bytes] | None = None
    try:
        install = [*base, "install", release, str(CHART),
                   "--set", "metrics.secure.readerServiceAccounts[0].name=reader",
                   "--set", f"metrics.secure.readerServiceAccounts[0].namespace={ns}"]  # fmt: skip
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
        port, metrics_port = controlplane.free_ports(2)
        kubeconfig = control_plane.service_account_kubeconfig(ns, fullname)
        log = tmp_path / "manager.log"
        with open(log, "wb") as out:
            manager = subprocess.Popen(
                [str(pathlib.Path(sys.executable).parent / "rayservice-manager"),
                 "--kubeconfig", str(kubeconfig), *args,
                 "--metrics-bind-address", f"127.0.0.1:{metrics_port}",
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
        # The chart's default /metrics: a token the API server vouches for, of an account
        # allowed `get` on /metrics (the chart bound "reader"), or nothing is served.
        assert scrape(metrics_port, None) == 401
        assert scrape(metrics_port, "not-a-token") == 401
        assert scrape(metrics_port, account_token(control_plane, ns, "stranger")) == 403
        assert scrape(metrics_port, account_token(control_plane, ns, "reader")) == 200
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
