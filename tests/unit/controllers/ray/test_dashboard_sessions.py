"""controllers.ray.dashboard.Dashboards: one session for every client, closed once."""

from __future__ import annotations

import aiohttp
import pytest

from controllers.ray import dashboard
from tests.unit.controllers.ray import headserver


class CountingFactory:
    def __init__(self) -> None:
        self.sessions: list[aiohttp.ClientSession] = []

    def __call__(self) -> aiohttp.ClientSession:
        session = aiohttp.ClientSession()
        self.sessions.append(session)
        return session


async def test_clients_of_many_clusters_share_one_session(head: headserver.Head) -> None:
    factory = CountingFactory()
    owner = dashboard.Dashboards(session_factory=factory)
    assert factory.sessions == []  # nothing is opened before the first request
    clients = [
        owner.client_for(
            dashboard.address(
                "pod-ip", cluster=f"c{i}", namespace="ray", head_pod_ip="127.0.0.1",
                dashboard_port=head.port,
            )
        )
        for i in range(3)
    ]  # fmt: skip
    for client in clients:
        head.answers.append(headserver.recorded_response("get-empty.json"))
        await client.get_serve_applications()
    head.answers.append(headserver.recorded_response("healthz.txt"))
    pod = dashboard.ServePod(namespace="ray", name="p", ip="127.0.0.1", port=head.port)
    assert await clients[0].serve_proxy_healthy(pod)
    assert len(head.requests) == 4
    assert len(factory.sessions) == 1
    (session,) = factory.sessions
    assert owner.session() is session

    await owner.close()
    assert session.closed
    await owner.close()  # a second close is harmless
    assert len(factory.sessions) == 1
    with pytest.raises(RuntimeError, match="closed"):
        owner.client_for(dashboard.address(cluster="c0", namespace="ray"))
    with pytest.raises(RuntimeError, match="closed"):
        owner.session()


async def test_a_client_of_a_closed_owner_does_not_reopen_a_session(
    head: headserver.Head,
) -> None:
    factory = CountingFactory()
    async with dashboard.Dashboards(session_factory=factory) as owner:
        client = owner.client_for(
            dashboard.address(
                "pod-ip", cluster="c", namespace="ray", head_pod_ip="127.0.0.1",
                dashboard_port=head.port,
            )
        )  # fmt: skip
    with pytest.raises(RuntimeError, match="closed"):
        await client.get_serve_applications()
    assert factory.sessions == []
    assert head.requests == []


async def test_the_default_session_ignores_proxy_environment_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a manager must reach heads directly, never through an HTTP(S)_PROXY it inherited
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    async with dashboard.Dashboards() as owner:
        assert owner.session().trust_env is False


def test_default_timeouts_are_two_seconds_each_and_ten_through_the_api_server() -> None:
    timeouts = dashboard.Timeouts()
    assert (timeouts.connect, timeouts.total) == (2.0, 2.0)
    bound = timeouts.client_timeout()
    assert (bound.total, bound.connect, bound.sock_connect) == (2.0, 2.0, 2.0)
    assert dashboard.Dashboards().timeouts == timeouts
    # KubeRay v1.7.0's RayHTTPClientProxyTimeoutSeconds: a real head's first Serve PUT
    # took 1.9-2.1 s through kube-apiserver's proxy (hack/bench/realray.py)
    proxied = timeouts.client_timeout(via_api_server=True)
    assert (proxied.total, proxied.connect, proxied.sock_connect) == (10.0, 2.0, 2.0)
