"""controllers.webhooks: KubeRay v1.7.0's webhook rules for RayCluster and RayService
answered as admission reviews (refusals are 422 Invalid with KubeRay's message shape),
registered at KubeRay's paths, and the webhook configuration that points at them."""

from __future__ import annotations

from typing import Any

import pytest

from controllers import webhooks
from controllers.rayservice import gateway
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


def incremental(name: str, gateway_class: str) -> dict[str, Any]:
    options = {"stepSizePercent": 25, "intervalSeconds": 30, "gatewayClassName": gateway_class}
    return {"metadata": {"name": name},
            "spec": {"upgradeStrategy": {"type": "NewClusterWithIncrementalUpgrade",
                                         "clusterUpgradeOptions": options}}}  # fmt: skip


async def test_a_gateway_class_the_operator_does_not_allow_is_refused_at_admission() -> None:
    """With ``--gateway-classes`` known (the webhook runs in the operator), a RayService
    asking for a Gateway of another class is refused on create, and on an update that
    changes its class; an update leaving the class as it was is allowed (the reconciler
    reports it, and the operator's own finalizer updates must pass)."""
    allowed = gateway.GatewayClasses.parse(["traefik"])
    validator = webhooks.RayServiceValidator(gateway_classes=allowed)

    async def ask(operation: str, obj: Any, old: Any = None) -> admission.Response:
        return await admission.validating(validator).handle(
            review("RayService", operation, obj, old)
        )

    refused = await ask("CREATE", incremental("svc", "public-lb"))
    assert (refused.allowed, refused.code, refused.reason) == (False, 422, "Invalid")
    assert refused.message.startswith(
        'RayService.ray.io "svc" is invalid: spec.upgradeStrategy.clusterUpgradeOptions.'
        "gatewayClassName 'public-lb' is not allowed by the operator (allowed: 'traefik')"
    ), refused.message
    assert "--gateway-classes=public-lb,traefik" in refused.message
    assert (await ask("CREATE", incremental("svc", "traefik"))).allowed
    changed = await ask("UPDATE", incremental("svc", "public-lb"), incremental("svc", "traefik"))
    assert not changed.allowed
    same = await ask("UPDATE", incremental("svc", "public-lb"), incremental("svc", "public-lb"))
    assert same.allowed
    both = await ask("CREATE", incremental("Bad", "public-lb"))
    assert "is not a valid DNS-1035 label" in both.message
    assert "ending with a letter or digit); spec.upgradeStrategy" in both.message, "both, joined"
    # The gate off: the strategy behaves as None, no Gateway is made, nothing to refuse.
    off = webhooks.RayServiceValidator(gateway_classes=allowed, incremental=False)
    answer_off = await admission.validating(off).handle(
        review("RayService", "CREATE", incremental("svc", "public-lb"))
    )
    assert answer_off.allowed
    # Without a list (KubeRay's validator): KubeRay's rules only.
    assert (await answer("RayService", "CREATE", incremental("svc", "public-lb"))).allowed


def test_setup_hands_the_allow_list_to_the_rayservice_webhook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registered: list[Any] = []

    def register_for(server: Any, resource: Any, *, validator: Any) -> list[str]:
        registered.append(validator)
        return []

    monkeypatch.setattr(webhooks.webhook_server, "register_for", register_for)
    mgr = manager.Manager(fake.FakeClient(), manager.Options(name="t"))  # type: ignore[arg-type]
    allowed = gateway.GatewayClasses.parse(["traefik"])
    webhooks.setup(mgr, gateway_classes=allowed, incremental=False)
    (service,) = [v for v in registered if isinstance(v, webhooks.RayServiceValidator)]
    assert (service.gateway_classes, service.incremental) == (allowed, False)
    registered.clear()
    webhooks.setup(mgr)
    (service,) = [v for v in registered if isinstance(v, webhooks.RayServiceValidator)]
    assert service.gateway_classes is None, "without a list: KubeRay's rules only"
