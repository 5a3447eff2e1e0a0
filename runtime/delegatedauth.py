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
4. A review that is not even sent because ``Options.max_reviews_in_flight`` reviews are
   already waiting for their answers: **429** ``Too many requests`` with
   ``Retry-After: 1``, at once (nothing queues behind a flood).

Where this differs from controller-runtime: a token the TokenReview rejects is a 401
here, as kube-apiserver and kube-rbac-proxy answer it (controller-runtime answers 500,
because its bearer-token layer turns a rejected token into an error); a failed review
call is a 500 in both.

**A flood costs a bounded budget, never the controllers'.** Every bearer token this
process has not seen costs a TokenReview, so anyone who can reach the port can make it
send reviews: 1,000 junk tokens are 1,000 reviews. Three bounds keep that from reaching
the reconcilers and the API server:

- the reviews go through a client of their own (:class:`runtime.manager.Manager` makes
  one on its client's credentials: its own connections and its own token bucket,
  ``Options.review_qps`` and ``review_burst``, 10 a second with bursts of 20), never the
  manager's client, so a flood never spends the controllers' client-side rate limit nor
  waits in its queue (controller-runtime's authentication filter has its own client
  too);
- at most ``Options.max_reviews_in_flight`` (16) reviews wait for an answer at once;
  past that a request needing a review is answered 429 at once, while requests whose
  answers are cached are served as usual. Sixteen is far more than scrapers ever need at
  one moment (each needs one TokenReview and one SubjectAccessReview per token a
  minute, by the caches below: a Prometheus pair and a few people with ``kubectl`` start
  a handful together), and no more than ``review_burst``: with the bucket emptied by a
  flood, an admitted review waits at most 16 / 10 = 1.6 s for its turn, well within
  ``review_timeout``, so no admitted review times out in the queue. Refusals are logged
  as one warning a minute at most, with how many there were;
- rejected tokens are cached apart from accepted ones, so a flood of junk tokens cannot
  push a scraper's authenticated token out of the cache and make it ask again.

**Nothing a review answers is logged.** A TokenReview's answer (and an API error's
message) may echo the token it was sent. A failed review is logged by its kind and the
error's type (an API error's by its HTTP status), never by its text nor the answer's,
and the original exception is not chained to it.

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
Failed reviews (and 429s) are never cached. Each of the three caches (authenticated
tokens, rejected tokens, access answers) holds at most ``Options.max_entries`` answers,
dropping the oldest first (a flood of distinct bad tokens costs one TokenReview each,
within the bounds above, and no memory beyond that bound).

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

__all__ = ["DelegatedAuth", "Options", "Requester", "ReviewFailed", "TooManyReviews", "User"]

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

RETRY_AFTER = 1
"""Seconds a 429 asks the caller to wait (``Retry-After``): about how long the reviews in
flight take to answer or time out at the default budget."""

_REFUSALS_LOG_INTERVAL = 60.0
"""Seconds between two warnings about refused reviews."""

_log = structlog.get_logger("runtime.delegatedauth")


class Requester(Protocol):
    """One API call, its decoded JSON answer back (an error answer raises)."""

    async def request(
        self, method: str, path: str, *, body: Any = None, request_timeout: float | None = None
    ) -> Any: ...


class ReviewFailed(Exception):
    """A TokenReview or SubjectAccessReview could not be made or gave no usable answer.
    The message names the review's kind and the error's type, nothing of any answer."""


class TooManyReviews(ReviewFailed):
    """The review was not sent: ``Options.max_reviews_in_flight`` are waiting already."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    """Review timeouts, budget and cache lifetimes. Every field states its default."""

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
    """Answers each of the three caches holds at most (oldest dropped first). Default 1024."""

    max_reviews_in_flight: int = 16
    """Reviews (of both kinds) waiting for their answers at most; a request needing one
    more is answered 429 (see the module docstring for why 16). Default 16."""

    review_qps: float = 10.0
    """Reviews per second of the client they go through, its own (made by
    :class:`runtime.manager.Manager`: not the manager's client). Default 10."""

    review_burst: int = 20
    """The burst of that client's token bucket. Default 20."""

    def __post_init__(self) -> None:
        if self.review_timeout <= 0 or self.max_entries < 1:
            raise ValueError("review_timeout must be > 0 and max_entries >= 1")
        if self.max_reviews_in_flight < 1 or self.review_qps <= 0 or self.review_burst < 1:
            raise ValueError("max_reviews_in_flight and review_burst must be >= 1, review_qps > 0")
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
    """Token and access reviews through ``requester``, cached and capped in flight (see
    the module docstring); ``requester`` is the reviews' own client."""

    def __init__(
        self,
        requester: Requester,
        options: Options | None = None,
        *,
        clock: clock_.Clock | None = None,
    ) -> None:
        self.options = options or Options()
        self._requester = requester
        self._clock = clock = clock or clock_.RealClock()
        size = self.options.max_entries
        self._tokens: _TTLCache[bytes, User] = _TTLCache(size, clock)
        self._rejected: _TTLCache[bytes, bool] = _TTLCache(size, clock)
        self._access: _TTLCache[tuple[User, str, str], bool] = _TTLCache(size, clock)
        self.in_flight = 0
        """Reviews sent and not answered yet."""
        self._refused = 0
        self._next_refusal_log = 0.0

    async def _review(self, path: str, body: dict[str, Any]) -> Mapping[str, Any]:
        kind = body["kind"]
        cap = self.options.max_reviews_in_flight
        if self.in_flight >= cap:
            self._note_refusal()
            raise TooManyReviews(f"{kind} not sent: {cap} reviews in flight already")
        timeout = self.options.review_timeout
        self.in_flight += 1
        # Whatever went wrong, it is no answer: never an allow. The message says what may
        # be logged of it (never an answer, which may echo the token), and the original
        # exception is not chained for the same reason.
        try:
            async with asyncio.timeout(timeout):
                answer = await self._requester.request(
                    "POST", path, body=body, request_timeout=timeout
                )
        except TimeoutError:
            raise ReviewFailed(f"{kind} failed: no answer within {timeout} s") from None
        except Exception as exc:
            raise ReviewFailed(f"{kind} failed: {_described(exc)}") from None
        finally:
            self.in_flight -= 1
        status = answer.get("status") if isinstance(answer, Mapping) else None
        if not isinstance(status, Mapping):
            what = type(answer).__name__
            raise ReviewFailed(f"{kind} answered without a status (a {what})")
        return status

    def _note_refusal(self) -> None:
        """Count a refused review; warn about them at most once a minute."""
        self._refused += 1
        now = self._clock.now()
        if now >= self._next_refusal_log:
            _log.warning(
                "reviews refused (429): too many in flight", refused=self._refused,
                max_reviews_in_flight=self.options.max_reviews_in_flight,
            )  # fmt: skip
            self._refused = 0
            self._next_refusal_log = now + _REFUSALS_LOG_INTERVAL

    async def authenticate(self, token: str) -> User | None:
        """The user ``token`` belongs to, or None if the API server does not accept it.
        Raises :class:`ReviewFailed` when the review cannot be made."""
        key = hashlib.sha256(token.encode()).digest()
        cached, user = self._tokens.get(key)
        if cached:
            return user
        if self._rejected.get(key)[0]:
            return None
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
            return user
        self._rejected.put(key, True, self.options.rejected_ttl)
        return None

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
        except TooManyReviews:
            return _too_many()
        except ReviewFailed as exc:
            _log.error("authentication failed", path=request.path, error=str(exc))
            return web.Response(status=500, text="Authentication failed\n")
        if user is None:
            _log.debug("token rejected", path=request.path)
            return _unauthorized()
        verb = request.method.lower()
        try:
            allowed = await self.authorize(user, verb, request.path)
        except TooManyReviews:
            return _too_many()
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


def _described(error: BaseException) -> str:
    """What may be logged of a failed review call: the error's type, and an API error's
    HTTP status; never its message, which may quote the answer (and the token).

    >>> _described(ConnectionRefusedError(111, "Connection refused"))
    'ConnectionRefusedError'
    >>> from runtime.client import errors
    >>> _described(errors.from_status(400, {"message": "bad token eyJhbGciOi..."}))
    'BadRequest (HTTP 400)'
    """
    status = getattr(error, "status", None)
    if isinstance(status, int) and not isinstance(status, bool):
        return f"{type(error).__name__} (HTTP {status})"
    return type(error).__name__


def _too_many() -> web.Response:
    return web.Response(
        status=429, text="Too many requests\n", headers={"Retry-After": str(RETRY_AFTER)}
    )


def _unauthorized() -> web.Response:
    return web.Response(status=401, text="Unauthorized\n", headers={"WWW-Authenticate": "Bearer"})
