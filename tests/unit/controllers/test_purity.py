"""The pure parts of the controllers load no I/O: importing a plan (with everything it
imports, package ``__init__`` files included, which import-linter's graph does not
follow) loads no HTTP client, no API client and no cache."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

IO = ("aiohttp", "kubernetes_asyncio", "runtime.client.client", "runtime.cache",
      "runtime.manager", "runtime.events", "controllers.ray.dashboard")  # fmt: skip

PURE = [
    "controllers.rayservice.plan",
    "controllers.rayservice.roles",
    "controllers.rayservice.report",
    "controllers.rayservice.snapshot",
    "controllers.raycluster.plan",
    "controllers.raycluster.report",
    "controllers.rayjob.plan",
    "controllers.rayjob.snapshot",
    "controllers.raycronjob.plan",
    "runtime.conditions",
    "runtime.clock",
]


def loaded_by(module: str) -> list[str]:
    """The I/O modules a fresh interpreter has loaded after importing ``module``."""
    code = (
        f"import json, sys, {module}; "
        f"print(json.dumps(sorted(m for m in sys.modules if m in {IO!r})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    found: list[str] = json.loads(out)
    return found


@pytest.mark.parametrize("module", PURE)
def test_a_pure_module_loads_no_io(module: str) -> None:
    assert loaded_by(module) == []


def test_the_check_sees_io_where_there_is_some() -> None:
    """The same check on the reconciler finds the client: it is not vacuous."""
    found = loaded_by("controllers.rayservice.reconciler")
    assert "aiohttp" in found
    assert "runtime.client.client" in found
