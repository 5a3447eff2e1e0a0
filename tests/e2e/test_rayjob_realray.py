"""End to end, RayJobs on real Ray 2.60: the manager binary creates a RayJob's cluster, the
job is submitted to a real head and runs there, and the operator follows Ray's answer to
the end and deletes the cluster.

Every pod of the test's namespace - the head and, in ``K8sJobMode``, the submitter Job's
pod - is run for real by :class:`tests.e2e.test_realray.Kubelet` (the submitter's own
``/bin/bash -ce -- "until ... ; ray job submit --no-wait ... ; ray job logs --follow"``,
with Ray's ``ray`` and ``python`` first on its ``PATH`` as in the image), which reports a
Job pod's exit as its ``phase`` so kube-controller-manager's Job controller finishes the
Job. The submitter reaches the head by the name in its ``RAY_DASHBOARD_ADDRESS``: the
pod has no ``ray.io/cluster`` label, so the names :class:`RayJobHarness` gives it stand in for
cluster DNS by resolving that Service to its pod's IP.

What Ray itself saw comes from the test (:class:`RaySeen`): every real head's Jobs API
(``GET /api/jobs/`` and each finished job's logs) polled at its pod IP while it runs, so
the list is read before the operator deletes the cluster (``ttlSecondsAfterFinished:
0``).

1. :func:`test_a_k8s_job_mode_rayjob_runs_on_real_ray_and_its_cluster_goes`: the
   submitter Job submits ``ray.get(f.remote())`` once; ``Complete`` / ``SUCCEEDED``,
   ``rayJobInfo`` as Ray timed it, the cluster deleted.
2. :func:`test_an_http_mode_rayjob_is_submitted_by_the_operator_once`: the same through the
   operator's dashboard client, no submitter Job.
3. :func:`test_a_failing_entrypoint_is_retried_on_a_new_cluster_then_fails`: ``sys.exit(3)``
   with ``backoffLimit: 1``: two attempts, each on its own cluster with its own submission
   id, then ``Failed`` / ``AppFailed`` with ``failed: 2`` and no cluster left.

The clusters are head-only, one CPU (the job's one task takes it). Ray comes from ``make
ray`` (hack/realray/install.sh); without it these tests fail saying so, never skip. A
failing test's captured output carries the real pods' log tails and what Ray listed.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import json
import pathlib
import shlex
import time
import urllib.parse
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import aiohttp
import pytest

import api.v1 as v1
from runtime.client import client as client_
from runtime.client import errors, resources
from tests.e2e import harness
from tests.e2e import test_realray as realray_e2e
from tests.support import realray
from tests.support.realray import podspec

# Every scenario here starts what only the suite's own cluster has (see own_cluster).
pytestmark = pytest.mark.own_cluster

Obj = dict[str, Any]
JOBS = resources.default_registry.for_kind("batch/v1", "Job")
EVENTS = resources.default_registry.for_kind("v1", "Event")
NAME = "rayjob"
SUCCEEDS = 'python -c "import ray; ray.init(); print(ray.get(ray.remote(lambda: 42).remote()))"'
ANSWER = "42"
"""What :data:`SUCCEEDS` prints: Ray ran the task."""
FAILS = 'python -c "import sys; sys.exit(3)"'
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
CRD_LABEL = "ray.io/originated-from-crd"


def rayjob(namespace: str, entrypoint: str, **spec: Any) -> Obj:
    """A RayJob on a head-only cluster with one CPU, deleted as soon as the job ends."""
    limits = {"cpu": "1", "memory": "2Gi"}
    head = {
        "name": "ray-head",
        "image": "rayproject/ray:2.60.0",
        "ports": [
            {"name": "gcs", "containerPort": 6379},
            {"name": "dashboard", "containerPort": 8265},
            {"name": "client", "containerPort": 10001},
        ],
        "resources": {"requests": limits, "limits": limits},
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {
            "entrypoint": entrypoint,
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": 0,
            "rayClusterSpec": {
                "rayVersion": "2.60.0",
                "headGroupSpec": {
                    "rayStartParams": {"dashboard-host": "0.0.0.0"},
                    "template": {"spec": {"containers": [head]}},
                },
            },
            **spec,
        },
    }


# -- the pods, run for real ----------------------------------------------------------------------


class RayJobHarness(realray.Harness):
    """:class:`tests.support.realray.Harness` whose stand-in for cluster DNS also serves a
    RayJob's submitter pod: the host of its ``RAY_DASHBOARD_ADDRESS`` (and the Service's
    other names) -> the IP of the pod the Service selects, as cluster DNS answers for a
    headless Service (nothing here implements a ClusterIP). The pods of a Ray cluster get
    the names the base class gives them."""

    def _names(self, pod: Mapping[str, Any]) -> dict[str, str]:
        names = super()._names(pod)
        labels = pod["metadata"].get("labels") or {}
        if labels.get(CRD_LABEL) != "RayJob" or labels.get("ray.io/cluster"):
            return names
        containers = (pod.get("spec") or {}).get("containers") or [{}]
        env = {e["name"]: e.get("value") for e in containers[0].get("env") or []}  # later wins
        address = str(env.get("RAY_DASHBOARD_ADDRESS") or "")
        host = urllib.parse.urlsplit("http://" + address.removeprefix("http://")).hostname
        if not host:
            return names
        namespace = str(pod["metadata"]["namespace"])
        service, _, rest = host.partition(".")
        if rest and not rest.startswith(f"{namespace}."):
            raise realray.RealRayError(f"{address}: a Service in another namespace")
        svc = self.get(f"/api/v1/namespaces/{namespace}/services/{service}")
        selector = ",".join(
            f"{k}={v}" for k, v in ((svc.get("spec") or {}).get("selector") or {}).items()
        )
        ips = []
        if selector:
            query = urllib.parse.urlencode({"labelSelector": selector})
            ips = [
                p["status"]["podIP"]
                for p in self.get(f"/api/v1/namespaces/{namespace}/pods?{query}")["items"]
                if (p.get("status") or {}).get("podIP")
                and not p["metadata"].get("deletionTimestamp")
            ]
        if not ips:
            raise realray.RealRayError(
                f"{namespace}/{pod['metadata']['name']}: Service {service} selects no pod with "
                f"an IP, so {host} would not resolve"
            )
        domain = self.options.cluster_domain
        return {**names, **dict.fromkeys(podspec.service_names(service, namespace, domain), ips[0])}


@pytest.fixture
def real_ray(world: harness.World) -> Iterator[RayJobHarness]:
    if world.cp is None:
        pytest.fail(
            "not marked own_cluster, but it runs the pods itself: "
            "needs the suite's own control plane and pod network"
        )
    try:
        realray.ray_venv()
    except realray.RealRayError as exc:
        pytest.fail(str(exc), pytrace=False)
    real = RayJobHarness(world.cp, realray.Options())
    with real:
        yield real
        netns = [p.netns for p in real.pods]
    assert not real.pods
    assert not any(pathlib.Path("/etc/netns", n).exists() for n in netns)


@pytest.fixture
async def kubelet(
    api: client_.Client, real_ray: RayJobHarness, namespace: str
) -> AsyncIterator[realray_e2e.Kubelet]:
    # Every pod of the namespace: the Ray nodes and the submitter Job's pods.
    async with realray_e2e.Kubelet(api, real_ray, namespace, selector="") as k:
        yield k


def node_type(real: realray.RealPod) -> str:
    return str((real.pod["metadata"].get("labels") or {}).get("ray.io/node-type", ""))


def submitters(kubelet: realray_e2e.Kubelet) -> list[realray.RealPod]:
    return [
        p
        for p in kubelet.pods.values()
        if (p.pod["metadata"].get("labels") or {}).get(CRD_LABEL) == "RayJob" and not node_type(p)
    ]


# -- what Ray saw --------------------------------------------------------------------------------


class RaySeen:
    """Polls the Jobs API of every real head while it runs (its pod IP, inside the pod
    network, its route checked first; real Ray, not the simulator: ``/api/version``):
    the last list each head gave, the most jobs it ever listed, and each finished job's
    logs. An answer counts only if the head's process ran before and after it."""

    def __init__(self, world: harness.World, kubelet: realray_e2e.Kubelet) -> None:
        self.world = world
        self.kubelet = kubelet
        self.lists: dict[str, list[Obj]] = {}
        """Head pod name -> its last ``GET /api/jobs/`` answer."""
        self.most: dict[str, int] = {}
        """Head pod name -> the most jobs it listed at once."""
        self.logs: dict[str, str] = {}
        """Submission id -> the logs of the finished job."""
        self.cluster_of: dict[str, str] = {}
        """Head pod name -> its RayCluster."""
        self.problems: list[str] = []
        """Heads that answered, but not as real Ray 2.60.0."""
        self._checked: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> RaySeen:
        self._task = asyncio.create_task(self._poll())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    def jobs(self, cluster: str) -> list[Obj]:
        """The last list of the head of ``cluster``."""
        found = [
            self.lists[h] for h, c in self.cluster_of.items() if c == cluster and h in self.lists
        ]
        assert found, f"no Jobs API answer from the head of {cluster}: {self.lists}"
        return found[-1]

    def __str__(self) -> str:
        return json.dumps({"lists": self.lists, "most": self.most, "logs": self.logs}, indent=1)

    async def _get(self, http: aiohttp.ClientSession, real: realray.RealPod, path: str) -> Any:
        assert self.world.pod_cidr is not None
        assert ipaddress.ip_address(real.ip) in self.world.pod_cidr
        async with http.get(f"http://{real.ip}:8265{path}") as response:
            if response.status != 200:
                return None
            return json.loads(await response.text())

    async def _poll(self) -> None:
        timeout = aiohttp.ClientTimeout(total=5, connect=2)
        async with aiohttp.ClientSession(timeout=timeout, trust_env=False) as http:
            while True:
                for real in list(self.kubelet.pods.values()):
                    if node_type(real) != "head" or not real.alive():
                        continue
                    # Not up yet, or going (its route already removed: RealRayError).
                    with contextlib.suppress(
                        aiohttp.ClientError, TimeoutError, ValueError, realray.RealRayError
                    ):
                        await self._poll_head(http, real)
                # Often enough to read the final list between Ray's end of the job and the
                # head's deletion: the operator's next poll, its status write and deletion,
                # the garbage collector and the kubelet's stop come in between.
                await asyncio.sleep(0.25)

    async def _poll_head(self, http: aiohttp.ClientSession, real: realray.RealPod) -> None:
        if real.name not in self._checked:
            await asyncio.to_thread(real.verify)
            version = await self._get(http, real, "/api/version")
            if not version:
                return
            if version.get("ray_version") != "2.60.0" or version.get("ray_commit") in (
                "",
                "simulated",
                None,
            ):
                self.problems.append(f"{real.name} is not real Ray 2.60.0: {version}")
                return
            self._checked.add(real.name)
            self.cluster_of[real.name] = real.pod["metadata"]["labels"]["ray.io/cluster"]
        listed = await self._get(http, real, "/api/jobs/")
        if listed is None or not real.alive():
            return
        self.lists[real.name] = listed
        self.most[real.name] = max(self.most.get(real.name, 0), len(listed))
        for job in listed:
            sid = job.get("submission_id")
            if sid and job.get("status") in TERMINAL and sid not in self.logs:
                logs = await self._get(http, real, f"/api/jobs/{sid}/logs")
                if logs is not None and real.alive():
                    self.logs[sid] = str(logs.get("logs", ""))


# -- what the operator said ----------------------------------------------------------------------


class Statuses:
    """The RayJob's status as the API server hands out each write (a watch): every
    distinct ``(jobDeploymentStatus, jobStatus, jobId, rayClusterName, failed)`` in
    order, short-lived ones (``Retrying``) included."""

    def __init__(self, api: client_.Client, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.seen: list[tuple[str, str, str, str, int]] = []
        self.last: Obj = {}
        """The status :meth:`get` read last."""
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Statuses:
        self._task = asyncio.create_task(self._follow())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    @staticmethod
    def step(status: Mapping[str, Any]) -> tuple[str, str, str, str, int]:
        return (
            str(status.get("jobDeploymentStatus") or ""),
            str(status.get("jobStatus") or ""),
            str(status.get("jobId") or ""),
            str(status.get("rayClusterName") or ""),
            int(status.get("failed") or 0),
        )

    def _record(self, obj: Obj) -> None:
        step = self.step(obj.get("status") or {})
        if not self.seen or self.seen[-1] != step:
            self.seen.append(step)

    async def _follow(self) -> None:
        selector = f"metadata.name={NAME}"
        while True:
            try:
                listed = await self.api.list(v1.RAYJOBS, self.namespace, field_selector=selector)
                for item in listed.items:
                    self._record(item)
                async for event in self.api.watch(
                    v1.RAYJOBS, self.namespace, resource_version=listed.resource_version,
                    field_selector=selector, timeout_seconds=300,
                ):  # fmt: skip
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self._record(event["object"])
            except (errors.ApiError, aiohttp.ClientError, OSError, TimeoutError):
                await asyncio.sleep(0.25)

    async def get(self) -> Obj:
        """The RayJob's status now; the watch has seen it when this returns."""
        obj = await self.api.get(v1.RAYJOBS, self.namespace, NAME)
        status: Obj = obj.get("status") or {}
        self.last = status

        async def caught_up() -> bool:
            return self.step(status) in self.seen  # (it may have moved on since)

        await harness.until(caught_up, 30, f"the watch sees {self.step(status)}")
        return status

    async def until(self, state: str, within: float) -> Obj:
        async def reached() -> Obj | None:
            status = await self.get()
            return status if status.get("jobDeploymentStatus") == state else None

        try:
            found: Obj = await harness.until(reached, within, f"RayJob {NAME} {state}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; seen {self.seen}; status {self.last}") from None
        return found

    def attempts(self) -> list[tuple[str, str]]:
        """The distinct ``(jobId, rayClusterName)`` of the attempts, in order."""
        out: list[tuple[str, str]] = []
        for _, _, job_id, cluster, _ in self.seen:
            if job_id and cluster and (job_id, cluster) not in out:
                out.append((job_id, cluster))
        return out


async def clusters(api: client_.Client, namespace: str) -> set[str]:
    return {c["metadata"]["name"] for c in (await api.list(v1.RAYCLUSTERS, namespace)).items}


async def until_no_cluster(api: client_.Client, namespace: str, within: float) -> None:
    async def none() -> bool:
        return not await clusters(api, namespace)

    await harness.until(none, within, "no RayCluster left")


def ray_time(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)


def k8s_time(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def check_job_info(status: Mapping[str, Any], job: Mapping[str, Any]) -> None:
    """``status.rayJobInfo`` is Ray's start and end of ``job`` (to the second)."""
    info = status.get("rayJobInfo") or {}
    assert info.get("startTime"), status
    assert info.get("endTime"), status
    for field, ms in (("startTime", job["start_time"]), ("endTime", job["end_time"])):
        drift = abs((k8s_time(info[field]) - ray_time(ms)).total_seconds())
        assert drift < 1.5, (field, info[field], ms)


async def events(api: client_.Client, namespace: str) -> list[tuple[str, str, int]]:
    """(type, reason, count) of the Events about the RayJob, oldest first (the recorder
    aggregates repeats: the second attempt's ``CreatedRayJobSubmitter`` is a count of 2)."""
    listed = await api.list(EVENTS, namespace)
    about = [e for e in listed.items if (e.get("involvedObject") or {}).get("kind") == "RayJob"]
    about.sort(key=lambda e: str(e.get("firstTimestamp") or e.get("eventTime") or ""))
    return [(str(e.get("type")), str(e.get("reason")), _count(e)) for e in about]


def _count(event: Mapping[str, Any]) -> int:
    """How often it happened: an ``events.k8s.io/v1`` Event (the operator's) counts its
    repeats in ``series``, a core one in ``count``."""
    return int((event.get("series") or {}).get("count") or event.get("count") or 1)


async def check_clean(
    world: harness.World, api: client_.Client, namespace: str, job_ids: list[str]
) -> list[tuple[str, str, int]]:
    """No Warning about the RayJob, and the simulator (which answers at a head's IP until
    the head runs for real) got no Jobs API request about ``job_ids``: Ray's answers came
    from real Ray. The RayJob's Events."""
    assert world.sim is not None
    requests = await asyncio.to_thread(world.sim.job_requests)
    simulated = {k: n for k, n in requests.items() if k[1] in job_ids}
    assert not simulated, f"the simulator was asked about the job: {simulated}"
    found = await events(api, namespace)
    assert not [r for t, r, _ in found if t == "Warning"], found
    return found


def job_of(seen: RaySeen, cluster: str, job_id: str) -> Obj:
    """The one job the head of ``cluster`` ever listed: ``job_id``."""
    listed = seen.jobs(cluster)
    heads = [h for h, c in seen.cluster_of.items() if c == cluster]
    assert not seen.problems, seen.problems
    assert [j.get("submission_id") for j in listed] == [job_id], listed
    assert max(seen.most[h] for h in heads) == 1, seen.most
    return listed[0]


# -- the scenarios -------------------------------------------------------------------------------


@pytest.mark.timeout(240)
async def test_a_k8s_job_mode_rayjob_runs_on_real_ray_and_its_cluster_goes(
    world: harness.World,
    api: client_.Client,
    namespace: str,
    managers: harness.Managers,
    kubelet: realray_e2e.Kubelet,
) -> None:
    timings: dict[str, float] = {}
    async with RaySeen(world, kubelet) as seen, Statuses(api, namespace) as statuses:
        with kubelet.on_failure(), _print_on_failure(seen, statuses):
            await managers.start("pod-ip").wait_leading()
            started = time.monotonic()
            await api.create(rayjob(namespace, SUCCEEDS))
            await statuses.until("Running", 120)
            timings["running"] = time.monotonic() - started
            status = await statuses.until("Complete", 120)
            timings["complete"] = time.monotonic() - started
            cluster, job_id = status["rayClusterName"], status["jobId"]
            assert status["jobStatus"] == "SUCCEEDED", status
            assert status.get("succeeded") == 1, status
            assert not status.get("failed"), status
            job = job_of(seen, cluster, job_id)
            assert (job["status"], job["type"]) == ("SUCCEEDED", "SUBMISSION"), job
            # `ray job submit -- <words>` quotes the words again, as a shell would read them
            assert shlex.split(job["entrypoint"]) == shlex.split(SUCCEEDS), job
            check_job_info(status, job)
            assert ANSWER in seen.logs[job_id].split(), seen.logs

            # The submitter Job's pod ran `ray job submit` for real, once, and finished.
            [pod] = submitters(kubelet)
            assert pod.exit_code == 0, pod.log_tail()
            log = pod.log_tail(200)
            assert log.count(f"Job '{job_id}' submitted successfully") == 1, log
            assert ANSWER in log.split(), log  # `ray job logs --follow` printed the job's
            submitter = await api.get(JOBS, namespace, NAME)
            assert (submitter.get("status") or {}).get("succeeded") == 1, submitter["status"]

            await until_no_cluster(api, namespace, 60)
            timings["cluster deleted"] = time.monotonic() - started
            status = await statuses.get()
            assert status["jobDeploymentStatus"] == "Complete", status
            assert not kubelet.errors, kubelet.errors
            found = await check_clean(world, api, namespace, [job_id])
    print(f"timings (s): { {k: round(v, 1) for k, v in timings.items()} }; "
          f"statuses {statuses.seen}; events {found}")  # fmt: skip


@pytest.mark.timeout(240)
async def test_an_http_mode_rayjob_is_submitted_by_the_operator_once(
    world: harness.World,
    api: client_.Client,
    namespace: str,
    managers: harness.Managers,
    kubelet: realray_e2e.Kubelet,
) -> None:
    timings: dict[str, float] = {}
    async with RaySeen(world, kubelet) as seen, Statuses(api, namespace) as statuses:
        with kubelet.on_failure(), _print_on_failure(seen, statuses):
            await managers.start("pod-ip").wait_leading()
            started = time.monotonic()
            await api.create(rayjob(namespace, SUCCEEDS, submissionMode="HTTPMode"))
            status = await statuses.until("Complete", 180)
            timings["complete"] = time.monotonic() - started
            cluster, job_id = status["rayClusterName"], status["jobId"]
            assert status["jobStatus"] == "SUCCEEDED", status
            assert status.get("succeeded") == 1, status
            job = job_of(seen, cluster, job_id)
            assert (job["status"], job["entrypoint"]) == ("SUCCEEDED", SUCCEEDS), job
            check_job_info(status, job)
            assert ANSWER in seen.logs[job_id].split(), seen.logs
            assert not (await api.list(JOBS, namespace)).items  # no submitter Job
            assert submitters(kubelet) == []

            await until_no_cluster(api, namespace, 60)
            timings["cluster deleted"] = time.monotonic() - started
            assert not kubelet.errors, kubelet.errors
            found = await check_clean(world, api, namespace, [job_id])
    print(f"timings (s): { {k: round(v, 1) for k, v in timings.items()} }; "
          f"statuses {statuses.seen}; events {found}")  # fmt: skip


@pytest.mark.timeout(360)
async def test_a_failing_entrypoint_is_retried_on_a_new_cluster_then_fails(
    world: harness.World,
    api: client_.Client,
    namespace: str,
    managers: harness.Managers,
    kubelet: realray_e2e.Kubelet,
) -> None:
    timings: dict[str, float] = {}
    async with RaySeen(world, kubelet) as seen, Statuses(api, namespace) as statuses:
        with kubelet.on_failure(), _print_on_failure(seen, statuses):
            await managers.start("pod-ip").wait_leading()
            started = time.monotonic()
            await api.create(rayjob(namespace, FAILS, backoffLimit=1))

            async def settled() -> Obj | None:
                status = await statuses.get()
                done = status.get("jobDeploymentStatus") == "Failed" and status.get("failed") == 2
                return status if done else None

            try:
                status = await harness.until(settled, 300, "RayJob Failed after two attempts")
            except AssertionError as exc:
                raise AssertionError(f"{exc}; seen {statuses.seen}") from None
            timings["failed"] = time.monotonic() - started
            assert status["reason"] == "AppFailed", status
            assert status["jobStatus"] == "FAILED", status
            attempts = statuses.attempts()
            assert len(attempts) == 2, statuses.seen
            (first_id, first_cluster), (second_id, second_cluster) = attempts
            assert first_id != second_id, attempts
            assert first_cluster != second_cluster, attempts
            assert (status["jobId"], status["rayClusterName"]) == (second_id, second_cluster)
            states = [s[0] for s in statuses.seen]
            assert "Retrying" in states, statuses.seen
            # Ray: one job on each attempt's head, that attempt's, failed with the exit code.
            for job_id, cluster in attempts:
                job = job_of(seen, cluster, job_id)
                assert job["status"] == "FAILED", job
                assert "exit code 3" in (job.get("message") or ""), job
            assert "exit code 3" in (status.get("message") or ""), status
            # A submitter pod per attempt, each finishing (`ray job logs` exits 0 either way).
            ran = submitters(kubelet)
            assert len(ran) == 2, [p.name for p in ran]
            assert [p.exit_code for p in ran] == [0, 0], kubelet.tails()

            await until_no_cluster(api, namespace, 60)
            timings["cluster deleted"] = time.monotonic() - started
            status = await statuses.get()
            assert (status["jobDeploymentStatus"], status["failed"]) == ("Failed", 2), status
            assert not kubelet.errors, kubelet.errors
            found = await check_clean(world, api, namespace, [first_id, second_id])
            created = [n for _, reason, n in found if reason == "CreatedRayJobSubmitter"]
            assert created == [2], found  # one Event, the same message twice
    print(f"timings (s): { {k: round(v, 1) for k, v in timings.items()} }; "
          f"statuses {statuses.seen}; events {found}")  # fmt: skip


@contextlib.contextmanager
def _print_on_failure(seen: RaySeen, statuses: Statuses) -> Iterator[None]:
    try:
        yield
    except BaseException:
        print(f"\n===== RayJob statuses =====\n{statuses.seen}\n{statuses.last}")
        print(f"\n===== what the real heads' Jobs API listed =====\n{seen}")
        raise
