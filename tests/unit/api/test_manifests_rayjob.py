"""hack/gen_manifests.py for RayJob and RayCronJob: KubeRay v1.7.0's schema rules, columns and
versions (``v1alpha1`` served with v1's schema), and ``SERVED_VERSIONS`` itself."""

from __future__ import annotations

import pathlib
from typing import Any, ClassVar

import pytest
import yaml

import api.v1 as v1
from tests.unit import helpers

ROOT = pathlib.Path(__file__).parents[3]
gen = helpers.load_script("hack/gen_manifests.py")


def crd_of(plural: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(
        (ROOT / f"config/crd/bases/ray.io_{plural}.yaml").read_text()
    )
    return doc


def spec_of(plural: str) -> dict[str, Any]:
    schema: dict[str, Any] = crd_of(plural)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema["properties"]["spec"]


def columns(plural: str) -> list[tuple[str, str, str, int]]:
    version = crd_of(plural)["spec"]["versions"][0]
    return [(c["name"], c["type"], c["jsonPath"], c.get("priority", 0))
            for c in version["additionalPrinterColumns"]]  # fmt: skip


def test_rayjob_v1alpha1_is_served_with_v1s_schema() -> None:
    crd = crd_of("rayjobs")
    storage, served = crd["spec"]["versions"]
    assert (storage["name"], storage["served"], storage["storage"]) == ("v1", True, True)
    assert (served["name"], served["served"], served["storage"]) == ("v1alpha1", True, False)
    assert served["deprecated"] is True
    assert "ray.io/v1" in served["deprecationWarning"]
    for key in ("schema", "subresources", "additionalPrinterColumns"):
        assert served[key] == storage[key], key
    assert "conversion" not in crd["spec"]  # None: only apiVersion changes


def test_raycronjob_has_only_v1() -> None:
    assert [v["name"] for v in crd_of("raycronjobs")["spec"]["versions"]] == ["v1"]


def test_names_and_subresource_are_kuberays() -> None:
    for plural, kind in (("rayjobs", "RayJob"), ("raycronjobs", "RayCronJob")):
        crd = crd_of(plural)
        assert crd["spec"]["names"] == {
            "kind": kind, "listKind": f"{kind}List", "plural": plural,
            "singular": kind.lower(), "categories": ["all"],
        }  # fmt: skip
        assert crd["spec"]["versions"][0]["subresources"] == {"status": {}}


def test_rayjob_printer_columns_are_kuberays() -> None:
    assert columns("rayjobs") == [
        ("job status", "string", ".status.jobStatus", 0),
        ("deployment status", "string", ".status.jobDeploymentStatus", 0),
        ("ray cluster name", "string", ".status.rayClusterName", 0),
        ("start time", "string", ".status.startTime", 0),
        ("end time", "string", ".status.endTime", 0),
        ("age", "date", ".metadata.creationTimestamp", 0),
    ]


def test_raycronjob_printer_columns_are_kuberays() -> None:
    assert columns("raycronjobs") == [
        ("schedule", "string", ".spec.schedule", 0),
        ("timezone", "string", ".spec.timeZone", 0),
        ("last schedule", "date", ".status.lastScheduleTime", 0),
        ("age", "date", ".metadata.creationTimestamp", 0),
        ("suspend", "boolean", ".spec.suspend", 0),
    ]


def rules(node: dict[str, Any]) -> list[str]:
    return [r["rule"] for r in node.get("x-kubernetes-validations", [])]


def test_rayjob_schema_rules_are_kuberays() -> None:
    spec = spec_of("rayjobs")
    props = spec["properties"]
    assert "required" not in spec
    assert rules(props["managedBy"]) == [
        "self == oldSelf",
        "self in ['ray.io/kuberay-operator', 'kueue.x-k8s.io/multikueue']",
    ]
    strategy = props["deletionStrategy"]
    assert rules(strategy) == [
        "!((has(self.onSuccess) || has(self.onFailure)) && has(self.deletionRules))",
        "((has(self.onSuccess) && has(self.onFailure)) || has(self.deletionRules))",
    ]
    deletion_rules = strategy["properties"]["deletionRules"]
    assert (deletion_rules["minItems"], deletion_rules["x-kubernetes-list-type"]) == (1, "atomic")
    rule = deletion_rules["items"]
    assert rule["required"] == ["condition", "policy"]
    policies = ["DeleteCluster", "DeleteWorkers", "DeleteSelf", "DeleteNone"]
    assert rule["properties"]["policy"]["enum"] == policies
    for legacy in ("onSuccess", "onFailure"):
        assert strategy["properties"][legacy]["properties"]["policy"]["enum"] == policies
    condition = rule["properties"]["condition"]
    assert rules(condition) == [
        "!(has(self.jobStatus) && has(self.jobDeploymentStatus))",
        "has(self.jobStatus) || has(self.jobDeploymentStatus)",
    ]
    fields = condition["properties"]
    assert fields["jobStatus"]["enum"] == ["SUCCEEDED", "FAILED"]
    assert fields["jobDeploymentStatus"]["enum"] == ["Failed"]
    assert (fields["ttlSeconds"]["default"], fields["ttlSeconds"]["minimum"]) == (0, 0)
    assert (props["preRunningDeadlineSeconds"]["minimum"], props["backoffLimit"]["default"]) == (
        1, 0,
    )  # fmt: skip
    assert props["submissionMode"]["default"] == "K8sJobMode"
    assert "enum" not in props["submissionMode"]  # KubeRay checks it in the controller
    assert props["ttlSecondsAfterFinished"]["default"] == 0
    assert props["entrypointNumCpus"]["type"] == "number"
    assert props["submitterPodTemplate"]["x-kubernetes-preserve-unknown-fields"] is True


def test_raycronjob_schema_rules_are_kuberays() -> None:
    spec = spec_of("raycronjobs")
    assert spec["required"] == ["jobTemplate", "schedule"]
    assert spec["properties"]["timeZone"]["minLength"] == 1
    assert spec["properties"]["suspend"]["type"] == "boolean"
    template = spec["properties"]["jobTemplate"]
    assert template["properties"] == spec_of("rayjobs")["properties"]


def test_status_counters_have_no_api_default() -> None:
    """KubeRay's CRD defaults ``succeeded``/``failed`` to 0; ours states no status defaults
    (the operator writes the whole status), so they stay unset until it does."""
    status = crd_of("rayjobs")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    counters = status["properties"]["status"]["properties"]
    assert "default" not in counters["succeeded"]
    assert "default" not in counters["failed"]


def test_crd_kustomization_lists_every_crd() -> None:
    doc = yaml.safe_load((ROOT / "config/crd/kustomization.yaml").read_text())
    assert doc["resources"] == sorted(
        f"bases/{p.name}" for p in (ROOT / "config/crd/bases").glob("*.yaml")
    )
    assert len(doc["resources"]) == len(v1.MODELS)


class _Kind(v1.meta.Model):
    RESOURCE: ClassVar[Any] = v1.RAYJOBS
    CATEGORIES: ClassVar[tuple[str, ...]] = ()
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ()
    PRINTER_COLUMNS: ClassVar[tuple[Any, ...]] = ()
    SERVED_VERSIONS: ClassVar[tuple[str, ...]] = ("v1beta1", "v1alpha1")
    LEGACY_VERSIONS: ClassVar[tuple[str, ...]] = ("v0",)
    spec: v1.meta.RawObject
    status: v1.meta.RawObject


def test_served_versions_follow_storage_then_legacy_ones() -> None:
    versions = gen.crd(_Kind)["spec"]["versions"]
    assert [(v["name"], v["served"], v["storage"]) for v in versions] == [
        ("v1", True, True), ("v1beta1", True, False), ("v1alpha1", True, False),
        ("v0", False, False),
    ]  # fmt: skip
    assert versions[1]["schema"] == versions[0]["schema"]
    assert gen.served_version("v1beta1", versions[0], "ray.io", "RayJob") == versions[1]


@pytest.mark.parametrize(
    ("served", "legacy", "match"),
    [(("v1alpha1",), ("v1alpha1",), "both served and legacy"), (("v1",), (), "storage")],
)
def test_a_version_is_served_or_legacy_never_both(
    served: tuple[str, ...], legacy: tuple[str, ...], match: str
) -> None:
    class Bad(_Kind):
        SERVED_VERSIONS: ClassVar[tuple[str, ...]] = served
        LEGACY_VERSIONS: ClassVar[tuple[str, ...]] = legacy

    with pytest.raises(gen.SchemaError, match=match):
        gen.crd(Bad)
