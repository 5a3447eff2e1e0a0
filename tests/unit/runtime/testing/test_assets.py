"""``python -m runtime.testing.assets`` against a fake ``go`` (it writes the ``-o`` files and
logs each call): the bin dir, the stamps, the component choice, the errors, the lock, the
shell wrapper ``hack/controlplane/build.sh``, and :func:`controlplane.default_bin_dir`'s
fallback to the cache. (The real build is what every integration test runs on.)"""

from __future__ import annotations

import ast
import fcntl
import json
import os
import pathlib
import shutil
import subprocess
import sys
import threading
from typing import Any

import pytest

from runtime.testing import assets, controlplane
from tests.unit import helpers

BUILD_SH = helpers.ROOT / "hack" / "controlplane" / "build.sh"
PINS = assets.read_pins()
K8S = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")

FAKE_GO = """\
#!{python}
import json, os, pathlib, sys

args = sys.argv[1:]
log = pathlib.Path(os.environ["FAKE_GO_LOG"])
keys = ("CGO_ENABLED", "GOTOOLCHAIN", "GOFLAGS", "GOBIN")
with log.open("a") as out:
    env = {{k: os.environ.get(k) for k in keys}}
    out.write(json.dumps({{"args": args, "cwd": os.getcwd(), "env": env}}) + "\\n")
if args == ["version"]:
    print("go version " + os.environ.get("FAKE_GO_VERSION", "go1.26.8") + " linux/amd64")
    sys.exit(0)
fail = os.environ.get("FAKE_GO_FAIL")
if fail and any(fail in a for a in args):
    print("server/main.go:1:1: undefined: boom")
    sys.exit(1)
if args[:3] == ["mod", "download", "-json"]:
    info = log.with_name("kubernetes.info")
    info.write_text(json.dumps({{"Version": "v", "Time": "2026-04-15T10:00:00Z"}}))
    print(json.dumps({{"Path": "k8s.io/kubernetes", "Info": str(info)}}, indent=1))
    sys.exit(0)

def write(path):
    path.write_text("#!/bin/sh\\n")
    path.chmod(0o755)

if args[0] == "build":
    out = args[args.index("-o") + 1]
    packages = args[args.index("-o") + 2:]
    if out.endswith("/"):
        for package in packages:
            write(pathlib.Path(out) / package.rsplit("/", 1)[-1])
    else:
        write(pathlib.Path(out))
elif args[0] == "install":
    write(pathlib.Path(os.environ["GOBIN"]) / args[-1].split("@")[0].rsplit("/", 1)[-1])
else:
    sys.exit("fake go: unexpected " + " ".join(args))
"""


class FakeGo:
    def __init__(self, directory: pathlib.Path) -> None:
        self.dir = directory
        self.log = directory / "calls.jsonl"
        directory.mkdir()
        go = directory / "go"
        go.write_text(FAKE_GO.format(python=sys.executable))
        go.chmod(0o755)

    def calls(self) -> list[dict[str, Any]]:
        """Each call since the last ``calls()``; the log is emptied."""
        if not self.log.exists():
            return []
        calls = [json.loads(line) for line in self.log.read_text().splitlines()]
        self.log.unlink()
        return calls

    def builds(self) -> list[list[str]]:
        """The ``build``/``install`` calls' arguments since the last look."""
        return [c["args"] for c in self.calls() if c["args"][0] in ("build", "install")]


@pytest.fixture
def go(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> FakeGo:
    fake = FakeGo(tmp_path / "gobin")
    monkeypatch.setenv("PATH", f"{fake.dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.setenv("FAKE_GO_LOG", str(fake.log))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for variable in ("GOTOOLCHAIN", "GOFLAGS", "GOBIN", "FAKE_GO_FAIL", "FAKE_GO_VERSION"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.delenv(controlplane.BIN_DIR_ENV, raising=False)
    monkeypatch.delenv(controlplane.ENVTEST_ENV, raising=False)
    return fake


def cache(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "cache" / "k8s-controller-runtime" / "controlplane" / PINS.kubernetes / "bin"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = assets.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def contents(bin_dir: pathlib.Path) -> set[str]:
    return {p.name for p in bin_dir.iterdir()}


def with_stamps(*names: str) -> set[str]:
    return {*names, *(f".{n}.stamp" for n in names), ".build.lock"}


def modules_copy(tmp_path: pathlib.Path) -> assets.Pins:
    shutil.copytree(assets.MODULES_DIR, tmp_path / "modules")
    return assets.read_pins(tmp_path / "modules")


# -- where --------------------------------------------------------------------------------


def test_the_bin_dir_is_per_user_and_keyed_by_the_kubernetes_version(
    go: FakeGo, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert assets.cache_bin_dir() == cache(tmp_path)
    assert PINS.kubernetes.startswith("v1.")
    assert PINS.kubernetes in cache(tmp_path).parts
    pins = modules_copy(tmp_path)
    env = pins.modules / "versions.env"
    env.write_text(env.read_text().replace(PINS.kubernetes, "v1.99.0"))
    bumped = assets.cache_bin_dir(assets.read_pins(pins.modules))
    assert bumped == cache(tmp_path).parents[1] / "v1.99.0" / "bin"


def test_print_bin_dir_prints_it_and_builds_nothing(
    go: FakeGo, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["--print-bin-dir"], capsys) == (0, f"{cache(tmp_path)}\n", "")
    assert run(["--print-bin-dir", "--bin-dir", str(tmp_path / "mine")], capsys) == (
        0, f"{tmp_path / 'mine'}\n", "",
    )  # fmt: skip
    assert go.calls() == []
    assert not (tmp_path / "cache").exists()
    assert not (tmp_path / "mine").exists()


def test_an_empty_xdg_cache_home_means_the_home_cache(
    go: FakeGo, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert assets.cache_bin_dir() == tmp_path / "home" / ".cache" / cache(tmp_path).relative_to(
        tmp_path / "cache"
    )


# -- what and how -------------------------------------------------------------------------


def test_the_default_set_is_built_stamped_and_the_bin_dir_is_the_last_line(
    go: FakeGo, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run([], capsys)
    assert code == 0, err
    bin_dir = cache(tmp_path)
    assert out.splitlines()[-1] == str(bin_dir)
    assert contents(bin_dir) == with_stamps("etcd", "kube-apiserver", "kubectl"), "no temp left"
    assert (bin_dir / ".etcd.stamp").read_text() == assets.stamp("etcd", PINS) + "\n"
    assert assets.stamp("kubectl", PINS).startswith(f"k8s.io/kubernetes {PINS.kubernetes} gomod=")
    calls = go.calls()
    builds = [c for c in calls if c["args"][0] == "build"]
    targets = [c["args"][-1] for c in builds]
    assert targets == [
        "k8s.io/kubernetes/cmd/kube-apiserver", "go.etcd.io/etcd/server/v3",
        "k8s.io/kubernetes/cmd/kubectl",
    ]  # fmt: skip
    assert {c["cwd"] for c in builds} == {
        str(assets.MODULES_DIR / "kubernetes"), str(assets.MODULES_DIR / "etcd"),
    }  # fmt: skip
    for call in builds:
        assert call["env"] | {"GOBIN": None} == {
            "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": "-buildvcs=false",
            "GOBIN": None,
        }  # fmt: skip
        assert "-trimpath" in call["args"]
    ldflags = builds[0]["args"][builds[0]["args"].index("-ldflags") + 1]
    major, minor = PINS.kubernetes[1:].split(".")[:2]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags = (f"gitVersion={PINS.kubernetes}", f"gitMajor={major}", f"gitMinor={minor}",
                 "gitCommit= ", "gitTreeState=clean", "buildDate=2026-04-15T10:00:00Z")  # fmt: skip
        for flag in flags:
            assert f"-X {package}.{flag}" in ldflags + " "
    assert ldflags.startswith("-s -w ")
    assert "[controlplane] built kube-apiserver" in err


def test_a_second_run_builds_nothing_and_needs_no_go(
    go: FakeGo, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run([], capsys)[0] == 0
    go.calls()
    (go.dir / "go").unlink()
    code, out, err = run([], capsys)
    assert (code, out) == (0, f"{cache(tmp_path)}\n")
    assert go.calls() == []
    for name in ("etcd", "kube-apiserver", "kubectl"):
        assert f"up to date: {name}" in err


def test_a_changed_go_mod_rebuilds_what_it_pins_and_a_version_bump_its_component(
    go: FakeGo, tmp_path: pathlib.Path
) -> None:
    pins = modules_copy(tmp_path)
    bin_dir = tmp_path / "bin"
    assert assets.build(assets.ALL_COMPONENTS, bin_dir, pins) == list(assets.ALL_COMPONENTS)
    assert assets.build(assets.ALL_COMPONENTS, bin_dir, pins) == []
    gomod = pins.modules / "kubernetes" / "go.mod"
    gomod.write_text(gomod.read_text() + "// changed\n")
    go.calls()
    assert assets.build(assets.ALL_COMPONENTS, bin_dir, pins) == list(K8S)
    assert len(go.builds()) == 2, "kube-apiserver, then the other three in one go build"
    env = pins.modules / "versions.env"
    env.write_text(env.read_text().replace(f"KWOK_VERSION={pins.kwok}", "KWOK_VERSION=v9.9.9"))
    bumped = assets.read_pins(pins.modules)
    assert assets.build(assets.ALL_COMPONENTS, bin_dir, bumped) == ["kwok"]
    assert go.builds() == [
        ["install", "-trimpath", "-ldflags", "-s -w", "sigs.k8s.io/kwok/cmd/kwok@v9.9.9"]
    ]
    (bin_dir / "etcd").chmod(0o644)
    assert assets.build(["etcd"], bin_dir, bumped) == ["etcd"], "not executable: rebuilt"


def test_components_choose_what_is_built(
    go: FakeGo, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["kwok", "etcdctl"], capsys)[0] == 0
    assert contents(cache(tmp_path)) == with_stamps("kwok", "etcdctl")
    [kwok] = [c for c in go.calls() if c["args"][0] == "install"]
    assert kwok["cwd"] == "/"
    assert kwok["env"]["GOBIN"].startswith(str(cache(tmp_path) / ".tmp."))
    assert run(["--all"], capsys)[0] == 0
    assert contents(cache(tmp_path)) == with_stamps(*assets.ALL_COMPONENTS)
    assert len(go.builds()) == 3, "kube-apiserver, etcd, then the rest of Kubernetes"
    with pytest.raises(SystemExit) as bad:
        assets.main(["kubelet"])
    assert bad.value.code == 2
    assert "unknown component: kubelet" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        assets.main(["--all", "etcd"])
    with pytest.raises(ValueError, match="kubelet"):
        assets.build(["kubelet"], tmp_path / "bin")


# -- errors -------------------------------------------------------------------------------


def test_no_go_is_a_clear_error_naming_the_version_needed(
    go: FakeGo, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    code, out, err = run([], capsys)
    assert (code, out) == (1, "")
    assert "'go' not found in PATH. Install Go (>= 1.26) from https://go.dev/dl/" in err


def test_too_old_a_go_is_refused_unless_it_may_fetch_a_toolchain(
    go: FakeGo, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FAKE_GO_VERSION", "go1.25.3")
    code, out, err = run(["etcd"], capsys)
    assert (code, out) == (1, "")
    assert "go1.25; these modules need Go >= 1.26" in err
    assert go.builds() == []
    monkeypatch.setenv("GOTOOLCHAIN", "auto")  # go itself switches to the go.mod's version
    assert run(["etcd"], capsys)[0] == 0


def test_a_failed_build_exits_1_with_go_s_output_and_keeps_what_was_built(
    go: FakeGo, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("FAKE_GO_FAIL", "etcd/server")
    code, out, err = run([], capsys)
    assert (code, out) == (1, "")
    assert f"FAILED building etcd {PINS.etcd} after" in err
    assert "server/main.go:1:1: undefined: boom" in err
    assert contents(cache(tmp_path)) == with_stamps("kube-apiserver"), "no etcd, no temp dir"


def test_concurrent_runs_wait_for_each_other(go: FakeGo, tmp_path: pathlib.Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    lines: list[str] = []
    waiting = threading.Event()

    def log(line: str) -> None:
        lines.append(line)
        if "waiting" in line:
            waiting.set()

    fd = os.open(bin_dir / ".build.lock", os.O_WRONLY | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another run, building
    built: list[list[str]] = []
    second = threading.Thread(target=lambda: built.append(assets.build(["etcd"], bin_dir, log=log)))
    second.start()
    try:
        assert waiting.wait(10), lines
        assert not (bin_dir / "etcd").exists()
        (bin_dir / "etcd").write_text("")  # what the other run built ...
        (bin_dir / "etcd").chmod(0o755)
        (bin_dir / ".etcd.stamp").write_text(assets.stamp("etcd", PINS) + "\n")
    finally:
        os.close(fd)  # ... before it let go
        second.join(10)
    assert built == [[]], "once it had the lock, etcd was up to date"
    assert f"another build is running for {bin_dir}; waiting ..." in lines


# -- as a script, and the repository's wrapper ----------------------------------------------


def test_it_runs_as_a_plain_script_on_the_standard_library_alone(tmp_path: pathlib.Path) -> None:
    source = pathlib.Path(assets.__file__).read_text()
    top = [n for n in ast.parse(source).body if isinstance(n, ast.Import | ast.ImportFrom)]
    modules = {a.name for n in top if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module for n in top if isinstance(n, ast.ImportFrom) and n.module}
    assert {m.partition(".")[0] for m in modules} - {"__future__"} <= sys.stdlib_module_names
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "c")}
    done = subprocess.run(
        [sys.executable, "-I", "-S", assets.__file__, "--print-bin-dir"],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    expected = tmp_path / "c" / cache(tmp_path).relative_to(tmp_path / "cache")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{expected}\n", "")


def test_build_sh_keeps_the_repository_s_cache_and_builds_everything(
    go: FakeGo, tmp_path: pathlib.Path
) -> None:
    ours = tmp_path / "cache" / "rayservice-operator" / "controlplane" / PINS.kubernetes / "bin"
    env = {**os.environ, "PYTHON": sys.executable}

    def build_sh(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BUILD_SH), *args], env=env, capture_output=True, text=True, check=False
        )

    printed = build_sh("--print-bin-dir")
    assert (printed.returncode, printed.stdout) == (0, f"{ours}\n")
    assert go.calls() == []
    done = build_sh()
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == str(ours)
    assert contents(ours) == with_stamps(*assets.ALL_COMPONENTS)
    go.calls()
    again = build_sh("etcd")
    assert (again.returncode, again.stdout) == (0, f"{ours}\n")
    assert "up to date: etcd" in again.stderr
    assert go.calls() == []
    usage = build_sh("--help")
    assert usage.returncode == 0
    assert "build.sh --print-bin-dir" in usage.stderr
    assert build_sh("--bogus").returncode == 2
    assert os.readlink(BUILD_SH.with_name("versions.env")) == (
        "../../runtime/testing/controlplane-modules/versions.env"
    )


# -- the harness finds what was built -----------------------------------------------------


def test_default_bin_dir_falls_back_to_the_cache_once_it_holds_etcd_and_kube_apiserver(
    go: FakeGo, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert controlplane.default_bin_dir() is None
    with pytest.raises(controlplane.ControlPlaneError) as none:
        controlplane.ControlPlane()
    for named in ("python -m runtime.testing.assets", "Go >= 1.26", str(cache(tmp_path)),
                  "CONTROLPLANE_BIN_DIR", "KUBEBUILDER_ASSETS"):  # fmt: skip
        assert named in str(none.value)
    assets.build(["etcd"], log=lambda _: None)
    assert controlplane.default_bin_dir() is None, "kube-apiserver is missing"
    assets.build(["kube-apiserver"], log=lambda _: None)
    assert go.builds(), "built for real (by the fake go)"
    (go.dir / "go").unlink()  # and from here on nothing builds
    assert controlplane.default_bin_dir() == cache(tmp_path)
    assert controlplane.ControlPlane().bin_dir == cache(tmp_path)
    monkeypatch.setenv(controlplane.ENVTEST_ENV, str(tmp_path / "envtest"))
    assert controlplane.default_bin_dir() == tmp_path / "envtest", "the variables still win"


def test_a_missing_binary_names_the_command_that_builds_it(tmp_path: pathlib.Path) -> None:
    cp = controlplane.ControlPlane(controlplane.Options(bin_dir=tmp_path))
    with pytest.raises(controlplane.ControlPlaneError) as missing:
        cp.start()
    assert f"python -m runtime.testing.assets --bin-dir {tmp_path} etcd" in str(missing.value)
    assert cp.dir is None


def test_a_note_says_when_the_harness_will_read_another_directory(
    go: FakeGo, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv(controlplane.BIN_DIR_ENV, str(tmp_path / "elsewhere"))
    code, out, err = run(["etcd"], capsys)
    assert (code, out) == (0, f"{cache(tmp_path)}\n")
    assert f"$CONTROLPLANE_BIN_DIR is set, so the harness uses {tmp_path / 'elsewhere'}" in err
    assert not (tmp_path / "elsewhere").exists(), "it does not build there"
    code, out, err = run(["etcd", "--bin-dir", str(tmp_path / "elsewhere")], capsys)
    assert (code, out) == (0, f"{tmp_path / 'elsewhere'}\n")
    assert "CONTROLPLANE_BIN_DIR" not in err
