"""A RayCluster's world for the reconciler's unit tests: the faithful fake API server, a
cache on it and an Event recorder (:class:`Env`), and the RayClusters a test starts from.
Nothing plays kubelet: a test sets pod phases itself (:meth:`Env.set_phase`)."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import api.v1 as v1
import controllers.setup
from controllers.raycluster import pods, services
from controllers.raycluster import reconciler as reconciler_
from runtime import events, reconcile
from runtime.cache import cache as cache_
from runtime.client import resources
from runtime.testing import fake

PODS = pods.PODS
SERVICES = services.SERVICES
EVENTS = events.EVENTS_V1  # the operator writes events.k8s.io/v1 (controllers.setup.EVENT_OPTIONS)
REQUEST = reconcile.Request("ns", "demo")
NOW = "2026-01-01T00:00:00Z"
CLOCK = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
"""The reconciler's clock: :data:`NOW`."""


def template(name: str, cpu: str = "1") -> dict[str, Any]:
    return {
        "spec": {
            "containers": [
                {
                    "name": name,
                    "image": "rayproject/ray:2.60.0",
                    "resources": {"limits": {"cpu": cpu, "memory": "2Gi"}},
                }
            ]
        }
    }


def raycluster(name: str = "demo", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "headGroupSpec": {"rayStartParams": {}, "template": template("ray-head")},
        "workerGroupSpecs": [
            {"groupName": "small", "replicas": 2, "minReplicas": 0, "maxReplicas": 5,
             "rayStartParams": {}, "template": template("ray-worker")},
            {"groupName": "large", "replicas": 1, "minReplicas": 0, "maxReplicas": 5,
             "rayStartParams": {}, "template": template("ray-worker", "4")},
        ],
    }  # fmt: skip
    body.update(spec)
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "namespace": "ns"}, "spec": body}  # fmt: skip


class Env:
    def __init__(self) -> None:
        registry = resources.default_registry.copy()
        v1.add_to_registry(registry)
        self.client = fake.FakeClient(registry, namespaces=["ns"])
        # The cache the binary builds: only Ray pods (controllers.setup.cache_by_resource).
        self.cache = cache_.Cache(
            self.client,  # type: ignore[arg-type]
            by_resource=controllers.setup.cache_by_resource(),
            debug=True,
        )
        self.recorder = events.Recorder(
            self.client, "test", options=controllers.setup.EVENT_OPTIONS
        )  # type: ignore[arg-type]
        self.reconciler = reconciler_.Reconciler(
            self.client, self.cache, self.recorder,
            reconciler_.Options(cluster_domain="cluster.local", random_pod_delete=False),
            clock=lambda: CLOCK,
        )  # fmt: skip

    async def synced(self) -> None:
        """Until the cache has seen every write made so far (the fake's watches delivered)."""
        await self.client.delivered()

    async def reconcile(self, name: str = "demo") -> reconcile.Result:
        result = await self.reconciler.reconcile(reconcile.Request("ns", name))
        await self.synced()  # the watch catches up, as between two real reconciles
        return result

    def status_writes(self) -> int:
        return sum(
            1
            for verb, resource, sub in self.client.calls
            if (verb, sub) == ("update", "status") and resource.startswith("rayclusters")
        )

    async def pods(self, name: str = "demo") -> list[dict[str, Any]]:
        return (await self.client.list(PODS, "ns", label_selector=f"ray.io/cluster={name}")).items

    async def cluster(self, name: str = "demo") -> dict[str, Any]:
        return await self.client.get(v1.RAYCLUSTERS, "ns", name)

    async def set_phase(self, pod: dict[str, Any], phase: str = "Running", ready: bool = True,
                        ip: str = "198.18.0.7") -> None:  # fmt: skip
        pod = copy.deepcopy(await self.client.get(PODS, "ns", pod["metadata"]["name"]))
        pod["status"] = {"phase": phase, "podIP": ip, "conditions": [
            {"type": "Ready", "status": "True" if ready else "False"}]}  # fmt: skip
        await self.client.update_status(pod)

    async def run_all(self, name: str = "demo") -> None:
        for pod in await self.pods(name):
            await self.set_phase(pod)
        await self.synced()

    async def edit(self, name: str = "demo", **spec: Any) -> None:
        current = await self.cluster(name)
        current["spec"].update(spec)
        await self.client.update(current)
        await self.synced()
