"""controllers.rayservice.setup's wiring: a head pod of one of its clusters turning
Running and Ready wakes the RayService at once (measured on real Ray with
``hack/bench/realray.py``: woken only by the cluster's status, which the RayCluster
controller writes a batching second later, it talked to Serve 1 s late on every
start-up and upgrade); other pod changes do not wake it."""

from __future__ import annotations

from typing import Any

import api.v1 as v1
from controllers.ray import fake as fake_dashboards
from controllers.raycluster import interface as raycluster
from controllers.rayservice import setup
from runtime import manager, reconcile, source
from runtime.cache import informer
from runtime.client import resources
from runtime.testing import fake


def pod(ready: str, node_type: str = "head", cluster: str = "demo-f972o") -> dict[str, Any]:
    return {
        "metadata": {"name": f"{cluster}-{node_type}-x", "namespace": "ns",
                     "labels": {"ray.io/node-type": node_type, "ray.io/cluster": cluster}},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]},
    }  # fmt: skip


def woken(kind: source.Kind, event: informer.Event) -> list[reconcile.Request]:
    if not all(p(event) for p in kind.predicates):
        return []
    return list(kind.handler(event))


async def test_a_head_pod_turning_ready_wakes_its_rayservice_at_once() -> None:
    registry = resources.default_registry.copy()
    v1.add_to_registry(registry)
    mgr = manager.Manager(
        fake.FakeClient(registry, namespaces=["ns"]),
        manager.Options(
            name="rayservice-operator", metrics_bind_address="0", health_probe_bind_address="0"
        ),
    )
    ctrl = setup.setup(mgr, dashboards=fake_dashboards.FakeDashboards(), skip_name_validation=True)
    mgr.cache.informer(v1.RAYCLUSTERS).store.upsert({  # demo's cluster, as the cache has it
        "apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {
            "name": "demo-f972o", "namespace": "ns", "resourceVersion": "1", "uid": "c",
            "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayService",
                                 "name": "demo", "uid": "s", "controller": True}]}})  # fmt: skip
    [pods] = [
        s for s in ctrl._sources if isinstance(s, source.Kind) and s.resource == raycluster.PODS
    ]
    assert pods.delay == 0
    demo = reconcile.Request("ns", "demo")
    assert woken(pods, informer.Event("update", pod("True"), pod("False"))) == [demo]
    assert woken(pods, informer.Event("update", pod("False"), pod("True"))) == [demo]
    assert woken(pods, informer.Event("update", pod("True"), pod("True"))) == []  # no change
    assert woken(pods, informer.Event("add", pod("True"))) == [demo]  # e.g. after a restart
    assert (
        woken(pods, informer.Event("update", pod("True", "worker"), pod("False", "worker"))) == []
    )
    # a cluster no RayService controls (not in the cache): nothing to wake
    mine = pod("True", cluster="standalone")
    assert woken(pods, informer.Event("update", mine, pod("False", cluster="standalone"))) == []
