"""hack/bench/realray.py reads its story from kube-apiserver's audit log: a 409 is
traced to the write that had moved the object on, the figures count the operator's own
requests by phase, and the timeline's milestones are the first of each step. (The
scenario itself runs real Ray heads: minutes, not a unit test.)"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
OURS = "rayservice-operator/0.1"


@pytest.fixture
def realray(bench_script: Callable[[str], ModuleType]) -> ModuleType:
    return bench_script("realray")


def event(
    seconds: float, agent: str, verb: str, resource: str, *, sub: str = "", name: str = "",
    code: int = 200, request: dict[str, Any] | None = None, rv: str | None = None,
    uri: str = "", group: str = "ray.io",
) -> dict[str, Any]:  # fmt: skip
    raw: dict[str, Any] = {
        "stageTimestamp": (T0 + datetime.timedelta(seconds=seconds)).isoformat(),
        "verb": verb,
        "userAgent": agent,
        "requestURI": uri,
        "objectRef": {
            "resource": resource,
            "subresource": sub,
            "name": name,
            "namespace": "bench-realray",
            "apiGroup": group,
        },
        "responseStatus": {"code": code},
    }
    if request is not None:
        raw["requestObject"] = request
    if rv is not None:
        raw["responseObject"] = {"metadata": {"name": name, "resourceVersion": rv}}
    return raw


def status(rv: str, ready: str) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": rv}, "status": {
        "state": "ready", "conditions": [{"type": "HeadPodReady", "status": ready}]}}  # fmt: skip


def test_a_conflict_is_traced_to_the_write_that_moved_the_object_on(realray: ModuleType) -> None:
    c = "realray-abc"
    # fmt: off
    raws = [
        event(0, "bench-realray/1", "create", "rayservices", name="realray", code=201),
        event(0.5, OURS, "create", "rayclusters", name=c, code=201, rv="10"),
        event(1, OURS, "update", "rayclusters", sub="status", name=c,
              request=status("10", "False"), rv="11"),
        event(2, OURS, "patch", "rayclusters", name=c, rv="12",
              request={"metadata": {"annotations": {"ray.io/serve-config-hash": "x"}}}),
        event(2.25, OURS, "update", "rayclusters", sub="status", name=c, code=409,
              request=status("11", "True")),
        event(3, OURS, "update", "rayclusters", sub="status", name=c,
              request=status("12", "True"), rv="13"),
        event(4, OURS, "get", "services", sub="proxy", name="realray-abc-head-svc:dashboard",
              uri="/api/v1/namespaces/bench-realray/services/realray-abc-head-svc:dashboard"
              "/proxy/api/serve/applications/?api_type=declarative", group=""),
        event(5, "kuberay-operator/v1.7.0", "update", "rayclusters", sub="status", name=c,
              code=409, request=status("11", "True")),  # someone else's: not ours
    ]
    # fmt: on
    events = [realray.Event(r) for r in raws]
    [conflict] = realray.conflicts_detail(events, "rayservice-operator")
    assert conflict["write"] == f"update rayclusters/status {c}"
    assert conflict["with_resource_version"] == 11
    raced = conflict["raced"]
    assert (raced["by"], raced["write"], raced["new_resource_version"]) == (
        "rayservice-operator", f"patch rayclusters {c}", 12,
    )  # fmt: skip
    assert raced["seconds_before"] == 0.25
    assert "ray.io/serve-config-hash" in raced["what"]

    at = {
        k: T0 + datetime.timedelta(seconds=s)
        for k, s in (("create", 0), ("steady_from", 3.5), ("upgrade", 10), ("delete", 11),
                     ("end", 12))
    }  # fmt: skip
    figures, detail = realray.operator_figures(events, "ours", at)
    assert figures["init_raycluster_status_writes"] == 3  # the 409 was a write too
    assert figures["init_conflicts"] == 1
    assert figures["conflicts"] == 1
    assert figures["steady_proxy_requests_per_min"] == pytest.approx(60 / 6.5, abs=0.01)
    assert figures["writes_all"] == 5
    assert detail["steady_by_kind"] == {"get services/proxy /api/serve/applications/": 1}

    lines = realray.timeline(events, T0, T0 + datetime.timedelta(seconds=4.5), "ready seen")
    assert lines[:2] == [
        [0.0, "bench-realray", "create rayservices realray"],
        [0.5, "rayservice-operator", "create rayclusters abc"],
    ]
    assert lines[-1] == [4.5, "bench", "ready seen"]
    found = realray.milestones(lines, "ours")
    assert found["raycluster created"] == 0.5
    assert found["raycluster status HeadPodReady=True"] == 3.0  # not the 409 at 2.25
    assert found["first proxy GET applications answered 200"] == 4.0
    assert found["Serve PUT"] is None
    assert found["ready seen by the bench"] == 4.5
