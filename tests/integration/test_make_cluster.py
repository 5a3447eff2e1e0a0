"""``make cluster-up`` / ``make cluster-down`` as a user runs them.

Each test runs ``make`` in the repository root with ``CLUSTER_DIR`` in its own temp dir
(and ``-o .venv/.installed``: a test never reinstalls the shared virtualenv), so it stays
apart from the session's ``control_plane`` fixture and from anyone's ``.cluster``. After
every ``cluster-down`` (and every failed ``cluster-up``) nothing of that run may be left:
no harness, no component (found by pid and by the run's work dir on their command lines)
and no pod network (``ip netns list`` before and after).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator

import pytest

from runtime.testing import controlplane

ROOT = pathlib.Path(__file__).parents[2]
MAKE = ["make", "--no-print-directory", "-C", str(ROOT), "-o", ".venv/.installed"]


def make(
    target: str, cluster_dir: pathlib.Path, *variables: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MAKE, target, f"CLUSTER_DIR={cluster_dir}", *variables],
        capture_output=True, text=True, check=False, timeout=200,
    )  # fmt: skip


def output(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def processes_naming(text: str) -> list[str]:
    """Live processes whose command line contains ``text`` (never this test process)."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in args and alive(int(entry.name)):
            found.append(f"{entry.name}: {args[:200]}")
    return found


def netns() -> set[str]:
    done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in done.stdout.splitlines() if line.strip()}


def read_state(cluster_dir: pathlib.Path) -> dict[str, str]:
    lines = (cluster_dir / "state").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines)


def assert_nothing_left(
    cluster_dir: pathlib.Path, before: set[str], states: list[dict[str, str]]
) -> None:
    """No process of these runs, no pod network of theirs (nor any other stale one)."""
    for state in states:
        pids = [int(state["pid"]), *(int(p) for p in state["pids"].split())]
        assert [pid for pid in pids if alive(pid)] == [], state
        assert processes_naming(state["workdir"] + "/") == []
        assert not pathlib.Path(state["workdir"]).exists(), "the work dir is removed"
    assert processes_naming(f"--kubeconfig-out {cluster_dir}/kubeconfig") == []
    now = netns()
    ours = {state["netns"] for state in states}
    assert ours & now == set()
    stale = {name for name in now - before if controlplane._netns_owner(name) == "gone"}
    assert stale == set(), "a pod network whose harness is gone was left behind"
    assert not (cluster_dir / "pid").exists()
    assert not (cluster_dir / "kubeconfig").exists()


def kubectl_version(bin_dir: pathlib.Path, kubeconfig: pathlib.Path) -> str:
    """GET /version with kubectl and the kubeconfig alone (no harness code involved)."""
    done = subprocess.run(
        [str(bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig), "get", "--raw", "/version"],
        capture_output=True, text=True, check=False, timeout=30,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    version: str = json.loads(done.stdout)["gitVersion"]
    return version


@pytest.fixture
def cluster_dir(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A CLUSTER_DIR of its own; whatever a failing test left running is stopped."""
    directory = tmp_path / "cluster"
    yield directory
    if (directory / "pid").exists() or (directory / "state").exists():
        make("cluster-down", directory)


def test_up_down_up_down_works_each_time_and_leaves_nothing(
    bin_dir: pathlib.Path, cluster_dir: pathlib.Path
) -> None:
    before = netns()
    states = []
    for round_ in (1, 2):
        up = make("cluster-up", cluster_dir)
        assert up.returncode == 0, output(up)
        assert re.search(
            r"^control plane v1\.\d+\.\d+ up at https://127\.0\.0\.1:\d+$", up.stdout, re.M
        )
        assert f"KUBECONFIG={cluster_dir}/kubeconfig\n" in up.stdout
        state = read_state(cluster_dir)
        states.append(state)
        assert (cluster_dir / "pid").read_text().strip() == state["pid"]
        assert all(alive(int(pid)) for pid in [state["pid"], *state["pids"].split()])
        assert len(state["pids"].split()) == 5, (
            "etcd, apiserver, controller-manager, scheduler, kwok"
        )
        assert kubectl_version(bin_dir, cluster_dir / "kubeconfig").startswith("v1.")
        assert state["netns"] in netns() - before
        assert controlplane._netns_owner(state["netns"]) == "live"
        if round_ == 1:
            again = make("cluster-up", cluster_dir)
            assert again.returncode == 0, output(again)
            assert f"already running (pid {state['pid']})" in again.stdout
            assert len(processes_naming(f"--kubeconfig-out {cluster_dir}/kubeconfig")) == 1

        down = make("cluster-down", cluster_dir)
        assert down.returncode == 0, output(down)
        assert down.stdout.splitlines()[-1] == "control plane stopped"
        assert "SIGKILL" not in down.stdout, "a healthy control plane stops on SIGTERM"
        assert_nothing_left(cluster_dir, before, states)

    assert states[0]["pid"] != states[1]["pid"]
    idle = make("cluster-down", cluster_dir)
    assert idle.returncode == 0, output(idle)
    assert "no control plane running" in idle.stdout


def test_a_crashed_harness_is_cleaned_up_and_a_stuck_one_is_sigkilled(
    bin_dir: pathlib.Path, cluster_dir: pathlib.Path
) -> None:
    before = netns()
    up = make("cluster-up", cluster_dir)
    assert up.returncode == 0, output(up)
    crashed = read_state(cluster_dir)
    os.kill(int(crashed["pid"]), 9)  # no chance to remove its pod network

    # The next cluster-up cleans up after it (its netns is stale now) and starts afresh.
    up = make("cluster-up", cluster_dir)
    assert up.returncode == 0, output(up)
    assert f"removed stale pod network {crashed['netns']}" in up.stdout
    assert crashed["netns"] not in netns()
    assert processes_naming(crashed["workdir"] + "/") == []
    state = read_state(cluster_dir)
    assert kubectl_version(bin_dir, cluster_dir / "kubeconfig").startswith("v1.")

    # A harness that does not stop within CLUSTER_DOWN_TIMEOUT gets SIGKILL, said so.
    down = make("cluster-down", cluster_dir, "CLUSTER_DOWN_TIMEOUT=0")
    assert down.returncode == 0, output(down)
    assert f"(pid {state['pid']}) is still running 0s after SIGTERM; sending SIGKILL" in down.stdout
    assert down.stdout.splitlines()[-1] == "control plane stopped"
    assert_nothing_left(cluster_dir, before, [crashed, state])


def test_a_cluster_up_that_cannot_start_says_why_and_leaves_nothing(
    cluster_dir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    up = make("cluster-up", cluster_dir, f"CLUSTER_BIN_DIR={tmp_path}/nonexistent")
    assert up.returncode != 0, output(up)
    assert "the control plane exited during start-up (exit code 1)" in up.stderr
    assert f"etcd: binary {tmp_path}/nonexistent/etcd is missing" in up.stderr, "the log's tail"
    assert not (cluster_dir / "pid").exists()
    assert processes_naming(f"--kubeconfig-out {cluster_dir}/kubeconfig") == []


def test_a_cluster_up_not_ready_in_time_stops_what_it_started(
    cluster_dir: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    started = tmp_path / "etcd-started"
    (fake / "etcd").write_text(f"#!/bin/sh\ntouch {started}\nwhile :; do sleep 1; done\n")
    (fake / "etcd").chmod(0o755)  # an etcd that never turns healthy
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"):
        (fake / name).write_text("#!/bin/sh\nexit 1\n")  # present (checked first), never run
        (fake / name).chmod(0o755)
    before = netns()
    up = make("cluster-up", cluster_dir, f"CLUSTER_BIN_DIR={fake}", "CLUSTER_UP_TIMEOUT=6")
    assert up.returncode != 0, output(up)
    assert started.exists(), "the harness got as far as starting etcd"
    assert "not ready after 6s (CLUSTER_UP_TIMEOUT); stopping what it started" in up.stderr
    assert "cluster-up: stopped\n" in up.stderr
    assert "error: SIGTERM during start-up; stopped everything it started" in up.stderr
    assert processes_naming(str(fake)) == [], "the (fake) etcd it started is gone"
    assert processes_naming(f"--kubeconfig-out {cluster_dir}/kubeconfig") == []
    assert not (cluster_dir / "pid").exists()
    new = {name for name in netns() - before if controlplane._netns_owner(name) == "gone"}
    assert new == set()


def test_reap_leaves_live_pod_networks_and_ones_it_cannot_judge_alone(
    control_plane: controlplane.ControlPlane,
) -> None:
    assert control_plane.pod_network is not None
    live = control_plane.pod_network.namespace
    assert controlplane._netns_owner(live) == "live"
    unknown = f"rso-{secrets.token_hex(4)}"  # named like ours, but no harness claimed it
    subprocess.run(["ip", "netns", "add", unknown], check=True)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "runtime.testing.controlplane", "reap"],
            capture_output=True, text=True, check=False, timeout=30,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert f"left pod network {unknown}: no owner lock, so not ours to judge" in done.stdout
        assert live not in done.stdout
        assert {live, unknown} <= netns()
        control_plane.pod_network.verify()  # still routed into its veth
        assert control_plane.request("GET", "/version")["gitVersion"].startswith("v1.")
    finally:
        subprocess.run(["ip", "netns", "del", unknown], check=False)
