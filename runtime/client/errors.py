"""Typed API errors: what the API server said, as an exception you can catch by meaning.

Every non-2xx answer becomes an :class:`ApiError` subclass chosen by HTTP status
and the ``reason`` of the ``Status`` body, carrying that body's ``message``:

=========  ====================  =============================================
status     class                 meaning for a reconciler
=========  ====================  =============================================
400        ``BadRequest``        our bug; do not retry
401        ``Unauthorized``      credentials are wrong or expired
403        ``Forbidden``         RBAC says no (the message names the verb)
404        ``NotFound``          the object is gone: often fine (clean-up done)
409        ``AlreadyExists``     create of a name that exists
409        ``Conflict``          stale resourceVersion: re-read and retry
410        ``Gone``              resourceVersion too old (watch/list): relist
422        ``Invalid``           the object fails validation; do not retry
429        ``TooManyRequests``   throttled; ``retry_after`` seconds if given
500, 5xx   ``ServerError``       transient; idempotent verbs are retried
504        ``ServerTimeout``     the server gave up; transient
=========  ====================  =============================================

>>> err = from_status(409, {"reason": "AlreadyExists", "message": 'pods "x" already exists'})
>>> type(err).__name__, err.status, str(err)
('AlreadyExists', 409, 'HTTP 409 AlreadyExists: pods "x" already exists')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "AlreadyExists",
    "ApiError",
    "BadRequest",
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "NotFound",
    "Redirected",
    "ResponseTooLarge",
    "ServerError",
    "ServerTimeout",
    "TooManyRequests",
    "Unauthorized",
    "from_status",
]


class ApiError(Exception):
    """An error answer from the API server."""

    status: int = 0

    def __init__(
        self,
        status: int,
        reason: str = "",
        message: str = "",
        body: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.body = dict(body or {})
        self.retry_after = retry_after
        head = f"HTTP {status} {reason}".rstrip()
        super().__init__(f"{head}: {message.strip()}" if message.strip() else head)


class BadRequest(ApiError):
    """400."""


class Unauthorized(ApiError):
    """401."""


class Forbidden(ApiError):
    """403: RBAC denied the request."""


class NotFound(ApiError):
    """404: the object (or its kind) does not exist."""


class AlreadyExists(ApiError):
    """409 with reason AlreadyExists: a create of an existing name."""


class Conflict(ApiError):
    """409: the write carried a stale resourceVersion (optimistic concurrency)."""


class Gone(ApiError):
    """410: the resourceVersion is too old (compacted); relist."""


class Invalid(ApiError):
    """422: the object fails validation."""


class TooManyRequests(ApiError):
    """429: throttled by the server (priority and fairness); see ``retry_after``."""


class ServerError(ApiError):
    """5xx: a transient server failure."""


class ServerTimeout(ServerError):
    """504, or reason Timeout: the server gave up on the request."""


class Redirected(ApiError):
    """3xx: the server answered with a redirect, which this client never follows (a
    redirect would re-send the body, and the credentials, to wherever it points);
    ``location`` is where it pointed."""

    def __init__(self, status: int, location: str) -> None:
        self.location = location
        super().__init__(status, "Redirect", f"redirect to {location or '(no Location)'} refused")


class ResponseTooLarge(Exception):
    """An answer's body was larger than the client reads (``limit`` bytes); nothing of it
    is kept. Not an :class:`ApiError`: the server may have answered 200."""

    def __init__(self, method: str, url: str, limit: int) -> None:
        self.method = method
        self.url = url
        self.limit = limit
        super().__init__(f"{method} {url}: the answer is larger than {limit} bytes; refused")


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
    504: ServerTimeout,
}


def from_status(
    status: int, body: Mapping[str, Any] | None, retry_after: float | None = None
) -> ApiError:
    """The typed error for an HTTP ``status`` and its decoded ``Status`` body."""
    body = body if isinstance(body, Mapping) else {}
    reason = str(body.get("reason", ""))
    message = str(body.get("message", ""))
    cls: type[ApiError]
    if status == 409 and reason == "AlreadyExists":
        cls = AlreadyExists
    elif reason in ("Timeout", "ServerTimeout"):
        cls = ServerTimeout
    elif status in _BY_STATUS:
        cls = _BY_STATUS[status]
    elif status >= 500:
        cls = ServerError
    else:
        cls = ApiError
    return cls(status, reason, message, body, retry_after)
