"""controllers.ray.fake: the in-memory dashboard behaves as the protocol says, and as Serve."""

from __future__ import annotations

import pytest

from controllers.ray import dashboard, fake

Status = dashboard.ApplicationStatus
ADDRESS = dashboard.address(cluster="demo", namespace="ray")
TWO = {
    "applications": [
        {"name": "hello", "import_path": "m:hello", "route_prefix": "/hello"},
        {"name": "echo", "import_path": "m:echo", "route_prefix": "/echo"},
    ]
}


async def test_statuses_messages_and_deployments_are_settable() -> None:
    head = fake.FakeDashboard()
    assert (await head.get_serve_applications()).applications == {}
    head.set_application(
        "hello", Status.DEPLOY_FAILED, "boom", route_prefix="/h",
        deployments={"Hello": "UNHEALTHY", "Other": ("DEPLOY_FAILED", "trace")},
    )  # fmt: skip
    app = (await head.get_serve_applications()).applications["hello"]
    assert (app.status, app.message, app.route_prefix) == ("DEPLOY_FAILED", "boom", "/h")
    assert {n: (d.status, d.message) for n, d in app.deployments.items()} == {
        "Hello": ("UNHEALTHY", ""),
        "Other": ("DEPLOY_FAILED", "trace"),
    }
    head.set_application("hello", Status.RUNNING)  # keeps route prefix and deployments
    app = (await head.get_serve_applications()).applications["hello"]
    assert (app.status, app.message, app.route_prefix) == ("RUNNING", "", "/h")
    assert set(app.deployments) == {"Hello", "Other"}
    assert head.get_count == 3


async def test_puts_are_recorded_and_applied_like_serve() -> None:
    head = fake.FakeDashboard()
    head.set_application("old", Status.RUNNING)
    await head.put_serve_applications(TWO)
    TWO["applications"][0]["name"] = "mutated after the PUT"
    try:
        assert head.put_count == 1
        assert head.submitted[0]["applications"][0]["name"] == "hello"  # a copy was kept
    finally:
        TWO["applications"][0]["name"] = "hello"
    apps = (await head.get_serve_applications()).applications
    assert {n: (a.status, a.route_prefix) for n, a in apps.items()} == {
        "hello": (Status.DEPLOYING, "/hello"),
        "echo": (Status.DEPLOYING, "/echo"),
    }  # "old" was left out of the PUT: removed
    head.set_all(Status.RUNNING)
    await head.put_serve_applications({"applications": [TWO["applications"][1]]})
    assert list((await head.get_serve_applications()).applications) == ["echo"]
    assert head.put_count == 2
    assert head.last_config == {"applications": [TWO["applications"][1]]}


async def test_put_status_none_only_records() -> None:
    head = fake.FakeDashboard(put_status=None)
    head.set_application("kept", Status.UNHEALTHY)
    await head.put_serve_applications(TWO)
    assert head.put_count == 1
    assert list(head.applications) == ["kept"]


async def test_restart_forgets_the_applications() -> None:
    head = fake.FakeDashboard(put_status=Status.RUNNING)
    await head.put_serve_applications(TWO)
    head.restart()
    assert (await head.get_serve_applications()).applications == {}
    head.set_application("x")
    head.remove_application("x")
    assert head.applications == {}


@pytest.mark.parametrize(
    "error",
    [
        dashboard.DashboardUnreachable("connection refused"),
        dashboard.DashboardTimeout("timed out"),
        dashboard.DashboardHTTPError(400, "1 validation error"),
        dashboard.DashboardMalformed("not JSON", text="<html>"),
    ],
)
async def test_each_error_type_can_be_raised(error: dashboard.DashboardError) -> None:
    head = fake.FakeDashboard()
    head.fail("get", error)
    head.fail("put", error, times=1)
    for _ in range(2):
        with pytest.raises(type(error)) as caught:
            await head.get_serve_applications()
        assert caught.value is error
    with pytest.raises(type(error)):
        await head.put_serve_applications(TWO)
    assert head.put_count == 0  # a failed PUT is not recorded
    await head.put_serve_applications(TWO)  # times=1: the next one succeeds
    assert head.put_count == 1
    head.fail("get", None)
    assert set((await head.get_serve_applications()).applications) == {"hello", "echo"}
    assert head.get_count == 3


async def test_serve_proxy_health_is_settable_and_failures_are_false() -> None:
    head = fake.FakeDashboard()
    pod = dashboard.ServePod(namespace="ray", name="h", ip="198.18.1.2")
    assert await head.serve_proxy_healthy(pod) is True
    head.proxy_healthy = False
    assert await head.serve_proxy_healthy(pod) is False
    head.proxy_health["h"] = True
    assert await head.serve_proxy_healthy({"metadata": {"name": "h", "namespace": "ray"}})
    head.fail("health", dashboard.DashboardTimeout("slow"), times=2)
    assert await head.serve_proxy_healthy(pod) is False
    assert await head.serve_proxy_healthy(pod) is False
    assert await head.serve_proxy_healthy(pod) is True
    assert [p.name for p in head.health_checks] == ["h"] * 6
    assert head.health_checks[2] == dashboard.ServePod(namespace="ray", name="h", ip=None)


async def test_the_factory_gives_one_fake_per_cluster_whatever_the_address() -> None:
    fakes = fake.FakeDashboards(put_status=Status.RUNNING, proxy_healthy=False)
    seeded = fakes.for_cluster("ray", "demo")
    via_service = fakes.client_for(ADDRESS, auth_token="t")
    via_pod_ip = fakes.client_for(
        dashboard.address("pod-ip", cluster="demo", namespace="ray", head_pod_ip="198.18.1.3")
    )
    other = fakes.client_for(dashboard.address(cluster="demo", namespace="elsewhere"))
    assert via_service is seeded
    assert via_pod_ip is seeded
    assert other is not seeded
    await via_service.put_serve_applications(TWO)
    assert seeded.applications["hello"].status == Status.RUNNING
    assert seeded.proxy_healthy is False
    assert [(a.mode, token) for a, token in fakes.requested] == [
        ("service", "t"), ("pod-ip", None), ("service", None),
    ]  # fmt: skip
    await fakes.close()
    assert fakes.closed
    with pytest.raises(RuntimeError, match="closed"):
        fakes.client_for(ADDRESS)
