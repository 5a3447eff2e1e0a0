"""api.v1 models: KubeRay YAML round-trips unchanged, defaults, validation, volatile fields."""

from __future__ import annotations

import copy
import doctest
import importlib
import pathlib
from typing import Any

import pydantic
import pytest
import yaml

import api.v1 as v1
from api.v1 import meta, raycluster, rayservice
from runtime import conditions, equality
from tests.unit import helpers

ROOT = helpers.ROOT
TESTDATA = pathlib.Path(__file__).parent / "testdata"
SAMPLES = sorted(
    p for p in (ROOT / "config/samples").glob("*.yaml") if p.name != "kustomization.yaml"
)
KUBERAY = sorted(TESTDATA.glob("kuberay_*.yaml"))
MODELS = {
    "RayCluster": v1.RayCluster,
    "RayService": v1.RayService,
    "RayJob": v1.RayJob,
    "RayCronJob": v1.RayCronJob,
}
PUBLIC = [
    "api.v1",
    "api.v1.groupversion",
    "api.v1.meta",
    "api.v1.raycluster",
    "api.v1.raycronjob",
    "api.v1.rayjob",
    "api.v1.rayservice",
    "controllers.rbac",
]


def load(path: pathlib.Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return doc


def model_for(doc: dict[str, Any]) -> type[meta.Model]:
    return MODELS[doc["kind"]]


@pytest.mark.parametrize("path", SAMPLES + KUBERAY, ids=lambda p: p.name)
def test_yaml_round_trips_without_losing_fields(path: pathlib.Path) -> None:
    doc = load(path)
    obj = model_for(doc).model_validate(copy.deepcopy(doc))
    assert obj.model_dump(by_alias=True, exclude_unset=True) == doc
    assert contains(obj.to_api(), doc)  # what is sent to the API: the same plus defaults


def contains(big: Any, small: Any) -> bool:
    """``small`` is ``big`` with some mapping keys left out (at any depth)."""
    if isinstance(small, dict):
        return isinstance(big, dict) and all(
            k in big and contains(big[k], v) for k, v in small.items()
        )
    if isinstance(small, list):
        return isinstance(big, list) and len(big) == len(small) and all(map(contains, big, small))
    return bool(big == small)


def test_samples_cover_every_kind() -> None:
    assert sorted(load(p)["kind"] for p in SAMPLES) == sorted(MODELS)
    serve_config = yaml.safe_load(
        load(ROOT / "config/samples/ray_v1_rayservice.yaml")["spec"]["serveConfigV2"]
    )
    assert len(serve_config["applications"]) == 2


def test_unknown_fields_survive_at_every_depth() -> None:
    doc = load(TESTDATA / "kuberay_rayservice.yaml")
    doc["spec"]["fieldFromTheFuture"] = {"a": 1}
    doc["spec"]["rayClusterConfig"]["headGroupSpec"]["newHeadOption"] = True
    doc["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["newGroupOption"] = "x"
    doc["status"]["activeServiceStatus"]["newStatusField"] = 7
    obj = v1.RayService.model_validate(copy.deepcopy(doc))
    assert obj.model_dump(by_alias=True, exclude_unset=True) == doc


def test_typed_access_to_a_kuberay_object() -> None:
    svc = v1.RayService.model_validate(load(TESTDATA / "kuberay_rayservice.yaml"))
    assert svc.spec.upgrade_strategy is not None
    assert svc.spec.upgrade_strategy.type == rayservice.UpgradeType.NEW_CLUSTER
    assert svc.spec.ray_cluster_deletion_delay_seconds == 120
    cluster = svc.spec.ray_cluster_config
    assert [g.group_name for g in cluster.worker_group_specs or []] == ["cpu", "gpu"]
    assert cluster.head_group_spec.template["spec"]["containers"][0]["name"] == "ray-head"
    active = svc.status.active_service_status
    assert active is not None
    assert active.ray_cluster_status is not None
    assert active.ray_cluster_status.desired_cpu == "10"
    assert active.ray_cluster_status.head is not None
    assert active.ray_cluster_status.head.pod_ip == "198.18.1.17"
    assert (active.application_statuses or {})["summarize"].status == "RUNNING"
    ready = conditions.find(svc.status.conditions, rayservice.ConditionType.READY)
    assert ready is not None
    assert ready.status == "True"


def test_api_defaults() -> None:
    group = v1.WorkerGroupSpec(group_name="g", template={})
    assert (group.replicas, group.min_replicas, group.max_replicas) == (0, 0, 2**31 - 1)
    assert group.num_of_hosts == 1
    assert group.ray_start_params == {}
    spec = v1.RayServiceSpec.model_validate(
        {"rayClusterConfig": {"headGroupSpec": {"template": {}}}}
    )
    assert spec.ray_cluster_deletion_delay_seconds == 60
    assert spec.upgrade_strategy is None
    assert spec.suspend is None
    status = v1.RayServiceStatus()
    assert (status.conditions, status.num_serve_endpoints, status.observed_generation) == ([], 0, 0)
    assert v1.RayClusterStatus().ready_worker_replicas == 0


def test_defaults_are_not_dumped_as_set() -> None:
    svc = v1.RayService.model_validate(
        {"spec": {"rayClusterConfig": {"headGroupSpec": {"template": {}}}}}
    )
    assert svc.model_dump(by_alias=True, exclude_unset=True) == {
        "spec": {"rayClusterConfig": {"headGroupSpec": {"template": {}}}}
    }
    full = svc.to_api()
    assert full["apiVersion"] == "ray.io/v1"
    assert full["kind"] == "RayService"
    assert full["spec"]["rayClusterDeletionDelaySeconds"] == 60


def test_python_names_and_aliases_are_both_accepted() -> None:
    by_alias = v1.RayClusterStatus.model_validate({"desiredCPU": "1", "head": {"podIP": "1.2.3.4"}})
    by_name = v1.RayClusterStatus(desired_cpu="1", head=raycluster.HeadInfo(pod_ip="1.2.3.4"))
    assert (
        by_alias.to_api()
        == by_name.to_api()
        == {
            "desiredCPU": "1",
            "head": {"podIP": "1.2.3.4"},
            "readyWorkerReplicas": 0,
            "availableWorkerReplicas": 0,
            "desiredWorkerReplicas": 0,
            "minWorkerReplicas": 0,
            "maxWorkerReplicas": 0,
            "observedGeneration": 0,
            "conditions": [],
        }
    )


def test_kuberay_spelling_of_aliases() -> None:
    aliases = {
        field.alias
        for model in (raycluster.RayClusterStatus, raycluster.HeadInfo, rayservice.RayServiceSpec)
        for field in model.model_fields.values()
    }
    expected = {"desiredCPU", "desiredGPU", "desiredTPU", "podIP", "serviceIP", "serveConfigV2"}
    assert expected <= aliases
    assert "rayClusterConfig" in aliases
    assert "excludeHeadPodFromServeSvc" in aliases


def cluster_spec(**worker: Any) -> dict[str, Any]:
    return {"headGroupSpec": {"template": {}}, "workerGroupSpecs": [{"template": {}, **worker}]}


@pytest.mark.parametrize(
    ("model", "data", "location"),
    [
        (
            v1.RayClusterSpec,
            cluster_spec(groupName="g", replicas=-1),
            ("workerGroupSpecs", 0, "replicas"),
        ),
        (
            v1.RayClusterSpec,
            cluster_spec(groupName="g", maxReplicas=-1),
            ("workerGroupSpecs", 0, "maxReplicas"),
        ),
        (v1.RayClusterSpec, cluster_spec(), ("workerGroupSpecs", 0, "groupName")),
        (v1.RayClusterSpec, {"workerGroupSpecs": []}, ("headGroupSpec",)),
        (v1.RayServiceSpec, {}, ("rayClusterConfig",)),
        (
            v1.RayServiceSpec,
            {
                "rayClusterConfig": cluster_spec(groupName="g"),
                "upgradeStrategy": {"type": "Rolling"},
            },
            ("upgradeStrategy", "type"),
        ),
        (
            v1.RayServiceSpec,
            {"rayClusterConfig": cluster_spec(groupName="g"), "rayClusterDeletionDelaySeconds": -5},
            ("rayClusterDeletionDelaySeconds",),
        ),
    ],
    ids=[
        "negative-replicas",
        "negative-max",
        "no-group-name",
        "no-head",
        "no-cluster-config",
        "unknown-upgrade-type",
        "negative-delay",
    ],
)
def test_invalid_specs_are_rejected_naming_the_field(
    model: type[pydantic.BaseModel], data: dict[str, Any], location: tuple[object, ...]
) -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        model.model_validate(data)
    assert location in [error["loc"] for error in caught.value.errors()]


def test_condition_has_the_metav1_shape() -> None:
    fields = {f.alias for f in meta.Condition.model_fields.values()}
    assert fields == {
        "type",
        "status",
        "reason",
        "message",
        "lastTransitionTime",
        "observedGeneration",
    }
    with pytest.raises(pydantic.ValidationError):
        meta.Condition(type="Ready", status="Maybe", reason="R", message="",
                       last_transition_time="2026-01-01T00:00:00Z")  # type: ignore[arg-type]  # fmt: skip
    with pytest.raises(pydantic.ValidationError):
        meta.Condition(type="Ready", status="True", reason="not a reason!", message="",
                       last_transition_time="2026-01-01T00:00:00Z")  # fmt: skip


@pytest.mark.parametrize("model", [v1.RayClusterStatus, v1.RayServiceStatus])
def test_volatile_fields_name_real_fields(model: type[meta.Model]) -> None:
    volatile = model.VOLATILE_FIELDS  # type: ignore[attr-defined]
    aliases = {field.alias for field in model.model_fields.values()}
    assert volatile == {"lastUpdateTime"}
    assert volatile <= aliases


def test_status_writer_ignores_volatile_fields_at_any_depth() -> None:
    doc = load(TESTDATA / "kuberay_rayservice.yaml")
    old = v1.RayServiceStatus.model_validate(doc["status"])
    new = old.model_copy(deep=True)
    new.last_update_time = "2026-03-02T00:00:00Z"
    assert new.active_service_status
    assert new.active_service_status.ray_cluster_status
    new.active_service_status.ray_cluster_status.last_update_time = "2026-03-02T00:00:00Z"
    volatile = v1.RayServiceStatus.VOLATILE_FIELDS
    assert equality.equal(old.to_api(), new.to_api(), volatile=volatile)
    new.num_serve_endpoints = 2
    assert not equality.equal(old.to_api(), new.to_api(), volatile=volatile)


def test_resources() -> None:
    assert v1.GROUP == "ray.io"
    assert v1.VERSION == "v1"
    assert v1.API_VERSION == "ray.io/v1"
    assert v1.RayCluster.RESOURCE is v1.RAYCLUSTERS
    assert v1.RayService.RESOURCE is v1.RAYSERVICES
    assert (
        v1.RAYSERVICES.path("ns", "x", "status")
        == "/apis/ray.io/v1/namespaces/ns/rayservices/x/status"
    )
    assert v1.RAYCLUSTERS.namespaced


@pytest.mark.parametrize("name", PUBLIC)
def test_all_is_sorted_and_resolves(name: str) -> None:
    module = importlib.import_module(name)
    # ruff's RUF022 order: CONSTANTS, then Classes, then functions and modules
    assert module.__all__ == sorted(module.__all__, key=lambda n: (not n.isupper(), n.islower(), n))
    for attr in module.__all__:
        assert hasattr(module, attr), f"{name}.{attr}"


@pytest.mark.parametrize("name", PUBLIC)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples to run"
    assert result.failed == 0
