"""The data plane never follows a redirect and never reads an answer whole.

A Ray head is whatever a RayService author runs: one that answers the config PUT
with a 307 must not get the body (nor, through the API server's proxy, the
manager's bearer token) re-sent wherever the redirect points; one that answers with
24 MiB must not make the manager hold 24 MiB. Stand-in heads and a stand-in API
server on 127.0.0.1.
"""

from __future__ import annotations

import json
import pathlib
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from aiohttp import web

from controllers.ray import dashboard
from runtime.client import client as client_
from tests.unit import helpers
from tests.unit.controllers.ray import headserver

FAST = dashboard.Timeouts(connect=0.5, total=5.0)
CONFIG = {"applications": [{"name": "a", "import_path": "m:a", "route_prefix": "/"}]}


@pytest.fixture
async def dashboards() -> AsyncIterator[dashboard.Dashboards]:
    async with dashboard.Dashboards(timeouts=FAST) as owner:
        yield owner


def at(port: int) -> dashboard.Address:
    return dashboard.address(
        "pod-ip", cluster="demo", namespace="ray", head_pod_ip="127.0.0.1", dashboard_port=port
    )


@pytest.mark.parametrize("code", [301, 302, 307, 308])
async def test_a_redirected_put_is_an_error_naming_the_location_and_nothing_is_resent(
    head: headserver.Head, dashboards: dashboard.Dashboards, code: int
) -> None:
    elsewhere = f"http://127.0.0.1:{head.port}/elsewhere/api/serve/applications/"
    head.answers.append(web.Response(status=code, headers={"Location": elsewhere}))
    head.answers.append(web.Response(status=200))  # what a followed redirect would get
    with pytest.raises(dashboard.DashboardRedirected) as caught:
        await dashboards.client_for(at(head.port)).put_serve_applications(CONFIG)
    assert caught.value.location == elsewhere
    assert elsewhere in str(caught.value)
    assert [r["path_qs"] for r in head.requests] == ["/api/serve/applications/"]


async def test_a_redirected_get_and_healthz_are_not_followed(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    moved = web.Response(status=302, headers={"Location": "/other"})
    head.answers += [moved, web.Response(status=302, headers={"Location": "/-/healthz2"})]
    client = dashboards.client_for(at(head.port))
    with pytest.raises(dashboard.DashboardRedirected):
        await client.get_serve_applications()
    pod = dashboard.ServePod(namespace="ray", name="h", ip="127.0.0.1", port=head.port)
    assert await client.serve_proxy_healthy(pod) is False
    assert len(head.requests) == 2


class ApiServer:
    """Stands in for kube-apiserver: the proxy answers with a redirect to the API
    server's own origin; every request is recorded with its Authorization header."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(
            {
                "method": request.method,
                "path": request.path,
                "authorization": request.headers.get("Authorization"),
                "body": await request.read(),
            }
        )
        if "/proxy/" in request.path:
            return web.Response(
                status=307, headers={"Location": "/api/v1/namespaces/kube-system/services/kube-dns"}
            )
        return web.json_response({"kind": "Service"})


async def test_through_the_api_server_a_redirect_keeps_the_token_where_it_was() -> None:
    server = ApiServer()
    async with helpers.api_server(server.handle) as api:
        api.configuration.api_key["BearerToken"] = "Bearer manager-token"
        async with dashboard.Dashboards(api=api, timeouts=FAST) as owner:
            client = owner.client_for(
                dashboard.address("kubernetes-proxy", cluster="demo", namespace="ray")
            )
            with pytest.raises(dashboard.DashboardRedirected) as caught:
                await client.put_serve_applications(CONFIG)
    assert "kube-dns" in caught.value.location
    assert [r["path"] for r in server.requests] == [
        "/api/v1/namespaces/ray/services/demo-head-svc:dashboard/proxy/api/serve/applications/"
    ]


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")  # pragma: no cover


def _huge_answer(mib: int) -> bytes:
    app = {"status": "RUNNING", "message": "", "deployments": {}}
    apps, size = {}, 0
    while size < mib * 1024 * 1024:
        key = f"app-{len(apps):07d}"
        apps[key] = app
        size += 70
    return json.dumps({"applications": apps}).encode()


@pytest.fixture
def big_head(tmp_path: pathlib.Path) -> Iterator[int]:
    """A head in a process of its own (so this process's RSS is the client's alone)
    answering the applications GET with 24 MiB of valid JSON."""
    body = _huge_answer(24)
    assert len(body) > 24 * 1024 * 1024
    where = tmp_path / "api" / "serve" / "applications"
    where.mkdir(parents=True)
    (where / "index.html").write_bytes(body)
    del body
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory",
         str(tmp_path), str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield port
    finally:
        server.kill()
        server.wait()


async def test_a_24_mib_answer_is_refused_at_the_cap_and_the_rss_stays(
    big_head: int, dashboards: dashboard.Dashboards
) -> None:
    client = dashboards.client_for(at(big_head))
    with pytest.raises(dashboard.DashboardMalformed):  # warm up: session, imports
        await client.get_serve_applications()
    before = _rss_mib()
    for _ in range(3):
        with pytest.raises(dashboard.DashboardMalformed, match="larger than 4194304 bytes"):
            await client.get_serve_applications()
    grown = _rss_mib() - before
    assert grown < 4, f"RSS grew {grown:.1f} MiB reading refused answers"


async def test_an_answer_without_a_length_is_refused_once_the_cap_is_read(
    head: headserver.Head,
) -> None:
    chunk = b" " * 65536
    sent: list[int] = []

    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(request)  # chunked: the length is never declared
        for _ in range(64):
            try:
                await response.write(chunk)
            except ConnectionError:
                break
            sent.append(len(chunk))
        return response

    head.answers.append(endless)
    async with dashboard.Dashboards(timeouts=FAST, max_body_bytes=256 * 1024) as owner:
        with pytest.raises(dashboard.DashboardMalformed, match="larger than 262144 bytes"):
            await owner.client_for(at(head.port)).get_serve_applications()


async def test_more_applications_than_a_head_can_run_are_refused_unparsed() -> None:
    apps = {f"a{i}": {"status": "RUNNING"} for i in range(dashboard.MAX_APPLICATIONS + 1)}
    with pytest.raises(dashboard.DashboardMalformed, match="1001 applications"):
        dashboard.parse_serve_details(json.dumps({"applications": apps}))
    del apps["a0"]
    assert len(dashboard.parse_serve_details(json.dumps({"applications": apps})).applications) == (
        dashboard.MAX_APPLICATIONS
    )


async def test_the_api_client_refuses_redirects_and_oversized_answers() -> None:
    from runtime.client import errors, resources

    cm = resources.default_registry.for_kind("v1", "ConfigMap")
    answers: list[web.StreamResponse] = [
        web.Response(status=302, headers={"Location": "http://127.0.0.1:1/x"}),
        web.Response(body=b"x" * 2048, content_type="application/json"),
    ]
    seen: list[str] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        seen.append(request.path)
        return answers.pop(0)

    async with helpers.api_server(handle) as api:
        with pytest.raises(errors.Redirected) as caught:
            await api.get(cm, "ns", "a")
        assert caught.value.location == "http://127.0.0.1:1/x"
        small = client_.Client(api.configuration, options=client_.Options(max_response_bytes=1024))
        try:
            with pytest.raises(errors.ResponseTooLarge):
                await small.get(cm, "ns", "b")
        finally:
            await small.close()
    assert seen == ["/api/v1/namespaces/ns/configmaps/a", "/api/v1/namespaces/ns/configmaps/b"]
