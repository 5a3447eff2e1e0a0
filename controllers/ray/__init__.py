"""Talking to Ray: the dashboard client the RayService reconciler drives Serve with (and a
RayJob reconciler drives Ray jobs with).

- :mod:`controllers.ray.dashboard`: the :class:`~controllers.ray.dashboard.DashboardClient`
  protocol (Serve applications GET/PUT, the Serve proxy's health, the Ray Jobs API:
  submit, get, list, stop, delete, logs), its typed errors and models, the three
  address modes (``service``, ``pod-ip``, ``kubernetes-proxy``) and
  :class:`~controllers.ray.dashboard.Dashboards`, the aiohttp implementation owning one
  shared session per manager;
- :mod:`controllers.ray.jobs`: the Jobs API's ``JobInfo`` and ``JobSubmitRequest`` as
  data, no I/O (what a pure plan may read);
- :mod:`controllers.ray.retries`: how a controller talking to dashboards retries a
  failed pass (the RayService and RayJob controllers' rate limiter);
- :mod:`controllers.ray.serveconfig`: ``serveConfigV2`` YAML -> the JSON body to PUT;
- :mod:`controllers.ray.fake`: :class:`~controllers.ray.fake.FakeDashboard` and
  :class:`~controllers.ray.fake.FakeDashboards` for unit tests.
"""

from __future__ import annotations

__all__: list[str] = []
