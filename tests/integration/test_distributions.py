"""The repository's two distributions, built and installed as a stranger would, offline.

Both are built once (sdist first, then the wheel from the sdist, so an incomplete sdist
fails here) from a copy of the sources, with this environment's setuptools and no build
isolation. Each test installs wheels into a fresh venv with ``--no-index``: dependencies
come only from ``build/wheelhouse`` (the locked dependencies' wheels, ``make wheelhouse``).

- The framework (``k8s-controller-runtime``) alone: ``runtime`` imports, ``api``,
  ``controllers``, pydantic and kubernetes-asyncio are absent, and the
  ``examples/configmap_mirror.py`` operator, run from that venv against the real control
  plane, mirrors a labelled ConfigMap, writing as ``configmap-mirror``.
- A stand-in user project with its own ``api`` and ``controllers`` installs next to it:
  every file of the framework is as it was, ``pip check`` is clean.
- Both wheels: ``rayservice-manager --help`` works and ``pip check`` is clean.
"""

from __future__ import annotations

import asyncio
import base64
import csv
import hashlib
import os
import pathlib
import shutil
import signal
import sys
import tarfile
import textwrap
import zipfile
from typing import Any

import pytest

from runtime.client import client as client_
from runtime.client import errors, resources
from runtime.testing import assets, controlplane
from tests.integration import distributions_harness as d
from tests.integration.distributions_harness import ROOT, VERSION, WHEELHOUSE, Built, run, venv

CONFIGMAPS = resources.default_registry.for_kind("v1", "ConfigMap")

# The build, the venvs and the commands the install tests share
# (tests/integration/distributions_harness.py).
built = d.built


def pip_check(python: pathlib.Path) -> str:
    return run(sys.executable, "-m", "pip", "--python", python, "check")


def recorded_files(python: pathlib.Path, distribution: str) -> dict[pathlib.Path, str]:
    """Each file a distribution installed (its RECORD) -> the sha256 recorded for it."""
    site = pathlib.Path(
        run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))").strip()
    )
    [info] = site.glob(f"{distribution.replace('-', '_')}-*.dist-info")
    with (info / "RECORD").open() as record:
        return {site / row[0]: row[1] for row in csv.reader(record) if row[1]}


def sha256(path: pathlib.Path) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest())
    return "sha256=" + digest.rstrip(b"=").decode()


# -- what the builds hold ---------------------------------------------------------------------


def test_each_distribution_holds_its_own_packages_and_its_license(built: Built) -> None:
    with zipfile.ZipFile(built.framework) as wheel:
        framework = wheel.namelist()
        metadata = wheel.read(f"k8s_controller_runtime-{VERSION}.dist-info/METADATA").decode()
    with zipfile.ZipFile(built.operator) as wheel:
        operator = wheel.namelist()
        operator_metadata = wheel.read(f"rayservice_operator-{VERSION}.dist-info/METADATA").decode()
    assert {n.partition("/")[0] for n in framework} == {
        "runtime", f"k8s_controller_runtime-{VERSION}.dist-info",
    }  # fmt: skip
    modules = {
        f"runtime/{p.relative_to(ROOT / 'runtime')}" for p in (ROOT / "runtime").rglob("*.py")
    }
    assert modules <= set(framework), f"missing: {sorted(modules - set(framework))}"
    assert {"runtime/py.typed", "runtime/testing/kwok_stages.yaml"} <= set(framework)
    # What `python -m runtime.testing.assets` builds the control plane from: every file.
    go_modules = {
        p.relative_to(ROOT / "runtime").as_posix()
        for p in (ROOT / "runtime" / "testing" / "controlplane-modules").rglob("*")
        if p.is_file()
    }
    assert {"testing/controlplane-modules/versions.env",
            "testing/controlplane-modules/kubernetes/go.mod",
            "testing/controlplane-modules/kubernetes/tools.go",
            "testing/controlplane-modules/etcd/go.sum"} <= go_modules  # fmt: skip
    missing = {f"runtime/{name}" for name in go_modules} - set(framework)
    assert not missing, f"the wheel lacks {sorted(missing)}"
    assert f"k8s_controller_runtime-{VERSION}.dist-info/licenses/LICENSE" in framework
    assert {n.partition("/")[0] for n in operator} == {
        "api", "controllers", f"rayservice_operator-{VERSION}.dist-info",
    }, "the operator no longer ships runtime"  # fmt: skip
    assert {"api/py.typed", "controllers/py.typed"} <= set(operator)
    assert "Requires-Dist: pydantic" not in metadata
    assert 'Requires-Dist: kubernetes-asyncio>=32; extra == "full-kubeconfig"' in metadata
    assert f"Requires-Dist: k8s-controller-runtime[full-kubeconfig]=={VERSION}" in operator_metadata
    with tarfile.open(built.framework_sdist) as sdist:
        members = {m.name.partition("/")[2]: m for m in sdist.getmembers()}
    assert members["LICENSE"].isfile(), "the license is a file in the sdist, not a link"
    assert {"pyproject.toml", "README.md", "py.typed", "testing/kwok_stages.yaml"} <= set(members)
    assert go_modules <= set(members), f"the sdist lacks {sorted(go_modules - set(members))}"


# -- installed -------------------------------------------------------------------------------


async def test_the_framework_alone_runs_the_example_operator(
    built: Built,
    tmp_path: pathlib.Path,
    control_plane: controlplane.ControlPlane,
    client: client_.Client,
    namespace: str,
) -> None:
    python = venv(tmp_path / "venv", built.framework)
    probe = textwrap.dedent("""
        import importlib.util, runtime
        print(runtime.__version__)
        print(runtime.__file__)
        for name in ("api", "controllers", "pydantic", "pydantic_settings", "kubernetes_asyncio"):
            print(name, importlib.util.find_spec(name) is not None)
    """)
    version, where, *absent = run(python, "-c", probe, cwd=tmp_path).splitlines()
    assert version == VERSION
    assert str(tmp_path / "venv") in where, "runtime comes from the venv, not the checkout"
    assert absent == [f"{name} False" for name in (
        "api", "controllers", "pydantic", "pydantic_settings", "kubernetes_asyncio",
    )]  # fmt: skip
    pip_check(python)
    # The test kit's control-plane build reads its pins and Go modules from the venv, and
    # stamps as the checkout does (binaries built from one count as up to date for the other).
    stamps = (
        "from runtime.testing import assets as a; p = a.read_pins(); "
        "print(a.MODULES_DIR); print(*(a.stamp(c, p) for c in a.ALL_COMPONENTS), sep='|')"
    )
    modules, installed = run(python, "-c", stamps, cwd=tmp_path).splitlines()
    assert modules.startswith(str(tmp_path / "venv")), modules
    pins = assets.read_pins()
    assert installed == "|".join(assets.stamp(c, pins) for c in assets.ALL_COMPONENTS)

    # The example as a user has it: one file, outside any checkout.
    example = tmp_path / "mirror.py"
    shutil.copy2(ROOT / "examples" / "configmap_mirror.py", example)
    assert control_plane.kubeconfig is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "COVERAGE"))}
    process = await asyncio.create_subprocess_exec(
        str(python), str(example), "--kubeconfig", str(control_plane.kubeconfig),
        "--namespace", namespace, "--metrics-bind-address", "0",
        "--health-probe-bind-address", "0",
        cwd=tmp_path, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await client.create({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "labels": {"mirror": "true"}},
            "data": {"color": "blue"},
        }, namespace=namespace)  # fmt: skip
        mirror = await _eventually_get(client, namespace, "settings-mirror", process)
        assert mirror["data"] == {"color": "blue"}
        owners = mirror["metadata"]["ownerReferences"]
        assert [(o["kind"], o["name"], o.get("controller")) for o in owners] == [
            ("ConfigMap", "settings", True),
        ]  # fmt: skip
        managers = {entry["manager"] for entry in mirror["metadata"]["managedFields"]}
        assert managers == {"configmap-mirror"}, "written under the example's own name"
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, stderr[1].decode()[-2000:]


async def _eventually_get(
    client: client_.Client, namespace: str, name: str, process: asyncio.subprocess.Process
) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        try:
            return await client.get(CONFIGMAPS, namespace, name)
        except errors.NotFound:
            assert process.returncode is None, "the example operator exited"
            assert asyncio.get_running_loop().time() < deadline, f"no {name} within 30 s"
            await asyncio.sleep(0.2)


@pytest.fixture
def user_project(tmp_path: pathlib.Path) -> pathlib.Path:
    """A user's operator laid out like ours: its own api/ and controllers/ on the framework."""
    project = tmp_path / "acme"
    files = {
        "pyproject.toml": f"""
            [build-system]
            requires = ["setuptools>=61"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "acme-operator"
            version = "1.0.0"
            dependencies = ["k8s-controller-runtime>={VERSION}"]

            [project.scripts]
            acme-manager = "controllers.main:main"

            [tool.setuptools]
            packages = ["api", "controllers"]
        """,
        "api/__init__.py": 'KIND = "Widget"\n',
        "controllers/__init__.py": "",
        "controllers/main.py": """
            import runtime

            import api


            def main() -> None:
                options = runtime.ManagerOptions(name="acme-operator")
                print(api.KIND, options.leader_election_id, runtime.__version__)
        """,
    }
    for name, text in files.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(textwrap.dedent(text).lstrip())
    return project


def test_a_user_project_with_its_own_api_and_controllers_overwrites_nothing(
    built: Built, tmp_path: pathlib.Path, user_project: pathlib.Path
) -> None:
    python = venv(tmp_path / "venv", built.framework)
    before = recorded_files(python, "k8s-controller-runtime")
    assert len(before) > 50, "the framework's RECORD lists its modules"
    wheels = tmp_path / "wheels"
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
        "--wheel-dir", wheels, user_project)  # fmt: skip
    run(sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-index",
        "--find-links", WHEELHOUSE, *wheels.glob("*.whl"))  # fmt: skip

    assert recorded_files(python, "k8s-controller-runtime") == before
    changed = [str(path) for path, digest in before.items() if sha256(path) != digest]
    assert changed == [], "the framework's files are as it installed them"
    pip_check(python)
    out = run(tmp_path / "venv" / "bin" / "acme-manager", cwd=tmp_path)
    assert out.split() == ["Widget", "acme-operator-leader", VERSION]


def test_both_wheels_give_a_working_rayservice_manager(
    built: Built, tmp_path: pathlib.Path
) -> None:
    python = venv(tmp_path / "venv", built.framework, built.operator)
    pip_check(python)
    out = run(tmp_path / "venv" / "bin" / "rayservice-manager", "--help", cwd=tmp_path)
    assert "--leader-election-id" in out
    program = "import kubernetes_asyncio, controllers; print(controllers.__file__)"
    found = run(python, "-c", program, cwd=tmp_path)
    assert str(tmp_path / "venv") in found, "the full-kubeconfig extra came with the operator"
