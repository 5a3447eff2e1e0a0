"""The control-plane binaries, built from the Go module proxy into a per-user cache.

``python -m runtime.testing.assets`` (or, before any virtualenv exists, ``python3
runtime/testing/assets.py``: this module imports only the standard library) compiles
the binaries :mod:`runtime.testing.controlplane` runs, from the published Go modules
pinned in the package (no Docker, no release tarballs, nothing but Go >= 1.26 and a Go
module proxy)::

    python -m runtime.testing.assets                 # etcd, kube-apiserver, kubectl
    python -m runtime.testing.assets --all           # and the rest (see ALL_COMPONENTS)
    python -m runtime.testing.assets kwok etcdctl    # only these
    python -m runtime.testing.assets --print-bin-dir # where they go; builds nothing

**What.** Without arguments it builds :data:`DEFAULT_COMPONENTS`, what envtest's asset
directory holds and what the default :class:`~runtime.testing.controlplane.Options`
needs (etcd and kube-apiserver; kubectl to look around); ``--all`` builds
:data:`ALL_COMPONENTS` (adding kube-controller-manager, kube-scheduler, kwok and
etcdctl); component names build just those. The versions (``K8S_VERSION``,
``ETCD_VERSION``, ``KWOK_VERSION``) and the wrapper Go modules that make
``k8s.io/kubernetes`` and the etcd server buildable as dependencies are package data,
in ``controlplane-modules/`` next to this file (see ``hack/controlplane/README.md``
in the repository for why the wrappers exist).

**Where.** Into :func:`cache_bin_dir`, ``${XDG_CACHE_HOME:-~/.cache}/
k8s-controller-runtime/controlplane/<K8S_VERSION>/bin``, unless ``--bin-dir DIR``
says otherwise: a new Kubernetes version gets a new directory.
:func:`runtime.testing.controlplane.default_bin_dir` finds that directory by itself
once it holds etcd and kube-apiserver. ``$CONTROLPLANE_BIN_DIR`` is where the harness
*reads*, never where this builds (it may name binaries of your own, without stamps,
that a build would overwrite): with it set to another directory a note on stderr
says the harness will use that one; ``--bin-dir "$CONTROLPLANE_BIN_DIR"`` builds into
it on purpose.

**How.** A binary is built only when it is missing, not executable, or its stamp file
(``.<name>.stamp`` next to it) differs from :func:`stamp`: the version, plus for
Kubernetes and etcd a hash of the wrapper module's ``go.mod``, so a version bump or a
dependency change rebuilds and nothing else does. Go runs with ``CGO_ENABLED=0``,
``GOTOOLCHAIN=local`` (unless set: no go.mod line downloads a toolchain), ``-trimpath``,
``-buildvcs=false`` added to ``GOFLAGS`` and ``-ldflags "-s -w"``; the Kubernetes
commands are stamped with ``-X`` in ``k8s.io/component-base/version`` and
``k8s.io/client-go/pkg/version`` (``gitVersion``, ``gitMajor``, ``gitMinor``, an
empty ``gitCommit``, ``gitTreeState=clean``, ``buildDate`` = the module's publication
time from the proxy, else now), so ``kube-apiserver --version`` reports the pinned
version. Order: kube-apiserver, etcd, etcdctl, kwok, then the other Kubernetes
commands in one ``go build``. Each build writes into a temp directory inside the bin
dir and is renamed into place (atomic), binary first, then its stamp; concurrent runs
on one bin dir are serialised by ``flock(2)`` on ``.build.lock`` (the same lock the
shell version took), and the second one, once it has the lock, finds the first's
binaries up to date.

**Output.** Progress on stderr (``[controlplane] ...`` lines with timings); the last
stdout line is the bin dir, so ``BIN="$(python -m runtime.testing.assets | tail -n1)"``
works. Go is needed only when something must be built: a missing ``go`` is an error
naming Go >= 1.26 (and so is an older one, under ``GOTOOLCHAIN=local``). A failed
build prints Go's output. Exit status 0, 1 on any failure, 2 for bad arguments.

A cold build of the default set compiles most of Kubernetes' shared packages once
(minutes, see the testing guide for measured figures); Go's own build and module caches
(``go env GOCACHE GOMODCACHE``) make later builds, even into an empty bin dir, much
faster.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import fcntl
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

__all__ = [
    "AssetsError",
    "BuildError",
    "Pins",
    "build",
    "cache_bin_dir",
    "main",
    "read_pins",
    "stamp",
    "up_to_date",
]

MODULES_DIR = pathlib.Path(__file__).resolve().with_name("controlplane-modules")
"""The package data: ``versions.env`` and the wrapper modules ``kubernetes/``, ``etcd/``.
(A hyphen, so no tool takes the directory for a Python package.)"""

ALL_COMPONENTS = (
    "kube-apiserver",
    "etcd",
    "etcdctl",
    "kwok",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
)
"""Every binary this builds, in build order."""

DEFAULT_COMPONENTS = ("etcd", "kube-apiserver", "kubectl")
"""What a run without arguments builds: envtest's asset set."""

_ETCD_PACKAGES = {"etcd": "go.etcd.io/etcd/server/v3", "etcdctl": "go.etcd.io/etcd/etcdctl/v3"}
_K8S_VERSION_PACKAGES = ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
_MINIMUM_GO = (1, 26)
_LOCK = ".build.lock"


class AssetsError(RuntimeError):
    """The binaries cannot be built: no (or too old a) Go, a broken ``versions.env``."""


class BuildError(AssetsError):
    """A ``go build`` failed; :attr:`output` is what Go printed."""

    def __init__(self, message: str, output: str) -> None:
        super().__init__(message)
        self.output = output


@dataclasses.dataclass(frozen=True)
class Pins:
    """The pinned versions (``versions.env``) and the directory of the wrapper modules."""

    kubernetes: str
    """``K8S_VERSION``, e.g. ``v1.35.4``: kube-apiserver, the controller manager, the
    scheduler and kubectl; it also names the cache directory."""
    etcd: str
    """``ETCD_VERSION``: etcd and etcdctl."""
    kwok: str
    """``KWOK_VERSION``: kwok."""
    modules: pathlib.Path
    """Holds ``kubernetes/go.mod`` and ``etcd/go.mod`` (and ``versions.env``)."""


def read_pins(modules: pathlib.Path = MODULES_DIR) -> Pins:
    """The pins in ``modules/versions.env``: ``KEY=value`` lines, ``#`` comments (the
    file is also ``source``-d by shell scripts). :class:`AssetsError` when it is missing
    or lacks a version."""
    path = modules / "versions.env"
    try:
        text = path.read_text()
    except OSError as exc:
        raise AssetsError(f"cannot read the pinned versions: {exc}") from exc
    values: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values[key.strip()] = re.split(r"\s+#", value, maxsplit=1)[0].strip()
    missing = [k for k in ("K8S_VERSION", "ETCD_VERSION", "KWOK_VERSION") if not values.get(k)]
    if missing:
        raise AssetsError(f"{', '.join(missing)} missing from {path}")
    return Pins(values["K8S_VERSION"], values["ETCD_VERSION"], values["KWOK_VERSION"], modules)


def cache_bin_dir(pins: Pins | None = None) -> pathlib.Path:
    """``${XDG_CACHE_HOME:-~/.cache}/k8s-controller-runtime/controlplane/<K8S_VERSION>/bin``
    (an empty ``XDG_CACHE_HOME`` counts as unset): where a build goes by default."""
    pins = pins or read_pins()
    base = os.environ.get("XDG_CACHE_HOME") or str(pathlib.Path.home() / ".cache")
    return pathlib.Path(base) / "k8s-controller-runtime" / "controlplane" / pins.kubernetes / "bin"


def _file_hash(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def stamp(component: str, pins: Pins) -> str:
    """What ``.<component>.stamp`` must hold for ``component`` to be up to date, e.g.
    ``k8s.io/kubernetes v1.35.4 gomod=eba6571e63f7f0d8`` (the first 16 hex digits of
    the wrapper go.mod's sha256) or ``sigs.k8s.io/kwok v0.7.0``."""
    if component in _ETCD_PACKAGES:
        return f"go.etcd.io/etcd {pins.etcd} gomod={_file_hash(pins.modules / 'etcd' / 'go.mod')}"
    if component == "kwok":
        return f"sigs.k8s.io/kwok {pins.kwok}"
    gomod = _file_hash(pins.modules / "kubernetes" / "go.mod")
    return f"k8s.io/kubernetes {pins.kubernetes} gomod={gomod}"


def _version(component: str, pins: Pins) -> str:
    if component in _ETCD_PACKAGES:
        return pins.etcd
    return pins.kwok if component == "kwok" else pins.kubernetes


def up_to_date(bin_dir: pathlib.Path, component: str, pins: Pins) -> bool:
    """Whether ``bin_dir/component`` is an executable file and its stamp matches."""
    binary = bin_dir / component
    stamp_file = bin_dir / f".{component}.stamp"
    if not (binary.is_file() and os.access(binary, os.X_OK) and stamp_file.is_file()):
        return False
    return stamp_file.read_text().rstrip("\n") == stamp(component, pins)


def _log(message: str) -> None:
    print(f"[controlplane] {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _locked(bin_dir: pathlib.Path, log: Callable[[str], None]) -> Iterator[None]:
    fd = os.open(bin_dir / _LOCK, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"another build is running for {bin_dir}; waiting ...")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


class _Builder:
    """One run's builds, into ``tmp`` inside ``bin_dir``."""

    def __init__(
        self,
        go: str,
        pins: Pins,
        bin_dir: pathlib.Path,
        tmp: pathlib.Path,
        log: Callable[[str], None],
    ) -> None:
        self.go = go
        self.pins = pins
        self.bin_dir = bin_dir
        self.tmp = tmp
        self.log = log
        self.env = dict(os.environ)
        self.env["CGO_ENABLED"] = "0"
        self.env["GOTOOLCHAIN"] = self.env.get("GOTOOLCHAIN") or "local"
        self.env["GOFLAGS"] = f"{self.env.get('GOFLAGS', '')} -buildvcs=false".strip()

    def run(
        self,
        label: str,
        version: str,
        args: Sequence[str],
        cwd: pathlib.Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.log(f"building {label} {version} ...")
        start = time.monotonic()
        done = subprocess.run(
            [self.go, *args],
            cwd=cwd,
            env={**self.env, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
        took = round(time.monotonic() - start)
        if done.returncode != 0:
            raise BuildError(f"FAILED building {label} {version} after {took}s", done.stdout)
        self.log(f"built {label} {version} in {took}s")

    def install(self, name: str) -> None:
        built = self.tmp / name
        if not (built.is_file() and os.access(built, os.X_OK)):
            raise BuildError(f"build of {name} produced no binary", "")
        os.replace(built, self.bin_dir / name)
        stamp_file = self.tmp / f".{name}.stamp"
        stamp_file.write_text(stamp(name, self.pins) + "\n")
        os.replace(stamp_file, self.bin_dir / stamp_file.name)

    def build_date(self) -> str:
        """The Kubernetes module's publication time (the proxy's ``.info``), else now."""
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            done = subprocess.run(
                [self.go, "mod", "download", "-json", f"k8s.io/kubernetes@{self.pins.kubernetes}"],
                cwd=self.pins.modules / "kubernetes",
                env=self.env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                check=False,
            )
            info = json.loads(done.stdout)["Info"]
            published = json.loads(pathlib.Path(info).read_text())["Time"]
            if isinstance(published, str) and published:
                return published
        return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def k8s_ldflags(self) -> str:
        version = self.pins.kubernetes
        major, minor = version.removeprefix("v").split(".")[:2]
        date = self.build_date()
        flags = ["-s", "-w"]
        for package in _K8S_VERSION_PACKAGES:  # module zips carry no git metadata: no commit
            flags += [
                f"-X {package}.gitVersion={version}",
                f"-X {package}.gitMajor={major}",
                f"-X {package}.gitMinor={minor}",
                f"-X {package}.gitCommit=",
                f"-X {package}.gitTreeState=clean",
                f"-X {package}.buildDate={date}",
            ]
        return " ".join(flags)

    def kubernetes(self, names: Sequence[str]) -> None:
        """One ``go build`` for these commands (they share the compile work)."""
        packages = [f"k8s.io/kubernetes/cmd/{n}" for n in names]
        args = ["build", "-trimpath", "-ldflags", self.k8s_ldflags(), "-o", f"{self.tmp}/"]
        self.run(",".join(names), self.pins.kubernetes, [*args, *packages],
                 cwd=self.pins.modules / "kubernetes")  # fmt: skip
        for name in names:
            self.install(name)

    def etcd(self, name: str) -> None:
        args = ["build", "-trimpath", "-ldflags", "-s -w", "-o", str(self.tmp / name)]
        self.run(
            name, self.pins.etcd, [*args, _ETCD_PACKAGES[name]], cwd=self.pins.modules / "etcd"
        )
        self.install(name)

    def kwok(self) -> None:
        package = f"sigs.k8s.io/kwok/cmd/kwok@{self.pins.kwok}"
        # Outside any module (and any go.work): `go install pkg@version` builds kwok with
        # its own go.mod.
        self.run("kwok", self.pins.kwok, ["install", "-trimpath", "-ldflags", "-s -w", package],
                 cwd=pathlib.Path("/"), env={"GOBIN": str(self.tmp)})  # fmt: skip
        self.install("kwok")


def _find_go(log: Callable[[str], None]) -> str:
    go = shutil.which("go")
    if go is None:
        raise AssetsError(
            "'go' not found in PATH. Install Go (>= 1.26) from https://go.dev/dl/ and retry."
        )
    done = subprocess.run([go, "version"], capture_output=True, text=True, check=False)
    log(done.stdout.strip() or f"{go}: no version")
    found = re.search(r"\bgo(\d+)\.(\d+)", done.stdout)
    local = (os.environ.get("GOTOOLCHAIN") or "local") == "local"
    if local and found and (int(found[1]), int(found[2])) < _MINIMUM_GO:
        raise AssetsError(
            f"{go} is go{found[1]}.{found[2]}; these modules need Go >= 1.26 "
            "(https://go.dev/dl/), and GOTOOLCHAIN=local downloads no newer one."
        )
    return go


def build(
    components: Iterable[str] = DEFAULT_COMPONENTS,
    bin_dir: pathlib.Path | None = None,
    pins: Pins | None = None,
    *,
    log: Callable[[str], None] = _log,
) -> list[str]:
    """Build what of ``components`` is missing or out of date into ``bin_dir`` (default:
    :func:`cache_bin_dir`), as the module docstring says; the names it built, in build
    order (empty: everything was up to date). :class:`BuildError` (with Go's output) when
    a build fails, :class:`AssetsError` when Go is missing or too old, ``ValueError`` for
    an unknown component."""
    pins = pins or read_pins()
    wanted = set(components)
    unknown = sorted(wanted - set(ALL_COMPONENTS))
    if unknown:
        raise ValueError(
            f"unknown component: {', '.join(unknown)} (known: {' '.join(ALL_COMPONENTS)})"
        )
    bin_dir = bin_dir or cache_bin_dir(pins)
    log(f"bin dir: {bin_dir}")
    bin_dir.mkdir(parents=True, exist_ok=True)
    with _locked(bin_dir, log):
        needed = []
        for name in ALL_COMPONENTS:
            if name not in wanted:
                continue
            if up_to_date(bin_dir, name, pins):
                log(f"up to date: {name} {_version(name, pins)}")
            else:
                needed.append(name)
        if not needed:
            return []
        go = _find_go(log)
        with tempfile.TemporaryDirectory(prefix=".tmp.", dir=bin_dir) as tmp:
            builder = _Builder(go, pins, bin_dir, pathlib.Path(tmp), log)
            if "kube-apiserver" in needed:  # first: it compiles most of the shared packages
                builder.kubernetes(["kube-apiserver"])
            for name in ("etcd", "etcdctl"):
                if name in needed:
                    builder.etcd(name)
            if "kwok" in needed:
                builder.kwok()
            rest = [
                n for n in ("kube-controller-manager", "kube-scheduler", "kubectl") if n in needed
            ]
            if rest:
                builder.kubernetes(rest)
    return needed


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m runtime.testing.assets",
        description="Build the control-plane binaries from the Go module proxy (needs Go "
        ">= 1.26) into a per-user cache; the last stdout line is the bin dir.",
        epilog=f"components: {' '.join(ALL_COMPONENTS)} (default: {' '.join(DEFAULT_COMPONENTS)})",
    )
    parser.add_argument("components", nargs="*", metavar="COMPONENT",
                        help="build only these")  # fmt: skip
    parser.add_argument("--all", action="store_true", help="build every component")
    parser.add_argument("--bin-dir", type=pathlib.Path, default=None,
                        help="build into DIR instead of the per-user cache")  # fmt: skip
    parser.add_argument("--print-bin-dir", action="store_true",
                        help="print the bin dir and exit, building nothing")  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring); the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    unknown = [c for c in args.components if c not in ALL_COMPONENTS]
    if unknown:
        parser.error(f"unknown component: {unknown[0]} (known: {' '.join(ALL_COMPONENTS)})")
    if args.all and args.components:
        parser.error("--all or component names, not both")
    try:
        pins = read_pins()
        bin_dir = (args.bin_dir or cache_bin_dir(pins)).absolute()
        if args.print_bin_dir:
            print(bin_dir)
            return 0
        components = ALL_COMPONENTS if args.all else args.components or DEFAULT_COMPONENTS
        start = time.monotonic()
        build(components, bin_dir, pins)
    except AssetsError as exc:
        _log(f"ERROR: {exc}")
        if isinstance(exc, BuildError) and exc.output:
            print(exc.output, file=sys.stderr, end="" if exc.output.endswith("\n") else "\n")
        return 1
    _log(f"done in {round(time.monotonic() - start)}s")
    harness = os.environ.get("CONTROLPLANE_BIN_DIR")
    if harness and pathlib.Path(harness).absolute() != bin_dir:
        _log(f"note: $CONTROLPLANE_BIN_DIR is set, so the harness uses {harness}, not this")
    print(bin_dir, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
