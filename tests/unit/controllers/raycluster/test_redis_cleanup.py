"""GCS fault tolerance's Redis clean-up: the Job's shape (KubeRay v1.7.0's
``buildRedisCleanupJob``, field by field) and the finalizer's flow in the reconciler
(``rayClusterReconcile``'s deletion branch), on the faithful fake API server."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest

import api.v1 as v1
from controllers import main
from controllers.raycluster import pods, redis_cleanup
from controllers.raycluster import reconciler as reconciler_
from runtime import clock
from runtime.client import errors
from tests.unit.controllers.raycluster import scenario

PODS, EVENTS, Env = scenario.PODS, scenario.EVENTS, scenario.Env
JOBS = redis_cleanup.JOBS
FINALIZER = "ray.io/gcs-ft-redis-cleanup-finalizer"
OPTIONS = {"redisAddress": "redis.ns.svc:6379", "redisPassword": {"value": "s3cret"}}


def ft_cluster(name: str = "demo", **metadata: Any) -> dict[str, Any]:
    obj = scenario.raycluster(name, gcsFaultToleranceOptions=copy.deepcopy(OPTIONS))
    obj["metadata"].update(metadata)
    return obj


def model(obj: dict[str, Any]) -> v1.RayCluster:
    return v1.RayCluster.model_validate(obj)


def env_of(job: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}


# -- the Job ---------------------------------------------------------------------------------


def test_the_job_is_the_head_pod_minus_sidecars_running_the_cleanup() -> None:
    obj = ft_cluster(uid="u-1")
    obj["spec"]["headGroupSpec"]["template"]["spec"]["containers"].append(
        {"name": "sidecar", "image": "busybox"}
    )
    obj["spec"]["headGroupSpec"]["template"]["metadata"] = {"labels": {"team": "a"}}
    cluster = model(obj)
    head = pods.head_pod(cluster)
    job = redis_cleanup.job(cluster, owner=obj)

    # metadata: <cluster>-redis-cleanup; the pod's labels (node type redis-cleanup) and
    # annotations; controlled by the RayCluster
    meta = job["metadata"]
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    assert (meta["name"], meta["namespace"]) == ("demo-redis-cleanup", "ns")
    expected_labels = {**head["metadata"]["labels"], "ray.io/node-type": "redis-cleanup"}
    assert meta["labels"] == expected_labels
    assert meta["labels"]["app.kubernetes.io/created-by"] == "kuberay-operator"
    assert meta["labels"]["ray.io/cluster"] == "demo"
    assert meta["labels"]["team"] == "a"
    assert meta["annotations"] == head["metadata"]["annotations"]
    assert meta["annotations"]["ray.io/external-storage-namespace"] == "u-1"
    assert meta["annotations"]["ray.io/ft-enabled"] == "true"
    [ref] = meta["ownerReferences"]
    assert ref == {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "demo",
                   "uid": "u-1", "controller": True, "blockOwnerDeletion": True}  # fmt: skip

    # spec: best effort for five minutes, no retry, no TTL
    spec = job["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] == 300
    assert "ttlSecondsAfterFinished" not in spec
    assert set(spec) == {"backoffLimit", "activeDeadlineSeconds", "template"}

    # the template: the head pod's metadata (with its owner) and spec, one container
    template = spec["template"]
    assert template["metadata"]["labels"] == expected_labels
    assert template["metadata"]["generateName"] == head["metadata"]["generateName"]
    assert template["metadata"]["ownerReferences"] == [ref]
    pod_spec = template["spec"]
    assert pod_spec["restartPolicy"] == "Never"
    [ray] = pod_spec["containers"]
    head_ray = head["spec"]["containers"][0]
    assert ray["name"] == head_ray["name"]
    assert ray["image"] == head_ray["image"]
    assert ray["command"] == ["/bin/bash", "-c", "--"]
    [script] = ray["args"]
    assert script == redis_cleanup.script(with_username=False)
    assert "livenessProbe" not in ray
    assert "readinessProbe" not in ray
    assert ray["resources"] == {"limits": {"cpu": "200m", "memory": "256Mi"},
                                "requests": {"cpu": "200m", "memory": "256Mi"}}  # fmt: skip
    assert ray["env"] == [
        *head_ray["env"],
        {"name": "RAY_redis_db_connect_retries", "value": "120"},
        {"name": "RAY_redis_db_connect_wait_milliseconds", "value": "500"},
    ]
    env = env_of(job)
    assert env["RAY_REDIS_ADDRESS"]["value"] == "redis.ns.svc:6379"
    assert env["REDIS_PASSWORD"]["value"] == "s3cret"
    assert env["RAY_external_storage_namespace"]["value"] == "u-1"
    # Everything else of the head pod's spec is kept (volumes, mounts, ports).
    rest = {k: v for k, v in head["spec"].items() if k not in ("containers", "restartPolicy")}
    assert {k: v for k, v in pod_spec.items() if k not in ("containers", "restartPolicy")} == rest
    assert ray["volumeMounts"] == head_ray["volumeMounts"]


def test_the_script_calls_rays_cleanup_with_the_first_address_password_and_namespace() -> None:
    script = redis_cleanup.script(with_username=False)
    assert script.startswith("echo ")
    assert ' && python -c "' in script
    python = script.split(' && python -c "', 1)[1].rstrip('"')
    for part in (
        "from ray._private.gcs_utils import cleanup_redis_storage",
        "os.getenv('RAY_REDIS_ADDRESS', '').split(',')[0]",
        "'redis://' + address",
        "host=url.hostname, port=url.port",
        "password=os.getenv('REDIS_PASSWORD', url.password or '')",
        "use_ssl=url.scheme == 'rediss'",
        "storage_namespace=os.getenv('RAY_external_storage_namespace')",
        "sys.exit(1) if not cleanup_redis_storage(",
    ):
        assert part in python, part
    assert "username" not in python
    with_user = redis_cleanup.script(with_username=True)
    assert "username=os.getenv('REDIS_USERNAME', url.username)" in with_user
    compile(python, "<job>", "exec")  # the one-liner is valid Python


def test_a_username_in_the_options_puts_it_in_the_script() -> None:
    obj = ft_cluster()
    obj["spec"]["gcsFaultToleranceOptions"]["redisUsername"] = {"value": "ray"}
    job = redis_cleanup.job(model(obj))
    assert "username=" in job["spec"]["template"]["spec"]["containers"][0]["args"][0]


def test_the_autoscaler_sidecar_is_dropped_and_the_job_name_is_trimmed() -> None:
    name = "c" * 53
    obj = ft_cluster(name, uid="u")
    obj["spec"]["enableInTreeAutoscaling"] = True
    job = redis_cleanup.job(model(obj))
    assert len(job["spec"]["template"]["spec"]["containers"]) == 1
    assert job["metadata"]["name"] == (name + "-redis-cleanup")[-63:]


def test_finished_and_timeout_rules() -> None:
    def with_conditions(*conditions: tuple[str, str]) -> dict[str, Any]:
        return {"status": {"conditions": [{"type": t, "status": s} for t, s in conditions]}}

    assert redis_cleanup.finished({}) is None
    assert redis_cleanup.finished(with_conditions(("Complete", "True"))) == "Complete"
    assert redis_cleanup.finished(with_conditions(("Failed", "True"))) == "Failed"
    assert redis_cleanup.finished(with_conditions(("FailureTarget", "True"))) == "Failed"
    assert redis_cleanup.finished(with_conditions(("Complete", "False"))) is None
    assert redis_cleanup.finished(with_conditions(("Suspended", "True"))) is None
    for text, seconds in (("20", 20.0), ("0", 300.0), ("x", 300.0), ("1.5", 300.0), ("", 300.0)):
        obj = {"metadata": {"annotations": {redis_cleanup.DELETION_TIMEOUT_ANNOTATION: text}}}
        assert redis_cleanup.deletion_timeout(obj) == seconds, text
    assert redis_cleanup.deletion_timeout({"metadata": {}}) == 300.0


def test_when_the_finalizer_applies() -> None:
    assert redis_cleanup.applies(model(ft_cluster()))
    annotated = scenario.raycluster()
    annotated["metadata"]["annotations"] = {"ray.io/ft-enabled": "TRUE"}
    assert redis_cleanup.applies(model(annotated))
    assert not redis_cleanup.applies(model(scenario.raycluster()))
    rocks = scenario.raycluster(gcsFaultToleranceOptions={"backend": "rocksdb"})
    assert not redis_cleanup.applies(model(rocks))
    annotated["metadata"]["annotations"]["ray.io/external-storage-namespace"] = "n"
    assert redis_cleanup.storage_namespace(model(annotated)) == "n"
    opts = ft_cluster(uid="u")
    opts["spec"]["gcsFaultToleranceOptions"]["externalStorageNamespace"] = "o"
    assert redis_cleanup.storage_namespace(model(opts)) == "o"


# -- the finalizer's flow ------------------------------------------------------------------------


async def events_of(env: Env) -> list[tuple[str, str, str]]:
    await env.recorder.flush()
    return [(e["type"], e["reason"], e["note"])
            for e in (await env.client.list(EVENTS, "ns")).items]  # fmt: skip


async def jobs(env: Env) -> list[dict[str, Any]]:
    return (await env.client.list(JOBS, "ns")).items


async def set_job_condition(env: Env, kind: str) -> None:
    [job] = await jobs(env)
    job["status"] = {"conditions": [{"type": kind, "status": "True"}]}
    await env.client.update_status(job)
    await env.synced()


async def converge(env: Env, obj: dict[str, Any]) -> None:
    await env.client.create(obj)
    await env.synced()
    await env.reconcile()
    await env.run_all()
    await env.reconcile()


async def test_the_finalizer_is_written_before_any_pod_is_created(env: Env) -> None:
    await env.client.create(ft_cluster())
    await env.synced()
    await env.reconcile()
    cluster = await env.cluster()
    assert cluster["metadata"]["finalizers"] == [FINALIZER]
    writes = [(verb, res) for verb, res, sub in env.client.calls if verb in ("create", "update")]
    assert writes[0] == ("create", "rayclusters.ray.io"), "the test's"
    assert writes[1] == ("update", "rayclusters.ray.io"), writes[:3]
    assert len(await env.pods()) == 4


@pytest.mark.parametrize("flag", ["false", "FALSE"])
async def test_no_finalizer_when_the_cleanup_is_turned_off(env: Env, flag: str) -> None:
    off = main._raycluster_options(None, environ={"ENABLE_GCS_FT_REDIS_CLEANUP": flag})
    assert off.redis_cleanup is False
    on = main._raycluster_options(None, environ={"ENABLE_GCS_FT_REDIS_CLEANUP": "anything"})
    assert on.redis_cleanup is True
    env.reconciler.options = reconciler_.Options(redis_cleanup=False)
    await converge(env, ft_cluster())
    assert "finalizers" not in (await env.cluster())["metadata"]


async def test_no_finalizer_without_fault_tolerance(env: Env) -> None:
    await converge(env, scenario.raycluster())
    assert "finalizers" not in (await env.cluster())["metadata"]


async def test_deletion_waits_for_the_head_then_the_job_then_drops_the_finalizer(env: Env) -> None:
    await converge(env, ft_cluster())
    # The head pod takes time to go (a kubelet would wait for its grace period).
    [head] = [p for p in await env.pods() if pods.is_head(p)]
    head["metadata"]["finalizers"] = ["test/slow-kubelet"]
    await env.client.update(head)
    await env.client.delete(v1.RAYCLUSTERS, "ns", "demo")
    await env.synced()

    result = await env.reconcile()
    left = await env.pods()
    assert [p["metadata"]["name"] for p in left] == [head["metadata"]["name"]]
    assert left[0]["metadata"].get("deletionTimestamp"), "the head is being deleted"
    assert await jobs(env) == [], "no Job while the head's GCS may still write to Redis"
    assert result.requeue_after is None, "the head pod's deletion event brings it back"
    await env.reconcile()
    assert await jobs(env) == []

    head = await env.client.get(PODS, "ns", head["metadata"]["name"])
    head["metadata"]["finalizers"] = []
    await env.client.update(head)  # now it goes
    await env.synced()
    result = await env.reconcile()
    [job] = await jobs(env)
    assert job["metadata"]["name"] == "demo-redis-cleanup"
    cluster = await env.cluster()
    assert job["metadata"]["ownerReferences"][0]["uid"] == cluster["metadata"]["uid"]
    assert result.requeue_after is not None
    assert 0 < result.requeue_after <= 300
    assert cluster["metadata"]["finalizers"] == [FINALIZER]

    # Running: nothing changes; a pod of the Job is not counted as the cluster's
    await env.client.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "demo-redis-cleanup-abcde", "namespace": "ns",
        "labels": job["spec"]["template"]["metadata"]["labels"]},
        "spec": {"containers": [{"name": "c", "image": "i"}]}})  # fmt: skip
    await env.synced()
    await env.reconcile()
    assert len(await jobs(env)) == 1
    assert (await env.cluster())["metadata"]["finalizers"] == [FINALIZER]

    await set_job_condition(env, "Complete")
    await env.reconcile()
    assert [c["metadata"]["name"] for c in env.client.objects(v1.RAYCLUSTERS)] == []
    found = await events_of(env)
    assert (
        "Normal",
        "CreatedRedisCleanupJob",
        "Created Redis cleanup Job ns/demo-redis-cleanup",
    ) in found
    assert not [e for e in found if e[0] == "Warning"], found


@pytest.mark.parametrize("condition", ["Failed", "FailureTarget"])
async def test_a_failed_job_drops_the_finalizer_with_a_warning(env: Env, condition: str) -> None:
    await converge(env, ft_cluster())
    await env.client.delete(v1.RAYCLUSTERS, "ns", "demo")
    await env.synced()
    await env.reconcile()  # pods deleted (the fake deletes them at once)
    await env.reconcile()  # the Job
    await set_job_condition(env, condition)
    await env.reconcile()
    assert env.client.objects(v1.RAYCLUSTERS) == []
    reasons = [(t, r) for t, r, _ in await events_of(env)]
    assert ("Warning", "RedisCleanupFailed") in reasons


async def test_past_the_timeout_the_finalizer_is_forced_off_with_a_warning(env: Env) -> None:
    await converge(env, ft_cluster(annotations={redis_cleanup.DELETION_TIMEOUT_ANNOTATION: "20"}))
    await env.client.delete(v1.RAYCLUSTERS, "ns", "demo")
    await env.synced()
    deleted = clock.parse_rfc3339((await env.cluster())["metadata"]["deletionTimestamp"])
    assert deleted is not None
    at = {"now": deleted + datetime.timedelta(seconds=5)}
    env.reconciler.clock = lambda: at["now"]
    await env.reconcile()
    result = await env.reconcile()  # the Job, never finishing (Redis unreachable, say)
    assert len(await jobs(env)) == 1
    assert result.requeue_after == pytest.approx(15, abs=1)
    at["now"] = deleted + datetime.timedelta(seconds=19)
    assert (await env.reconcile()).requeue_after == pytest.approx(1, abs=1)
    assert env.client.objects(v1.RAYCLUSTERS) != []
    at["now"] = deleted + datetime.timedelta(seconds=20)
    await env.reconcile()
    assert env.client.objects(v1.RAYCLUSTERS) == []
    [warning] = [e for e in await events_of(env) if e[0] == "Warning"]
    assert warning[1] == "ForceDeletedStuckCluster"
    assert "within 20 s" in warning[2]
    assert "may need a manual clean-up" in warning[2]


async def test_a_cluster_kubernetes_deletes_without_our_finalizer_is_left_alone(env: Env) -> None:
    obj = scenario.raycluster()
    obj["metadata"]["finalizers"] = ["someone.else/finalizer"]
    await converge(env, obj)
    await env.client.delete(v1.RAYCLUSTERS, "ns", "demo")
    await env.synced()
    writes = env.client.writes()
    await env.reconcile()
    assert env.client.writes() == writes


async def test_a_cluster_kuberay_made_is_cleaned_up(env: Env) -> None:
    """KubeRay's finalizer, on a cluster made with the ft-enabled annotation and Redis
    settings in the head's env (the pre-options way)."""
    obj = scenario.raycluster()
    obj["metadata"]["annotations"] = {"ray.io/ft-enabled": "true"}
    obj["metadata"]["finalizers"] = [FINALIZER]
    head = obj["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["env"] = [{"name": "RAY_REDIS_ADDRESS", "value": "redis:6379"}]
    await converge(env, obj)
    await env.client.delete(v1.RAYCLUSTERS, "ns", "demo")
    await env.synced()
    await env.reconcile()
    await env.reconcile()
    [job] = await jobs(env)
    assert env_of(job)["RAY_REDIS_ADDRESS"]["value"] == "redis:6379"
    await set_job_condition(env, "Complete")
    await env.reconcile()
    assert env.client.objects(v1.RAYCLUSTERS) == []


async def test_with_the_cleanup_off_an_existing_finalizer_is_the_users(env: Env) -> None:
    await converge(env, ft_cluster())
    env.reconciler.options = reconciler_.Options(redis_cleanup=False)
    await env.client.delete(v1.RAYCLUSTERS, "ns", "demo")
    await env.synced()
    writes = env.client.writes()
    await env.reconcile()
    assert env.client.writes() == writes, "KubeRay leaves it to the user too"


@pytest.mark.parametrize(
    "change",
    ["no fault tolerance", "rocksdb"],
)
async def test_a_stale_finalizer_is_removed_at_once(env: Env, change: str) -> None:
    obj = scenario.raycluster(
        gcsFaultToleranceOptions={"backend": "rocksdb"} if change == "rocksdb" else None
    )
    if change != "rocksdb":
        del obj["spec"]["gcsFaultToleranceOptions"]
    obj["metadata"]["finalizers"] = [FINALIZER]
    await env.client.create(obj)
    await env.synced()
    await env.client.delete(v1.RAYCLUSTERS, "ns", "demo")
    await env.synced()
    await env.reconcile()
    assert env.client.objects(v1.RAYCLUSTERS) == []
    assert await jobs(env) == []
    warnings = [r for t, r, _ in await events_of(env) if t == "Warning"]
    assert warnings == ([] if change == "rocksdb" else ["ForceDeletedStuckCluster"])


async def test_a_refused_job_is_a_warning_and_an_error(env: Env) -> None:
    await converge(env, ft_cluster())
    await env.client.delete(v1.RAYCLUSTERS, "ns", "demo")
    await env.synced()
    await env.reconcile()

    create = env.client.create

    async def refuse(obj: dict[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        if obj.get("kind") == "Job":
            raise errors.Forbidden(403, "Forbidden", "jobs.batch is forbidden")
        return await create(obj, namespace=namespace)

    env.client.create = refuse  # type: ignore[method-assign]
    with pytest.raises(Exception, match="forbidden"):
        await env.reconcile()
    reasons = [(t, r) for t, r, _ in await events_of(env)]
    assert ("Warning", "FailedToCreateRedisCleanupJob") in reasons
    assert env.client.objects(v1.RAYCLUSTERS) != []
