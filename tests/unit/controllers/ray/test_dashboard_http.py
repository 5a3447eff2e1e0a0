"""controllers.ray.dashboard over HTTP: requests as Ray expects them, every error typed.

Against a stand-in head on 127.0.0.1 (``head`` fixture) answering with Ray 2.60's
recorded answers; refused, reset, stalled and DNS-failing peers are all local.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from collections.abc import AsyncIterator, Callable, Iterator

import aiohttp
import pytest
from aiohttp import abc as aiohttp_abc
from aiohttp import web

from controllers.ray import dashboard
from tests.unit.controllers.ray import headserver

FAST = dashboard.Timeouts(connect=0.3, total=0.3)
CONFIG = {
    "applications": [
        {"name": "hello", "import_path": "dashapp:hello", "route_prefix": "/hello"},
        {"name": "echo", "import_path": "dashapp:echo", "route_prefix": "/echo"},
    ]
}


@pytest.fixture
async def dashboards() -> AsyncIterator[dashboard.Dashboards]:
    async with dashboard.Dashboards(timeouts=FAST) as owner:
        yield owner


def at(port: int) -> dashboard.Address:
    return dashboard.address(
        "pod-ip", cluster="demo", namespace="ray", head_pod_ip="127.0.0.1", dashboard_port=port
    )


def pod_at(port: int) -> dashboard.ServePod:
    return dashboard.ServePod(namespace="ray", name="demo-head-x", ip="127.0.0.1", port=port)


# -- requests as Ray expects them -----------------------------------------------------------


async def test_get_asks_for_declarative_applications_and_parses_the_answer(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    head.answers.append(headserver.recorded_response("get-two-running.json"))
    details = await dashboards.client_for(at(head.port)).get_serve_applications()
    assert sorted(details.applications) == ["echo", "hello"]
    assert details.applications["echo"].status == dashboard.ApplicationStatus.RUNNING
    assert [(r["method"], r["path_qs"]) for r in head.requests] == [
        ("GET", "/api/serve/applications/?api_type=declarative")
    ]


async def test_put_sends_the_config_as_json_and_accepts_the_empty_200(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    head.answers.append(web.Response(status=200))  # Ray 2.60: 200, empty body
    await dashboards.client_for(at(head.port)).put_serve_applications(CONFIG)
    (request,) = head.requests
    assert (request["method"], request["path_qs"]) == ("PUT", "/api/serve/applications/")
    assert request["headers"]["Content-Type"] == "application/json"
    assert json.loads(request["body"]) == CONFIG


async def test_the_auth_token_goes_to_the_dashboard_only(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    head.answers += [
        headserver.recorded_response("get-empty.json"),
        web.Response(status=200),
        headserver.recorded_response("healthz.txt"),
    ]
    client = dashboards.client_for(at(head.port), auth_token="s3cret")
    await client.get_serve_applications()
    await client.put_serve_applications(CONFIG)
    assert await client.serve_proxy_healthy(pod_at(head.port))
    sent = [r["headers"].get("x-ray-authorization") for r in head.requests]
    assert sent == ["Bearer s3cret", "Bearer s3cret", None]
    assert all("Authorization" not in r["headers"] for r in head.requests)


async def test_without_a_token_no_auth_header_is_sent(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    head.answers.append(headserver.recorded_response("get-empty.json"))
    await dashboards.client_for(at(head.port)).get_serve_applications()
    assert "x-ray-authorization" not in {k.lower() for k in head.requests[0]["headers"]}


# -- the Serve proxy's health ---------------------------------------------------------------


async def test_serve_proxy_health_is_true_on_200(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    head.answers.append(headserver.recorded_response("healthz.txt"))
    client = dashboards.client_for(at(1))  # the dashboard's port plays no part
    assert await client.serve_proxy_healthy(pod_at(head.port)) is True
    assert head.requests[0]["path_qs"] == "/-/healthz"


@pytest.mark.parametrize("status", [503, 500, 404, 204])
async def test_serve_proxy_health_is_false_on_any_other_status(
    head: headserver.Head, dashboards: dashboard.Dashboards, status: int
) -> None:
    head.answers.append(web.Response(status=status, text="This node is being drained."))
    assert await dashboards.client_for(at(1)).serve_proxy_healthy(pod_at(head.port)) is False
    assert len(head.requests) == 1


async def test_serve_proxy_health_takes_a_pod_object(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    head.answers.append(headserver.recorded_response("healthz.txt"))
    pod = {
        "metadata": {"name": "demo-head-x", "namespace": "ray"},
        "spec": {"containers": [{"ports": [{"name": "serve", "containerPort": head.port}]}]},
        "status": {"podIP": "127.0.0.1"},
    }
    assert await dashboards.client_for(at(1)).serve_proxy_healthy(pod) is True


async def test_serve_proxy_health_of_a_pod_without_ip_is_false_without_a_request(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    pod = dashboard.ServePod(namespace="ray", name="p", ip=None, port=head.port)
    assert await dashboards.client_for(at(head.port)).serve_proxy_healthy(pod) is False
    assert head.requests == []


async def test_serve_proxy_health_is_false_when_unreachable_or_slow(
    head: headserver.Head, dashboards: dashboard.Dashboards, refused_port: int
) -> None:
    client = dashboards.client_for(at(1))
    assert await client.serve_proxy_healthy(pod_at(refused_port)) is False
    head.answers.append(head.stall)
    assert await client.serve_proxy_healthy(pod_at(head.port)) is False


# -- errors ---------------------------------------------------------------------------------


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A port bound on 127.0.0.1 with no listener: a connect is refused at once."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


async def test_a_refused_connection_is_unreachable(
    dashboards: dashboard.Dashboards, refused_port: int
) -> None:
    client = dashboards.client_for(at(refused_port))
    with pytest.raises(dashboard.DashboardUnreachable) as caught:
        await client.get_serve_applications()
    assert caught.value.method == "GET"
    assert caught.value.url == f"http://127.0.0.1:{refused_port}/api/serve/applications/"
    assert str(caught.value).startswith(f"GET http://127.0.0.1:{refused_port}/")
    with pytest.raises(dashboard.DashboardUnreachable):
        await client.put_serve_applications(CONFIG)


async def _reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Read the request, then abort the connection with a TCP reset (SO_LINGER 0)."""
    await reader.readuntil(b"\r\n\r\n")
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Read the request, then close without answering."""
    await reader.readuntil(b"\r\n\r\n")
    writer.close()
    await writer.wait_closed()


@pytest.mark.parametrize("peer", [_reset, _hang_up])
async def test_a_reset_or_closed_connection_is_unreachable(
    dashboards: dashboard.Dashboards,
    peer: Callable[[asyncio.StreamReader, asyncio.StreamWriter], object],
) -> None:
    server = await asyncio.start_server(peer, "127.0.0.1", 0)  # type: ignore[arg-type]
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(dashboard.DashboardUnreachable):
            await dashboards.client_for(at(port)).get_serve_applications()
    finally:
        server.close()
        await server.wait_closed()


class _NoSuchName(aiohttp_abc.AbstractResolver):
    """A resolver that knows no name (no DNS query leaves the machine)."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[aiohttp_abc.ResolveResult]:
        self.asked.append(host)
        raise OSError(socket.EAI_NONAME, "Name or service not known")

    async def close(self) -> None:
        return None


async def test_a_name_that_does_not_resolve_is_unreachable() -> None:
    resolver = _NoSuchName()

    def session() -> aiohttp.ClientSession:
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(resolver=resolver))

    async with dashboard.Dashboards(timeouts=FAST, session_factory=session) as owner:
        client = owner.client_for(dashboard.address(cluster="demo", namespace="ray"))
        with pytest.raises(dashboard.DashboardUnreachable) as caught:
            await client.get_serve_applications()
    assert resolver.asked == ["demo-head-svc.ray.svc.cluster.local"]
    assert "demo-head-svc.ray.svc.cluster.local" in str(caught.value)


async def test_an_answer_that_never_comes_is_a_timeout(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    head.answers.append(head.stall)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(dashboard.DashboardTimeout) as caught:
        await dashboards.client_for(at(head.port)).get_serve_applications()
    waited = loop.time() - started
    assert FAST.total <= waited < FAST.total + 1.0, f"gave up after {waited:.2f} s"
    assert caught.value.method == "GET"


async def test_a_body_that_never_ends_is_a_timeout(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    head.answers.append(head.stall_body)
    with pytest.raises(dashboard.DashboardTimeout):
        await dashboards.client_for(at(head.port)).get_serve_applications()


async def test_a_connect_that_is_never_accepted_is_a_timeout() -> None:
    # A listener whose accept queue is full: the kernel drops further SYNs, so the
    # connect hangs; only the connect timeout ends it (total is far longer).
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):  # fill the accept queue (backlog 0 still admits one or two)
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        timeouts = dashboard.Timeouts(connect=0.3, total=10.0)
        async with dashboard.Dashboards(timeouts=timeouts) as owner:
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(dashboard.DashboardTimeout) as caught:
                await owner.client_for(at(port)).get_serve_applications()
            assert loop.time() - started < 3.0
            assert isinstance(caught.value.__cause__, aiohttp.ConnectionTimeoutError)
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


async def test_serves_plain_text_400_is_an_http_error_carrying_the_text(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    head.answers.append(headserver.recorded_response("put-no-import-path-400.txt"))
    with pytest.raises(dashboard.DashboardHTTPError) as caught:
        await dashboards.client_for(at(head.port)).put_serve_applications(
            {"applications": [{"name": "x", "route_prefix": "/x"}]}
        )
    error = caught.value
    assert error.status == 400
    assert error.text == headserver.recorded("put-no-import-path-400.txt").decode()
    assert "applications.0.import_path" in error.text
    assert "HTTP 400: 1 validation error for ServeDeploySchema" in str(error)
    assert error.method == "PUT"


@pytest.mark.parametrize("status", [404, 500, 503])
async def test_a_get_answered_with_an_error_status_is_an_http_error(
    head: headserver.Head, dashboards: dashboard.Dashboards, status: int
) -> None:
    head.answers.append(web.Response(status=status, text="no serve here"))
    with pytest.raises(dashboard.DashboardHTTPError) as caught:
        await dashboards.client_for(at(head.port)).get_serve_applications()
    assert (caught.value.status, caught.value.text) == (status, "no serve here")


async def test_a_long_error_body_is_kept_whole_but_quoted_short(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    head.answers.append(web.Response(status=400, text="x" * 5000))
    with pytest.raises(dashboard.DashboardHTTPError) as caught:
        await dashboards.client_for(at(head.port)).put_serve_applications(CONFIG)
    assert len(caught.value.text) == 5000
    assert len(str(caught.value)) < 1200


async def test_a_200_that_is_not_json_is_malformed(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    head.answers.append(web.Response(status=200, text="<html>login</html>"))
    with pytest.raises(dashboard.DashboardMalformed) as caught:
        await dashboards.client_for(at(head.port)).get_serve_applications()
    assert caught.value.text == "<html>login</html>"
    assert caught.value.url == f"http://127.0.0.1:{head.port}/api/serve/applications/"
    assert "not JSON" in str(caught.value)


async def test_a_200_of_the_wrong_shape_is_malformed(
    head: headserver.Head, dashboards: dashboard.Dashboards
) -> None:
    head.answers.append(web.json_response({"applications": ["hello"]}))
    with pytest.raises(dashboard.DashboardMalformed, match="applications"):
        await dashboards.client_for(at(head.port)).get_serve_applications()


def test_every_error_is_a_dashboard_error() -> None:
    for cls in (
        dashboard.DashboardUnreachable,
        dashboard.DashboardTimeout,
        dashboard.DashboardHTTPError,
        dashboard.DashboardMalformed,
    ):
        assert issubclass(cls, dashboard.DashboardError)
    assert not issubclass(dashboard.DashboardTimeout, dashboard.DashboardUnreachable)
