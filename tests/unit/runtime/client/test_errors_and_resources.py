from __future__ import annotations

import pytest

import runtime
from runtime.client import errors, resources


@pytest.mark.parametrize(
    ("status", "reason", "cls"),
    [
        (400, "BadRequest", errors.BadRequest),
        (401, "Unauthorized", errors.Unauthorized),
        (403, "Forbidden", errors.Forbidden),
        (404, "NotFound", errors.NotFound),
        (409, "AlreadyExists", errors.AlreadyExists),
        (409, "Conflict", errors.Conflict),
        (410, "Expired", errors.Gone),
        (422, "Invalid", errors.Invalid),
        (429, "TooManyRequests", errors.TooManyRequests),
        (500, "InternalError", errors.ServerError),
        (503, "ServiceUnavailable", errors.ServerError),
        (504, "Timeout", errors.ServerTimeout),
        (500, "Timeout", errors.ServerTimeout),
    ],
)
def test_status_maps_to_a_typed_error(status: int, reason: str, cls: type) -> None:
    err = errors.from_status(status, {"reason": reason, "message": "the server says so"})
    assert type(err) is cls
    assert err.status == status
    assert "the server says so" in str(err)


def test_retry_after_is_carried() -> None:
    err = errors.from_status(429, {}, retry_after=3)
    assert isinstance(err, errors.TooManyRequests)
    assert err.retry_after == 3


def test_resource_paths() -> None:
    nodes = resources.default_registry.for_kind("v1", "Node")
    assert nodes.path("ignored-for-cluster-scope", "n1") == "/api/v1/nodes/n1"
    crd = resources.Resource("ray.io", "v1", "RayCluster", "rayclusters")
    assert crd.path() == "/apis/ray.io/v1/rayclusters"
    assert crd.path("ns", "c", "status") == "/apis/ray.io/v1/namespaces/ns/rayclusters/c/status"
    assert str(crd) == "rayclusters.ray.io"
    with pytest.raises(ValueError, match="subresource needs"):
        crd.path("ns", None, "status")


def test_unknown_kind_says_how_to_fix_it() -> None:
    registry = resources.Registry()
    with pytest.raises(LookupError, match="register it"):
        registry.for_kind("ray.io/v1", "RayService")
    registry.register(resources.Resource("ray.io", "v1", "RayService", "rayservices"))
    assert registry.for_object({"apiVersion": "ray.io/v1", "kind": "RayService"}).plural == (
        "rayservices"
    )


def test_builtin_names_each_built_in_kind_by_its_kind_alone() -> None:
    for resource in resources._BUILTIN:
        if resource.kind == "Event" and resource.group:
            continue  # the one kind two groups serve: see below
        assert resources.builtin(resource.kind) is resource
        assert resources.builtin(resource.kind, group=resource.group) is resource
    core = resources.default_registry.for_kind("v1", "Event")
    assert resources.builtin("Event") is core, "kubectl's choice: the core group first"
    assert resources.builtin("Event", group="events.k8s.io").api_version == "events.k8s.io/v1"
    assert runtime.client.builtin is resources.builtin
    assert runtime.client.Resource is resources.Resource


def test_builtin_refuses_what_is_not_built_in_and_says_how_to_describe_it() -> None:
    with pytest.raises(LookupError, match=r"^Widget is no built-in kind \(ClusterRole, "):
        resources.builtin("Widget")
    with pytest.raises(LookupError, match="Deployment is no built-in kind in group ''"):
        resources.builtin("Deployment", group="")
    with pytest.raises(LookupError, match=r"runtime\.client\.Resource\(group, version"):
        resources.builtin("configmaps")  # a kind, not a plural
