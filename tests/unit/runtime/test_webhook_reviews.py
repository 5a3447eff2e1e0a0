"""Webhooks without a server: the JSON patch diff (checked by applying it), admission
reviews read and answered, the validating/defaulting handlers' outcomes, conversion reviews."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.webhook import admission, conversion, jsonpatch

# -- JSON patch -------------------------------------------------------------------------------


def _unescape(segment: str) -> str:
    return segment.replace("~1", "/").replace("~0", "~")


def apply(doc: Any, ops: Sequence[dict[str, Any]]) -> Any:
    """A strict RFC 6902 applier for add/remove/replace (what the API server does)."""
    doc = copy.deepcopy(doc)
    for op in ops:
        assert op["path"].startswith("/"), op
        *parents, last = [_unescape(s) for s in op["path"][1:].split("/")]
        target = doc
        for segment in parents:
            target = target[int(segment)] if isinstance(target, list) else target[segment]
        if isinstance(target, list):
            index = int(last)
            if op["op"] == "add":
                assert 0 <= index <= len(target), op
                target.insert(index, op["value"])
            elif op["op"] == "remove":
                del target[index]
            else:
                assert 0 <= index < len(target), op
                target[index] = op["value"]
        else:
            if op["op"] == "add":
                target[last] = op["value"]
            elif op["op"] == "remove":
                del target[last]  # KeyError: removing what is not there is an error
            else:
                assert last in target, op  # replace needs an existing member
                target[last] = op["value"]
    return doc


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text("ab~/", max_size=3),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text("ab~/", max_size=3), children, max_size=4)
    ),
    max_leaves=20,
)
json_objects = st.dictionaries(st.text("ab~/", max_size=3), json_values, max_size=5)


@settings(max_examples=300, deadline=None)
@given(json_objects, json_objects)
def test_diff_applied_turns_old_into_new(old: dict[str, Any], new: dict[str, Any]) -> None:
    ops = jsonpatch.diff(old, new)
    assert apply(old, ops) == new
    assert all(op["path"] != "" for op in ops)  # never the root
    assert (ops == []) == (json.dumps(old, sort_keys=True) == json.dumps(new, sort_keys=True))


def test_diff_escapes_and_is_minimal() -> None:
    old = {"metadata": {"labels": {"a/b": "1", "c~d": "2"}}, "spec": {"items": [1, 2, 3]}}
    new = {"metadata": {"labels": {"a/b": "9", "c~d": "2"}}, "spec": {"items": [1]}}
    assert jsonpatch.diff(old, new) == [
        {"op": "replace", "path": "/metadata/labels/a~1b", "value": "9"},
        {"op": "remove", "path": "/spec/items/2"},
        {"op": "remove", "path": "/spec/items/1"},
    ]


def test_diff_tells_json_types_apart() -> None:
    assert jsonpatch.diff({"a": 1}, {"a": True}) == [{"op": "replace", "path": "/a", "value": True}]
    assert jsonpatch.diff({"a": 1}, {"a": 1.0}) == [{"op": "replace", "path": "/a", "value": 1.0}]


def test_diff_refuses_to_replace_the_root() -> None:
    with pytest.raises(ValueError, match="root"):
        jsonpatch.diff({"a": 1}, [1])


# -- admission reviews ------------------------------------------------------------------------


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


def test_request_is_read_from_a_review() -> None:
    req = admission.Request.from_review(
        review("UPDATE", oldObject={"spec": {"size": 0}}, subResource="status")
    )
    assert req.uid == "u-1"
    assert req.kind == admission.GroupVersionKind("test.dev", "v1", "Widget")
    assert req.resource.resource == "widgets"
    assert req.operation == "UPDATE"
    assert req.sub_resource == "status"
    assert (req.name, req.namespace, req.dry_run) == ("w", "ns", True)
    assert req.user_info.username == "alice"
    assert req.user_info.groups == ("g1",)
    assert req.user_info.extra == {"k": ("v",)}
    assert req.object == {"metadata": {"name": "w"}, "spec": {"size": 1}}
    assert req.old_object == {"spec": {"size": 0}}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}, "expected"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "uid"),
        (review("PATCH"), "unknown operation"),
        (review(object=[1]), "request.object"),
        ([], "must be an object"),
    ],
)
def test_bad_reviews_are_refused(body: Any, message: str) -> None:
    with pytest.raises(admission.ReviewError, match=message):
        admission.Request.from_review(body)


def test_responses_are_written_as_reviews() -> None:
    denied = admission.Response.deny("no", code=422, reason="Invalid", warnings=["w"]).review("x")
    assert denied == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": "x",
            "allowed": False,
            "status": {"code": 422, "message": "no", "status": "Failure", "reason": "Invalid"},
            "warnings": ["w"],
        },
    }
    ops = [{"op": "add", "path": "/spec/x", "value": 1}]
    allowed = admission.Response.allow(patch=ops).review("y")["response"]
    assert allowed["allowed"] is True
    assert "status" not in allowed
    assert allowed["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(allowed["patch"])) == ops
    assert "patch" not in admission.Response.allow().review("z")["response"]


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


async def test_validating_handler_routes_and_reports() -> None:
    validator = Recording()
    handler = admission.validating(validator)

    async def answer(body: dict[str, Any]) -> admission.Response:
        return await handler.handle(admission.Request.from_review(body))

    ok = await answer(review(object={"spec": {"size": 3}}))
    assert ok.allowed
    assert ok.warnings == ("size is odd",)
    bad = await answer(review("UPDATE", object={"spec": {"size": -1}}, oldObject={"spec": {}}))
    assert (bad.allowed, bad.code, bad.reason) == (False, 422, "Invalid")
    assert bad.message == "spec.size must be >= 0, got -1"
    gone = await answer(review("DELETE", object=None, oldObject={"spec": {"size": 1}}))
    assert (gone.allowed, gone.code, gone.message) == (False, 403, "widgets are forever")
    bug = await answer(review(object={"spec": {"size": 11}}))
    assert (bug.allowed, bug.code) == (False, 500)
    assert "ZeroDivisionError: a bug" in bug.message
    missing = await answer(review("UPDATE", object={"spec": {}}, oldObject=None))
    assert (missing.allowed, missing.code) == (False, 400)
    assert (await answer(review("CONNECT"))).allowed
    assert [c[0] for c in validator.calls] == ["create", "update", "delete", "create"]


class SizeDefaulter:
    async def default(self, obj: dict[str, Any], request: admission.Request) -> None:
        spec = obj.setdefault("spec", {})
        if spec.get("size") == -1:
            raise admission.Denied("no negative sizes")
        spec.setdefault("size", 1)
        obj["metadata"].setdefault("labels", {})["defaulted/by"] = "test"


async def test_defaulting_handler_answers_the_diff_and_leaves_the_request_alone() -> None:
    handler = admission.defaulting(SizeDefaulter())
    req = admission.Request.from_review(review(object={"metadata": {"name": "w"}, "spec": {}}))
    answer = await handler.handle(req)
    assert answer.allowed
    assert list(answer.patch) == [
        {"op": "add", "path": "/metadata/labels", "value": {"defaulted/by": "test"}},
        {"op": "add", "path": "/spec/size", "value": 1},
    ]
    assert req.object == {"metadata": {"name": "w"}, "spec": {}}
    done = {"metadata": {"name": "w", "labels": {"defaulted/by": "test"}}, "spec": {"size": 2}}
    assert (await handler.handle(admission.Request.from_review(review(object=done)))).patch == ()
    refused = await handler.handle(admission.Request.from_review(review(object={
        "metadata": {}, "spec": {"size": -1}})))  # fmt: skip
    assert (refused.allowed, refused.message) == (False, "no negative sizes")
    deleting = review("DELETE", object=None, oldObject={"metadata": {}})
    assert (await handler.handle(admission.Request.from_review(deleting))).allowed


# -- conversion --------------------------------------------------------------------------------


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


def test_conversion_converts_each_object_or_fails_the_review() -> None:
    converters = conversion.Converters()
    converters.register("test.dev", "Widget", Widgets())
    v1, v2 = widget("v1", {"size": 3}), widget("v2", {"dimensions": {"size": "4"}})
    request = conversion.Request.from_review(conversion_review("test.dev/v2", v1, v2))
    answer = converters.review(request)
    assert answer["response"]["uid"] == "c-1"
    assert answer["response"]["result"] == {"status": "Success"}
    converted = answer["response"]["convertedObjects"]
    assert converted == [widget("v2", {"dimensions": {"size": "3"}}), v2]
    assert v1 == widget("v1", {"size": 3})  # the input is not changed

    failed = converters.review(conversion.Request.from_review(
        conversion_review("test.dev/v3", widget("v1", {"size": 1}, name="bad"))))  # fmt: skip
    assert failed["response"]["convertedObjects"] == []
    assert failed["response"]["result"]["status"] == "Failure"
    message = failed["response"]["result"]["message"]
    assert "Widget ns/bad to test.dev/v3: unknown version" in message

    other = conversion_review("test.dev/v2", {**widget("v1", {}), "kind": "Gadget"})
    result = converters.review(conversion.Request.from_review(other))["response"]["result"]
    assert result["message"].endswith("no converter for Gadget.test.dev")
    with pytest.raises(ValueError, match="registered already"):
        converters.register("test.dev", "Widget", Widgets())


def test_a_converter_that_forgets_the_version_fails_the_review() -> None:
    class Forgetful:
        def convert(self, obj: dict[str, Any], to_api_version: str) -> dict[str, Any]:
            return obj

    converters = conversion.Converters()
    converters.register("test.dev", "Widget", Forgetful())
    result = converters.review(conversion.Request.from_review(
        conversion_review("test.dev/v2", widget("v1", {}))))["response"]["result"]  # fmt: skip
    assert result["status"] == "Failure"
    assert "returned 'test.dev/v1' 'Widget', not 'test.dev/v2'" in result["message"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"apiVersion": "apiextensions.k8s.io/v1beta1", "kind": "ConversionReview"}, "expected"),
        (conversion_review("v2"), "group/version"),
        ({**conversion_review("test.dev/v2"), "request": {"desiredAPIVersion": "x/y"}}, "uid"),
    ],
)
def test_bad_conversion_reviews_are_refused(body: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        conversion.Request.from_review(body)
