"""Start-up failures are clear and leave nothing behind."""

from __future__ import annotations

import os
import pathlib
import subprocess

import pytest

from runtime.testing import controlplane

ROOT = pathlib.Path(__file__).parents[2]


def our_processes(marker: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if marker in line]


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
