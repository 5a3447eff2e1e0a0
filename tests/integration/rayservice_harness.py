"""What the RayService integration tests share (``test_rayservice*.py``).

- :func:`rayservice_obj`: a small RayService (one head, one worker group, two Serve
  applications ``fruit`` and ``calc``), deletion delay 2 s;
- :func:`start_manager`: a manager in this process with the RayCluster and RayService
  controllers, watching one namespace, in a given dashboard address mode; optionally
  wired to a :class:`Crash` that stops every request of that manager (API server and
  dashboard) for good right after a chosen write, so that a test can then kill it
  (:meth:`Running.kill`: cancel it, no graceful stop) in a known place and start a
  fresh one with fresh memory;
- :class:`Observer`: watches the namespace's RayClusters, Services and head pods from
  the test and keeps their history (every cluster name ever seen, the most that
  existed at once, every selector a service had, the head pods' IPs), so that an
  invariant that must hold *during* a scenario is checked on what really happened;
- :func:`applications_at` reads a head's Serve applications the way the operator
  does, straight at its pod IP (only addresses in the harness's pod network);
  :func:`serve_puts` counts the Serve config PUTs each head IP got, from the
  simulator's request counts;
- :func:`summary`: the end state of a RayService that a crashed-and-restarted run
  must share with an uncrashed one.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import ipaddress
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import Any

import aiohttp

import api.v1 as v1
import controllers.setup
from controllers.ray import dashboard
from controllers.raycluster import setup as raycluster_setup
from controllers.rayservice import reconciler as reconciler_
from controllers.rayservice import setup as rayservice_setup
from runtime import manager as manager_
from runtime.client import client as client_
from runtime.client import errors, resources
from runtime.testing import controlplane
from tests.integration import helpers
from tests.support import raysim

Obj = dict[str, Any]

PODS = resources.default_registry.for_kind("v1", "Pod")
SERVICES = resources.default_registry.for_kind("v1", "Service")
EVENTS = resources.default_registry.for_kind("v1", "Event")

FINALIZER = "ray.io/rayservice-finalizer"
NAME_LABEL = "ray.io/originated-from-cr-name"
CRD_LABEL = "ray.io/originated-from-crd"
HASH_ANNOTATION = "ray.io/hash-without-replicas-and-workers-to-delete"
GROUPS_ANNOTATION = "ray.io/num-worker-groups"
SERVE_HASH_ANNOTATION = "ray.io/serve-config-hash"
DELETE_AFTER_ANNOTATION = "ray.io/delete-after"
APPLICATIONS_PATH = "/api/serve/applications/"

SERVE_CONFIG = """\
applications:
  - name: fruit
    route_prefix: /fruit
    import_path: fruit.deployment_graph
    deployments:
      - {name: FruitMarket, num_replicas: 1}
  - name: calc
    route_prefix: /calc
    import_path: conditional_dag.serve_dag
"""
"""Two applications the simulator deploys (``secret_pkg`` is the unimportable one)."""

FAILING_APP = """\
  - name: broken
    route_prefix: /broken
    import_path: secret_pkg.app
"""
"""An application to append to :data:`SERVE_CONFIG` that ends ``DEPLOY_FAILED``."""


def template(name: str, *, serve: bool = False) -> Obj:
    ports = [{"name": "dashboard", "containerPort": 8265}, {"name": "gcs", "containerPort": 6379}]
    if serve:
        ports.append({"name": "serve", "containerPort": 8000})
    return {"spec": {"containers": [{
        "name": name, "image": "rayproject/ray:2.60.0", "ports": ports if serve else [],
        "resources": {"limits": {"cpu": "100m", "memory": "256Mi"}},
    }]}}  # fmt: skip


def worker_group(name: str = "small", replicas: int = 1) -> Obj:
    return {"groupName": name, "replicas": replicas, "minReplicas": 0, "maxReplicas": 3,
            "rayStartParams": {}, "template": template("ray-worker")}  # fmt: skip


def rayservice_obj(
    name: str = "demo",
    *,
    serve_config: str = SERVE_CONFIG,
    ray_version: str = "2.60.0",
    deletion_delay: int = 2,
    annotations: Mapping[str, str] | None = None,
    **spec: Any,
) -> Obj:
    """A RayService: one head (serve port 8000), one worker, :data:`SERVE_CONFIG`."""
    body: Obj = {
        "serveConfigV2": serve_config,
        "rayClusterDeletionDelaySeconds": deletion_delay,
        "rayClusterConfig": {
            "rayVersion": ray_version,
            "headGroupSpec": {"rayStartParams": {}, "template": template("ray-head", serve=True)},
            "workerGroupSpecs": [worker_group()],
        },
    }
    body.update(spec)
    meta: Obj = {"name": name}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": meta, "spec": body}


# -- reading the API ---------------------------------------------------------------------------


def condition(obj: Mapping[str, Any], type_: str) -> Obj | None:
    for found in (obj.get("status") or {}).get("conditions") or ():
        if found.get("type") == type_:
            return dict(found)
    return None


def is_ready(obj: Mapping[str, Any]) -> bool:
    found = condition(obj, "Ready")
    return bool(found and found.get("status") == "True")


async def get_service(client: client_.Client, namespace: str, name: str = "demo") -> Obj:
    return await client.get(v1.RAYSERVICES, namespace, name)


async def wait_for(
    client: client_.Client,
    namespace: str,
    check: Callable[[Obj], bool],
    within: float,
    what: str,
    name: str = "demo",
) -> Obj:
    """The RayService once ``check(it)`` holds; fails after ``within`` s with its status."""
    last: list[Obj] = []

    async def probe() -> Obj | None:
        obj = await get_service(client, namespace, name)
        last[:] = [obj]
        return obj if check(obj) else None

    try:
        return await helpers.eventually(probe, within, what)
    except AssertionError as exc:
        status = (last[0].get("status") if last else None) or {}
        raise AssertionError(f"{exc}; status: {status}") from None


async def wait_ready(
    client: client_.Client, namespace: str, name: str = "demo", within: float = 60.0
) -> Obj:
    """Ready=True with every application RUNNING and serve endpoints."""

    def ok(obj: Obj) -> bool:
        status = obj.get("status") or {}
        apps = (status.get("activeServiceStatus") or {}).get("applicationStatuses") or {}
        return (
            is_ready(obj)
            and bool(apps)
            and all(a.get("status") == "RUNNING" for a in apps.values())
            and int(status.get("numServeEndpoints") or 0) > 0
        )

    return await wait_for(client, namespace, ok, within, f"RayService {name} Ready", name)


async def clusters_of(client: client_.Client, namespace: str, name: str = "demo") -> list[Obj]:
    """The RayService's RayClusters that are not being deleted, by name."""
    found = await client.list(v1.RAYCLUSTERS, namespace, label_selector=f"{NAME_LABEL}={name}")
    live = [c for c in found.items if not c["metadata"].get("deletionTimestamp")]
    return sorted(live, key=lambda c: c["metadata"]["name"])


async def all_clusters(client: client_.Client, namespace: str) -> list[str]:
    """Every RayCluster in the namespace (being deleted or not)."""
    found = await client.list(v1.RAYCLUSTERS, namespace)
    return sorted(c["metadata"]["name"] for c in found.items)


async def head_pod(client: client_.Client, namespace: str, cluster: str) -> Obj | None:
    found = await client.list(
        PODS, namespace, label_selector=f"ray.io/cluster={cluster},ray.io/node-type=head"
    )
    live = [p for p in found.items if not p["metadata"].get("deletionTimestamp")]
    return live[0] if len(live) == 1 else None


async def head_ip(client: client_.Client, namespace: str, cluster: str, within: float = 30) -> str:
    async def ip() -> str | None:
        pod = await head_pod(client, namespace, cluster)
        status = (pod or {}).get("status") or {}
        return str(status["podIP"]) if status.get("podIP") else None

    return await helpers.eventually(ip, within, f"the head pod of {cluster} with an IP")


async def selector_of(client: client_.Client, namespace: str, service: str) -> str | None:
    try:
        svc = await client.get(SERVICES, namespace, service)
    except errors.NotFound:
        return None
    return ((svc.get("spec") or {}).get("selector") or {}).get("ray.io/cluster")


# -- the data plane ----------------------------------------------------------------------------


def pod_url(cp: controlplane.ControlPlane, ip: str, port: int, path: str) -> str:
    """A URL at a pod IP, refusing anything outside the harness's pod network."""
    network = cp.pod_network
    assert network is not None
    assert ipaddress.ip_address(ip) in ipaddress.ip_network(network.cidr), ip
    network.connections.append((ip, port))
    return f"http://{ip}:{port}{path}"


async def applications_at(cp: controlplane.ControlPlane, ip: str) -> dict[str, Any]:
    """The Serve applications a head at ``ip`` reports (``{}`` when it does not answer)."""
    url = pod_url(cp, ip, 8265, APPLICATIONS_PATH)
    async with aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=5, connect=2),
        connector=aiohttp.TCPConnector(force_close=True),
    ) as http:
        try:
            async with http.get(url, params={"api_type": "declarative"}) as response:
                if response.status != 200:
                    return {}
                apps: dict[str, Any] = (await response.json()).get("applications") or {}
                return apps
        except (aiohttp.ClientError, TimeoutError):
            return {}


def serve_puts(sim: raysim.Simulator, since: Mapping[str, int] | None = None) -> dict[str, int]:
    """Serve config PUTs per head IP since the simulator started, or since the counts
    ``since`` (an earlier answer): kwok hands the IPs of deleted pods out again, so a
    test counts from its own start."""
    counts: dict[str, int] = {}
    for (ip, port, method, path), n in sim.requests().items():
        if port == "dashboard" and method == "PUT" and path.rstrip("/") == APPLICATIONS_PATH[:-1]:
            counts[ip] = counts.get(ip, 0) + n
    for ip, n in (since or {}).items():
        counts[ip] = counts.get(ip, 0) - n
    return {ip: n for ip, n in counts.items() if n}


def requests_to(sim: raysim.Simulator, ips: set[str]) -> int:
    """Every request (and every reset connection) the heads at ``ips`` got so far."""
    return sum(n for (ip, *_), n in sim.requests().items() if ip in ips)


# -- the manager -------------------------------------------------------------------------------


class Crash:
    """Stops a manager's world right after a chosen write: once :meth:`arm`\\ ed with a
    predicate, the first write it matches completes and then never returns, and every
    later API or dashboard request of that manager blocks for good - as if the process
    had died at that instant (its memory is dropped with :meth:`Running.kill`)."""

    def __init__(self) -> None:
        self.fired = asyncio.Event()
        self.what = ""
        self._when: Callable[[str, str, Any], bool] | None = None

    def arm(self, when: Callable[[str, str, Any], bool]) -> None:
        """``when(method, path_or_url, body)``: ``True`` for the write to die after."""
        self._when = when

    async def gate(self) -> None:
        if self.fired.is_set():
            await asyncio.Event().wait()

    async def after(self, method: str, where: str, body: Any) -> None:
        if self._when is not None and not self.fired.is_set() and self._when(method, where, body):
            self.what = f"{method} {where}"
            self.fired.set()
            await asyncio.Event().wait()


def _crashing_client(client: client_.Client, crash: Crash) -> None:
    request, send = client.request, client.send

    async def crashing_request(method: str, path: str, **kw: Any) -> Any:
        await crash.gate()
        answer = await request(method, path, **kw)
        if method.upper() not in ("GET", "LIST", "WATCH"):
            await crash.after(method.upper(), path, kw.get("body"))
        return answer

    async def crashing_send(method: str, path: str, **kw: Any) -> Any:
        await crash.gate()
        answer = await send(method, path, **kw)
        if method.upper() == "PUT":
            await crash.after("SERVE-PUT", path, kw.get("body"))
        return answer

    client.request = crashing_request  # type: ignore[method-assign]
    client.send = crashing_send  # type: ignore[method-assign]


class _CrashingDashboard:
    def __init__(self, inner: dashboard.DashboardClient, crash: Crash, where: str) -> None:
        self._inner, self._crash, self._where = inner, crash, where

    async def get_serve_applications(self) -> dashboard.ServeDetails:
        await self._crash.gate()
        return await self._inner.get_serve_applications()

    async def put_serve_applications(self, config: Mapping[str, Any]) -> None:
        await self._crash.gate()
        await self._inner.put_serve_applications(config)
        await self._crash.after("SERVE-PUT", self._where, config)

    async def serve_proxy_healthy(self, pod: dashboard.PodRef) -> bool:
        await self._crash.gate()
        return await self._inner.serve_proxy_healthy(pod)


class _CrashingDashboards:
    def __init__(self, inner: dashboard.Dashboards, crash: Crash) -> None:
        self._inner, self._crash = inner, crash

    def client_for(
        self, address: dashboard.Address, *, auth_token: str | None = None
    ) -> dashboard.DashboardClient:
        inner = self._inner.client_for(address, auth_token=auth_token)
        return _CrashingDashboard(inner, self._crash, address.applications_url)

    async def close(self) -> None:
        await self._inner.close()


@dataclasses.dataclass
class Running:
    """A manager running in this process (see :func:`start_manager`)."""

    manager: manager_.Manager
    client: client_.Client
    dashboards: dashboard.Dashboards
    task: asyncio.Task[None]
    stop_event: asyncio.Event

    async def stop(self) -> None:
        """Graceful stop (SIGTERM's path)."""
        if not self.task.done():
            self.stop_event.set()
            await asyncio.wait_for(asyncio.shield(self.task), 30)
        await self._close()

    async def kill(self) -> None:
        """Abrupt stop: the task is cancelled mid-flight; nothing it held is kept."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(self.task, 30)
        await self._close()

    async def _close(self) -> None:
        await self.dashboards.close()
        await self.client.close()


async def start_manager(
    cp: controlplane.ControlPlane,
    namespace: str,
    *,
    mode: dashboard.Mode = "pod-ip",
    crash: Crash | None = None,
    serve_poll_max: float = 10.0,
    rayservice: Mapping[str, Any] | None = None,
) -> Running:
    """Start a manager for ``namespace`` with both controllers; wait until it runs.
    ``rayservice``: more :class:`~controllers.rayservice.reconciler.Options` fields (such
    as ``gateway_api`` and ``gateway_classes``)."""
    client = await client_.Client.from_kubeconfig(cp.kubeconfig)
    mgr = manager_.Manager(client, manager_.Options(
        name="rayservice-operator",
        namespace=namespace, metrics_bind_address="0", health_probe_bind_address="0",
        graceful_shutdown_timeout=5.0, cache_by_resource=controllers.setup.cache_by_resource(),
    ))  # fmt: skip
    dashboards = dashboard.Dashboards(api=client)
    factory: dashboard.DashboardFactory = dashboards
    if crash is not None:
        _crashing_client(client, crash)
        factory = _CrashingDashboards(dashboards, crash)
    raycluster_setup.setup(mgr, skip_name_validation=True)
    rayservice_setup.setup(
        mgr,
        dashboards=factory,
        options=reconciler_.Options(
            address_mode=mode,
            serve_poll_interval=2.0,
            serve_poll_max=serve_poll_max,
            **(rayservice or {}),
        ),
        skip_name_validation=True,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    return Running(mgr, client, dashboards, task, stop)


@contextlib.asynccontextmanager
async def manager_running(
    cp: controlplane.ControlPlane, namespace: str, **kw: Any
) -> AsyncIterator[Running]:
    """:func:`start_manager`, stopped on exit; RayServices it leaves behind lose their
    finalizer so that the namespace can go."""
    running = await start_manager(cp, namespace, **kw)
    try:
        yield running
    finally:
        await running.stop()
        release_finalizers(cp, namespace)


def release_finalizers(
    cp: controlplane.ControlPlane, namespace: str, plural: str = "rayservices"
) -> None:
    """Drop the finalizers of the namespace's ``ray.io/v1`` objects of ``plural`` left
    behind by a stopped manager (so the namespace can go)."""
    base = f"/apis/ray.io/v1/namespaces/{namespace}/{plural}"
    for item in (cp.request("GET", base) or {}).get("items") or ():
        if item["metadata"].get("finalizers"):
            with contextlib.suppress(controlplane.ApiError):
                cp.request(
                    "PATCH", f"{base}/{item['metadata']['name']}",
                    {"metadata": {"finalizers": None}},
                    content_type="application/merge-patch+json",
                )  # fmt: skip


# -- watching what happens ---------------------------------------------------------------------


@dataclasses.dataclass
class SelectorChange:
    at: float
    """``time.time()`` when the test saw it."""
    service: str
    cluster: str | None


class Observer:
    """The history of a namespace's RayClusters, Services and head pods, from watches."""

    def __init__(self, client: client_.Client, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self.clusters_seen: list[str] = []
        self.live: dict[str, Obj] = {}
        self.last: dict[str, Obj] = {}
        """Each cluster as last seen (kept after it is deleted)."""
        self.first_delete_after: dict[str, str] = {}
        """The first ``ray.io/delete-after`` each cluster was seen with."""
        self.most_at_once = 0
        self.deleted_at: dict[str, float] = {}
        """When the test first saw each cluster being deleted (``deletionTimestamp`` or gone)."""
        self.selectors: list[SelectorChange] = []
        self.head_ips: dict[str, str] = {}
        self.on_selector: Callable[[SelectorChange], Coroutine[Any, Any, None]] | None = None
        self.checks: list[asyncio.Task[None]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._synced: list[asyncio.Event] = []

    async def __aenter__(self) -> Observer:
        for resource, selector, handle in (
            (v1.RAYCLUSTERS, None, self._cluster),
            (SERVICES, None, self._service),
            (PODS, "ray.io/node-type=head", self._pod),
        ):
            synced = asyncio.Event()
            self._synced.append(synced)
            self._tasks.append(
                asyncio.create_task(self._follow(resource, selector, handle, synced))
            )
        await asyncio.wait_for(asyncio.gather(*(s.wait() for s in self._synced)), 30)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.checks:
            await asyncio.wait_for(asyncio.gather(*self.checks, return_exceptions=True), 30)

    async def settle(self) -> None:
        """Wait for the selector checks started so far (their failures are raised)."""
        results = await asyncio.wait_for(asyncio.gather(*self.checks, return_exceptions=True), 30)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _follow(
        self,
        resource: resources.Resource,
        selector: str | None,
        handle: Callable[[str, Obj], None],
        synced: asyncio.Event,
    ) -> None:
        while True:
            try:
                listed = await self.client.list(resource, self.namespace, label_selector=selector)
            except (errors.ApiError, aiohttp.ClientError, TimeoutError):
                # e.g. 429 "storage is (re)initializing" right after CRDs are installed
                await asyncio.sleep(0.2)
                continue
            for item in listed.items:
                handle("ADDED", item)
            synced.set()
            rv = listed.resource_version
            try:
                while True:
                    async for event in self.client.watch(
                        resource, self.namespace, resource_version=rv, timeout_seconds=120,
                        label_selector=selector,
                    ):  # fmt: skip
                        obj = event.get("object") or {}
                        rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                        if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                            handle(str(event["type"]), obj)
            except errors.Gone:
                continue
            except (errors.ApiError, aiohttp.ClientError, TimeoutError):
                await asyncio.sleep(0.2)  # relist: every handler takes objects as a whole

    def _cluster(self, kind: str, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        self.last[name] = obj
        stamp = (obj["metadata"].get("annotations") or {}).get(DELETE_AFTER_ANNOTATION)
        if stamp:
            self.first_delete_after.setdefault(name, stamp)
        if kind == "DELETED" or obj["metadata"].get("deletionTimestamp"):
            self.deleted_at.setdefault(name, time.time())
        if kind == "DELETED":
            self.live.pop(name, None)
            return
        if name not in self.clusters_seen:
            self.clusters_seen.append(name)
        self.live[name] = obj
        self.most_at_once = max(self.most_at_once, len(self.live))

    def _service(self, kind: str, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        cluster = None if kind == "DELETED" else (
            (obj.get("spec") or {}).get("selector") or {}
        ).get("ray.io/cluster")  # fmt: skip
        previous = [s for s in self.selectors if s.service == name]
        if previous and previous[-1].cluster == cluster:
            return
        change = SelectorChange(time.time(), name, cluster)
        self.selectors.append(change)
        if self.on_selector is not None and cluster is not None:
            self.checks.append(asyncio.create_task(self.on_selector(change)))

    def _pod(self, kind: str, obj: Obj) -> None:
        ip = (obj.get("status") or {}).get("podIP")
        cluster = (obj["metadata"].get("labels") or {}).get("ray.io/cluster")
        if kind != "DELETED" and ip and cluster:
            self.head_ips[cluster] = str(ip)

    def clusters_selected(self, service: str) -> list[str | None]:
        return [s.cluster for s in self.selectors if s.service == service]


# -- the end state -----------------------------------------------------------------------------


async def summary(client: client_.Client, namespace: str, name: str = "demo") -> Obj:
    """What an uncrashed run and a crashed-and-restarted one must agree on."""
    obj = await get_service(client, namespace, name)
    status = obj.get("status") or {}

    def service_status(part: str) -> Obj | None:
        found = status.get(part) or {}
        if not found.get("rayClusterName"):
            return None
        return {
            "cluster": found.get("rayClusterName"),
            "apps": {
                app: (value.get("status"), sorted(value.get("serveDeploymentStatuses") or {}))
                for app, value in (found.get("applicationStatuses") or {}).items()
            },
        }

    clusters = {}
    for cluster in await clusters_of(client, namespace, name):
        annotations = cluster["metadata"].get("annotations") or {}
        clusters[cluster["metadata"]["name"]] = {
            key: annotations.get(key)
            for key in (HASH_ANNOTATION, GROUPS_ANNOTATION, SERVE_HASH_ANNOTATION)
        } | {
            "labels": {k: v for k, v in (cluster["metadata"].get("labels") or {}).items()
                       if k in (NAME_LABEL, CRD_LABEL)},
            "deleting": DELETE_AFTER_ANNOTATION in annotations,
        }  # fmt: skip
    conditions = {
        c["type"]: (c.get("status"), c.get("reason")) for c in status.get("conditions") or ()
    }
    return {
        "finalizers": obj["metadata"].get("finalizers"),
        "conditions": conditions,
        "serviceStatus": status.get("serviceStatus"),
        "active": service_status("activeServiceStatus"),
        "pending": service_status("pendingServiceStatus"),
        "clusters": clusters,
        "head_svc": await selector_of(client, namespace, f"{name}-head-svc"),
        "serve_svc": await selector_of(client, namespace, f"{name}-serve-svc"),
    }


def changed(obj: Obj, **spec: Any) -> Obj:
    """A copy of ``obj`` with ``spec`` keys replaced (``rayVersion=...`` goes into the
    cluster config)."""
    new = copy.deepcopy(obj)
    for key, value in spec.items():
        if key == "rayVersion":
            new["spec"]["rayClusterConfig"]["rayVersion"] = value
        else:
            new["spec"][key] = value
    return new
