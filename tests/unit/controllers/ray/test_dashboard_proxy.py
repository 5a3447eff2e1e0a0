"""controllers.ray.dashboard in kubernetes-proxy mode: through the API server, with its credentials.

A local server stands in for the API server (``helpers.api_server``); it answers the
proxy subresources the way kube-apiserver does: the backend's answer passed through,
or its own ``Status`` (503 when it cannot reach the pod, 403 when RBAC says no).
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s

from controllers.ray import dashboard
from runtime.client import client as client_
from tests.unit import helpers
from tests.unit.controllers.ray import headserver

SERVICE = "/api/v1/namespaces/ray/services/demo-head-svc:dashboard/proxy"
POD = dashboard.ServePod(namespace="ray", name="demo-head-x7k2p", ip=None)
CONFIG = {"applications": [{"name": "a", "import_path": "m:a", "route_prefix": "/"}]}


class ApiServer:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answers: list[web.StreamResponse] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(
            {
                "method": request.method,
                "path_qs": request.path_qs,
                "headers": dict(request.headers),
                "body": await request.read(),
            }
        )
        return self.answers.pop(0)


def status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": reason, "message": message}  # fmt: skip
    return web.json_response(body, status=code)


@pytest.fixture
async def api() -> AsyncIterator[tuple[ApiServer, client_.Client]]:
    server = ApiServer()
    async with helpers.api_server(server.handle) as client:
        # the manager's credentials: what the API server must see on proxied requests
        client.configuration.api_key["BearerToken"] = "Bearer manager-token"
        yield server, client


def unused_session() -> aiohttp.ClientSession:
    raise AssertionError("kubernetes-proxy mode must use the API client's session")


@pytest.fixture
async def proxied(
    api: tuple[ApiServer, client_.Client],
) -> AsyncIterator[tuple[ApiServer, dashboard.Dashboards]]:
    server, client = api
    owner = dashboard.Dashboards(api=client, session_factory=unused_session)
    try:
        yield server, owner
    finally:
        await owner.close()


def address() -> dashboard.Address:
    return dashboard.address("kubernetes-proxy", cluster="demo", namespace="ray")


async def test_get_goes_through_the_services_proxy_with_the_managers_credentials(
    proxied: tuple[ApiServer, dashboard.Dashboards],
) -> None:
    server, owner = proxied
    server.answers.append(headserver.recorded_response("get-two-running.json"))
    details = await owner.client_for(address(), auth_token="ray-token").get_serve_applications()
    assert sorted(details.applications) == ["echo", "hello"]
    (request,) = server.requests
    assert request["method"] == "GET"
    assert request["path_qs"] == SERVICE + "/api/serve/applications/?api_type=declarative"
    assert request["headers"]["Authorization"] == "Bearer manager-token"
    assert request["headers"]["x-ray-authorization"] == "Bearer ray-token"


async def test_put_goes_through_the_services_proxy(
    proxied: tuple[ApiServer, dashboard.Dashboards],
) -> None:
    server, owner = proxied
    server.answers.append(web.Response(status=200))
    await owner.client_for(address()).put_serve_applications(CONFIG)
    (request,) = server.requests
    assert (request["method"], request["path_qs"]) == ("PUT", SERVICE + "/api/serve/applications/")
    assert request["headers"]["Content-Type"] == "application/json"
    assert request["headers"]["Authorization"] == "Bearer manager-token"
    assert json.loads(request["body"]) == CONFIG


async def test_serve_health_goes_through_the_pods_proxy_by_pod_name(
    proxied: tuple[ApiServer, dashboard.Dashboards],
) -> None:
    server, owner = proxied
    server.answers.append(headserver.recorded_response("healthz.txt"))
    assert await owner.client_for(address(), auth_token="t").serve_proxy_healthy(POD) is True
    (request,) = server.requests
    assert request["path_qs"] == "/api/v1/namespaces/ray/pods/demo-head-x7k2p:8000/proxy/-/healthz"
    assert request["headers"]["Authorization"] == "Bearer manager-token"
    assert "x-ray-authorization" not in request["headers"]


async def test_the_api_servers_503_for_an_unreachable_pod_is_unreachable(
    proxied: tuple[ApiServer, dashboard.Dashboards],
) -> None:
    server, owner = proxied
    refused = "error trying to reach service: dial tcp 198.18.1.7:8265: connect: connection refused"
    server.answers += [
        status(503, "ServiceUnavailable", refused),
        status(503, "ServiceUnavailable", 'no endpoints available for service "demo-head-svc"'),
        status(503, "ServiceUnavailable", refused),
    ]
    client = owner.client_for(address())
    with pytest.raises(dashboard.DashboardUnreachable) as caught:
        await client.get_serve_applications()
    assert "connection refused" in str(caught.value)
    assert caught.value.url.startswith("http://127.0.0.1:")  # the API server's address
    assert caught.value.url.endswith(SERVICE + "/api/serve/applications/")
    with pytest.raises(dashboard.DashboardUnreachable, match="no endpoints available"):
        await client.put_serve_applications(CONFIG)
    assert await client.serve_proxy_healthy(POD) is False
    assert len(server.requests) == 3  # no retries: the reconciler's requeue is the retry


async def test_the_api_servers_refusal_is_an_http_error_with_its_message(
    proxied: tuple[ApiServer, dashboard.Dashboards],
) -> None:
    server, owner = proxied
    forbidden = 'services "demo-head-svc:dashboard" is forbidden: cannot get services/proxy'
    server.answers.append(status(403, "Forbidden", forbidden))
    with pytest.raises(dashboard.DashboardHTTPError) as caught:
        await owner.client_for(address()).get_serve_applications()
    assert (caught.value.status, caught.value.text) == (403, forbidden)


async def test_serves_own_errors_pass_through_the_proxy(
    proxied: tuple[ApiServer, dashboard.Dashboards],
) -> None:
    server, owner = proxied
    server.answers += [
        headserver.recorded_response("put-no-import-path-400.txt"),
        web.Response(status=503, text="Serve is starting"),  # a backend 503: no Status body
        web.Response(status=200, text="not json"),
    ]
    client = owner.client_for(address())
    with pytest.raises(dashboard.DashboardHTTPError) as caught:
        await client.put_serve_applications({"applications": [{"name": "x"}]})
    assert caught.value.status == 400
    assert caught.value.text.startswith("1 validation error for ServeDeploySchema")
    with pytest.raises(dashboard.DashboardHTTPError) as unavailable:
        await client.get_serve_applications()
    assert (unavailable.value.status, unavailable.value.text) == (503, "Serve is starting")
    with pytest.raises(dashboard.DashboardMalformed):
        await client.get_serve_applications()


async def test_an_unreachable_api_server_is_unreachable() -> None:
    # a port nobody listens on (bound, not listening)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    api = client_.Client(k8s.Configuration(host=f"http://127.0.0.1:{port}"))
    try:
        async with dashboard.Dashboards(api=api) as owner:
            with pytest.raises(dashboard.DashboardUnreachable):
                await owner.client_for(address()).get_serve_applications()
    finally:
        await api.close()
        sock.close()


async def test_proxy_mode_needs_the_api_client() -> None:
    async with dashboard.Dashboards() as owner:
        with pytest.raises(ValueError, match="api="):
            owner.client_for(address())


async def test_closing_the_dashboards_leaves_the_api_client_open(
    api: tuple[ApiServer, client_.Client],
) -> None:
    server, client = api
    server.answers += [headserver.recorded_response("get-empty.json") for _ in range(2)]
    owner = dashboard.Dashboards(api=client, session_factory=unused_session)
    await owner.client_for(address()).get_serve_applications()
    await owner.close()
    # the manager's client still works: Dashboards did not close what it does not own
    assert await client.request("GET", "/api/serve/applications/") == {
        "controller_info": {}, "proxies": {}, "applications": {}, "target_capacity": None,
    }  # fmt: skip


class RecordingBucket:
    """Stands in for the client's token bucket: counts who waited for a token."""

    def __init__(self) -> None:
        self.calls = 0

    def when(self, item: object) -> float:
        self.calls += 1
        return 0.0


async def test_data_plane_calls_through_the_proxy_are_outside_the_qps_budget(
    proxied: tuple[ApiServer, dashboard.Dashboards], api: tuple[ApiServer, client_.Client]
) -> None:
    """Serve polls of hundreds of services must not delay the controller's own writes
    (at N=200 they took most of the client's 100 QPS); KubeRay's go through
    controller-runtime's HTTP client, outside client-go's rate limiter, too."""
    server, owner = proxied
    bucket = RecordingBucket()
    api[1]._bucket = lambda path: bucket  # type: ignore[assignment,method-assign,return-value]
    server.answers += [
        headserver.recorded_response("get-two-running.json"),
        web.Response(status=200),
        headserver.recorded_response("healthz.txt"),
    ]
    client = owner.client_for(address())
    await client.get_serve_applications()
    await client.put_serve_applications(CONFIG)
    assert await client.serve_proxy_healthy(POD) is True
    assert len(server.requests) == 3
    assert bucket.calls == 0
    await api[1].send("GET", "/api")  # the client's own raw requests still wait their turn
    assert bucket.calls == 1
