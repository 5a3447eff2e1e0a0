"""The host part of the Ray simulator: pods in, live head IPs out, fault switches.

``python -m tests.support.raysim --kubeconfig KC --netns NS [--host-veth V] [--pod-cidr C]
[--admin-port P] [--deploy-delay S] [--delete-delay S] [--unimportable m1,m2]
[--job-pending-s S] [--job-run-s S] [--job-outcome succeed|fail|forever]`` (the ``--job-*``
options are the defaults of every simulated job: :class:`tests.support.raysim.jobs.Defaults`)

1. **Refuses to start** unless ``NS`` exists and three addresses of the pod CIDR
   (first, middle, last) route into ``NS``'s host veth (``ip route get`` says
   ``dev <veth>``). The veth defaults to the one :class:`runtime.testing.controlplane.PodNetwork`
   names for ``NS`` (``rso-<x>`` -> ``rsoh<x>``), the CIDR to the route on that veth.
2. Starts :mod:`tests.support.raysim.inside` in the namespace (``ip netns exec NS python -m
   tests.support.raysim.inside``) as its own process group, and talks to it over its
   stdin/stdout (JSON lines, each request answered).
3. Lists and watches pods labelled ``ray.io/is-ray-node=yes`` in every namespace (our
   :class:`runtime.client.Client`); a pod is live while it is ``Running`` with a pod IP
   inside the CIDR and no ``deletionTimestamp``. After every batch of events it sends
   the full ``{ip: uid}`` set of live heads inward, with the live workers of those
   heads' clusters (``ray.io/cluster`` in the same namespace) as ``{worker ip: head
   ip}``; a pod that goes away takes its IP with it.
4. Serves an admin API on ``127.0.0.1:P`` only (``0``: any free port): ``POST /fault``
   (a JSON body as the inside's ``fault`` op: ``ip`` plus ``dashboard_down``,
   ``slow_s``, ``unhealthy``, ``healthy``, ``restart``), ``GET /state`` (live IPs as the inside part
   has them, both processes' pids and RSS, the request counts), ``GET /healthz``.
5. Prints one JSON line when everything is up: ``{"ready": true, "admin": url,
   "pid": ..., "inside_pid": ..., "cidr": ..., "netns": ..., "ports": {...}}``.

It stops on SIGTERM/SIGINT, or when the inside part exits, and then stops the inside
part by its own process group. It never binds anything but ``127.0.0.1``, and dials
only the API server of the kubeconfig.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import itertools
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
from typing import Any

from aiohttp import web, web_request, web_response

from tests.support.raysim import inside

__all__ = ["HEAD_SELECTOR", "RAY_SELECTOR", "RouteError", "check_routes", "main"]

HEAD_SELECTOR = "ray.io/node-type=head,ray.io/is-ray-node=yes"
RAY_SELECTOR = "ray.io/is-ray-node=yes"
ROOT = pathlib.Path(__file__).resolve().parents[3]


class RouteError(RuntimeError):
    """The pod CIDR does not route into the pod namespace: refuse to run."""


def _ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RouteError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def default_host_veth(netns: str) -> str:
    """The host end of the veth ``PodNetwork`` makes for namespace ``netns``.

    >>> default_host_veth("rso-0a1b2c3d")
    'rsoh0a1b2c3d'
    """
    match = re.fullmatch(r"rso-([0-9a-f]{8})", netns)
    if match is None:
        raise RouteError(f"cannot tell the host veth of namespace {netns!r}: pass --host-veth")
    return f"rsoh{match.group(1)}"


def check_routes(netns: str, host_veth: str, cidr: str | None = None) -> str:
    """Return the pod CIDR after checking that it routes into ``host_veth`` (else raise)."""
    names = {line.split()[0] for line in _ip("netns", "list").splitlines() if line.strip()}
    if netns not in names:
        raise RouteError(f"network namespace {netns!r} does not exist")
    if cidr is None:
        for line in _ip("route", "show", "dev", host_veth).splitlines():
            first = line.split()[0] if line.split() else ""
            if "/" in first:
                cidr = first
                break
        if cidr is None:
            raise RouteError(f"no pod CIDR is routed to {host_veth}")
    network = ipaddress.ip_network(cidr)
    for probe in (network[1], network[network.num_addresses // 2], network[-2]):
        route = _ip("route", "get", str(probe))
        if f"dev {host_veth} " not in route + " ":
            raise RouteError(f"{probe} does not route into {host_veth}: {route.strip()!r}")
    return str(network)


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _is_head(pod: dict[str, Any]) -> bool:
    return ((pod.get("metadata") or {}).get("labels") or {}).get("ray.io/node-type") == "head"


def live_proxies(pods: dict[str, dict[str, Any]], cidr: str) -> dict[str, str]:
    """``{worker ip: head ip}``: each live worker among ``pods`` whose cluster (its
    ``ray.io/cluster`` label, same namespace) has a live head.

    >>> def pod(uid, kind, ip):
    ...     return {"metadata": {"uid": uid, "namespace": "ns", "labels": {
    ...         "ray.io/node-type": kind, "ray.io/cluster": "c"}},
    ...         "status": {"phase": "Running", "podIP": ip}}
    >>> pods = {"ns/h": pod("u1", "head", "198.18.1.4"), "ns/w": pod("u2", "worker", "198.18.1.5")}
    >>> live_proxies(pods, "198.18.0.0/20")
    {'198.18.1.5': '198.18.1.4'}
    >>> live_proxies({"ns/w": pods["ns/w"]}, "198.18.0.0/20")
    {}
    """
    owners = _live(pods, cidr)
    heads: dict[tuple[str, str], str] = {}
    for ip, key in owners.items():
        if _is_head(pods[key]):
            meta = pods[key].get("metadata") or {}
            cluster = (meta.get("labels") or {}).get("ray.io/cluster", "")
            heads[(str(meta.get("namespace", "")), cluster)] = ip
    proxies = {}
    for ip, key in owners.items():
        meta = pods[key].get("metadata") or {}
        cluster = (meta.get("labels") or {}).get("ray.io/cluster", "")
        head = heads.get((str(meta.get("namespace", "")), cluster))
        if not _is_head(pods[key]) and head is not None:
            proxies[ip] = head
    return proxies


def live_heads(pods: dict[str, dict[str, Any]], cidr: str) -> dict[str, str]:
    """``{ip: uid}`` of the live heads among ``pods`` (keyed by namespace/name); pods
    without the ``ray.io/node-type=head`` label (workers) are left out.

    Should two live pods report one IP (kwok v0.7.0 does, now and then, when hundreds of
    pods start at once), the IP belongs to the older one (then the smaller key), so the
    answer does not flip between them.

    >>> pod = {"metadata": {"uid": "u1", "labels": {"ray.io/node-type": "head"}},
    ...        "status": {"phase": "Running", "podIP": "198.18.1.4"}}
    >>> live_heads({"ns/a": pod}, "198.18.0.0/20"), live_heads({"ns/a": pod}, "198.18.16.0/20")
    ({'198.18.1.4': 'u1'}, {})
    """
    owners = _live(pods, cidr)
    return {
        ip: str((pods[key].get("metadata") or {}).get("uid", ""))
        for ip, key in owners.items()
        if _is_head(pods[key])
    }


def _live(pods: dict[str, dict[str, Any]], cidr: str) -> dict[str, str]:
    """``{ip: key}`` of the live pods among ``pods``: one owner per IP."""
    network = ipaddress.ip_network(cidr)
    owners: dict[str, tuple[str, str, str]] = {}
    for key, pod in pods.items():
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        ip = status.get("podIP")
        if not ip or status.get("phase") != "Running" or meta.get("deletionTimestamp"):
            continue
        try:
            if ipaddress.ip_address(ip) not in network:
                continue
        except ValueError:
            continue
        claim = (str(meta.get("creationTimestamp", "")), key, str(meta.get("uid", "")))
        if ip not in owners or claim < owners[ip]:
            owners[str(ip)] = claim
    return {ip: claim[1] for ip, claim in owners.items()}


class Host:
    """One host part: the inside process, the pod watch and the admin API."""

    def __init__(self, args: argparse.Namespace, cidr: str) -> None:
        self.args = args
        self.cidr = cidr
        self.proc: asyncio.subprocess.Process | None = None
        self.inside_ready: dict[str, Any] = {}
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._pods: dict[str, dict[str, Any]] = {}
        self._sent: tuple[dict[str, str], dict[str, str]] | None = None
        self._changed = asyncio.Event()
        self._send_lock = asyncio.Lock()

    # -- the inside part -----------------------------------------------------------------------

    async def start_inside(self) -> None:
        a = self.args
        command = [
            "ip", "netns", "exec", a.netns, sys.executable, "-m", "tests.support.raysim.inside",
            "--deploy-delay", str(a.deploy_delay), "--delete-delay", str(a.delete_delay),
            "--unimportable", a.unimportable, "--job-pending-s", str(a.job_pending_s),
            "--job-run-s", str(a.job_run_s), "--job-outcome", a.job_outcome,
        ]  # fmt: skip
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        self.proc = await asyncio.create_subprocess_exec(
            *command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=str(ROOT),
            env=env,
            start_new_session=True,
            limit=64 * 1024 * 1024,
        )
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), timeout=60)
        if not line:
            code = await self.proc.wait()
            raise RuntimeError(f"the inside part exited with code {code} before it was ready")
        self.inside_ready = json.loads(line)
        asyncio.get_running_loop().create_task(self._read_answers())

    async def _read_answers(self) -> None:
        assert self.proc is not None
        assert self.proc.stdout is not None
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                break
            answer = json.loads(line)
            future = self._pending.pop(int(answer.get("id") or 0), None)
            if future is not None and not future.done():
                future.set_result(answer)
        for future in self._pending.values():
            if not future.done():
                future.set_exception(RuntimeError("the inside part exited"))

    async def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.proc is not None
        assert self.proc.stdin is not None
        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        self.proc.stdin.write((json.dumps({**message, "id": request_id}) + "\n").encode())
        await self.proc.stdin.drain()
        return await asyncio.wait_for(future, timeout=30)

    def stop_inside(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)

    # -- pods ----------------------------------------------------------------------------------

    async def watch_pods(self) -> None:
        from runtime.client import client as client_
        from runtime.client import errors, resources

        pods = resources.Resource("", "v1", "Pod", "pods")
        api = await client_.Client.from_kubeconfig(pathlib.Path(self.args.kubeconfig))
        async with api:
            while True:
                try:
                    listed = await api.list(pods, None, label_selector=RAY_SELECTOR)
                    self._pods = {_key(p): p for p in listed.items}
                    self._changed.set()
                    rv = listed.resource_version
                    while True:
                        async for event in api.watch(
                            pods, None, resource_version=rv, timeout_seconds=240,
                            label_selector=RAY_SELECTOR,
                        ):  # fmt: skip
                            obj = event.get("object") or {}
                            rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                            kind = event.get("type")
                            if kind == "DELETED":
                                self._pods.pop(_key(obj), None)
                            elif kind in ("ADDED", "MODIFIED"):
                                self._pods[_key(obj)] = obj
                            else:
                                continue
                            self._changed.set()
                except errors.Gone:
                    continue
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    print(f"raysim: pod watch failed ({exc!r}); relisting", file=sys.stderr)
                    await asyncio.sleep(1.0)

    async def publish_loop(self) -> None:
        while True:
            await self._changed.wait()
            self._changed.clear()
            sent = (live_heads(self._pods, self.cidr), live_proxies(self._pods, self.cidr))
            if sent != self._sent:
                await self.ask({"op": "pods", "pods": sent[0], "proxies": sent[1]})
                self._sent = sent

    # -- admin API -----------------------------------------------------------------------------

    async def _admin(self, request: web_request.Request) -> web.StreamResponse:
        if request.path == "/healthz":
            return web_response.Response(text="ok")
        if request.path == "/state" and request.method == "GET":
            answer = await self.ask({"op": "state"})
            answer.pop("id", None)
            assert self.proc is not None
            answer.update(
                pid=os.getpid(),
                inside_pid=self.proc.pid,
                host_rss_kib=_rss_kib(os.getpid()),
                inside_rss_kib=_rss_kib(self.proc.pid),
                published=sorted(self._sent[0] if self._sent else {}),
            )
            return web_response.json_response(answer)
        if request.path == "/fault" and request.method == "POST":
            body = await request.json()
            if not isinstance(body, dict):
                return web_response.json_response(
                    {"ok": False, "error": "not an object"}, status=400
                )
            answer = await self.ask({**body, "op": "fault"})
            answer.pop("id", None)
            return web_response.json_response(answer, status=200 if answer.get("ok") else 409)
        return web_response.Response(status=404, text="not found")

    async def run(self) -> int:
        await self.start_inside()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._admin)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self.args.admin_port)
        await site.start()
        server = site._server
        assert server is not None
        port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        assert self.proc is not None
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        tasks = [
            loop.create_task(self.watch_pods()),
            loop.create_task(self.publish_loop()),
            loop.create_task(self.proc.wait()),
            loop.create_task(stop.wait()),
        ]
        print(
            json.dumps({
                "ready": True, "admin": f"http://127.0.0.1:{port}", "pid": os.getpid(),
                "inside_pid": self.proc.pid, "cidr": self.cidr, "netns": self.args.netns,
                "ports": self.inside_ready.get("ports", {}),
            }),
            flush=True,
        )  # fmt: skip
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task.exception() is not None:
                    print(f"raysim: {task.exception()!r}", file=sys.stderr)
            return 0 if stop.is_set() else 1
        finally:
            for task in tasks:
                task.cancel()
            self.stop_inside()
            await runner.cleanup()


def _key(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.raysim", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--netns", required=True, help="the pod-network namespace")
    parser.add_argument("--host-veth", help="its host veth (default: PodNetwork's name)")
    parser.add_argument("--pod-cidr", help="default: the route on the host veth")
    parser.add_argument("--admin-port", type=int, default=0, help="on 127.0.0.1; 0 = any free")
    parser.add_argument("--deploy-delay", type=float, default=3.0)
    parser.add_argument("--delete-delay", type=float, default=0.0)
    parser.add_argument("--unimportable", default="", help="comma-separated module names")
    inside.add_job_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        veth = args.host_veth or default_host_veth(args.netns)
        cidr = check_routes(args.netns, veth, args.pod_cidr)
    except RouteError as exc:
        print(f"raysim: refusing to start: {exc}", file=sys.stderr)
        return 2

    async def amain() -> int:
        return await Host(args, cidr).run()

    return asyncio.run(amain())
