"""Serve's answers as data: the models of ``GET /api/serve/applications/`` and Serve's
port, with no I/O (no aiohttp, no client), so that what decides from them
(:mod:`controllers.rayservice.plan`, :mod:`controllers.rayservice.report`) stays pure.

The models hold what a reconciler reads: per application ``status``, ``message``,
``route_prefix`` (``None`` while it deploys: measured on Ray 2.60) and ``deployments``
``{name: {status, message}}``. Unknown fields are kept (``model_extra``) and never an
error; a status string Ray adds later is kept as the string (compare with
:class:`ApplicationStatus` / :class:`DeploymentStatus`, which are ``str`` enums). The
client that fetches and parses them is :mod:`controllers.ray.dashboard`.

>>> d = ServeDetails.model_validate({"applications": {"a": {"status": "RUNNING"}}})
>>> d.applications["a"].status == ApplicationStatus.RUNNING, d.target_capacity
(True, None)
"""

from __future__ import annotations

import enum
from typing import Annotated

import pydantic

from api.v1 import rayservice

__all__ = [
    "DEFAULT_SERVE_PORT",
    "ApplicationDetails",
    "ApplicationStatus",
    "DeploymentDetails",
    "DeploymentStatus",
    "ServeDetails",
]

DEFAULT_SERVE_PORT = 8000
"""Serve's HTTP port on a Ray node when its container names none (``serve``): Ray's and
KubeRay's default."""


ApplicationStatus = rayservice.ApplicationStatus
"""Serve application statuses known in Ray 2.60: the API's own enum (a status is kept even
if not there)."""


class DeploymentStatus(enum.StrEnum):
    """Serve deployment statuses known in Ray 2.60."""

    UPDATING = "UPDATING"
    HEALTHY = "HEALTHY"
    UNHEALTHY = "UNHEALTHY"
    DEPLOY_FAILED = "DEPLOY_FAILED"
    UPSCALING = "UPSCALING"
    DOWNSCALING = "DOWNSCALING"


def _empty_if_none(value: object) -> object:
    return "" if value is None else value


_Text = Annotated[str, pydantic.BeforeValidator(_empty_if_none)]
"""A string where Ray may send ``null`` (read as ``""``)."""


class _Model(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow", frozen=True, strict=True)


class DeploymentDetails(_Model):
    """One deployment of an application (other fields Ray sends: ``model_extra``)."""

    name: _Text = ""
    status: str
    message: _Text = ""


class ApplicationDetails(_Model):
    """One Serve application (other fields Ray sends: ``model_extra``)."""

    name: _Text = ""
    status: str
    message: _Text = ""
    route_prefix: str | None = None
    deployments: dict[str, DeploymentDetails] = pydantic.Field(default_factory=dict)


class ServeDetails(_Model):
    """The answer to ``GET /api/serve/applications/``: the applications by name."""

    applications: dict[str, ApplicationDetails] = pydantic.Field(default_factory=dict)
    target_capacity: float | None = None
    """Serve's ``target_capacity`` (percent of every deployment's replicas); None: 100."""
