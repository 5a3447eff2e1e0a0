"""RayJobs in flight, handed over by KubeRay to ours: adopted, never started again.

A KubeRay user switching to us has RayJobs KubeRay started. Each scenario runs KubeRay's
operator first - the peer this repository builds from its Go module
(``hack/peers/kuberay.sh``, ``make peers``: v1.5.0, the newest the module proxy serves;
``$KUBERAY_BIN`` runs another build, e.g. v1.7.0 from its source) - as the benchmarks
run it (admin kubeconfig, ``--use-kubernetes-proxy``, no leader election), watching only
the test's namespace. It brings a RayJob to a known point, is stopped, and our manager
(RayCluster and RayJob controllers, :func:`tests.integration.rayjob_harness.start_manager`)
is started on what it left:

a. ``K8sJobMode``, Ray's job ``RUNNING`` (20 s long) under KubeRay's submitter Job: ours
   makes no second RayCluster, no second submitter Job and **no second submission**
   (the simulator counts one ``POST /api/jobs/``), keeps KubeRay's ``jobId``,
   ``rayClusterName`` and ``startTime``, takes the job to ``Complete`` / ``SUCCEEDED``
   and deletes the cluster (``shutdownAfterJobFinishes``, TTL 5 s from ours' ``endTime``).
b. ``HTTPMode``, KubeRay having POSTed the job itself: ours asks Ray and never POSTs.
c. ``Initializing``, KubeRay's cluster not ready (its head pod held by a scheduling gate
   the test removes once ours runs): ours goes on with KubeRay's cluster and submission
   id, creates the submitter Job, and the job runs once.

In each, the RayJob carries only the finalizer KubeRay put (``ray.io/rayjob-finalizer``),
which ours knows: deleting the RayJob afterwards works. kwok runs no containers: the test
plays the submitter pods, KubeRay's and ours alike
(:class:`~tests.integration.rayjob_harness.Submitter`), and the Ray simulator answers at
the head pods' IPs (KubeRay reaches it through the API server's service proxy, ours at
the pod IP)."""

from __future__ import annotations

import asyncio
import datetime
import os
import pathlib
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

import api.v1 as v1
from runtime.client import client as client_
from runtime.client import errors
from runtime.testing import controlplane, process
from tests.integration import helpers
from tests.integration import rayjob_harness as j
from tests.integration import rayservice_harness as h
from tests.support import raysim, tools

KUBERAY_SH = "hack/peers/kuberay.sh"
LONG = "python pi.py raysim.run_s=20"
"""A Ray job that runs 20 s: KubeRay is stopped and ours started while it runs."""
TTL = 5
"""``ttlSecondsAfterFinished`` of scenario a: its head pod is read once the job is Complete."""
HOLD = "test.rayservice.dev/hold"
"""The scheduling gate that keeps KubeRay's head pod Pending (scenario c)."""


# The shared RayJob fixtures (tests/integration/rayjob_harness.py).
crds, ray_kinds, submitter, observer = j.crds, j.ray_kinds, j.submitter, j.observer


@pytest.fixture(scope="module")
def sim(control_plane: controlplane.ControlPlane) -> Iterator[raysim.Simulator]:
    with raysim.running(control_plane, job_pending_s=0.3, job_run_s=2.0) as simulator:
        yield simulator


@pytest.fixture(scope="module")
def kuberay_binary() -> pathlib.Path:
    """``$KUBERAY_BIN``, else the peer ``hack/peers/kuberay.sh`` builds (or finds)."""
    override = os.environ.get("KUBERAY_BIN")
    return pathlib.Path(override) if override else tools.built(KUBERAY_SH)


class KubeRay:
    """KubeRay's operator as a child process, watching one namespace."""

    def __init__(
        self, binary: pathlib.Path, cp: controlplane.ControlPlane, namespace: str, log: pathlib.Path
    ) -> None:
        metrics, self.probes = controlplane.free_ports(2)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/root"),
            "CLUSTER_DOMAIN": "cluster.local",
        }
        self.child = process.ChildProcess(
            [str(binary), "--kubeconfig", str(cp.kubeconfig), "--enable-leader-election=false",
             "--use-kubernetes-proxy", f"--watch-namespace={namespace}",
             "--metrics-addr", f"127.0.0.1:{metrics}",
             "--health-probe-bind-address", f"127.0.0.1:{self.probes}"],
            log_path=log, name="KubeRay", env=env,
        )  # fmt: skip

    def _ready(self) -> bool:
        try:
            url = f"http://127.0.0.1:{self.probes}/readyz"
            with urllib.request.urlopen(url, timeout=2) as answer:
                return int(answer.status) == 200
        except (urllib.error.URLError, OSError):
            return False

    async def wait_ready(self, within: float = 60.0) -> None:
        deadline = time.monotonic() + within
        while not await asyncio.to_thread(self._ready):
            self.child.check_alive()
            if time.monotonic() > deadline:
                raise AssertionError(f"KubeRay not ready within {within} s:\n{self.child.tail()}")
            await asyncio.sleep(0.2)

    def stop(self) -> None:
        self.child.stop()


@pytest.fixture
async def kuberay(
    kuberay_binary: pathlib.Path,
    control_plane: controlplane.ControlPlane,
    namespace: str,
    tmp_path: pathlib.Path,
) -> AsyncIterator[KubeRay]:
    """KubeRay running (stopped by the test for the hand-over, and at the end anyway)."""
    started = KubeRay(kuberay_binary, control_plane, namespace, tmp_path / "kuberay.log")
    try:
        await started.wait_ready()
        yield started
    finally:
        started.stop()


# -- reading -------------------------------------------------------------------------------


async def submitter_job(client: client_.Client, namespace: str) -> h.Obj | None:
    try:
        return await client.get(j.JOBS, namespace, "pi")
    except errors.NotFound:
        return None


def ray_running(obj: h.Obj) -> bool:
    status = obj.get("status") or {}
    return status.get("jobDeploymentStatus") == "Running" and status.get("jobStatus") == "RUNNING"


async def head_pod(client: client_.Client, namespace: str, cluster: str) -> h.Obj:
    async def one() -> h.Obj | None:
        return await h.head_pod(client, namespace, cluster)

    return await helpers.eventually(one, 30, f"one head pod of {cluster}")


async def deleted_by_ours(client: client_.Client, namespace: str) -> None:
    """The RayJob deleted: ours removes KubeRay's finalizer, and it goes."""
    obj = await j.get_job(client, namespace)
    assert obj["metadata"].get("finalizers") == [j.FINALIZER], obj["metadata"]
    await client.delete(v1.RAYJOBS, namespace, "pi")

    await helpers.eventually(
        lambda: j.job_gone(client, namespace),
        30,
        "the RayJob deleted (its finalizer removed by ours)",
    )


def figures(
    what: str, sim: raysim.Simulator, job_id: str, observer: h.Observer, took: float
) -> None:
    """The scenario's figures, printed (``pytest -s`` shows them)."""
    print(
        f"{what}: {j.submissions(sim, job_id)} submission(s) of {job_id}, "
        f"{len(observer.clusters_seen)} RayCluster(s) {observer.clusters_seen}, "
        f"Complete {took:.1f} s after ours started"
    )


# -- a and b: a running job ------------------------------------------------------------------


async def _running_under_kuberay(
    client: client_.Client, namespace: str, kuberay: KubeRay, spec: dict[str, Any]
) -> h.Obj:
    """KubeRay takes the RayJob to Running with Ray's job RUNNING; then it is stopped."""
    await client.create(j.rayjob_obj(entrypoint=LONG, **spec), namespace=namespace)
    try:
        await j.wait_job(client, namespace, ray_running, 120, "KubeRay: Running, RUNNING")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nKubeRay's log:\n{kuberay.child.tail(20)}") from None
    kuberay.stop()
    handed = await j.get_job(client, namespace)
    assert handed["metadata"].get("finalizers") == [j.FINALIZER]  # KubeRay's
    return handed


async def test_k8s_job_mode_running_job_is_adopted_not_resubmitted(
    control_plane: controlplane.ControlPlane,
    client: client_.Client,
    namespace: str,
    sim: raysim.Simulator,
    kuberay: KubeRay,
    submitter: j.Submitter,
    observer: h.Observer,
) -> None:
    handed = await _running_under_kuberay(
        client,
        namespace,
        kuberay,
        {"shutdownAfterJobFinishes": True, "ttlSecondsAfterFinished": TTL},
    )
    status = handed["status"]
    job_id, cluster = status["jobId"], status["rayClusterName"]
    job = await submitter_job(client, namespace)
    assert job is not None, "KubeRay made no submitter Job"
    head = await head_pod(client, namespace, cluster)
    ip = str(head["status"]["podIP"])
    assert j.submissions(sim, job_id) == 1
    assert await j.ray_status(control_plane, ip, job_id) == "RUNNING"  # in flight

    started = time.monotonic()
    async with j.manager_running(control_plane, namespace):
        done = await j.wait_state(client, namespace, "Complete", within=60)
        took = time.monotonic() - started
        after = done["status"]
        assert (after["jobId"], after["rayClusterName"]) == (job_id, cluster)
        assert after["startTime"] == status["startTime"]  # the same attempt, not a new one
        assert (after["jobStatus"], after["succeeded"], after["failed"]) == ("SUCCEEDED", 1, 0)
        assert j.submissions(sim, job_id) == 1, sim.job_requests()
        assert [p.submission_id for p in submitter.played.values()] == [job_id]
        kept = await submitter_job(client, namespace)
        assert kept is not None
        assert kept["metadata"]["uid"] == job["metadata"]["uid"]  # KubeRay's Job, not a new one
        assert (kept.get("status") or {}).get("succeeded") == 1
        now_head = await head_pod(client, namespace, cluster)  # the cluster's TTL runs
        assert now_head["metadata"]["uid"] == head["metadata"]["uid"]  # the job's head kept
        await helpers.eventually(
            lambda: cluster in observer.deleted_at, 30, "the cluster deleted after the job"
        )
        ended = datetime.datetime.fromisoformat(after["endTime"]).timestamp()
        assert observer.deleted_at[cluster] >= ended + TTL - 1  # endTime has whole seconds
        assert observer.clusters_seen == [cluster]
        await deleted_by_ours(client, namespace)
    figures("K8sJobMode hand-over (Running)", sim, job_id, observer, took)
    assert observer.clusters_seen == [cluster]


async def test_http_mode_running_job_is_adopted_and_never_posted_again(
    control_plane: controlplane.ControlPlane,
    client: client_.Client,
    namespace: str,
    sim: raysim.Simulator,
    kuberay: KubeRay,
    observer: h.Observer,
) -> None:
    handed = await _running_under_kuberay(
        client, namespace, kuberay, {"submissionMode": "HTTPMode", "shutdownAfterJobFinishes": True}
    )
    status = handed["status"]
    job_id, cluster = status["jobId"], status["rayClusterName"]
    ip = str((await head_pod(client, namespace, cluster))["status"]["podIP"])
    assert j.submissions(sim, job_id) == 1  # KubeRay's POST
    assert await j.ray_status(control_plane, ip, job_id) == "RUNNING"

    started = time.monotonic()
    async with j.manager_running(control_plane, namespace):
        done = await j.wait_state(client, namespace, "Complete", within=60)
        took = time.monotonic() - started
        after = done["status"]
        assert (after["jobId"], after["rayClusterName"]) == (job_id, cluster)
        assert after["startTime"] == status["startTime"]
        assert (after["jobStatus"], after["succeeded"]) == ("SUCCEEDED", 1)
        assert j.submissions(sim, job_id) == 1, sim.job_requests()
        assert await submitter_job(client, namespace) is None
        await helpers.eventually(
            lambda: cluster in observer.deleted_at, 30, "the cluster deleted after the job"
        )
        assert observer.clusters_seen == [cluster]
        await deleted_by_ours(client, namespace)
    figures("HTTPMode hand-over (Running)", sim, job_id, observer, took)


# -- c: a job KubeRay left Initializing ----------------------------------------------------


async def test_initializing_job_goes_on_with_kuberays_cluster_and_job_id(
    control_plane: controlplane.ControlPlane,
    client: client_.Client,
    namespace: str,
    sim: raysim.Simulator,
    kuberay: KubeRay,
    submitter: j.Submitter,
    observer: h.Observer,
) -> None:
    obj = j.rayjob_obj(shutdownAfterJobFinishes=True)
    obj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["schedulingGates"] = [
        {"name": HOLD}
    ]
    await client.create(obj, namespace=namespace)

    def initializing(o: h.Obj) -> bool:
        status = o.get("status") or {}
        return bool(
            status.get("jobDeploymentStatus") == "Initializing"
            and status.get("rayClusterName")
            and status.get("jobId")
        )

    handed = await j.wait_job(client, namespace, initializing, 60, "KubeRay: Initializing")
    status = handed["status"]
    job_id, cluster = status["jobId"], status["rayClusterName"]
    head = await head_pod(client, namespace, cluster)  # made by KubeRay, held Pending
    assert not head["spec"].get("nodeName")
    await asyncio.sleep(3.5)  # one more of KubeRay's 3 s passes: it stays there
    held = await j.get_job(client, namespace)
    assert j.state(held) == "Initializing"
    assert held["metadata"].get("finalizers") == [j.FINALIZER]
    assert await submitter_job(client, namespace) is None
    kuberay.stop()

    started = time.monotonic()
    async with j.manager_running(control_plane, namespace):
        await asyncio.sleep(2.0)  # ours has looked: the cluster is there, not ready
        assert observer.clusters_seen == [cluster]
        assert j.state(await j.get_job(client, namespace)) == "Initializing"
        assert await submitter_job(client, namespace) is None
        pod = await head_pod(client, namespace, cluster)
        assert pod["metadata"]["uid"] == head["metadata"]["uid"]
        await client.patch(
            h.PODS, namespace, pod["metadata"]["name"], {"spec": {"schedulingGates": None}}
        )

        done = await j.wait_state(client, namespace, "Complete", within=90)
        took = time.monotonic() - started
        after = done["status"]
        assert (after["jobId"], after["rayClusterName"]) == (job_id, cluster)
        assert after["startTime"] == status["startTime"]
        assert (after["jobStatus"], after["succeeded"], after["failed"]) == ("SUCCEEDED", 1, 0)
        assert [p.submission_id for p in submitter.played.values()] == [job_id]
        assert j.submissions(sim, job_id) == 1, sim.job_requests()
        assert observer.clusters_seen == [cluster]
        await helpers.eventually(
            lambda: cluster in observer.deleted_at, 30, "the cluster deleted after the job"
        )
        await deleted_by_ours(client, namespace)
    figures("K8sJobMode hand-over (Initializing)", sim, job_id, observer, took)
