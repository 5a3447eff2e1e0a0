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
- **jobs** (the Ray Jobs API): ``jobs`` maps a submission id to its
  :class:`~controllers.ray.dashboard.JobInfo`, ``job_logs`` to its logs. A test sets a
  job's status and outcome with :meth:`FakeDashboard.set_job` (a terminal status stamps
  ``end_time``) and removes one with :meth:`~FakeDashboard.remove_job`.
  ``submit_job`` records the request (``job_submissions``, failed and refused ones
  not), makes the job ``submit_status`` (default ``PENDING``; ``start_time`` now, from
  ``clock``, in epoch ms) under the request's ``submission_id`` or a made-up
  ``raysubmit_<n>``, and answers that id; a taken id raises
  :class:`~controllers.ray.dashboard.DashboardJobExists` (HTTP 500 with Ray's text).
  ``get_job`` answers ``None`` for an unknown id; ``stop_job`` makes a ``PENDING`` or
  ``RUNNING`` job ``STOPPED`` (``True``) and answers ``False`` for a terminal one;
  ``delete_job`` forgets a terminal job (``True``) and refuses one that is not with
  :class:`~controllers.ray.dashboard.DashboardHTTPError` 500, as Ray; those two and
  ``get_job_logs`` raise :class:`~controllers.ray.dashboard.DashboardJobNotFound` for an
  unknown id. ``job_calls`` counts every Jobs call by operation name (failed ones too);
- **faults**: :meth:`FakeDashboard.fail` makes an operation - ``"get"``, ``"put"``,
  ``"health"`` (Serve) or ``"submit_job"``, ``"get_job"``, ``"list_jobs"``,
  ``"stop_job"``, ``"delete_job"``, ``"get_job_logs"`` - raise a given
  :class:`~controllers.ray.dashboard.DashboardError` (every time, or the next ``times``
  calls); like the real client, a failing health check answers ``False`` instead of
  raising. A failed PUT or submission is not recorded and changes nothing.

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
>>> asyncio.run(client.submit_job(dashboard.JobSubmitRequest(entrypoint="python x.py",
...                                                          submission_id="job-1")))
'job-1'
>>> fake.set_job("job-1", "SUCCEEDED", logs="done")
>>> job = asyncio.run(client.get_job("job-1"))
>>> job.status, job.end_time is not None, asyncio.run(client.get_job_logs("job-1"))
('SUCCEEDED', True, 'done')
"""

from __future__ import annotations

import collections
import copy
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

from controllers.ray import dashboard

__all__ = ["FakeDashboard", "FakeDashboards", "Operation"]

Operation = Literal[
    "get", "put", "health",
    "submit_job", "get_job", "list_jobs", "stop_job", "delete_job", "get_job_logs",
]  # fmt: skip


class FakeDashboard:
    """One Ray head's Serve state in memory; see the module docstring."""

    def __init__(
        self,
        *,
        put_status: str | None = dashboard.ApplicationStatus.DEPLOYING,
        proxy_healthy: bool = True,
        submit_status: str = dashboard.JobStatus.PENDING,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.jobs: dict[str, dashboard.JobInfo] = {}
        self.job_logs: dict[str, str] = {}
        self.job_submissions: list[dashboard.JobSubmitRequest] = []
        self.job_calls: collections.Counter[str] = collections.Counter()
        self.submit_status = submit_status
        self.clock = clock
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
        """The head restarted without GCS fault tolerance: no applications and no jobs
        any more."""
        self.applications.clear()
        self.target_capacity = None
        self.jobs.clear()
        self.job_logs.clear()

    def set_job(
        self,
        submission_id: str,
        status: str = dashboard.JobStatus.RUNNING,
        message: str = "",
        *,
        error_type: str | None = None,
        entrypoint: str | None = None,
        metadata: Mapping[str, str] | None = None,
        start_time: int | None = None,
        end_time: int | None = None,
        logs: str | None = None,
    ) -> None:
        """Set (or add) job ``submission_id``: its status, message and ``error_type``.
        Unset fields keep the job's current ones (a new job: ``start_time`` now); a
        terminal status without ``end_time`` stamps it now (unless it had one). ``logs``
        replaces the job's logs."""
        current = self.jobs.get(submission_id)
        now = self._now_ms()
        fields: dict[str, Any] = current.model_dump() if current is not None else {
            "submission_id": submission_id, "start_time": now,
        }  # fmt: skip
        fields.update(status=status, message=message, error_type=error_type)
        for key, value in (("entrypoint", entrypoint), ("start_time", start_time),
                           ("end_time", end_time)):  # fmt: skip
            if value is not None:
                fields[key] = value
        if metadata is not None:
            fields["metadata"] = dict(metadata)
        if end_time is None and status in _TERMINAL and fields.get("end_time") is None:
            fields["end_time"] = now
        self.jobs[submission_id] = dashboard.JobInfo(**fields)
        if logs is not None:
            self.job_logs[submission_id] = logs

    def remove_job(self, submission_id: str) -> None:
        self.jobs.pop(submission_id, None)
        self.job_logs.pop(submission_id, None)

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

    async def submit_job(self, request: dashboard.JobSubmitRequest) -> str:
        self._raise_if_failing("submit_job", count=True)
        submission_id = request.submission_id or f"raysubmit_{len(self.job_submissions) + 1}"
        if submission_id in self.jobs:
            raise dashboard.DashboardJobExists(
                500,
                f"ValueError: Job with submission_id {submission_id} already exists. "
                f"{dashboard.JOB_EXISTS_MARKER}.",
                submission_id, method="POST", url=dashboard.JOBS_PATH,
            )  # fmt: skip
        self.job_submissions.append(request)
        self.jobs[submission_id] = dashboard.JobInfo(
            submission_id=submission_id, status=self.submit_status,
            entrypoint=request.entrypoint, metadata=dict(request.metadata or {}),
            start_time=self._now_ms(),
        )  # fmt: skip
        return submission_id

    async def get_job(self, submission_id: str) -> dashboard.JobInfo | None:
        self._raise_if_failing("get_job", count=True)
        return self.jobs.get(submission_id)

    async def list_jobs(self) -> list[dashboard.JobInfo]:
        self._raise_if_failing("list_jobs", count=True)
        return list(self.jobs.values())

    async def stop_job(self, submission_id: str) -> bool:
        self._raise_if_failing("stop_job", count=True)
        job = self._known_job(submission_id, "POST", "/stop")
        if job.status in _TERMINAL:
            return False
        self.set_job(submission_id, dashboard.JobStatus.STOPPED, "Job was intentionally stopped.")
        return True

    async def delete_job(self, submission_id: str) -> bool:
        self._raise_if_failing("delete_job", count=True)
        job = self._known_job(submission_id, "DELETE", "")
        if job.status not in _TERMINAL:
            raise dashboard.DashboardHTTPError(
                500,
                f"RuntimeError: Attempted to delete job '{submission_id}', but it is in a "
                f"non-terminal state {job.status}.",
                method="DELETE", url=dashboard.JOBS_PATH + submission_id,
            )  # fmt: skip
        self.remove_job(submission_id)
        return True

    async def get_job_logs(self, submission_id: str) -> str:
        self._raise_if_failing("get_job_logs", count=True)
        self._known_job(submission_id, "GET", "/logs")
        return self.job_logs.get(submission_id, "")

    def _known_job(self, submission_id: str, method: str, suffix: str) -> dashboard.JobInfo:
        job = self.jobs.get(submission_id)
        if job is None:
            raise dashboard.DashboardJobNotFound(
                404, f"Job {submission_id} does not exist", submission_id,
                method=method, url=dashboard.JOBS_PATH + submission_id + suffix,
            )  # fmt: skip
        return job

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _raise_if_failing(self, operation: Operation, *, count: bool = False) -> None:
        if count:
            self.job_calls[operation] += 1
        self._raise_fault(operation)

    def _raise_fault(self, operation: Operation) -> None:
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


_TERMINAL = frozenset({
    dashboard.JobStatus.STOPPED, dashboard.JobStatus.SUCCEEDED, dashboard.JobStatus.FAILED,
})  # fmt: skip


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
