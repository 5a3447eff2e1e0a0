"""controllers.ray.dashboard's Jobs API calls in kubernetes-proxy mode: through the head service's
proxy subresource with the manager's credentials; Ray's 404 for a job is told apart from the
API server's own 404 (a ``Status``: no such service)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from controllers.ray import dashboard
from tests.unit import helpers
from tests.unit.controllers.ray import test_dashboard_proxy as proxy

SERVICE = proxy.SERVICE


@pytest.fixture
async def proxied() -> AsyncIterator[tuple[proxy.ApiServer, dashboard.Dashboards]]:
    server = proxy.ApiServer()
    async with helpers.api_server(server.handle) as client:
        client.configuration.api_key["BearerToken"] = "Bearer manager-token"

        def unused() -> aiohttp.ClientSession:
            raise AssertionError("kubernetes-proxy mode must use the API client's session")

        owner = dashboard.Dashboards(api=client, session_factory=unused)
        try:
            yield server, owner
        finally:
            await owner.close()


async def test_submit_and_get_go_through_the_services_proxy(
    proxied: tuple[proxy.ApiServer, dashboard.Dashboards],
) -> None:
    server, owner = proxied
    server.answers += [
        web.json_response({"job_id": "j-1", "submission_id": "j-1"}),
        web.json_response({"status": "RUNNING", "submission_id": "j-1", "start_time": 5}),
    ]
    client = owner.client_for(proxy.address(), auth_token="ray-token")
    request = dashboard.JobSubmitRequest(entrypoint="python x.py", submission_id="j-1")
    assert await client.submit_job(request) == "j-1"
    info = await client.get_job("j-1")
    assert info is not None
    assert (info.status, info.start_time) == ("RUNNING", 5)
    submit, get = server.requests
    assert (submit["method"], submit["path_qs"]) == ("POST", SERVICE + "/api/jobs/")
    assert json.loads(submit["body"]) == {"entrypoint": "python x.py", "submission_id": "j-1"}
    assert (get["method"], get["path_qs"]) == ("GET", SERVICE + "/api/jobs/j-1")
    for sent in (submit, get):
        assert sent["headers"]["Authorization"] == "Bearer manager-token"
        assert sent["headers"]["x-ray-authorization"] == "Bearer ray-token"


async def test_rays_404_passes_through_but_the_api_servers_own_404_is_an_error(
    proxied: tuple[proxy.ApiServer, dashboard.Dashboards],
) -> None:
    server, owner = proxied
    missing = 'services "demo-head-svc" not found'
    server.answers += [
        web.Response(status=404, text="Job j-1 does not exist"),
        proxy.status(404, "NotFound", missing),
        web.Response(status=404, text="Job j-1 does not exist"),
        proxy.status(404, "NotFound", missing),
    ]
    client = owner.client_for(proxy.address())
    assert await client.get_job("j-1") is None
    with pytest.raises(dashboard.DashboardHTTPError) as caught:
        await client.get_job("j-1")
    assert type(caught.value) is dashboard.DashboardHTTPError
    assert (caught.value.status, caught.value.text) == (404, missing)
    with pytest.raises(dashboard.DashboardJobNotFound):
        await client.stop_job("j-1")
    with pytest.raises(dashboard.DashboardHTTPError) as stop:
        await client.stop_job("j-1")
    assert type(stop.value) is dashboard.DashboardHTTPError


async def test_a_taken_submission_id_through_the_proxy_is_job_exists(
    proxied: tuple[proxy.ApiServer, dashboard.Dashboards],
) -> None:
    server, owner = proxied
    server.answers += [
        web.Response(
            status=500,
            text="ValueError: Job with submission_id j-1 already exists. "
            "Please use a different submission_id.",
        ),
        proxy.status(503, "ServiceUnavailable", "no endpoints available for service"),
    ]
    client = owner.client_for(proxy.address())
    request = dashboard.JobSubmitRequest(entrypoint="x", submission_id="j-1")
    with pytest.raises(dashboard.DashboardJobExists):
        await client.submit_job(request)
    with pytest.raises(dashboard.DashboardUnreachable):
        await client.submit_job(request)
