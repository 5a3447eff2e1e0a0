"""hack/gen_manifests.py: structural CRD schemas and the ClusterRole, generated reproducibly."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pydantic
import pytest
import yaml

import api.v1 as v1
from api.v1 import meta
from controllers import rbac
from tests.unit import helpers

ROOT = pathlib.Path(__file__).parents[3]
KINDS = ["RayCluster", "RayService", "RayJob", "RayCronJob"]
TYPES = {"object", "array", "string", "integer", "number", "boolean"}


gen = helpers.load_script("hack/gen_manifests.py")


def crd_of(kind: str) -> dict[str, Any]:
    plural = {
        "RayCluster": "rayclusters",
        "RayService": "rayservices",
        "RayJob": "rayjobs",
        "RayCronJob": "raycronjobs",
    }[kind]
    doc: dict[str, Any] = yaml.safe_load(
        (ROOT / f"config/crd/bases/ray.io_{plural}.yaml").read_text()
    )
    return doc


def schema_of(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = crd_of(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from nodes(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from nodes(schema["additionalProperties"], f"{path}.*")


def test_generating_twice_gives_identical_bytes() -> None:
    assert gen.generate() == gen.generate()


def test_committed_manifests_are_up_to_date() -> None:
    for relative, content in gen.generate().items():
        assert (ROOT / relative).read_text() == content, f"{relative}: run make manifests"
    assert gen.main(["--check"]) == 0


def test_check_lists_drift_and_writes_nothing(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gen.main(["--check", "--root", str(tmp_path)]) == 1
    assert list(tmp_path.iterdir()) == []
    out = capsys.readouterr().out
    for relative in gen.generate():
        assert f"out of date: {relative}" in out

    assert gen.main(["--root", str(tmp_path)]) == 0
    assert gen.main(["--check", "--root", str(tmp_path)]) == 0
    role = tmp_path / "config/rbac/role.yaml"
    role.write_text(role.read_text() + "# edited by hand\n")
    capsys.readouterr()
    assert gen.main(["--check", "--root", str(tmp_path)]) == 1
    assert capsys.readouterr().out.splitlines()[0] == "out of date: config/rbac/role.yaml"


@pytest.mark.parametrize("kind", KINDS)
def test_schemas_are_structural(kind: str) -> None:
    for path, node in nodes(schema_of(kind)):
        assert not {"$ref", "allOf", "title"} & set(node), path
        if node.get("x-kubernetes-int-or-string"):
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
            continue
        assert "anyOf" not in node, path
        assert node.get("type") in TYPES, path
        if "properties" in node:
            assert "additionalProperties" not in node, path
        if node["type"] == "object" and path != ".metadata":
            assert (
                "properties" in node
                or "additionalProperties" in node
                or node.get("x-kubernetes-preserve-unknown-fields")
            ), f"{path}: an object with no schema would be pruned empty"


@pytest.mark.parametrize("kind", KINDS)
def test_crd_shape(kind: str) -> None:
    crd = crd_of(kind)
    assert crd["metadata"]["name"] == f"{kind.lower()}s.ray.io"
    assert crd["spec"]["group"] == "ray.io"
    assert crd["spec"]["scope"] == "Namespaced"
    assert crd["spec"]["names"]["categories"] == ["all"]
    version, *others = crd["spec"]["versions"]
    assert version["name"] == "v1"
    assert version["served"]
    assert version["storage"]
    assert version["subresources"] == {"status": {}}
    schema = version["schema"]["openAPIV3Schema"]
    assert schema["required"] == ["spec"]
    assert set(schema["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}
    assert [v["name"] for v in others] == (["v1alpha1"] if kind != "RayCronJob" else [])


@pytest.mark.parametrize("kind", ["RayCluster", "RayService"])
def test_v1alpha1_is_listed_but_neither_served_nor_stored(kind: str) -> None:
    """KubeRay's CRDs list v1alpha1 (RayJob's too); a cluster whose CRD has it in
    ``status.storedVersions`` refuses a CRD that drops it."""
    versions = crd_of(kind)["spec"]["versions"]
    assert [v["name"] for v in versions] == ["v1", "v1alpha1"]
    assert [v["name"] for v in versions if v["storage"]] == ["v1"]
    assert [v["name"] for v in versions if v["served"]] == ["v1"]
    assert versions[1] == {
        "name": "v1alpha1",
        "served": False,
        "storage": False,
        "schema": {
            "openAPIV3Schema": {
                "type": "object",
                "description": "v1alpha1 is not served; objects are read and written as v1.",
                "x-kubernetes-preserve-unknown-fields": True,
            }
        },
    }
    assert gen.legacy_version("v1alpha1") == versions[1]


def columns(kind: str) -> list[tuple[str, str, str, int]]:
    version = crd_of(kind)["spec"]["versions"][0]
    return [(c["name"], c["type"], c["jsonPath"], c.get("priority", 0))
            for c in version["additionalPrinterColumns"]]  # fmt: skip


def test_raycluster_printer_columns_are_kuberays() -> None:
    """KubeRay v1.5.0's columns: names, types, paths, order; TPUs and the head's IPs wide."""
    assert columns("RayCluster") == [
        ("desired workers", "integer", ".status.desiredWorkerReplicas", 0),
        ("available workers", "integer", ".status.availableWorkerReplicas", 0),
        ("cpus", "string", ".status.desiredCPU", 0),
        ("memory", "string", ".status.desiredMemory", 0),
        ("gpus", "string", ".status.desiredGPU", 0),
        ("tpus", "string", ".status.desiredTPU", 1),
        ("status", "string", ".status.state", 0),
        ("age", "date", ".metadata.creationTimestamp", 0),
        ("head pod IP", "string", ".status.head.podIP", 1),
        ("head service IP", "string", ".status.head.serviceIP", 1),
    ]


def test_rayservice_printer_columns_are_kuberays() -> None:
    """KubeRay v1.5.0's two columns (a string column for an integer, and no age, as there)."""
    assert columns("RayService") == [
        ("service status", "string", ".status.serviceStatus", 0),
        ("num serve endpoints", "string", ".status.numServeEndpoints", 0),
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_printer_columns_point_at_status_fields_that_exist(kind: str) -> None:
    schema = schema_of(kind)
    for name, _, path, _ in columns(kind):
        if path.startswith(".metadata."):
            continue
        node = schema
        for part in path.removeprefix(".").split("."):
            assert part in node.get("properties", {}), f"{name}: {path}"
            node = node["properties"][part]
        assert node.get("type") in {"string", "integer", "boolean"} or node.get(
            "x-kubernetes-int-or-string"
        ), f"{name}: {path}"


def test_validation_rules_reach_the_schema() -> None:
    service = schema_of("RayService")["properties"]
    spec = service["spec"]["properties"]
    assert service["spec"]["required"] == ["rayClusterConfig"]
    assert spec["upgradeStrategy"]["properties"]["type"]["enum"] == [
        "NewCluster",
        "NewClusterWithIncrementalUpgrade",
        "None",
    ]
    assert "nullable" not in spec["upgradeStrategy"]["properties"]["type"]  # null is pruned
    delay = spec["rayClusterDeletionDelaySeconds"]
    assert (delay["minimum"], delay["default"], delay["format"]) == (0, 60, "int32")
    assert spec["serveConfigV2"] == {
        "type": "string",
        "nullable": True,
        "description": "The Serve multi-application config, as a YAML string.",
        "maxLength": 1572864,
    }
    assert spec["serveService"]["x-kubernetes-preserve-unknown-fields"] is True

    cluster = schema_of("RayCluster")["properties"]["spec"]
    assert cluster["required"] == ["headGroupSpec"]
    head = cluster["properties"]["headGroupSpec"]
    assert head["required"] == ["template"]
    assert head["properties"]["template"] == {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "description": head["properties"]["template"]["description"],
    }
    group = cluster["properties"]["workerGroupSpecs"]["items"]
    assert group["required"] == ["groupName", "template"]
    for name, default in [("replicas", 0), ("minReplicas", 0), ("maxReplicas", 2**31 - 1)]:
        assert (group["properties"][name]["minimum"], group["properties"][name]["default"]) == (
            0,
            default,
        )


@pytest.mark.parametrize("kind", KINDS)
def test_status_has_no_defaults_and_conditions_are_a_map(kind: str) -> None:
    status = schema_of(kind)["properties"]["status"]
    assert not [path for path, node in nodes(status) if "default" in node]
    conditions = [node for path, node in nodes(status) if path.endswith(".conditions")]
    assert conditions or kind == "RayCronJob"
    for node in conditions:
        assert node["x-kubernetes-list-type"] == "map"
        assert node["x-kubernetes-list-map-keys"] == ["type"]
        assert node["items"]["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
        assert set(node["items"]["required"]) == {
            "type", "status", "reason", "message", "lastTransitionTime"
        }  # fmt: skip


def test_descriptions_come_from_docstrings_without_markup() -> None:
    spec = schema_of("RayService")["properties"]["spec"]["properties"]
    description = spec["upgradeStrategy"]["properties"]["type"]["description"]
    assert description == "An UpgradeType; unset means `NewCluster`."


def test_free_form_dicts_must_be_declared_raw() -> None:
    class Loose(meta.Model):
        anything: dict[str, Any]

    class Raw(meta.Model):
        anything: meta.RawObject

    with pytest.raises(gen.SchemaError, match="RawObject"):
        gen.structural(Loose.model_json_schema(), {})
    converted = gen.structural(Raw.model_json_schema(), {})
    assert converted["properties"]["anything"] == {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }


def test_unsupported_schema_keywords_fail_loudly() -> None:
    class Choice(pydantic.BaseModel):
        value: int | str

    with pytest.raises(gen.SchemaError, match="anyOf"):
        gen.structural(Choice.model_json_schema(), {})


def test_role_is_the_merged_declarations() -> None:
    role = yaml.safe_load((ROOT / "config/rbac/role.yaml").read_text())
    assert role["kind"] == "ClusterRole"
    assert role["metadata"]["name"] == "rayservice-operator-manager-role"
    granted = {
        (group, resource): set(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert granted[("ray.io", "rayservices/status")] == {"update"}  # the re-read GETs the object
    assert granted[("ray.io", "rayclusters/finalizers")] == {"update"}
    assert granted[("discovery.k8s.io", "endpointslices")] == {"list", "watch"}  # cached only
    # patch on pods: the RayService's head pod label (and the autoscaler's Role grants it)
    assert granted[("", "pods")] == {"get", "list", "watch", "create", "delete", "patch"}
    # read by GET, never list/watched cluster-wide (no cluster-wide read of RBAC)
    assert granted[("rbac.authorization.k8s.io", "roles")] == {"get", "create"}
    # proxy subresources only in the proxy mode's own ClusterRole
    assert ("", "services/proxy") not in granted
    assert ("", "pods/proxy") not in granted
    proxy = yaml.safe_load((ROOT / "config/overlays/kubernetes-proxy/proxy_role.yaml").read_text())
    assert proxy["metadata"]["name"] == rbac.PROXY_ROLE_NAME
    assert {(g, r): set(rule["verbs"]) for rule in proxy["rules"] for g in rule["apiGroups"]
            for r in rule["resources"]} == {("", "services/proxy"): {"get", "update"},
                                            ("", "pods/proxy"): {"get"}}  # fmt: skip
    assert granted[("events.k8s.io", "events")] == {"create", "patch"}
    assert ("", "events") not in granted, "Events go to events.k8s.io/v1 only"
    assert not any("*" in verbs for verbs in granted.values())
    # token auth: token Secrets read by name (GET) and created, never listed or watched
    # (the token could then enumerate every credential). Never update or delete (a token
    # Secret is never rewritten; the GC removes it).
    assert granted[("", "secrets")] == {"get", "create"}
    declared = {(r.group, r.resource) for rules in rbac.DECLARATIONS.values() for r in rules}
    assert set(granted) == declared


def test_merge_unites_verbs_and_groups_resources() -> None:
    rules = [
        rbac.Rule("", "pods", "get"),
        rbac.Rule("apps", "deployments", "list get"),
        rbac.Rule("", "pods", "list"),
        rbac.Rule("", "services", "list get"),
    ]
    assert rbac.merge(rules) == [
        {"apiGroups": [""], "resources": ["pods", "services"], "verbs": ["get", "list"]},
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list"]},
    ]
    assert rbac.merge(reversed(rules)) == rbac.merge(rules)
    with pytest.raises(ValueError, match="verbs"):
        rbac.Rule("", "pods", "get steal")


def test_manager_deployment_is_locked_down() -> None:
    docs = list(yaml.safe_load_all((ROOT / "config/manager/manager.yaml").read_text()))
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert container["image"] == "rayservice-operator:latest"
    assert "--leader-elect" in container["args"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "health": 8082}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert pod["serviceAccountName"] == "rayservice-operator-manager"


def test_models_declare_their_crd() -> None:
    assert [model.__name__ for model in v1.MODELS] == KINDS
    for model in v1.MODELS:
        assert model.RESOURCE.group == v1.GROUP
        assert (model.LEGACY_VERSIONS, getattr(model, "SERVED_VERSIONS", ())) == {
            "RayCluster": (("v1alpha1",), ()),
            "RayService": (("v1alpha1",), ()),
            "RayJob": ((), ("v1alpha1",)),  # KubeRay v1.7.0 serves RayJob's v1alpha1
            "RayCronJob": ((), ()),
        }[model.__name__]
        version = crd_of(model.__name__)["spec"]["versions"][0]
        assert version["additionalPrinterColumns"] == [c.to_api() for c in model.PRINTER_COLUMNS]
