"""What wakes the RayService controller besides its own objects: a head pod of one of its
clusters turning ready (read through the RayCluster in the cache, no request)."""

from __future__ import annotations

from typing import Any

from controllers.rayservice import setup
from runtime import reconcile
from runtime.cache import informer, store


class Cache:
    """The one thing :func:`setup.head_pod_owner` reads: the RayClusters' store."""

    def __init__(self, *clusters: dict[str, Any]) -> None:
        self.clusters = store.Store()
        for cluster in clusters:
            self.clusters.upsert(cluster)

    def informer(self, resource: Any) -> Any:
        assert resource.kind == "RayCluster"
        return self

    @property
    def store(self) -> store.Store:
        return self.clusters


def cluster(name: str, owner_kind: str = "RayService", controller: bool = True) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {
        "name": name, "namespace": "ns", "resourceVersion": "1", "uid": f"uid-{name}",
        "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": owner_kind, "name": "svc",
                             "uid": "u", "controller": controller}],
    }}  # fmt: skip


def pod(cluster_name: str | None, node_type: str = "head", **status: Any) -> dict[str, Any]:
    labels = {"ray.io/node-type": node_type}
    if cluster_name:
        labels["ray.io/cluster"] = cluster_name
    return {"metadata": {"name": "p", "namespace": "ns", "labels": labels}, "status": status}


def test_a_head_pod_maps_to_the_rayservice_controlling_its_cluster() -> None:
    owner = setup.head_pod_owner(Cache(cluster("svc-abcde"), cluster("lone", "Other")))
    assert list(owner(pod("svc-abcde"))) == [reconcile.Request("ns", "svc")]
    assert list(owner(pod("lone"))) == [], "a cluster no RayService controls"
    assert list(owner(pod("unknown"))) == [], "a cluster not (yet) in the cache"
    assert list(owner(pod(None))) == [], "a pod without the cluster label"


def test_only_a_head_pods_readiness_is_worth_a_pass() -> None:
    created = pod("c", phase="Pending")
    running = pod("c", phase="Running", podIP="198.18.1.9",
                  conditions=[{"type": "Ready", "status": "False"}])  # fmt: skip
    ready = pod("c", phase="Running", podIP="198.18.1.9",
                conditions=[{"type": "Ready", "status": "True"}])  # fmt: skip
    relabelled = {**ready, "metadata": {**ready["metadata"], "annotations": {"a": "b"}}}
    changed = setup.head_readiness_changed
    assert changed(informer.Event("add", created))
    assert changed(informer.Event("update", running, created))
    assert changed(informer.Event("update", ready, running))
    assert not changed(informer.Event("update", relabelled, ready))
    assert changed(informer.Event("delete", ready))
    assert not changed(
        informer.Event("update", pod("c", "worker", phase="Running"), pod("c", "worker"))
    )
