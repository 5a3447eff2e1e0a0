"""A benchmark script of ``hack/bench`` loaded for a test, with its own ``import _common``
(``hack/bench`` on the path) and no other module of the same names before or after it
(``tests/support``'s ``realray`` is one)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from types import ModuleType

import pytest

from tests.unit import helpers

SIBLINGS = ("_common", "compare", "rayservice", "raycluster", "realray")
"""The scripts' modules that import one another by these bare names."""


@pytest.fixture
def bench_script(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], ModuleType]]:
    monkeypatch.syspath_prepend(str(helpers.ROOT / "hack" / "bench"))
    for name in SIBLINGS:
        sys.modules.pop(name, None)
    try:
        yield lambda name: helpers.load_script(f"hack/bench/{name}.py")
    finally:
        for name in SIBLINGS:
            sys.modules.pop(name, None)
