"""The snapshot: what one RayCluster pass decides from, read once by
:mod:`controllers.raycluster.observe` and never changed afterwards.

Pure data (frozen dataclasses over the cache's objects, which are shared and read-only:
nothing may change them); :mod:`controllers.raycluster.plan` reads it and nothing else.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pydantic

import api.v1 as v1

__all__ = ["After", "Snapshot"]

Obj = Mapping[str, Any]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Snapshot:
    """A RayCluster and what it owns, as the cache (and, for the autoscaler's RBAC, the
    API server) has them at the start of a pass."""

    obj: Obj
    """The RayCluster as the cache holds it."""
    cluster: v1.RayCluster | None
    """``obj`` validated; None when its spec cannot be read (:attr:`invalid` says why)."""
    invalid: pydantic.ValidationError | None = None
    """Why ``obj`` does not validate, if it does not."""
    problems: tuple[str, ...] = ()
    """Why its objects cannot be created
    (:func:`controllers.raycluster.validation.problems`); nothing more is read then. Not
    looked for in a cluster being deleted."""
    pods: tuple[Obj, ...] = ()
    """The cluster's head and worker pods (not its clean-up Job's), terminating ones
    included."""
    owned: Mapping[tuple[str, str], bool] = dataclasses.field(default_factory=dict)
    """The owned objects that exist, by ``(kind, name)``: whether this RayCluster is their
    controller (:func:`controllers.raycluster.plan.owned` names the ones looked for). Not
    read for a cluster being deleted."""
    jobs: tuple[Obj, ...] = ()
    """The Redis clean-up Jobs it controls; read only for a cluster being deleted."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class After:
    """What the status is computed from, read again after the pass's writes (the cache
    holds them already: the head pod's generated name, the pods now terminating)."""

    pods: tuple[Obj, ...]
    """As :attr:`Snapshot.pods`."""
    head_service: Obj | None
    """The head service, if it exists."""
