"""Conversion webhooks: the ``apiextensions.k8s.io/v1`` ConversionReview, and converters.

A CRD served in several versions and stored in one sets ``spec.conversion.strategy:
Webhook``; the API server then POSTs a ``ConversionReview`` whenever it reads or writes
an object in a version other than the one it holds: a :class:`Request` with the
``desired_api_version`` and the ``objects`` to convert.

A :class:`Converter` converts one object of one kind between that kind's versions:
``convert(obj, to_api_version)`` returns the object in ``to_api_version`` (a new dict;
``obj`` is the caller's to keep). It must keep ``metadata`` (the API server refuses a
conversion that changes anything there but labels and annotations) and should be
pure - a conversion is asked for on every read. :class:`Converters` holds one converter
per ``(group, kind)`` and answers a whole review (:meth:`Converters.review`):

- an object already in the desired version is returned unchanged, without a call;
- every other one goes to the converter of its group and kind; the result must carry
  the desired ``apiVersion`` and the same ``kind``;
- the review succeeds only if every object converts (``result.status: Success``, the
  converted objects in order), else ``result.status: Failure`` with a message naming
  the object and the reason, and no objects: the API server then fails the client's
  request with that message.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, cast

from runtime._internal import review as review_

__all__ = ["API_VERSION", "Converter", "Converters", "Request"]

API_VERSION = "apiextensions.k8s.io/v1"
Obj = dict[str, Any]


class Converter(Protocol):
    """Converts objects of one kind between its versions (see the module docstring)."""

    def convert(self, obj: Obj, to_api_version: str) -> Obj: ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class Request:
    """``ConversionReview.request``."""

    uid: str
    desired_api_version: str
    objects: tuple[Obj, ...]

    @classmethod
    def from_review(cls, review: Any) -> Request:
        """The request of a ConversionReview; :class:`ValueError` if ``review`` is not one."""
        request = review_.request_of(review, API_VERSION, "ConversionReview", ValueError)
        desired = request.get("desiredAPIVersion")
        objects = request.get("objects") or []
        if not isinstance(desired, str) or "/" not in desired:
            raise ValueError(f"desiredAPIVersion must be group/version, got {desired!r}")
        if not isinstance(objects, list) or not all(isinstance(o, dict) for o in objects):
            raise ValueError("request.objects must be a list of objects")
        return cls(
            uid=str(request["uid"]),
            desired_api_version=desired,
            objects=tuple(cast(Obj, o) for o in objects),
        )


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


class Converters:
    """One :class:`Converter` per ``(group, kind)``; answers ConversionReviews."""

    def __init__(self) -> None:
        self._by_kind: dict[tuple[str, str], Converter] = {}

    def register(self, group: str, kind: str, converter: Converter) -> None:
        if (group, kind) in self._by_kind:
            raise ValueError(f"a converter for {kind}.{group} is registered already")
        self._by_kind[(group, kind)] = converter

    def __bool__(self) -> bool:
        return bool(self._by_kind)

    def _convert(self, obj: Obj, desired: str) -> Obj:
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if api_version == desired:
            return obj
        if not isinstance(api_version, str) or _group(api_version) != _group(desired):
            raise ValueError(f"cannot convert {api_version!r} to {desired!r}")
        converter = self._by_kind.get((_group(desired), str(kind)))
        if converter is None:
            raise ValueError(f"no converter for {kind}.{_group(desired)}")
        converted = converter.convert(obj, desired)
        if converted.get("apiVersion") != desired or converted.get("kind") != kind:
            raise ValueError(
                f"the converter returned {converted.get('apiVersion')!r} "
                f"{converted.get('kind')!r}, not {desired!r} {kind!r}"
            )
        return converted

    def review(self, request: Request) -> Obj:
        """The ConversionReview answering ``request`` (see the module docstring)."""
        converted: list[Obj] = []
        result: Obj = {"status": "Success"}
        for obj in request.objects:
            meta = obj.get("metadata") or {}
            try:
                converted.append(self._convert(obj, request.desired_api_version))
            except Exception as exc:
                where = "/".join(filter(None, (meta.get("namespace"), meta.get("name"))))
                result = {
                    "status": "Failure",
                    "message": f"converting {obj.get('kind')} {where} to "
                    f"{request.desired_api_version}: {exc}",
                }
                converted = []
                break
        return {
            "apiVersion": API_VERSION,
            "kind": "ConversionReview",
            "response": {"uid": request.uid, "convertedObjects": converted, "result": result},
        }
