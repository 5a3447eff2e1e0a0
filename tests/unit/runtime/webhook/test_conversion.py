"""``runtime/webhook/conversion.py``: conversion reviews read, each object converted or
the review failed (no server)."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.webhook import conversion
from tests.unit.runtime.webhook.widgets import Widgets, conversion_review, widget


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
