"""The lock by which a pod network's harness says "mine, and I am alive" (no root needed here).

``reap`` (``make cluster-up`` / ``cluster-down``) removes an ``rso-*`` namespace only when
its lock file exists and nobody holds the lock; these tests pin that judgement.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from runtime.testing import controlplane

NAME = "rso-0123abcd"

HOLDER = """
import pathlib, sys, time
from runtime.testing import controlplane
controlplane.NETNS_LOCK_DIR = pathlib.Path(sys.argv[1])
controlplane._claim_netns(sys.argv[2])
print("claimed", flush=True)
time.sleep(120)  # holds the lock until killed
"""


@pytest.fixture
def lock_dir(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    directory = tmp_path / "locks"
    monkeypatch.setattr(controlplane, "NETNS_LOCK_DIR", directory)
    return directory


def test_a_claimed_name_is_live_until_released(lock_dir: pathlib.Path) -> None:
    assert controlplane._netns_owner(NAME) == "unknown"
    fd = controlplane._claim_netns(NAME)
    assert (lock_dir / f"{NAME}.lock").read_text() == f"{os.getpid()}\n"
    assert controlplane._netns_owner(NAME) == "live", "another descriptor cannot take it"
    assert controlplane._lock_if_orphaned(NAME) is None
    with pytest.raises(controlplane.PodNetworkError, match="already claimed"):
        controlplane._claim_netns(NAME)
    controlplane._release_netns(NAME, fd)
    assert not (lock_dir / f"{NAME}.lock").exists()
    assert controlplane._netns_owner(NAME) == "unknown"


def test_the_lock_of_a_killed_holder_is_free(lock_dir: pathlib.Path) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock_dir), NAME],
        stdout=subprocess.PIPE, text=True,
    ) as holder:  # fmt: skip
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline() == "claimed\n"
            assert controlplane._netns_owner(NAME) == "live"
        finally:
            holder.kill()
            holder.wait(10)
    assert controlplane._netns_owner(NAME) == "gone", "SIGKILL dropped the lock, not the file"
    fd = controlplane._lock_if_orphaned(NAME)
    assert fd is not None
    try:
        assert controlplane._netns_owner(NAME) == "live", "whoever reaps holds it meanwhile"
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    ("name", "ours"),
    [
        ("rso-0123abcd", True),
        ("rso-deadbeef", True),
        ("rso-0123abc", False),
        ("rso-0123abcde", False),
        ("rso-0123ABCD", False),
        ("rsoh0123abcd", False),
        ("cni-0123abcd", False),
        ("x-rso-0123abcd", False),
    ],
)
def test_only_names_a_pod_network_makes_are_considered(name: str, ours: bool) -> None:
    assert bool(controlplane._NETNS_NAME.fullmatch(name)) is ours


def test_pod_network_names_match_the_pattern(tmp_path: pathlib.Path) -> None:
    network = controlplane.PodNetwork(tmp_path)
    assert controlplane._NETNS_NAME.fullmatch(network.namespace)
    assert network.host_veth == "rsoh" + network.namespace.removeprefix("rso-")


def test_reap_drops_unheld_lock_files_that_name_no_namespace(lock_dir: pathlib.Path) -> None:
    lock_dir.mkdir()
    orphan, held = "rso-0000000a", "rso-0000000b"
    (lock_dir / f"{orphan}.lock").write_text("1\n")  # its harness died after `ip netns del`
    fd = controlplane._claim_netns(held)  # a harness between claiming and `ip netns add`
    (lock_dir / "someone-else.lock").write_text("")
    try:
        report = controlplane._reap_stale_pod_networks()
        assert not (lock_dir / f"{orphan}.lock").exists()
        assert (lock_dir / f"{held}.lock").exists()
        assert (lock_dir / "someone-else.lock").exists()
        assert [line for line in report if orphan in line or held in line] == []
    finally:
        controlplane._release_netns(held, fd)
