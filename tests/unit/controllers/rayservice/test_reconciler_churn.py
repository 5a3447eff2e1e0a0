"""A RayService whose ``serveConfigV2`` keeps changing (issue 25, item 5, "Churn"): one
status write per change, reporting what Serve runs after the PUT."""

from __future__ import annotations

from typing import Any

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
