"""What the tests that install this repository's wheels share (``test_distributions.py``,
``test_quickstart.py``): the wheels built as a stranger's ``pip`` would build them, offline,
and fresh venvs with nothing but those wheels and ``build/wheelhouse``'s.

- :func:`build`: the framework's wheel (and, unless told otherwise, the operator's), each
  built from its sdist (so an incomplete sdist fails here), from a copy of the sources,
  with this environment's setuptools and no build isolation;
- :func:`built`: that build, once per test module, as a fixture (taken by naming it at a
  module's top level);
- :func:`venv`: a fresh venv with some wheels and their dependencies from the wheelhouse
  only (``--no-index``);
- :func:`run`: a command with no index, no user pip configuration and none of this
  process's ``PYTHON*``, ``PYTEST_*`` or ``COVERAGE_*`` variables (:func:`clean_env`: so
  nothing of the checkout or of this test run leaks into a venv's Python).

The wheelhouse (``make wheelhouse``) holds the wheels of ``requirements.lock`` (the
operator's runtime dependencies) and of ``requirements-testing.lock`` (the framework's
``testing`` extra: pytest and its plugins).
"""

from __future__ import annotations

import importlib.metadata
import os
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Mapping

import pytest
from packaging import version

import runtime

ROOT = pathlib.Path(__file__).resolve().parents[2]
WHEELHOUSE = ROOT / "build" / "wheelhouse"
VERSION = runtime.__version__
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in", "runtime", "api", "controllers")
_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without ``PIP_*``, ``PYTHON*``, ``PYTEST_*`` and
    ``COVERAGE_*`` variables, told to use no package index and no pip configuration;
    ``extra`` on top."""
    prefixes = ("PIP_", "PYTHON", "PYTEST_", "COVERAGE")
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(prefixes)},
        "PIP_NO_INDEX": "1",
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        **(extra or {}),
    }


def run(
    *args: str | os.PathLike[str],
    cwd: pathlib.Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
) -> str:
    """Run a command in :func:`clean_env` (plus ``env``); its stdout. A non-zero exit
    fails the test with both outputs."""
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=clean_env(env), capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


class Built:
    """Where :func:`build` put the sdists and wheels."""

    def __init__(self, directory: pathlib.Path) -> None:
        self.dir = directory
        self.framework_sdist = directory / f"k8s_controller_runtime-{VERSION}.tar.gz"
        self.operator_sdist = directory / f"rayservice_operator-{VERSION}.tar.gz"
        self.framework = directory / f"k8s_controller_runtime-{VERSION}-py3-none-any.whl"
        self.operator = directory / f"rayservice_operator-{VERSION}-py3-none-any.whl"


def build(tmp_path_factory: pytest.TempPathFactory, *, operator: bool = True) -> Built:
    """The framework's sdist and wheel (and the operator's, with ``operator``), offline."""
    assert (WHEELHOUSE / ".complete").is_file(), (
        f"{WHEELHOUSE} is missing or incomplete: run `make wheelhouse` (needs PyPI once)"
    )
    setuptools = version.Version(importlib.metadata.version("setuptools"))
    assert setuptools >= version.Version("77"), (
        f"setuptools {setuptools} cannot build these pyprojects (license expressions): "
        "run `make venv` (the dev extra asks for setuptools>=77)"
    )
    source = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, symlinks=True, ignore=_IGNORED)
        else:
            shutil.copy2(ROOT / name, source / name)
    out = Built(tmp_path_factory.mktemp("dist"))
    projects = [source / "runtime", *([source] if operator else [])]
    sdists = [out.framework_sdist, *([out.operator_sdist] if operator else [])]
    for project in projects:
        program = f"import setuptools.build_meta as b; b.build_sdist({str(out.dir)!r})"
        run(sys.executable, "-c", program, cwd=project)
    for sdist in sdists:
        run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
            "--wheel-dir", out.dir, sdist)  # fmt: skip
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """Both distributions, built once per module (see :func:`build`)."""
    return build(tmp_path_factory)


def venv(directory: pathlib.Path, *wheels: pathlib.Path) -> pathlib.Path:
    """A fresh venv at ``directory`` with ``wheels`` and their dependencies from the
    wheelhouse only; its python."""
    run(sys.executable, "-m", "venv", "--without-pip", directory)
    python = directory / "bin" / "python"
    run(sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-index",
        "--find-links", WHEELHOUSE, *wheels)  # fmt: skip
    return python
