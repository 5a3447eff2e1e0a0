"""What the executor does with an incremental upgrade's writes when the API server or Serve
says no: an Event with KubeRay's reason, and the error raised for the work queue's backoff
(a race with the cache, AlreadyExists, stays quiet); and the edges of reading a Gateway and
a route that other controllers fill in."""

from __future__ import annotations

from typing import Any

import pytest

from controllers.ray import dashboard
from controllers.ray import fake as fake_dashboards
from controllers.rayservice import act, gateway, plan, services
from runtime.client import errors

SERVICE = {"apiVersion": "ray.io/v1", "kind": "RayService",
           "metadata": {"name": "svc", "namespace": "ns", "uid": "u1"}, "spec": {}}  # fmt: skip


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def event(self, obj: Any, type_: str, reason: str, message: str, **kw: Any) -> None:
        self.events.append((type_, reason, message))


class Client:
    """Answers every create and update with ``error`` (or echoes the object)."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.calls: list[tuple[str, str]] = []

    async def create(self, obj: dict[str, Any], **kw: Any) -> dict[str, Any]:
        self.calls.append(("create", obj["metadata"]["name"]))
        if self.error is not None:
            raise self.error
        return obj

    async def update(self, obj: dict[str, Any], **kw: Any) -> dict[str, Any]:
        self.calls.append(("update", obj["metadata"]["name"]))
        if self.error is not None:
            raise self.error
        return obj


def executor(client: Client) -> tuple[act.Executor, Recorder]:
    recorder = Recorder()
    return act.Executor(client, recorder, writer=None), recorder  # type: ignore[arg-type]


ROUTE = gateway.route(SERVICE, [gateway.Backend("svc-a1b2c", 8000, 100)], migrated_at="t")


@pytest.mark.parametrize(
    ("current", "error", "reason"),
    [
        (None, errors.Forbidden(403, "Forbidden", "no RBAC"), "FailedToCreateHTTPRoute"),
        (ROUTE, errors.Conflict(409, "Conflict", "stale"), "FailedToUpdateHTTPRoute"),
    ],
)
async def test_a_refused_gateway_write_is_a_warning_and_raises(
    current: Any, error: errors.ApiError, reason: str
) -> None:
    run, recorder = executor(Client(error))
    with pytest.raises(type(error)):
        await run.act(SERVICE, plan.Plan(gateway_points=(plan.Point(current, ROUTE),)), spent=0.0)
    ((type_, got, message),) = recorder.events
    assert (type_, got) == ("Warning", reason)
    assert "ns/svc-httproute" in message


async def test_a_create_that_raced_the_cache_is_quiet_and_a_good_one_is_reported() -> None:
    run, recorder = executor(Client(errors.AlreadyExists(409, "AlreadyExists", "exists")))
    desired = gateway.gateway(SERVICE, "traefik")
    svc = {"metadata": {"name": "svc-a1b2c-serve-svc", "namespace": "ns"}}
    await run.act(
        SERVICE,
        plan.Plan(gateway_points=(plan.Point(None, desired),), cluster_services=(svc,)),
        spent=0.0,
    )
    assert recorder.events == []
    run, recorder = executor(Client())
    await run.act(
        SERVICE,
        plan.Plan(gateway_points=(plan.Point(None, desired),), cluster_services=(svc,)),
        spent=0.0,
    )
    assert [r for _, r, _ in recorder.events] == ["CreatedService", "CreatedGateway"]


async def test_a_refused_target_capacity_is_a_warning_and_raises() -> None:
    head = fake_dashboards.FakeDashboard()
    head.fail("put", dashboard.DashboardHTTPError(400, "target_capacity: not allowed"))
    capacity = plan.Submit("svc-a1b2c", {"applications": [], "target_capacity": 50})
    reach = {"svc-a1b2c": head}
    run, recorder = executor(Client())
    with pytest.raises(act.ServeFailed):
        await run.act(
            SERVICE, plan.Plan(capacity=capacity, capacity_message="m"), spent=0.0,
            dashboards=reach,
        )  # fmt: skip
    assert [r for _, r, _ in recorder.events] == ["FailedToUpdateTargetCapacity"]
    head.fail("put", None)
    run, recorder = executor(Client())
    await run.act(
        SERVICE, plan.Plan(capacity=capacity, capacity_message="to 50"), spent=0.0,
        dashboards=reach,
    )  # fmt: skip
    assert recorder.events == [("Normal", "UpdatedServeTargetCapacity", "to 50")]
    assert head.target_capacity == 50


def test_route_readiness_is_read_from_the_parent_status_of_our_gateway_only() -> None:
    gw = gateway.gateway(SERVICE, "traefik")
    accepted = [{"type": "Accepted", "status": "True"}, {"type": "ResolvedRefs", "status": "True"}]
    other = {"parentRef": {"name": "another-gateway", "namespace": "ns"}, "conditions": accepted}
    foreign_ns = {"parentRef": {"name": "svc-gateway", "namespace": "elsewhere"},
                  "conditions": accepted}  # fmt: skip
    unresolved = {"parentRef": {"name": "svc-gateway"},
                  "conditions": [{"type": "Accepted", "status": "True"},
                                 {"type": "ResolvedRefs", "status": "False"}]}  # fmt: skip
    for parents in ([other], [foreign_ns], [unresolved], []):
        assert not gateway.route_ready({**ROUTE, "status": {"parents": parents}}, gw), parents
    ours = {"parentRef": {"name": "svc-gateway"}, "conditions": accepted}  # namespace: the route's
    assert gateway.route_ready({**ROUTE, "status": {"parents": [other, ours]}}, gw)
    assert not gateway.route_ready(None, gw)
    assert not gateway.route_ready(ROUTE, None)
    assert not gateway.gateway_ready(None)


def test_weights_ignore_backends_that_are_not_a_clusters_serve_service() -> None:
    route = {"spec": {"rules": [{"backendRefs": [
        {"name": "svc-a1b2c-serve-svc", "weight": 30},
        {"name": "svc-d3e4f-serve-svc"},  # no weight: the Gateway API's 1
        {"name": "someone-elses-backend", "weight": 70},
    ]}]}}  # fmt: skip
    assert gateway.weights(route) == {"svc-a1b2c": 30, "svc-d3e4f": 1}
    assert gateway.weights({"spec": {"rules": []}}) == {}
    assert gateway.weights(None) == {}
    assert gateway.migrated_at(None) is None
    assert gateway.migrated_at({"metadata": {}}) is None


def test_a_per_cluster_serve_service_needs_a_serve_port_and_keeps_the_service_type() -> None:
    def cluster(ports: list[dict[str, Any]]) -> dict[str, Any]:
        pod = {"spec": {"containers": [{"name": "ray-head", "ports": ports}]}}
        return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
                "metadata": {"name": "svc-a1b2c", "namespace": "ns", "uid": "c1"},
                "spec": {"headGroupSpec": {"template": pod}}}  # fmt: skip

    with pytest.raises(ValueError, match="none named 'serve'"):
        services.cluster_serve_service(SERVICE, cluster([{"name": "gcs", "containerPort": 6379}]))
    typed = {
        **SERVICE,
        "spec": {"rayClusterConfig": {"headGroupSpec": {"serviceType": "NodePort"}}},
    }
    made = services.cluster_serve_service(
        typed, cluster([{"name": "serve", "containerPort": 8000}])
    )
    assert made["spec"]["type"] == "NodePort"
    assert made["metadata"]["ownerReferences"][0]["kind"] == "RayCluster"
