"""Wiring the RayCluster controller to a manager (controller-runtime keeps
``SetupWithManager`` beside ``Reconcile``): :func:`setup` reconciles RayClusters on
changes to their spec, labels or annotations (its own status writes and metadata noise
do not wake it) and on any change to the pods, services and Redis clean-up Jobs it
controls. Token Secrets are not watched (KubeRay watches them): the operator may not list
or watch Secrets (:mod:`controllers.rbac`), so a deleted one is made again at the
cluster's next pass, not at once. :data:`RBAC` is what it needs in the API server
(``config/rbac/role.yaml`` is generated from it).
"""

from __future__ import annotations

from typing import Any

import api.v1 as v1
from controllers import rbac
from controllers.raycluster import pods, redis_cleanup, services
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
        .owns(redis_cleanup.JOBS, delay=child_event_delay)
        .with_options(
            max_concurrent_reconciles=max_concurrent_reconciles,
            skip_name_validation=skip_name_validation,
        )
        .named(NAME)
        .complete(reconciler)
    )
