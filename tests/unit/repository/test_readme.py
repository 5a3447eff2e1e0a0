"""README.md is one screen for a newcomer, and every promise in it is checked here:

- at most 150 lines;
- its prerequisites' install line is the one ``.ci/run`` runs, and holds every package
  ``hack/doctor.sh`` asks for on Debian (so CI installs exactly what the README says);
- its two commands are ``make test`` and ``make run``, and each ``make`` target named in a
  shell block of the README or the docs exists;
- each of the two does what its comment says: ``make test`` runs pytest under coverage
  over every tier (no path narrows ``testpaths``, which hold ``tests/`` and the packages'
  doctests) after the doctor and the control plane; ``make run`` starts
  ``rayservice-manager`` (the ``controllers.main`` script) against ``$KUBECONFIG`` or the
  local control plane's kubeconfig;
- each relative link of the README and the docs' Markdown points at a file that exists;
- each figure of its headline table is the figure of the same row and column on the docs'
  performance page, where the benchmarks write them (a figure lives in one place).
"""

from __future__ import annotations

import pathlib
import re
import tomllib

import pytest

from tests.unit import helpers
from tests.unit.repository import test_docs

README = helpers.ROOT / "README.md"
PERFORMANCE = helpers.ROOT / "docs" / "operator" / "performance.md"
PAGES = [README, *sorted((helpers.ROOT / "docs").rglob("*.md"))]
MAKE = re.compile(r"(?:^|&&|;|\|\|)\s*(?:[A-Z_]+=\S+\s+)*make ([a-z][a-z0-9-]*)", re.MULTILINE)
PACKAGE = re.compile(r'\bpackage "?([a-z][a-z0-9.+-]*)"? "?[a-z][a-z0-9.+-]*"?\s*(?:;|$)', re.M)
APT = re.compile(r"apt-get install -y(?: -qq)? ([a-z0-9 .+-]+)")


def shell_blocks(page: pathlib.Path) -> list[str]:
    return [body for info, body, _ in test_docs.blocks(page) if info == "sh"]


def make_targets() -> set[str]:
    text = (helpers.ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-zA-Z0-9_-]+):", text, flags=re.MULTILINE))


def test_the_readme_fits_one_screen_of_reading() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; move the reference to docs/"


def test_ci_installs_what_the_readme_names_and_the_doctor_asks_for() -> None:
    readme = APT.findall(README.read_text())
    assert len(readme) == 1, "README names one install line for its prerequisites"
    ci = APT.findall((helpers.ROOT / ".ci" / "run").read_text())
    assert ci == readme, ".ci/run installs exactly the README's prerequisites"
    doctor = (helpers.ROOT / "hack" / "doctor.sh").read_text()
    asked = set(PACKAGE.findall(doctor))
    assert {"python3-venv", "openssl", "iproute2"} <= asked, "doctor.sh names packages"
    assert asked <= set(readme[0].split()) | {"util-linux"}, (
        "every package doctor.sh suggests is a README prerequisite (util-linux is in every "
        "Debian base system)"
    )


def test_the_two_commands_and_every_make_target_named_exist() -> None:
    blocks = shell_blocks(README)
    assert any("make test" in b and "make run" in b for b in blocks), "the two commands"
    targets = make_targets()
    named = {
        (page.relative_to(helpers.ROOT).as_posix(), target)
        for page in PAGES
        for block in shell_blocks(page)
        for target in MAKE.findall(block)
    }
    assert ("README.md", "test") in named
    missing = sorted((page, t) for page, t in named if t not in targets)
    assert not missing, f"make targets named in the docs that the Makefile lacks: {missing}"


def recipe(target: str) -> tuple[list[str], str]:
    """``target``'s prerequisites and its recipe (continuation lines joined)."""
    text = (helpers.ROOT / "Makefile").read_text()
    found = re.search(rf"^{target}:([^#\n]*)(?:##[^\n]*)?\n((?:\t[^\n]*\n)*)", text, re.M)
    assert found, f"the Makefile has a {target} target"
    return found[1].split(), found[2].replace("\\\n", " ")


def test_make_test_and_make_run_do_what_the_readme_says() -> None:
    comments = dict(re.findall(r"^make (test|run)\s+# (.*)$", README.read_text(), re.M))
    assert comments["test"].startswith("every test tier against a real control plane")
    assert "under coverage" in comments["test"]
    prerequisites, body = recipe("test")
    assert {"doctor", "controlplane"} <= set(prerequisites)
    [run] = re.findall(r"coverage run -m pytest([^;|&]*)", body)
    assert not [a for a in run.split() if not a.startswith("-")], "no path narrows testpaths"
    pyproject = tomllib.loads((helpers.ROOT / "pyproject.toml").read_text())
    pytest_options = pyproject["tool"]["pytest"]["ini_options"]
    assert {"tests", "runtime", "controllers", "api"} <= set(pytest_options["testpaths"])
    assert "--doctest-modules" in pytest_options["addopts"]
    assert {"unit", "integration"} <= {p.name for p in (helpers.ROOT / "tests").iterdir()}

    assert comments["run"].startswith("the operator: against $KUBECONFIG if set, else a local")
    prerequisites, body = recipe("run")
    assert "doctor-run" in prerequisites
    assert pyproject["project"]["scripts"]["rayservice-manager"] == "controllers.main:main"
    starts = re.findall(r"rayservice-manager --kubeconfig (\S+)", body)
    assert starts[0] == '"$$KUBECONFIG"', "with $KUBECONFIG set, the operator runs against it"
    assert "cluster-up" in body, "else it starts a local control plane"
    assert starts[1:] == ["$(abspath"], "once more, otherwise"
    assert "rayservice-manager --kubeconfig $(abspath $(CLUSTER_DIR))/kubeconfig" in body, (
        "against the kubeconfig of the control plane cluster-up starts in $(CLUSTER_DIR)"
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(helpers.ROOT).as_posix())
def test_relative_links_resolve(page: pathlib.Path) -> None:
    text = re.sub(r"`[^`\n]*`", "", test_docs.FENCE.sub("", page.read_text()))
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # an address, or an anchor in the page (Sphinx checks those)
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            broken.append(target)
    assert not broken, f"{page.name}: links to nothing: {broken}"


def tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Each Markdown table of ``text``: its header cells and its rows' cells."""
    found = []
    for block in re.findall(r"(?:^\|.*\|\n)+", text, flags=re.MULTILINE):
        rows = [
            [c.strip() for c in line.strip().strip("|").split("|")] for line in block.splitlines()
        ]
        if len(rows) > 2 and set(rows[1][0]) <= {"-", ":"}:
            found.append((rows[0], rows[2:]))
    return found


def test_the_headline_figures_are_the_performance_pages() -> None:
    readme = tables(README.read_text())
    assert len(readme) == 1, "README has one table: the headline figures"
    header, rows = readme[0]
    page = tables(PERFORMANCE.read_text())
    checked = 0
    for row in rows:
        label = row[0]
        sources = [(h, r) for h, rs in page for r in rs if r[0] == label]
        assert sources, f"{label!r} is on the performance page"
        for column, value in zip(header[1:], row[1:], strict=True):
            expected = [r[h.index(column)] for h, r in sources if column in h]
            assert expected, f"{label!r}: no column {column!r} on the performance page"
            assert value == expected[0], (
                f"{label!r}, {column!r}: README {value}, page {expected[0]}"
            )
            checked += 1
    assert checked >= 12
