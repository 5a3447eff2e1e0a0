"""Admission webhooks: the typed ``admission.k8s.io/v1`` AdmissionReview, and the
validator and defaulter protocols that become its handlers.

**The review.** The API server POSTs an ``AdmissionReview`` whose ``request`` is read
into a :class:`Request` (:meth:`Request.from_review`; a review that is not one raises
:class:`ReviewError`, which the server answers with HTTP 400). A :class:`Handler` turns
it into a :class:`Response`, which :meth:`Response.review` writes back as an
``AdmissionReview`` carrying the request's ``uid``:

- ``allowed``; when refused, ``status`` with ``code`` (default 403), ``reason`` and
  ``message`` - the API server returns them to the client as
  ``admission webhook "<name>" denied the request: <message>``;
- ``warnings`` (shown by ``kubectl`` as ``Warning: ...``), even when allowed;
- ``patch`` (JSON Patch operations, sent base64-encoded with ``patchType: JSONPatch``),
  only from a mutating webhook.

**Validators** (:class:`Validator`, controller-runtime's ``CustomValidator``):
``validate_create(obj, request)``, ``validate_update(old, obj, request)``,
``validate_delete(old, request)``, each ``async`` and returning warnings (a sequence
of strings, possibly empty). To refuse, raise :class:`Denied` with the message (and
``code``/``reason`` if 403/Forbidden does not fit, e.g. 422/Invalid). :func:`validating`
makes the handler: ``CONNECT`` is allowed without a call; any other exception is a bug
and answers ``allowed: false`` with code 500 and the exception's text (the API server
then refuses the request whatever the ``failurePolicy``: that only covers failed calls).

**Defaulters** (:class:`Defaulter`, controller-runtime's ``CustomDefaulter``):
``async default(obj, request)`` changes ``obj`` in place - a deep copy of the
request's object; :func:`defaulting` answers with the JSON patch from the original to
the changed copy (:func:`runtime.webhook.jsonpatch.diff`), none when nothing changed.
It is called on ``CREATE`` and ``UPDATE`` only. A defaulter may raise :class:`Denied`.

Objects are plain JSON dicts, as everywhere in the framework.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, cast

from runtime._internal import review as review_
from runtime.webhook import jsonpatch

__all__ = [
    "API_VERSION",
    "Defaulter",
    "Denied",
    "GroupVersionKind",
    "GroupVersionResource",
    "Handler",
    "Operation",
    "Request",
    "Response",
    "ReviewError",
    "UserInfo",
    "Validator",
    "defaulting",
    "validating",
]

API_VERSION = "admission.k8s.io/v1"
Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
_OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
Obj = dict[str, Any]


class ReviewError(ValueError):
    """The body is not an ``admission.k8s.io/v1`` AdmissionReview request."""


class Denied(Exception):
    """Refuse the request with ``message`` (the API server shows it to the client)."""

    def __init__(self, message: str, *, code: int = 403, reason: str = "Forbidden") -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class GroupVersionKind:
    group: str
    version: str
    kind: str


@dataclasses.dataclass(frozen=True)
class GroupVersionResource:
    group: str
    version: str
    resource: str


@dataclasses.dataclass(frozen=True)
class UserInfo:
    username: str = ""
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ReviewError(f"{what} must be an object")
    return value


def _object(value: Any, what: str) -> Obj | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ReviewError(f"{what} must be an object or null")
    return cast(Obj, value)


def _gvk(value: Any, what: str) -> GroupVersionKind:
    fields = _mapping(value, what)
    return GroupVersionKind(
        str(fields.get("group", "")), str(fields.get("version", "")), str(fields.get("kind", ""))
    )


def _gvr(value: Any, what: str) -> GroupVersionResource:
    fields = _mapping(value, what)
    return GroupVersionResource(
        str(fields.get("group", "")),
        str(fields.get("version", "")),
        str(fields.get("resource", "")),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Request:
    """``AdmissionReview.request``: what is being done to which object, by whom."""

    uid: str
    kind: GroupVersionKind
    resource: GroupVersionResource
    operation: Operation
    sub_resource: str = ""
    request_kind: GroupVersionKind | None = None
    request_resource: GroupVersionResource | None = None
    name: str = ""
    namespace: str = ""
    user_info: UserInfo = dataclasses.field(default_factory=UserInfo)
    object: Obj | None = None
    """The object as it would be stored (``None`` on ``DELETE``)."""
    old_object: Obj | None = None
    """The stored object on ``UPDATE`` and ``DELETE``; ``None`` on ``CREATE``."""
    dry_run: bool = False
    """True when nothing will be persisted: a webhook with side effects must not act."""
    options: Obj | None = None
    """``CreateOptions``, ``UpdateOptions`` or ``DeleteOptions``, as sent."""

    @classmethod
    def from_review(cls, review: Any) -> Request:
        """The request of an ``admission.k8s.io/v1`` AdmissionReview (:class:`ReviewError`
        if ``review`` is not one)."""
        body = _mapping(review, "the AdmissionReview")  # null reads as {}: "expected an ..."
        request = review_.request_of(body, API_VERSION, "AdmissionReview", ReviewError)
        operation = request.get("operation")
        if operation not in _OPERATIONS:
            raise ReviewError(f"unknown operation {operation!r}")
        user = _mapping(request.get("userInfo"), "request.userInfo")
        extra = _mapping(user.get("extra"), "request.userInfo.extra")
        return cls(
            uid=str(request["uid"]),
            kind=_gvk(request.get("kind"), "request.kind"),
            resource=_gvr(request.get("resource"), "request.resource"),
            operation=cast(Operation, operation),
            sub_resource=str(request.get("subResource") or ""),
            request_kind=(
                _gvk(request["requestKind"], "request.requestKind")
                if request.get("requestKind")
                else None
            ),
            request_resource=(
                _gvr(request["requestResource"], "request.requestResource")
                if request.get("requestResource")
                else None
            ),
            name=str(request.get("name") or ""),
            namespace=str(request.get("namespace") or ""),
            user_info=UserInfo(
                username=str(user.get("username", "")),
                uid=str(user.get("uid", "")),
                groups=tuple(str(g) for g in user.get("groups") or ()),
                extra={str(k): tuple(str(v) for v in vs or ()) for k, vs in extra.items()},
            ),
            object=_object(request.get("object"), "request.object"),
            old_object=_object(request.get("oldObject"), "request.oldObject"),
            dry_run=bool(request.get("dryRun", False)),
            options=_object(request.get("options"), "request.options"),
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Response:
    """``AdmissionReview.response`` (see the module docstring)."""

    allowed: bool
    code: int = 200
    reason: str = ""
    message: str = ""
    warnings: tuple[str, ...] = ()
    patch: tuple[Mapping[str, Any], ...] = ()
    """JSON Patch operations (RFC 6902) for a mutating webhook."""

    @classmethod
    def allow(
        cls, *, warnings: Sequence[str] = (), patch: Sequence[Mapping[str, Any]] = ()
    ) -> Response:
        return cls(allowed=True, warnings=tuple(warnings), patch=tuple(patch))

    @classmethod
    def deny(
        cls,
        message: str,
        *,
        code: int = 403,
        reason: str = "Forbidden",
        warnings: Sequence[str] = (),
    ) -> Response:
        return cls(
            allowed=False, code=code, reason=reason, message=message, warnings=tuple(warnings)
        )

    def review(self, uid: str) -> Obj:
        """The whole ``AdmissionReview`` answering the request ``uid``."""
        response: Obj = {"uid": uid, "allowed": self.allowed}
        if not self.allowed or self.message:
            status: Obj = {"code": self.code, "message": self.message}
            if not self.allowed:
                status["status"] = "Failure"
            if self.reason:
                status["reason"] = self.reason
            response["status"] = status
        if self.warnings:
            response["warnings"] = list(self.warnings)
        if self.patch:
            response["patchType"] = "JSONPatch"
            raw = json.dumps([dict(op) for op in self.patch], separators=(",", ":")).encode()
            response["patch"] = base64.b64encode(raw).decode()
        return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


class Handler(Protocol):
    """Answers one admission request."""

    async def handle(self, request: Request) -> Response: ...


class Validator(Protocol):
    """Checks objects; returns warnings, raises :class:`Denied` to refuse."""

    async def validate_create(self, obj: Obj, request: Request) -> Sequence[str]: ...

    async def validate_update(self, old: Obj, obj: Obj, request: Request) -> Sequence[str]: ...

    async def validate_delete(self, old: Obj, request: Request) -> Sequence[str]: ...


class Defaulter(Protocol):
    """Fills in defaults by changing ``obj`` (a copy) in place."""

    async def default(self, obj: Obj, request: Request) -> None: ...


def _denied(exc: Denied, warnings: Sequence[str] = ()) -> Response:
    return Response.deny(exc.message, code=exc.code, reason=exc.reason, warnings=warnings)


def _errored(exc: Exception) -> Response:
    return Response.deny(
        f"internal error: {type(exc).__name__}: {exc}", code=500, reason="InternalError"
    )


def _required(obj: Obj | None, what: str) -> Obj:
    if obj is None:
        raise ReviewError(f"the request has no {what}")
    return obj


@dataclasses.dataclass(frozen=True)
class _Validating:
    validator: Validator

    async def handle(self, request: Request) -> Response:
        try:
            if request.operation == "CREATE":
                warnings = await self.validator.validate_create(
                    _required(request.object, "object"), request
                )
            elif request.operation == "UPDATE":
                warnings = await self.validator.validate_update(
                    _required(request.old_object, "oldObject"),
                    _required(request.object, "object"),
                    request,
                )
            elif request.operation == "DELETE":
                warnings = await self.validator.validate_delete(
                    _required(request.old_object, "oldObject"), request
                )
            else:
                return Response.allow()
        except Denied as exc:
            return _denied(exc)
        except ReviewError as exc:
            return Response.deny(str(exc), code=400, reason="BadRequest")
        except Exception as exc:
            return _errored(exc)
        return Response.allow(warnings=tuple(warnings or ()))


@dataclasses.dataclass(frozen=True)
class _Defaulting:
    defaulter: Defaulter

    async def handle(self, request: Request) -> Response:
        if request.operation not in ("CREATE", "UPDATE"):
            return Response.allow()
        if request.object is None:
            return Response.deny("the request has no object", code=400, reason="BadRequest")
        changed = copy.deepcopy(request.object)
        try:
            await self.defaulter.default(changed, request)
            patch = jsonpatch.diff(request.object, changed)
        except Denied as exc:
            return _denied(exc)
        except Exception as exc:
            return _errored(exc)
        return Response.allow(patch=patch)


def validating(validator: Validator) -> Handler:
    """The handler of a validating webhook (see the module docstring)."""
    return _Validating(validator)


def defaulting(defaulter: Defaulter) -> Handler:
    """The handler of a mutating webhook that fills in defaults (see the module docstring)."""
    return _Defaulting(defaulter)
