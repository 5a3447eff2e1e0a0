"""The RayCluster and RayService reconcilers, built on :mod:`runtime` and :mod:`api`.

:func:`setup` registers both with a manager; the ``rayservice-manager`` binary
(:mod:`controllers.main`) calls it. The RayCluster controller
(:mod:`controllers.raycluster`) runs the clusters; the RayService controller
(:mod:`controllers.rayservice`) runs Ray Serve on them through the Ray dashboard.
With ``enable_metrics``, :mod:`controllers.metrics` reports KubeRay's ``kuberay_*``
metrics for both kinds.
"""

from __future__ import annotations

import asyncio
from typing import Any

from controllers import metrics, raycluster, rayservice
from controllers.ray import dashboard
from controllers.raycluster import reconciler as raycluster_reconciler
from controllers.rayservice import reconciler as rayservice_reconciler

__all__ = ["DashboardCloser", "setup"]


class DashboardCloser:
    """A runnable that closes a dashboard factory's session when the manager stops
    (it runs on every replica, leader or not)."""

    needs_leader_election = False

    def __init__(self, dashboards: dashboard.DashboardFactory) -> None:
        self.dashboards = dashboards

    async def start(self, stop: asyncio.Event) -> None:
        try:
            await stop.wait()
        finally:
            await self.dashboards.close()


def setup(
    manager: Any,
    *,
    max_concurrent_reconciles: int = 1,
    dashboards: dashboard.DashboardFactory | None = None,
    rayservice_options: rayservice_reconciler.Options | None = None,
    raycluster_options: raycluster_reconciler.Options | None = None,
    enable_metrics: bool = False,
) -> list[Any]:
    """Register the reconcilers with ``manager``; returns the controllers built.

    ``dashboards``: default one :class:`controllers.ray.dashboard.Dashboards` on the
    manager's API client, closed when the manager stops. ``enable_metrics``: also
    serve KubeRay's ``kuberay_*`` metrics (:mod:`controllers.metrics`) on the
    manager's ``/metrics``; default off, as KubeRay's ``--enable-metrics``."""
    if dashboards is None:
        dashboards = dashboard.Dashboards(api=manager.client)
        manager.add(DashboardCloser(dashboards))
    observer = metrics.enable(manager).durations if enable_metrics else None
    return [
        raycluster.setup(
            manager,
            max_concurrent_reconciles=max_concurrent_reconciles,
            options=raycluster_options,
            metrics=observer,
        ),
        rayservice.setup(
            manager,
            dashboards=dashboards,
            options=rayservice_options,
            max_concurrent_reconciles=max_concurrent_reconciles,
        ),
    ]
