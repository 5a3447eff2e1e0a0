"""hack/bench/compare.py reads kube-apiserver's audit log with its rotated parts: at
N = 1,000 the log passes 100 MB and the run's beginning is in a ``audit-<time>.log``."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable
from types import ModuleType

import pytest


@pytest.fixture
def compare(bench_script: Callable[[str], ModuleType]) -> ModuleType:
    return bench_script("compare")


def event(at: str, verb: str, resource: str, agent: str = "rayservice-operator/1") -> str:
    return json.dumps({
        "stageTimestamp": at, "verb": verb, "userAgent": agent,
        "objectRef": {"resource": resource, "namespace": "ns", "name": "bench-1-abcde"},
        "responseStatus": {"code": 201},
    })  # fmt: skip


def test_the_rotated_parts_are_read_first_then_the_current_file(
    compare: ModuleType, tmp_path: pathlib.Path
) -> None:
    (tmp_path / "audit-2026-12-02T13-40-00.000.log").write_text(
        event("2026-12-02T13:39:00.000000Z", "create", "rayclusters") + "\n"
    )
    (tmp_path / "audit-2026-12-02T13-50-00.000.log").write_text(
        event("2026-12-02T13:45:00.000000Z", "patch", "rayclusters") + "\n"
    )
    (tmp_path / "audit.log").write_text(
        event("2026-12-02T13:55:00.000000Z", "delete", "rayclusters") + "\nnot json\n"
    )
    (tmp_path / "other.log").write_text(event("2026-12-02T13:00:00Z", "get", "pods") + "\n")
    found = compare.audit_events(tmp_path / "audit.log")
    assert [what for _, _, what, _, _ in found] == [
        "create rayclusters", "patch rayclusters", "delete rayclusters"
    ]  # fmt: skip
    assert {client for _, client, _, _, _ in found} == {"rayservice-operator"}
