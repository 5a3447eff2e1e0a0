"""In-memory Ray dashboards for unit tests: :class:`FakeDashboard` and :class:`FakeDashboards`.

:class:`FakeDashboard` is a :class:`~controllers.ray.dashboard.DashboardClient`
holding one Ray head's Serve state:

- **applications** are set by the test (:meth:`FakeDashboard.set_application`,
  :meth:`~FakeDashboard.set_all`, :meth:`~FakeDashboard.remove_application`,
  :meth:`~FakeDashboard.restart`: a head that forgot everything) and returned by
  ``get_serve_applications`` as :class:`~controllers.ray.dashboard.ServeDetails`;
- every **PUT is recorded** (``submitted``, a deep copy of each config, and
  ``put_count``) and applied as Serve applies it: the applications it names take the
  status ``put_status`` (default ``DEPLOYING``; ``None`` leaves the state alone),
  their ``route_prefix`` and, as Ray reports it, their ``deployed_app_config`` (the
  application's part of the config, in ``model_extra``) - except applications whose
  config did not change, which keep their status, as Serve keeps them running;
  applications it leaves out are removed. Its ``target_capacity`` (Serve's, for
  incremental upgrades; None when absent) is kept in ``target_capacity`` and reported
  by the GET. ``get_count`` counts GETs, failed ones too. ``proxies`` (empty by
  default) is what the answer reports under ``proxies`` (Ray's
  ``{node_id: {node_ip, status, ...}}``);
- ``serve_proxy_healthy`` answers ``proxy_healthy`` (default ``True``), or
  ``proxy_health[<pod name>]`` when set; every pod asked about is recorded in
  ``health_checks``;
- **faults**: :meth:`FakeDashboard.fail` makes ``"get"``, ``"put"`` or ``"health"``
  raise a given :class:`~controllers.ray.dashboard.DashboardError` (every time, or the
  next ``times`` calls); like the real client, a failing health check answers
  ``False`` instead of raising. A failed PUT is not recorded.

:class:`FakeDashboards` is the :class:`~controllers.ray.dashboard.DashboardFactory`:
one :class:`FakeDashboard` per cluster (``(namespace, cluster)`` of the address, so
the same fake answers whatever the mode or the head's current IP), created on first
use; :meth:`FakeDashboards.for_cluster` gives a test the fake of a cluster before or
after the code under test asked for it. It records the addresses and auth tokens
asked for.

>>> import asyncio
>>> from controllers.ray import dashboard
>>> fakes = FakeDashboards()
>>> client = fakes.client_for(dashboard.address(cluster="c", namespace="ns"))
>>> asyncio.run(client.put_serve_applications(
...     {"applications": [{"name": "app", "import_path": "m:app", "route_prefix": "/"}]}))
>>> fake = fakes.for_cluster("ns", "c")
>>> fake.put_count, fake.applications["app"].status
(1, 'DEPLOYING')
>>> fake.set_all("RUNNING")
>>> asyncio.run(client.get_serve_applications()).applications["app"].status
'RUNNING'
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Literal

from controllers.ray import dashboard

__all__ = ["FakeDashboard", "FakeDashboards", "Operation"]

Operation = Literal["get", "put", "health"]


class FakeDashboard:
    """One Ray head's Serve state in memory; see the module docstring."""

    def __init__(
        self,
        *,
        put_status: str | None = dashboard.ApplicationStatus.DEPLOYING,
        proxy_healthy: bool = True,
    ) -> None:
        self.applications: dict[str, dashboard.ApplicationDetails] = {}
        self.submitted: list[dict[str, Any]] = []
        self.put_status = put_status
        self.proxy_healthy = proxy_healthy
        self.proxy_health: dict[str, bool] = {}
        self.health_checks: list[dashboard.ServePod] = []
        self.proxies: dict[str, dict[str, Any]] = {}
        self.get_count = 0
        self.target_capacity: float | None = None
        self._faults: dict[Operation, tuple[dashboard.DashboardError, int | None]] = {}

    # -- what a test sets ---------------------------------------------------------------

    @property
    def put_count(self) -> int:
        """How many PUTs succeeded."""
        return len(self.submitted)

    @property
    def last_config(self) -> dict[str, Any] | None:
        """The last config PUT, or ``None``."""
        return self.submitted[-1] if self.submitted else None

    def set_application(
        self,
        name: str,
        status: str = dashboard.ApplicationStatus.RUNNING,
        message: str = "",
        *,
        route_prefix: str | None = None,
        deployments: Mapping[str, str | tuple[str, str]] | None = None,
    ) -> None:
        """Set (or add) application ``name``; ``deployments`` maps a deployment's name to
        its status or ``(status, message)``. An unset ``route_prefix`` keeps the current one."""
        current = self.applications.get(name)
        if route_prefix is None and current is not None:
            route_prefix = current.route_prefix
        if deployments is None:
            kept = current.deployments if current is not None else {}
        else:
            kept = {
                deployment: _deployment(deployment, value)
                for deployment, value in deployments.items()
            }
        fields: dict[str, Any] = dict(current.model_extra or {}) if current is not None else {}
        fields.update(name=name, status=status, message=message, route_prefix=route_prefix,
                      deployments=kept)  # fmt: skip
        self.applications[name] = dashboard.ApplicationDetails(**fields)

    def set_all(self, status: str, message: str = "") -> None:
        """Give every application ``status`` (and ``message``)."""
        for name in list(self.applications):
            self.set_application(name, status, message)

    def remove_application(self, name: str) -> None:
        self.applications.pop(name, None)

    def restart(self) -> None:
        """The head restarted without GCS fault tolerance: no applications any more."""
        self.applications.clear()
        self.target_capacity = None

    def fail(
        self, operation: Operation, error: dashboard.DashboardError | None, *,
        times: int | None = None,
    ) -> None:  # fmt: skip
        """Make ``operation`` raise ``error`` (the next ``times`` calls, or until cleared
        with ``error=None``)."""
        if error is None:
            self._faults.pop(operation, None)
        else:
            self._faults[operation] = (error, times)

    # -- the protocol ---------------------------------------------------------------------

    async def get_serve_applications(self) -> dashboard.ServeDetails:
        self.get_count += 1
        self._raise_if_failing("get")
        fields: dict[str, Any] = {"proxies": copy.deepcopy(self.proxies)}  # Ray's extra field
        return dashboard.ServeDetails(
            applications=dict(self.applications), target_capacity=self.target_capacity, **fields
        )

    async def put_serve_applications(self, config: Mapping[str, Any]) -> None:
        self._raise_if_failing("put")
        self.submitted.append(copy.deepcopy(dict(config)))
        if self.put_status is None:
            return
        self.target_capacity = config.get("target_capacity")
        named: dict[str, dict[str, Any]] = {}
        for app in config.get("applications") or ():
            named[str(app.get("name") or "default")] = copy.deepcopy(dict(app))
        for name in list(self.applications):
            if name not in named:
                del self.applications[name]
        for name, app in named.items():
            current = self.applications.get(name)
            if (
                current is not None
                and (current.model_extra or {}).get("deployed_app_config") == app
            ):
                continue  # unchanged: Serve keeps it as it is
            fields: dict[str, Any] = {"deployed_app_config": app}  # Ray's extra field
            fields.update(name=name, status=self.put_status, route_prefix=app.get("route_prefix"))
            self.applications[name] = dashboard.ApplicationDetails(**fields)

    async def serve_proxy_healthy(self, pod: dashboard.PodRef) -> bool:
        target = dashboard.serve_pod(pod)
        self.health_checks.append(target)
        try:
            self._raise_if_failing("health")
        except dashboard.DashboardError:
            return False
        return self.proxy_health.get(target.name, self.proxy_healthy)

    def _raise_if_failing(self, operation: Operation) -> None:
        fault = self._faults.get(operation)
        if fault is None:
            return
        error, times = fault
        if times is not None:
            if times <= 1:
                del self._faults[operation]
            else:
                self._faults[operation] = (error, times - 1)
        raise error


def _deployment(name: str, value: str | tuple[str, str]) -> dashboard.DeploymentDetails:
    status, message = (value, "") if isinstance(value, str) else value
    return dashboard.DeploymentDetails(name=name, status=status, message=message)


class FakeDashboards:
    """A :class:`~controllers.ray.dashboard.DashboardFactory` of :class:`FakeDashboard`\\ s,
    one per ``(namespace, cluster)``; see the module docstring.

    ``put_status`` and ``proxy_healthy`` are the defaults of the fakes it creates."""

    def __init__(
        self,
        *,
        put_status: str | None = dashboard.ApplicationStatus.DEPLOYING,
        proxy_healthy: bool = True,
    ) -> None:
        self.fakes: dict[tuple[str, str], FakeDashboard] = {}
        self.requested: list[tuple[dashboard.Address, str | None]] = []
        self.closed = False
        self._put_status = put_status
        self._proxy_healthy = proxy_healthy

    def for_cluster(self, namespace: str, cluster: str) -> FakeDashboard:
        """The fake of cluster ``namespace/cluster`` (created if new)."""
        key = (namespace, cluster)
        if key not in self.fakes:
            self.fakes[key] = FakeDashboard(
                put_status=self._put_status, proxy_healthy=self._proxy_healthy
            )
        return self.fakes[key]

    def client_for(
        self, address: dashboard.Address, *, auth_token: str | None = None
    ) -> FakeDashboard:
        if self.closed:
            raise RuntimeError("FakeDashboards is closed")
        self.requested.append((address, auth_token))
        return self.for_cluster(address.namespace, address.cluster)

    async def close(self) -> None:
        self.closed = True


def _conforms(fakes: FakeDashboards) -> dashboard.DashboardFactory:  # pragma: no cover
    """Never called: mypy checks here that the fakes satisfy the protocols."""
    client: dashboard.DashboardClient = fakes.for_cluster("", "")
    del client
    return fakes
