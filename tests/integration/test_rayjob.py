"""The RayJob and RayCronJob controllers on the real control plane: kube-controller-manager
(the Job controller finishing submitter Jobs, garbage collection), kube-scheduler, kwok,
and the Ray simulator's Jobs API at the head pods' IPs. The manager (RayCluster, RayJob
and, for the cron scenario, RayCronJob controllers) runs in this process, watching the
test's namespace. kwok runs no containers, so in ``K8sJobMode`` the test plays the
submitter's pod (:class:`~tests.integration.rayjob_harness.Submitter`). Every wait is
bounded; the jobs last about a second."""

from __future__ import annotations

import asyncio
import datetime

import pytest

import api.v1 as v1
from runtime.client import client as client_
from runtime.client import errors
from runtime.testing import controlplane
from tests.integration import helpers
from tests.integration import rayjob_harness as j
from tests.integration import rayservice_harness as h
from tests.support import raysim

QUIET_S = 3.0
"""Seconds a finished RayJob is watched for status writes."""


# The shared RayJob fixtures (tests/integration/rayjob_harness.py).
crds, sim, ray_kinds, running, submitter, observer = (
    j.crds,
    j.sim,
    j.ray_kinds,
    j.running,
    j.submitter,
    j.observer,
)


async def submitter_job(client: client_.Client, namespace: str, name: str = "pi") -> h.Obj | None:
    try:
        return await client.get(j.JOBS, namespace, name)
    except errors.NotFound:
        return None


def ray_running(obj: h.Obj) -> bool:
    return (obj.get("status") or {}).get("jobStatus") == "RUNNING"


def job_condition(job: h.Obj | None, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in ((job or {}).get("status") or {}).get("conditions") or ()
    )


# -- K8sJobMode and HTTPMode ---------------------------------------------------------------


async def test_k8s_job_mode_completes_deletes_its_cluster_and_then_writes_nothing(
    control_plane: controlplane.ControlPlane,
    client: client_.Client,
    namespace: str,
    sim: raysim.Simulator,
    running: h.Running,
    submitter: j.Submitter,
    observer: h.Observer,
) -> None:
    await client.create(
        j.rayjob_obj(shutdownAfterJobFinishes=True, ttlSecondsAfterFinished=0),
        namespace=namespace,
    )
    done = await j.wait_state(client, namespace, "Complete", within=90)
    status = done["status"]
    assert status["jobStatus"] == "SUCCEEDED"
    assert (status["succeeded"], status["failed"]) == (1, 0)
    assert done["metadata"]["finalizers"] == [j.FINALIZER]
    cluster = status["rayClusterName"]
    assert observer.clusters_seen == [cluster]
    # the submitter played exactly one pod, which submitted once
    assert [p.submission_id for p in submitter.played.values()] == [status["jobId"]]
    assert j.submissions(sim, status["jobId"]) == 1

    # the cluster goes (shutdownAfterJobFinishes, TTL 0); the submitter Job stays Complete
    await helpers.eventually(
        lambda: cluster in observer.deleted_at, 30, "the cluster deleted after the job"
    )
    job = await submitter_job(client, namespace)
    assert job_condition(job, "Complete"), (job or {}).get("status")
    assert (job or {}).get("status", {}).get("succeeded") == 1

    async def cluster_gone() -> bool:
        return cluster not in await h.all_clusters(client, namespace)

    await helpers.eventually(cluster_gone, 30, "the RayCluster gone")
    await asyncio.sleep(1.0)  # the passes woken by the cluster's deletion
    writes = j.status_writes(control_plane)
    rv = (await j.get_job(client, namespace))["metadata"]["resourceVersion"]
    await asyncio.sleep(QUIET_S)
    assert j.status_writes(control_plane) == writes
    after = await j.get_job(client, namespace)
    assert after["metadata"]["resourceVersion"] == rv
    assert j.state(after) == "Complete"


async def test_http_mode_submits_exactly_once(
    client: client_.Client,
    namespace: str,
    sim: raysim.Simulator,
    running: h.Running,
    observer: h.Observer,
) -> None:
    await client.create(
        j.rayjob_obj(submissionMode="HTTPMode", entrypoint="python pi.py raysim.run_s=2"),
        namespace=namespace,
    )
    done = await j.wait_state(client, namespace, "Complete", within=90)
    status = done["status"]
    assert status["jobStatus"] == "SUCCEEDED"
    assert status["succeeded"] == 1
    assert j.submissions(sim, status["jobId"]) == 1
    assert await submitter_job(client, namespace) is None
    assert observer.clusters_seen == [status["rayClusterName"]]
    # the cluster is kept (no shutdownAfterJobFinishes)
    assert status["rayClusterName"] in await h.all_clusters(client, namespace)
    info = status.get("rayJobInfo") or {}
    assert info.get("startTime"), status
    assert info.get("endTime"), status


# -- retries and deadlines -----------------------------------------------------------------


async def test_a_failing_job_is_retried_on_new_clusters_until_its_backoff_limit(
    client: client_.Client,
    namespace: str,
    sim: raysim.Simulator,
    running: h.Running,
    submitter: j.Submitter,
    observer: h.Observer,
) -> None:
    await client.create(
        j.rayjob_obj(
            entrypoint="python pi.py raysim.outcome=fail raysim.run_s=0.3",
            backoffLimit=2,
            submitterConfig={"backoffLimit": 0},
        ),
        namespace=namespace,
    )

    def failed_for_good(obj: h.Obj) -> bool:
        return j.state(obj) == "Failed" and (obj.get("status") or {}).get("failed") == 3

    done = await j.wait_job(client, namespace, failed_for_good, 150, "Failed after 3 attempts")
    status = done["status"]
    assert (status["reason"], status["jobStatus"]) == ("AppFailed", "FAILED")
    assert status["succeeded"] == 0
    assert len(observer.clusters_seen) == 3, observer.clusters_seen
    assert len(set(observer.clusters_seen)) == 3
    assert status["rayClusterName"] == observer.clusters_seen[-1]
    ids = [p.submission_id for p in submitter.played.values()]
    assert len(set(ids)) == 3, ids  # a new submission id per attempt
    assert all(j.submissions(sim, i) == 1 for i in ids)
    await asyncio.sleep(QUIET_S)  # no fourth attempt
    assert (await j.get_job(client, namespace))["status"]["failed"] == 3
    assert len(observer.clusters_seen) == 3


async def test_active_deadline_fails_the_job_without_a_retry(
    client: client_.Client, namespace: str, running: h.Running, observer: h.Observer
) -> None:
    await client.create(
        j.rayjob_obj(
            submissionMode="HTTPMode",
            entrypoint="python pi.py raysim.outcome=forever",
            activeDeadlineSeconds=6,
            backoffLimit=2,
        ),
        namespace=namespace,
    )
    await j.wait_job(client, namespace, ray_running, 60, "Ray's job RUNNING")
    done = await j.wait_state(client, namespace, "Failed", within=30)
    assert done["status"]["reason"] == "DeadlineExceeded"
    assert done["status"]["failed"] == 1
    await asyncio.sleep(QUIET_S)
    again = await j.get_job(client, namespace)
    assert (j.state(again), again["status"]["failed"]) == ("Failed", 1)
    assert len(observer.clusters_seen) == 1


async def test_pre_running_deadline_with_a_selected_cluster_that_does_not_exist(
    client: client_.Client, namespace: str, running: h.Running, observer: h.Observer
) -> None:
    obj = j.rayjob_obj(
        submissionMode="HTTPMode",
        clusterSelector={"ray.io/cluster": "missing"},
        preRunningDeadlineSeconds=4,
    )
    del obj["spec"]["rayClusterSpec"]
    await client.create(obj, namespace=namespace)

    async def warned() -> list[h.Obj]:
        return await j.events_of(client, namespace, "pi", "RayClusterNotFound")

    found = await helpers.eventually(warned, 30, "a RayClusterNotFound Event")
    assert found[0]["type"] == "Warning"
    done = await j.wait_state(client, namespace, "Failed", within=30)
    assert done["status"]["reason"] == "PreRunningDeadlineExceeded"
    assert done["status"]["rayClusterName"] == "missing"
    assert observer.clusters_seen == []


# -- deletion ------------------------------------------------------------------------------


async def test_deletion_rules_delete_workers_then_the_cluster_then_the_rayjob(
    client: client_.Client, namespace: str, running: h.Running, observer: h.Observer
) -> None:
    def rule(policy: str, ttl: int) -> h.Obj:
        return {"policy": policy, "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": ttl}}

    await client.create(
        j.rayjob_obj(
            submissionMode="HTTPMode",
            deletionStrategy={
                "deletionRules": [
                    rule("DeleteWorkers", 0),
                    rule("DeleteCluster", 3),
                    rule("DeleteSelf", 6),
                ]
            },
        ),
        namespace=namespace,
    )
    done = await j.wait_state(client, namespace, "Complete", within=90)
    ended = datetime.datetime.fromisoformat(done["status"]["endTime"]).timestamp()
    cluster = done["status"]["rayClusterName"]

    def suspended() -> bool:
        groups = (observer.last.get(cluster) or {}).get("spec", {}).get("workerGroupSpecs") or []
        return bool(groups) and all(g.get("suspend") for g in groups)

    await helpers.eventually(suspended, 30, "the workers suspended")
    assert cluster not in observer.deleted_at
    await helpers.eventually(lambda: cluster in observer.deleted_at, 30, "the cluster deleted")
    assert observer.deleted_at[cluster] >= ended + 3 - 1  # endTime has whole seconds

    await helpers.eventually(lambda: j.job_gone(client, namespace), 30, "the RayJob deleted")
    assert len(observer.clusters_seen) == 1


async def test_legacy_on_failure_delete_cluster(
    client: client_.Client, namespace: str, running: h.Running, observer: h.Observer
) -> None:
    await client.create(
        j.rayjob_obj(
            submissionMode="HTTPMode",
            entrypoint="python pi.py raysim.outcome=fail raysim.run_s=0.5",
            deletionStrategy={
                "onSuccess": {"policy": "DeleteNone"},
                "onFailure": {"policy": "DeleteCluster"},
            },
        ),
        namespace=namespace,
    )
    done = await j.wait_state(client, namespace, "Failed", within=90)
    assert done["status"]["reason"] == "AppFailed"
    cluster = done["status"]["rayClusterName"]
    await helpers.eventually(lambda: cluster in observer.deleted_at, 30, "the cluster deleted")
    await asyncio.sleep(1.0)
    kept = await j.get_job(client, namespace)
    assert j.state(kept) == "Failed"
    assert kept["status"]["failed"] == 1


async def test_deleting_a_running_rayjob_stops_its_ray_job(
    control_plane: controlplane.ControlPlane,
    client: client_.Client,
    namespace: str,
    sim: raysim.Simulator,
    running: h.Running,
) -> None:
    await client.create(
        j.rayjob_obj(submissionMode="HTTPMode", entrypoint="python pi.py raysim.outcome=forever"),
        namespace=namespace,
    )
    obj = await j.wait_job(client, namespace, ray_running, 60, "Ray's job RUNNING")
    job_id, cluster = obj["status"]["jobId"], obj["status"]["rayClusterName"]
    ip = await h.head_ip(client, namespace, cluster)
    await client.delete(v1.RAYJOBS, namespace, "pi")
    await helpers.eventually(lambda: j.stops(sim, job_id) >= 1, 30, "the Ray job stopped")
    # Ray says STOPPED - unless the garbage collector was quicker and the head went with
    # the cluster once the finalizer was dropped (the stop request was counted above).
    assert await j.ray_status(control_plane, ip, job_id) in ("STOPPED", None)

    await helpers.eventually(lambda: j.job_gone(client, namespace), 30, "the RayJob gone")
    assert j.stops(sim, job_id) == 1


# -- suspend, clusterSelector, managedBy, validation ---------------------------------------


async def test_suspend_while_running_then_resume(
    client: client_.Client,
    namespace: str,
    sim: raysim.Simulator,
    running: h.Running,
    observer: h.Observer,
) -> None:
    await client.create(
        j.rayjob_obj(
            submissionMode="HTTPMode",
            entrypoint="python pi.py raysim.run_s=3",
            shutdownAfterJobFinishes=True,
        ),
        namespace=namespace,
    )
    obj = await j.wait_job(client, namespace, ray_running, 60, "Ray's job RUNNING")
    first, first_id = obj["status"]["rayClusterName"], obj["status"]["jobId"]
    await client.patch(v1.RAYJOBS, namespace, "pi", {"spec": {"suspend": True}})
    suspended = await j.wait_state(client, namespace, "Suspended", within=30)
    assert "rayClusterName" not in suspended["status"]
    assert first in observer.deleted_at
    assert len(observer.clusters_seen) == 1
    await client.patch(v1.RAYJOBS, namespace, "pi", {"spec": {"suspend": False}})
    done = await j.wait_state(client, namespace, "Complete", within=90)
    second = done["status"]["rayClusterName"]
    assert second != first
    assert observer.clusters_seen == [first, second]
    assert done["status"]["jobId"] != first_id
    assert j.submissions(sim, done["status"]["jobId"]) == 1
    assert done["status"]["succeeded"] == 1


async def test_cluster_selector_uses_an_existing_cluster_and_never_deletes_it(
    client: client_.Client,
    namespace: str,
    sim: raysim.Simulator,
    running: h.Running,
    observer: h.Observer,
) -> None:
    spec = j.rayjob_obj()["spec"]["rayClusterSpec"]
    await client.create(
        {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "shared"},
         "spec": spec},
        namespace=namespace,
    )  # fmt: skip
    obj = j.rayjob_obj(submissionMode="HTTPMode", clusterSelector={"ray.io/cluster": "shared"})
    del obj["spec"]["rayClusterSpec"]
    await client.create(obj, namespace=namespace)
    done = await j.wait_state(client, namespace, "Complete", within=90)
    assert done["status"]["rayClusterName"] == "shared"
    assert j.submissions(sim, done["status"]["jobId"]) == 1
    await asyncio.sleep(QUIET_S)
    assert observer.clusters_seen == ["shared"]
    assert "shared" not in observer.deleted_at
    shared = await client.get(v1.RAYCLUSTERS, namespace, "shared")
    assert not shared["metadata"].get("ownerReferences")


async def test_managed_by_multikueue_is_left_alone(
    client: client_.Client, namespace: str, running: h.Running, observer: h.Observer
) -> None:
    await client.create(j.rayjob_obj(managedBy="kueue.x-k8s.io/multikueue"), namespace=namespace)
    await asyncio.sleep(QUIET_S)
    obj = await j.get_job(client, namespace)
    assert not obj.get("status")
    assert not obj["metadata"].get("finalizers")
    assert observer.clusters_seen == []
    assert await submitter_job(client, namespace) is None
    assert await j.events_of(client, namespace, "pi") == []


async def test_an_invalid_spec_fails_validation_and_runs_once_fixed(
    client: client_.Client, namespace: str, sim: raysim.Simulator, running: h.Running
) -> None:
    await client.create(
        j.rayjob_obj(submissionMode="HTTPMode", ttlSecondsAfterFinished=5), namespace=namespace
    )
    invalid = await j.wait_state(client, namespace, "ValidationFailed", within=30)
    assert invalid["status"]["reason"] == "ValidationFailed"
    assert "ttlSecondsAfterFinished" in invalid["status"]["message"]

    async def warned() -> list[h.Obj]:
        found = await j.events_of(client, namespace, "pi")
        return [e for e in found if e.get("type") == "Warning"]

    await helpers.eventually(warned, 30, "a Warning Event")
    await client.patch(v1.RAYJOBS, namespace, "pi", {"spec": {"ttlSecondsAfterFinished": 0}})
    done = await j.wait_state(client, namespace, "Complete", within=90)
    assert j.submissions(sim, done["status"]["jobId"]) == 1


# -- crash safety --------------------------------------------------------------------------


def _initializing_written(method: str, where: str, body: object) -> bool:
    status = (body or {}).get("status") or {} if isinstance(body, dict) else {}
    return (
        method == "PUT"
        and where.endswith("/rayjobs/pi/status")
        and status.get("jobDeploymentStatus") == "Initializing"
    )


def _submitted(method: str, where: str, body: object) -> bool:
    return method == "JOB-SUBMIT"


@pytest.mark.parametrize(
    "when",
    [_initializing_written, _submitted],
    ids=["after-new-to-initializing", "after-http-submission"],
)
async def test_a_manager_killed_mid_job_never_makes_a_second_cluster_or_submission(
    control_plane: controlplane.ControlPlane,
    client: client_.Client,
    namespace: str,
    sim: raysim.Simulator,
    observer: h.Observer,
    when: object,
) -> None:
    crash = h.Crash()
    crash.arm(when)  # type: ignore[arg-type]
    first = await j.start_manager(control_plane, namespace, crash=crash)
    try:
        await client.create(
            j.rayjob_obj(submissionMode="HTTPMode", entrypoint="python pi.py raysim.run_s=2"),
            namespace=namespace,
        )
        await asyncio.wait_for(crash.fired.wait(), 60)
    finally:
        await first.kill()
    crashed = await j.get_job(client, namespace)
    job_id = crashed["status"]["jobId"]
    cluster = crashed["status"]["rayClusterName"]
    async with j.manager_running(control_plane, namespace):
        done = await j.wait_state(client, namespace, "Complete", within=90)
    assert (done["status"]["jobId"], done["status"]["rayClusterName"]) == (job_id, cluster)
    assert observer.clusters_seen == [cluster]
    assert j.submissions(sim, job_id) == 1
    assert done["status"]["succeeded"] == 1


# -- RayCronJob ----------------------------------------------------------------------------


async def test_raycronjob_ticks_under_a_fake_clock(
    control_plane: controlplane.ControlPlane, client: client_.Client, namespace: str
) -> None:
    clock = j.Clock(datetime.datetime.now(datetime.UTC))
    cron = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCronJob",
        "metadata": {"name": "tick"},
        "spec": {
            "schedule": "*/1 * * * *",
            "timeZone": "Etc/UTC",
            "jobTemplate": {**j.rayjob_obj(managedBy="kueue.x-k8s.io/multikueue")["spec"]},
        },
    }

    async def rayjobs() -> list[str]:
        found = await client.list(v1.RAYJOBS, namespace, label_selector=j.CRONJOB_LABEL)
        return sorted(o["metadata"]["name"] for o in found.items)

    pokes = iter(range(1000))

    async def move_to(when: datetime.datetime) -> None:
        """The clock set, and the RayCronJob woken (its requeue is in real seconds)."""
        clock.now = when
        await client.patch(
            v1.RAYCRONJOBS, namespace, "tick",
            {"metadata": {"annotations": {"test/poke": str(next(pokes))}}},
        )  # fmt: skip

    async with j.manager_running(control_plane, namespace, cron_clock=clock):
        made = await client.create(cron, namespace=namespace)
        created = datetime.datetime.fromisoformat(made["metadata"]["creationTimestamp"])
        minute = int(created.timestamp()) // 60 + 1  # the first tick after creation
        tick = datetime.datetime.fromtimestamp(minute * 60, datetime.UTC)
        await asyncio.sleep(1.0)
        assert await rayjobs() == []  # not due yet

        await move_to(tick + datetime.timedelta(seconds=1))
        await helpers.eventually(rayjobs, 30, "the first tick's RayJob")
        assert await rayjobs() == [f"tick-{minute}"]
        first = await client.get(v1.RAYJOBS, namespace, f"tick-{minute}")
        assert first["metadata"]["labels"][j.CRONJOB_LABEL] == "tick"
        assert first["metadata"]["ownerReferences"][0]["kind"] == "RayCronJob"
        assert first["spec"]["entrypoint"] == "python pi.py"

        await move_to(tick + datetime.timedelta(seconds=61))

        async def two() -> bool:
            return await rayjobs() == [f"tick-{minute}", f"tick-{minute + 1}"]

        await helpers.eventually(two, 30, "the second tick's RayJob")
        stamp = (tick + datetime.timedelta(seconds=60)).strftime("%Y-%m-%dT%H:%M:%SZ")

        async def recorded() -> bool:
            obj = await client.get(v1.RAYCRONJOBS, namespace, "tick")
            return (obj.get("status") or {}).get("lastScheduleTime") == stamp

        await helpers.eventually(recorded, 30, "lastScheduleTime the second tick")

        # suspended: a tick passes, nothing is made
        await client.patch(v1.RAYCRONJOBS, namespace, "tick", {"spec": {"suspend": True}})
        await move_to(tick + datetime.timedelta(seconds=121))
        await asyncio.sleep(1.5)
        assert len(await rayjobs()) == 2

        # ten ticks later, resumed: one RayJob (the latest tick) and a MissedSchedules Warning
        clock.now = tick + datetime.timedelta(seconds=60 * 11 + 1)
        await client.patch(v1.RAYCRONJOBS, namespace, "tick", {"spec": {"suspend": False}})
        latest = f"tick-{minute + 11}"

        async def three() -> bool:
            return latest in await rayjobs()

        await helpers.eventually(three, 30, "the latest tick's RayJob")
        await asyncio.sleep(1.0)
        assert await rayjobs() == [f"tick-{minute}", f"tick-{minute + 1}", latest]

        async def missed() -> list[h.Obj]:
            return await j.events_of(client, namespace, "tick", "MissedSchedules")

        warned = await helpers.eventually(missed, 30, "a MissedSchedules Event")
        assert warned[0]["type"] == "Warning"
        assert len(warned) == 1
