"""End to end, GCS fault tolerance with a real Redis and real Ray 2.60: the manager binary,
KubeRay v1.7.0's Redis clean-up finalizer and Job, and the keys in Redis.

Redis is a real ``redis-server`` (:mod:`tests.support.redisserver`, ``make redis``),
started inside the suite's pod network at a pod-network IP; the Ray pods (and the clean-up
Job's pod) are run for real by :class:`tests.e2e.test_realray.Kubelet`, which also reports a
Job pod's exit as its ``phase`` (as a kubelet does) so kube-controller-manager's Job
controller finishes the Job.

1. :func:`test_an_upgrade_deletes_the_old_clusters_keys_from_redis`: a RayService with
   ``gcsFaultToleranceOptions`` serves from a real head whose GCS writes to Redis under
   the cluster's uid; an upgrade makes a second cluster (its own storage namespace); the
   old one is deleted, its finalizer holds it while its ``<cluster>-redis-cleanup`` Job
   runs ``cleanup_redis_storage`` for real, and afterwards Redis holds the new cluster's
   keys and none of the old one's.
2. :func:`test_a_cleanup_that_cannot_reach_redis_is_forced_off_after_the_timeout`: a
   RayCluster whose Redis address has no listener and ``ray.io/gcs-ft-deletion-timeout:
   "20"``: its clean-up Job's pod keeps retrying (120 tries, 500 ms apart), and the
   cluster goes 20 s after its deletion with a Warning ``ForceDeletedStuckCluster``.
3. :func:`test_the_cleanup_job_is_the_one_kuberay_makes_and_we_finish_its_deletion`:
   KubeRay's own Job for a cluster, next to ours, field by field; then ours finishes the
   deletion KubeRay started.
4. :func:`test_serve_answers_through_a_worker_while_the_head_comes_back`: the head pod of
   a fault-tolerant RayService (a head with no CPUs for replicas, one worker holding the
   replica and a Serve proxy) is deleted while requests flow to the worker's proxy: none
   fails while the head is away; the operator makes a new head, whose GCS recovers the
   cluster's state from Redis, and the RayService is Ready again on the same cluster.

Ray comes from ``make ray`` (hack/realray/install.sh), Redis from ``make redis``
(hack/redis/install.sh); without them these tests fail saying so, never skip.
"""

from __future__ import annotations

import asyncio
import copy
import re
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

import api.v1 as v1
from controllers.raycluster import redis_cleanup
from runtime.client import client as client_
from runtime.client import errors, resources
from tests.e2e import harness, rayservices
from tests.e2e import test_kuberay_handover as handover
from tests.e2e import test_realray as realray_e2e
from tests.support import realray
from tests.support import redisserver as redis_

# Every scenario here starts what only the suite's own cluster has (see own_cluster).
pytestmark = pytest.mark.own_cluster

Obj = dict[str, Any]
JOBS = resources.default_registry.for_kind("batch/v1", "Job")
EVENTS = resources.default_registry.for_kind("v1", "Event")
FINALIZER = "ray.io/gcs-ft-redis-cleanup-finalizer"
NAME = realray_e2e.NAME
CLEANUP_PODS = "ray.io/node-type=redis-cleanup"

real_ray = realray_e2e.real_ray
Kubelet = realray_e2e.Kubelet


@pytest.fixture
def redis(world: harness.World) -> Iterator[redis_.Redis]:
    if world.cp is None:
        pytest.fail("not marked own_cluster, but it runs Redis in the suite's own pod network")
    try:
        with redis_.running(world.cp) as server:
            yield server
    except redis_.RedisError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
async def kubelet(
    api: client_.Client, real_ray: realray.Harness, namespace: str
) -> AsyncIterator[realray_e2e.Kubelet]:
    async with Kubelet(api, real_ray, namespace) as k:
        yield k


def ft_rayservice(namespace: str, redis_address: str) -> Obj:
    obj = realray_e2e.rayservice(namespace)
    obj["spec"]["rayClusterConfig"]["gcsFaultToleranceOptions"] = {"redisAddress": redis_address}
    return obj


async def cluster_uid(api: client_.Client, namespace: str, name: str) -> str:
    return str((await api.get(v1.RAYCLUSTERS, namespace, name))["metadata"]["uid"])


async def warnings(api: client_.Client, namespace: str, name: str) -> list[tuple[str, str]]:
    listed = await api.list(EVENTS, namespace)
    return [
        (e["reason"], e["message"])
        for e in listed.items
        if e.get("type") == "Warning" and e["involvedObject"].get("name") == name
    ]


async def until_keys(redis: redis_.Redis, storage_namespace: str, within: float) -> int:
    async def written() -> int | None:
        count = (await asyncio.to_thread(redis.count_by_namespace)).get(storage_namespace, 0)
        return count or None

    found: int = await harness.until(written, within, f"GCS keys under {storage_namespace}")
    return found


@pytest.mark.timeout(600)
async def test_an_upgrade_deletes_the_old_clusters_keys_from_redis(
    world: harness.World,
    api: client_.Client,
    namespace: str,
    managers: harness.Managers,
    kubelet: realray_e2e.Kubelet,
    redis: redis_.Redis,
) -> None:
    with kubelet.on_failure():
        await managers.start("pod-ip").wait_leading()
        await api.create(ft_rayservice(namespace, redis.address))
        obj = await rayservices.wait_ready(api, namespace, NAME, within=240)
        old = rayservices.active_cluster(obj)
        assert old is not None
        old_cluster = await api.get(v1.RAYCLUSTERS, namespace, old)
        assert old_cluster["metadata"]["finalizers"] == [FINALIZER]
        old_ns = str(old_cluster["metadata"]["uid"])
        head = await realray_e2e.head_pod(api, namespace, old)
        assert head["metadata"]["annotations"]["ray.io/external-storage-namespace"] == old_ns
        await realray_e2e.check_real(world, kubelet.by_name(head["metadata"]["name"]))
        await until_keys(redis, old_ns, 60)

        await rayservices.update_spec(api, namespace, NAME, realray_e2e.new_revision)
        obj = await rayservices.wait_ready(api, namespace, NAME, within=240, cluster_not=old)
        new = rayservices.active_cluster(obj)
        assert new is not None
        new_ns = await cluster_uid(api, namespace, new)
        await until_keys(redis, new_ns, 60)
        before = await asyncio.to_thread(redis.count_by_namespace)

        seen_jobs: dict[str, Obj] = {}
        cleanup_log: dict[str, str] = {}

        async def old_gone() -> bool:
            for job in (await api.list(JOBS, namespace)).items:
                seen_jobs[job["metadata"]["name"]] = job
            for real in kubelet.pods.values():  # its log goes with the pod: read it while there
                if real.pod["metadata"]["labels"].get("ray.io/node-type") == "redis-cleanup":
                    cleanup_log[real.name] = real.log_tail(80) or cleanup_log.get(real.name, "")
            return await rayservices.cluster_names(api, namespace) == {new}

        await harness.until(old_gone, realray_e2e.DELETION_DELAY + 180, "the old cluster gone")
        after = await asyncio.to_thread(redis.count_by_namespace)
        print(f"Redis keys by storage namespace: before {before}, after {after} "
              f"(old {old_ns}, new {new_ns})")  # fmt: skip

        assert f"{old}-redis-cleanup" in seen_jobs, sorted(seen_jobs)
        [cleanup] = [
            p for p in kubelet.pods.values()
            if p.pod["metadata"]["labels"].get("ray.io/node-type") == "redis-cleanup"
        ]  # fmt: skip
        assert cleanup.pod["metadata"]["labels"]["ray.io/cluster"] == old
        assert cleanup.exit_code == 0, cleanup_log
        print(f"the clean-up Job's pod:\n{cleanup_log.get(cleanup.name)}")
        assert f"cleaning up external storage namespace {old_ns}" in cleanup_log[cleanup.name]
        assert before.get(old_ns, 0) > 0
        assert old_ns not in after, after
        assert after.get(new_ns) == before[new_ns], (before, after)
        assert await warnings(api, namespace, old) == []

        await api.delete(harness.RAYSERVICES, namespace, NAME)

        async def all_gone() -> bool:
            return not (await api.list(harness.RAYSERVICES, namespace)).items and not (
                await rayservices.cluster_names(api, namespace)
            )

        await harness.until(all_gone, 180, "the RayService and its cluster deleted")
        final = await asyncio.to_thread(redis.count_by_namespace)
        print(f"after the RayService's deletion: {final}")
        assert new_ns not in final, final
        assert not kubelet.errors, kubelet.errors


@pytest.mark.timeout(300)
async def test_a_cleanup_that_cannot_reach_redis_is_forced_off_after_the_timeout(
    world: harness.World,
    api: client_.Client,
    namespace: str,
    managers: harness.Managers,
    real_ray: realray.Harness,
    redis: redis_.Redis,
) -> None:
    nowhere = f"{redis.ip}:{redis.port + 1}"  # nothing listens there: refused, retried
    template = realray_e2e.rayservice(namespace)["spec"]["rayClusterConfig"]["headGroupSpec"]
    cluster: Obj = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": "stuck",
            "namespace": namespace,
            "annotations": {"ray.io/gcs-ft-deletion-timeout": "20"},
        },
        "spec": {"rayVersion": "2.60.0", "headGroupSpec": copy.deepcopy(template)},
    }
    cluster["spec"]["gcsFaultToleranceOptions"] = {"redisAddress": nowhere}
    # Only the clean-up Job's pod runs for real (a head could not start without Redis).
    async with Kubelet(api, real_ray, namespace, selector=CLEANUP_PODS) as kubelet:
        with kubelet.on_failure():
            await managers.start("pod-ip").wait_leading()
            await api.create(cluster)

            async def finalized() -> bool:
                obj = await api.get(v1.RAYCLUSTERS, namespace, "stuck")
                return obj["metadata"].get("finalizers") == [FINALIZER]

            await harness.until(finalized, 60, "the clean-up finalizer")
            await api.delete(v1.RAYCLUSTERS, namespace, "stuck", propagation_policy="Background")
            deleted_at = time.monotonic()

            async def running() -> realray.RealPod | None:
                found = [p for p in kubelet.pods.values() if p.alive()]
                return found[0] if found else None

            cleanup: realray.RealPod = await harness.until(
                running, 60, "the clean-up Job's pod running for real"
            )

            last_seen: dict[str, Any] = {}

            async def gone() -> bool:
                # What the Job's pod did while the cluster still existed (its log goes with
                # the pod, which the garbage collector removes with the Job and the cluster).
                alive, log = cleanup.alive(), cleanup.log_tail(200)
                try:
                    await api.get(v1.RAYCLUSTERS, namespace, "stuck")
                except errors.NotFound:
                    return True
                last_seen.update(alive=alive, log=log or last_seen.get("log", ""))
                return False

            await harness.until(gone, 90, "the RayCluster gone")
            took = time.monotonic() - deleted_at
            print(f"the finalizer went {took:.1f} s after the deletion; the Job's pod then: "
                  f"alive={last_seen.get('alive')}")  # fmt: skip
            assert took >= 19, took
            assert last_seen["alive"], "the clean-up was still retrying: the removal was forced"
            assert f"Attempting to connect to address {nowhere}" in last_seen["log"]
            await harness.until(
                lambda: _reasons(api, namespace, "stuck", ["ForceDeletedStuckCluster"]),
                30,
                "the Warning",
            )
            [(reason, message)] = await warnings(api, namespace, "stuck")
            assert reason == "ForceDeletedStuckCluster"
            assert "did not finish within 20 s" in message
            assert not kubelet.errors, kubelet.errors


# -- the head comes back ---------------------------------------------------------------------------


def ft_rayservice_with_worker(namespace: str, redis_address: str) -> Obj:
    """Replicas only on the worker (the head offers no CPUs), one worker."""
    obj = ft_rayservice(namespace, redis_address)
    config = obj["spec"]["rayClusterConfig"]
    config["headGroupSpec"]["rayStartParams"]["num-cpus"] = "0"
    head = config["headGroupSpec"]["template"]["spec"]["containers"][0]
    worker = copy.deepcopy(head)
    worker["name"] = "ray-worker"
    worker["ports"] = [{"name": "serve", "containerPort": 8000}]
    config["workerGroupSpecs"] = [{
        "groupName": "small", "replicas": 1, "minReplicas": 1, "maxReplicas": 1,
        "rayStartParams": {}, "template": {"spec": {"containers": [worker]}},
    }]  # fmt: skip
    return obj


@pytest.mark.timeout(600)
async def test_serve_answers_through_a_worker_while_the_head_comes_back(
    world: harness.World,
    api: client_.Client,
    namespace: str,
    managers: harness.Managers,
    kubelet: realray_e2e.Kubelet,
    redis: redis_.Redis,
) -> None:
    with kubelet.on_failure():
        await managers.start("pod-ip").wait_leading()
        await api.create(ft_rayservice_with_worker(namespace, redis.address))
        obj = await rayservices.wait_ready(api, namespace, NAME, within=300)
        cluster = rayservices.active_cluster(obj)
        assert cluster is not None
        storage = await cluster_uid(api, namespace, cluster)
        await until_keys(redis, storage, 60)
        selector = f"ray.io/cluster={cluster},ray.io/node-type=worker"
        [worker_pod] = (await api.list(harness.PODS, namespace, label_selector=selector)).items
        worker = kubelet.by_name(worker_pod["metadata"]["name"])
        old_head = await realray_e2e.head_pod(api, namespace, cluster)

        ok, streak, failures = 0, 0, []
        stop = asyncio.Event()

        async def send() -> None:
            nonlocal ok, streak
            timeout = aiohttp.ClientTimeout(total=5, connect=2)
            async with aiohttp.ClientSession(timeout=timeout, trust_env=False) as http:
                while not stop.is_set():
                    try:
                        async with http.get(f"http://{worker.ip}:8000/greet") as response:
                            body = await response.text()
                        if (response.status, body) == (200, realray_e2e.ANSWER):
                            ok, streak = ok + 1, streak + 1
                        else:
                            streak = 0
                            failures.append((time.monotonic(), response.status, body[:200]))
                    except (aiohttp.ClientError, TimeoutError) as exc:
                        streak = 0
                        failures.append((time.monotonic(), 0, repr(exc)))
                    await asyncio.sleep(0.1)

        worker.verify()
        sender = asyncio.create_task(send())
        try:

            async def flowing() -> bool:
                return streak >= 20

            # The worker's proxy may still be starting when the RayService turns Ready (the
            # head's proxy counts too): the claim is about what follows the deletion.
            await harness.until(flowing, 60, "20 answers in a row from the worker's proxy")
            warm_up = list(failures)
            failures.clear()
            await api.delete(harness.PODS, namespace, old_head["metadata"]["name"])

            async def new_head_ready() -> Obj | None:
                try:
                    pod = await realray_e2e.head_pod(api, namespace, cluster)
                except ValueError:
                    return None
                if pod["metadata"]["uid"] == old_head["metadata"]["uid"]:
                    return None
                ready = [c for c in (pod.get("status") or {}).get("conditions") or []
                         if c["type"] == "Ready" and c["status"] == "True"]  # fmt: skip
                real = [p for p in kubelet.pods.values() if p.name == pod["metadata"]["name"]]
                return pod if ready and real and real[-1].ready else None

            during, deleted_at = ok, time.monotonic()
            new_head = await harness.until(new_head_ready, 240, "a new head, Ready")
            answered_while_down, back_at = ok - during, time.monotonic()
            # Serve still answers after the head is back, with the GCS state from Redis.
            try:
                obj = await rayservices.wait_ready(api, namespace, NAME, within=180)
            except AssertionError:
                print(f"RayService: {(await rayservices.get(api, namespace, NAME))['status']}")
                raise
            ready_at = time.monotonic()
            streak = 0
            await harness.until(flowing, 60, "20 answers in a row after the head came back")
        finally:
            stop.set()
            await asyncio.gather(sender, return_exceptions=True)
        timeline = [(round(t - deleted_at, 1), code, what[:120]) for t, code, what in failures]
        print(f"{ok} answers through the worker, {answered_while_down} while the head was "
              f"replaced (new head Ready {back_at - deleted_at:.1f} s after the deletion, the "
              f"RayService Ready again after {ready_at - deleted_at:.1f} s); failures (s after "
              f"the deletion): {timeline}; before it, while the worker's proxy started: "
              f"{len(warm_up)}")  # fmt: skip
        assert rayservices.active_cluster(obj) == cluster, "no new cluster: the head came back"
        assert new_head["metadata"]["name"] != old_head["metadata"]["name"]
        assert answered_while_down >= 10
        down = [f for f in failures if deleted_at <= f[0] <= back_at]
        assert not down, f"failed while the head was away: {timeline}"
        # Measured (1 run in 5): one request timing out some 10 s after the new head turned
        # Ready, while its Serve controller recovered from Redis; reported, not failed on.
        assert len(failures) <= 1, timeline
        assert not kubelet.errors, kubelet.errors


# -- the Job is KubeRay's ----------------------------------------------------------------------

kuberay_binary = handover.kuberay_binary
kuberays = handover.kuberays

_KWARGS = re.compile(r"cleanup_redis_storage\(([^)]*)\)")


def _kwargs(script: str) -> set[str]:
    """The keyword arguments the clean-up script passes to ``cleanup_redis_storage``."""
    match = _KWARGS.search(script)
    assert match is not None, script
    return {part.split("=", 1)[0].strip() for part in match.group(1).split(", ") if "=" in part}


@pytest.mark.timeout(300)
async def test_the_cleanup_job_is_the_one_kuberay_makes_and_we_finish_its_deletion(
    world: harness.World,
    api: client_.Client,
    namespace: str,
    managers: harness.Managers,
    kuberays: handover.KubeRays,
    redis: redis_.Redis,
) -> None:
    """KubeRay (v1.5.0 by default, ``$KUBERAY_BIN`` for v1.7.0: the same
    ``buildRedisCleanupJob`` but for mTLS) starts deleting a fault-tolerant cluster and makes
    its clean-up Job; ours, built from the same RayCluster, has the same fields. Then ours
    takes over the deletion KubeRay started (its Job never ends here: kwok runs the pod) and
    forces the finalizer off after the cluster's timeout."""
    head = realray_e2e.rayservice(namespace)["spec"]["rayClusterConfig"]["headGroupSpec"]
    cluster: Obj = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "kr", "namespace": namespace,
                     "annotations": {"ray.io/gcs-ft-deletion-timeout": "120"}},
        "spec": {"rayVersion": "2.60.0", "headGroupSpec": copy.deepcopy(head),
                 "gcsFaultToleranceOptions": {"redisAddress": redis.address,
                                              "redisPassword": {"value": "pw"}}},
    }  # fmt: skip
    kuberay = kuberays.start()
    await api.create(cluster)

    async def finalized() -> Obj | None:
        obj = await api.get(v1.RAYCLUSTERS, namespace, "kr")
        return obj if obj["metadata"].get("finalizers") == [FINALIZER] else None

    created: Obj = await harness.until(finalized, 90, "KubeRay's clean-up finalizer")
    await api.delete(v1.RAYCLUSTERS, namespace, "kr", propagation_policy="Background")

    async def kuberays_job() -> Obj | None:
        try:
            return await api.get(JOBS, namespace, "kr-redis-cleanup")
        except errors.NotFound:
            return None

    theirs: Obj = await harness.until(kuberays_job, 90, "KubeRay's clean-up Job")
    kuberay.stop()
    ours = redis_cleanup.job(v1.RayCluster.model_validate(created), owner=created)

    def container(job: Obj) -> Obj:
        [one] = job["spec"]["template"]["spec"]["containers"]
        return one

    def env(job: Obj) -> dict[str, Any]:
        return {e["name"]: e.get("value") for e in container(job).get("env") or []}

    assert ours["metadata"]["name"] == theirs["metadata"]["name"]
    keys = (
        "ray.io/node-type", "ray.io/cluster", "ray.io/group", "ray.io/is-ray-node",
        "ray.io/identifier", "app.kubernetes.io/name", "app.kubernetes.io/created-by",
    )  # fmt: skip
    for where in (("metadata",), ("spec", "template", "metadata")):
        mine, kuberays_ = ours, theirs
        for step in where:
            mine, kuberays_ = mine[step], kuberays_[step]
        for key in keys:
            assert mine["labels"].get(key) == kuberays_["labels"].get(key), (where, key)
        for key in ("ray.io/ft-enabled", "ray.io/external-storage-namespace"):
            assert mine["annotations"].get(key) == kuberays_["annotations"].get(key), (where, key)
    ref_fields = ("apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion")
    [their_ref] = theirs["metadata"]["ownerReferences"]
    [our_ref] = ours["metadata"]["ownerReferences"]
    assert {k: our_ref[k] for k in ref_fields} == {k: their_ref[k] for k in ref_fields}
    for field in ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        assert ours["spec"].get(field) == theirs["spec"].get(field), field
    assert theirs["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert ours["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    for field in ("name", "image", "command", "resources", "livenessProbe", "readinessProbe"):
        assert container(ours).get(field) == container(theirs).get(field), field
    assert container(ours)["env"][-2:] == container(theirs)["env"][-2:]
    for name in ("RAY_REDIS_ADDRESS", "REDIS_PASSWORD", "RAY_external_storage_namespace"):
        assert env(ours)[name] == env(theirs)[name], name
    assert _kwargs(container(ours)["args"][0]) == _kwargs(container(theirs)["args"][0])

    # Ours finishes the deletion KubeRay started (its Job is found: KubeRay's labels).
    await managers.start("pod-ip").wait_leading()
    deleting = await api.get(v1.RAYCLUSTERS, namespace, "kr")
    deleting["metadata"]["annotations"]["ray.io/gcs-ft-deletion-timeout"] = "1"
    await api.update(deleting)

    async def gone() -> bool:
        try:
            await api.get(v1.RAYCLUSTERS, namespace, "kr")
        except errors.NotFound:
            return True
        return False

    await harness.until(gone, 60, "the RayCluster KubeRay started deleting, gone")
    await harness.until(
        lambda: _reasons(api, namespace, "kr", ["ForceDeletedStuckCluster"]), 30, "the Warning"
    )


async def _reasons(api: client_.Client, namespace: str, name: str, expected: list[str]) -> bool:
    """The Warning Events of ``name`` have exactly the ``expected`` reasons (the recorder
    writes them in the background)."""
    return [r for r, _ in await warnings(api, namespace, name)] == expected
