"""Delegated authentication and authorization: the API server decides who may read an endpoint.

What controller-runtime's ``filters.WithAuthenticationAndAuthorization`` does for a
manager's ``/metrics`` (and kube-rbac-proxy for any endpoint), as an aiohttp middleware
(:meth:`DelegatedAuth.middleware`). For every request:

1. **Authentication.** The bearer token of the ``Authorization`` header is sent to the
   API server in a ``TokenReview`` (``authentication.k8s.io/v1``, no audiences: the API
   server's own). No header, not ``Bearer``, an empty token, or a review that answers
   ``authenticated: false``: **401** ``Unauthorized`` (with ``WWW-Authenticate: Bearer``).
2. **Authorization.** The user the review names (name, uid, groups, extra) is checked
   with a ``SubjectAccessReview`` (``authorization.k8s.io/v1``) for the non-resource
   URL: ``nonResourceAttributes: {path: <request path>, verb: <method, lower case>}``
   (``get`` for a GET). Allowed only when the answer is ``allowed`` and not ``denied``
   (no opinion is a refusal): otherwise **403** ``Authorization denied for user <name>``.
3. A review that cannot be made (the API server unreachable, an error answer, no answer
   within ``Options.review_timeout``, an answer that is not a review): **500**, never an
   allow, and the error is logged. Only then is the request handed to the handler.

Where this differs from controller-runtime: a token the TokenReview rejects is a 401
here, as kube-apiserver and kube-rbac-proxy answer it (controller-runtime answers 500,
because its bearer-token layer turns a rejected token into an error); a failed review
call is a 500 in both.

**Caching.** Reviews are remembered so a scraper does not cost two API calls per scrape:
keyed by the SHA-256 of the token (the token itself is never kept nor logged) and by
the user, verb and path. Default lifetimes, :class:`Options`:

==========================  ==========  ===========================================
answer                      here        controller-runtime
==========================  ==========  ===========================================
token authenticated         60 s        60 s (``CacheTTL``)
token rejected              60 s        60 s
access allowed              60 s        5 min (``AllowCacheTTL``)
access denied               30 s        30 s (``DenyCacheTTL``)
==========================  ==========  ===========================================

An allow is kept 60 s rather than 5 min so that a removed RoleBinding (or a deleted
ServiceAccount, whose tokens the API server then rejects) takes effect within a minute;
at one scrape every 15 s that is still one review of each kind a minute per scraper.
Failed reviews are never cached. Each cache holds at most ``Options.max_entries``
answers, dropping the oldest first (a flood of distinct bad tokens costs one
TokenReview each, and no memory beyond that bound).

The reviews are created through anything with the client's ``request`` method
(:class:`Requester`; :class:`runtime.client.client.Client` is one); the identity that
makes them needs ``create`` on ``tokenreviews`` and ``subjectaccessreviews``, and a
caller needs ``get`` on the non-resource URL, e.g. a ClusterRole with
``nonResourceURLs: ["/metrics"], verbs: ["get"]`` bound to its ServiceAccount.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar

import structlog
from aiohttp import web

from runtime import clock as clock_

__all__ = ["DelegatedAuth", "Options", "Requester", "ReviewFailed", "User"]

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

_log = structlog.get_logger("runtime.delegatedauth")


class Requester(Protocol):
    """One API call, its decoded JSON answer back (an error answer raises)."""

    async def request(
        self, method: str, path: str, *, body: Any = None, request_timeout: float | None = None
    ) -> Any: ...


class ReviewFailed(Exception):
    """A TokenReview or SubjectAccessReview could not be made or gave no usable answer."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    """Review timeouts and cache lifetimes. Every field states its default."""

    review_timeout: float = 10.0
    """Seconds one review may take (controller-runtime's ``TokenAccessReviewTimeout``).
    Default 10 s."""

    authenticated_ttl: float = 60.0
    """Seconds an authenticated token's user is remembered. Default 60 s."""

    rejected_ttl: float = 60.0
    """Seconds a rejected token is remembered. Default 60 s."""

    allowed_ttl: float = 60.0
    """Seconds an allowed (user, verb, path) is remembered. Default 60 s."""

    denied_ttl: float = 30.0
    """Seconds a refused (user, verb, path) is remembered. Default 30 s."""

    max_entries: int = 1024
    """Answers each of the two caches holds at most (oldest dropped first). Default 1024."""

    def __post_init__(self) -> None:
        if self.review_timeout <= 0 or self.max_entries < 1:
            raise ValueError("review_timeout must be > 0 and max_entries >= 1")
        ttls = (self.authenticated_ttl, self.rejected_ttl, self.allowed_ttl, self.denied_ttl)
        if min(ttls) < 0:
            raise ValueError("cache lifetimes must be >= 0 (0: not cached)")


@dataclasses.dataclass(frozen=True)
class User:
    """Who a TokenReview says the token belongs to."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """``extra`` as sorted pairs (hashable: a user is a cache key)."""

    @classmethod
    def from_review(cls, user: Mapping[str, Any]) -> User:
        extra = user.get("extra") or {}
        return cls(
            name=str(user.get("username", "")),
            uid=str(user.get("uid", "")),
            groups=tuple(str(g) for g in user.get("groups") or ()),
            extra=tuple(
                sorted((str(k), tuple(str(v) for v in vs or ())) for k, vs in extra.items())
            ),
        )


_K = TypeVar("_K")
_V = TypeVar("_V")


class _TTLCache(Generic[_K, _V]):
    """Answers with a lifetime each, at most ``size`` of them (the oldest go first)."""

    def __init__(self, size: int, clock: clock_.Clock) -> None:
        self._size = size
        self._clock = clock
        self._items: collections.OrderedDict[_K, tuple[float, _V]] = collections.OrderedDict()

    def get(self, key: _K) -> tuple[bool, _V | None]:
        found = self._items.get(key)
        if found is None:
            return False, None
        expires, value = found
        if self._clock.now() >= expires:
            del self._items[key]
            return False, None
        return True, value

    def put(self, key: _K, value: _V, ttl: float) -> None:
        if ttl <= 0:
            return
        self._items.pop(key, None)
        self._items[key] = (self._clock.now() + ttl, value)
        while len(self._items) > self._size:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


class DelegatedAuth:
    """Token and access reviews through ``requester``, cached (see the module docstring)."""

    def __init__(
        self,
        requester: Requester,
        options: Options | None = None,
        *,
        clock: clock_.Clock | None = None,
    ) -> None:
        self.options = options or Options()
        self._requester = requester
        clock = clock or clock_.RealClock()
        self._tokens: _TTLCache[bytes, User | None] = _TTLCache(self.options.max_entries, clock)
        self._access: _TTLCache[tuple[User, str, str], bool] = _TTLCache(
            self.options.max_entries, clock
        )

    async def _review(self, path: str, body: dict[str, Any]) -> Mapping[str, Any]:
        timeout = self.options.review_timeout
        try:
            async with asyncio.timeout(timeout):
                answer = await self._requester.request(
                    "POST", path, body=body, request_timeout=timeout
                )
        except Exception as exc:  # whatever went wrong, it is no answer: never an allow
            raise ReviewFailed(f"{body['kind']} failed: {exc!r}") from exc
        status = answer.get("status") if isinstance(answer, Mapping) else None
        if not isinstance(status, Mapping):
            raise ReviewFailed(f"{body['kind']} answered without a status: {answer!r:.200}")
        return status

    async def authenticate(self, token: str) -> User | None:
        """The user ``token`` belongs to, or None if the API server does not accept it.
        Raises :class:`ReviewFailed` when the review cannot be made."""
        key = hashlib.sha256(token.encode()).digest()
        cached, user = self._tokens.get(key)
        if cached:
            return user
        status = await self._review(
            TOKEN_REVIEWS,
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            },
        )
        if status.get("authenticated") is True and isinstance(status.get("user"), Mapping):
            user = User.from_review(status["user"])
            self._tokens.put(key, user, self.options.authenticated_ttl)
        else:
            user = None
            self._tokens.put(key, None, self.options.rejected_ttl)
        return user

    async def authorize(self, user: User, verb: str, path: str) -> bool:
        """Whether ``user`` may ``verb`` the non-resource URL ``path``. Raises
        :class:`ReviewFailed` when the review cannot be made."""
        key = (user, verb, path)
        cached, allowed = self._access.get(key)
        if cached:
            return bool(allowed)
        spec: dict[str, Any] = {
            "user": user.name,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(vs) for k, vs in user.extra}
        status = await self._review(
            SUBJECT_ACCESS_REVIEWS,
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec},
        )
        allowed = status.get("allowed") is True and status.get("denied") is not True
        self._access.put(
            key, allowed, self.options.allowed_ttl if allowed else self.options.denied_ttl
        )
        return allowed

    @web.middleware
    async def middleware(
        self,
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        """Hand ``request`` to ``handler`` only if its caller is authenticated and allowed
        (add it to an :class:`aiohttp.web.Application`'s ``middlewares``)."""
        token = _bearer_token(request.headers.get("Authorization", ""))
        if not token:
            return _unauthorized()
        try:
            user = await self.authenticate(token)
        except ReviewFailed as exc:
            _log.error("authentication failed", path=request.path, error=str(exc))
            return web.Response(status=500, text="Authentication failed\n")
        if user is None:
            _log.debug("token rejected", path=request.path)
            return _unauthorized()
        verb = request.method.lower()
        try:
            allowed = await self.authorize(user, verb, request.path)
        except ReviewFailed as exc:
            _log.error("authorization failed", user=user.name, path=request.path, error=str(exc))
            return web.Response(status=500, text=f"Authorization for user {user.name} failed\n")
        if not allowed:
            _log.debug("access denied", user=user.name, verb=verb, path=request.path)
            return web.Response(status=403, text=f"Authorization denied for user {user.name}\n")
        return await handler(request)


def _bearer_token(header: str) -> str:
    """The token of ``Authorization: Bearer <token>`` (scheme case-insensitive), or ``""``."""
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return ""
    return token.strip()


def _unauthorized() -> web.Response:
    return web.Response(status=401, text="Unauthorized\n", headers={"WWW-Authenticate": "Bearer"})
