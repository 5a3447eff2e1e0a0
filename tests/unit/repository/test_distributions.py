"""The two distributions' metadata agree with the code (the builds themselves are tested in
``tests/integration/test_distributions.py``):

- ``runtime/pyproject.toml`` (k8s-controller-runtime) lists every package of ``runtime``
  and declares every third-party module ``runtime`` imports; one imported only inside a
  function may come from an extra instead (kubernetes-asyncio: ``full-kubeconfig``);
- ``pyproject.toml`` (rayservice-operator) declares what ``api`` and ``controllers``
  import, and pins the framework at ``runtime.__version__``, the one written version
  (the Helm chart's ``appVersion``, the image tag, is checked against it too);
- every package ships ``py.typed``.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from typing import Any

import yaml
from packaging import requirements, utils

import runtime
from tests.unit import helpers

ROOT = helpers.ROOT
FRAMEWORK: dict[str, Any] = tomllib.loads((ROOT / "runtime" / "pyproject.toml").read_text())
OPERATOR: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())


def names(texts: list[str]) -> set[str]:
    return {utils.canonicalize_name(requirements.Requirement(t).name) for t in texts}


def third_party_imports(package: str) -> dict[str, bool]:
    """Top-level module name -> whether some module of ``package`` imports it at module
    level (``False``: only inside functions)."""
    found: dict[str, bool] = {}
    for path in (ROOT / package).rglob("*.py"):
        tree = ast.parse(path.read_text())
        nested = {
            id(node)
            for function in ast.walk(tree)
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
            for node in ast.walk(function)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.partition(".")[0]
                if top in sys.stdlib_module_names or top in ("runtime", "api", "controllers"):
                    continue
                found[top] = found.get(top, False) or id(node) not in nested
    return found


def providers(module: str) -> set[str]:
    distributions = importlib.metadata.packages_distributions().get(module, [])
    assert distributions, f"no installed distribution provides {module!r}"
    return {utils.canonicalize_name(d) for d in distributions}


def test_the_framework_lists_every_package_of_runtime() -> None:
    packages = sorted(
        ".".join(("runtime", *init.parent.relative_to(ROOT / "runtime").parts))
        for init in (ROOT / "runtime").rglob("__init__.py")
        if "build" not in init.relative_to(ROOT / "runtime").parts  # `pip wheel ./runtime`'s
    )
    assert FRAMEWORK["tool"]["setuptools"]["packages"] == packages
    assert FRAMEWORK["tool"]["setuptools"]["package-dir"] == {"runtime": "."}


def test_the_framework_declares_what_runtime_imports_and_nothing_of_the_operator() -> None:
    required = names(FRAMEWORK["project"]["dependencies"])
    optional = set().union(*map(names, FRAMEWORK["project"]["optional-dependencies"].values()))
    imports = third_party_imports("runtime")
    assert imports, "the scan found no import"
    kit = names(FRAMEWORK["project"]["optional-dependencies"]["testing"])
    for module, at_module_level in sorted(imports.items()):
        declared = required if at_module_level else required | optional
        if module == "pytest":  # only runtime/testing/pytest_plugin, which pytest loads
            declared = kit
        assert providers(module) & declared, f"runtime imports {module}, not declared"
    assert imports.get("kubernetes_asyncio") is False, "only imported where it is needed"
    assert not {"pydantic", "pydantic-settings", "ray", "kubernetes-asyncio"} & required


def test_the_operator_declares_what_api_and_controllers_import() -> None:
    declared = names(OPERATOR["project"]["dependencies"])
    for package in ("api", "controllers"):
        for module in sorted(third_party_imports(package)):
            assert providers(module) & declared, f"{package} imports {module}, not declared"


def test_one_version_for_both_distributions() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", runtime.__version__)
    for project in (FRAMEWORK, OPERATOR):
        assert project["project"]["dynamic"] == ["version"]
        assert project["tool"]["setuptools"]["dynamic"]["version"] == {
            "attr": "runtime.__version__"
        }
    [pin] = [
        requirements.Requirement(text)
        for text in OPERATOR["project"]["dependencies"]
        if text.startswith("k8s-controller-runtime")
    ]
    assert str(pin.specifier) == f"=={runtime.__version__}", "bump the operator's pin too"
    assert pin.extras == {"full-kubeconfig"}, "the operator reads any kubeconfig"
    chart = yaml.safe_load((ROOT / "helm-chart" / "rayservice-operator" / "Chart.yaml").read_text())
    assert chart["appVersion"] == runtime.__version__, "the chart's image tag follows too"


def test_every_package_is_typed_and_licensed() -> None:
    data = {**FRAMEWORK["tool"]["setuptools"]["package-data"]}
    data.update(OPERATOR["tool"]["setuptools"]["package-data"])
    for package in ("runtime", "api", "controllers"):
        assert (ROOT / package / "py.typed").is_file()
        assert "py.typed" in data[package]
    assert (ROOT / "runtime" / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert FRAMEWORK["project"]["license"] == OPERATOR["project"]["license"] == "Apache-2.0"


def test_the_frameworks_readme_example_compiles() -> None:
    readme = (ROOT / "runtime" / "README.md").read_text()
    [block] = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    namespace: dict[str, object] = {}
    exec(compile(block, "runtime/README.md", "exec"), namespace)
    assert callable(namespace["main"])
