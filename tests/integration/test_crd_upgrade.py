"""Our CRDs replace KubeRay v1.5.0's in place, on a cluster that once stored ``ray.io/v1alpha1``.

The story a KubeRay user lives through, on a private control plane (etcd and
kube-apiserver only: CRDs are cluster-scoped, so the session's shared control
plane is left alone, and nothing needs restoring afterwards):

1. KubeRay's CRDs come from its Go module (``hack/peers/kuberay.sh --crds``,
   which downloads the module on a bare machine and builds nothing).
2. The cluster ran an old KubeRay first (v0.6 and older stored ``v1alpha1``):
   KubeRay v1.5.0's CRDs with the storage flag moved to ``v1alpha1`` are
   created and objects are created through ``v1alpha1`` (etcd holds them so).
   Then KubeRay v1.5.0's own CRDs replace those (``kubectl replace``, as its
   ``make install`` does when they exist), which makes ``status.storedVersions``
   ``[v1alpha1, v1]`` the way a real cluster gets there, not by a patch. More
   objects are created through ``v1``, as a KubeRay v1.5.0 user would.
3. ``kubectl apply --server-side --force-conflicts -f config/crd/bases``:
   KubeRay's CRDs are too big for client-side apply, and whoever installed them
   owns ``spec.versions``, so a plain server-side apply stops at a conflict.
   Afterwards our CRDs are stored as generated, every object reads back through
   ``v1`` with its spec unchanged (those etcd still holds as ``v1alpha1``
   included), and ``kubectl get -o wide`` shows KubeRay's columns.

Without the ``v1alpha1`` listing the API server refuses our CRDs
(``test_a_crd_without_v1alpha1_is_refused``).
"""

from __future__ import annotations

import copy
import functools
import json
import pathlib
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

import api.v1 as v1
from runtime.testing import controlplane
from tests.integration import helpers

ROOT = pathlib.Path(__file__).parents[2]
OURS = ROOT / "config/crd/bases"
PLURAL = {"RayCluster": "rayclusters", "RayService": "rayservices"}
PLURALS = tuple(PLURAL.values())
NAMESPACE = "default"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
REFUSAL = (
    'status.storedVersions[0]: Invalid value: "v1alpha1": missing from spec.versions; '
    "v1alpha1 was previously a storage version"
)


def kuberay_crd_dir() -> pathlib.Path:
    done = subprocess.run(
        [str(ROOT / "hack/peers/kuberay.sh"), "--crds"],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"hack/peers/kuberay.sh --crds failed:\n{done.stderr}"
    return pathlib.Path(done.stdout.strip().splitlines()[-1])


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # KubeRay's CRDs are ~1 MB each


def load(path: pathlib.Path) -> dict[str, Any]:
    docs = [doc for doc in yaml.load_all(path.read_text(), Loader=_LOADER) if doc]
    assert len(docs) == 1, path
    doc: dict[str, Any] = docs[0]
    return doc


class Cluster:
    """A private control plane with kubectl, as the KubeRay user found it."""

    def __init__(self, cp: controlplane.ControlPlane, bin_dir: pathlib.Path) -> None:
        self.cp = cp
        self.bin_dir = bin_dir
        self.kubectl = [str(bin_dir / "kubectl"), "--kubeconfig", str(cp.kubeconfig)]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.kubectl, *args], capture_output=True, text=True, timeout=120, check=False
        )

    def ok(self, *args: str) -> str:
        done = self.run(*args)
        assert done.returncode == 0, f"kubectl {' '.join(args)}:\n{done.stderr}"
        return done.stdout

    def crd(self, plural: str) -> dict[str, Any]:
        crd: dict[str, Any] = self.cp.request("GET", f"{CRD_PATH}/{plural}.ray.io")
        return crd

    def established(self, plural: str) -> bool:
        conditions = self.crd(plural).get("status", {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    def get(self, version: str, plural: str, name: str) -> dict[str, Any] | None:
        path = f"/apis/ray.io/{version}/namespaces/{NAMESPACE}/{plural}/{name}"
        try:
            obj: dict[str, Any] = self.cp.request("GET", path)
        except controlplane.ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return obj

    def unserved(self, version: str, plural: str) -> bool:
        try:
            self.cp.request("GET", f"/apis/ray.io/{version}/namespaces/{NAMESPACE}/{plural}")
        except controlplane.ApiError as exc:
            if exc.status == 404:
                return True
            raise
        return False

    def in_etcd(self, plural: str, name: str) -> dict[str, Any]:
        """The object as etcd holds it (CRD objects are stored as JSON)."""
        done = subprocess.run(
            [str(self.bin_dir / "etcdctl"), f"--endpoints=http://127.0.0.1:{self.cp.etcd_port}",
             "get", f"/registry/ray.io/{plural}/{NAMESPACE}/{name}", "--print-value-only"],
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        stored: dict[str, Any] = json.loads(done.stdout)
        return stored


def old_kuberay(crd: dict[str, Any]) -> dict[str, Any]:
    """KubeRay's CRD as a cluster on an old KubeRay had it: ``v1alpha1`` is the storage version."""
    old = copy.deepcopy(crd)
    for version in old["spec"]["versions"]:
        version["storage"] = version["name"] == "v1alpha1"
    return old


def samples(kuberay: pathlib.Path) -> dict[str, dict[str, Any]]:
    """KubeRay v1.5.0's own samples: two RayClusters and a RayService."""
    module = kuberay.parents[2]
    cluster = load(module / "config/samples/ray-cluster.sample.yaml")
    complete = load(module / "config/samples/ray-cluster.complete.yaml")
    service = load(module / "config/samples/ray-service.sample.yaml")
    return {"cluster": cluster, "complete": complete, "service": service}


def create(cluster: Cluster, obj: dict[str, Any], name: str, version: str) -> dict[str, Any]:
    body = copy.deepcopy(obj)
    body["apiVersion"] = f"ray.io/{version}"
    body["metadata"] = {"name": name, "namespace": NAMESPACE}
    plural = PLURAL[body["kind"]]
    created: dict[str, Any] = cluster.cp.request(
        "POST", f"/apis/ray.io/{version}/namespaces/{NAMESPACE}/{plural}", body
    )
    return created


@pytest.fixture(scope="module")
def kuberay() -> pathlib.Path:
    return kuberay_crd_dir()


@pytest.fixture(scope="module")
def upgraded(
    bin_dir: pathlib.Path, kuberay: pathlib.Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Cluster, dict[str, dict[str, Any]]]]:
    """A private control plane upgraded from an old KubeRay (v1alpha1 storage) to v1.5.0,
    with objects from both eras; yields it and the objects as created (by name)."""
    work = tmp_path_factory.mktemp("crd-upgrade")
    given = samples(kuberay)
    with controlplane.running(controlplane.Options(bin_dir=bin_dir)) as cp:
        cluster = Cluster(cp, bin_dir)
        for plural in PLURALS:
            old = work / f"old-{plural}.json"
            old.write_text(json.dumps(old_kuberay(load(kuberay / f"ray.io_{plural}.yaml"))))
            cluster.ok("create", "-f", str(old))
        for plural in PLURALS:
            helpers.eventually_sync(
                functools.partial(cluster.established, plural), 60.0, f"{plural} established"
            )

        created = {}
        for name, sample in [("cluster-old", "cluster"), ("service-old", "service")]:
            created[name] = helpers.eventually_sync(
                functools.partial(try_create, cluster, given[sample], name, "v1alpha1"),
                60.0,
                f"{name} stored as v1alpha1",
            )

        # The upgrade to KubeRay v1.5.0: storage moves to v1, old objects stay as they are.
        cluster.ok("replace", "-f", str(kuberay / "ray.io_rayclusters.yaml"),
                   "-f", str(kuberay / "ray.io_rayservices.yaml"))  # fmt: skip
        for plural in PLURALS:
            assert cluster.crd(plural)["status"]["storedVersions"] == ["v1alpha1", "v1"]
        for name, sample in [("cluster-new", "cluster"), ("complete-new", "complete"),
                             ("service-new", "service")]:  # fmt: skip
            created[name] = helpers.eventually_sync(
                functools.partial(try_create, cluster, given[sample], name, "v1"),
                60.0,
                f"{name} stored as v1",
            )
        yield cluster, created


def try_create(
    cluster: Cluster, obj: dict[str, Any], name: str, version: str
) -> dict[str, Any] | None:
    """Create ``obj`` through ``version`` and check that etcd holds it in that version;
    ``None`` (to retry) while the API server's handlers still serve the previous CRD."""
    plural = PLURAL[obj["kind"]]
    try:
        created = create(cluster, obj, name, version)
    except controlplane.ApiError as exc:
        if exc.status == 404:  # the version is not served yet
            return None
        raise
    if cluster.in_etcd(plural, name)["apiVersion"] != f"ray.io/{version}":
        # written by a handler that still had the previous storage version
        cluster.cp.request("DELETE", f"/apis/ray.io/v1/namespaces/{NAMESPACE}/{plural}/{name}")
        return None
    return created


API_DEFAULTS = {"RayService": {"rayClusterDeletionDelaySeconds": 60}}
"""Top-level spec defaults our CRD declares and KubeRay's does not (KubeRay applies the
same value in code): the API server adds them when it reads an object stored as v1
(an object still stored as v1alpha1 is read with that version's schema: no defaults)."""


def expected_spec(before: dict[str, Any], stored_as_v1: bool) -> dict[str, Any]:
    if not stored_as_v1:
        return dict(before["spec"])
    return {**API_DEFAULTS.get(before["kind"], {}), **before["spec"]}


def strip_legacy(crd: dict[str, Any]) -> dict[str, Any]:
    stripped = copy.deepcopy(crd)
    stripped["spec"]["versions"] = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return stripped


def test_a_crd_without_v1alpha1_is_refused(
    upgraded: tuple[Cluster, dict[str, dict[str, Any]]], tmp_path: pathlib.Path
) -> None:
    cluster, _ = upgraded
    for plural in PLURALS:
        ours = load(OURS / f"ray.io_{plural}.yaml")
        assert [v["name"] for v in ours["spec"]["versions"]] == ["v1", "v1alpha1"]
        path = tmp_path / f"{plural}.yaml"
        path.write_text(yaml.safe_dump(strip_legacy(ours)))
        done = cluster.run("apply", "--server-side", "--force-conflicts", "-f", str(path))
        assert done.returncode != 0
        assert REFUSAL in done.stderr, done.stderr
        assert cluster.crd(plural)["status"]["storedVersions"] == ["v1alpha1", "v1"]


def test_our_crds_replace_kuberays_in_place(
    upgraded: tuple[Cluster, dict[str, dict[str, Any]]], kuberay: pathlib.Path
) -> None:
    cluster, created = upgraded
    # Whoever installed KubeRay's CRDs (here `kubectl replace`) owns spec.versions: a plain
    # server-side apply stops at a conflict.
    done = cluster.run("apply", "--server-side", "-f", str(OURS))
    assert done.returncode != 0
    assert 'conflict with "kubectl-replace"' in done.stderr, done.stderr
    assert ".spec.versions" in done.stderr, done.stderr

    out = cluster.ok("apply", "--server-side", "--force-conflicts", "-f", str(OURS))
    assert out.count("serverside-applied") == len(list(OURS.glob("*.yaml"))), out
    for plural in PLURALS:
        ours = load(OURS / f"ray.io_{plural}.yaml")
        stored = cluster.crd(plural)
        # spec.versions is an atomic list: replaced whole, nothing of KubeRay's schemas left.
        assert stored["spec"]["versions"] == ours["spec"]["versions"]
        assert stored["spec"]["names"] == ours["spec"]["names"]
        assert stored["status"]["storedVersions"] == ["v1alpha1", "v1"]
        # KubeRay serves v1alpha1, we do not: once that shows, our CRD is the one served.
        helpers.eventually_sync(
            functools.partial(cluster.unserved, "v1alpha1", plural),
            60.0,
            f"ray.io/v1alpha1 {plural} no longer served",
        )

    # Every object reads back through v1 with its spec unchanged, those still held in
    # etcd as v1alpha1 (no storage migration ran) included.
    assert cluster.in_etcd("rayclusters", "cluster-old")["apiVersion"] == "ray.io/v1alpha1"
    for name, before in created.items():
        plural = PLURAL[before["kind"]]
        after = cluster.get("v1", plural, name)
        assert after is not None, name
        assert after["apiVersion"] == "ray.io/v1"
        assert after["spec"] == expected_spec(before, name.endswith("-new")), name
        assert after["metadata"]["uid"] == before["metadata"]["uid"]

    # The columns are KubeRay's, and they show the status a KubeRay user expects.
    for plural in PLURALS:
        theirs = load(kuberay / f"ray.io_{plural}.yaml")["spec"]["versions"]
        (their_v1,) = [v for v in theirs if v["name"] == "v1"]
        (our_v1,) = [v for v in load(OURS / f"ray.io_{plural}.yaml")["spec"]["versions"]
                     if v["name"] == "v1"]  # fmt: skip
        assert our_v1["additionalPrinterColumns"] == their_v1["additionalPrinterColumns"]
    cluster.cp.request(
        "PATCH", f"{v1.RAYCLUSTERS.path(NAMESPACE, 'cluster-new')}/status",
        {"status": {"state": "ready", "desiredWorkerReplicas": 1, "availableWorkerReplicas": 1,
                    "desiredCPU": "2", "desiredMemory": "3G", "desiredGPU": "0",
                    "desiredTPU": "0", "head": {"podIP": "198.18.1.7",
                                                "serviceIP": "198.19.0.12"}}},
        content_type="application/merge-patch+json",
    )  # fmt: skip
    table = cluster.ok("get", "rayclusters", "cluster-new", "-n", NAMESPACE, "-o", "wide")
    header, row = (line.split() for line in table.splitlines())
    assert " ".join(header) == (
        "NAME DESIRED WORKERS AVAILABLE WORKERS CPUS MEMORY GPUS TPUS STATUS AGE "
        "HEAD POD IP HEAD SERVICE IP"
    )
    assert row[:7] == ["cluster-new", "1", "1", "2", "3G", "0", "0"]
    assert (row[7], row[9:]) == ("ready", ["198.18.1.7", "198.19.0.12"])
    cluster.cp.request(
        "PATCH",
        f"{v1.RAYSERVICES.path(NAMESPACE, 'service-new')}/status",
        {"status": {"serviceStatus": "Running", "numServeEndpoints": 2}},
        content_type="application/merge-patch+json",
    )
    table = cluster.ok("get", "rayservices", "service-new", "-n", NAMESPACE)
    assert [line.split() for line in table.splitlines()] == [
        ["NAME", "SERVICE", "STATUS", "NUM", "SERVE", "ENDPOINTS"],
        ["service-new", "Running", "2"],
    ]
