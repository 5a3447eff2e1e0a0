"""End to end with real Ray: the manager binary drives a RayService whose clusters run real
Ray Serve, and a zero-downtime upgrade loses no request.

The other scenarios (``test_rayservice.py``) talk to the Ray simulator. Here every Ray pod
of the test's namespace is run for real by ``hack/realray`` as soon as kwok gives it an IP
(:class:`Kubelet`: the pod's own ``ray start`` line, in a network namespace of its own at
its pod IP, ``Ready`` from its own readiness probe) and stopped when the pod is deleted,
as a kubelet would. The simulator still answers at every head IP in the shared pod
namespace, but a pod run for real has a more specific route, so the manager's dashboard
calls and the traffic reach real Ray; the test checks that (``/api/version`` is not the
simulator's, and the application's answer is one only real Ray gives).

The clusters are head-only (one CPU): two real heads side by side during the upgrade are
what two cores carry comfortably; a worker per cluster would add nothing to the point
(traffic moving between clusters) and double the load. The upgrade is a change of the
head template's environment (a new ``RSO_E2E_REVISION`` env var): it changes the cluster
hash, so the operator builds a second cluster, and keeps the pods' real ``ray``
(``rayVersion`` is only a label for the operator, but bumping it would claim a Ray the
harness does not run).

With ``authOptions: {mode: token}`` the operator serves real Ray in token mode (the token
from the Secret it made, in the pod-ip and kubernetes-proxy modes), and that Ray refuses
dashboard requests without the token.

Ray comes from ``make ray`` (hack/realray/install.sh); without it this fails saying so,
never skips. A failing test's captured output carries the real pods' log tails.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import json
import pathlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from controllers.rayservice import gateway as rayservice_gateway
from runtime.client import client as client_
from runtime.client import errors, resources
from tests.e2e import harness, rayservices
from tests.support import gateway, realray

# Every scenario here starts what only the suite's own cluster has (see own_cluster).
pytestmark = pytest.mark.own_cluster

Obj = dict[str, Any]
APPS = pathlib.Path(__file__).parent / "testdata" / "realray_apps"
NAME = "realray"
SERVE_SVC = f"{NAME}-serve-svc"
DELETION_DELAY = 5
ANSWER = "hello from Ray 2.60.0"
"""What ``rso_e2e_apps:greeter`` answers (the simulator would answer ``greet``)."""
PATHS = {"/greet": ANSWER}
RAY_NODES = "ray.io/is-ray-node=yes"

SERVE_CONFIG = """\
applications:
  - name: greet
    route_prefix: /greet
    import_path: rso_e2e_apps:greeter
    args: {greeting: hello}
"""


def rayservice(namespace: str) -> Obj:
    """A RayService with one head-only cluster, one CPU, running ``rso_e2e_apps``."""
    resources = {"cpu": "1", "memory": "2Gi"}
    head = {
        "name": "ray-head",
        "image": "rayproject/ray:2.60.0",
        "ports": [
            {"name": "gcs", "containerPort": 6379},
            {"name": "dashboard", "containerPort": 8265},
            {"name": "client", "containerPort": 10001},
            {"name": "serve", "containerPort": 8000},
        ],
        "resources": {"requests": resources, "limits": resources},
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {
            "upgradeStrategy": {"type": "NewCluster"},
            "rayClusterDeletionDelaySeconds": DELETION_DELAY,
            "serveConfigV2": SERVE_CONFIG,
            "rayClusterConfig": {
                "rayVersion": "2.60.0",
                "headGroupSpec": {
                    "rayStartParams": {"dashboard-host": "0.0.0.0"},
                    "template": {"spec": {"containers": [head]}},
                },
            },
        },
    }


def new_revision(obj: Obj) -> None:
    """A change of the head template (an env var): a new cluster, same real Ray."""
    head = obj["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["env"] = [*(head.get("env") or []), {"name": "RSO_E2E_REVISION", "value": "2"}]


# -- the pods, run for real ----------------------------------------------------------------------


class Kubelet:
    """Runs every Ray pod of ``namespace`` for real once it has an IP (once per pod UID,
    :meth:`realray.Harness.run` in a thread: it blocks while it builds the network) and
    stops it when the pod is being deleted, as a kubelet would (the harness does not watch
    the API). When a head pod starts, the running pods' names follow it
    (:meth:`realray.Harness.refresh_names`), as cluster DNS would."""

    def __init__(
        self, api: client_.Client, real: realray.Harness, namespace: str, selector: str = RAY_NODES
    ) -> None:
        self.api = api
        self.real = real
        self.namespace = namespace
        self.selector = selector
        """Which pods it runs (default: every Ray node, clean-up Jobs' pods included)."""
        self.pods: dict[str, realray.RealPod] = {}
        """Pod UID -> the pod run for real (every one ever started, stopped ones too)."""
        self.stopped: set[str] = set()
        """UIDs of the pods stopped because their pod object was being deleted."""
        self.errors: list[str] = []
        self._ips: dict[str, str] = {}
        """Pod UID -> pod IP, of the pods run and not yet stopped."""
        self._runs: dict[str, asyncio.Task[None]] = {}
        self._stops: dict[str, asyncio.Task[None]] = {}
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Kubelet:
        self._task = asyncio.create_task(self._follow())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        await asyncio.gather(*self._runs.values(), *self._stops.values(), return_exceptions=True)

    def by_name(self, name: str) -> realray.RealPod:
        found = [p for p in self.pods.values() if p.name == name]
        assert found, f"pod {name} was never run for real (run: {sorted(self.pods)})"
        return found[-1]

    def tails(self, lines: int = 40) -> str:
        parts = [f"kubelet errors: {self.errors}"] if self.errors else []
        for real in self.pods.values():
            state = "running" if real.alive() else f"exit {real.exit_code}"
            parts.append(f"--- {real} ({state}, ready={real.ready}, error={real.error!r})")
            parts.append(real.log_tail(lines))
        return "\n".join(parts)

    @contextlib.contextmanager
    def on_failure(self) -> Iterator[None]:
        """Print the real pods' log tails when the body fails (pytest shows captured
        output of a failing test; a pytest-timeout failure passes through here too)."""
        try:
            yield
        except BaseException:
            print(f"\n===== real Ray pods in {self.namespace} =====\n{self.tails()}")
            raise

    async def _follow(self) -> None:
        while True:
            try:
                listed = await self.api.list(
                    harness.PODS, self.namespace, label_selector=self.selector
                )
                for item in listed.items:
                    self._seen("ADDED", item)
                present = {str(item["metadata"]["uid"]) for item in listed.items}
                for uid in set(self._runs) - present - set(self._stops):  # deleted meanwhile
                    self._stops[uid] = asyncio.create_task(self._stop(uid))
                async for event in self.api.watch(
                    harness.PODS, self.namespace, resource_version=listed.resource_version,
                    label_selector=self.selector, timeout_seconds=300,
                ):  # fmt: skip
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        self._seen(str(event["type"]), event["object"])
            except (errors.ApiError, aiohttp.ClientError, OSError, TimeoutError):
                await asyncio.sleep(0.5)

    def _seen(self, kind: str, pod: Obj) -> None:
        metadata = pod["metadata"]
        uid = str(metadata["uid"])
        if kind == "DELETED" or metadata.get("deletionTimestamp"):
            if uid in self._runs and uid not in self._stops:
                self._stops[uid] = asyncio.create_task(self._stop(uid))
            return
        ip = (pod.get("status") or {}).get("podIP")
        if uid not in self._runs and ip:
            self._ips[uid] = str(ip)
            self._runs[uid] = asyncio.create_task(self._run(uid, str(metadata["name"])))

    async def _released(self, uid: str, within: float = 120.0) -> None:
        """Wait until no other pod holds ``uid``'s IP. kwok's pool hands an IP out again as
        soon as the pod that held it is deleted, while that pod's network may still stand
        (its route in the pod network would clash: ``RTNETLINK answers: File exists``); a
        CNI gives an address back only once the sandbox is torn down."""
        deadline = time.monotonic() + within
        ip = self._ips[uid]
        while holders := [u for u, held in self._ips.items() if held == ip and u != uid]:
            if time.monotonic() > deadline:
                raise realray.RealRayError(f"{ip} still held by pod(s) {holders} after {within} s")
            stops = [self._stops[u] for u in holders if u in self._stops]
            if stops:
                await asyncio.wait(stops, timeout=max(0.0, deadline - time.monotonic()))
            else:  # its deletion is not seen yet
                await asyncio.sleep(0.1)

    async def _run(self, uid: str, name: str) -> None:
        try:
            await self._released(uid)
            real = self.pods[uid] = await asyncio.to_thread(self.real.run, self.namespace, name)
            if real.pod["metadata"].get("labels", {}).get("ray.io/node-type") == "head":
                # A replaced head: the other pods' hosts files follow it, as cluster DNS.
                await asyncio.to_thread(self.real.refresh_names)
        except Exception as exc:  # reported by the test (errors), with the pods' tails
            if uid not in self.pods:  # the harness tore down what it had built
                self._ips.pop(uid, None)
            self.errors.append(f"running {name}: {exc!r}")

    async def _stop(self, uid: str) -> None:
        await asyncio.gather(self._runs[uid], return_exceptions=True)
        real = self.pods.get(uid)
        if real is None:
            self._ips.pop(uid, None)
            return
        try:
            await asyncio.to_thread(real.stop)
            self.stopped.add(uid)
            self._ips.pop(uid, None)
        except Exception as exc:
            self.errors.append(f"stopping {real.name}: {exc!r}")


@pytest.fixture
def real_ray(world: harness.World) -> Iterator[realray.Harness]:
    if world.cp is None:
        pytest.fail(
            "not marked own_cluster, but it runs the pods itself: "
            "needs the suite's own control plane and pod network"
        )
    try:
        realray.ray_venv()
    except realray.RealRayError as exc:
        pytest.fail(str(exc), pytrace=False)
    with realray.running(world.cp, pythonpath=[APPS]) as real:
        yield real
        netns = [p.netns for p in real.pods]
    assert not real.pods
    assert not any(pathlib.Path("/etc/netns", n).exists() for n in netns)


@pytest.fixture
async def kubelet(
    api: client_.Client, real_ray: realray.Harness, namespace: str
) -> AsyncIterator[Kubelet]:
    async with Kubelet(api, real_ray, namespace) as k:
        yield k


# -- reading the RayService ----------------------------------------------------------------------


async def head_pod(api: client_.Client, namespace: str, cluster: str) -> Obj:
    selector = f"ray.io/cluster={cluster},ray.io/node-type=head"
    [pod] = (await api.list(harness.PODS, namespace, label_selector=selector)).items
    return pod


async def fetch(
    world: harness.World, real: realray.RealPod, port: int, path: str
) -> tuple[int, str]:
    """(status, body) straight from a pod run for real (its route checked first)."""
    assert world.pod_cidr is not None
    assert ipaddress.ip_address(real.ip) in world.pod_cidr
    real.verify()  # the pod IP routes into the pod's own namespace, not the simulator's
    timeout = aiohttp.ClientTimeout(total=10, connect=3)
    async with (
        aiohttp.ClientSession(timeout=timeout, trust_env=False) as http,
        http.get(f"http://{real.ip}:{port}{path}") as response,
    ):
        return response.status, await response.text()


async def check_real(world: harness.World, real: realray.RealPod) -> None:
    """The head at ``real``'s IP is real Ray 2.60.0 serving ``greet``, not the simulator."""
    status, body = await fetch(world, real, 8265, "/api/version")
    assert status == 200, (status, body)
    version = json.loads(body)
    assert version["ray_version"] == "2.60.0", version
    assert version["ray_commit"] not in ("", "simulated"), version
    assert await fetch(world, real, 8000, "/greet") == (200, ANSWER)


# -- the scenario --------------------------------------------------------------------------------


@pytest.mark.timeout(600)
async def test_real_ray_serves_and_a_zero_downtime_upgrade_loses_no_request(
    world: harness.World,
    api: client_.Client,
    namespace: str,
    managers: harness.Managers,
    kubelet: Kubelet,
) -> None:
    timings: dict[str, float] = {}
    with kubelet.on_failure():
        await managers.start("pod-ip").wait_leading()
        started = time.monotonic()
        await api.create(rayservice(namespace))
        obj = await rayservices.wait_ready(api, namespace, NAME, within=240)
        timings["ready"] = time.monotonic() - started
        assert not kubelet.errors, kubelet.errors
        old = rayservices.active_cluster(obj)
        assert old is not None
        old_head = kubelet.by_name((await head_pod(api, namespace, old))["metadata"]["name"])
        await check_real(world, old_head)

        async with (
            rayservices.ClusterCount(api, namespace) as count,
            harness.Traffic(api, world, namespace, SERVE_SVC, PATHS, interval=0.05) as t,
        ):
            await t.wait_requests(20, within=60)
            assert t.targets == {old_head.ip}, t.targets
            upgrade = time.monotonic()
            await rayservices.update_spec(api, namespace, NAME, new_revision)
            obj = await rayservices.wait_ready(api, namespace, NAME, within=240, cluster_not=old)
            timings["upgrade"] = time.monotonic() - upgrade
            new = rayservices.active_cluster(obj)
            assert new is not None
            new_head = kubelet.by_name((await head_pod(api, namespace, new))["metadata"]["name"])
            await check_real(world, new_head)

            async def old_gone() -> bool:
                return await rayservices.cluster_names(api, namespace) == {new}

            await harness.until(old_gone, DELETION_DELAY + 60, "the old cluster deleted")
            timings["old cluster deleted"] = time.monotonic() - upgrade
            await t.wait_requests(20, within=60)

            async def old_head_stopped() -> bool:
                return old_head.pod["metadata"]["uid"] in kubelet.stopped

            await harness.until(old_head_stopped, 60, "the old head's processes stopped")

        timings["total"] = time.monotonic() - started
        print(f"timings (s): { {k: round(v, 1) for k, v in timings.items()} }; "
              f"{t.ok} requests answered, {len(t.failures)} failed")  # fmt: skip
        assert not t.failures, (
            f"{len(t.failures)} failed of {t.ok + len(t.failures)}: {t.failures[:5]}"
        )
        assert not kubelet.errors, kubelet.errors
        assert count.most == 2, count.seen
        assert count.seen == {old, new}, count.seen
        # Every answer came from real Ray (the body), from the old head and then the new one.
        assert t.targets == {old_head.ip, new_head.ip}, t.targets
        assert t.resolutions >= 2
        assert old_head.pids() == []
        assert new_head.alive()
        assert t.ok >= 40


# -- token authentication ------------------------------------------------------------------------

SECRETS = resources.default_registry.for_kind("v1", "Secret")
APPLICATIONS = "/api/serve/applications/?api_type=declarative"


async def dashboard_get(
    world: harness.World, real: realray.RealPod, path: str, token: str | None
) -> tuple[int, str]:
    """(status, body) of a GET to the real head's dashboard, with ``x-ray-authorization:
    Bearer <token>`` when ``token`` is given (KubeRay's header, the one the operator sends)."""
    assert world.pod_cidr is not None
    assert ipaddress.ip_address(real.ip) in world.pod_cidr
    real.verify()
    headers = {"x-ray-authorization": f"Bearer {token}"} if token is not None else {}
    timeout = aiohttp.ClientTimeout(total=10, connect=3)
    async with (
        aiohttp.ClientSession(timeout=timeout, trust_env=False) as http,
        http.get(f"http://{real.ip}:8265{path}", headers=headers) as response,
    ):
        return response.status, await response.text()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["pod-ip", "kubernetes-proxy"])
async def test_real_ray_with_token_auth_is_served_by_the_operator_and_refuses_others(
    world: harness.World,
    api: client_.Client,
    namespace: str,
    managers: harness.Managers,
    kubelet: Kubelet,
    mode: str,
) -> None:
    """``authOptions: {mode: token}`` on real Ray 2.60: the operator makes the token Secret,
    the pods run Ray in token mode, and the operator reads and deploys Serve with the token
    (the RayService turns Ready with its application RUNNING); the same dashboard refuses a
    request without the token (401) and with a wrong one (403)."""
    with kubelet.on_failure():
        await managers.start(mode).wait_leading()
        obj = rayservice(namespace)
        obj["spec"]["rayClusterConfig"]["authOptions"] = {"mode": "token"}
        await api.create(obj)
        obj = await rayservices.wait_ready(api, namespace, NAME, within=240)
        assert rayservices.apps(obj) == {"greet": "RUNNING"}
        assert not kubelet.errors, kubelet.errors
        cluster = rayservices.active_cluster(obj)
        assert cluster is not None

        # The Secret the RayCluster controller made: <cluster>, controlled by the cluster.
        secret = await api.get(SECRETS, namespace, cluster)
        owner = await api.get(harness.RAYCLUSTERS, namespace, cluster)
        [ref] = secret["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"]) == ("RayCluster", owner["metadata"]["uid"])
        token = base64.b64decode(secret["data"]["auth_token"]).decode()
        assert len(base64.b64decode(token)) == 32

        # The head runs Ray with RAY_AUTH_MODE=token and the Secret's token.
        pod = await head_pod(api, namespace, cluster)
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        assert env["RAY_AUTH_MODE"]["value"] == "token"
        ref_to = env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]
        assert ref_to == {"name": cluster, "key": "auth_token"}
        real = kubelet.by_name(pod["metadata"]["name"])

        # Real Ray guards its dashboard: no token 401, a wrong one 403, the token 200.
        status, body = await dashboard_get(world, real, APPLICATIONS, None)
        assert status == 401, (status, body)
        status, body = await dashboard_get(world, real, APPLICATIONS, "not-the-token")
        assert status == 403, (status, body)
        status, body = await dashboard_get(world, real, APPLICATIONS, token)
        assert status == 200, (status, body)
        assert json.loads(body)["applications"]["greet"]["status"] == "RUNNING"
        status, body = await dashboard_get(world, real, "/api/version", token)
        assert json.loads(body)["ray_version"] == "2.60.0", body
        # Serve's own proxy takes traffic without a token (Ray does not guard it).
        assert await fetch(world, real, 8000, "/greet") == (200, ANSWER)
        assert not kubelet.errors, kubelet.errors


# -- incremental upgrade through a real gateway --------------------------------------------------

INCREMENTAL = {"maxSurgePercent": 50, "stepSizePercent": 50, "intervalSeconds": 5,
               "gatewayClassName": gateway.GATEWAY_CLASS}  # fmt: skip


@pytest.mark.timeout(600)
async def test_real_ray_upgraded_incrementally_through_traefik_loses_no_request(
    world: harness.World,
    api: client_.Client,
    namespace: str,
    traefik: gateway.Traefik,
    managers: harness.Managers,
    kubelet: Kubelet,
) -> None:
    """``NewClusterWithIncrementalUpgrade`` on real Ray 2.60 behind real Traefik: Serve's
    own ``target_capacity`` moves between two real heads (0 -> 50 -> 100 on the new one,
    100 -> 50 -> 0 on the old one) while the HTTPRoute's weights follow, and requests sent
    through the gateway all the while are all answered by real Ray."""
    timings: dict[str, float] = {}
    with kubelet.on_failure():
        await managers.start("pod-ip").wait_leading()
        obj = rayservice(namespace)
        obj["spec"]["rayClusterConfig"]["enableInTreeAutoscaling"] = True
        obj["spec"]["upgradeStrategy"] = {
            "type": "NewClusterWithIncrementalUpgrade", "clusterUpgradeOptions": INCREMENTAL,
        }  # fmt: skip
        started = time.monotonic()
        await api.create(obj)
        obj = await rayservices.wait_ready(api, namespace, NAME, within=240)
        timings["ready"] = time.monotonic() - started
        old = rayservices.active_cluster(obj)
        assert old is not None
        old_head = kubelet.by_name((await head_pod(api, namespace, old))["metadata"]["name"])
        await check_real(world, old_head)

        async def routed_to(cluster: str) -> bool:
            try:
                route = await api.get(rayservice_gateway.HTTPROUTES, namespace, f"{NAME}-httproute")
            except errors.NotFound:
                return False
            return rayservice_gateway.weights(route) == {cluster: 100}

        await harness.until(lambda: routed_to(old), 60, "the HTTPRoute to the first cluster")
        async with harness.GatewayTraffic(traefik.url, PATHS, identified=False) as t:
            await t.wait_routed(20, within=60)
            upgrade = time.monotonic()
            await rayservices.update_spec(api, namespace, NAME, new_revision)
            obj = await rayservices.wait_ready(api, namespace, NAME, within=300, cluster_not=old)
            new = rayservices.active_cluster(obj)
            assert new is not None
            await harness.until(lambda: routed_to(new), 60, "the HTTPRoute to the new cluster")
            timings["upgrade"] = time.monotonic() - upgrade
            new_head = kubelet.by_name((await head_pod(api, namespace, new))["metadata"]["name"])
            await check_real(world, new_head)
            # Serve's own target_capacity, as the real heads report it
            for real, want in ((new_head, 100), (old_head, 0)):
                status, body = await fetch(world, real, 8265, APPLICATIONS)
                assert status == 200, (status, body)
                assert json.loads(body)["target_capacity"] == want, (real.name, body[:200])

            async def old_gone() -> bool:
                return await rayservices.cluster_names(api, namespace) == {new}

            await harness.until(old_gone, DELETION_DELAY + 60, "the old cluster deleted")
            await t.wait_requests(20, within=60)
        timings["total"] = time.monotonic() - started
        print(f"timings (s): { {k: round(v, 1) for k, v in timings.items()} }; "
              f"{t.ok} requests answered through Traefik, {len(t.failures)} failed")  # fmt: skip
        assert not t.failures, (
            f"{len(t.failures)} failed of {t.ok + len(t.failures)}: {t.failures[:5]}"
        )
        assert t.ok >= 100
        assert not kubelet.errors, kubelet.errors
        obj = await rayservices.get(api, namespace, NAME)
        assert rayservices.condition(obj, "UpgradeInProgress")["status"] == "False"
        assert "pendingServiceStatus" not in obj["status"]
