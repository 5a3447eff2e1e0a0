"""``hack/doctor.sh`` (``make doctor``, the first step of ``make test`` and ``make run``)
names every missing prerequisite at once, with the one command that installs them, and
passes where everything is there. Run in a fake machine: a PATH of stand-ins, so each
case decides what is "installed"."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

from tests.unit import helpers

DOCTOR = helpers.ROOT / "hack" / "doctor.sh"
# What the script itself runs; present on every machine it is meant for.
BASICS = ("bash", "sed", "sort", "head", "tr", "cat")


def stand_in(bin_dir: pathlib.Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def machine(tmp_path: pathlib.Path, *, python: str | None = "3.11.2", go: str | None = "1.26.8",
            tools: tuple[str, ...] = ("make", "openssl", "ip", "flock", "unshare", "ps", "pgrep",
                                   "sysctl", "wget"),
            apt: bool = True, venv: bool = True, uid: int = 0) -> pathlib.Path:  # fmt: skip
    """A bin dir holding only the basics and the stand-ins asked for."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    stand_in(bin_dir, "id", f"echo {uid}")
    for name in BASICS:
        found = shutil.which(name)
        assert found, name
        (bin_dir / name).symlink_to(found)
    if python is not None:
        major, minor, micro = python.split(".")
        stand_in(bin_dir, "python3", "\n".join([
            f'case "$2" in *ensurepip*) exit {0 if venv else 1};; esac',
            f"echo {major}.{minor}.{micro}",
        ]))  # fmt: skip
    if go is not None:
        stand_in(bin_dir, "go", f"echo go{go}")
    for name in tools:
        stand_in(bin_dir, name, "exit 0")
    if apt:
        stand_in(bin_dir, "apt-get", "exit 0")
    return bin_dir


def doctor(bin_dir: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    certificates = bin_dir.parent / "ca.crt"
    certificates.write_text("a bundle\n")
    env = {"PATH": str(bin_dir), "HOME": str(bin_dir.parent), "SSL_CERT_FILE": str(certificates)}
    return subprocess.run(
        [str(DOCTOR), *args], env=env, capture_output=True, text=True, check=False
    )


def test_a_machine_with_the_prerequisites_passes(tmp_path: pathlib.Path) -> None:
    done = doctor(machine(tmp_path), "run")
    assert done.returncode == 0, done.stderr
    assert "every prerequisite of make run is here" in done.stdout


def test_everything_missing_is_named_at_once_with_one_install_command(
    tmp_path: pathlib.Path,
) -> None:
    done = doctor(machine(tmp_path, python=None, go=None, tools=()), "run")
    assert done.returncode == 1
    for what in ("Python 3.11+", "Go 1.26+", "make", "openssl", "iproute2", "flock", "unshare",
                 "procps", "wget"):  # fmt: skip
        assert what in done.stderr, what
    install = [line for line in done.stderr.splitlines() if line.startswith("install them")]
    packages = "iproute2 make openssl procps python3 python3-venv util-linux wget"
    assert install == [f"install them with:  apt-get update && apt-get install -y {packages}"]


def test_old_versions_and_a_python_without_venv_are_named(tmp_path: pathlib.Path) -> None:
    old = doctor(machine(tmp_path / "old", python="3.10.12", go="1.25.3"), "run")
    assert old.returncode == 1
    assert "Python 3.11+ (python3 is 3.10.12" in old.stderr
    assert "Go 1.26+ (go is 1.25.3)" in old.stderr
    novenv = doctor(machine(tmp_path / "novenv", venv=False), "run")
    assert novenv.returncode == 1
    assert "venv module" in novenv.stderr
    assert "apt-get update && apt-get install -y python3-venv" in novenv.stderr


def test_make_test_needs_root_and_make_run_does_not(tmp_path: pathlib.Path) -> None:
    user = machine(tmp_path / "user", uid=1000)
    done = doctor(user, "test")
    assert done.returncode == 1
    assert "root: the tests build a pod network" in done.stderr
    assert "install them" not in done.stderr, "no package installs root"
    assert doctor(user, "run").returncode == 0
    assert doctor(machine(tmp_path / "root"), "test").returncode == 0


def test_without_a_known_package_manager_it_names_the_packages(tmp_path: pathlib.Path) -> None:
    tools = ("make", "ip", "flock", "unshare", "ps", "pgrep", "sysctl", "wget")
    done = doctor(machine(tmp_path, tools=tools, apt=False), "run")
    assert done.returncode == 1
    assert "package manager: openssl" in done.stderr
