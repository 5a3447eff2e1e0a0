"""Wiring the RayCronJob controller to a manager (only with the ``RayCronJob`` gate, as
KubeRay v1.7.0): :func:`setup` reconciles RayCronJobs on changes to their spec, labels or
annotations, and at each tick (``requeue_after``). Its RayJobs are not watched: it never
reads them back. :data:`RBAC` is what it needs in the API server.
"""

from __future__ import annotations

from typing import Any

import api.v1 as v1
from controllers import rbac
from controllers.raycronjob import reconciler as reconciler_
from runtime import builder, predicate
from runtime import controller as controller_

__all__ = ["NAME", "RBAC", "RECORDER", "setup"]

NAME = "raycronjob"
RECORDER = "raycronjob-controller"
RBAC = rbac.RAYCRONJOB


def setup(
    manager: Any, *, skip_name_validation: bool = False, clock: Any = None
) -> controller_.Controller:
    """Register the RayCronJob controller with ``manager``; returns it. ``clock``: the
    time (a timezone-aware ``datetime``; tests pass a fake one)."""
    v1.add_to_registry(manager.client.registry)
    kw = {} if clock is None else {"clock": clock}
    reconciler = reconciler_.Reconciler(
        manager.client, manager.cache, manager.recorder(RECORDER), **kw
    )
    return (
        builder.Builder(manager)
        .for_(v1.RAYCRONJOBS, predicates=(predicate.spec_or_metadata_changed,))
        .with_options(skip_name_validation=skip_name_validation)
        .named(NAME)
        .complete(reconciler)
    )
