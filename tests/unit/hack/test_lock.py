"""requirements.lock (what the image installs with --require-hashes) covers the project's
runtime dependencies at the versions the tests run with, each with hashes; so does
requirements-testing.lock for ``k8s-controller-runtime[testing]`` (the quickstart's install)."""

from __future__ import annotations

from tests.unit import helpers

lock = helpers.load_script("hack/lock.py")


def test_the_lock_covers_the_tested_dependencies() -> None:
    assert lock.problems(lock.LOCK.read_text()) == []
    pinned = lock.parse(lock.LOCK.read_text())
    assert {"aiohttp", "pydantic", "kubernetes-asyncio", "pyyaml"} <= set(pinned)
    assert all(len(h) == 64 for _, hashes in pinned.values() for h in hashes)


def test_a_stale_or_unhashed_lock_is_caught() -> None:
    text = lock.LOCK.read_text()
    version, _ = lock.parse(text)["pydantic"]
    stale = text.replace(f"pydantic=={version}", "pydantic==2.0.0")
    assert "pydantic==2.0.0 is outside >=2.7" in lock.problems(stale)
    without = "\n".join(
        line for line in text.splitlines() if not line.startswith("tenacity==")
    ).replace("\n    --hash", "\n#")  # every hash gone, tenacity unpinned
    found = lock.problems(without)
    assert "tenacity is not pinned" in found
    assert any(p.endswith("has no hash") for p in found)


def test_the_framework_is_built_here_so_its_dependencies_are_pinned_instead() -> None:
    declared = {str(r.name).lower() for r in lock.declared()}
    assert "k8s-controller-runtime" not in declared, "never fetched from PyPI"
    assert {"tenacity", "kubernetes-asyncio"} <= declared, (
        "the framework's own dependency, and its full-kubeconfig extra's (the operator asks for it)"
    )
    assert "k8s-controller-runtime" not in lock.closure()


def test_the_testing_lock_covers_the_framework_with_its_testing_extra() -> None:
    text = lock.TESTING_LOCK.read_text()
    assert lock.problems(text, lock.testing_roots()) == []
    pinned = lock.parse(text)
    kit = {"pytest", "pytest-asyncio", "pytest-timeout", "pluggy", "iniconfig", "pygments"}
    assert kit | {"aiohttp", "structlog", "tenacity"} <= set(pinned)
    operator_only = {"pydantic", "kubernetes-asyncio"}
    assert not operator_only & set(pinned), "the framework's dependencies, not the operator's"
    assert all(len(h) == 64 for _, hashes in pinned.values() for h in hashes)
    assert "pytest is not pinned" in lock.problems(lock.LOCK.read_text(), lock.testing_roots())


def test_check_covers_every_lock_file() -> None:
    assert [lk.path.name for lk in lock.LOCKS] == ["requirements.lock", "requirements-testing.lock"]
    assert lock.main(["--check"]) == 0
