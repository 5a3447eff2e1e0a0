"""A RayService whose clusters take time to go (GCS fault tolerance: the RayCluster
controller holds each with ``ray.io/gcs-ft-redis-cleanup-finalizer`` until its Redis
clean-up Job is done): deletion and suspend wait for them without a hot loop or a second
delete, and finish once they are gone."""

from __future__ import annotations

import pytest

import api.v1 as v1
from runtime.client import errors
from tests.unit.controllers.rayservice import scenario

Env = scenario.Env
FINALIZER = "ray.io/gcs-ft-redis-cleanup-finalizer"


async def hold(env: Env, name: str) -> None:
    """What the RayCluster controller does first to a fault-tolerant cluster."""
    cluster = await env.client.get(v1.RAYCLUSTERS, "ns", name)
    cluster["metadata"]["finalizers"] = [FINALIZER]
    await env.client.update(cluster)
    await env.synced()


async def release(env: Env, name: str) -> None:
    """The clean-up Job is done: the RayCluster controller drops the finalizer."""
    cluster = await env.client.get(v1.RAYCLUSTERS, "ns", name)
    cluster["metadata"]["finalizers"] = []
    await env.client.update(cluster)
    await env.synced()


def deletes(env: Env) -> int:
    return sum(
        1 for verb, res, _ in env.client.calls if (verb, res) == ("delete", "rayclusters.ray.io")
    )


async def test_deletion_waits_for_a_cluster_being_cleaned_up(env: Env) -> None:
    name = await env.converge_first_cluster()
    await hold(env, name)
    await env.client.delete(v1.RAYSERVICES, "ns", "demo")
    await env.synced()
    await env.reconcile()
    assert deletes(env) == 1
    for _ in range(3):
        assert (await env.reconcile()).requeue_after is None, "its deletion event wakes us"
    assert deletes(env) == 1, "a cluster being deleted is not deleted again"
    assert (await env.service())["metadata"]["deletionTimestamp"]
    await release(env, name)
    await env.reconcile()
    with pytest.raises(errors.NotFound):
        await env.service()


async def test_suspend_stays_suspending_until_the_cluster_is_gone(env: Env) -> None:
    name = await env.converge_first_cluster()
    await hold(env, name)
    svc = await env.service()
    svc["spec"]["suspend"] = True
    await env.client.update(svc)
    await env.synced()
    await env.reconcile()  # committed
    await env.reconcile()  # the cluster deleted: Terminating, held
    await env.publish_endpoints(0)
    await env.reconcile()
    svc = await env.service()
    assert scenario.condition(svc, "Suspending")["status"] == "True"
    assert not [c for c in svc["status"]["conditions"] if c["type"] == "Suspended"]
    assert deletes(env) == 1
    await release(env, name)
    await env.reconcile()
    svc = await env.service()
    assert scenario.condition(svc, "Suspended")["status"] == "True"
    assert scenario.condition(svc, "Suspending")["status"] == "False"
