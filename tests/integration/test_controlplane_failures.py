"""Start-up failures are clear and leave nothing behind."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess

import pytest

from runtime.testing import controlplane

ROOT = pathlib.Path(__file__).parents[2]


def our_processes(marker: str) -> list[str]:
    """The command lines (as ``ps -eo args`` shows them) of live processes naming ``marker``;
    read from /proc, so a machine without procps runs this test too."""
    lines = []
    for cmdline in pathlib.Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # the process ended meanwhile
            continue
        if marker in args:
            lines.append(args)
    return lines


def test_a_component_dying_at_start_up_is_named_with_its_log(bin_dir: pathlib.Path) -> None:
    cp = controlplane.ControlPlane(
        controlplane.Options(
            bin_dir=bin_dir, extra_apiserver_flags=["--no-such-flag=1"], start_timeout=20
        )
    )
    with pytest.raises(controlplane.ControlPlaneError) as info:
        cp.start()
    assert info.value.component == "kube-apiserver"
    assert "no-such-flag" in info.value.log_tail
    assert cp.dir is None, "the temp dir is removed"
    assert our_processes("--no-such-flag") == []
    assert cp.etcd_port
    assert our_processes(f"127.0.0.1:{cp.etcd_port}") == [], "etcd is stopped too"


def test_a_missing_binary_is_named(tmp_path: pathlib.Path) -> None:
    cp = controlplane.ControlPlane(controlplane.Options(bin_dir=tmp_path))
    with pytest.raises(controlplane.ControlPlaneError, match=r"etcd: binary .* missing"):
        cp.start()
    assert cp.dir is None


def test_build_without_go_fails_with_a_clear_message(tmp_path: pathlib.Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path)}
    assert not any(os.access(f"{d}/go", os.X_OK) for d in env["PATH"].split(":"))
    done = subprocess.run(
        [str(ROOT / "hack/controlplane/build.sh"), "etcd"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "go" in done.stderr.lower()
    assert "not found" in done.stderr.lower() or "install" in done.stderr.lower()


def test_a_port_taken_by_someone_else_is_retried_with_new_ports(
    bin_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    real = controlplane.free_ports
    handed_out: list[list[int]] = []

    def first_one_taken(count: int) -> list[int]:
        ports = real(count)
        if not handed_out:
            ports[0] = taken  # lose the race for etcd's client port
        handed_out.append(ports)
        return ports

    monkeypatch.setattr(controlplane, "free_ports", first_one_taken)
    try:
        with controlplane.running(controlplane.Options(bin_dir=bin_dir)) as cp:
            assert cp.etcd_port != taken
            assert cp.request("GET", "/version")["gitVersion"].startswith("v1.")
        assert handed_out[0][0] == taken, "the first attempt did use the taken port"
    finally:
        squatter.close()
