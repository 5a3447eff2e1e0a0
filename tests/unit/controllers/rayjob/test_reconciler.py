"""The RayJob reconciler through whole lives on the fake API server (the RayCluster and
Job controllers played by the test, :mod:`scenario`): what it creates, what it writes
and how often, and that it stops writing once the job is done."""

from __future__ import annotations

import pytest

import api.v1 as v1
from tests.unit.controllers.rayjob import scenario

Env, rayjob, REQUEST = scenario.Env, scenario.rayjob, scenario.REQUEST
JOBS, SERVICES = scenario.JOBS, scenario.SERVICES


async def start(env: Env, **spec: object) -> str:
    """Create the RayJob and bring it to Running; returns its cluster's name."""
    await env.client.create(rayjob(**spec))
    await env.synced()
    await env.reconcile()  # New -> Initializing (ids first), then the cluster: one pass
    status = await env.status()
    assert status["jobDeploymentStatus"] == "Initializing"
    writes = [(v, r, s) for v, r, s in env.client.calls if v in ("create", "update")]
    first_status = writes.index(("update", "rayjobs.ray.io", "status"))
    assert writes.index(("create", "rayclusters.ray.io", "")) > first_status, (
        "nothing is created before the ids are stored"
    )
    (name,) = await env.live_clusters()
    assert name == status["rayClusterName"]
    await env.cluster_ready(name)
    await env.reconcile()  # Running (and the submitter Job in K8sJobMode)
    assert (await env.status())["jobDeploymentStatus"] == "Running"
    return name


async def test_k8s_job_mode_life_and_no_write_at_rest(job_env: Env) -> None:
    env = job_env
    name = await start(env, shutdownAfterJobFinishes=True)
    job = await env.job()
    assert "ray.io/rayjob-finalizer" in job["metadata"]["finalizers"]
    submitter = await env.client.get(JOBS, "ns", "pi")
    assert submitter["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    job_id = job["status"]["jobId"]
    env.fake(name).set_job(job_id, "RUNNING")
    result = await env.reconcile()  # woken early (say, the submitter's pod started)
    assert env.fake(name).job_calls["get_job"] == 0, "no poll before one is due"
    assert (await env.status())["jobStatus"] == ""
    assert result.requeue_after == pytest.approx(3.0), "the poll that is due: still 3 s away"
    env.tick(3)
    await env.reconcile()
    assert (await env.status())["jobStatus"] == "RUNNING"
    env.tick(3)
    await env.reconcile()
    writes = env.status_writes()
    env.tick(3)
    await env.reconcile()
    assert env.fake(name).job_calls["get_job"] == 3
    assert env.status_writes() == writes, "a poll that changes nothing writes nothing"
    env.fake(name).set_job(job_id, "SUCCEEDED")
    await env.finish_submitter()
    env.tick(5)
    await env.reconcile()
    status = await env.status()
    assert (status["jobDeploymentStatus"], status["jobStatus"]) == ("Complete", "SUCCEEDED")
    assert status["succeeded"] == 1
    assert status["endTime"]
    await env.reconcile()  # the shutdown policy: ttl 0
    assert await env.live_clusters() == []
    assert not await env.gone(JOBS, "pi"), "the submitter Job is kept for its logs"
    writes, calls = env.writes(), len(env.client.calls)
    for _ in range(3):
        result = await env.reconcile()
    assert env.writes() == writes
    assert result.requeue_after is None
    assert env.fake(name).job_calls["get_job"] >= 2
    del calls
    assert "CreatedRayCluster" in await env.events()
    assert "CreatedRayJobSubmitter" in await env.events()


async def test_http_mode_submits_once_and_completes(job_env: Env) -> None:
    env = job_env
    name = await start(env, submissionMode="HTTPMode")
    assert await env.gone(JOBS, "pi")
    await env.reconcile()  # Ray does not know the job: submitted
    fake = env.fake(name)
    assert [r.submission_id for r in fake.job_submissions] == [(await env.status())["jobId"]]
    env.tick(3)
    await env.reconcile()
    assert len(fake.job_submissions) == 1
    fake.set_job(fake.job_submissions[0].submission_id or "", "SUCCEEDED")
    env.tick(3)
    await env.reconcile()
    assert (await env.status())["jobDeploymentStatus"] == "Complete"


async def test_a_failed_attempt_is_retried_on_a_new_cluster(job_env: Env) -> None:
    env = job_env
    first = await start(env, submissionMode="HTTPMode", backoffLimit=1)
    fake = env.fake(first)
    await env.reconcile()
    job_id = (await env.status())["jobId"]
    fake.set_job(job_id, "FAILED", "boom")
    env.tick(3)
    await env.reconcile()
    status = await env.status()
    assert (status["jobDeploymentStatus"], status["failed"]) == ("Retrying", 1)
    assert await env.live_clusters() == [], "deleted in the same pass (a chained step)"
    await env.reconcile()  # it is gone: New -> Initializing -> the new cluster, one pass
    status = await env.status()
    assert status["jobDeploymentStatus"] == "Initializing"
    assert status["rayClusterName"] != first
    assert await env.live_clusters() == [status["rayClusterName"]]
    assert status["jobId"] != job_id
    assert status["failed"] == 1


async def test_deleting_a_running_job_stops_it_and_drops_the_finalizer(job_env: Env) -> None:
    env = job_env
    name = await start(env, submissionMode="HTTPMode")
    await env.reconcile()
    job_id = (await env.status())["jobId"]
    await env.client.delete(v1.RAYJOBS, "ns", "pi")
    await env.synced()
    await env.reconcile()
    assert env.fake(name).jobs[job_id].status == "STOPPED"
    assert await env.gone(v1.RAYJOBS, "pi")


async def test_another_controller_s_rayjob_is_left_alone(job_env: Env) -> None:
    env = job_env
    await env.client.create(rayjob(managedBy="kueue.x-k8s.io/multikueue"))
    await env.synced()
    await env.reconcile()
    assert env.writes() == 1  # the test's own create
    assert (await env.status()) == {}


async def test_an_invalid_spec_fails_once_and_a_fixed_one_starts(job_env: Env) -> None:
    env = job_env
    await env.client.create(rayjob(backoffLimit=-1))
    await env.synced()
    result = await env.reconcile()
    status = await env.status()
    assert (status["jobDeploymentStatus"], status["reason"]) == (
        "ValidationFailed",
        "ValidationFailed",
    )
    assert result.requeue_after is None
    assert "InvalidRayJobSpec" in await env.events()
    writes = env.status_writes()
    await env.reconcile()
    assert env.status_writes() == writes
    job = await env.job()
    job["spec"]["backoffLimit"] = 0
    await env.client.update(job)
    await env.synced()
    await env.reconcile()
    await env.reconcile()
    assert (await env.status())["jobDeploymentStatus"] == "Initializing"


@pytest.mark.parametrize("mode", ["K8sJobMode", "HTTPMode"])
async def test_suspend_deletes_the_cluster_and_resume_starts_afresh(
    job_env: Env, mode: str
) -> None:
    env = job_env
    first = await start(env, submissionMode=mode, shutdownAfterJobFinishes=True)
    job = await env.job()
    job["spec"]["suspend"] = True
    await env.client.update(job)
    await env.synced()
    await env.reconcile()
    assert (await env.status())["jobDeploymentStatus"] == "Suspending"
    await env.reconcile()
    assert await env.live_clusters() == []
    assert await env.gone(JOBS, "pi")
    await env.reconcile()
    assert (await env.status())["jobDeploymentStatus"] == "Suspended"
    job = await env.job()
    job["spec"]["suspend"] = False
    await env.client.update(job)
    await env.synced()
    await env.reconcile()
    await env.reconcile()
    status = await env.status()
    assert status["jobDeploymentStatus"] == "Initializing"
    assert status["rayClusterName"] != first
