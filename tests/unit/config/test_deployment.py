"""The manager's Deployment (config/manager/manager.yaml), its image (Dockerfile) and
``make kind-e2e`` agree with each other and with the ``rayservice-manager`` binary.

- The pod passes the ``restricted`` Pod Security Standard its namespace enforces: non-root
  with a numeric uid, ``RuntimeDefault`` seccomp, every container without privilege
  escalation, with all capabilities dropped and a read-only root filesystem; the one
  writable place is an emptyDir at ``/tmp``, where the image points ``HOME`` and ``TMPDIR``.
- The container runs the console script, and every argument it is given (also by the
  namespaced overlay's patch) is a flag ``rayservice-manager --help`` lists and that parses;
  the probe and metrics ports are the ones the manager then listens on.
- The Dockerfile's final stage runs as the Deployment's uid/gid and starts the console
  script, also at ``/manager`` (KubeRay's command); ``.dockerignore`` keeps what the build
  copies and drops the rest.
- ``make kind-e2e`` with stand-ins for docker, kind, kubectl and the venv's Python (no
  Docker engine here): a missing tool or engine stops it with one line naming it; otherwise
  the steps run in order with the cluster, image and kubeconfig docs/operator/kind.md documents.
"""

from __future__ import annotations

import ipaddress
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from typing import Any

import pytest
import yaml
from pydantic_settings import CliApp

from controllers import main
from runtime.testing import controlplane
from tests.unit import helpers

ROOT = helpers.ROOT
MANAGER = ROOT / "config" / "manager" / "manager.yaml"
NAMESPACED_PATCH = ROOT / "config" / "overlays" / "namespaced" / "manager_namespaces.yaml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
KIND_CONFIG = ROOT / "hack" / "kind" / "kind-config.yaml"


def _deployment() -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(MANAGER.read_text()) if d]
    deployments = [d for d in docs if d["kind"] == "Deployment"]
    assert len(deployments) == 1, f"{MANAGER} holds {len(deployments)} Deployments"
    return deployments[0]


def _pod_spec() -> dict[str, Any]:
    spec: dict[str, Any] = _deployment()["spec"]["template"]["spec"]
    return spec


def _containers() -> list[dict[str, Any]]:
    spec = _pod_spec()
    return [*spec.get("initContainers", []), *spec["containers"]]


def _manager_container() -> dict[str, Any]:
    [container] = [c for c in _pod_spec()["containers"] if c["name"] == "manager"]
    return container


# --- the pod's security ---------------------------------------------------------------------


def test_pod_runs_as_a_numeric_non_root_user_with_runtime_default_seccomp() -> None:
    context = _pod_spec()["securityContext"]
    assert context["runAsNonRoot"] is True
    assert isinstance(context["runAsUser"], int)
    assert context["runAsUser"] != 0
    assert context.get("runAsGroup", 1) != 0
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "hostNetwork" not in _pod_spec()
    assert "hostPID" not in _pod_spec()


def test_every_container_drops_privileges_and_has_a_read_only_root() -> None:
    for container in _containers():
        context = container.get("securityContext", {})
        name = container["name"]
        assert context.get("allowPrivilegeEscalation") is False, name
        assert context.get("readOnlyRootFilesystem") is True, name
        assert context.get("capabilities", {}).get("drop") == ["ALL"], name
        assert not context.get("capabilities", {}).get("add"), name
        assert not context.get("privileged", False), name


def test_the_read_only_root_has_a_writable_tmp_where_the_image_points_home() -> None:
    env = _dockerfile_env()
    assert env["HOME"] == "/tmp"
    assert env["TMPDIR"] == "/tmp"
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    volumes = {v["name"]: v for v in _pod_spec().get("volumes", [])}
    for container in _containers():
        mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
        assert "/tmp" in mounts, f"{container['name']} has no writable /tmp"
        assert not mounts["/tmp"].get("readOnly", False)
        assert "emptyDir" in volumes[mounts["/tmp"]["name"]]


# --- the container's command and flags ------------------------------------------------------


def test_the_container_runs_the_console_script() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert _manager_container()["command"] == ["rayservice-manager"]
    assert scripts["rayservice-manager"] == "controllers.main:main"


def _help() -> tuple[set[str], set[str]]:
    """The flags ``rayservice-manager --help`` lists, and those of them that are booleans
    (listed with a ``--no-`` twin)."""
    done = subprocess.run(
        [sys.executable, "-m", "controllers.main", "--help"],
        cwd=ROOT, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", done.stdout))
    booleans = {f for f in flags if f"--no-{f[2:]}" in flags}
    return flags, booleans


def _argument_lists() -> dict[str, list[str]]:
    """The manager's arguments in config/default, and with the namespaced overlay's patch."""
    args = list(_manager_container().get("args", []))
    patched = list(args)
    for op in yaml.safe_load(NAMESPACED_PATCH.read_text()):
        assert op["path"] == "/spec/template/spec/containers/0/args/-", op
        patched.append(op["value"])
    return {"config/default": args, "config/overlays/namespaced": patched}


def test_the_first_container_is_the_manager() -> None:
    # The namespaced overlay patches containers/0 by index.
    assert _pod_spec()["containers"][0]["name"] == "manager"


def test_every_argument_is_a_flag_the_manager_lists_in_its_help() -> None:
    flags, booleans = _help()
    assert {"--leader-elect", "--namespace", "--health-probe-bind-address"} <= flags
    for where, args in _argument_lists().items():
        assert args, f"{where}: the manager gets no arguments"
        expecting_value = False
        for arg in args:
            if expecting_value:
                expecting_value = False
                continue
            name, eq, _ = arg.partition("=")
            assert name in flags, f"{where}: {arg!r} is not a flag of rayservice-manager"
            expecting_value = not eq and name not in booleans and not name.startswith("--no-")


def test_the_arguments_parse_to_the_intended_settings() -> None:
    lists = _argument_lists()
    default = CliApp.run(main.Settings, cli_args=lists["config/default"])
    assert default.leader_elect is True
    assert default.namespace == []
    # Plain /metrics only on the pod's loopback (the binary's default, KubeRay's, is every
    # interface): nothing else reaches it unless an overlay or component says so.
    assert (default.metrics_bind_address, default.metrics_secure) == ("127.0.0.1:8080", False)
    namespaced = CliApp.run(main.Settings, cli_args=lists["config/overlays/namespaced"])
    assert namespaced.leader_elect is True
    assert namespaced.namespace == ["team-a", "team-b"]


def test_probes_and_metrics_use_the_ports_the_manager_listens_on() -> None:
    container = _manager_container()
    settings = CliApp.run(main.Settings, cli_args=container.get("args", []))
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["health"] == int(settings.health_probe_bind_address.rpartition(":")[2])
    assert ports["metrics"] == int(settings.metrics_bind_address.rpartition(":")[2])
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "health"}


# --- the image ------------------------------------------------------------------------------


def _dockerfile_stages() -> list[list[tuple[str, str]]]:
    """The Dockerfile's instructions (keyword, rest), continuation lines joined, per stage."""
    lines: list[str] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        if not pending and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        lines.append(pending + raw)
        pending = ""
    assert not pending, "the Dockerfile ends in a continuation line"
    stages: list[list[tuple[str, str]]] = []
    global_args: dict[str, str] = {}
    for line in lines:
        keyword, _, rest = line.strip().partition(" ")
        if keyword.upper() == "ARG" and not stages:  # a global ARG: only FROM lines use it
            name, _, default = rest.strip().partition("=")
            for earlier, value in global_args.items():  # a default may name an earlier ARG
                default = default.replace("${" + earlier + "}", value)
            global_args[name] = default
            continue
        if keyword.upper() == "FROM":
            stages.append([])
            for name, default in global_args.items():
                rest = rest.replace("${" + name + "}", default)
        assert stages, f"instruction before FROM: {line}"
        stages[-1].append((keyword.upper(), rest.strip()))
    return stages


def _final(keyword: str) -> list[str]:
    return [rest for k, rest in _dockerfile_stages()[-1] if k == keyword]


def _dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for rest in _final("ENV"):
        for item in shlex.split(rest):
            name, eq, value = item.partition("=")
            assert eq, f"ENV {rest}: use the name=value form"
            env[name] = value
    return env


def test_the_image_is_built_in_two_stages_from_python_3_11_slim() -> None:
    stages = _dockerfile_stages()
    assert len(stages) == 2
    assert [rest.split()[0] for _, rest in (s[0] for s in stages)] == ["python:3.11-slim"] * 2
    builder = stages[0][0][1].split()
    assert builder[1:] == ["AS", "builder"]
    assert any("pip wheel" in rest for k, rest in stages[0] if k == "RUN")
    # dependencies only from the lock, every file checked against its hash
    assert any(
        "--require-hashes" in rest and "-r requirements.lock" in rest
        for k, rest in stages[0]
        if k == "RUN"
    )
    assert all("--no-deps" in rest for k, rest in stages[0] if k == "RUN" and "install" in rest)
    assert any(rest.startswith("--from=builder ") for rest in _final("COPY"))
    assert not _final("RUN"), "the final stage only copies the venv in"


def test_the_image_runs_as_the_deployments_user_and_group() -> None:
    [user] = _final("USER")
    uid, _, gid = user.partition(":")
    context = _pod_spec()["securityContext"]
    assert int(uid) == context["runAsUser"]
    assert int(gid) == context["runAsGroup"]


def test_the_image_starts_the_console_script() -> None:
    [entrypoint] = _final("ENTRYPOINT")
    assert json.loads(entrypoint) == ["rayservice-manager"]
    assert _dockerfile_env()["PATH"].split(":")[0] == "/opt/venv/bin"


def test_the_image_has_kuberays_command_as_a_copy_of_the_console_script(
    tmp_path: pathlib.Path,
) -> None:
    # KubeRay's Helm chart runs `/manager` (its operatorCommand value).
    assert "--from=builder /opt/venv/bin/rayservice-manager /manager" in _final("COPY")
    # A console script's shebang names its venv's python: a copy runs from any path.
    script = pathlib.Path(sys.executable).with_name("rayservice-manager")
    copy = tmp_path / "manager"
    shutil.copy2(script, copy)
    done = subprocess.run(
        [str(copy), "--help"], cwd=ROOT, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "--feature-gates" in done.stdout


def _ignored(path: str, patterns: list[str]) -> bool:
    parts = pathlib.PurePosixPath(path).parts
    prefixes = [str(pathlib.PurePosixPath(*parts[: i + 1])) for i in range(len(parts))]
    for pattern in patterns:
        bare = pattern.removeprefix("**/")
        for prefix in prefixes:
            if pathlib.PurePosixPath(prefix).match(pattern) or (
                bare != pattern and pathlib.PurePosixPath(prefix).name == bare
            ):
                return True
    return False


def test_dockerignore_keeps_what_the_build_copies_and_drops_the_rest() -> None:
    patterns = [
        line.strip() for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]  # fmt: skip
    assert not any(p.startswith("!") for p in patterns)
    copied = [
        src for k, rest in _dockerfile_stages()[0] if k == "COPY"
        for src in rest.split()[:-1]
    ]  # fmt: skip
    assert copied, "the builder copies nothing"
    for src in copied:
        assert (ROOT / src).exists(), src
        assert not _ignored(src, patterns), f".dockerignore drops {src}, which the build copies"
    dropped_paths = [
        ".venv", ".git", "build", "tests/unit/testdata", "runtime/__pycache__",
        ".pytest_cache", ".mypy_cache", ".ruff_cache", "controllers/main.pyc",
    ]  # fmt: skip
    for dropped in dropped_paths:
        assert _ignored(dropped, patterns), f".dockerignore keeps {dropped}"


# --- make kind-e2e and kind-down (stand-ins for docker, kind, kubectl, helm) ----------------


def test_the_kind_cluster_keeps_to_benchmarking_addresses_and_runs_on_cgroup_v1_hosts() -> None:
    config = yaml.safe_load(KIND_CONFIG.read_text())
    assert config["kind"] == "Cluster"
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    assert [node["role"] for node in config["nodes"]] == ["control-plane", "worker"]
    benchmarking = ipaddress.ip_network("198.18.0.0/15")
    pods = ipaddress.ip_network(config["networking"]["podSubnet"])
    services = ipaddress.ip_network(config["networking"]["serviceSubnet"])
    kind_network = ipaddress.ip_network("198.19.0.0/24")  # hack/kind/docker.sh
    local = [ipaddress.ip_network(controlplane.DEFAULT_POD_CIDR),
             ipaddress.ip_network(controlplane.SERVICE_CIDR),
             ipaddress.ip_network(controlplane.HOST_VETH_ADDRESS)]  # fmt: skip
    for net in (pods, services):
        assert net.subnet_of(benchmarking), net
        for other in [kind_network, *local, *({pods, services} - {net})]:
            assert not net.overlaps(other), (net, other)
    patches = [yaml.safe_load(p) for p in config["kubeadmConfigPatches"]]
    assert {"kind": "KubeletConfiguration", "failCgroupV1": False} in patches
    conflist = json.loads((ROOT / "hack" / "kind" / "10-bridge.conflist").read_text())
    [[range_]] = conflist["plugins"][0]["ipam"]["ranges"]
    assert range_["subnet"] == str(pods)  # the offline node's own CNI configuration


STUB = """#!/bin/bash
printf '%s\\n' "$(basename "$0") $*" >> "$STUB_LOG"
case "$(basename "$0") $*" in
{cases}
esac
exit 0
"""


class Kind:
    """``make`` run with stand-ins: each logs its command line to ``log``."""

    def __init__(self, tmp: pathlib.Path) -> None:
        self.bin = tmp / "bin"
        self.bin.mkdir()
        self.log = tmp / "log"
        self.dir = tmp / "kind"
        self.stamp = tmp / "installed"
        self.stamp.touch()
        future = time.time() + 3600  # newer than pyproject.toml: `make venv` has nothing to do
        os.utime(self.stamp, (future, future))

    def stub(self, name: str, cases: str = "") -> None:
        path = self.bin / name
        path.write_text(STUB.format(cases=cases))
        path.chmod(0o755)

    def all_stubs(self, clusters: str = "", rollout_fails: bool = False) -> None:
        self.stub("docker", "'docker inspect -f {{.State.Running}} '*) echo true ;;")
        self.stub(
            "kind",
            f"'kind get clusters') [ -e \"$STUB_LOG.deleted\" ] || printf '{clusters}' ;;\n"
            "'kind delete cluster'*) touch \"$STUB_LOG.deleted\" ;;\n"
            "'kind get kubeconfig'*) echo 'kubeconfig-of-kind' ;;",
        )
        # The Deployment exists once helm ran, or from the start for a kept cluster.
        self.stub(
            "kubectl",
            "*' get deployment -o name') "
            '[ -e "$STUB_LOG.helm" ] && echo deployment/rayservice-operator ;;\n'
            + ("*' rollout status '*) exit 1 ;;" if rollout_fails else ""),
        )
        self.stub("helm", '*) touch "$STUB_LOG.helm" ;;')
        self.stub(
            "python",
            "*' pytest '*) echo \"env KUBECONFIG=$KUBECONFIG "
            "E2E_DASHBOARD_MODE=$E2E_DASHBOARD_MODE E2E_POD_CIDR=$E2E_POD_CIDR "
            'E2E_TIME_FACTOR=$E2E_TIME_FACTOR" >> "$STUB_LOG" ;;',
        )

    def make(
        self, target: str, *, system_path: bool = True, **extra_env: str
    ) -> subprocess.CompletedProcess[str]:
        make = shutil.which("make")
        assert make is not None, "make is not installed"
        env = {
            k: v for k, v in os.environ.items()
            if not k.startswith(("MAKE", "MFLAGS", "KIND_", "KUBE", "E2E_", "DOCKER", "RSO_"))
        }  # fmt: skip
        env["PATH"] = f"{self.bin}:{env['PATH']}" if system_path else str(self.bin)
        env["STUB_LOG"] = str(self.log)
        env["HELM"] = str(self.bin / "helm")
        env["DOCKERD"] = str(self.bin / "no-dockerd")  # never a real engine from a unit test
        env.update(extra_env)
        return subprocess.run(
            [make, "-s", "-C", str(ROOT), target, f"KIND_DIR={self.dir}", "KIND_OFFLINE=0",
             f"STAMP={self.stamp}", f"PY={self.bin / 'python'}"],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    def commands(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def kind(tmp_path: pathlib.Path) -> Kind:
    return Kind(tmp_path)


@pytest.mark.parametrize(("present", "missing"), [((), "docker"), (("docker",), "kubectl")])
def test_kind_e2e_names_the_missing_tool(
    kind: Kind, present: tuple[str, ...], missing: str
) -> None:
    for name in present:
        kind.stub(name)
    done = kind.make("kind-e2e", system_path=False)
    assert done.returncode != 0
    assert f"kind-e2e: '{missing}' is not on PATH" in done.stderr
    assert "needs Docker and kubectl" in done.stderr
    assert kind.commands() == []
    assert not kind.dir.exists()


def test_kind_e2e_needs_a_docker_engine_it_can_reach_or_start(kind: Kind) -> None:
    kind.all_stubs()
    kind.stub("docker", "'docker info') exit 1 ;;")
    done = kind.make("kind-e2e")
    assert done.returncode != 0
    assert "no Docker engine answers, and none can be started here" in done.stderr
    assert set(kind.commands()) == {"docker info"}  # asked, and nothing else was done


def test_kind_e2e_creates_the_cluster_installs_the_chart_and_runs_the_e2e_suite(
    kind: Kind,
) -> None:
    kind.all_stubs()
    done = kind.make("kind-e2e")
    assert done.returncode == 0, done.stderr
    kubectl = f"kubectl --kubeconfig {kind.dir}/kubeconfig"
    deployment = "deployment/rayservice-operator"
    helm = (f"helm upgrade --install rayservice-operator helm-chart/rayservice-operator "
            f"--kubeconfig {kind.dir}/kubeconfig --namespace rayservice-operator-system "
            "--create-namespace --set image.repository=rayservice-operator --set image.tag=e2e "
            "--wait=false")  # fmt: skip
    assert kind.commands() == [
        "docker info",
        "docker network inspect kind",
        "kind get clusters",  # there, but its node not running?
        "kind get clusters",
        f"kind create cluster --name rayservice-e2e --config {kind.dir}/kind-config.yaml "
        "--wait 180s",
        "kind get kubeconfig --name rayservice-e2e",
        "docker build -t rayservice-operator:e2e .",
        "kind load docker-image rayservice-operator:e2e --name rayservice-e2e",
        f"{kubectl} -n rayservice-operator-system get deployment -o name",  # none yet
        helm,
        f"{kubectl} -n rayservice-operator-system get deployment -o name",
        # a fresh install: one pod of the new image, not restarted into a second
        f"{kubectl} -n rayservice-operator-system rollout status {deployment} --timeout 180s",
        "python -m pytest tests/e2e",
        f"env KUBECONFIG={kind.dir}/kubeconfig E2E_DASHBOARD_MODE=service "
        "E2E_POD_CIDR=198.19.64.0/18 E2E_TIME_FACTOR=3",
    ]
    assert (kind.dir / "kubeconfig").read_text() == "kubeconfig-of-kind\n"
    assert (kind.dir / "kind-config.yaml").read_text() == KIND_CONFIG.read_text()


def test_kind_e2e_reuses_an_existing_cluster(kind: Kind) -> None:
    kind.all_stubs(clusters="other\\nrayservice-e2e\\n")
    done = kind.make("kind-e2e")
    assert done.returncode == 0, done.stderr
    assert not [c for c in kind.commands() if c.startswith("kind create")]
    assert "kind load docker-image rayservice-operator:e2e --name rayservice-e2e" in (
        kind.commands()
    )


def test_kind_e2e_restarts_the_operator_that_a_kept_cluster_already_runs(kind: Kind) -> None:
    """Same tag, new image: the running Deployment would keep the old one without it."""
    kind.all_stubs(clusters="rayservice-e2e\\n")
    pathlib.Path(f"{kind.log}.helm").touch()  # installed by an earlier run
    done = kind.make("kind-e2e")
    assert done.returncode == 0, done.stderr
    kubectl = f"kubectl --kubeconfig {kind.dir}/kubeconfig -n rayservice-operator-system "
    restart = kubectl + "rollout restart deployment/rayservice-operator"
    assert restart in kind.commands()
    assert kind.commands().index(restart) < kind.commands().index(
        kubectl + "rollout status deployment/rayservice-operator --timeout 180s"
    )


def test_kind_e2e_shows_the_operator_log_when_a_scenario_fails(kind: Kind) -> None:
    kind.all_stubs()
    kind.stub("python", "*' pytest '*) exit 3 ;;")
    done = kind.make("kind-e2e")
    assert done.returncode != 0
    kubectl = f"kubectl --kubeconfig {kind.dir}/kubeconfig -n rayservice-operator-system "
    assert kind.commands()[-3:] == [
        "python -m pytest tests/e2e",
        kubectl + "get pods -o wide",
        kubectl + "logs deployment/rayservice-operator --all-containers --tail 400",
    ]


def test_kind_e2e_shows_the_pods_and_stops_when_the_rollout_does_not_finish(kind: Kind) -> None:
    kind.all_stubs(rollout_fails=True)
    done = kind.make("kind-e2e")
    assert done.returncode != 0
    kubectl = f"kubectl --kubeconfig {kind.dir}/kubeconfig -n rayservice-operator-system "
    assert kind.commands()[-3:] == [
        kubectl + "rollout status deployment/rayservice-operator --timeout 180s",
        kubectl + "describe pods",
        kubectl + "logs deployment/rayservice-operator --all-containers --tail 50",
    ]
    assert not [c for c in kind.commands() if " pytest " in f" {c} "]


def test_kind_e2e_writes_the_offline_cluster_config_with_one_node_and_no_kindnetd(
    kind: Kind,
) -> None:
    """What hack/kind/e2e.sh gives kind offline (its embedded program, run here on its own)."""
    script = (ROOT / "hack" / "kind" / "e2e.sh").read_text()
    program = script.split("<<'PYEOF'\n", 1)[1].split("\nPYEOF", 1)[0]
    out = kind.dir / "offline.yaml"
    kind.dir.mkdir()
    subprocess.run([sys.executable, "-c", program, str(KIND_CONFIG), str(out), "3.6.16-0"],
                   check=True, timeout=30)  # fmt: skip
    config = yaml.safe_load(out.read_text())
    assert [n["role"] for n in config["nodes"]] == ["control-plane"]
    assert config["networking"]["disableDefaultCNI"] is True
    patches = [yaml.safe_load(p) for p in config["kubeadmConfigPatches"]]
    assert {"kind": "ClusterConfiguration", "etcd": {"local": {"imageTag": "3.6.16-0"}}} in patches
    assert {"kind": "KubeletConfiguration", "failCgroupV1": False} in patches


def test_kind_down_deletes_the_cluster_and_the_generated_files(kind: Kind) -> None:
    kind.all_stubs()
    kind.dir.mkdir()
    (kind.dir / "kubeconfig").write_text("x")
    done = kind.make("kind-down")
    assert done.returncode == 0, done.stderr
    assert kind.commands()[-1] == "kind delete cluster --name rayservice-e2e"
    assert not kind.dir.exists()


def test_kind_down_without_kind_says_so(kind: Kind, tmp_path: pathlib.Path) -> None:
    done = kind.make(
        "kind-down", PATH=f"{kind.bin}:/usr/bin:/bin", XDG_CACHE_HOME=str(tmp_path / "cache")
    )
    assert done.returncode != 0
    assert "kind-down: 'kind' is not on PATH (nor built by hack/kind/build-binaries.sh)" in (
        done.stderr
    )
    assert kind.commands() == []


def test_kind_e2e_recreates_a_cluster_whose_node_is_not_running(kind: Kind) -> None:
    kind.all_stubs(clusters="rayservice-e2e\\n")
    kind.stub("docker", "'docker inspect -f {{.State.Running}} '*) echo false ;;")
    done = kind.make("kind-e2e")
    assert done.returncode == 0, done.stderr
    assert "is left from an engine that stopped: deleting it" in done.stderr
    commands = kind.commands()
    deleted = commands.index("kind delete cluster --name rayservice-e2e")
    assert any(c.startswith("kind create cluster") for c in commands[deleted:])
