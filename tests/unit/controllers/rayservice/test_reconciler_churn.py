"""A RayService whose ``serveConfigV2`` keeps changing (issue 25, item 5, "Churn"): one
status write per change, reporting what Serve runs after the PUT; its own hash annotation
wakes no second pass; and a change that lands while a pass runs ends that pass quietly
(no stale status written, no error, no retry)."""

from __future__ import annotations

from typing import Any

from controllers.rayservice import clusters, setup
from runtime import reconcile
from runtime.cache.informer import Event
from tests.unit.controllers.rayservice import scenario

Env = scenario.Env


def apps(obj: dict[str, Any]) -> dict[str, str]:
    found = obj["status"]["activeServiceStatus"]["applicationStatuses"]
    return {name: app["status"] for name, app in found.items()}


async def change_config(env: Env, version: int) -> dict[str, Any]:
    svc = await env.service()
    svc["spec"]["serveConfigV2"] = scenario.SERVE_CONFIG.replace(
        "fruit:app", f"fruit_v{version}:app"
    )
    updated: dict[str, Any] = await env.client.update(svc)
    await env.synced()
    return updated


async def test_a_config_change_is_reported_once_with_what_serve_runs_after_the_put(
    env: Env,
) -> None:
    name = await env.converge_first_cluster()
    for version in (1, 2, 3):
        changed = await change_config(env, version)
        before = env.status_writes()
        await env.reconcile()  # the PUT, and the status
        assert env.fake(name).put_count == 1 + version
        svc = await env.service()
        assert env.status_writes() == before + 1
        assert svc["status"]["observedGeneration"] == changed["metadata"]["generation"]
        # Serve's answer after the PUT: the changed application deploys, the other runs on.
        assert apps(svc) == {"fruit": "DEPLOYING", "math": "RUNNING"}
        await env.reconcile()  # the next poll sees the same: nothing to write
        assert env.status_writes() == before + 1
    env.fake(name).set_all("RUNNING")
    await env.reconcile()
    assert apps(await env.service()) == {"fruit": "RUNNING", "math": "RUNNING"}
    assert env.fake(name).put_count == 4


async def test_a_first_config_is_not_read_back_after_its_put(env: Env) -> None:
    """On a new cluster Serve ran nothing before the PUT: there is nothing to correct,
    so no second read of Serve in that pass and no status write for it; the next poll
    reports the applications (start-up and upgrade write no more than before)."""
    await env.client.create(scenario.rayservice())
    await env.synced()
    await env.reconcile()
    (name,) = await env.live_clusters()
    await env.start_head(name)
    gets, before = env.fake(name).get_count, env.status_writes()
    await env.reconcile()  # the PUT
    assert env.fake(name).put_count == 1
    assert env.fake(name).get_count == gets + 1, "the read before the PUT, none after"
    assert env.status_writes() == before, "nothing new to report yet"
    await env.reconcile()  # the 2 s poll: DEPLOYING
    assert env.status_writes() == before + 1
    pending = (await env.service())["status"]["pendingServiceStatus"]["applicationStatuses"]
    assert {app["status"] for app in pending.values()} == {"DEPLOYING"}


async def test_the_hash_annotation_alone_does_not_wake_the_rayservice() -> None:
    old = {"metadata": {"name": "c", "resourceVersion": "1", "annotations": {}}, "spec": {}}
    new = {**old, "metadata": {**old["metadata"], "resourceVersion": "2",
                               "annotations": {clusters.SERVE_CONFIG_ANNOTATION: "h"}}}  # fmt: skip
    assert not setup.not_only_serve_config_hash(Event("update", new, old))
    relabelled = {**new, "metadata": {**new["metadata"], "labels": {"x": "y"}}}
    assert setup.not_only_serve_config_hash(Event("update", relabelled, old))
    assert setup.not_only_serve_config_hash(Event("add", new))


async def test_a_change_landing_during_the_pass_ends_it_quietly(env: Env) -> None:
    name = await env.converge_first_cluster()
    await change_config(env, 1)
    fake = env.fake(name)
    put = fake.put_serve_applications
    changes: list[dict[str, Any]] = []

    async def put_then_the_user_edits_again(config: Any) -> None:
        await put(config)
        changes.append(await change_config(env, 2))  # the cache sees it before the write

    fake.put_serve_applications = put_then_the_user_edits_again  # type: ignore[method-assign]
    before = env.status_writes()
    result = await env.reconcile()  # no error: the edit's own event brings the next pass
    assert result == reconcile.Result()
    assert env.status_writes() == before, "a status computed for the old spec is not written"
    fake.put_serve_applications = put  # type: ignore[method-assign]
    await env.reconcile()
    svc = await env.service()
    assert svc["status"]["observedGeneration"] == changes[0]["metadata"]["generation"]
    assert env.status_writes() == before + 1
    assert fake.put_count == 3
    assert "fruit_v2:app" in str(fake.last_config)
