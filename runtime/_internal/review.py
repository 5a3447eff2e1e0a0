"""The envelope of a review the API server sends a webhook (an ``AdmissionReview`` or a
``ConversionReview``): an object of the expected ``apiVersion`` and ``kind`` whose
``request`` is an object with a ``uid``. :func:`request_of` checks it and hands back the
request; what is off is raised as the caller's error class, with the same words for
either kind.

>>> request_of({"apiVersion": "example.dev/v1", "kind": "Review", "request": {"uid": "1"}},
...            "example.dev/v1", "Review", ValueError)
{'uid': '1'}
>>> request_of([], "example.dev/v1", "Review", ValueError)
Traceback (most recent call last):
ValueError: the Review must be an object
>>> request_of({"apiVersion": "example.dev/v1", "kind": "Review"}, "example.dev/v1", "Review",
...            ValueError)
Traceback (most recent call last):
ValueError: the Review has no request with a uid
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["request_of"]


def request_of(
    review: Any, api_version: str, kind: str, error: type[ValueError]
) -> Mapping[str, Any]:
    """``review["request"]`` once ``review`` is a ``kind`` of ``api_version`` with a request
    that has a ``uid``; else ``error`` saying which of these it is not."""
    if not isinstance(review, Mapping):
        raise error(f"the {kind} must be an object")
    if review.get("apiVersion") != api_version or review.get("kind") != kind:
        raise error(
            f"expected an {api_version} {kind}, got "
            f"{review.get('apiVersion')!r} {review.get('kind')!r}"
        )
    request = review.get("request")
    if not isinstance(request, Mapping) or not request.get("uid"):
        raise error(f"the {kind} has no request with a uid")
    return request
