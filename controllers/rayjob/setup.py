"""Wiring the RayJob controller to a manager: :func:`setup` reconciles RayJobs on changes
to their spec, labels or annotations (its own status writes do not wake it), on any
change to the RayClusters and Services it controls (a cluster turning ``ready``), and on
a submitter Job's creation, deletion, a change of its conditions (its end) or of its
``deletionTimestamp`` - not on its progress counters (``active``, ``ready``), which the
plan never reads: the submitter's end, not a 3 s poll, moves a job on. The cluster's
head pods are read from the cache (``SidecarMode``) but not watched: their submitter's
end is seen at the next poll. :data:`RBAC` is what it needs in the API server.
"""

from __future__ import annotations

from typing import Any

import api.v1 as v1
from controllers import rbac
from controllers.ray import dashboard, retries
from controllers.rayjob import plan as plan_
from controllers.rayjob import reconciler as reconciler_
from runtime import builder, predicate
from runtime import controller as controller_

__all__ = ["NAME", "RBAC", "RECORDER", "rate_limiter", "setup", "submitter_changed"]

NAME = "rayjob"
"""The controller's name (logs, metrics)."""
RECORDER = "rayjob-controller"
"""Who its Events say reported them (KubeRay's name)."""
RBAC = rbac.RAYJOB
"""The API permissions the reconciler needs."""


rate_limiter = retries.rate_limiter
"""Retries of a failed pass (:func:`controllers.ray.retries.rate_limiter`)."""


submitter_changed = predicate.or_(
    predicate.field_changed("status", "conditions"),
    predicate.field_changed("metadata", "deletionTimestamp"),
)
"""Which submitter Job events wake its RayJob (see the module docstring)."""


def setup(
    manager: Any,
    *,
    dashboards: dashboard.DashboardFactory,
    options: reconciler_.Options | None = None,
    max_concurrent_reconciles: int = 1,
    skip_name_validation: bool = False,
    metrics: reconciler_.MetricsObserver | None = None,
) -> controller_.Controller:
    """Register the RayJob controller with ``manager``; returns it."""
    v1.add_to_registry(manager.client.registry)
    reconciler = reconciler_.Reconciler(
        manager.client,
        manager.cache,
        manager.recorder(RECORDER),
        dashboards,
        options,
        metrics=metrics,
    )
    return (
        builder.Builder(manager)
        .for_(v1.RAYJOBS, predicates=(predicate.spec_or_metadata_changed,))
        .owns(v1.RAYCLUSTERS)
        .owns(plan_.SERVICES)
        .owns(plan_.JOBS, predicates=(submitter_changed,))
        .with_options(
            max_concurrent_reconciles=max_concurrent_reconciles,
            skip_name_validation=skip_name_validation,
            rate_limiter=rate_limiter(),
        )
        .named(NAME)
        .complete(reconciler)
    )
