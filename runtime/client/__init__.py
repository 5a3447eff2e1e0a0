"""The API client: generic over kinds, typed errors, timeouts and retries on every call.

- :mod:`runtime.client.client`: :class:`Client` (get, list, create, update, patch,
  delete, watch, status writes) and its :class:`Options`;
- :mod:`runtime.client.errors`: :class:`NotFound`, :class:`Conflict`, :class:`Gone`, ...;
- :mod:`runtime.client.resources`: where each kind is served: :class:`Resource` (spelled
  ``runtime.client.Resource``), and :func:`~runtime.client.resources.builtin` for a
  built-in kind by name (``runtime.client.builtin("ConfigMap")``).

``Client``, ``ListResult`` and ``Options`` load on first use (PEP 562): importing the
errors or the resource table does not load aiohttp.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from runtime.client import errors, resources
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
from runtime.client.resources import Resource, builtin

if TYPE_CHECKING:
    from runtime.client.client import Client, ListResult, Options

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
    "builtin",
    "errors",
    "resources",
]


def __getattr__(name: str) -> Any:
    if name in ("Client", "ListResult", "Options"):
        value = getattr(importlib.import_module("runtime.client.client"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'runtime.client' has no attribute {name!r}")
