"""A RayService's world for the reconciler's unit tests: the faithful fake API server,
a cache on it, fake dashboards and a clock the test moves (:class:`Env`), and the
objects a test starts from.

The RayCluster controller does not run: a test plays it (:meth:`Env.start_head` creates
the head pod a cluster would have, Running and Ready; :meth:`Env.publish_endpoints`
the EndpointSlice kube-controller-manager would publish for the serve service).
"""

from __future__ import annotations

import datetime
from typing import Any

import api.v1 as v1
import controllers.setup
from controllers.ray import fake as fake_dashboards
from controllers.raycluster import interface as raycluster
from controllers.rayservice import clusters, gateway, services
from controllers.rayservice import reconciler as reconciler_
from runtime import events, reconcile
from runtime.cache import cache as cache_
from runtime.client import errors, resources
from runtime.testing import fake

PODS = raycluster.PODS
SERVICES = services.SERVICES
SLICES = services.ENDPOINT_SLICES
EVENTS = events.EVENTS_V1  # the operator writes events.k8s.io/v1 (controllers.setup.EVENT_OPTIONS)
REQUEST = reconcile.Request("ns", "demo")
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)

SERVE_CONFIG = """\
applications:
  - name: fruit
    import_path: fruit:app
    route_prefix: /fruit
  - name: math
    import_path: math_app:app
    route_prefix: /calc
"""


def template(name: str) -> dict[str, Any]:
    return {"spec": {"containers": [{
        "name": name, "image": "rayproject/ray:2.60.0",
        "ports": [{"name": "serve", "containerPort": 8000},
                  {"name": "dashboard", "containerPort": 8265}],
        "resources": {"limits": {"cpu": "1", "memory": "2Gi"}},
    }]}}  # fmt: skip


def rayservice(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "serveConfigV2": SERVE_CONFIG,
        "rayClusterDeletionDelaySeconds": 30,
        "rayClusterConfig": {
            "rayVersion": "2.60.0",
            "headGroupSpec": {"rayStartParams": {}, "template": template("ray-head")},
            "workerGroupSpecs": [{
                "groupName": "small", "replicas": 1, "minReplicas": 1, "maxReplicas": 5,
                "rayStartParams": {}, "template": template("ray-worker"),
            }],
        },
    }  # fmt: skip
    body.update(spec)
    return {"apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": "demo", "namespace": "ns"}, "spec": body}  # fmt: skip


GATEWAY_CLASSES = gateway.GatewayClasses.parse([gateway.ANY_CLASS])
"""The operator's ``--gateway-classes`` here: every class (the scenarios' Gateways name
several; the allow-list itself is pinned by test_incremental.py and test_webhooks.py)."""


class Env:
    def __init__(self, *, gateway_api: bool = False) -> None:
        registry = resources.default_registry.copy()
        v1.add_to_registry(registry)
        if gateway_api:  # the Gateway API's CRDs are installed
            registry.register(gateway.GATEWAYS)
            registry.register(gateway.HTTPROUTES)
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
        self.dashboards = fake_dashboards.FakeDashboards()
        self.now = T0
        self.reconciler = reconciler_.Reconciler(
            self.client, self.cache, self.recorder, self.dashboards,
            reconciler_.Options(
                address_mode="pod-ip", gateway_api=gateway_api, gateway_classes=GATEWAY_CLASSES
            ),
            clock=lambda: self.now,
        )  # fmt: skip
        self.ips = iter(f"198.18.0.{i}" for i in range(1, 250))

    async def synced(self) -> None:
        """Until the cache has seen every write made so far (the fake's watches delivered)."""
        await self.client.delivered()

    async def reconcile(self) -> reconcile.Result:
        result = await self.reconciler.reconcile(REQUEST)
        await self.synced()
        return result

    async def service(self) -> dict[str, Any]:
        return await self.client.get(v1.RAYSERVICES, "ns", "demo")

    async def clusters(self) -> list[dict[str, Any]]:
        found = await self.client.list(v1.RAYCLUSTERS, "ns")
        return sorted(found.items, key=lambda c: c["metadata"]["name"])

    async def live_clusters(self) -> list[str]:
        return [c["metadata"]["name"] for c in await self.clusters()
                if not c["metadata"].get("deletionTimestamp")]  # fmt: skip

    async def start_head(self, cluster: str, *, serve: str = "false") -> dict[str, Any]:
        """What the RayCluster controller and kubelet would do: a Running, Ready head."""
        owner = await self.client.get(v1.RAYCLUSTERS, "ns", cluster)
        pod = await self.client.create({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{cluster}-head-x", "namespace": "ns", "labels": {
                "ray.io/cluster": cluster, "ray.io/node-type": "head",
                "ray.io/is-ray-node": "yes", "ray.io/serve": serve},
                "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster",
                                     "name": cluster, "uid": owner["metadata"]["uid"],
                                     "controller": True}]},
            "spec": {"containers": [{"name": "ray-head", "image": "ray"}]},
        })  # fmt: skip
        pod["status"] = {
            "phase": "Running",
            "podIP": next(self.ips),
            "conditions": [{"type": "Ready", "status": "True"}],
        }
        updated: dict[str, Any] = await self.client.update_status(pod)
        await self.synced()
        return updated

    async def publish_endpoints(
        self, ready: int, *, family: str = "IPv4", endpoints: list[dict[str, Any]] | None = None
    ) -> None:
        """kube-controller-manager's EndpointSlice of ``family`` for the serve service:
        ``ready`` ready pods (``pod-<i>``), or exactly ``endpoints``."""
        if endpoints is None:
            endpoints = [
                {"addresses": [f"198.18.9.{i}" if family == "IPv4" else f"fd00::{i}"],
                 "conditions": {"ready": True},
                 "targetRef": {"kind": "Pod", "namespace": "ns", "name": f"pod-{i}",
                               "uid": f"uid-pod-{i}"}}
                for i in range(ready)
            ]  # fmt: skip
        name = f"demo-serve-svc-{family.lower()}"
        body = {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": "ns", "labels": {
                "kubernetes.io/service-name": "demo-serve-svc",
                clusters.ORIGINATED_FROM_CRD_LABEL: "RayService",
                clusters.ORIGINATED_FROM_NAME_LABEL: "demo"}},
            "addressType": family,
            "endpoints": endpoints,
        }  # fmt: skip
        try:
            current = await self.client.get(SLICES, "ns", name)
        except errors.NotFound:
            await self.client.create(body)
        else:
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            await self.client.update(body)
        await self.synced()

    def writes(self, kind: str | None = None, sub: str | None = None) -> int:
        return sum(
            1 for verb, resource, subresource in self.client.calls
            if verb in ("create", "update", "patch", "delete")
            and not resource.startswith("events")
            and (kind is None or resource.startswith(kind))
            and (sub is None or subresource == sub)
        )  # fmt: skip

    def status_writes(self) -> int:
        return self.writes("rayservices", "status")

    def fake(self, cluster: str) -> fake_dashboards.FakeDashboard:
        return self.dashboards.for_cluster("ns", cluster)

    async def converge_first_cluster(self) -> str:
        """Create, start and serve the first cluster; returns its name."""
        await self.client.create(rayservice())
        await self.synced()
        await self.reconcile()
        (name,) = await self.live_clusters()
        await self.start_head(name)
        await self.reconcile()  # PUT
        await self.reconcile()  # the 2 s poll: DEPLOYING
        self.fake(name).set_all("RUNNING")
        await self.reconcile()  # services
        await self.publish_endpoints(2)
        await self.reconcile()  # Ready, in one write with the switch
        return name


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    (found,) = [c for c in obj["status"]["conditions"] if c["type"] == type_]
    return found
