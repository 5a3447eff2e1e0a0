"""Setup: the RayCluster, RayService and RayJob reconcilers wired to one manager.

:func:`setup` registers both with a manager; the ``rayservice-manager`` binary
(:mod:`controllers.main`) calls it, after building the manager with
:func:`cache_by_resource` (a manager's cache is fixed when it is made, so what the
reconcilers need of it is declared apart from ``setup``). The RayCluster controller
(:mod:`controllers.raycluster`) runs the clusters; the RayService controller
(:mod:`controllers.rayservice`) runs Ray Serve on them through the Ray dashboard, the
RayJob controller (:mod:`controllers.rayjob`) runs one Ray job on a cluster of its own
or on an existing one.
With ``enable_metrics``, :mod:`controllers.metrics` reports KubeRay's ``kuberay_*``
metrics for the three kinds.
"""

from __future__ import annotations

import asyncio
from typing import Any

from controllers import metrics
from controllers.ray import dashboard
from controllers.raycluster import interface as raycluster_interface
from controllers.raycluster import reconciler as raycluster_reconciler
from controllers.raycluster import setup as raycluster_setup
from controllers.raycronjob import setup as raycronjob_setup
from controllers.rayjob import reconciler as rayjob_reconciler
from controllers.rayjob import setup as rayjob_setup
from controllers.rayservice import reconciler as rayservice_reconciler
from controllers.rayservice import setup as rayservice_setup
from runtime import events
from runtime.cache import cache
from runtime.client import resources

__all__ = ["EVENT_OPTIONS", "DashboardCloser", "cache_by_resource", "setup"]


def cache_by_resource() -> dict[resources.Resource, cache.ByResource]:
    """What the reconcilers need of the manager's cache, for
    ``runtime.manager.Options(cache_by_resource=...)``: only the objects they read, so the
    operator's memory does not grow with other workloads of the cluster.

    - **Pods**: Ray nodes only (``ray.io/node-type in (head,worker,redis-cleanup)``, as
      KubeRay v1.7.0's cache). Both reconcilers read pods only by their cluster's labels
      or by the name of a pod they listed, and every pod they make carries a node type.
    - **Services and EndpointSlices**: everything, as in KubeRay v1.7.0. No one label
      selector (an AND of requirements, no OR across keys) covers the Services read here:
      a RayCluster's head service has ``ray.io/node-type=head``, its serve service and a
      RayService's services ``ray.io/originated-from-crd``, the headless worker service
      ``ray.io/headless-worker-svc``. And they are read **by name**: one made by KubeRay
      before a hand-over, or by a user under that name, must be seen so it is updated,
      not created again (AlreadyExists on every pass). EndpointSlices carry their
      Service's labels (the EndpointSlice controller copies them) and are read by
      ``kubernetes.io/service-name``, whose values are not known in advance.
    - **Secrets**: none. KubeRay caches every Secret of the cluster; here the token
      Secrets are read by name with GET (:mod:`controllers.ray.tokens`, the
      RayCluster controller's look before it creates one), so the operator's token needs
      no ``list``/``watch`` on Secrets (:mod:`controllers.rbac`) and its memory holds no
      credential it was not asked for.
    - **Jobs**: those labelled ``app.kubernetes.io/created-by=kuberay-operator``, as
      KubeRay v1.7.0's cache: the GCS fault tolerance Redis clean-up Jobs (they carry the
      head pod's labels), KubeRay's or ours.
    - RayClusters and RayServices: everything (they are ours).

    Every resource keeps the cache's default transform (``managedFields`` dropped)."""
    return {
        raycluster_interface.PODS: cache.ByResource(
            label_selector=raycluster_interface.CACHE_SELECTOR
        ),
        raycluster_interface.JOBS: cache.ByResource(
            label_selector=raycluster_interface.JOB_CACHE_SELECTOR
        ),
    }


EVENT_OPTIONS = events.Options(api="events.k8s.io/v1")
"""How the operator records Events (``runtime.manager.Options(events=...)``): the
``events.k8s.io/v1`` API with an action, as KubeRay v1.7.0."""


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
    rayjob_options: rayjob_reconciler.Options | None = None,
    raycronjob: bool = False,
    enable_metrics: bool = False,
) -> list[Any]:
    """Register the reconcilers with ``manager``; returns the controllers built.

    ``dashboards``: default one :class:`controllers.ray.dashboard.Dashboards` on the
    manager's API client, closed when the manager stops. ``enable_metrics``: also
    serve KubeRay's ``kuberay_*`` metrics (:mod:`controllers.metrics`) on the
    manager's ``/metrics``; default off, as KubeRay's ``--enable-metrics``. ``raycronjob``:
    also run the RayCronJob controller (KubeRay's ``RayCronJob`` gate; default off)."""
    if dashboards is None:
        dashboards = dashboard.Dashboards(api=manager.client)
        manager.add(DashboardCloser(dashboards))
    collector = metrics.enable(manager) if enable_metrics else None
    observer = collector.durations if collector is not None else None
    built = [
        raycluster_setup.setup(
            manager,
            max_concurrent_reconciles=max_concurrent_reconciles,
            options=raycluster_options,
            metrics=observer,
        ),
        rayservice_setup.setup(
            manager,
            dashboards=dashboards,
            options=rayservice_options,
            max_concurrent_reconciles=max_concurrent_reconciles,
        ),
        rayjob_setup.setup(
            manager,
            dashboards=dashboards,
            options=rayjob_options,
            max_concurrent_reconciles=max_concurrent_reconciles,
            metrics=collector.job_durations if collector is not None else None,
        ),
    ]
    if raycronjob:
        built.append(raycronjob_setup.setup(manager))
    return built
