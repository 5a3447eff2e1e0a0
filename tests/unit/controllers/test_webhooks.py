"""controllers.webhooks: KubeRay v1.7.0's webhook rules for RayCluster and RayService
answered as admission reviews (refusals are 422 Invalid with KubeRay's message shape),
registered at KubeRay's paths, and the webhook configuration that points at them."""

from __future__ import annotations

from typing import Any

import pytest

from controllers import webhooks
from runtime import manager
from runtime.testing import fake
from runtime.webhook import admission


def review(kind: str, operation: str, obj: dict[str, Any] | None, old: Any = None) -> Any:
    plural = kind.lower() + "s"
    return admission.Request.from_review({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "1", "kind": {"group": "ray.io", "version": "v1", "kind": kind},
                    "resource": {"group": "ray.io", "version": "v1", "resource": plural},
                    "operation": operation, "object": obj, "oldObject": old},
    })  # fmt: skip


async def answer(kind: str, operation: str, obj: Any, old: Any = None) -> admission.Response:
    validator = (
        webhooks.RayServiceValidator() if kind == "RayService" else webhooks.RayClusterValidator()
    )
    return await admission.validating(validator).handle(review(kind, operation, obj, old))


def service(name: str, **annotations: str) -> dict[str, Any]:
    # The webhook looks at metadata only: a spec the reconciler would refuse is allowed.
    return {"metadata": {"name": name, "annotations": annotations}, "spec": {}}


@pytest.mark.parametrize(
    ("obj", "problem"),
    [
        (service("s" * 48), "metadata.name 'ssssssssssssssssssssssssssssssssssssssssssssssss' "
                            "has 48 characters"),
        (service("Bad_Name"), "metadata.name 'Bad_Name' is not a valid DNS-1035 label"),
        (service("ok", **{"ray.io/initializing-timeout": "0s"}),
         "annotation ray.io/initializing-timeout must be a positive duration, got '0s'"),
    ],
)  # fmt: skip
async def test_rayservice_refusals(obj: dict[str, Any], problem: str) -> None:
    for operation in ("CREATE", "UPDATE"):
        refused = await answer("RayService", operation, obj, old=service("old"))
        assert (refused.allowed, refused.code, refused.reason) == (False, 422, "Invalid")
        name = obj["metadata"]["name"]
        assert refused.message.startswith(f'RayService.ray.io "{name}" is invalid: {problem}')


async def test_rayservice_allowed_and_delete_never_refused() -> None:
    fine = service("s" * 47, **{"ray.io/initializing-timeout": "90s"})
    assert (await answer("RayService", "CREATE", fine)).allowed
    assert (await answer("RayService", "DELETE", None, old=service("Bad_Name"))).allowed


def cluster(name: str, *groups: str) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "spec": {"workerGroupSpecs": [{"groupName": g} for g in groups]}}  # fmt: skip


async def test_raycluster_rules() -> None:
    assert (await answer("RayCluster", "CREATE", cluster("c" * 53, "a", "b"))).allowed
    long = await answer("RayCluster", "CREATE", cluster("c" * 54))
    assert long.message.startswith(f'RayCluster.ray.io "{"c" * 54}" is invalid: RayCluster name')
    twins = await answer("RayCluster", "UPDATE", cluster("c", "a", "b", "a", "b"), cluster("c"))
    assert twins.message == (
        'RayCluster.ray.io "c" is invalid: worker group names must be unique: '
        "'a' appears more than once"
    )
    both = await answer("RayCluster", "CREATE", cluster("Bad", "a", "a"))
    assert "; worker group names must be unique" in both.message


def test_setup_registers_kuberays_paths_and_the_configuration_points_at_them() -> None:
    mgr = manager.Manager(fake.FakeClient(), manager.Options(name="t"))  # type: ignore[arg-type]
    paths = webhooks.setup(mgr)
    assert paths == ["/validate-ray-io-v1-raycluster", "/validate-ray-io-v1-rayservice"]
    assert mgr.webhook_server.paths == paths
    config = webhooks.configuration("svc", "ns")
    assert config["metadata"]["name"] == webhooks.CONFIGURATION_NAME
    hooks = config["webhooks"]
    assert [h["clientConfig"]["service"] for h in hooks] == [
        {"name": "svc", "namespace": "ns", "path": path} for path in paths
    ]
    assert [h["rules"][0]["resources"] for h in hooks] == [["rayclusters"], ["rayservices"]]
    assert all(h["failurePolicy"] == "Fail" and h["sideEffects"] == "None" for h in hooks)
