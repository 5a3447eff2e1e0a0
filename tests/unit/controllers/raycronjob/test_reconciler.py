"""The RayCronJob reconciler on the fake API server: a tick's RayJob created once (a
second pass over the same tick finds it made), lastScheduleTime recorded, the missed
ticks reported, and an invalid or suspended RayCronJob told once per spec, not on every
pass (KubeRay repeats the Event on every watch event)."""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator
from typing import Any

import pytest

import api.v1 as v1
from controllers.raycronjob import reconciler as reconciler_
from runtime import clock, reconcile
from tests.unit.controllers.rayjob import scenario

REQUEST = reconcile.Request("ns", "etl")


@pytest.fixture
async def env() -> AsyncIterator[scenario.Env]:
    environment = scenario.Env()
    await environment.cache.start()
    try:
        yield environment
    finally:
        await environment.cache.stop()


async def make(env: scenario.Env, **spec: Any) -> datetime.datetime:
    body = {"schedule": "*/5 * * * *", "timeZone": "UTC",
            "jobTemplate": scenario.rayjob()["spec"], **spec}  # fmt: skip
    meta = {"name": "etl", "namespace": "ns"}
    made = await env.client.create(
        {"apiVersion": "ray.io/v1", "kind": "RayCronJob", "metadata": meta, "spec": body}
    )
    await env.synced()
    created = clock.parse_rfc3339(made["metadata"]["creationTimestamp"])
    assert created is not None
    return created


async def names(env: scenario.Env) -> list[str]:
    return sorted(j["metadata"]["name"] for j in (await env.client.list(v1.RAYJOBS, "ns")).items)


async def test_each_tick_gets_one_rayjob_and_the_tick_is_recorded(env: scenario.Env) -> None:
    created = await make(env)
    now = [created + datetime.timedelta(minutes=6)]
    cron = reconciler_.Reconciler(env.client, env.cache, env.recorder, clock=lambda: now[0])
    result = await cron.reconcile(REQUEST)
    await env.synced()
    (first,) = await names(env)
    made = await env.client.get(v1.RAYJOBS, "ns", first)
    assert made["metadata"]["ownerReferences"][0]["kind"] == "RayCronJob"
    status = (await env.client.get(v1.RAYCRONJOBS, "ns", "etl"))["status"]
    assert (
        status["lastScheduleTime"]
        == made["metadata"]["annotations"]["ray.io/cronjob-scheduled-timestamp"]
    )
    assert result.requeue_after is not None
    assert 0 < result.requeue_after <= 300
    await cron.reconcile(REQUEST)  # the same tick again: nothing new
    await env.synced()
    assert await names(env) == [first]
    now[0] += datetime.timedelta(hours=1)
    await cron.reconcile(REQUEST)
    await env.synced()
    assert len(await names(env)) == 2, "an hour of missed ticks: only the latest"
    assert "MissedSchedules" in await env.events()


async def test_invalid_and_suspended_are_told_once_per_spec(env: scenario.Env) -> None:
    created = await make(env, schedule="61 * * * *")
    cron = reconciler_.Reconciler(
        env.client, env.cache, env.recorder,
        clock=lambda: created + datetime.timedelta(days=1),
    )  # fmt: skip
    for _ in range(3):
        assert await cron.reconcile(REQUEST) == reconcile.Result()
    assert (await env.events()).count("InvalidRayCronJobSpec") == 1
    obj = await env.client.get(v1.RAYCRONJOBS, "ns", "etl")
    obj["spec"]["schedule"] = "*/5 * * * *"
    obj["spec"]["suspend"] = True
    await env.client.update(obj)
    await env.synced()
    for _ in range(3):
        await cron.reconcile(REQUEST)
    assert (await env.events()).count("SuspendedRayCronJob") == 1
    assert await names(env) == []
