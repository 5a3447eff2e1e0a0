"""``runtime/webhook/admission.py``: admission reviews read and answered, and the
validating and defaulting handlers' outcomes (no server)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from runtime.webhook import admission
from tests.unit.runtime.webhook.widgets import Recording, SizeDefaulter, review


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
