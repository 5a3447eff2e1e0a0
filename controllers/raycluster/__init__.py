"""The RayCluster controller: the pods and services KubeRay v1.7.0 would make, an honest
status, and no request at all once a cluster has converged.

- :mod:`controllers.raycluster.names`: generated names and the problems that make a
  cluster's objects impossible to create;
- :mod:`controllers.raycluster.pods`, :mod:`~controllers.raycluster.services`,
  :mod:`~controllers.raycluster.autoscaler`: pure builders of the head and worker
  pods, the head (and serve) service, and the autoscaler's sidecar and RBAC;
- :mod:`controllers.raycluster.report`: the status, computed in one pure function;
- :mod:`controllers.raycluster.redis_cleanup`: GCS fault tolerance's Redis clean-up
  finalizer and Job;
- :mod:`controllers.raycluster.reconciler`: one reconcile pass.

:func:`setup` wires the reconciler to a manager: it reconciles RayClusters on
changes to their spec, labels or annotations (its own status writes and
metadata noise do not wake it) and on any change to the pods, services, token
Secrets (a deleted one is made again, as KubeRay does) and Redis clean-up Jobs it
controls. :data:`RBAC` is what it needs in the API server (``config/rbac/role.yaml``
is generated from it).
"""

from __future__ import annotations

from typing import Any

import api.v1 as v1
from controllers import rbac
from controllers.raycluster import auth, pods, redis_cleanup, services
from controllers.raycluster import reconciler as reconciler_
from runtime import builder, predicate
from runtime import controller as controller_

__all__ = ["CHILD_EVENT_DELAY", "NAME", "RBAC", "RECORDER", "setup"]

NAME = "raycluster"
"""The controller's name (logs, metrics)."""
RECORDER = "raycluster-controller"
"""Who its Events say reported them (``reportingController``; KubeRay's name)."""

RBAC = rbac.RAYCLUSTER
"""The API permissions the reconciler needs."""


CHILD_EVENT_DELAY = 1.0
"""Seconds between a change to a cluster's pod or service and the reconcile it causes:
the pods of a new cluster turn Running within about a second of each other, and
one reconcile (one status write) for all of them beats one per pod."""


def setup(
    manager: Any,
    *,
    max_concurrent_reconciles: int = 1,
    options: reconciler_.Options | None = None,
    child_event_delay: float = CHILD_EVENT_DELAY,
    skip_name_validation: bool = False,
    metrics: reconciler_.MetricsObserver | None = None,
) -> controller_.Controller:
    """Register the RayCluster controller with ``manager``; returns it.

    ``skip_name_validation``: allow a second controller of this name in the process
    (tests that start several managers). ``metrics``: where the reconciler reports
    status writes and vanished clusters (:mod:`controllers.metrics`); default none."""
    v1.add_to_registry(manager.client.registry)
    reconciler = reconciler_.Reconciler(
        manager.client,
        manager.cache,
        manager.recorder(RECORDER),
        options or reconciler_.Options(),
        metrics=metrics,
    )
    return (
        builder.Builder(manager)
        .for_(v1.RAYCLUSTERS, predicates=(predicate.spec_or_metadata_changed,))
        .owns(pods.PODS, delay=child_event_delay)
        .owns(services.SERVICES, delay=child_event_delay)
        .owns(auth.SECRETS, delay=child_event_delay)
        .owns(redis_cleanup.JOBS, delay=child_event_delay)
        .with_options(
            max_concurrent_reconciles=max_concurrent_reconciles,
            skip_name_validation=skip_name_validation,
        )
        .named(NAME)
        .complete(reconciler)
    )
