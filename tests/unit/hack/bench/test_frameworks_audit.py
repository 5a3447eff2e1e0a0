"""hack/bench/frameworks.py's cross-check of kube-apiserver's request metric against its
audit log compares resource requests only (a CI run failed on a ``GET /readyz`` that fell
inside the window: the metric counts it, the audit side never did)."""

from __future__ import annotations

import doctest
import sys

import pytest

from tests.unit import helpers


def test_non_resource_requests_are_left_out_on_both_sides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(helpers.ROOT / "hack" / "bench"))  # its `import _common`
    frameworks = helpers.load_script("hack/bench/frameworks.py")
    try:
        at = "2026-01-01T00:00:01Z"
        event = {"requestReceivedTimestamp": at, "stageTimestamp": at, "verb": "list",
                 "objectRef": {"resource": "widgets"}}  # fmt: skip
        delta = {("LIST", "widgets", ""): 1.0, ("GET", "", "/readyz"): 1.0}
        assert frameworks.metrics_minus_audit(delta, [event], 0.0, 2e9) == {}
        delta[("PATCH", "widgets", "status")] = 3.0  # a real disagreement still shows
        assert frameworks.metrics_minus_audit(delta, [event], 0.0, 2e9) == {
            "PATCH widgets/status": 3
        }
        failures, _ = doctest.testmod(frameworks, verbose=False)
        assert failures == 0
    finally:
        sys.modules.pop("_common", None)
