"""What the end-to-end suite runs the operator with: a world, manager processes, traffic.

- :class:`World`: the cluster the suite talks to. Locally (no ``$KUBECONFIG``): a
  control plane started here (etcd, kube-apiserver, kube-controller-manager,
  kube-scheduler, kwok, the pod network), the generated CRDs and RBAC applied from
  ``config/default`` with kubectl (everything but the Deployment: kwok runs no
  containers, so the manager runs as a process here instead), and the Ray data-plane
  simulator answering at the head and worker pod IPs. With ``$KUBECONFIG``: that
  cluster as it is, the operator already deployed in it (``make kind-e2e``).
- :class:`Manager`: ``rayservice-manager`` as its own process, as a user runs it: under
  a service-account token bound to the generated RBAC role (a missing rule fails here
  as in a cluster), with ``--leader-elect`` and ``--gateway-classes=traefik`` (the
  suite's gateway's class), in a dashboard address mode; its log goes
  to a file that the suite attaches to a failing test's report. :meth:`Manager.kill`
  is SIGKILL, :meth:`Manager.stop` SIGTERM (graceful). With ``restart_on_exit`` it is
  restarted 1 s after it exits on its own, as a kubelet restarts a Deployment's
  container (``restartPolicy: Always``, without the back-off growing); every such exit
  is recorded in :attr:`Manager.exits`.
- :class:`Traffic`: a client that behaves like kube-proxy: it follows the EndpointSlices
  of a Service (re-resolving on every change) and sends requests to a ready endpoint,
  round robin, a fresh connection each, recording every failure with its time and
  cause. It only ever dials pod IPs inside the world's pod CIDR.
- :class:`GatewayTraffic`: requests through a gateway's entry point (a loopback address,
  e.g. Traefik's), several senders on keep-alive connections, recording for every answer
  when it came and which pod gave it (the simulator's ``x-raysim-pod`` header), and every
  failure (a status other than 200, a wrong body, a connection error) with its time and
  cause.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import aiohttp
import pytest
import yaml

import api.v1 as v1
from runtime.client import client as client_
from runtime.client import errors, resources
from runtime.testing import controlplane
from tests.support import gateway, raysim
from tests.support.raysim import inside

__all__ = ["Failure", "GatewayTraffic", "Manager", "Traffic", "World", "until"]

ROOT = pathlib.Path(__file__).resolve().parents[2]
SYSTEM_NAMESPACE = "rayservice-operator-system"
SERVICE_ACCOUNT = "rayservice-operator-manager"
LEASE = "ray-operator-leader"
UNIMPORTABLE = "broken_module"
"""A module the simulator's heads cannot import (an application using it fails)."""

SLICES = resources.default_registry.for_kind("discovery.k8s.io/v1", "EndpointSlice")
NAMESPACES = resources.default_registry.for_kind("v1", "Namespace")
RAYSERVICES = resources.Resource("ray.io", "v1", "RayService", "rayservices")
RAYCLUSTERS = resources.Resource("ray.io", "v1", "RayCluster", "rayclusters")
PODS = resources.default_registry.for_kind("v1", "Pod")
SERVICES = resources.default_registry.for_kind("v1", "Service")
EVENTS_V1 = resources.Resource("events.k8s.io", "v1", "Event", "events")

Obj = dict[str, Any]


TIME_FACTOR = float(os.environ.get("E2E_TIME_FACTOR", "1"))
"""Every bound of the suite (:func:`until`, the per-test timeout) is multiplied by
``$E2E_TIME_FACTOR``: real Ray pods on a small machine (``make kind-e2e`` sets 3) start
in tens of seconds where the simulator's answer at once."""


async def until(check: Callable[[], Awaitable[Any]], within: float, what: str) -> Any:
    """Poll ``check`` every 0.25 s until it returns something truthy; fail after ``within``
    s (times :data:`TIME_FACTOR`)."""
    within *= TIME_FACTOR
    deadline = time.monotonic() + within
    last: Any = None
    while True:
        last = await check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within} s: {what} (last: {last!r})")
        await asyncio.sleep(0.25)


def kubectl(world: World, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [str(world.bin_dir / "kubectl"), "--kubeconfig", str(world.admin_kubeconfig), *args],
        input=stdin, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    if done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


@dataclasses.dataclass
class World:
    """The cluster under test (see the module docstring)."""

    admin_kubeconfig: pathlib.Path
    bin_dir: pathlib.Path
    cp: controlplane.ControlPlane | None = None
    sim: raysim.Simulator | None = None
    log_dir: pathlib.Path = dataclasses.field(default_factory=lambda: pathlib.Path("."))

    @property
    def local(self) -> bool:
        """True when the suite started the control plane (it can restart its members)."""
        return self.cp is not None

    @property
    def pod_cidr(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
        """The pod network the traffic client may dial: the suite's own, or, against
        ``$KUBECONFIG``'s cluster, ``$E2E_POD_CIDR`` (for kind, ``10.244.0.0/16``; the
        machine running pytest needs a route into it). None: dial nothing."""
        if self.cp is None:
            cidr = os.environ.get("E2E_POD_CIDR")
            return ipaddress.ip_network(cidr) if cidr else None
        if self.cp.pod_network is None:
            return None
        return ipaddress.ip_network(self.cp.pod_network.cidr)

    @classmethod
    @contextlib.contextmanager
    def started(cls, bin_dir: pathlib.Path, log_dir: pathlib.Path) -> Iterator[World]:
        external = os.environ.get("KUBECONFIG")
        if external:
            yield cls(pathlib.Path(external), bin_dir, log_dir=log_dir)
            return
        options = controlplane.Options(
            bin_dir=bin_dir, controller_manager=True, scheduler=True, kwok=True, nodes=2,
            pod_network=True,
        )  # fmt: skip
        with controlplane.running(options) as cp:
            assert cp.kubeconfig is not None
            world = cls(cp.kubeconfig, bin_dir, cp=cp, log_dir=log_dir)
            world.install()
            with raysim.running(cp, deploy_delay=1.0, unimportable=(UNIMPORTABLE,)) as sim:
                world.sim = sim
                yield world

    def install(self) -> None:
        """The generated CRDs and RBAC, as ``kubectl apply -k config/overlays/kubernetes-proxy``
        has them (config/default plus the proxy subresources: the suite runs managers in
        that mode too), without the Deployment (the suite runs the manager itself)."""
        overlay = ROOT / "config" / "overlays" / "kubernetes-proxy"
        rendered = kubectl(self, "kustomize", str(overlay))
        docs = [d for d in yaml.safe_load_all(rendered) if d and d.get("kind") != "Deployment"]
        kubectl(self, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(docs))
        kubectl(self, "wait", "--for=condition=Established", "--timeout=60s",
                "crd/rayservices.ray.io", "crd/rayclusters.ray.io")  # fmt: skip

    def manager_kubeconfig(self) -> pathlib.Path:
        assert self.cp is not None
        return self.cp.service_account_kubeconfig(SYSTEM_NAMESPACE, SERVICE_ACCOUNT)

    async def client(self) -> client_.Client:
        c = await client_.Client.from_kubeconfig(self.admin_kubeconfig)
        v1.add_to_registry(c.registry)
        return c


class Manager:
    """One ``rayservice-manager`` process (see the module docstring)."""

    def __init__(
        self, world: World, name: str, mode: str, *extra: str, restart_on_exit: bool = False
    ) -> None:
        self.world = world
        self.name = name
        self.mode = mode
        self.extra = extra
        self.restart_on_exit = restart_on_exit
        self.metrics_port, self.health_port = controlplane.free_ports(2)
        self.log_path = world.log_dir / f"manager-{name}.log"
        self.kubeconfig = world.manager_kubeconfig()  # once: a restart must not need the API
        self.proc: subprocess.Popen[bytes] | None = None
        self.exits: list[int] = []
        """Exit codes of the times it exited on its own (not stopped or killed by us)."""
        self._done = threading.Event()
        self._watcher: threading.Thread | None = None

    def start(self) -> Manager:
        self._spawn()
        self._watcher = threading.Thread(target=self._watch, name=f"manager-{self.name}",
                                         daemon=True)  # fmt: skip
        self._watcher.start()
        return self

    def _watch(self) -> None:
        while not self._done.is_set():
            proc = self.proc
            assert proc is not None
            code = proc.wait()
            if self._done.is_set():
                return
            self.exits.append(code)
            if not self.restart_on_exit or self._done.wait(1.0):
                return
            self._spawn()

    def _spawn(self) -> None:
        binary = pathlib.Path(sys.executable).with_name("rayservice-manager")
        args = [
            str(binary), "--kubeconfig", str(self.kubeconfig),
            "--leader-elect", "--leader-election-namespace", SYSTEM_NAMESPACE,
            "--metrics-bind-address", f"127.0.0.1:{self.metrics_port}",
            "--health-probe-bind-address", f"127.0.0.1:{self.health_port}",
            "--dashboard-address-mode", self.mode, "--log-format", "json",
            # The suite's gateway (Traefik) serves this class: incremental upgrades use it.
            f"--gateway-classes={gateway.GATEWAY_CLASS}",
            *self.extra,
        ]  # fmt: skip
        env = {**os.environ, "POD_NAMESPACE": SYSTEM_NAMESPACE}
        env.pop("KUBECONFIG", None)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, cwd=str(ROOT), start_new_session=True,
            )  # fmt: skip

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _get(self, port: int, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, ""
        except OSError:
            return 0, ""

    def leading(self) -> bool:
        status, text = self._get(self.metrics_port, "/metrics")
        return status == 200 and any(
            line.startswith("leader_election_master_status{") and line.rstrip().endswith(" 1.0")
            for line in text.splitlines()
        )

    async def wait_leading(self, within: float = 60.0) -> None:
        async def check() -> bool:
            if not self.alive():
                raise AssertionError(f"manager {self.name} exited: {self.tail()}")
            return await asyncio.to_thread(self.leading)

        await until(check, within, f"manager {self.name} leads")

    def tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL: no graceful stop, the Lease is not released (and no restart)."""
        self._done.set()
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 40.0) -> int | None:
        """SIGTERM and wait (then SIGKILL); the exit code."""
        self._done.set()
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode


@dataclasses.dataclass(frozen=True)
class Failure:
    at: float
    """Seconds since the traffic started."""
    target: str
    cause: str


class Traffic:
    """Requests to a Service's ready endpoints, like kube-proxy (see the module docstring)."""

    def __init__(
        self,
        client: client_.Client,
        world: World,
        namespace: str,
        service: str,
        paths: dict[str, str],
        *,
        interval: float = 0.02,
    ) -> None:
        """``paths``: request path -> the body a correct answer has (sent in turn)."""
        self.client = client
        self.world = world
        self.namespace = namespace
        self.service = service
        self.paths = list(paths.items())
        self.interval = interval
        self.endpoints: dict[str, list[tuple[str, int]]] = {}
        """EndpointSlice name -> its ready (ip, port) pairs."""
        self.ok = 0
        self.streak = 0
        """Requests answered in a row since the last failure."""
        self.failures: list[Failure] = []
        self.targets: set[str] = set()
        """Every endpoint IP a request went to."""
        self.resolutions = 0
        """EndpointSlice changes seen (each one re-resolves the endpoints)."""
        self._tasks: list[asyncio.Task[None]] = []
        self._started = 0.0
        self._reachable = asyncio.Event()

    async def __aenter__(self) -> Traffic:
        self._started = time.monotonic()
        self._tasks = [asyncio.create_task(self._follow()), asyncio.create_task(self._send())]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def ready_endpoints(self) -> list[tuple[str, int]]:
        return sorted({e for pairs in self.endpoints.values() for e in pairs})

    def _update(self, kind: str, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self.endpoints.pop(name, None)
            return
        port = next(
            (p.get("port") for p in obj.get("ports") or [] if p.get("name") == "serve"), None
        )
        pairs: list[tuple[str, int]] = []
        for endpoint in obj.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready") is False or port is None:
                continue
            pairs.extend((address, int(port)) for address in endpoint.get("addresses") or [])
        self.endpoints[name] = pairs
        self.resolutions += 1
        if pairs:
            self._reachable.set()

    async def _follow(self) -> None:
        selector = f"kubernetes.io/service-name={self.service}"
        while True:
            try:
                listed = await self.client.list(SLICES, self.namespace, label_selector=selector)
                self.endpoints = {}
                for item in listed.items:
                    self._update("ADDED", item)
                async for event in self.client.watch(
                    SLICES, self.namespace, resource_version=listed.resource_version,
                    label_selector=selector, timeout_seconds=300,
                ):  # fmt: skip
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        self._update(str(event["type"]), event["object"])
            except (errors.ApiError, aiohttp.ClientError, OSError, TimeoutError):
                await asyncio.sleep(0.5)

    def _check_pod_ip(self, ip: str) -> None:
        cidr = self.world.pod_cidr
        if cidr is None or ipaddress.ip_address(ip) not in cidr:
            raise AssertionError(
                f"endpoint {ip} is outside the pod network ({cidr}; against an external "
                "cluster set $E2E_POD_CIDR): not dialled"
            )

    async def _send(self) -> None:
        await self._reachable.wait()  # the first request needs somewhere to go
        timeout = aiohttp.ClientTimeout(total=5, connect=2)
        connector = aiohttp.TCPConnector(force_close=True)  # one connection per request
        turn = 0
        async with aiohttp.ClientSession(
            timeout=timeout, connector=connector, trust_env=False
        ) as http:
            while True:
                targets = self.ready_endpoints()
                path, want = self.paths[turn % len(self.paths)]
                now = time.monotonic() - self._started
                if not targets:
                    self._fail(Failure(now, "-", "no ready endpoints"))
                else:
                    ip, port = targets[turn % len(targets)]
                    self._check_pod_ip(ip)
                    self.targets.add(ip)
                    target = f"http://{ip}:{port}{path}"
                    try:
                        async with http.get(target) as response:
                            body = await response.text()
                        if response.status == 200 and body == want:
                            self.ok += 1
                            self.streak += 1
                        else:
                            cause = f"HTTP {response.status}: {body[:80]!r}"
                            self._fail(Failure(now, target, cause))
                    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                        self._fail(Failure(now, target, repr(exc)))
                turn += 1
                await asyncio.sleep(self.interval)

    def _fail(self, failure: Failure) -> None:
        self.failures.append(failure)
        self.streak = 0

    async def wait_streak(self, count: int, within: float) -> None:
        """Until ``count`` requests in a row were answered (for recoveries)."""

        async def answered() -> bool:
            return self.streak >= count

        await until(answered, within, f"{count} requests in a row answered")

    async def wait_targets(self, count: int, within: float = 30.0) -> None:
        """Until requests went to ``count`` distinct endpoints (Ready needs one serving
        endpoint; the others join the Service when their own readiness says so)."""

        async def spread() -> bool:
            return len(self.targets) >= count

        await until(spread, within, f"requests sent to {count} endpoints")

    async def wait_requests(self, count: int, within: float = 30.0) -> None:
        start = self.ok

        async def enough() -> bool:
            return self.ok - start >= count

        await until(enough, within, f"{count} answered requests")


class GatewayTraffic:
    """Requests through a gateway's entry point (see the module docstring)."""

    def __init__(
        self,
        url: str,
        paths: dict[str, str],
        *,
        senders: int = 2,
        interval: float = 0.01,
        identified: bool = True,
    ) -> None:
        """``url``: the entry point, ``http://<loopback address>[:port]``; ``paths``: request
        path -> the body a correct answer has (sent in turn); ``senders``: requests in flight
        at once, each sender on its own keep-alive connection; ``interval``: the pause
        between a sender's requests; ``identified``: an answer must name the pod that gave
        it (the simulator's ``x-raysim-pod``; real Ray names none: its answers count with
        ``""``)."""
        host = urllib.parse.urlsplit(url).hostname or ""
        if not ipaddress.ip_address(host).is_loopback:
            raise AssertionError(f"{url}: a gateway entry point must be on loopback")
        self.url = url.rstrip("/")
        self.paths = list(paths.items())
        self.senders = senders
        self.interval = interval
        self.identified = identified
        self.answers: list[tuple[float, str]] = []
        """(monotonic time, the answering pod's IP) of every answered request, in order."""
        self.failures: list[Failure] = []
        self.streak = 0
        """Requests answered in a row since the last failure."""
        self.started = 0.0
        """When it started (monotonic): :attr:`Failure.at` counts from here."""
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def ok(self) -> int:
        return len(self.answers)

    async def __aenter__(self) -> GatewayTraffic:
        self.started = time.monotonic()
        self._tasks = [asyncio.create_task(self._send(n)) for n in range(self.senders)]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _send(self, first: int) -> None:
        timeout = aiohttp.ClientTimeout(total=5, connect=2)
        connector = aiohttp.TCPConnector(limit=1)  # one keep-alive connection per sender
        turn = first
        async with aiohttp.ClientSession(
            timeout=timeout, connector=connector, trust_env=False
        ) as http:
            while True:
                path, want = self.paths[turn % len(self.paths)]
                target = self.url + path
                try:
                    async with http.get(target) as response:
                        body = await response.text()
                        pod = response.headers.get(inside.POD_HEADER, "")
                    if response.status == 200 and body == want and (pod or not self.identified):
                        self.answers.append((time.monotonic(), pod))
                        self.streak += 1
                    else:
                        self._fail(
                            target, f"HTTP {response.status} from {pod or '?'}: {body[:80]!r}"
                        )
                except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                    self._fail(target, repr(exc))
                turn += 1
                await asyncio.sleep(self.interval)

    def _fail(self, target: str, cause: str) -> None:
        self.failures.append(Failure(time.monotonic() - self.started, target, cause))
        self.streak = 0

    async def wait_streak(self, count: int, within: float) -> None:
        """Until ``count`` requests in a row were answered."""

        async def answered() -> bool:
            return self.streak >= count

        await until(answered, within, f"{count} requests in a row answered through the gateway")

    async def wait_routed(self, count: int, within: float) -> list[Failure]:
        """Until ``count`` requests in a row were answered, then forget the failures before
        them (a gateway answers 404 until it has picked up a new route); those failures."""
        await self.wait_streak(count, within)
        before, self.failures = self.failures, []
        return before

    async def wait_requests(self, count: int, within: float = 30.0) -> None:
        start = self.ok

        async def enough() -> bool:
            return self.ok - start >= count

        await until(enough, within, f"{count} answered requests through the gateway")


DEFAULT_MODE = os.environ.get("E2E_DASHBOARD_MODE", "pod-ip")
"""The dashboard address mode managers start in (``$E2E_DASHBOARD_MODE``, default ``pod-ip``)."""


class Managers:
    """The manager processes of one test."""

    def __init__(self, world: World, test: str = "") -> None:
        self.world = world
        self.prefix = re.sub(r"[^A-Za-z0-9_.-]+", "-", test).strip("-")
        """Log files are ``manager-<test>-<n>.log``: one per process and test."""
        self.started: list[Manager] = []

    def start(
        self, mode: str = DEFAULT_MODE, *extra: str, restart_on_exit: bool = False
    ) -> Manager:
        if not self.world.local:
            pytest.fail("not marked own_cluster, but it starts its own managers: against "
                        "$KUBECONFIG's cluster the operator is the one deployed there")  # fmt: skip
        manager = Manager(
            self.world,
            f"{self.prefix}-{len(self.started)}".lstrip("-"),
            mode,
            *extra,
            restart_on_exit=restart_on_exit,
        )
        self.started.append(manager.start())
        return manager

    async def lead(self, mode: str = DEFAULT_MODE) -> None:
        """One manager in ``mode``, leading; against an external cluster, nothing (the
        operator deployed there is the one under test)."""
        if self.world.local:
            await self.start(mode).wait_leading()

    def stop_all(self) -> list[str]:
        problems = []
        for manager in self.started:
            code = manager.stop()
            if manager.exits and not manager.restart_on_exit:
                problems.append(f"manager {manager.name} exited on its own: {manager.exits}")
            if code not in (0, -9, None):
                problems.append(f"manager {manager.name} stopped with exit code {code}")
        return problems
