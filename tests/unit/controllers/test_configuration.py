"""controllers.configuration: KubeRay v1.7.0's Configuration file."""

from __future__ import annotations

import pathlib

import pytest

from controllers import configuration

HEAD = "apiVersion: config.ray.io/v1alpha1\nkind: Configuration\n"


def test_an_empty_configuration_has_kuberays_defaults() -> None:
    c = configuration.parse(HEAD)
    assert (c.metrics_addr, c.probe_addr, c.enable_leader_election) == (":8080", ":8082", True)
    assert (c.reconcile_concurrency, c.qps, c.burst) == (1, 100.0, 200)
    assert (c.enable_metrics, c.use_kubernetes_proxy, c.namespaces()) == (False, False, [])


def test_every_field_of_kuberays_helm_configmap_is_read() -> None:
    text = HEAD + (
        "enableLeaderElection: false\nenableMetrics: true\nreconcileConcurrency: 4\n"
        'useKubernetesProxy: true\nqps: 10\nburst: 20\nwatchNamespace: "a, b"\n'
        "logFile: /tmp/op.log\nlogStdoutEncoder: console\nlogFileEncoder: json\n"
        'enableBatchScheduler: false\nbatchScheduler: ""\n'
        "headSidecarContainers: [{name: s}]\nworkerSidecarContainers: [{name: w}]\n"
        "defaultContainerEnvs: [{name: E, value: v}]\n"
        "defaultPodAnnotations: {a: b}\ndefaultPodLabels: {c: d}\n"
        "deleteRayJobAfterJobFinishes: true\nleaderElectionNamespace: ops\n"
    )
    c = configuration.parse(text)
    assert c.namespaces() == ["a", "b"]
    assert (c.enable_leader_election, c.enable_metrics, c.reconcile_concurrency) == (False, True, 4)
    assert c.head_sidecar_containers == [{"name": "s"}]
    assert c.default_pod_labels == {"c": "d"}
    assert c.leader_election_namespace == "ops"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (HEAD + "enableMetric: true\n", "enableMetric: not a field of KubeRay's Configuration"),
        (HEAD + "qps: fast\n", "qps: "),
        (HEAD + "reconcileConcurrency: 0\n", "reconcileConcurrency: "),
        (HEAD + "headSidecarContainers: [5]\n", r"headSidecarContainers\[0\]: "),
        ("kind: Configuration\n", "apiVersion must be 'config.ray.io/v1alpha1', not None"),
        ("apiVersion: config.ray.io/v1alpha1\nkind: Config\n", "kind must be 'Configuration'"),
        ("- a list\n", "expected a Configuration object, got list"),
        ("a: [b\n", "not YAML"),
    ],
)  # fmt: skip
def test_bad_files_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        configuration.parse(text)


def test_an_unreadable_file_says_so(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="cannot read"):
        configuration.load(tmp_path / "missing.yaml")
    (tmp_path / "ok.yaml").write_text(HEAD + "burst: 7\n")
    assert configuration.load(tmp_path / "ok.yaml").burst == 7


def test_gateway_classes_are_ours_a_list_of_gatewayclass_names() -> None:
    """Not a field of KubeRay's file: absent (KubeRay's files), it is not set and the
    flag stands; given, each name is checked as the flag checks it."""
    assert "gateway_classes" not in configuration.parse(HEAD).model_fields_set
    c = configuration.parse(HEAD + "gatewayClasses: [traefik, istio]\n")
    assert c.gateway_classes == ["traefik", "istio"]
    assert "gateway_classes" in c.model_fields_set
    with pytest.raises(
        ValueError, match=r"^gatewayClasses: 'Public_LB' is not a GatewayClass name"
    ):
        configuration.parse(HEAD + "gatewayClasses: [traefik, Public_LB]\n")
    with pytest.raises(ValueError, match="gatewayClasses"):
        configuration.parse(HEAD + "gatewayClasses: traefik\n")
