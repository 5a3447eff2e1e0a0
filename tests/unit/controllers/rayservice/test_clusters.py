"""controllers.rayservice.clusters: hashes, names, the desired cluster, matching, updates."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from controllers.rayservice import clusters
from runtime import equality, objects, quantity
from tests.unit import helpers

Obj = dict[str, Any]
GOLDEN = helpers.TESTDATA / "kuberay-v1.7.0" / "ray-service.sample.json"
GOLDEN_V1_5 = helpers.TESTDATA / "kuberay-v1.5.0" / "ray-service.sample.json"
"""A cluster KubeRay v1.5.0 made for its sample: one an operator upgrade must recognise."""


def head(image: str = "rayproject/ray:2.46.0") -> Obj:
    return {
        "rayStartParams": {},
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "ray-head",
                        "image": image,
                        "resources": {
                            "limits": {"cpu": 2, "memory": "5Gi"},
                            "requests": {"cpu": 2, "memory": "2Gi"},
                        },
                    }
                ]
            }
        },
    }


def group(name: str = "small-group", **extra: Any) -> Obj:
    return {
        "replicas": 1,
        "minReplicas": 1,
        "maxReplicas": 5,
        "groupName": name,
        "numOfHosts": 1,  # the CRD's default, as the API server stores it
        "rayStartParams": {},
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "ray-worker",
                        "image": "rayproject/ray:2.46.0",
                        "resources": {
                            "limits": {"cpu": "1", "memory": "2Gi"},
                            "requests": {"cpu": "500m", "memory": "2Gi"},
                        },
                    }
                ]
            }
        },
        **extra,
    }


def config(*groups: Obj) -> Obj:
    """KubeRay's config/samples/ray-service.sample.yaml rayClusterConfig (one group by default)."""
    return {
        "rayVersion": "2.46.0",
        "headGroupSpec": head(),
        "workerGroupSpecs": list(groups) if groups else [group()],
    }


def service(cluster_config: Obj | None = None, **metadata: Any) -> Obj:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {
            "name": "rayservice-sample",
            "namespace": "ray-service-sample",
            "uid": "<uid>",
            **metadata,
        },
        "spec": {"rayClusterConfig": cluster_config if cluster_config is not None else config()},
    }


def frozen(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True)


# --- spec_hash ---------------------------------------------------------------------------------


def test_hash_has_kuberays_shape() -> None:
    value = clusters.spec_hash(config())
    assert re.fullmatch(r"[0-9A-V]{32}", value)


def test_hash_is_deterministic_and_ignores_key_order() -> None:
    a = config()
    b = json.loads(json.dumps(a, sort_keys=True))
    reordered = dict(reversed(list(b.items())))
    reordered["workerGroupSpecs"] = [dict(reversed(list(g.items()))) for g in b["workerGroupSpecs"]]
    assert (
        clusters.spec_hash(a)
        == clusters.spec_hash(copy.deepcopy(a))
        == clusters.spec_hash(reordered)
    )


def test_hash_is_remembered_by_content_not_by_object(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass asks for the same hashes again and again: an unchanged config is hashed
    once; a config changed in place (the cache's objects are shared) is hashed anew."""
    monkeypatch.setattr(clusters, "_memo", type(clusters._memo)())
    computed: list[Any] = []
    real = clusters._for_hashing
    monkeypatch.setattr(
        clusters, "_for_hashing", lambda *a, **k: computed.append(a) or real(*a, **k)
    )
    a = config()
    first = clusters.spec_hash(a)
    assert clusters.spec_hash(a) == clusters.spec_hash(copy.deepcopy(a)) == first
    assert len(computed) == 1
    a["rayVersion"] = "9.9.9"
    assert clusters.spec_hash(a) != first
    assert clusters.spec_hash(a, legacy=True) != first
    assert len(computed) == 3
    with_quantity = {"q": quantity.parse("1")}  # not plain JSON: not remembered
    clusters.spec_hash(with_quantity)
    clusters.spec_hash(with_quantity)
    assert len(computed) == 5


def test_the_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clusters, "_memo", type(clusters._memo)())
    monkeypatch.setattr(clusters, "_MEMO_SIZE", 3)
    for version in range(5):
        clusters.spec_hash({"rayVersion": f"2.{version}.0"})
    assert len(clusters._memo) == 3


@pytest.mark.parametrize(
    ("field", "value"),
    [("replicas", 9), ("minReplicas", 0), ("maxReplicas", 100)],
)
def test_hash_ignores_autoscaler_fields(field: str, value: int) -> None:
    changed = config(group("small-group", **{field: value}))
    assert changed["workerGroupSpecs"][0][field] == value
    assert clusters.spec_hash(changed) == clusters.spec_hash(config())


def test_hash_ignores_workers_to_delete_and_an_emptied_scale_strategy() -> None:
    deleting = config(group(scaleStrategy={"workersToDelete": ["w-1", "w-2"]}))
    empty = config(group(scaleStrategy={}))
    without_groups_fields = config(group())
    assert clusters.spec_hash(deleting) == clusters.spec_hash(without_groups_fields)
    assert clusters.spec_hash(empty) == clusters.spec_hash(without_groups_fields)


def test_hash_ignores_what_the_server_rewrites() -> None:
    # cpu: 2 is stored as "2"; an empty map is an absent one.
    rewritten = config()
    rewritten["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]["limits"][
        "cpu"
    ] = "2"
    del rewritten["headGroupSpec"]["rayStartParams"]
    rewritten["headGroupSpec"]["template"]["metadata"] = {}
    assert clusters.spec_hash(rewritten) == clusters.spec_hash(config())


def test_hash_sees_a_quantity_change() -> None:
    changed = config()
    changed["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = (
        "3"
    )
    assert clusters.spec_hash(changed) != clusters.spec_hash(config())


def test_hash_sees_a_ray_version_change() -> None:
    assert clusters.spec_hash({**config(), "rayVersion": "2.47.0"}) != clusters.spec_hash(config())


def test_hash_sees_an_image_change() -> None:
    changed = {**config(), "headGroupSpec": head("rayproject/ray:2.47.0")}
    assert clusters.spec_hash(changed) != clusters.spec_hash(config())


def test_hash_sees_a_new_env_var_in_a_worker() -> None:
    changed = config()
    container = changed["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "FOO", "value": "1"}]
    assert clusters.spec_hash(changed) != clusters.spec_hash(config())


def test_hash_sees_a_string_that_looks_like_a_number_outside_quantities() -> None:
    a, b = config(), config()
    a["headGroupSpec"]["rayStartParams"] = {"num-cpus": "1"}
    b["headGroupSpec"]["rayStartParams"] = {"num-cpus": "1000m"}
    assert clusters.spec_hash(a) != clusters.spec_hash(b)


def test_hash_sees_a_new_worker_group_and_group_order() -> None:
    one = config(group("a"))
    two = config(group("a"), group("b"))
    swapped = config(group("b"), group("a"))
    assert len({clusters.spec_hash(one), clusters.spec_hash(two), clusters.spec_hash(swapped)}) == 3


def test_prefix_hash_truncates_the_worker_groups() -> None:
    two = config(group("a"), group("b", replicas=3))
    assert clusters.spec_hash(two, worker_groups=1) == clusters.spec_hash(config(group("a")))
    assert clusters.spec_hash(two, worker_groups=2) == clusters.spec_hash(two)
    assert clusters.spec_hash(two, worker_groups=5) == clusters.spec_hash(two)


def test_hash_does_not_modify_its_argument() -> None:
    original = config(group(scaleStrategy={"workersToDelete": ["w"]}))
    before = frozen(original)
    clusters.spec_hash(original, worker_groups=0)
    assert frozen(original) == before


GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
KUEUE_GATE = {"name": "kueue.x-k8s.io/admission"}


@pytest.mark.parametrize("where", ["head", "worker"], ids=["head template", "worker template"])
def test_hash_ignores_tolerations_and_scheduling_gates(where: str) -> None:
    """KubeRay v1.7.0 GenerateHashWithoutReplicasAndWorkersToDelete: Kueue may set them."""
    changed = config()
    target = changed["headGroupSpec"] if where == "head" else changed["workerGroupSpecs"][0]
    target["template"]["spec"]["tolerations"] = [GPU_TOLERATION]
    target["template"]["spec"]["schedulingGates"] = [KUEUE_GATE]
    assert clusters.spec_hash(changed) == clusters.spec_hash(config())
    # Anything else in the pod template still counts.
    target["template"]["spec"]["nodeSelector"] = {"pool": "gpu"}
    assert clusters.spec_hash(changed) != clusters.spec_hash(config())


@pytest.mark.parametrize(
    ("field", "value"),
    [("suspend", True), ("suspend", False), ("upgradeStrategy", {"type": "None"})],
)
def test_hash_ignores_suspend_and_the_clusters_upgrade_strategy(field: str, value: Any) -> None:
    """KubeRay v1.7.0 rayClusterSpecForHashing (suspend) and the hash (upgradeStrategy)."""
    assert clusters.spec_hash({**config(), field: value}) == clusters.spec_hash(config())


def test_hash_of_a_config_without_the_ignored_fields_is_unchanged() -> None:
    """Clusters made before these fields were ignored keep their hash: no upgrade when the
    operator is upgraded (the value is pinned: a change here is an upgrade storm)."""
    assert clusters.spec_hash(config()) == "S71RRBCNBV5CNH7KCRFNG6OEMJ98QLTA"
    assert clusters.spec_hash(config(), legacy=True) == clusters.spec_hash(config())


def test_serve_config_hash() -> None:
    a = {"applications": [{"name": "a", "import_path": "m:a"}]}
    b = {"applications": [{"import_path": "m:a", "name": "a"}]}
    c = {"applications": [{"name": "a", "import_path": "m:b"}]}
    assert clusters.serve_config_hash(a) == clusters.serve_config_hash(b)
    assert clusters.serve_config_hash(a) != clusters.serve_config_hash(c)
    assert re.fullmatch(r"[0-9A-V]{32}", clusters.serve_config_hash(a))


def test_serve_config_hash_normalises_nothing_but_key_order() -> None:
    def app(**fields: Any) -> Obj:
        return {"applications": [{"name": "a", "import_path": "m:a", **fields}]}

    # Absent route_prefix is "/" for Serve, null is "no HTTP route": different configs.
    assert clusters.serve_config_hash(app()) != clusters.serve_config_hash(app(route_prefix=None))
    # A user_config is the application's data, even under a key Kubernetes types as quantities.
    assert clusters.serve_config_hash(
        app(user_config={"limits": {"cpu": "1"}})
    ) != clusters.serve_config_hash(app(user_config={"limits": {"cpu": "1000m"}}))
    assert clusters.serve_config_hash(app(user_config={})) != clusters.serve_config_hash(app())


# --- cluster_name ------------------------------------------------------------------------------


def test_name_comes_from_the_hash() -> None:
    value = "F972O7RD56SG6VHROS09GUJCU2EGGCSE"
    assert clusters.cluster_name("svc", value, {}) == "svc-f972o"
    assert clusters.cluster_name("svc", value, {"other": None}) == "svc-f972o"


def test_name_held_by_the_same_hash_is_that_cluster() -> None:
    value = clusters.spec_hash(config())
    first = clusters.cluster_name("svc", value, {})
    assert clusters.cluster_name("svc", value, {first: value}) == first


def test_name_collision_probes_deterministically() -> None:
    value = clusters.spec_hash(config())
    first = clusters.cluster_name("svc", value, {})
    second = clusters.cluster_name("svc", value, {first: "SOMETHING-ELSE"})
    third = clusters.cluster_name("svc", value, {first: None, second: "X"})
    assert len({first, second, third}) == 3
    # Same inputs, same answers (no randomness).
    assert clusters.cluster_name("svc", value, {first: "SOMETHING-ELSE"}) == second
    assert clusters.cluster_name("svc", value, {first: None, second: "X"}) == third
    # A probed name held by the same hash is returned.
    assert clusters.cluster_name("svc", value, {first: "SOMETHING-ELSE", second: value}) == second


@pytest.mark.parametrize("seed", range(50))
def test_names_are_dns_labels_that_fit(seed: int) -> None:
    value = clusters.spec_hash({"rayVersion": str(seed)})
    name = clusters.cluster_name("s" * 47, value, {})
    assert len(name) == 53
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name)


def test_different_configs_get_different_names() -> None:
    a = clusters.cluster_name("svc", clusters.spec_hash(config()), {})
    b = clusters.cluster_name("svc", clusters.spec_hash({**config(), "rayVersion": "2.47.0"}), {})
    assert a != b


# --- desired_cluster ---------------------------------------------------------------------------


def config_v1_7() -> Obj:
    """KubeRay v1.7.0's sample rayClusterConfig as its CRD stores it: Ray 2.52.0, and the
    CRD's default worker group ``priority: 0``."""
    sample = json.loads(json.dumps(config()).replace("2.46.0", "2.52.0"))
    for worker_group in sample["workerGroupSpecs"]:
        worker_group["priority"] = 0
    return dict(sample)


def test_desired_cluster_equals_kuberays_for_its_sample() -> None:
    golden = json.loads(GOLDEN.read_text())
    assert golden["source"] == "config/samples/ray-service.sample.yaml"
    assert golden["kuberay_version"] == "v1.7.0"
    recorded = golden["raycluster"]
    ours = clusters.desired_cluster(service(config_v1_7()), "rayservice-sample-xxxxx")
    # The hash value is ours, not KubeRay's (see the module docstring): only its shape compares.
    ours_hash = ours["metadata"]["annotations"].pop(clusters.HASH_ANNOTATION)
    kuberay_hash = recorded["metadata"]["annotations"].pop(clusters.HASH_ANNOTATION)
    assert re.fullmatch(r"[0-9A-V]{32}", ours_hash)
    assert re.fullmatch(r"[0-9A-V]{32}", kuberay_hash)
    # Deliberately not KubeRay's version (clusters.KUBERAY_VERSION_VALUE): KubeRay taking the
    # RayService back then updates the cluster in place instead of comparing hashes.
    version = clusters.KUBERAY_VERSION_ANNOTATION
    assert ours["metadata"]["annotations"].pop(version) == "rayservice-operator"
    assert recorded["metadata"]["annotations"].pop(version) == "v1.7.0"
    assert equality.normalize(ours) == equality.normalize(recorded)


def test_desired_cluster_carries_the_services_labels_and_annotations() -> None:
    svc = service(
        labels={"team": "a"}, annotations={"note": "x", clusters.HASH_ANNOTATION: "stale"}
    )
    cluster = clusters.desired_cluster(svc, "rayservice-sample-abcde")
    meta = cluster["metadata"]
    assert meta["labels"] == {
        "team": "a",
        clusters.ORIGINATED_FROM_NAME_LABEL: "rayservice-sample",
        clusters.ORIGINATED_FROM_CRD_LABEL: "RayService",
    }
    assert meta["annotations"] == {
        "note": "x",
        clusters.HASH_ANNOTATION: clusters.spec_hash(config()),
        clusters.NUM_WORKER_GROUPS_ANNOTATION: "1",
        clusters.KUBERAY_VERSION_ANNOTATION: "rayservice-operator",
    }
    assert (meta["name"], meta["namespace"]) == ("rayservice-sample-abcde", "ray-service-sample")
    assert (cluster["apiVersion"], cluster["kind"]) == ("ray.io/v1", "RayCluster")
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayService",
            "name": "rayservice-sample",
            "uid": "<uid>",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def test_desired_cluster_counts_worker_groups() -> None:
    three = config(group("a"), group("b"), group("c"))
    assert (
        clusters.desired_cluster(service(three), "n")["metadata"]["annotations"][
            clusters.NUM_WORKER_GROUPS_ANNOTATION
        ]
        == "3"
    )
    none = {"headGroupSpec": head()}
    assert (
        clusters.desired_cluster(service(none), "n")["metadata"]["annotations"][
            clusters.NUM_WORKER_GROUPS_ANNOTATION
        ]
        == "0"
    )


def test_desired_cluster_owner_from_a_list_item_without_kind() -> None:
    svc = service()
    del svc["apiVersion"], svc["kind"]
    ref = clusters.desired_cluster(svc, "n")["metadata"]["ownerReferences"][0]
    assert (ref["apiVersion"], ref["kind"]) == ("ray.io/v1", "RayService")


def test_desired_cluster_copies_and_does_not_modify_the_service() -> None:
    svc = service(labels={"team": "a"})
    before = frozen(svc)
    cluster = clusters.desired_cluster(svc, "n")
    assert frozen(svc) == before
    cluster["spec"]["workerGroupSpecs"][0]["replicas"] = 99
    cluster["metadata"]["labels"]["team"] = "b"
    assert frozen(svc) == before


def test_desired_cluster_needs_a_config() -> None:
    svc = service()
    del svc["spec"]["rayClusterConfig"]
    with pytest.raises(ValueError, match="rayClusterConfig"):
        clusters.desired_cluster(svc, "n")


# --- match ---------------------------------------------------------------------------------------


def built(cluster_config: Obj) -> Obj:
    return clusters.desired_cluster(service(cluster_config), "rayservice-sample-abcde")


def test_match_exact_despite_autoscaling() -> None:
    cluster = built(config())
    cluster["spec"]["workerGroupSpecs"][0]["replicas"] = 4  # the autoscaler at work
    assert clusters.match(cluster, config(group(replicas=3))) is clusters.Match.EXACT


def test_match_appended_groups() -> None:
    cluster = built(config(group("a")))
    assert clusters.match(cluster, config(group("a"), group("b"))) is clusters.Match.APPENDED
    assert clusters.match(cluster, config(group("a", replicas=7), group("b"), group("c"))) is (
        clusters.Match.APPENDED
    )


def test_match_none_when_groups_are_prepended_removed_or_changed() -> None:
    cluster = built(config(group("a"), group("b")))
    assert (
        clusters.match(cluster, config(group("x"), group("a"), group("b"))) is clusters.Match.NONE
    )
    assert clusters.match(cluster, config(group("a"))) is clusters.Match.NONE
    changed_a = group("a")
    changed_a["template"]["spec"]["containers"][0]["image"] = "rayproject/ray:2.47.0"
    assert clusters.match(cluster, config(changed_a, group("b"), group("c"))) is clusters.Match.NONE


def test_match_none_when_something_else_changed_and_groups_appended() -> None:
    cluster = built(config(group("a")))
    assert clusters.match(cluster, {**config(group("a"), group("b")), "rayVersion": "2.47.0"}) is (
        clusters.Match.NONE
    )


def test_match_none_on_missing_or_garbled_annotations() -> None:
    # The spec of the cluster is changed too, so the fallback comparison cannot match either.
    for notes in ({}, {clusters.HASH_ANNOTATION: "garbage"}):
        cluster = built(config(group("a")))
        cluster["spec"]["rayVersion"] = "2.0.0"
        cluster["metadata"]["annotations"] = notes
        assert clusters.match(cluster, config(group("a"))) is clusters.Match.NONE
        assert clusters.match(cluster, config(group("a"), group("b"))) is clusters.Match.NONE
    cluster = built(config(group("a")))
    cluster["spec"]["rayVersion"] = "2.0.0"
    cluster["metadata"]["annotations"][clusters.NUM_WORKER_GROUPS_ANNOTATION] = "one"
    assert clusters.match(cluster, config(group("a"), group("b"))) is clusters.Match.NONE


def test_match_trusts_the_hash_over_the_spec() -> None:
    # A cluster edited by hand still runs "our" config as far as the hash says (KubeRay too).
    cluster = built(config())
    cluster["spec"]["rayVersion"] = "9.9.9"
    assert clusters.match(cluster, config()) is clusters.Match.EXACT
    # ... and the appended check is by the recorded number of groups.
    cluster = built(config(group("a")))
    cluster["spec"]["workerGroupSpecs"] = []
    assert clusters.match(cluster, config(group("a"), group("b"))) is clusters.Match.APPENDED


def test_match_a_cluster_kuberay_created_by_its_spec() -> None:
    for golden, sample in ((GOLDEN_V1_5, config()), (GOLDEN, config_v1_7())):
        recorded = json.loads(golden.read_text())["raycluster"]
        kuberay_hash = recorded["metadata"]["annotations"][clusters.HASH_ANNOTATION]
        assert kuberay_hash != clusters.spec_hash(sample)
        assert clusters.match(recorded, sample) is clusters.Match.EXACT
        more = {**sample, "workerGroupSpecs": [*sample["workerGroupSpecs"], group("more")]}
        assert clusters.match(recorded, more) is clusters.Match.APPENDED
        assert clusters.match(recorded, {**sample, "rayVersion": "2.47.0"}) is clusters.Match.NONE


def test_match_a_cluster_made_before_tolerations_and_suspend_were_ignored() -> None:
    """Its hash counted them: still EXACT (and APPENDED), even when its spec was changed
    since (Kueue's nodeSelector), so an operator upgrade starts no upgrade."""
    old_config = config(group("a"))
    old_config["suspend"] = False
    old_config["headGroupSpec"]["template"]["spec"]["tolerations"] = [GPU_TOLERATION]
    cluster = built(old_config)
    cluster["metadata"]["annotations"][clusters.HASH_ANNOTATION] = clusters.spec_hash(
        old_config, legacy=True
    )
    cluster["spec"]["headGroupSpec"]["template"]["spec"]["nodeSelector"] = {"pool": "gpu"}
    assert clusters.match(cluster, old_config) is clusters.Match.EXACT
    appended = {**old_config, "workerGroupSpecs": [group("a"), group("b")]}
    assert clusters.match(cluster, appended) is clusters.Match.APPENDED


def test_match_exact_when_only_ignored_fields_changed() -> None:
    cluster = built(config())
    changed = {**config(), "suspend": True}
    changed["workerGroupSpecs"][0]["template"]["spec"]["tolerations"] = [GPU_TOLERATION]
    assert clusters.match(cluster, changed) is clusters.Match.EXACT


def test_match_does_not_modify_its_arguments() -> None:
    cluster, cfg = built(config(group("a"))), config(group("a"), group("b"))
    before = frozen([cluster, cfg])
    clusters.match(cluster, cfg)
    assert frozen([cluster, cfg]) == before


# --- updated_in_place --------------------------------------------------------------------------


def test_updated_in_place_takes_spec_labels_annotations_and_keeps_ours() -> None:
    cluster = built(config(group("a")))
    cluster["metadata"].update({"resourceVersion": "42", "uid": "c-uid", "generation": 3})
    cluster["metadata"]["labels"]["stale"] = "yes"
    cluster["metadata"]["annotations"][clusters.SERVE_CONFIG_ANNOTATION] = "SERVEHASH"
    cluster["metadata"]["annotations"][clusters.DELETE_AFTER_ANNOTATION] = "2026-01-01T00:00:00Z"
    cluster["status"] = {"state": "ready"}
    before = frozen(cluster)
    new_config = config(group("a"), group("b"))
    svc = service(new_config, labels={"team": "a"})

    updated = clusters.updated_in_place(cluster, svc)

    assert frozen(cluster) == before
    meta = updated["metadata"]
    assert updated["spec"] == new_config
    assert meta["labels"] == {
        "team": "a",
        clusters.ORIGINATED_FROM_NAME_LABEL: "rayservice-sample",
        clusters.ORIGINATED_FROM_CRD_LABEL: "RayService",
    }
    assert meta["annotations"][clusters.HASH_ANNOTATION] == clusters.spec_hash(new_config)
    assert meta["annotations"][clusters.NUM_WORKER_GROUPS_ANNOTATION] == "2"
    assert meta["annotations"][clusters.SERVE_CONFIG_ANNOTATION] == "SERVEHASH"
    assert meta["annotations"][clusters.DELETE_AFTER_ANNOTATION] == "2026-01-01T00:00:00Z"
    assert (meta["resourceVersion"], meta["uid"], meta["generation"]) == ("42", "c-uid", 3)
    assert meta["ownerReferences"] == cluster["metadata"]["ownerReferences"]
    assert meta["name"] == "rayservice-sample-abcde"
    assert updated["status"] == {"state": "ready"}
    assert clusters.match(updated, new_config) is clusters.Match.EXACT


def test_updated_in_place_does_not_invent_bookkeeping() -> None:
    updated = clusters.updated_in_place(built(config()), service(config(group(), group("b"))))
    annotations = updated["metadata"]["annotations"]
    assert clusters.SERVE_CONFIG_ANNOTATION not in annotations
    assert clusters.DELETE_AFTER_ANNOTATION not in annotations


def test_updated_in_place_keeps_the_clusters_suspend() -> None:
    """KubeRay v1.7.0 modifyRayCluster: suspend is copied at creation only, then it is
    Kueue's; an in-place update neither sets nor clears it."""
    cluster = built(config())
    cluster["spec"]["suspend"] = True  # Kueue holds it
    updated = clusters.updated_in_place(cluster, service(config(group(), group("b"))))
    assert updated["spec"]["suspend"] is True
    unsuspended = built(config())
    updated = clusters.updated_in_place(
        unsuspended, service({**config(group(), group("b")), "suspend": True})
    )
    assert "suspend" not in updated["spec"]


def test_updated_in_place_copies_deeply() -> None:
    svc = service()
    updated = clusters.updated_in_place(built(config()), svc)
    updated["spec"]["rayVersion"] = "changed"
    assert svc["spec"]["rayClusterConfig"]["rayVersion"] == "2.46.0"


# --- ownership ---------------------------------------------------------------------------------


def test_owned_selector() -> None:
    assert clusters.owned_selector("svc") == (
        "ray.io/originated-from-cr-name=svc,ray.io/originated-from-crd=RayService"
    )


def test_is_owned_by_controller_reference_uid() -> None:
    svc = service()
    cluster = built(config())
    assert objects.is_controlled_by(cluster, svc)
    other = service()
    other["metadata"]["uid"] = "another"
    assert not objects.is_controlled_by(cluster, other)
    cluster["metadata"]["ownerReferences"][0]["controller"] = False
    assert not objects.is_controlled_by(cluster, svc)
    assert not objects.is_controlled_by({"metadata": {}}, svc)
