"""Real Ray Serve, started from the pods our RayCluster controller made (hack/realray).

One module-scoped world: our RayCluster controller (a manager in a thread, watching two
namespaces) makes ``alpha`` (a head and one worker, one CPU each) and ``beta`` (a head
only, in another namespace); kwok binds the pods and gives them IPs; the harness runs the
three pods' own containers for real, each in a network namespace of its own at its pod
IP, with its own readiness probe deciding ``Ready``. The dashboard client then drives
Ray Serve in ``pod-ip`` and ``kubernetes-proxy`` modes. Ray comes from ``make ray``
(hack/realray/install.sh); without it these tests fail saying so, never skip.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import doctest
import ipaddress
import json
import pathlib
import secrets
import subprocess
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

import api.v1 as v1
from controllers.ray import dashboard, serveconfig
from controllers.raycluster import setup as raycluster_setup
from runtime import manager as manager_
from runtime.client import client as client_
from runtime.testing import controlplane
from tests.integration import helpers
from tests.support import realray
from tests.support.realray import podspec

ROOT = pathlib.Path(__file__).parents[2]
APPS = pathlib.Path(__file__).parent / "testdata" / "realray_apps"

TWO_APPS = """
applications:
  - name: greet
    route_prefix: /greet
    import_path: rso_apps:greeter
    args: {greeting: hello}
  - name: echo
    route_prefix: /echo
    import_path: rso_apps:echo
"""

BROKEN = """
applications:
  - name: greet
    route_prefix: /greet
    import_path: rso_apps:greeter
    args: {greeting: hello}
  - name: broken
    route_prefix: /broken
    import_path: rso_no_such_module:app
"""


def template(name: str) -> dict[str, Any]:
    # One CPU per node: two one-CPU replicas on alpha need both of its nodes.
    limits = {"cpu": "1", "memory": "2Gi"}
    container = {"name": name, "image": "rayproject/ray:2.60.0",
                 "resources": {"limits": limits, "requests": limits}}  # fmt: skip
    return {"spec": {"containers": [container]}}


def raycluster_obj(name: str, workers: int) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "rayVersion": "2.60.0",
        "headGroupSpec": {"rayStartParams": {}, "template": template("ray-head")},
    }
    if workers:
        spec["workerGroupSpecs"] = [
            {"groupName": "small", "replicas": workers, "minReplicas": 0, "maxReplicas": 2,
             "rayStartParams": {}, "template": template("ray-worker")}
        ]  # fmt: skip
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": name},
            "spec": spec}  # fmt: skip


class ManagerThread:
    """Our manager with the RayCluster controller, on an event loop of its own."""

    def __init__(self, kubeconfig: pathlib.Path, namespaces: list[str]) -> None:
        self.kubeconfig = kubeconfig
        self.namespaces = namespaces
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stop_event: asyncio.Event | None = None
        self.started = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="realray-manager", daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:
            self.error = exc
            self.started.set()

    async def _main(self) -> None:
        client = await client_.Client.from_kubeconfig(self.kubeconfig)
        try:
            mgr = manager_.Manager(client, manager_.Options(
                name="rayservice-operator", namespaces=self.namespaces, metrics_bind_address="0",
                health_probe_bind_address="0"))  # fmt: skip
            raycluster_setup.setup(mgr, skip_name_validation=True)
            self.loop = asyncio.get_running_loop()
            self.stop_event = asyncio.Event()
            self.started.set()
            await mgr.start(self.stop_event)
        finally:
            await client.close()

    def start(self) -> None:
        self.thread.start()
        assert self.started.wait(60), "the manager did not start"
        assert self.error is None, self.error

    def stop(self) -> None:
        if self.loop is not None and self.stop_event is not None:
            self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(60)
        assert not self.thread.is_alive(), "the manager did not stop"
        assert self.error is None, self.error


@dataclasses.dataclass
class World:
    cp: controlplane.ControlPlane
    harness: realray.Harness
    alpha_ns: str
    beta_ns: str
    alpha_head: realray.RealPod
    alpha_worker: realray.RealPod
    beta_head: realray.RealPod

    @property
    def pods(self) -> list[realray.RealPod]:
        return [self.alpha_head, self.alpha_worker, self.beta_head]

    def tails(self) -> str:
        return "\n".join(f"--- {p}\n{p.log_tail()}" for p in self.pods)

    def pod(self, real: realray.RealPod) -> dict[str, Any]:
        result: dict[str, Any] = self.cp.request(
            "GET", f"/api/v1/namespaces/{real.namespace}/pods/{real.name}"
        )
        return result


def pod_names(cp: controlplane.ControlPlane, namespace: str, cluster: str) -> dict[str, str]:
    """``{node type: pod name}`` once every pod of ``cluster`` has an IP, else ``{}``."""
    pods = cp.request(
        "GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector=ray.io/cluster%3D{cluster}"
    )["items"]
    if not pods or not all((p.get("status") or {}).get("podIP") for p in pods):
        return {}
    return {p["metadata"]["labels"]["ray.io/node-type"]: p["metadata"]["name"] for p in pods}


@pytest.fixture(scope="module")
def world(control_plane: controlplane.ControlPlane) -> Iterator[World]:
    cp = control_plane
    assert cp.kubeconfig is not None
    try:
        realray.ray_venv()
    except realray.RealRayError as exc:
        pytest.fail(str(exc), pytrace=False)
    cp.install_crds(ROOT / "config/crd/bases")
    suffix = secrets.token_hex(3)
    alpha_ns, beta_ns = f"realray-a-{suffix}", f"realray-b-{suffix}"
    for ns in (alpha_ns, beta_ns):
        cp.request("POST", "/api/v1/namespaces",
                   {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})  # fmt: skip
    manager = ManagerThread(cp.kubeconfig, [alpha_ns, beta_ns])
    try:
        manager.start()
        cp.request("POST", f"/apis/ray.io/v1/namespaces/{alpha_ns}/rayclusters",
                   raycluster_obj("alpha", 1))  # fmt: skip
        cp.request("POST", f"/apis/ray.io/v1/namespaces/{beta_ns}/rayclusters",
                   raycluster_obj("beta", 0))  # fmt: skip

        def both() -> dict[str, str] | None:
            names = pod_names(cp, alpha_ns, "alpha")
            return names if len(names) == 2 else None

        alpha = helpers.eventually_sync(both, 90, "alpha's head and worker pods with IPs")
        beta = helpers.eventually_sync(
            lambda: pod_names(cp, beta_ns, "beta"), 90, "beta's head pod with an IP"
        )
        with realray.running(cp, pythonpath=[APPS]) as harness:
            w = World(
                cp=cp, harness=harness, alpha_ns=alpha_ns, beta_ns=beta_ns,
                alpha_head=harness.run(alpha_ns, alpha["head"]),
                alpha_worker=harness.run(alpha_ns, alpha["worker"]),
                beta_head=harness.run(beta_ns, beta["head"]),
            )  # fmt: skip
            yield w
            netns = [p.netns for p in w.pods]
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert not [n for n in netns if n in listed], listed
        assert not any(pathlib.Path("/etc/netns", n).exists() for n in netns)
    finally:
        with contextlib.suppress(Exception):
            manager.stop()
        for ns in (alpha_ns, beta_ns):
            with contextlib.suppress(controlplane.ApiError):
                cp.request("DELETE", f"/api/v1/namespaces/{ns}")


@pytest.fixture
async def api(control_plane: controlplane.ControlPlane) -> AsyncIterator[client_.Client]:
    assert control_plane.kubeconfig is not None
    c = await client_.Client.from_kubeconfig(control_plane.kubeconfig)
    v1.add_to_registry(c.registry)
    async with c:
        yield c


@pytest.fixture
async def dashboards(api: client_.Client) -> AsyncIterator[dashboard.Dashboards]:
    # Serve's first PUT on a fresh head starts Serve: 5-8 s here, longer than the operator's
    # 2 s (that PUT still deploys: kuberay-facts.md); the tests wait for the answer.
    timeouts = dashboard.Timeouts(connect=5, total=60)
    async with dashboard.Dashboards(api=api, timeouts=timeouts) as d:
        yield d


def pod_url(world: World, real: realray.RealPod, port: int, path: str) -> str:
    """A URL at a pod IP the harness verified routes into its own namespace."""
    network = world.cp.pod_network
    assert network is not None
    assert ipaddress.ip_address(real.ip) in ipaddress.ip_network(network.cidr)
    real.verify()  # the route goes into the harness's veth, then into the pod's own
    network.connections.append((real.ip, port))
    return f"http://{real.ip}:{port}{path}"


async def fetch(world: World, real: realray.RealPod, port: int, path: str) -> tuple[int, str]:
    """(status, body) from a pod, or (0, error) when nothing answers."""
    timeout = aiohttp.ClientTimeout(total=10, connect=3)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout, trust_env=False) as http,
            http.get(pod_url(world, real, port, path)) as response,
        ):
            return response.status, await response.text()
    except (aiohttp.ClientError, TimeoutError) as exc:
        return 0, type(exc).__name__


def client_for(
    world: World, dashboards: dashboard.Dashboards, mode: dashboard.Mode, head: realray.RealPod
) -> dashboard.DashboardClient:
    cluster = head.pod["metadata"]["labels"]["ray.io/cluster"]
    if mode == "pod-ip":
        pod_url(world, head, 8265, "/")  # the same checks as any dial of a pod IP
    addr = dashboard.address(mode, cluster=cluster, namespace=head.namespace, head_pod_ip=head.ip)
    return dashboards.client_for(addr)


async def statuses(client: dashboard.DashboardClient) -> dict[str, str]:
    try:
        details = await client.get_serve_applications()
    except dashboard.DashboardError:
        return {}
    return {name: str(app.status) for name, app in details.applications.items()}


async def reach(world: World, client: dashboard.DashboardClient, what: str) -> None:
    """Until the dashboard answers (Ray starts in ~10 s per node on 2 cores)."""

    async def answers() -> bool:
        try:
            await client.get_serve_applications()
        except dashboard.DashboardError:
            return False
        return True

    try:
        await helpers.eventually(answers, 120, what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{world.tails()}") from None


async def settle(
    world: World, client: dashboard.DashboardClient, wanted: dict[str, str], within: float = 90
) -> dashboard.ServeDetails:
    async def done() -> dashboard.ServeDetails | None:
        with contextlib.suppress(dashboard.DashboardError):
            details = await client.get_serve_applications()
            got = {name: str(app.status) for name, app in details.applications.items()}
            return details if got == wanted else None
        return None

    try:
        return await helpers.eventually(done, within, f"applications {wanted}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; now {await statuses(client)}\n{world.tails()}") from None


# -- the tests -------------------------------------------------------------------------------


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    found = [c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind]
    return found[0] if found else {}


async def test_pods_turn_ready_only_when_their_own_readiness_probe_passes(world: World) -> None:
    for real in world.pods:
        await helpers.eventually(lambda r=real: r.ready or r.error, 150,
                                 f"{real} Ready")  # fmt: skip
        assert real.error is None, f"{real.error}\n{world.tails()}"
        assert real.started_at is not None
        assert any(ok for _, ok in real.probes), real.probes
        ready = condition(world.pod(real), "Ready")
        assert ready["status"] == "True"
        # Written by the harness after the process started (kwok's came before it).
        written = datetime.datetime.fromisoformat(
            ready["lastTransitionTime"].replace("Z", "+00:00")
        )
        assert written.timestamp() >= int(real.started_at)
        first_pass = min(t for t, ok in real.probes if ok)
        assert first_pass >= real.started_at
    # The head's probe checks the dashboard and the GCS, so the head answers by now.
    status, body = await fetch(world, world.alpha_head, 8265, "/api/gcs_healthz")
    assert (status, body.strip()) == (200, "success")

    async def alpha_ready() -> dict[str, Any] | None:
        rc = world.cp.request(
            "GET", f"/apis/ray.io/v1/namespaces/{world.alpha_ns}/rayclusters/alpha"
        )
        st = rc.get("status") or {}
        return rc if st.get("readyWorkerReplicas") == 1 and st.get("state") == "ready" else None

    rc = await helpers.eventually(alpha_ready, 60, "alpha ready with its worker")
    assert condition(rc, "HeadPodReady")["status"] == "True"


async def test_two_applications_run_and_answer_at_the_pod_ip(
    world: World, dashboards: dashboard.Dashboards
) -> None:
    head, worker = world.alpha_head, world.alpha_worker
    client = client_for(world, dashboards, "pod-ip", head)
    await reach(world, client, "alpha's dashboard at its pod IP")
    await client.put_serve_applications(serveconfig.serve_config(TWO_APPS))
    details = await settle(world, client, {"greet": "RUNNING", "echo": "RUNNING"})
    assert details.applications["greet"].route_prefix == "/greet"

    greet = await fetch(world, head, 8000, "/greet")
    echo = await fetch(world, head, 8000, "/echo/some/path")
    assert greet[0] == 200, greet
    assert greet[1].startswith("hello from "), greet
    assert echo[0] == 200, echo
    assert echo[1].startswith("echo /echo/some/path from "), echo
    # One CPU per node and one CPU per replica: the two replicas run on different nodes,
    # so the worker joined the head through the head service's name, as its pod says.
    served_by = {greet[1].rsplit(" ", 1)[1], echo[1].rsplit(" ", 1)[1]}
    assert served_by == {head.hostname, worker.hostname}
    assert await client.serve_proxy_healthy(world.pod(head))


async def test_kubernetes_proxy_mode_and_a_broken_import_path(
    world: World, dashboards: dashboard.Dashboards
) -> None:
    head = world.alpha_head
    client = client_for(world, dashboards, "kubernetes-proxy", head)
    await reach(world, client, "alpha's dashboard through the API server")
    await client.put_serve_applications(serveconfig.serve_config(BROKEN))
    details = await settle(world, client, {"greet": "RUNNING", "broken": "DEPLOY_FAILED"})
    message = details.applications["broken"].message
    assert "rso_no_such_module" in message, message
    assert "ModuleNotFoundError" in message, message
    assert details.applications["broken"].deployments == {}
    assert await client.serve_proxy_healthy(world.pod(head))
    # The same head seen directly: the left-out application is gone there too.
    direct = client_for(world, dashboards, "pod-ip", head)
    assert await statuses(direct) == {"greet": "RUNNING", "broken": "DEPLOY_FAILED"}
    assert (await fetch(world, head, 8000, "/echo/x"))[0] == 404


async def test_two_heads_on_the_same_ports_in_separate_namespaces_both_answer(
    world: World, dashboards: dashboard.Dashboards
) -> None:
    alpha, beta = world.alpha_head, world.beta_head
    assert alpha.ip != beta.ip
    assert alpha.netns != beta.netns
    config = serveconfig.serve_config(TWO_APPS.replace("greeting: hello", "greeting: hi"))
    config["applications"] = config["applications"][:1]
    beta_client = client_for(world, dashboards, "pod-ip", beta)
    alpha_client = client_for(world, dashboards, "pod-ip", alpha)
    await reach(world, beta_client, "beta's dashboard at its pod IP")
    await beta_client.put_serve_applications(config)
    await settle(world, beta_client, {"greet": "RUNNING"})
    # Alpha keeps (or gets) its own greet application, with its own greeting.
    await alpha_client.put_serve_applications(
        serveconfig.serve_config(TWO_APPS.split("  - name: echo")[0])
    )
    await settle(world, alpha_client, {"greet": "RUNNING"})

    beta_answer = await fetch(world, beta, 8000, "/greet")
    assert beta_answer == (200, f"hi from {beta.hostname}")
    alpha_answer = await fetch(world, alpha, 8000, "/greet")
    assert alpha_answer[0] == 200
    assert alpha_answer[1].startswith("hello from ")
    # Both dashboards on :8265, each its own cluster.
    assert await statuses(beta_client) == await statuses(alpha_client) == {"greet": "RUNNING"}
    assert (await fetch(world, beta, 8265, "/api/gcs_healthz"))[0] == 200
    assert (await fetch(world, alpha, 8265, "/api/gcs_healthz"))[0] == 200


def test_stopping_a_pod_removes_its_processes_and_namespace(world: World) -> None:
    beta, alpha = world.beta_head, world.alpha_head
    assert beta.pids()
    beta.stop()
    assert beta.pids() == []
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert beta.netns not in listed
    assert alpha.netns in listed
    assert not pathlib.Path("/etc/netns", beta.netns).exists()
    assert not beta.directory.exists()
    assert condition(world.pod(beta), "Ready")["status"] == "False"
    network = world.cp.pod_network
    assert network is not None
    # Its IP falls back to the shared pod namespace, where nothing listens on :8265.
    with pytest.raises(ConnectionRefusedError):
        network.connect(beta.ip, 8265).close()
    # Alpha is untouched.
    network.connect(alpha.ip, 8265).close()


def test_reap_removes_what_a_dead_harness_left_and_nothing_live(world: World) -> None:
    name = f"rsr-{secrets.token_hex(4)}"
    directory = pathlib.Path("/tmp") / name
    directory.mkdir()
    realray.LOCK_DIR.mkdir(parents=True, exist_ok=True)
    # A lock file nobody holds: its harness died.
    (realray.LOCK_DIR / f"{name}.lock").write_text(json.dumps({"pid": 0, "dir": str(directory)}))
    subprocess.run(["ip", "netns", "add", name], check=True)
    pathlib.Path("/etc/netns", name).mkdir(parents=True)
    pathlib.Path("/etc/netns", name, "hosts").write_text("127.0.0.1\tlocalhost\n")
    left = subprocess.Popen(["ip", "netns", "exec", name, "sleep", "300"], start_new_session=True)
    try:
        helpers.eventually_sync(
            lambda: subprocess.run(["ip", "netns", "pids", name], capture_output=True,
                                   text=True).stdout.strip(), 10, "the process in the namespace",
        )  # fmt: skip
        report = realray.reap()
        assert f"removed stale pod namespace {name}" in report
        assert left.wait(10) == -9
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert name not in listed
        assert not pathlib.Path("/etc/netns", name).exists()
        assert not directory.exists()
        assert not (realray.LOCK_DIR / f"{name}.lock").exists()
        # The live harness's namespaces are its own.
        assert world.alpha_head.netns in listed
        assert world.alpha_head.pids()
    finally:
        if left.poll() is None:
            left.kill()
            left.wait()
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def test_without_ray_the_harness_says_how_to_install_it(
    control_plane: controlplane.ControlPlane,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(realray.VENV_ENV, str(tmp_path))
    with pytest.raises(realray.RealRayError, match=r"no Ray at .*make ray.*install\.sh"):
        realray.ray_venv()
    with pytest.raises(realray.RealRayError, match="make ray"):
        realray.Harness(control_plane).start()


def test_podspec_examples() -> None:
    assert doctest.testmod(podspec).failed == 0
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
           "spec": {"nodeName": "n1"}, "status": {"podIP": "198.18.0.9"}}  # fmt: skip
    container = {
        "resources": {"limits": {"cpu": "1500m", "memory": "2Gi"}},
        "envFrom": [{"secretRef": {"name": "s"}, "prefix": "S_"}],
        "env": [
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "CPUS", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory",
                                                                  "divisor": "1Mi"}}},
            {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k",
                                                              "optional": True}}},
            {"name": "URL", "value": "http://$(IP):8265/$(S_TOKEN)"},
        ],
    }  # fmt: skip

    def lookup(kind: str, name: str) -> dict[str, str] | None:
        return {"TOKEN": "t0k"} if (kind, name) == ("secrets", "s") else None

    assert podspec.environment(pod, container, lookup) == {
        "S_TOKEN": "t0k", "IP": "198.18.0.9", "CPUS": "2", "MEM_MI": "2048",
        "URL": "http://198.18.0.9:8265/t0k",
    }  # fmt: skip
    for bad in ({"fieldRef": {"fieldPath": "spec.priority"}},
                {"configMapKeyRef": {"name": "cm", "key": "k"}}):  # fmt: skip
        with pytest.raises(podspec.PodSpecError):
            podspec.environment(pod, {"env": [{"name": "X", "valueFrom": bad}]}, lookup)
    with pytest.raises(podspec.PodSpecError, match="entrypoint"):
        podspec.command({"name": "ray-head", "args": ["x"]}, {})
