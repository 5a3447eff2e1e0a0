"""The public facade: every name in ``__all__`` exists and the list is sorted."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

PUBLIC = [
    "runtime",
    "runtime.clock",
    "runtime.conditions",
    "runtime.controller",
    "runtime.delegatedauth",
    "runtime.metrics",
    "runtime.reconcile",
    "runtime.source",
    "runtime.workqueue",
    "runtime.cache",
    "runtime.client",
    "runtime.status",
    "runtime.objects",
    "runtime.quantity",
    "runtime.handler",
    "runtime.predicate",
    "runtime.testing",
    "runtime.testing.assets",
    "runtime.testing.clock",
    "runtime.testing.fake",
    "runtime.testing.controlplane",
    "runtime.testing.pytest_plugin",
    "runtime.testing.runner",
    "runtime.testing.waiting",
    "runtime.tls",
    "runtime.webhook",
    "runtime.webhook.admission",
    "runtime.webhook.cainject",
    "runtime.webhook.conversion",
    "runtime.webhook.intake",
    "runtime.webhook.jsonpatch",
    "runtime.webhook.server",
]


@pytest.mark.parametrize("name", PUBLIC)
def test_all_is_sorted_and_resolves(name: str) -> None:
    module = importlib.import_module(name)
    exported = module.__all__
    assert exported == sorted(exported)
    for attr in exported:
        assert hasattr(module, attr), f"{name}.{attr} is in __all__ but missing"


def test_runtime_imports_no_operator_code() -> None:
    # In a fresh interpreter: other tests in this session may have imported api/.
    code = (
        "import sys, runtime, runtime.testing.fake, runtime.testing.controlplane\n"
        "bad = [m for m in sys.modules if m == 'api' or m.startswith(('api.', 'controllers'))]\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
