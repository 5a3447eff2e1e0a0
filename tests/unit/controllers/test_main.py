"""``rayservice-manager`` (controllers/main.py) in-process: exit 2 with one line on bad
configuration, flags and ``RAYSERVICE_*`` variables reaching the Manager, the kubeconfig
search order. ``manager.serve`` is replaced, so no manager ever runs here."""

from __future__ import annotations

import os
import pathlib
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

import controllers.setup
from controllers import main
from controllers.raycluster import reconciler as raycluster_reconciler
from controllers.rayjob import reconciler as rayjob_reconciler
from controllers.rayservice import gateway
from controllers.rayservice import reconciler as rayservice_reconciler
from controllers.rayservice import setup as rayservice_setup
from runtime import log, manager
from runtime.client import client as client_
from runtime.client import kubeconfig as kubeconfig_

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


class Ran:
    """What ``main`` handed over: the Manager given to ``serve``, ``setup``'s and
    ``log.configure``'s arguments."""

    def __init__(self) -> None:
        self.managers: list[manager.Manager] = []
        self.setup: list[dict[str, Any]] = []
        self.logging: list[tuple[str, str]] = []
        self.log_files: list[dict[str, Any]] = []
        self.exit_code = 0
        self.gateway_api = True
        """What the Gateway API discovery answers."""
        self.gateway_asked = 0

    @property
    def options(self) -> manager.Options:
        assert len(self.managers) == 1, f"serve() called {len(self.managers)} times"
        return self.managers[0].options


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> Iterator[Ran]:
    """``serve``, ``controllers.setup``, ``log.configure`` and the Gateway API discovery
    replaced by recorders; no
    RAYSERVICE_*, kubeconfig or in-cluster variables from the outside; HOME is empty."""

    for name in list(os.environ):
        if name.startswith("RAYSERVICE_") or name in (
            "KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "POD_NAMESPACE",
        ):  # fmt: skip
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    # log.configure is replaced: structlog prints to this test's stderr, as configured after.
    saved = structlog.get_config()
    structlog.configure(
        logger_factory=lambda *args: structlog.PrintLogger(sys.stderr),
        cache_logger_on_first_use=False,
    )
    record = Ran()

    async def serve(mgr: manager.Manager) -> int:
        record.managers.append(mgr)
        await mgr.client.close()
        return record.exit_code

    def setup(mgr: manager.Manager, **kwargs: Any) -> list[Any]:
        record.setup.append(kwargs)
        return []

    async def gateway_api_served(client: Any) -> bool:
        record.gateway_asked += 1
        return record.gateway_api

    monkeypatch.setattr(manager, "serve", serve)
    monkeypatch.setattr(controllers.setup, "setup", setup)
    monkeypatch.setattr(rayservice_setup, "gateway_api_served", gateway_api_served)

    def configure(fmt: str, level: str, **options: Any) -> None:
        record.logging.append((fmt, level))
        record.log_files.append(options)

    monkeypatch.setattr(log, "configure", configure)
    yield record
    structlog.configure(**saved)


@pytest.fixture
def kubeconfig(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    return path


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{err}"
    assert lines[0].startswith("rayservice-manager: error: "), lines[0]
    return lines[0]


# -- bad configuration: exit 2, one line, nothing started ------------------------------------


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--reconcile-concurrency=0"], "--reconcile-concurrency"),
        (["--reconcile-concurrency=many"], "--reconcile-concurrency"),
        (["--qps=-1"], "--qps"),
        (["--burst=0"], "--burst"),
        (["--log-format=xml"], "--log-format"),
        (["--log-level=loud"], "--log-level"),
        (["--no-such-flag"], "--no-such-flag"),
        (["--leader-elect=maybe"], "--leader-elect"),
        (["--reconcile-concurrency"], "--reconcile-concurrency"),  # the value is missing
        (["stray-positional"], "stray-positional"),
        (["--metrics-addr", ":1", "--metrics-bind-address", ":2"], "--metrics-addr and"),
        (["--enable-leader-election=perhaps"], "--enable-leader-election"),
        (["--log-stdout-encoder", "xml"], "--log-stdout-encoder"),
        (["--metrics-cert-path", "/certs"], "--metrics-cert-path is only used with"),
        (
            ["--gateway-classes=Public_LB"],
            "--gateway-classes: 'Public_LB' is not a GatewayClass name",
        ),
        (
            ["--gateway-classes", "*,traefik"],
            "--gateway-classes: '*' allows every GatewayClass: give it alone",
        ),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_bad_flags_exit_2_with_one_line_naming_them(
    ran: Ran, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    assert main.main(argv) == 2
    assert says in one_error_line(capsys)
    assert ran.managers == [], "nothing is started"
    assert ran.logging == []


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("RAYSERVICE_RECONCILE_CONCURRENCY", "0", "RAYSERVICE_RECONCILE_CONCURRENCY:"),
        ("RAYSERVICE_LEADER_ELECT", "maybe", "RAYSERVICE_LEADER_ELECT"),
        ("RAYSERVICE_LOG_FORMAT", "xml", "RAYSERVICE_LOG_FORMAT:"),
        ("RAYSERVICE_QPS", "-1", "RAYSERVICE_QPS:"),
        ("RAYSERVICE_GATEWAY_CLASSES", "traefik,Istio", "RAYSERVICE_GATEWAY_CLASSES: 'Istio'"),
    ],
)
def test_bad_environment_values_exit_2_with_one_line(
    ran: Ran, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    variable: str, value: str, says: str,
) -> None:  # fmt: skip
    monkeypatch.setenv(variable, value)
    assert main.main([]) == 2
    assert says in one_error_line(capsys)
    assert ran.managers == []


def test_help_lists_every_flag_and_exits_0(ran: Ran, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main.main(["--help"])
    assert exited.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for field in main.Settings.model_fields:
        assert "--" + field.replace("_", "-") in out, field
        assert f"RAYSERVICE_{field.upper()}" in out, "each flag shows its variable"
    for kuberay in ("--metrics-addr", "--enable-leader-election", "--watch-namespace",
                    "--log-stdout-encoder"):  # fmt: skip
        assert kuberay in out
    assert ran.managers == []


def test_a_flag_beats_its_variable_in_the_error_too(
    ran: Ran, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAYSERVICE_RECONCILE_CONCURRENCY", "2")
    assert main.main(["--reconcile-concurrency", "0"]) == 2
    line = one_error_line(capsys)
    assert "--reconcile-concurrency:" in line
    assert "RAYSERVICE_" not in line


# -- the kubeconfig: flag, then $KUBECONFIG, then in-cluster, then ~/.kube/config ------------


def test_a_missing_kubeconfig_exits_2_naming_it(
    ran: Ran, capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    assert main.main(["--kubeconfig", str(tmp_path / "nope")]) == 2
    line = one_error_line(capsys)
    assert "cannot load the kubeconfig" in line
    assert str(tmp_path / "nope") in line
    assert ran.managers == []
    assert ran.logging == [("auto", "info")], "logging is set up before the client"


def test_without_any_kubeconfig_the_default_path_is_named(
    ran: Ran, capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    assert main.main([]) == 2
    assert str(tmp_path / "home" / ".kube" / "config") in one_error_line(capsys)


def test_kubeconfig_variable_is_used_and_the_flag_wins_over_it(
    ran: Ran, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    kubeconfig: pathlib.Path, tmp_path: pathlib.Path,
) -> None:  # fmt: skip
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "from-env"))
    assert main.main([]) == 2
    assert str(tmp_path / "from-env") in one_error_line(capsys)
    assert main.main(["--kubeconfig", str(kubeconfig)]) == 0
    assert len(ran.managers) == 1
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    assert main.main([]) == 0
    assert len(ran.managers) == 2


def test_kubeconfig_variable_wins_over_in_cluster(
    ran: Ran, monkeypatch: pytest.MonkeyPatch, kubeconfig: pathlib.Path
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "1")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    assert main.main([]) == 0
    assert ran.managers[0].client.host == "http://127.0.0.1:1"


@pytest.fixture
def service_account(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> pathlib.Path:
    """In a pod: the API server's address in the environment, the service account's files
    where the client looks for them (here: in ``tmp_path``, not yet written)."""
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "1")
    account = tmp_path / "serviceaccount"
    monkeypatch.setattr(kubeconfig_, "SERVICE_ACCOUNT_DIR", account)
    return account


def test_in_cluster_the_service_account_is_used_before_the_home_kubeconfig(
    ran: Ran, service_account: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    service_account.mkdir()
    (service_account / "token").write_text("sa-token")
    (service_account / "ca.crt").write_text("not checked before the first request")
    (tmp_path / "home" / ".kube").mkdir(parents=True)
    (tmp_path / "home" / ".kube" / "config").write_text("not: [a kubeconfig")
    assert main.main([]) == 0
    assert ran.managers[0].client.host == "https://127.0.0.1:1"


def test_in_cluster_without_a_service_account_exits_2(
    ran: Ran, capsys: pytest.CaptureFixture[str], service_account: pathlib.Path
) -> None:
    assert main.main([]) == 2  # in-cluster was tried, not ~/.kube/config
    line = one_error_line(capsys)
    assert "cannot load the kubeconfig" in line
    assert ".kube" not in line


def test_an_empty_kubeconfig_says_so(
    ran: Ran, capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    assert main.main(["--kubeconfig", str(empty)]) == 2
    assert f"kubeconfig {empty} is empty" in one_error_line(capsys)


def test_an_unparsable_kubeconfig_is_reported_on_one_line(
    ran: Ran, capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    broken = tmp_path / "broken"
    broken.write_text("clusters: [\n  - name: c\n")  # YAML's message spans several lines
    assert main.main(["--kubeconfig", str(broken)]) == 2
    assert "cannot load the kubeconfig" in one_error_line(capsys)


# -- settings reach the Manager ----------------------------------------------------------------


def test_defaults_reach_the_manager(ran: Ran, kubeconfig: pathlib.Path) -> None:
    assert main.main(["--kubeconfig", str(kubeconfig)]) == 0
    options = ran.options
    assert options == manager.Options(
        name="rayservice-operator",
        leader_election=True,
        leader_election_id="ray-operator-leader",
        metrics_bind_address=":8080",
        health_probe_bind_address=":8082",
        cache_by_resource=controllers.setup.cache_by_resource(),
        events=controllers.setup.EVENT_OPTIONS,
    ), "the Manager's defaults, but KubeRay's leader election (on), its metrics and probe "
    "ports on every interface (the framework's are loopback), and the operator's cache filters"
    assert options.cache_by_resource["pods"].label_selector == (
        "ray.io/node-type in (head,worker,redis-cleanup)"
    )
    assert options.namespaces == (), "all namespaces"
    assert ran.setup == [
        {
            "max_concurrent_reconciles": 1,
            "rayservice_options": rayservice_reconciler.Options(
                address_mode="service", serve_poll_max=10.0, gateway_api=True
            ),
            "raycluster_options": raycluster_reconciler.Options(),
            "rayjob_options": rayjob_reconciler.Options(),
            "raycronjob": False,
            "enable_metrics": False,
        }
    ]
    assert ran.logging == [("auto", "info")]
    client_options = ran.managers[0].client.options
    assert (client_options.qps, client_options.burst) == (100, 200), "KubeRay's defaults"
    # The operator's identity, as it was before the framework derived one from a name.
    assert client_.identity(client_options) == (
        "rayservice-operator",
        "rayservice-operator/runtime",
    )
    assert (options.component, options.leader_election_id) == (
        "rayservice-operator", "ray-operator-leader",
    )  # fmt: skip


def test_flags_reach_the_manager(ran: Ran, kubeconfig: pathlib.Path) -> None:
    argv = [
        "--kubeconfig", str(kubeconfig), "--namespace", "team-a", "--leader-elect",
        "--leader-election-id", "my-lease", "--leader-election-namespace", "ops",
        "--metrics-bind-address", "127.0.0.1:9090", "--health-probe-bind-address", "0",
        "--reconcile-concurrency", "4", "--qps", "20", "--burst", "40",
        "--log-format", "json", "--log-level", "debug",
        "--dashboard-address-mode", "pod-ip", "--serve-poll-max", "30",
    ]  # fmt: skip
    assert main.main(argv) == 0
    mgr = ran.managers[0]
    assert mgr.options == manager.Options(
        name="rayservice-operator",
        namespaces=("team-a",), leader_election=True, leader_election_id="my-lease",
        leader_election_namespace="ops", metrics_bind_address="127.0.0.1:9090",
        health_probe_bind_address="0", cache_by_resource=controllers.setup.cache_by_resource(),
        events=controllers.setup.EVENT_OPTIONS,
    )  # fmt: skip
    assert ran.setup == [
        {
            "max_concurrent_reconciles": 4,
            "rayservice_options": rayservice_reconciler.Options(
                address_mode="pod-ip", serve_poll_max=30.0, gateway_api=True
            ),
            "raycluster_options": raycluster_reconciler.Options(),
            "rayjob_options": rayjob_reconciler.Options(address_mode="pod-ip"),
            "raycronjob": False,
            "enable_metrics": False,
        }
    ]
    assert (mgr.client.options.qps, mgr.client.options.burst) == (20.0, 40)
    assert ran.logging == [("json", "debug")]


def test_environment_variables_reach_the_manager_and_flags_win(
    ran: Ran, monkeypatch: pytest.MonkeyPatch, kubeconfig: pathlib.Path
) -> None:
    for name, value in {
        "KUBECONFIG": str(kubeconfig),
        "RAYSERVICE_NAMESPACE": "team-b",
        "RAYSERVICE_LEADER_ELECT": "true",
        "RAYSERVICE_LEADER_ELECTION_ID": "env-lease",
        "RAYSERVICE_METRICS_BIND_ADDRESS": "127.0.0.1:9100",
        "RAYSERVICE_HEALTH_PROBE_BIND_ADDRESS": "127.0.0.1:9101",
        "RAYSERVICE_RECONCILE_CONCURRENCY": "3",
        "RAYSERVICE_QPS": "5",
        "RAYSERVICE_LOG_LEVEL": "warning",
        "RAYSERVICE_DASHBOARD_ADDRESS_MODE": "kubernetes-proxy",
    }.items():
        monkeypatch.setenv(name, value)
    assert main.main([]) == 0
    mgr = ran.managers[0]
    assert mgr.options == manager.Options(
        name="rayservice-operator",
        namespaces=("team-b",), leader_election=True, leader_election_id="env-lease",
        metrics_bind_address="127.0.0.1:9100", health_probe_bind_address="127.0.0.1:9101",
        cache_by_resource=controllers.setup.cache_by_resource(),
        events=controllers.setup.EVENT_OPTIONS,
    )  # fmt: skip
    assert ran.setup == [
        {
            "max_concurrent_reconciles": 3,
            "rayservice_options": rayservice_reconciler.Options(
                address_mode="kubernetes-proxy", serve_poll_max=10.0, gateway_api=True
            ),
            "raycluster_options": raycluster_reconciler.Options(),
            "rayjob_options": rayjob_reconciler.Options(address_mode="kubernetes-proxy"),
            "raycronjob": False,
            "enable_metrics": False,
        }
    ]
    assert mgr.client.options.qps == 5.0
    assert ran.logging == [("auto", "warning")]
    # A flag overrides its variable.
    assert main.main(["--reconcile-concurrency", "7", "--no-leader-elect"]) == 0
    assert ran.setup[-1]["max_concurrent_reconciles"] == 7
    assert ran.managers[-1].options.leader_election is False


def test_secure_metrics_flags_reach_the_manager(ran: Ran, kubeconfig: pathlib.Path) -> None:
    argv = ["--kubeconfig", str(kubeconfig), "--metrics-secure", "--metrics-cert-path", "/certs",
            "--metrics-cert-name", "cert.pem", "--metrics-cert-key", "key.pem"]  # fmt: skip
    assert main.main(argv) == 0
    options = ran.options
    assert (options.metrics_secure, options.metrics_cert_dir) == (True, "/certs")
    assert (options.metrics_cert_name, options.metrics_key_name) == ("cert.pem", "key.pem")


def test_secure_metrics_without_a_certificate_directory_is_self_signed(
    ran: Ran, kubeconfig: pathlib.Path
) -> None:
    assert main.main(["--kubeconfig", str(kubeconfig), "--metrics-secure"]) == 0
    assert (ran.options.metrics_secure, ran.options.metrics_cert_dir) == (True, None)


def test_an_empty_metrics_cert_path_is_none(ran: Ran, kubeconfig: pathlib.Path) -> None:
    assert main.main(["--kubeconfig", str(kubeconfig), "--metrics-cert-path="]) == 0
    assert ran.options.metrics_secure is False


def test_the_exit_code_is_serves(ran: Ran, kubeconfig: pathlib.Path) -> None:
    ran.exit_code = 1  # the manager failed, or lost its Lease
    assert main.main(["--kubeconfig", str(kubeconfig)]) == 1
    assert len(ran.managers) == 1


def test_kuberays_flag_names_reach_the_manager(ran: Ran, kubeconfig: pathlib.Path) -> None:
    argv = [
        "--kubeconfig", str(kubeconfig), "--metrics-addr", "127.0.0.1:9",
        "--enable-leader-election", "--leader-election-namespace", "ops",
        "--watch-namespace", "team-a,team-b",
        "--reconcile-concurrency", "3", "--qps", "50", "--burst", "60",
        "--log-stdout-encoder", "console", "--health-probe-bind-address", "127.0.0.1:10",
        "--use-kubernetes-proxy",
    ]  # fmt: skip
    assert main.main(argv) == 0
    mgr = ran.managers[0]
    assert mgr.options == manager.Options(
        name="rayservice-operator",
        namespaces=("team-a", "team-b"), leader_election=True, leader_election_namespace="ops",
        leader_election_id="ray-operator-leader",
        metrics_bind_address="127.0.0.1:9", health_probe_bind_address="127.0.0.1:10",
        cache_by_resource=controllers.setup.cache_by_resource(),
        events=controllers.setup.EVENT_OPTIONS,
    )  # fmt: skip
    assert ran.setup == [
        {
            "max_concurrent_reconciles": 3,
            "rayservice_options": rayservice_reconciler.Options(
                address_mode="kubernetes-proxy", serve_poll_max=10.0, gateway_api=True
            ),
            "raycluster_options": raycluster_reconciler.Options(),
            "rayjob_options": rayjob_reconciler.Options(address_mode="kubernetes-proxy"),
            "raycronjob": False,
            "enable_metrics": False,
        }
    ]
    assert (mgr.client.options.qps, mgr.client.options.burst) == (50.0, 60)
    assert ran.logging == [("console", "info")]


@pytest.mark.parametrize(
    ("argv", "elected"),
    [(["--enable-leader-election=false"], False), (["--enable-leader-election=true"], True),
     (["--enable-leader-election=1"], True), (["--leader-elect=False"], False),
     (["--leader-elect=t"], True), (["--no-enable-leader-election"], False)],
)  # fmt: skip
def test_go_style_boolean_flags(
    ran: Ran, kubeconfig: pathlib.Path, argv: list[str], elected: bool
) -> None:
    assert main.main(["--kubeconfig", str(kubeconfig), *argv]) == 0
    assert ran.options.leader_election is elected


@pytest.mark.parametrize(
    ("value", "namespaces"),
    [("team-a", ("team-a",)), ("team-a,team-b", ("team-a", "team-b")),
     ('["team-a", "team-b"]', ("team-a", "team-b")), (" a , b ,a", ("a", "b"))],
)  # fmt: skip
def test_namespaces_from_the_environment(
    ran: Ran, monkeypatch: pytest.MonkeyPatch, kubeconfig: pathlib.Path,
    value: str, namespaces: tuple[str, ...],
) -> None:  # fmt: skip
    monkeypatch.setenv("RAYSERVICE_NAMESPACE", value)
    assert main.main(["--kubeconfig", str(kubeconfig)]) == 0
    assert ran.options.namespaces == namespaces


def test_several_namespace_flags_and_the_same_flag_under_both_names(
    ran: Ran, kubeconfig: pathlib.Path
) -> None:
    argv = ["--kubeconfig", str(kubeconfig), "--namespace", "a", "--namespace", "b,c",
            "--watch-namespace", "a,b,c"]  # fmt: skip
    assert main.main(argv) == 0, "the same value under both names is fine"
    assert ran.options.namespaces == ("a", "b", "c")


def test_qps_zero_turns_client_side_limiting_off(ran: Ran, kubeconfig: pathlib.Path) -> None:
    assert main.main(["--kubeconfig", str(kubeconfig), "--qps", "0"]) == 0
    assert ran.managers[0].client.options.qps is None


def test_use_kubernetes_proxy_contradicting_the_address_mode_is_refused(
    ran: Ran, kubeconfig: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--kubeconfig", str(kubeconfig), "--use-kubernetes-proxy",
            "--dashboard-address-mode", "pod-ip"]  # fmt: skip
    assert main.main(argv) == 2
    assert "--use-kubernetes-proxy" in one_error_line(capsys)
    assert ran.managers == []
    assert main.main(["--kubeconfig", str(kubeconfig), "--serve-poll-max", "1"]) == 2
    assert "--serve-poll-max" in one_error_line(capsys)


# -- KubeRay v1.7.0's other flags ----------------------------------------------------------------


KUBERAY_HELM_DEFAULTS = [
    "--log-stdout-encoder", "json", "--log-file-encoder", "json",
    "--enable-leader-election=true", "--enable-metrics=true", "--reconcile-concurrency=1",
    "--qps=100", "--burst=200",
    "--feature-gates=RayClusterStatusConditions=true,RayJobDeletionPolicy=true,"
    "RayMultiHostIndexing=true,RayServiceIncrementalUpgrade=true,RayCronJob=false,"
    "RayClusterMTLS=false,RayClusterNetworkPolicy=false,RayClusterHistoryServer=false",
]  # fmt: skip
"""What KubeRay v1.7.0's Helm chart passes with its default values."""


def test_kuberays_helm_chart_arguments_are_accepted(ran: Ran, kubeconfig: pathlib.Path) -> None:
    assert main.main(["--kubeconfig", str(kubeconfig), *KUBERAY_HELM_DEFAULTS]) == 0
    assert ran.options.leader_election is True
    assert ran.setup[0]["enable_metrics"] is True
    assert ran.logging == [("json", "info")]
    assert ran.log_files == [{"file": None, "file_format": "json"}]


@pytest.mark.parametrize(
    "argv",
    [
        ["--forced-cluster-upgrade"], ["--forced-cluster-upgrade=false"],
        ["--zap-log-level=info"], ["--zap-devel"], ["--zap-encoder", "console"],
        ["--zap-stacktrace-level", "error"], ["--zap-time-encoding", "iso8601"],
        ["-watch-namespace=a"], ["-enable-leader-election=false"], ["--feature-gates="],
        ["--log-file-path", ""], ["--enable-metrics=false"],
    ],
    ids=lambda v: " ".join(v),
)  # fmt: skip
def test_every_kuberay_flag_is_accepted(
    ran: Ran, kubeconfig: pathlib.Path, argv: list[str]
) -> None:
    assert main.main(["--kubeconfig", str(kubeconfig), *argv]) == 0
    assert len(ran.managers) == 1


def test_go_single_dash_flags_mean_the_same(ran: Ran, kubeconfig: pathlib.Path) -> None:
    argv = ["-kubeconfig", str(kubeconfig), "-watch-namespace=a,b", "-qps", "7"]
    assert main.main(argv) == 0
    assert ran.options.namespaces == ("a", "b")
    assert ran.managers[0].client.options.qps == 7.0


@pytest.mark.parametrize(
    ("level", "ours"), [("debug", "debug"), ("2", "debug"), ("info", "info"), ("0", "info"),
                        ("error", "error"), ("panic", "error")],
)  # fmt: skip
def test_zap_log_level_sets_the_level(
    ran: Ran, kubeconfig: pathlib.Path, level: str, ours: str
) -> None:
    assert main.main(["--kubeconfig", str(kubeconfig), f"--zap-log-level={level}"]) == 0
    assert ran.logging == [("auto", ours)]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--feature-gates=NoSuchGate=true"],
         "--feature-gates: unrecognized feature gate: NoSuchGate"),
        (["--feature-gates=RayCronJob=yes"], "invalid value of RayCronJob=yes"),
        (["--feature-gates=RayCronJob"], "missing bool value for RayCronJob"),
        (["--feature-gates=RayClusterMTLS=true,RayClusterNetworkPolicy=true"],
         "--feature-gates: feature gate RayClusterMTLS=true: mTLS between Ray nodes is not"),
        (["--feature-gates=AllAlpha=true"], "RayClusterMTLS=true (set by AllAlpha=true)"),
        (["--batch-scheduler=volcano"], "'volcano' is not integrated in rayservice-operator"),
        (["--batch-scheduler=slurm"], "scheduler is not supported, name=slurm"),
        (["--enable-batch-scheduler"], "supported: none"),
        (["--enable-batch-scheduler", "--batch-scheduler=yunikorn"],
         "Please use batch-scheduler only"),
        (["--zap-log-level=loud"], "--zap-log-level"),
        (["--log-file-encoder=xml"], "--log-file-encoder"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)  # fmt: skip
def test_kuberay_flags_with_bad_values_exit_2(
    ran: Ran, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    assert main.main(argv) == 2
    assert says in one_error_line(capsys)
    assert ran.managers == []


def test_log_file_path_reaches_logging(
    ran: Ran, kubeconfig: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    argv = ["--kubeconfig", str(kubeconfig), "--log-file-path", str(tmp_path / "op.log"),
            "--log-file-encoder", "console"]  # fmt: skip
    assert main.main(argv) == 0
    assert ran.log_files == [{"file": tmp_path / "op.log", "file_format": "console"}]


def test_an_unwritable_log_file_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    monkeypatch.setattr(manager, "serve", lambda mgr: pytest.fail("started"))
    path = tmp_path / "no-such-dir" / "op.log"
    assert main.main(["--log-file-path", str(path)]) == 2  # nothing configured: it failed first
    assert f"--log-file-path {path}" in one_error_line(capsys)


CONFIG = """\
apiVersion: config.ray.io/v1alpha1
kind: Configuration
metricsAddr: 127.0.0.1:9
probeAddr: 127.0.0.1:10
enableLeaderElection: false
watchNamespace: team-a,team-b
reconcileConcurrency: 3
qps: 30
burst: 60
useKubernetesProxy: true
enableMetrics: true
headSidecarContainers: [{name: log, image: fluentbit}]
workerSidecarContainers: [{name: wlog, image: fluentbit}]
defaultContainerEnvs: [{name: TEAM, value: ml}]
defaultPodAnnotations: {team: ml}
defaultPodLabels: {cost-center: "42"}
"""


def test_a_configuration_file_replaces_the_flags_as_in_kuberay(
    ran: Ran, kubeconfig: pathlib.Path, tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    argv = ["--kubeconfig", str(kubeconfig), "--config", str(config), "--qps", "1",
            "--watch-namespace", "other",
            "--feature-gates=RayClusterStatusConditions=false"]  # fmt: skip
    assert main.main(argv) == 0
    mgr = ran.managers[0]
    assert mgr.options == manager.Options(
        name="rayservice-operator", namespaces=("team-a", "team-b"), leader_election=False,
        leader_election_id="ray-operator-leader",
        metrics_bind_address="127.0.0.1:9", health_probe_bind_address="127.0.0.1:10",
        cache_by_resource=controllers.setup.cache_by_resource(),
        events=controllers.setup.EVENT_OPTIONS,
    )  # fmt: skip
    assert (mgr.client.options.qps, mgr.client.options.burst) == (30.0, 60)
    (setup,) = ran.setup
    assert setup["max_concurrent_reconciles"] == 3
    assert setup["enable_metrics"] is True
    assert setup["rayservice_options"].address_mode == "kubernetes-proxy"
    defaults = setup["raycluster_options"].pod_defaults
    assert defaults.head_sidecars == ({"name": "log", "image": "fluentbit"},)
    assert defaults.worker_sidecars == ({"name": "wlog", "image": "fluentbit"},)
    assert defaults.env == ({"name": "TEAM", "value": "ml"},)
    assert (defaults.annotations, defaults.labels) == ({"team": "ml"}, {"cost-center": "42"})
    err = capsys.readouterr().err
    assert "--config replaces them" in err
    assert "--qps" in err
    assert "--watch-namespace" in err
    assert "RayClusterStatusConditions=false" in err, "the gates still come from the flag"


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "cannot read"),
        ("apiVersion: config.ray.io/v1alpha1\nkind: Configuration\nqsp: 5\n",
         "qsp: not a field of KubeRay's Configuration"),
        ("apiVersion: v1\nkind: ConfigMap\n", "apiVersion must be 'config.ray.io/v1alpha1'"),
        ("apiVersion: config.ray.io/v1alpha1\nkind: Configuration\nburst: many\n", "burst:"),
        ("apiVersion: config.ray.io/v1alpha1\nkind: Configuration\nbatchScheduler: volcano\n",
         "'volcano' is not integrated"),
        ("[unclosed", "not YAML"),
    ],
)  # fmt: skip
def test_a_bad_configuration_file_exits_2_naming_it(
    ran: Ran, capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path,
    content: str | None, says: str,
) -> None:  # fmt: skip
    config = tmp_path / "config.yaml"
    if content is not None:
        config.write_text(content)
    assert main.main(["--config", str(config)]) == 2
    line = one_error_line(capsys)
    assert f"--config {config}: " in line
    assert says in line
    assert ran.managers == []


@pytest.mark.parametrize(
    ("gates", "served", "asked", "gateway_api", "incremental"),
    [
        ("", True, 1, True, True),
        ("", False, 1, False, True),
        ("RayServiceIncrementalUpgrade=false", True, 0, False, False),
    ],
)
def test_the_incremental_gate_and_the_gateway_api_reach_the_rayservice_options(
    ran: Ran, kubeconfig: pathlib.Path, gates: str, served: bool, asked: int,
    gateway_api: bool, incremental: bool,
) -> None:  # fmt: skip
    ran.gateway_api = served
    assert main.main(["--kubeconfig", str(kubeconfig), "--feature-gates", gates]) == 0
    options = ran.setup[0]["rayservice_options"]
    assert ran.gateway_asked == asked  # never asked when the gate is off
    assert (options.gateway_api, options.incremental_upgrade) == (gateway_api, incremental)


def test_gateway_classes_reach_the_rayservice_options_and_the_webhooks(
    ran: Ran, kubeconfig: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """``--gateway-classes`` (repeatable, comma-separated, or ``RAYSERVICE_GATEWAY_CLASSES``)
    is the allow-list of both the reconciler and the webhook; none by default, and a
    start-up line saying what that means."""
    hooks: list[dict[str, Any]] = []

    def setup_webhooks(mgr: manager.Manager, **kwargs: Any) -> list[str]:
        hooks.append(kwargs)
        return []

    monkeypatch.setattr(main.webhooks, "setup", setup_webhooks)
    monkeypatch.setenv("ENABLE_WEBHOOKS", "true")
    assert main.main(["--kubeconfig", str(kubeconfig)]) == 0
    none = gateway.GatewayClasses()
    assert ran.setup[0]["rayservice_options"].gateway_classes == none
    assert hooks == [{"gateway_classes": none, "incremental": True}]
    err = capsys.readouterr().err
    assert "no GatewayClass is allowed (--gateway-classes)" in err

    argv = ["--kubeconfig", str(kubeconfig), "--gateway-classes", "traefik,istio",
            "--gateway-classes=envoy",
            "--feature-gates=RayServiceIncrementalUpgrade=false"]  # fmt: skip
    assert main.main(argv) == 0
    allowed = gateway.GatewayClasses.parse(["envoy", "istio", "traefik"])
    assert ran.setup[1]["rayservice_options"].gateway_classes == allowed
    assert hooks[1] == {"gateway_classes": allowed, "incremental": False}

    monkeypatch.setenv("RAYSERVICE_GATEWAY_CLASSES", "*")
    assert main.main(["--kubeconfig", str(kubeconfig)]) == 0
    assert ran.setup[2]["rayservice_options"].gateway_classes.every
    assert "--gateway-classes=*: every RayService author" in capsys.readouterr().err


def test_the_configuration_files_gateway_classes_replace_the_flag_only_when_set(
    ran: Ran, kubeconfig: pathlib.Path, tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    config = tmp_path / "config.yaml"
    head = "apiVersion: config.ray.io/v1alpha1\nkind: Configuration\n"
    config.write_text(head + "gatewayClasses: [istio]\n")
    argv = ["--kubeconfig", str(kubeconfig), "--config", str(config),
            "--gateway-classes=traefik"]  # fmt: skip
    assert main.main(argv) == 0
    options = ran.setup[0]["rayservice_options"]
    assert options.gateway_classes == gateway.GatewayClasses.parse(["istio"])
    assert "--gateway-classes" in capsys.readouterr().err, "named as replaced"
    config.write_text(head)  # a KubeRay file: it has no such field, the flag stands
    assert main.main(argv) == 0
    options = ran.setup[1]["rayservice_options"]
    assert options.gateway_classes == gateway.GatewayClasses.parse(["traefik"])
    config.write_text(head + "gatewayClasses: [Istio]\n")
    assert main.main(argv) == 2
    assert "gatewayClasses: 'Istio' is not a GatewayClass name" in capsys.readouterr().err
