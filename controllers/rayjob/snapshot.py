"""The snapshot: what one RayJob pass decides from, read once by
:mod:`controllers.rayjob.observe` and never changed afterwards.

Pure data (frozen dataclasses over the cache's objects, which are shared and read-only:
nothing may change them); :mod:`controllers.rayjob.plan` reads it and nothing else. What
is read depends on the RayJob's ``jobDeploymentStatus`` (observe's docstring says what,
for each): a field left at its default was not looked for.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

import api.v1 as v1
from controllers.ray import jobs

__all__ = ["Dashboard", "Snapshot"]

Obj = Mapping[str, Any]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Dashboard:
    """What the cluster's dashboard said of the job (one GET ``/api/jobs/<id>``)."""

    info: jobs.JobInfo | None = None
    """The job as Ray reports it; None when Ray does not know it (404) or on an error."""
    error: str | None = None
    """Why the dashboard could not be asked (unreachable, a timeout, an HTTP error, the
    token missing); None when it answered."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Snapshot:
    """A RayJob and what it uses, as the cache (and the dashboard) had them at the start
    of a pass."""

    obj: Obj
    """The RayJob as the cache holds it."""
    job: v1.RayJob | None
    """``obj`` validated by its model; None when it does not validate (:attr:`invalid`)."""
    invalid: tuple[str, str] | None = None
    """``(event reason, message)`` when the RayJob is invalid
    (:func:`controllers.rayjob.validation.validate`)."""
    cluster: Obj | None = None
    """The RayCluster named in ``status.rayClusterName``, if it exists."""
    head_service: Obj | None = None
    """That cluster's head Service, if it exists (read once the cluster is ready)."""
    job_service: Obj | None = None
    """The RayJob's own head Service ``<rayjob>-head-svc``, if it exists."""
    submitter: Obj | None = None
    """The submitter Job (``K8sJobMode``), if it exists."""
    head_pods: tuple[Obj, ...] = ()
    """The cluster's head pods (``SidecarMode``: its submitter runs in the head pod)."""
    dashboard: Dashboard | None = None
    """What the dashboard said of the job (read in ``Running`` only, when a poll is due)."""
    next_poll: datetime.datetime | None = None
    """In ``Running`` with the dashboard not asked: when the next poll is due
    (:func:`controllers.rayjob.plan.poll_at`)."""
