"""A RayService on a token-auth cluster sends the cluster's token with every dashboard
request, in every address mode, read without a request per poll.

KubeRay v1.7.0 (``utils/util.go`` ``GetRayDashboardClientFunc``) reads the Secret
``authOptions.secretName`` or ``<cluster>``, key ``auth_token``, and its client
(``dashboardclient/dashboard_httpclient.go``) sets ``x-ray-authorization: Bearer <token>``;
the header itself is pinned by ``tests/unit/controllers/ray/test_dashboard_http.py`` and
``test_dashboard_proxy.py``.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from controllers.ray import dashboard, tokens
from controllers.rayservice import reconciler as reconciler_
from runtime.client import resources
from tests.unit.controllers.rayservice import scenario
from tests.unit.controllers.rayservice import test_observe_dashboard_target as target

Env = scenario.Env
SECRETS = resources.default_registry.for_kind("v1", "Secret")


def auth_service(options: dict[str, Any]) -> dict[str, Any]:
    service = scenario.rayservice()
    service["spec"]["rayClusterConfig"]["authOptions"] = options
    return service


async def secret(env: Env, name: str, token: str, *, labelled: str | None = None) -> None:
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if labelled is not None:
        meta["labels"] = {"ray.io/cluster": labelled}
    data = {"auth_token": base64.b64encode(token.encode()).decode()}
    await env.client.create({"apiVersion": "v1", "kind": "Secret", "metadata": meta,
                             "data": data})  # fmt: skip
    await env.synced()


async def first_cluster(env: Env, options: dict[str, Any]) -> str:
    await env.client.create(auth_service(options))
    await env.synced()
    await env.reconcile()
    (name,) = await env.live_clusters()
    return name


def tokens_sent(env: Env, cluster: str) -> set[str | None]:
    return {token for address, token in env.dashboards.requested if address.cluster == cluster}


def secret_requests(env: Env) -> list[tuple[str, str, str]]:
    return [c for c in env.client.calls if c[1] == "secrets"]


@pytest.mark.parametrize("mode", dashboard.ADDRESS_MODES)
async def test_the_generated_token_goes_with_every_request_in_every_mode(
    env: Env, mode: dashboard.Mode
) -> None:
    env.reconciler.options = reconciler_.Options(address_mode=mode)
    name = await first_cluster(env, {"mode": "token"})
    await secret(env, name, "s3cret", labelled=name)  # what the RayCluster controller makes
    if mode != "pod-ip":
        await target.head_service(env, name)
    await env.start_head(name)
    before = len(env.client.calls)
    await env.reconcile()  # GET + PUT
    await env.reconcile()  # the poll
    assert env.fake(name).put_count == 1
    assert tokens_sent(env, name) == {"s3cret"}
    # one GET of the Secret by name, then remembered; Secrets are never listed or watched
    assert [c for c in env.client.calls[before:] if c[1] == "secrets"] == [("get", "secrets", "")]
    assert not [c for c in env.client.calls if c[1] == "secrets" and c[0] in ("list", "watch")]


async def test_without_token_auth_no_token_and_no_secret_read(env: Env) -> None:
    name = await first_cluster(env, {"mode": "disabled"})
    await env.start_head(name)
    await env.reconcile()
    assert env.fake(name).put_count == 1
    assert tokens_sent(env, name) == {None}
    assert secret_requests(env) == []


async def test_a_named_secret_is_read_once_and_again_after_ray_refused_it(env: Env) -> None:
    name = await first_cluster(env, {"mode": "token", "secretName": "mine"})
    await secret(env, "mine", "first")  # a user's Secret: no label, not in the cache
    await env.start_head(name)
    await env.reconcile()
    await env.reconcile()
    gets = [c for c in secret_requests(env) if c[0] == "get"]
    assert gets == [("get", "secrets", "")], "one GET, then remembered"
    assert tokens_sent(env, name) == {"first"}

    current = await env.client.get(SECRETS, "ns", "mine")
    current["data"] = {"auth_token": base64.b64encode(b"second").decode()}
    await env.client.update(current)  # rotated; the pods restarted with it
    before = len(env.client.calls)
    refused = dashboard.DashboardHTTPError(403, "Forbidden: Invalid authentication token")
    env.fake(name).fail("get", refused, times=1)
    with pytest.raises(Exception, match="403"):
        await env.reconciler.reconcile(scenario.REQUEST)
    await env.reconcile()
    again = [c for c in env.client.calls[before:] if c[:2] == ("get", "secrets")]
    assert len(again) == 1, "read again once, after the refusal"
    assert env.dashboards.requested[-1][1] == "second"


async def test_a_missing_secret_sends_nothing_and_says_why(env: Env) -> None:
    name = await first_cluster(env, {"mode": "token"})
    await env.start_head(name)
    with pytest.raises(Exception, match=f"auth token Secret ns/{name} does not exist"):
        await env.reconciler.reconcile(scenario.REQUEST)
    assert (env.fake(name).get_count, env.fake(name).put_count) == (0, 0)
    assert tokens_sent(env, name) == set()


async def test_a_secret_without_the_key_sends_nothing(env: Env) -> None:
    name = await first_cluster(env, {"mode": "token"})
    await env.client.create({"apiVersion": "v1", "kind": "Secret", "metadata": {
        "name": name, "namespace": "ns", "labels": {"ray.io/cluster": name}},
        "data": {"token": "eA=="}})  # fmt: skip
    await env.synced()
    await env.start_head(name)
    with pytest.raises(Exception, match="has no 'auth_token' key"):
        await env.reconciler.reconcile(scenario.REQUEST)
    assert env.fake(name).put_count == 0


async def test_tokens_reads_nothing_for_a_cluster_without_token_auth(env: Env) -> None:
    reader = tokens.Tokens(env.client)
    cluster = {"metadata": {"name": "c", "namespace": "ns"},
               "spec": {"headGroupSpec": {"template": {}}}}  # fmt: skip
    assert await reader.token_for(cluster) is None
    assert secret_requests(env) == []
