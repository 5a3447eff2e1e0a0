"""The shape of the KubeRay v1.7.0 golden data (``tests/unit/testdata/kuberay-v1.7.0/``).

Those files are written by ``hack/golden/kuberay_objects.py`` from KubeRay itself; tests of our
builders compare against them. This module checks only that the data is what that script
promises: one canonical JSON file per sample, the agreed keys, a RayCluster as stored without
server bookkeeping, and created objects that belong to it (namespace, owner, labels, counts),
with nothing volatile (uids, random names, generated tokens) left in. The incremental-upgrade
sample, recorded with its head served, also holds the Gateway and the HTTPRoute. The RayJob
samples' files, in ``rayjob/``, also hold the RayJob as stored and what it controls (the
submitter Job, ``<rayjob>-head-svc``).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.unit import helpers

VERSION = "v1.7.0"
DATA = helpers.TESTDATA / f"kuberay-{VERSION}"

SAMPLES = {
    "ray-cluster.sample": "config/samples/ray-cluster.sample.yaml",
    "ray-cluster.complete": "config/samples/ray-cluster.complete.yaml",
    "ray-cluster.autoscaler": "config/samples/ray-cluster.autoscaler.yaml",
    "ray-cluster.autoscaler-v2": "config/samples/ray-cluster.autoscaler-v2.yaml",
    "ray-cluster.head-command": "config/samples/ray-cluster.head-command.yaml",
    "ray-cluster.overwrite-command": "config/samples/ray-cluster.overwrite-command.yaml",
    "ray-cluster.tpu-v4-multihost": "config/samples/ray-cluster.tpu-v4-multihost.yaml",
    "ray-cluster.custom-head-service": "config/samples/ray-cluster.custom-head-service.yaml",
    "ray-service.sample": "config/samples/ray-service.sample.yaml",
    "ray-service.incremental-upgrade": "config/samples/ray-service.incremental-upgrade.yaml",
    "ray-cluster.external-redis": "config/samples/ray-cluster.external-redis.yaml",
    "ray-cluster.deprecate-gcs-ft": "config/samples/ray-cluster.deprecate-gcs-ft.yaml",
    "ray-cluster.auth": "config/samples/ray-cluster.auth.yaml",
    "ray_v1_raycluster": "config/samples/ray_v1_raycluster.yaml",
    "ray_v1_rayservice": "config/samples/ray_v1_rayservice.yaml",
}
"""File stem -> the ``source`` it records (top level)."""

RAYJOB_DATA = DATA / "rayjob"
RAYJOB_SAMPLES = {
    "ray-job.sample": "config/samples/ray-job.sample.yaml",
    "ray-job.shutdown": "config/samples/ray-job.shutdown.yaml",
    "ray-job.resources": "config/samples/ray-job.resources.yaml",
    "ray-job.custom-head-svc": "config/samples/ray-job.custom-head-svc.yaml",
    "ray-job.light-weight-submitter": "config/samples/ray-job.light-weight-submitter.yaml",
    "ray-job.deletion-rules": "config/samples/ray-job.deletion-rules.yaml",
    "ray-job.sidecar-mode": "config/samples/ray-job.sidecar-mode.yaml",
    "ray_v1_rayjob": "config/samples/ray_v1_rayjob.yaml",
}
"""File stem -> ``source``, of the RayJob samples (in ``rayjob/``)."""
ALL_SAMPLES = {**SAMPLES, **RAYJOB_SAMPLES}
RAYJOB_KINDS = {"jobs", "services"}
RAYJOB_STATUS = {"jobId", "rayClusterName", "dashboardURL"}
SIDECAR = "ray-job.sidecar-mode"
RECREATE_HASH = "ray.io/upgrade-strategy-recreate-hash"

CREATED_KINDS = {"pods", "services", "serviceaccounts", "roles", "rolebindings", "secrets"}
GATEWAY_KINDS = {"gateways", "httproutes"}
INCREMENTAL = "ray-service.incremental-upgrade"
"""The one sample recorded with its head served (a RayService with an incremental upgrade)."""
SERVER_FIELDS = {"managedFields", "uid", "resourceVersion", "creationTimestamp", "generation"}
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def path_of(stem: str) -> Any:
    return (RAYJOB_DATA if stem in RAYJOB_SAMPLES else DATA) / f"{stem}.json"


def load(stem: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path_of(stem).read_text())
    return document


def worker_pods(spec: dict[str, Any]) -> int:
    """Per group: replicas held within [min, max] (0 when suspended), times numOfHosts."""
    total = 0
    for group in spec.get("workerGroupSpecs") or []:
        if group.get("suspend"):
            continue
        low, high = group.get("minReplicas", 0), group.get("maxReplicas", 2**31 - 1)
        desired = high if low > high else min(max(group.get("replicas", low), low), high)
        total += desired * max(group.get("numOfHosts", 1), 1)
    return total


def test_one_file_per_sample() -> None:
    top = sorted(p.name for p in DATA.iterdir() if p.is_file())
    assert top == sorted(f"{s}.json" for s in SAMPLES)
    assert [p.name for p in DATA.iterdir() if p.is_dir()] == ["rayjob"]
    rayjobs = sorted(p.name for p in RAYJOB_DATA.iterdir())
    assert rayjobs == sorted(f"{s}.json" for s in RAYJOB_SAMPLES)


@pytest.mark.parametrize("stem", sorted(ALL_SAMPLES))
def test_file_is_canonical_json_with_the_agreed_keys(stem: str) -> None:
    text = path_of(stem).read_text()
    document = json.loads(text)
    assert text == json.dumps(document, indent=1, sort_keys=True) + "\n"
    keys = {"source", "kuberay_version", "raycluster", "created"}
    if stem in RAYJOB_SAMPLES:
        keys |= {"rayjob", "rayjob_created"}
        assert set(document["rayjob_created"]) == RAYJOB_KINDS
    assert set(document) == keys
    assert document["source"] == ALL_SAMPLES[stem]
    assert document["kuberay_version"] == VERSION
    kinds = CREATED_KINDS | GATEWAY_KINDS if stem == INCREMENTAL else CREATED_KINDS
    assert set(document["created"]) == kinds
    assert all(isinstance(v, list) for v in document["created"].values())
    assert UUID.search(text) is None, "a uid was left in"


@pytest.mark.parametrize("stem", sorted(ALL_SAMPLES))
def test_raycluster_is_as_stored_without_server_fields(stem: str) -> None:
    cluster = load(stem)["raycluster"]
    assert (cluster["apiVersion"], cluster["kind"]) == ("ray.io/v1", "RayCluster")
    assert "status" not in cluster
    assert not SERVER_FIELDS & set(cluster["metadata"])
    assert cluster["metadata"]["namespace"]
    # CRD defaults were applied by the API server: every group has numOfHosts.
    assert all("numOfHosts" in g for g in cluster["spec"].get("workerGroupSpecs", []))


@pytest.mark.parametrize("stem", sorted(ALL_SAMPLES))
def test_created_objects_belong_to_the_raycluster(stem: str) -> None:
    """Each is controlled by the RayCluster, except a served RayService's own objects (its
    head Service, Gateway and HTTPRoute), controlled by the RayService (a RayJob's own are
    not in ``created``)."""
    document = load(stem)
    name = document["raycluster"]["metadata"]["name"]
    namespace = document["raycluster"]["metadata"]["namespace"]
    [service] = document["raycluster"]["metadata"].get("ownerReferences") or [{"name": None}]
    rayservice = service["name"]
    for kind, objects in document["created"].items():
        for obj in objects:
            meta = obj["metadata"]
            assert meta["namespace"] == namespace, (kind, meta)
            [owner] = meta["ownerReferences"]
            own = {f"{rayservice}-head-svc", f"{rayservice}-gateway", f"{rayservice}-httproute"}
            if stem == INCREMENTAL and meta.get("name") in own:
                assert (owner["kind"], owner["name"]) == ("RayService", rayservice)
            else:
                assert (owner["kind"], owner["name"]) == ("RayCluster", name)
            assert owner["uid"] == "<uid>"
            assert owner["controller"] is True
            assert not {"uid", "resourceVersion", "creationTimestamp"} & set(meta)


@pytest.mark.parametrize("stem", sorted(ALL_SAMPLES))
def test_pods_are_the_head_then_every_worker_in_group_order(stem: str) -> None:
    document = load(stem)
    cluster = document["raycluster"]
    name = cluster["metadata"]["name"]
    pods = document["created"]["pods"]
    types = [p["metadata"]["labels"]["ray.io/node-type"] for p in pods]
    assert types == ["head"] + ["worker"] * worker_pods(cluster["spec"])
    assert all(p["metadata"]["labels"]["ray.io/cluster"] == name for p in pods)
    assert pods[0]["metadata"]["generateName"] == f"{name}-head-"
    groups = [p["metadata"]["labels"]["ray.io/group"] for p in pods[1:]]
    assert groups == sorted(groups)
    known = {g["groupName"] for g in cluster["spec"].get("workerGroupSpecs", [])}
    assert set(groups) <= known
    for pod in pods[1:]:
        group = pod["metadata"]["labels"]["ray.io/group"]
        assert pod["metadata"]["generateName"] == f"{name}-{group}-worker-"


@pytest.mark.parametrize("stem", sorted(ALL_SAMPLES))
def test_head_service_and_autoscaler_rbac_are_there_when_expected(stem: str) -> None:
    document = load(stem)
    cluster = document["raycluster"]
    name = cluster["metadata"]["name"]
    custom = cluster["spec"]["headGroupSpec"].get("headService", {}).get("metadata", {})
    head_service = custom.get("name", f"{name}-head-svc")
    services = [s["metadata"]["name"] for s in document["created"]["services"]]
    assert head_service in services
    rbac = [
        [o["metadata"]["name"] for o in document["created"][kind]]
        for kind in ("serviceaccounts", "roles", "rolebindings")
    ]
    if cluster["spec"].get("enableInTreeAutoscaling"):
        assert rbac == [[name], [name], [name]]
    else:
        assert rbac == [[], [], []]


def test_rayservice_cluster_name_has_its_random_suffix_replaced() -> None:
    document = load("ray-service.sample")
    meta = document["raycluster"]["metadata"]
    assert meta["name"] == "rayservice-sample-xxxxx"
    assert meta["labels"]["ray.io/originated-from-crd"] == "RayService"
    [owner] = meta["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "RayService",
        "rayservice-sample",
        "<uid>",
    )


def test_the_served_incremental_sample_has_its_gateway_route_and_serve_services() -> None:
    """KubeRay served it (the simulator answered at its head) and promoted its cluster: the
    head Service of the RayService, the Gateway and the HTTPRoute to the one cluster's own
    serve Service; no ``<rayservice>-serve-svc`` (with an incremental upgrade KubeRay's
    RayService serve Service is the per-cluster one)."""
    document = load(INCREMENTAL)
    cluster = document["raycluster"]["metadata"]["name"]
    assert cluster == "rayservice-incremental-upgrade-xxxxx"
    created = document["created"]
    assert [s["metadata"]["name"] for s in created["services"]] == [
        "rayservice-incremental-upgrade-head-svc",
        f"{cluster}-head-svc",
        f"{cluster}-serve-svc",
    ]
    [gateway] = created["gateways"]
    [route] = created["httproutes"]
    assert gateway["metadata"]["name"] == "rayservice-incremental-upgrade-gateway"
    assert route["metadata"]["name"] == "rayservice-incremental-upgrade-httproute"
    [rule] = route["spec"]["rules"]
    assert [(b["name"], b["weight"]) for b in rule["backendRefs"]] == [
        (f"{cluster}-serve-svc", 100)
    ]
    for stem in SAMPLES:
        if stem != INCREMENTAL:
            assert not GATEWAY_KINDS & set(load(stem)["created"]), stem


def test_generated_secrets_are_redacted() -> None:
    """Only the token-auth sample makes KubeRay create a Secret; its token is not kept."""
    for stem in ALL_SAMPLES:
        secrets = load(stem)["created"]["secrets"]
        if stem == "ray-cluster.auth":
            [secret] = secrets
            assert secret["metadata"]["name"] == "ray-cluster-with-auth"
            assert secret["data"] == {"auth_token": "<random>"}
        else:
            assert secrets == [], stem


def test_multi_host_replica_names_are_stable() -> None:
    pods = load("ray-cluster.tpu-v4-multihost")["created"]["pods"][1:]
    labels = [p["metadata"]["labels"] for p in pods]
    assert [lb["ray.io/worker-group-replica-name"] for lb in labels] == ["tpu-group-xxxx0"] * 2
    assert [lb["ray.io/replica-host-index"] for lb in labels] == ["0", "1"]


@pytest.mark.parametrize("stem", ["ray-cluster.external-redis", "ray-cluster.deprecate-gcs-ft"])
def test_gcs_ft_storage_namespace_is_the_cluster_uid_placeholder(stem: str) -> None:
    document = load(stem)
    assert document["raycluster"]["metadata"]["finalizers"] == [
        "ray.io/gcs-ft-redis-cleanup-finalizer"
    ]
    head = document["created"]["pods"][0]
    assert head["metadata"]["annotations"]["ray.io/external-storage-namespace"] == "<uid>"


# --- the RayJob samples ---------------------------------------------------------------------


@pytest.mark.parametrize("stem", sorted(RAYJOB_SAMPLES))
def test_rayjob_is_as_stored_with_the_names_kuberay_chose(stem: str) -> None:
    """The RayJob without server bookkeeping, of its status only the names KubeRay chose,
    the random suffixes as placeholders: the cluster ``xxxxx``, the submission id ``yyyyy``."""
    document = load(stem)
    rayjob = document["rayjob"]
    assert (rayjob["apiVersion"], rayjob["kind"]) == ("ray.io/v1", "RayJob")
    meta = rayjob["metadata"]
    assert not SERVER_FIELDS & set(meta)
    assert meta["finalizers"] == ["ray.io/rayjob-finalizer"]
    assert meta["namespace"] == document["raycluster"]["metadata"]["namespace"]
    # CRD defaults were applied by the API server
    assert rayjob["spec"]["submissionMode"] in {"K8sJobMode", "SidecarMode"}
    status = rayjob["status"]
    assert set(status) == RAYJOB_STATUS
    name = meta["name"]
    assert status["rayClusterName"] == f"{name}-xxxxx" == document["raycluster"]["metadata"]["name"]
    assert status["jobId"] == f"{name}-yyyyy"
    namespace = meta["namespace"]
    assert status["dashboardURL"].endswith(f".{namespace}.svc.cluster.local:8265")


@pytest.mark.parametrize("stem", sorted(RAYJOB_SAMPLES))
def test_rayjob_created_its_head_service_and_in_k8s_job_mode_its_submitter(stem: str) -> None:
    document = load(stem)
    rayjob = document["rayjob"]
    name, namespace = rayjob["metadata"]["name"], rayjob["metadata"]["namespace"]
    own = document["rayjob_created"]
    assert [s["metadata"]["name"] for s in own["services"]] == [f"{name}-head-svc"]
    k8s_job = rayjob["spec"]["submissionMode"] == "K8sJobMode"
    assert [j["metadata"]["name"] for j in own["jobs"]] == ([name] if k8s_job else [])
    for obj in own["services"] + own["jobs"]:
        assert obj["metadata"]["namespace"] == namespace
        [owner] = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("RayJob", name, "<uid>")
        assert owner["controller"] is True
    [owner] = document["raycluster"]["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("RayJob", name)
    [service] = own["services"]
    assert service["spec"]["selector"]["ray.io/cluster"] == f"{name}-xxxxx"


def test_only_a_sidecar_head_has_its_recreate_hash_replaced() -> None:
    """KubeRay's head pod hash covers the head's spec, which in SidecarMode holds the random
    submission id: there it is ``<hash>``; elsewhere it is stable and kept."""
    for stem in RAYJOB_SAMPLES:
        head = load(stem)["created"]["pods"][0]
        value = head["metadata"]["annotations"][RECREATE_HASH]
        assert (value == "<hash>") == (stem == SIDECAR), stem
    head = load(SIDECAR)["created"]["pods"][0]
    assert head["spec"]["containers"][-1]["name"] == "ray-job-submitter"


# --- the recorder's own choices (hack/golden/kuberay_objects.py, loaded from its path) -----


def recorder() -> Any:
    import doctest
    import importlib.util
    import sys

    path = helpers.ROOT / "hack" / "golden" / "kuberay_objects.py"
    spec = importlib.util.spec_from_file_location("kuberay_objects_under_test", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    failed, _ = doctest.testmod(module)
    assert failed == 0
    return module


def test_recorder_takes_binary_crds_and_samples_from_flags_or_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    module = recorder()
    runs: list[tuple[Any, Any]] = []
    only: list[Any] = []

    def run(peer: Any, out: Any, globs: Any) -> None:
        runs.append((peer, out))
        only.append(globs)

    monkeypatch.setattr(module, "run", run)
    monkeypatch.setenv("KUBERAY_BIN", "/env/bin")
    monkeypatch.setenv("KUBERAY_CRDS", "/env/crds")
    monkeypatch.delenv("KUBERAY_SAMPLES", raising=False)
    monkeypatch.delenv("KUBERAY_VERSION", raising=False)
    assert module.main(["--kuberay-samples", str(tmp_path)]) == 0
    peer, out = runs[-1]
    assert peer.version == VERSION == module.KUBERAY_VERSION
    assert (str(peer.binary), str(peer.crds), peer.samples) == ("/env/bin", "/env/crds", tmp_path)
    assert out == helpers.TESTDATA / f"kuberay-{VERSION}"
    assert module.main(["--kuberay-bin", "/flag/bin", "--kuberay-version", "v1.5.0"]) == 0
    peer, out = runs[-1]
    assert (str(peer.binary), peer.version, out.name) == ("/flag/bin", "v1.5.0", "kuberay-v1.5.0")
    assert only == [[], []]
    assert module.main(["--only", "ray-job.*", "--only", "ray_v1_rayjob"]) == 0
    assert only[-1] == ["ray-job.*", "ray_v1_rayjob"]


def test_recorder_sample_lists_per_version() -> None:
    module = recorder()
    assert set(module.SAMPLES["v1.5.0"]) < set(module.SAMPLES["v1.7.0"])
    recorded = {f"config/samples/{n}" for n in module.SAMPLES["v1.7.0"]}
    recorded |= set(module.OWN_SAMPLES["v1.7.0"])
    served = {f"config/samples/{n}" for n in module.SERVED_SAMPLES["v1.7.0"]}
    assert served == {SAMPLES[INCREMENTAL]}
    assert not recorded & served
    assert recorded | served == set(ALL_SAMPLES.values())
    assert set(module.GATEWAY_KINDS) == GATEWAY_KINDS
    assert set(module.CREATED_KINDS) == CREATED_KINDS


def test_recorder_audits_the_gateway_api_creates() -> None:
    module = recorder()
    [rule, _] = module.AUDIT_POLICY["rules"]
    groups = {r["group"]: set(r["resources"]) for r in rule["resources"]}
    assert groups["gateway.networking.k8s.io"] == GATEWAY_KINDS
    assert groups[""] == {"pods", "services", "serviceaccounts", "secrets"}
    assert groups["batch"] == {"jobs"}  # a RayJob's submitter


def test_recorder_gives_gateway_kinds_to_an_incremental_rayservice_only(tmp_path: Any) -> None:
    module = recorder()
    body = {"apiVersion": "ray.io/v1", "metadata": {"name": "s"}, "spec": {}}
    plain = tmp_path / "plain.yaml"
    plain.write_text(json.dumps({**body, "kind": "RayService"}))
    incremental = tmp_path / "incremental.yaml"
    spec = {"upgradeStrategy": {"type": "NewClusterWithIncrementalUpgrade"}}
    incremental.write_text(json.dumps({**body, "kind": "RayService", "spec": spec}))
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(json.dumps({**body, "kind": "RayCluster", "spec": spec}))
    kinds = {p.stem: module.Sample("x", p).kinds for p in (plain, incremental, cluster)}
    assert kinds["incremental"] == module.CREATED_KINDS + module.GATEWAY_KINDS
    assert kinds["plain"] == kinds["cluster"] == module.CREATED_KINDS


def test_recorder_writes_a_rayjob_sample_under_rayjob_and_knows_its_mode(tmp_path: Any) -> None:
    module = recorder()
    body = {"apiVersion": "ray.io/v1", "metadata": {"name": "j"}, "spec": {}}
    default = tmp_path / "ray-job.default.yaml"
    default.write_text(json.dumps({**body, "kind": "RayJob"}))
    sidecar = tmp_path / "ray-job.sidecar.yaml"
    spec = {"submissionMode": "SidecarMode"}
    sidecar.write_text(json.dumps({**body, "kind": "RayJob", "spec": spec}))
    cluster = tmp_path / "ray-cluster.x.yaml"
    cluster.write_text(json.dumps({**body, "kind": "RayCluster"}))
    samples = [module.Sample("x", p) for p in (default, sidecar, cluster)]
    assert [s.submission_mode for s in samples] == ["K8sJobMode", "SidecarMode", None]
    out = [module.output_path(tmp_path, s).relative_to(tmp_path).as_posix() for s in samples]
    assert out == [
        "rayjob/ray-job.default.json",
        "rayjob/ray-job.sidecar.json",
        "ray-cluster.x.json",
    ]
    assert [s.stem for s in module.selected(samples, ["ray-job.*"])] == [
        "ray-job.default",
        "ray-job.sidecar",
    ]
    with pytest.raises(ValueError, match="matches no sample"):
        module.selected(samples, ["nothing*"])
