"""The API client: generic over kinds, typed errors, timeouts and retries on every call.

- :mod:`runtime.client.client`: :class:`Client` (get, list, create, update, patch,
  delete, watch, status writes) and its :class:`Options`;
- :mod:`runtime.client.errors`: :class:`NotFound`, :class:`Conflict`, :class:`Gone`, ...;
- :mod:`runtime.client.resources`: where each kind is served (:class:`Resource`).
"""

from runtime.client import errors, resources
from runtime.client.client import Client, ListResult, Options
from runtime.client.errors import (
    AlreadyExists,
    ApiError,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    ServerTimeout,
    TooManyRequests,
)
from runtime.client.resources import Resource

__all__ = [
    "AlreadyExists",
    "ApiError",
    "Client",
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "ListResult",
    "NotFound",
    "Options",
    "Resource",
    "ServerTimeout",
    "TooManyRequests",
    "errors",
    "resources",
]
