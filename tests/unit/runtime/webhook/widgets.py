"""The webhook tests' world: a Widget admission review and its handlers (a recording
validator, a defaulter), and a v1 <-> v2 Widget converter with its conversion review.
``test_admission.py``, ``test_conversion.py`` and ``test_server.py`` share it."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from runtime.webhook import admission


def review(operation: str = "CREATE", **request: Any) -> dict[str, Any]:
    body = {
        "uid": "u-1",
        "kind": {"group": "test.dev", "version": "v1", "kind": "Widget"},
        "resource": {"group": "test.dev", "version": "v1", "resource": "widgets"},
        "operation": operation,
        "name": "w",
        "namespace": "ns",
        "userInfo": {"username": "alice", "groups": ["g1"], "extra": {"k": ["v"]}},
        "object": {"metadata": {"name": "w"}, "spec": {"size": 1}},
        "oldObject": None,
        "dryRun": True,
        **request,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": body}


class Recording:
    """A validator that records its calls and refuses objects with ``spec.size < 0``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def _check(self, obj: dict[str, Any]) -> list[str]:
        size = obj.get("spec", {}).get("size", 0)
        if size < 0:
            message = f"spec.size must be >= 0, got {size}"
            raise admission.Denied(message, code=422, reason="Invalid")
        if size > 10:
            raise ZeroDivisionError("a bug")
        return ["size is odd"] if size % 2 else []

    async def validate_create(
        self, obj: dict[str, Any], request: admission.Request
    ) -> Sequence[str]:
        self.calls.append(("create", obj))
        return self._check(obj)

    async def validate_update(
        self, old: dict[str, Any], obj: dict[str, Any], request: admission.Request
    ) -> Sequence[str]:
        self.calls.append(("update", (old, obj)))
        return self._check(obj)

    async def validate_delete(
        self, old: dict[str, Any], request: admission.Request
    ) -> Sequence[str]:
        self.calls.append(("delete", old))
        raise admission.Denied("widgets are forever")


class SizeDefaulter:
    async def default(self, obj: dict[str, Any], request: admission.Request) -> None:
        spec = obj.setdefault("spec", {})
        if spec.get("size") == -1:
            raise admission.Denied("no negative sizes")
        spec.setdefault("size", 1)
        obj["metadata"].setdefault("labels", {})["defaulted/by"] = "test"


class Widgets:
    """v1 ``spec.size: int`` <-> v2 ``spec.dimensions.size: str``."""

    def convert(self, obj: dict[str, Any], to_api_version: str) -> dict[str, Any]:
        out = copy.deepcopy(obj)
        if to_api_version == "test.dev/v2":
            out["spec"] = {"dimensions": {"size": str(obj["spec"]["size"])}}
        elif to_api_version == "test.dev/v1":
            out["spec"] = {"size": int(obj["spec"]["dimensions"]["size"])}
        else:
            raise ValueError(f"unknown version {to_api_version}")
        out["apiVersion"] = to_api_version
        return out


def conversion_review(desired: str, *objects: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "c-1", "desiredAPIVersion": desired, "objects": list(objects)},
    }


def widget(version: str, spec: dict[str, Any], name: str = "w") -> dict[str, Any]:
    return {"apiVersion": f"test.dev/{version}", "kind": "Widget",
            "metadata": {"name": name, "namespace": "ns"}, "spec": spec}  # fmt: skip
