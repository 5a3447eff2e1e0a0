"""What the RayJob and RayCronJob integration tests share (``test_rayjob.py``).

- :func:`rayjob_obj`: a small RayJob (one head, one worker group) with a simulated
  entrypoint;
- :func:`start_manager` / :func:`manager_running`: a manager in this process with the
  RayCluster and RayJob controllers (and, given a ``cron_clock``, the RayCronJob one)
  watching one namespace, dashboards at pod IPs; optionally wired to a
  :class:`~tests.integration.rayservice_harness.Crash` that also fires right after a Jobs
  API submission (``JOB-SUBMIT``);
- :class:`Submitter`: plays the submitter Job's pod, which kwok keeps ``Running`` for
  ever: what ``ray job status || ray job submit --no-wait`` and ``ray job logs --follow``
  do (straight at the head pod's IP, with the pod's ``RAY_JOB_SUBMISSION_ID``), then the
  pod's status set to ``Succeeded`` (exit code 0) or ``Failed`` (exit code 1, the Ray job
  ``FAILED`` or ``STOPPED``), so that kube-controller-manager's Job controller finishes
  the Job;
- :class:`Clock`: the time the RayCronJob controller reads, moved by the test;
- readers: :func:`wait_job`, :func:`events_of`, :func:`status_writes` (from the API
  server's ``/metrics``), :func:`submissions` (from the simulator's Jobs API counts);
- the fixtures the RayJob test modules share (:func:`crds`, :func:`sim`,
  :func:`ray_kinds`, :func:`running`, :func:`submitter`, :func:`observer`), taken by
  naming them at a module's top level.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

import aiohttp
import pytest

import api.v1 as v1
import controllers.setup
from controllers.ray import dashboard
from controllers.raycluster import setup as raycluster_setup
from controllers.raycronjob import setup as raycronjob_setup
from controllers.rayjob import plan as plan_
from controllers.rayjob import reconciler as reconciler_
from controllers.rayjob import setup as rayjob_setup
from runtime import manager as manager_
from runtime.client import client as client_
from runtime.client import errors
from runtime.testing import controlplane
from tests.integration import helpers
from tests.integration import rayservice_harness as h
from tests.support import raysim

Obj = dict[str, Any]

PODS = h.PODS
SERVICES = h.SERVICES
EVENTS = h.EVENTS
JOBS = plan_.JOBS
FINALIZER = "ray.io/rayjob-finalizer"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CRONJOB_LABEL = "ray.io/cronjob-name"
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


def rayjob_obj(name: str = "pi", entrypoint: str = "python pi.py", **spec: Any) -> Obj:
    """A RayJob (``K8sJobMode`` unless ``submissionMode`` says otherwise)."""
    body: Obj = {
        "entrypoint": entrypoint,
        "rayClusterSpec": {
            "rayVersion": "2.60.0",
            "headGroupSpec": {"rayStartParams": {}, "template": h.template("ray-head", serve=True)},
            "workerGroupSpecs": [h.worker_group()],
        },
    }
    body.update(spec)
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": name}, "spec": body}


# -- the manager -------------------------------------------------------------------------------


class Clock:
    """A timezone-aware time the test sets (``clock.now = ...``) and moves."""

    def __init__(self, now: datetime.datetime) -> None:
        self.now = now

    def __call__(self) -> datetime.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += datetime.timedelta(seconds=seconds)


class _CrashingJobs:
    """A dashboard client whose calls stop with the crash, and which dies right after
    a submission."""

    def __init__(self, inner: dashboard.DashboardClient, crash: h.Crash, where: str) -> None:
        self._inner, self._crash, self._where = inner, crash, where

    async def submit_job(self, request: Any) -> str:
        await self._crash.gate()
        answer = await self._inner.submit_job(request)
        await self._crash.after("JOB-SUBMIT", self._where, request)
        return answer

    def __getattr__(self, name: str) -> Any:
        call = getattr(self._inner, name)

        async def gated(*args: Any, **kw: Any) -> Any:
            await self._crash.gate()
            return await call(*args, **kw)

        return gated


class _CrashingDashboards:
    def __init__(self, inner: dashboard.Dashboards, crash: h.Crash) -> None:
        self._inner, self._crash = inner, crash

    def client_for(
        self, address: dashboard.Address, *, auth_token: str | None = None
    ) -> dashboard.DashboardClient:
        inner = self._inner.client_for(address, auth_token=auth_token)
        return _CrashingJobs(inner, self._crash, str(address))  # type: ignore[return-value]

    async def close(self) -> None:
        await self._inner.close()


PLAN = plan_.Options(poll_interval=1.0, poll_max=2.0, poll_max_submitter=5.0)
"""Short polls: the scenarios' jobs last seconds."""


async def start_manager(
    cp: controlplane.ControlPlane,
    namespace: str,
    *,
    crash: h.Crash | None = None,
    cron_clock: Clock | None = None,
    plan: plan_.Options = PLAN,
) -> h.Running:
    """Start a manager for ``namespace`` (RayCluster + RayJob controllers, and the
    RayCronJob one with ``cron_clock``); Events as the operator records them."""
    client = await client_.Client.from_kubeconfig(cp.kubeconfig)
    mgr = manager_.Manager(client, manager_.Options(
        name="rayjob-operator",
        namespace=namespace, metrics_bind_address="0", health_probe_bind_address="0",
        graceful_shutdown_timeout=5.0, cache_by_resource=controllers.setup.cache_by_resource(),
        events=controllers.setup.EVENT_OPTIONS,
    ))  # fmt: skip
    dashboards = dashboard.Dashboards(api=client)
    factory: dashboard.DashboardFactory = dashboards
    if crash is not None:
        h._crashing_client(client, crash)
        factory = _CrashingDashboards(dashboards, crash)  # type: ignore[assignment]
    raycluster_setup.setup(mgr, skip_name_validation=True)
    rayjob_setup.setup(
        mgr,
        dashboards=factory,
        options=reconciler_.Options(address_mode="pod-ip", plan=plan),
        skip_name_validation=True,
    )
    if cron_clock is not None:
        raycronjob_setup.setup(mgr, skip_name_validation=True, clock=cron_clock)
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    return h.Running(mgr, client, dashboards, task, stop)


@contextlib.asynccontextmanager
async def manager_running(
    cp: controlplane.ControlPlane, namespace: str, **kw: Any
) -> AsyncIterator[h.Running]:
    """:func:`start_manager`, stopped on exit; RayJobs left behind lose their finalizer."""
    running = await start_manager(cp, namespace, **kw)
    try:
        yield running
    finally:
        await running.stop()
        h.release_finalizers(cp, namespace, "rayjobs")


# -- the submitter's pod -----------------------------------------------------------------------


def _env(pod: Mapping[str, Any], name: str) -> str:
    found = ""
    for item in pod["spec"]["containers"][0].get("env") or ():
        if item.get("name") == name:
            found = str(item.get("value") or "")  # the later definition wins, as in a pod
    return found


def entrypoint_of(pod: Mapping[str, Any]) -> str:
    """The entrypoint of the pod's ``ray job submit ... -- <entrypoint> ;``."""
    script = " ".join(pod["spec"]["containers"][0].get("args") or ())
    submit = script.split("ray job submit", 1)[1]
    return submit.split(" -- ", 1)[1].split(" ; ", 1)[0].strip()


@dataclasses.dataclass
class Played:
    pod: str
    submission_id: str
    submitted: bool
    ray_status: str = ""
    exit_code: int | None = None


class Submitter:
    """Plays every submitter pod of the namespace (see the module docstring)."""

    def __init__(self, cp: controlplane.ControlPlane, client: client_.Client, namespace: str):
        self.cp, self.client, self.namespace = cp, client, namespace
        self.played: dict[str, Played] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._watch: asyncio.Task[None] | None = None
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Submitter:
        self._http = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=5, connect=2),
            connector=aiohttp.TCPConnector(force_close=True),
        )
        self._watch = asyncio.create_task(self._follow())
        return self

    async def __aexit__(self, *exc: object) -> None:
        tasks = [t for t in (self._watch, *self._tasks.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._http is not None:
            await self._http.close()

    async def _follow(self) -> None:
        while True:
            try:
                found = await self.client.list(PODS, self.namespace, label_selector=JOB_NAME_LABEL)
                for pod in found.items:
                    self._maybe_play(pod)
                rv = found.resource_version
                async for event in self.client.watch(
                    PODS, self.namespace, resource_version=rv, timeout_seconds=120,
                    label_selector=JOB_NAME_LABEL,
                ):  # fmt: skip
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self._maybe_play(event["object"])
            except (errors.ApiError, aiohttp.ClientError, TimeoutError):
                await asyncio.sleep(0.2)

    def _maybe_play(self, pod: Obj) -> None:
        name = pod["metadata"]["name"]
        status = pod.get("status") or {}
        if name in self._tasks or pod["metadata"].get("deletionTimestamp"):
            return
        if status.get("phase") != "Running" or not status.get("podIP"):
            return
        self._tasks[name] = asyncio.create_task(self._play(name, pod))

    async def _head_ip(self, address: str) -> str | None:
        service = address.split(".", 1)[0]
        try:
            svc = await self.client.get(SERVICES, self.namespace, service)
        except errors.NotFound:
            return None
        cluster = ((svc.get("spec") or {}).get("selector") or {}).get("ray.io/cluster")
        pod = await h.head_pod(self.client, self.namespace, str(cluster)) if cluster else None
        return str((pod or {}).get("status", {}).get("podIP") or "") or None

    async def _call(self, method: str, ip: str, path: str, body: Any = None) -> tuple[int, Any]:
        assert self._http is not None
        url = h.pod_url(self.cp, ip, 8265, path)
        async with self._http.request(method, url, json=body) as response:
            text = await response.text()
            try:
                return response.status, await response.json(content_type=None)
            except ValueError:
                return response.status, text

    async def _play(self, name: str, pod: Obj) -> None:
        job_id = _env(pod, "RAY_JOB_SUBMISSION_ID")
        address = _env(pod, "RAY_DASHBOARD_ADDRESS")
        played = Played(name, job_id, submitted=False)
        self.played[name] = played
        while True:  # the script's wait for the dashboard, and `ray job status`
            ip = await self._head_ip(address)
            if ip:
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    code, _ = await self._call("GET", ip, f"/api/jobs/{job_id}")
                    if code in (200, 404):
                        break
            await asyncio.sleep(0.3)
        if code == 404:  # ray job submit --no-wait
            body = {"entrypoint": entrypoint_of(pod), "submission_id": job_id}
            code, answer = await self._call("POST", ip, "/api/jobs/", body)
            assert code == 200, answer
            played.submitted = True
        while True:  # ray job logs --follow
            await asyncio.sleep(0.3)
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                code, answer = await self._call("GET", ip, f"/api/jobs/{job_id}")
                if code == 200 and answer.get("status") in TERMINAL:
                    played.ray_status = str(answer["status"])
                    break
        played.exit_code = 0 if played.ray_status == "SUCCEEDED" else 1
        await self._finish(name, played.exit_code)

    async def _finish(self, name: str, exit_code: int) -> None:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for _ in range(10):
            try:
                pod = await self.client.get(PODS, self.namespace, name)
            except errors.NotFound:
                return
            status = pod.setdefault("status", {})
            status["phase"] = "Succeeded" if exit_code == 0 else "Failed"
            for container in status.get("containerStatuses") or ():
                started = ((container.get("state") or {}).get("running") or {}).get("startedAt")
                container["ready"] = False
                container["started"] = False
                container["state"] = {"terminated": {
                    "exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                    "startedAt": started or now, "finishedAt": now,
                }}  # fmt: skip
            for cond in status.get("conditions") or ():
                if cond.get("type") in ("Ready", "ContainersReady"):
                    cond["status"] = "False"
                    cond["reason"] = "PodCompleted"
            try:
                await self.client.update_status(pod)
                return
            except errors.Conflict:
                continue


# -- reading -----------------------------------------------------------------------------------


async def get_job(client: client_.Client, namespace: str, name: str = "pi") -> Obj:
    return await client.get(v1.RAYJOBS, namespace, name)


async def job_gone(client: client_.Client, namespace: str, name: str = "pi") -> bool:
    """Whether the RayJob ``namespace/name`` is gone (for :func:`helpers.eventually`)."""
    try:
        await get_job(client, namespace, name)
    except errors.NotFound:
        return True
    return False


def state(obj: Mapping[str, Any]) -> str:
    return str((obj.get("status") or {}).get("jobDeploymentStatus") or "")


async def wait_job(
    client: client_.Client,
    namespace: str,
    check: Callable[[Obj], bool],
    within: float,
    what: str,
    name: str = "pi",
) -> Obj:
    """The RayJob once ``check(it)`` holds; fails after ``within`` s with its status."""
    last: list[Obj] = []

    async def probe() -> Obj | None:
        with contextlib.suppress(errors.NotFound):
            obj = await get_job(client, namespace, name)
            last[:] = [obj]
            return obj if check(obj) else None
        return None

    try:
        return await helpers.eventually(probe, within, what)
    except AssertionError as exc:
        status = (last[0].get("status") if last else None) or {}
        raise AssertionError(f"{exc}; status: {status}") from None


async def wait_state(
    client: client_.Client, namespace: str, wanted: str, within: float = 60.0, name: str = "pi"
) -> Obj:
    return await wait_job(
        client, namespace, lambda o: state(o) == wanted, within, f"RayJob {name} {wanted}", name
    )


async def events_of(
    client: client_.Client, namespace: str, name: str, reason: str | None = None
) -> list[Obj]:
    """The core-v1 view of the Events about ``name`` (optionally of one reason)."""
    found = await client.list(EVENTS, namespace)
    return [
        e
        for e in found.items
        if (e.get("involvedObject") or {}).get("name") == name
        and (reason is None or e.get("reason") == reason)
    ]


def status_writes(cp: controlplane.ControlPlane, resource: str = "rayjobs") -> float:
    """Writes of ``resource``'s status the API server has answered (its ``/metrics``)."""
    return sum(
        n
        for (verb, res, sub), n in cp.request_counts().items()
        if res == resource and sub == "status" and verb in ("PUT", "PATCH", "APPLY")
    )


def submissions(sim: raysim.Simulator, job_id: str) -> int:
    """``POST /api/jobs/`` requests that submitted ``job_id`` (to any head)."""
    return sum(
        n
        for (_, job, method, route), n in sim.job_requests().items()
        if job == job_id and method == "POST" and route.rstrip("/") == "/api/jobs"
    )


def stops(sim: raysim.Simulator, job_id: str) -> int:
    return sum(
        n
        for (_, job, method, route), n in sim.job_requests().items()
        if job == job_id and method == "POST" and route.endswith("/stop")
    )


async def ray_status(cp: controlplane.ControlPlane, ip: str, job_id: str) -> str | None:
    """What the head at ``ip`` says of ``job_id`` (None: it does not answer or know it)."""
    url = h.pod_url(cp, ip, 8265, f"/api/jobs/{job_id}")
    async with aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=5, connect=2),
        connector=aiohttp.TCPConnector(force_close=True),
    ) as http:
        try:
            async with http.get(url) as response:
                if response.status != 200:
                    return None
                return str((await response.json(content_type=None)).get("status"))
        except (aiohttp.ClientError, TimeoutError):
            return None


# -- the fixtures every RayJob test module takes ---------------------------------------------
# A module takes them by naming them at its top level (pytest finds fixtures there), e.g.
# ``crds, sim, ray_kinds, running, observer = j.crds, j.sim, j.ray_kinds, j.running,
# j.observer``; one that needs another simulator defines its own ``sim``.

CRD_DIR = helpers.ROOT / "config/crd/bases"


@pytest.fixture(scope="module", autouse=True)
def crds(control_plane: controlplane.ControlPlane) -> list[str]:
    """Our CRDs (RayCluster, RayJob, RayCronJob, RayService), once per module."""
    return control_plane.install_crds(CRD_DIR)


@pytest.fixture(scope="module")
def sim(control_plane: controlplane.ControlPlane) -> Iterator[raysim.Simulator]:
    """The Ray simulator: jobs ``PENDING`` 0.3 s, ``RUNNING`` 1 s."""
    with raysim.running(control_plane, job_pending_s=0.3, job_run_s=1.0) as simulator:
        yield simulator


@pytest.fixture(autouse=True)
def ray_kinds(client: client_.Client) -> None:
    """The test's client knows the ``ray.io`` kinds."""
    v1.add_to_registry(client.registry)


@pytest.fixture
async def running(
    control_plane: controlplane.ControlPlane, namespace: str, sim: raysim.Simulator
) -> AsyncIterator[h.Running]:
    """A manager (:func:`manager_running`) on the test's namespace."""
    async with manager_running(control_plane, namespace) as r:
        yield r


@pytest.fixture
async def submitter(
    control_plane: controlplane.ControlPlane, client: client_.Client, namespace: str
) -> AsyncIterator[Submitter]:
    """The submitter pods of the test's namespace, played (:class:`Submitter`)."""
    async with Submitter(control_plane, client, namespace) as s:
        yield s


@pytest.fixture
async def observer(client: client_.Client, namespace: str) -> AsyncIterator[h.Observer]:
    """What is written in the test's namespace (:class:`rayservice_harness.Observer`)."""
    async with h.Observer(client, namespace) as o:
        yield o
