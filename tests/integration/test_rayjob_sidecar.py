"""``SidecarMode`` on the real control plane: the submitter is a container of the head pod.

Our manager (RayCluster and RayJob controllers,
:func:`tests.integration.rayjob_harness.manager_running`) makes the RayCluster; its head
pod carries KubeRay's submitter container ``ray-job-submitter`` (``/bin/bash -ce --`` and
one script: the wait for the dashboard's GCS at ``localhost``, then a blocking ``ray job
submit --address http://127.0.0.1:8265 --submission-id <jobId> -- <entrypoint> ;``, no
status check: KubeRay v1.7.0's without its ``SidecarSubmitterRestart`` gate). kwok runs
no containers, so the test plays that one (:func:`play_sidecar`): what the script does,
straight at the head pod's IP where the Ray simulator answers, then the container marked
terminated in the pod's status with its exit code (the ``ray-head`` container runs on,
so the pod stays ``Running``; ``Ready`` turns ``False``, as a kubelet reports it).

- Ray's job succeeds, the sidecar exits 0: ``Complete`` / ``SUCCEEDED``; until the
  sidecar has ended, Ray's ``SUCCEEDED`` alone keeps the RayJob ``Running``.
- The sidecar exits 1 (KubeRay v1.7.0's ``checkSidecarContainerStatus``: ``Failed``,
  ``AppFailed`` when the status already says Ray's job ``FAILED``, else
  ``SubmissionFailed``): after Ray's job failed (and ours reported it) -> ``AppFailed``;
  after Ray refused the submission (Ray never knew the job) -> ``SubmissionFailed``.

**When the end is seen.** The RayJob controller does not watch head pods
(``controllers/rayjob/setup.py``): the container's end is read at the next poll of the
running job. Its interval is at most :attr:`~controllers.rayjob.plan.Options
.poll_max_submitter` (the harness's :data:`~tests.integration.rayjob_harness.PLAN`: 5 s),
so the RayJob must show the end within that plus :data:`PASS_S` (one pass: the cache
read, one dashboard GET, one status write; and this test's own 0.1 s polling). A change
of the cluster's status (the head turning not ready) may wake it sooner; never later.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp
import pytest

import api.v1 as v1
from runtime.client import client as client_
from runtime.client import errors
from runtime.testing import controlplane
from tests.integration import helpers
from tests.integration import rayjob_harness as j
from tests.integration import rayservice_harness as h
from tests.support import raysim

SIDECAR = "ray-job-submitter"
SIDECAR_ADDRESS = "http://127.0.0.1:8265"
"""Where the sidecar reaches its own head's dashboard (KubeRay's ``127.0.0.1:<port>``)."""
PASS_S = 2.0
"""Seconds for one pass after the poll is due (see the module docstring)."""
SEEN_WITHIN = j.PLAN.poll_max_submitter + PASS_S
"""The bound on the time from the container's end to the RayJob showing it."""


# The shared RayJob fixtures (tests/integration/rayjob_harness.py).
crds, sim, ray_kinds, running, observer = j.crds, j.sim, j.ray_kinds, j.running, j.observer


# -- the sidecar, played -------------------------------------------------------------------


def sidecar_of(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    found = [c for c in pod["spec"]["containers"] if c.get("name") == SIDECAR]
    assert len(found) == 1, [c.get("name") for c in pod["spec"]["containers"]]
    return found[0]


def env_of(container: Mapping[str, Any]) -> dict[str, str]:
    """The container's environment (a later definition wins, as in a pod)."""
    return {e["name"]: str(e.get("value") or "") for e in container.get("env") or ()}


@dataclasses.dataclass
class Ended:
    """What the played sidecar did."""

    submission_id: str
    submitted: bool
    ray_status: str
    exit_code: int
    at: float
    """``time.monotonic()`` once the container's end was written to the pod's status."""


async def _call(
    http: aiohttp.ClientSession,
    cp: controlplane.ControlPlane,
    ip: str,
    method: str,
    path: str,
    body: Any = None,
) -> tuple[int, Any]:
    async with http.request(method, h.pod_url(cp, ip, 8265, path), json=body) as response:
        text = await response.text()
        try:
            return response.status, await response.json(content_type=None)
        except ValueError:
            return response.status, text


async def play_sidecar(
    cp: controlplane.ControlPlane,
    client: client_.Client,
    namespace: str,
    cluster: str,
    *,
    before_exit: Callable[[str], Awaitable[object]] | None = None,
) -> Ended:
    """What the sidecar's script does, at the head pod's IP: wait for the GCS, submit
    (blocking: follow the job to its end), exit 0 iff Ray's job ``SUCCEEDED`` (1 at once
    when Ray refuses the submission); ``before_exit(ray_status)`` is awaited first; then
    the container is marked terminated."""
    pod = await h.head_pod(client, namespace, cluster)
    assert pod is not None
    ip = await h.head_ip(client, namespace, cluster)
    container = sidecar_of(pod)
    submission_id = env_of(container)["RAY_JOB_SUBMISSION_ID"]
    entrypoint = container["args"][0].rsplit(" -- ", 1)[1].removesuffix(" ;").strip()
    async with aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=5, connect=2),
        connector=aiohttp.TCPConnector(force_close=True),
    ) as http:

        async def healthy() -> bool:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                code, answer = await _call(http, cp, ip, "GET", "/api/gcs_healthz")
                return code == 200 and "success" in str(answer)
            return False

        await helpers.eventually(healthy, 30, "the head's GCS healthy")
        body = {"entrypoint": entrypoint, "submission_id": submission_id}
        code, _ = await _call(http, cp, ip, "POST", "/api/jobs/", body)
        status = ""

        async def ended() -> str | None:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                code, answer = await _call(http, cp, ip, "GET", f"/api/jobs/{submission_id}")
                if code == 200 and answer.get("status") in j.TERMINAL:
                    return str(answer["status"])
            return None

        if code == 200:
            status = await helpers.eventually(ended, 60, "Ray's job ended")
    if before_exit is not None:
        await before_exit(status)
    exit_code = 0 if status == "SUCCEEDED" else 1
    await terminate(client, namespace, pod["metadata"]["name"], exit_code)
    return Ended(submission_id, code == 200, status, exit_code, time.monotonic())


async def terminate(client: client_.Client, namespace: str, name: str, exit_code: int) -> None:
    """The pod's status as a kubelet reports it once the sidecar exited ``exit_code``."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for _ in range(10):
        pod = await client.get(h.PODS, namespace, name)
        status = pod["status"]
        for container in status.get("containerStatuses") or ():
            if container.get("name") != SIDECAR:
                continue
            started = ((container.get("state") or {}).get("running") or {}).get("startedAt")
            container.update(ready=False, started=False)
            container["state"] = {"terminated": {
                "exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                "startedAt": started or now, "finishedAt": now,
            }}  # fmt: skip
        for condition in status.get("conditions") or ():
            if condition.get("type") in ("Ready", "ContainersReady"):
                condition.update(
                    status="False", reason="ContainersNotReady", lastTransitionTime=now
                )
        try:
            await client.update_status(pod)
            return
        except errors.Conflict:
            continue
    raise AssertionError(f"the status of pod {name} could not be written")


# -- reading -------------------------------------------------------------------------------


async def cluster_of(client: client_.Client, namespace: str) -> str:
    """The RayJob's cluster, once its head pod has an IP."""

    def named(obj: h.Obj) -> bool:
        return bool((obj.get("status") or {}).get("rayClusterName"))

    obj = await j.wait_job(client, namespace, named, 60, "a rayClusterName")
    cluster = str(obj["status"]["rayClusterName"])
    await h.head_ip(client, namespace, cluster, within=60)
    return cluster


def reported(job_status: str) -> Callable[[h.Obj], bool]:
    """Ours reports Ray's ``job_status`` while the RayJob waits for the sidecar."""

    def check(obj: h.Obj) -> bool:
        status = obj.get("status") or {}
        return status.get("jobStatus") == job_status and j.state(obj) == "Running"

    return check


async def seen_at(client: client_.Client, namespace: str, wanted: str, since: float) -> h.Obj:
    """The RayJob once ``wanted``, within :data:`SEEN_WITHIN` of ``since``."""
    done = await j.wait_state(client, namespace, wanted, within=SEEN_WITHIN + 5)
    took = time.monotonic() - since
    assert took <= SEEN_WITHIN, f"{wanted} seen {took:.1f} s after the sidecar ended"
    print(
        f"SidecarMode: {wanted} seen {took:.1f} s after the sidecar's end (bound {SEEN_WITHIN} s)"
    )
    return done


# -- the scenarios -------------------------------------------------------------------------


async def test_sidecar_mode_completes_once_its_submitter_container_ends(
    control_plane: controlplane.ControlPlane,
    client: client_.Client,
    namespace: str,
    sim: raysim.Simulator,
    running: h.Running,
    observer: h.Observer,
) -> None:
    await client.create(j.rayjob_obj(submissionMode="SidecarMode"), namespace=namespace)
    cluster = await cluster_of(client, namespace)
    obj = await j.get_job(client, namespace)
    job_id = obj["status"]["jobId"]

    # the head pod ours made carries KubeRay's submitter container
    rc = await client.get(v1.RAYCLUSTERS, namespace, cluster)
    annotations = rc["metadata"].get("annotations") or {}
    assert annotations.get("ray.io/disable-provisioned-head-restart") == "true"
    assert rc["metadata"]["labels"]["ray.io/job-submission-mode"] == "SidecarMode"
    pod = await h.head_pod(client, namespace, cluster)
    assert pod is not None
    assert [c["name"] for c in pod["spec"]["containers"]] == ["ray-head", SIDECAR]
    assert pod["spec"]["restartPolicy"] == "Never"
    sidecar = sidecar_of(pod)
    assert sidecar["command"] == ["/bin/bash", "-ce", "--"]
    [script] = sidecar["args"]
    assert script.startswith("until python -c ")
    assert "'http://localhost:8265/api/gcs_healthz'" in script
    assert (
        '; do echo "Waiting for Ray Dashboard GCS to become healthy at http://127.0.0.1:8265 ..."'
        " ; sleep 2 ; done ; " in script
    )
    assert script.endswith(
        f"done ; ray job submit --address {SIDECAR_ADDRESS} --submission-id {job_id} "
        "-- python pi.py ;"
    )  # blocking: no --no-wait, no `ray job status` first (no retry may submit twice)
    assert "restartPolicy" not in sidecar
    assert sidecar["image"] == "rayproject/ray:2.60.0"
    assert sidecar["resources"] == {
        "limits": {"cpu": "1", "memory": "1Gi"},
        "requests": {"cpu": "500m", "memory": "200Mi"},
    }
    assert env_of(sidecar) == {
        "PYTHONUNBUFFERED": "1", "RAY_DASHBOARD_ADDRESS": "", "RAY_JOB_SUBMISSION_ID": job_id,
    }  # fmt: skip

    async def ray_done_but_sidecar_running(ray_status: str) -> None:
        assert ray_status == "SUCCEEDED"
        await j.wait_job(client, namespace, reported("SUCCEEDED"), 30, "Ray's SUCCEEDED reported")
        await asyncio.sleep(1.0)  # another poll: Ray's end alone does not complete it
        assert j.state(await j.get_job(client, namespace)) == "Running"

    ended = await play_sidecar(
        control_plane, client, namespace, cluster, before_exit=ray_done_but_sidecar_running
    )
    assert (ended.submission_id, ended.submitted, ended.exit_code) == (job_id, True, 0)
    done = await seen_at(client, namespace, "Complete", ended.at)
    status = done["status"]
    assert (status["jobStatus"], status["succeeded"], status["failed"]) == ("SUCCEEDED", 1, 0)
    assert status["jobId"] == job_id
    assert j.submissions(sim, job_id) == 1  # the sidecar's; ours never submits
    assert not (await client.list(j.JOBS, namespace)).items  # no submitter Job
    assert observer.clusters_seen == [cluster]
    assert cluster in await h.all_clusters(client, namespace)  # kept: no shutdown asked


@pytest.mark.parametrize(
    ("entrypoint", "ray_status", "reason"),
    [
        ("python pi.py raysim.outcome=fail", "FAILED", "AppFailed"),
        ("python pi.py raysim.outcome=refused", "", "SubmissionFailed"),
    ],
    ids=["job-failed", "submission-refused"],
)
async def test_sidecar_exiting_non_zero_fails_the_rayjob(
    control_plane: controlplane.ControlPlane,
    client: client_.Client,
    namespace: str,
    sim: raysim.Simulator,
    running: h.Running,
    observer: h.Observer,
    entrypoint: str,
    ray_status: str,
    reason: str,
) -> None:
    await client.create(
        j.rayjob_obj(submissionMode="SidecarMode", entrypoint=entrypoint), namespace=namespace
    )
    cluster = await cluster_of(client, namespace)

    async def ray_status_reported(seen: str) -> None:
        assert seen == ray_status
        if seen:  # KubeRay's reason depends on it: AppFailed once FAILED was reported
            await j.wait_job(client, namespace, reported(seen), 30, f"Ray's {seen} reported")
        else:  # Ray does not know the job: the RayJob waits for its submitter
            await asyncio.sleep(1.5)
            obj = await j.get_job(client, namespace)
            assert (j.state(obj), obj["status"].get("jobStatus")) == ("Running", "")

    ended = await play_sidecar(
        control_plane, client, namespace, cluster, before_exit=ray_status_reported
    )
    assert (ended.submitted, ended.exit_code) == (bool(ray_status), 1)
    done = await seen_at(client, namespace, "Failed", ended.at)
    status = done["status"]
    assert (status["reason"], status["jobStatus"]) == (reason, ray_status), status
    assert (status["failed"], status["succeeded"]) == (1, 0)
    await asyncio.sleep(2.0)  # no retry (backoffLimit 0): no new cluster, no new submission
    again = await j.get_job(client, namespace)
    assert (j.state(again), again["status"]["failed"]) == ("Failed", 1)
    assert observer.clusters_seen == [cluster]
    assert j.submissions(sim, ended.submission_id) == 1  # the sidecar's POST, none by ours
