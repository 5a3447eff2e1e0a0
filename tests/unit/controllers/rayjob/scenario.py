"""A RayJob's world for the reconciler's unit tests: the faithful fake API server, a cache
on it, fake dashboards and a clock the test moves (:class:`Env`).

The RayCluster controller and the Job controller do not run: a test plays them
(:meth:`Env.cluster_ready` gives the cluster its head pod, head Service and
``state: ready``; :meth:`Env.finish_submitter` sets the submitter Job's condition).
"""

from __future__ import annotations

import datetime
import random
from typing import Any

import api.v1 as v1
import controllers.setup
from controllers.ray import fake as fake_dashboards
from controllers.raycluster import interface as raycluster
from controllers.rayjob import plan as plan_
from controllers.rayjob import reconciler as reconciler_
from runtime import events, reconcile
from runtime.cache import cache as cache_
from runtime.client import errors, resources
from runtime.testing import fake

PODS = raycluster.PODS
SERVICES = plan_.SERVICES
JOBS = plan_.JOBS
EVENTS = events.EVENTS_V1
REQUEST = reconcile.Request("ns", "pi")
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
BACKOFF = "Job has reached the specified backoff limit"


def template(name: str) -> dict[str, Any]:
    return {"spec": {"containers": [{
        "name": name, "image": "rayproject/ray:2.60.0",
        "ports": [{"name": "dashboard", "containerPort": 8265}],
    }]}}  # fmt: skip


def rayjob(name: str = "pi", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "entrypoint": "python pi.py",
        "rayClusterSpec": {
            "rayVersion": "2.60.0",
            "headGroupSpec": {"rayStartParams": {}, "template": template("ray-head")},
            "workerGroupSpecs": [{"groupName": "small", "replicas": 1, "minReplicas": 0,
                                  "maxReplicas": 2, "rayStartParams": {},
                                  "template": template("ray-worker")}],
        },
    }  # fmt: skip
    body.update(spec)
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": name, "namespace": "ns"}, "spec": body}  # fmt: skip


class Env:
    def __init__(self, **options: Any) -> None:
        registry = resources.default_registry.copy()
        v1.add_to_registry(registry)
        self.client = fake.FakeClient(registry, namespaces=["ns"])
        self.cache = cache_.Cache(
            self.client,  # type: ignore[arg-type]
            by_resource=controllers.setup.cache_by_resource(),
            debug=True,
        )
        self.recorder = events.Recorder(
            self.client, "test", options=controllers.setup.EVENT_OPTIONS
        )  # type: ignore[arg-type]
        self.dashboards = fake_dashboards.FakeDashboards()
        self.now = T0
        self.reconciler = reconciler_.Reconciler(
            self.client, self.cache, self.recorder, self.dashboards,
            reconciler_.Options(address_mode="pod-ip", plan=plan_.Options(**options)),
            clock=lambda: self.now, rng=random.Random(7),
        )  # fmt: skip
        self.ips = iter(f"198.18.0.{i}" for i in range(1, 250))

    async def synced(self) -> None:
        await self.client.delivered()

    async def reconcile(self, request: reconcile.Request = REQUEST) -> reconcile.Result:
        result = await self.reconciler.reconcile(request)
        await self.synced()
        return result

    def tick(self, seconds: float) -> None:
        self.now += datetime.timedelta(seconds=seconds)

    async def job(self, name: str = "pi") -> dict[str, Any]:
        return await self.client.get(v1.RAYJOBS, "ns", name)

    async def status(self, name: str = "pi") -> dict[str, Any]:
        return dict((await self.job(name)).get("status") or {})

    async def clusters(self) -> list[dict[str, Any]]:
        found = await self.client.list(v1.RAYCLUSTERS, "ns")
        return sorted(found.items, key=lambda c: c["metadata"]["name"])

    async def live_clusters(self) -> list[str]:
        return [c["metadata"]["name"] for c in await self.clusters()
                if not c["metadata"].get("deletionTimestamp")]  # fmt: skip

    async def cluster_ready(self, name: str, *, with_head: bool = True) -> None:
        """What the RayCluster controller and kubelet would do: a Running head pod, the
        head Service, ``state: ready``."""
        cluster = await self.client.get(v1.RAYCLUSTERS, "ns", name)
        owner = [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": name,
                  "uid": cluster["metadata"]["uid"], "controller": True}]  # fmt: skip
        if with_head:
            pod = await self.client.create({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"{name}-head-x", "namespace": "ns", "labels": {
                    "ray.io/cluster": name, "ray.io/node-type": "head"},
                    "ownerReferences": owner},
                "spec": {"containers": [{"name": "ray-head", "image": "ray"}]},
            })  # fmt: skip
            pod["status"] = {"phase": "Running", "podIP": next(self.ips),
                             "conditions": [{"type": "Ready", "status": "True"}]}  # fmt: skip
            await self.client.update_status(pod)
        await self.client.create({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"{name}-head-svc", "namespace": "ns", "ownerReferences": owner},
            "spec": {"selector": {"ray.io/cluster": name, "ray.io/node-type": "head"},
                     "ports": [{"name": "dashboard", "port": 8265}]},
        })  # fmt: skip
        cluster["status"] = {"state": "ready", "readyWorkerReplicas": 1}
        await self.client.update_status(cluster)
        await self.synced()

    async def finish_submitter(self, condition: str = "Complete", name: str = "pi") -> None:
        """What the Job controller would write when the submitter's pod ended."""
        job = await self.client.get(JOBS, "ns", name)
        job["status"] = {"conditions": [{
            "type": condition, "status": "True",
            "lastTransitionTime": self.now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "reason": "BackoffLimitExceeded" if condition == "Failed" else "Completed",
            "message": BACKOFF if condition == "Failed" else "",
        }]}  # fmt: skip
        await self.client.update_status(job)
        await self.synced()

    def fake(self, cluster: str) -> fake_dashboards.FakeDashboard:
        return self.dashboards.for_cluster("ns", cluster)

    def writes(self, kind: str | None = None, sub: str | None = None) -> int:
        return sum(
            1 for verb, resource, subresource in self.client.calls
            if verb in ("create", "update", "patch", "delete")
            and not resource.startswith("events")
            and (kind is None or resource.startswith(kind))
            and (sub is None or subresource == sub)
        )  # fmt: skip

    def status_writes(self) -> int:
        return self.writes("rayjobs", "status")

    async def events(self) -> list[str]:
        await self.recorder.flush()
        found = await self.client.list(EVENTS, "ns")
        return [e.get("reason", "") for e in found.items]

    async def gone(self, resource: Any, name: str) -> bool:
        try:
            await self.client.get(resource, "ns", name)
        except errors.NotFound:
            return True
        return False
