"""controllers.webhooks: KubeRay v1.7.0's webhook rules for RayCluster, RayService and
RayJob, and ours for RayCronJob, answered as admission reviews (refusals are 422 Invalid
with KubeRay's message shape), registered at KubeRay's paths, and the webhook
configuration that points at them."""

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
    validator = {
        "RayService": webhooks.RayServiceValidator,
        "RayCluster": webhooks.RayClusterValidator,
        "RayJob": webhooks.RayJobValidator,
        "RayCronJob": webhooks.RayCronJobValidator,
    }[kind]()
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
    assert paths == [
        "/validate-ray-io-v1-raycluster",
        "/validate-ray-io-v1-rayservice",
        "/validate-ray-io-v1-rayjob",
        "/validate-ray-io-v1-raycronjob",
    ]
    assert mgr.webhook_server.paths == paths
    config = webhooks.configuration("svc", "ns")
    assert config["metadata"]["name"] == webhooks.CONFIGURATION_NAME
    hooks = config["webhooks"]
    assert [h["clientConfig"]["service"] for h in hooks] == [
        {"name": "svc", "namespace": "ns", "path": path} for path in paths
    ]
    assert [h["rules"][0]["resources"] for h in hooks] == [
        ["rayclusters"],
        ["rayservices"],
        ["rayjobs"],
        ["raycronjobs"],
    ]
    assert all(h["failurePolicy"] == "Fail" and h["sideEffects"] == "None" for h in hooks)


async def test_rayjob_name_only() -> None:
    """KubeRay's rule: the name; a spec the reconciler refuses is stored (ValidationFailed)."""
    invalid_spec = {"metadata": {"name": "j" * 47}, "spec": {"backoffLimit": -1, "suspend": True}}
    assert (await answer("RayJob", "CREATE", invalid_spec)).allowed
    for operation in ("CREATE", "UPDATE"):
        refused = await answer("RayJob", operation, {"metadata": {"name": "j" * 48}, "spec": {}},
                               old={"metadata": {"name": "j" * 48}, "spec": {}})  # fmt: skip
        assert (refused.allowed, refused.code, refused.reason) == (False, 422, "Invalid")
        assert refused.message.startswith(
            f'RayJob.ray.io "{"j" * 48}" is invalid: metadata.name {"j" * 48!r} has 48 '
            "characters; a RayJob name must have at most 47"
        ), refused.message
    assert (await answer("RayJob", "DELETE", None, old={"metadata": {"name": "Bad"}})).allowed


def cron(name: str, schedule: str = "0 3 * * *", **spec: Any) -> dict[str, Any]:
    template = {"entrypoint": "python etl.py", "backoffLimit": -1}  # invalid: not our rule
    return {"metadata": {"name": name},
            "spec": {"schedule": schedule, "jobTemplate": template, **spec}}  # fmt: skip


async def test_raycronjob_name_schedule_and_zone_on_create() -> None:
    assert (await answer("RayCronJob", "CREATE", cron("c" * 36, timeZone="Europe/Paris"))).allowed
    refused = await answer("RayCronJob", "CREATE", cron("c" * 37, "61 * * * *", timeZone="Mars/X"))
    assert (refused.allowed, refused.code, refused.reason) == (False, 422, "Invalid")
    assert refused.message.startswith(
        f'RayCronJob.ray.io "{"c" * 37}" is invalid: metadata.name {"c" * 37!r} has 37 '
        "characters; a RayCronJob name must have at most 36"
    ), refused.message
    assert "; spec.schedule '61 * * * *' is not a cron schedule" in refused.message
    assert refused.message.endswith(
        "; spec.timeZone 'Mars/X' is not a time zone this operator knows"
    )
    tz = await answer("RayCronJob", "CREATE", cron("c", "TZ=UTC 0 3 * * *"))
    assert "must not set a time zone (TZ or CRON_TZ); use spec.timeZone" in tz.message
    assert "jobTemplate" not in refused.message + tz.message, "left to the reconciler"


async def test_raycronjob_update_refused_only_when_it_changes_the_schedule() -> None:
    """A RayCronJob stored invalid (before the webhook was on) can still be updated - a
    finalizer removed, a label set - as long as the update leaves the schedule as it was;
    the name (which cannot change) is checked on create only."""
    stored = cron("c" * 40, "bad")
    unchanged = {**stored, "metadata": {"name": "c" * 40, "finalizers": []}}
    assert (await answer("RayCronJob", "UPDATE", unchanged, old=stored)).allowed
    fixed = cron("c" * 40, "@hourly")
    assert (await answer("RayCronJob", "UPDATE", fixed, old=stored)).allowed
    broken = await answer("RayCronJob", "UPDATE", cron("c", "bad"), old=cron("c"))
    assert broken.message.startswith('RayCronJob.ray.io "c" is invalid: spec.schedule')
    zone = await answer("RayCronJob", "UPDATE", cron("c", timeZone="Mars/X"), old=cron("c"))
    assert not zone.allowed
    assert (await answer("RayCronJob", "DELETE", None, old=stored)).allowed


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
