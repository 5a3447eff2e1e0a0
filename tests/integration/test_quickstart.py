"""docs/quickstart.md followed as a stranger follows it, offline: from an empty directory
outside the checkout to a green ``pytest``.

- The page's files (its ``{code-block}``\\ s named ``quickstart/PATH``: :data:`FILES`) are
  written into a fresh directory outside the checkout, and nothing else.
- The framework's wheel is built (``distributions_harness``); ``python -m venv .venv`` and
  ``pip install 'k8s-controller-runtime[testing]'`` run there as the page says, with only
  ``--no-index --find-links`` added: the built wheel and ``build/wheelhouse`` (whose
  ``requirements-testing.lock`` wheels are pytest and its plugins).
- ``pytest`` (the venv's) runs there as the page says, with this repository's
  control-plane binaries in ``CONTROLPLANE_BIN_DIR`` (one of the ways the page gives),
  no ``PYTHONPATH`` and ``runtime`` imported from the venv: the page's tests pass, and
  what pytest prints is the page's output block (times, the directory and the Python
  version aside). The time from ``pip install`` to green is printed.
- The page's ``python greeter.py``, run against this suite's control plane with the
  page's CRD installed, makes a Greeting ``Ready`` with its ConfigMap, and stops on
  SIGTERM with status 0.
"""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import re
import shlex
import signal
import sys
import time
from typing import Any

import pytest

from runtime.client import client as client_
from runtime.client import resources
from runtime.testing import controlplane, waiting
from tests.integration import distributions_harness as d
from tests.unit.repository import test_docs

PAGE = test_docs.QUICKSTART
FILES = ("config/crd.yaml", "greeter.py", "test_greeter.py")
"""The quickstart project's files, each a block of the page (test_docs checks the claim)."""
TESTS = 3
"""How many tests ``test_greeter.py`` has."""

VENV = "python3 -m venv .venv"
INSTALL = "pip install 'k8s-controller-runtime[testing]'"
PYTEST = "pytest"
"""The page's commands that this test runs (each a line of one of its ``sh`` blocks)."""

GREETINGS = resources.Resource("example.com", "v1", "Greeting", "greetings")
CONFIGMAPS = resources.builtin("ConfigMap")


@dataclasses.dataclass(frozen=True)
class Project:
    dir: pathlib.Path
    python: pathlib.Path
    install_seconds: float


def sh_lines() -> set[str]:
    return {
        line.strip() for info, body, _ in test_docs.blocks(PAGE) if info == "sh"
        for line in body.splitlines()
    }  # fmt: skip


def output_block() -> str:
    """The page's ``text`` block of what ``pytest`` prints."""
    [block] = [b for info, b, _ in test_docs.blocks(PAGE) if info == "text" and "passed" in b]
    return block


def normalized(output: str) -> list[str]:
    """pytest's output lines without what differs from one machine or run to the next."""
    out = []
    for line in output.strip().splitlines():
        line = re.sub(r"^rootdir: .*", "rootdir: <dir>", line)
        line = re.sub(r"Python \d+\.\d+\.\d+\S*", "Python <version>", line)
        out.append(re.sub(r" in \d+\.\d+s ", " in <time> ", line))
    return out


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """The page's files in a fresh directory, with the page's venv and install (offline)."""
    framework = d.build(tmp_path_factory, operator=False)
    files = test_docs.quickstart_files(PAGE)
    assert set(files) == set(FILES)
    directory = tmp_path_factory.mktemp("greeter")
    assert not directory.resolve().is_relative_to(d.ROOT), "outside the checkout"
    for name, text in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text)

    assert {VENV, INSTALL, PYTEST} <= sh_lines(), "the page still says these commands"
    venv = shlex.split(VENV)
    d.run(sys.executable, *venv[1:], cwd=directory)  # the venv with pip in it, as the page's
    python = directory / ".venv" / "bin" / "python"
    offline = ["--no-index", "--find-links", framework.dir, "--find-links", d.WHEELHOUSE]
    started = time.monotonic()
    pip, install, *requirements = shlex.split(INSTALL)
    d.run(python, "-m", pip, install, "--quiet", *offline, *requirements, cwd=directory)
    return Project(directory, python, time.monotonic() - started)


def test_the_pages_tests_pass_in_a_fresh_venv(
    project: Project, bin_dir: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = "import runtime, sys; print(runtime.__file__); print(sys.path)"
    imported, path = d.run(project.python, "-c", where, cwd=project.dir).splitlines()
    assert imported.startswith(str(project.dir / ".venv")), "runtime comes from the venv"
    assert str(d.ROOT) not in path, "nothing of the checkout is on the venv's sys.path"

    started = time.monotonic()
    # A terminal of 80 columns without colours, as the page shows it.
    env = {"CONTROLPLANE_BIN_DIR": str(bin_dir), "COLUMNS": "80", "PY_COLORS": "0"}
    output = d.run(project.dir / ".venv" / "bin" / PYTEST, cwd=project.dir, env=env)
    seconds = time.monotonic() - started
    assert re.search(rf"^=+ {TESTS} passed in [\d.]+s =+$", output, re.M), output
    shown = normalized(output_block())
    assert normalized(output) == shown, f"the page's output block is not what it printed:\n{output}"
    with capsys.disabled():
        print(
            f"\nquickstart: pip install {project.install_seconds:.1f} s, pytest {seconds:.1f} s:"
            f" {project.install_seconds + seconds:.1f} s from pip install to green"
        )


async def test_the_pages_main_runs_the_operator_against_a_cluster(
    project: Project,
    control_plane: controlplane.ControlPlane,
    client: client_.Client,
    namespace: str,
) -> None:
    control_plane.install_crds(project.dir / "config")
    client.registry.register(GREETINGS)
    assert control_plane.kubeconfig is not None
    env = d.clean_env()
    process = await asyncio.create_subprocess_exec(
        str(project.python), "greeter.py", "--kubeconfig", str(control_plane.kubeconfig),
        "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
        cwd=project.dir, env=env, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await client.create({
            "apiVersion": "example.com/v1", "kind": "Greeting",
            "metadata": {"namespace": namespace, "name": "hello"},
            "spec": {"message": "Hello, world!"},
        })  # fmt: skip

        async def ready() -> Any:
            """the Greeting Ready"""
            assert process.returncode is None, "python greeter.py exited"
            greeting = await client.get(GREETINGS, namespace, "hello")
            conditions = (greeting.get("status") or {}).get("conditions") or []
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        await waiting.eventually(ready, within=30)
        configmap = await client.get(CONFIGMAPS, namespace, "hello")
        assert configmap["data"] == {"message": "Hello, world!"}
        managers = {entry["manager"] for entry in configmap["metadata"]["managedFields"]}
        assert managers == {"greeter"}, "written under the operator's own name"
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, stderr.decode()[-2000:]
