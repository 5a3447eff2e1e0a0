"""The part of the Ray simulator that runs inside the pod-network namespace.

Started by :mod:`tests.support.raysim.host` as ``ip netns exec <ns> python -m
tests.support.raysim.inside [--deploy-delay S] ...``. It refuses to run if its network
namespace has a default route (then it is not in the harness's pod namespace). It
listens on ``0.0.0.0`` of that namespace, one listener per port - the dashboard (8265),
the Serve proxy (8000) and the dashboard agent (52365) - and dispatches on each
connection's **local** address, which is the pod IP the client dialled. A connection to
an IP that is not a live head pod is reset at once (``SO_LINGER`` 0, the closest a
listener on ``0.0.0.0`` gets to "refused"); so is one on a keep-alive connection whose
pod went away meanwhile.

Per live IP it keeps a :class:`tests.support.raysim.serve.Head`:

- ``:8265`` ``GET|PUT|DELETE /api/serve/applications/`` (the Serve REST subset),
  the Ray Jobs API (``POST|GET /api/jobs/``, ``GET|DELETE /api/jobs/<id>``, ``POST
  /api/jobs/<id>/stop``, ``GET /api/jobs/<id>/logs``: a :class:`tests.support.raysim.jobs.Jobs`
  per head, its jobs' timing and outcome from ``--job-pending-s``, ``--job-run-s``,
  ``--job-outcome`` and each job's own ``raysim.*`` directives), ``GET /api/gcs_healthz``
  (``success``), ``GET /api/version``;
- ``:52365`` ``GET /api/local_raylet_healthz`` (``success``) - the two endpoints
  KubeRay's probes call;
- ``:8000`` ``/-/healthz`` (200 ``success``), ``/-/routes``, and any other path routed
  by ``route_prefix`` to a serving application, answering the application's name as
  plain text, with the answering pod's IP in the header ``x-raysim-pod`` (which cluster
  served a request that came through a gateway); a 503 while the head's Serve
  ``target_capacity`` is 0 (no replica to send it to); while Serve is not running (no
  PUT yet, after DELETE or restart) the proxy does not exist, so connections to
  ``:8000`` are reset, as on a Ray head.

A live **worker** pod's IP answers ``:8000`` only, as a Serve proxy of its cluster's
head (Serve runs a proxy per node and routes to replicas anywhere in the cluster): the
same routes and answers as the head's ``:8000``, while that head's Serve runs; its
other ports reset connections.

Control channel: JSON lines on stdin, one JSON answer line each on stdout, carrying
the request's ``id``. The first stdout line is ``{"ready": true, "pid": ..., "ports": {...}}``.
Operations:

- ``{"op": "pods", "pods": {ip: uid}, "proxies": {worker ip: head ip}}`` - the full
  set of live heads (and of live workers, by their head). A new IP, or an IP whose pod
  uid changed, starts with a fresh head; IPs left out are forgotten.
- ``{"op": "fault", "ip": ip, ...}`` with any of ``dashboard_down`` (bool: ``:8265`` and
  ``:52365`` reset connections), ``slow_s`` (float: added before every dashboard
  answer), ``unhealthy`` (an application name that turns ``UNHEALTHY``), ``healthy``
  (an ``UNHEALTHY`` application name that turns ``RUNNING`` again), ``restart``
  (true: the head forgets its applications and its jobs). Answers ``{"ok": false,
  "error": ...}`` for an unknown IP.
- ``{"op": "state"}`` - ``{"ips": [...], "rss_kib": ..., "requests": [[ip, port name,
  method, path, count], ...]}``: ``requests`` counts every HTTP request that reached a
  listener since start (answered or reset), by the pod IP dialled, and every connection
  reset before a request was read (an IP with no live head, a dashboard that is down,
  ``:8000`` before Serve runs) with method and path ``""`` - what tests and benchmarks
  count the operator's data-plane traffic with; and ``job_requests``: ``[[ip, submission
  id, method, route, count], ...]``, the Jobs API requests by the job they were about
  (a submission counted under the id it submitted, or tried to; a list under ``""``) and
  the route with ``{id}`` (``/api/jobs/{id}/stop``), so a benchmark can tell data-plane
  requests per job.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web, web_request, web_response

from tests.support.raysim import jobs as jobs_
from tests.support.raysim import serve

__all__ = ["DEFAULT_PORTS", "POD_HEADER", "Inside", "has_default_route", "main"]

DEFAULT_PORTS = {"dashboard": 8265, "serve": 8000, "agent": 52365}
POD_HEADER = "x-raysim-pod"
"""The response header naming the pod IP that answered a Serve request."""


class _HeadState:
    __slots__ = ("dashboard_down", "head", "jobs", "slow_s", "uid")

    def __init__(self, head: serve.Head, jobs: jobs_.Jobs, uid: str) -> None:
        self.head = head
        self.jobs = jobs
        self.uid = uid
        self.dashboard_down = False
        self.slow_s = 0.0


def _reset(transport: asyncio.BaseTransport) -> None:
    """Close with a TCP reset (linger 0) rather than an orderly FIN."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    if isinstance(transport, asyncio.Transport):
        transport.abort()
    else:
        transport.close()


def _local_ip(transport: asyncio.BaseTransport | None) -> str:
    if transport is None:
        return ""
    sockname = transport.get_extra_info("sockname")
    return str(sockname[0]) if sockname else ""


class _Gate(asyncio.Protocol):
    """Accepts a connection only if its local IP may answer on this port; else resets it,
    otherwise hands everything to aiohttp's own protocol."""

    def __init__(self, inside: Inside, port_name: str, server: web.Server) -> None:
        self._inside = inside
        self._port_name = port_name
        self._server = server
        self._inner: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        ip = _local_ip(transport)
        if not self._inside.accepts(ip, self._port_name):
            self._inside.requests[(ip, self._port_name, "", "")] += 1
            _reset(transport)
            return
        self._inner = self._server()
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._inner is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        if self._inner is not None:
            return bool(self._inner.eof_received())
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._inner is not None:
            self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()


class _Refused(Exception):
    """The connection was reset; no answer is sent."""


class Inside:
    """The listeners and the per-IP heads (see the module docstring)."""

    def __init__(
        self,
        behaviour: serve.Behaviour,
        ports: dict[str, int] | None = None,
        *,
        clock: Callable[[], float] = time.time,
        job_defaults: jobs_.Defaults | None = None,
    ) -> None:
        self.behaviour = behaviour
        self.job_defaults = job_defaults or jobs_.Defaults()
        self.clock = clock
        self.ports = dict(ports or DEFAULT_PORTS)
        self.heads: dict[str, _HeadState] = {}
        self.proxies: dict[str, str] = {}
        """Live worker IP -> its cluster's head IP (a worker answers ``:8000`` only)."""
        self.requests: collections.Counter[tuple[str, str, str, str]] = collections.Counter()
        """Requests by (pod IP, port name, method, path); resets before a request: ``""``."""
        self.job_requests: collections.Counter[tuple[str, str, str, str]] = collections.Counter()
        """Jobs API requests by (pod IP, submission id, method, route with ``{id}``)."""
        self._servers: list[asyncio.base_events.Server] = []
        self._web: list[web.Server] = []

    # -- who answers ---------------------------------------------------------------------------

    def _head_for(self, ip: str, port_name: str) -> _HeadState | None:
        if port_name == "serve" and ip in self.proxies:
            return self.heads.get(self.proxies[ip])
        return self.heads.get(ip)

    def accepts(self, ip: str, port_name: str) -> bool:
        state = self._head_for(ip, port_name)
        if state is None:
            return False
        if port_name in ("dashboard", "agent"):
            return not state.dashboard_down
        return state.head.serve_running

    def set_pods(self, pods: dict[str, str], proxies: dict[str, str] | None = None) -> None:
        self.proxies = {ip: head for ip, head in (proxies or {}).items() if ip not in pods}
        for ip in list(self.heads):
            if pods.get(ip) != self.heads[ip].uid:
                del self.heads[ip]
        for ip, uid in pods.items():
            if ip not in self.heads:
                self.heads[ip] = _HeadState(
                    serve.Head(self.behaviour, clock=self.clock, ip=ip),
                    jobs_.Jobs(self.job_defaults, clock=self.clock, ip=ip),
                    uid,
                )

    def fault(self, message: dict[str, Any]) -> dict[str, Any]:
        state = self.heads.get(str(message.get("ip")))
        if state is None:
            return {"ok": False, "error": f"no live head at {message.get('ip')!r}"}
        answer: dict[str, Any] = {"ok": True}
        if "dashboard_down" in message:
            state.dashboard_down = bool(message["dashboard_down"])
        if "slow_s" in message:
            state.slow_s = float(message["slow_s"])
        if message.get("unhealthy"):
            answer["unhealthy"] = state.head.make_unhealthy(str(message["unhealthy"]))
            answer["ok"] = answer["unhealthy"]
        if message.get("healthy"):
            answer["healthy"] = state.head.make_healthy(str(message["healthy"]))
            answer["ok"] = answer["healthy"]
        if message.get("restart"):
            state.head.restart()
            state.jobs.clear()
        return answer

    # -- HTTP ----------------------------------------------------------------------------------

    def _state_for(self, request: web_request.BaseRequest, port_name: str) -> _HeadState:
        ip = _local_ip(request.transport)
        if not self.accepts(ip, port_name):
            if request.transport is not None:
                _reset(request.transport)
            raise _Refused
        state = self._head_for(ip, port_name)
        assert state is not None  # accepts() said so
        return state

    async def _dashboard(self, request: web_request.BaseRequest) -> web.StreamResponse:
        state = self._state_for(request, "dashboard")
        if state.slow_s > 0:
            await asyncio.sleep(state.slow_s)
            state = self._state_for(request, "dashboard")
        path = request.path
        if path == "/api/gcs_healthz":
            return web_response.Response(text="success")
        if path == "/api/version":
            return web_response.json_response(
                {"version": "4", "ray_version": serve.RAY_VERSION, "ray_commit": "simulated"}
            )
        route = jobs_.route_of(path)
        if route is not None:
            return await self._jobs(request, state, ip=_local_ip(request.transport), route=route)
        if path.rstrip("/") != "/api/serve/applications":
            return web_response.Response(status=404, text="404: Not Found")
        head = state.head
        if request.method == "GET":
            return web_response.json_response(head.get_applications(request.query.get("api_type")))
        if request.method == "PUT":
            raw = await request.read()
            try:
                body = json.loads(raw)
            except ValueError as exc:
                return web_response.Response(status=400, text=f"Invalid JSON: {exc}")
            try:
                head.put_applications(body)
            except serve.ConfigError as exc:
                return web_response.Response(status=400, text=str(exc))
            return web_response.Response(status=200)
        if request.method == "DELETE":
            head.delete_applications()
            return web_response.Response(status=200)
        return web_response.Response(status=405, text="405: Method Not Allowed")

    async def _jobs(
        self,
        request: web_request.BaseRequest,
        state: _HeadState,
        *,
        ip: str,
        route: tuple[str, str],
    ) -> web.StreamResponse:
        submission_id, template = route
        method = request.method
        table = state.jobs
        body: Any = None
        answer: Any = None
        response: web.StreamResponse
        try:
            if (method, template) == ("POST", "/api/jobs/"):
                try:
                    body = json.loads(await request.read())
                except ValueError as exc:
                    raise jobs_.JobError(400, f"Invalid JSON: {exc}") from None
                if isinstance(body, dict) and isinstance(body.get("submission_id"), str):
                    submission_id = body["submission_id"]
                answer = table.submit(body)
                submission_id = str(answer["submission_id"])  # the one Ray made, if none
            elif (method, template) == ("GET", "/api/jobs/"):
                answer = table.list()
            elif (method, template) == ("GET", "/api/jobs/{id}"):
                answer = table.get(submission_id)
            elif (method, template) == ("DELETE", "/api/jobs/{id}"):
                answer = table.delete(submission_id)
            elif (method, template) == ("POST", "/api/jobs/{id}/stop"):
                answer = table.stop(submission_id)
            elif (method, template) == ("GET", "/api/jobs/{id}/logs"):
                answer = table.logs(submission_id)
            else:
                raise jobs_.JobError(405, "405: Method Not Allowed")
            response = web_response.json_response(answer)
        except jobs_.JobError as exc:
            response = web_response.Response(status=exc.status, text=exc.text)
        self.job_requests[(ip, submission_id, method, template)] += 1
        return response

    async def _agent(self, request: web_request.BaseRequest) -> web.StreamResponse:
        state = self._state_for(request, "agent")
        if state.slow_s > 0:
            await asyncio.sleep(state.slow_s)
        if request.path == "/api/local_raylet_healthz":
            return web_response.Response(text="success")
        return web_response.Response(status=404, text="404: Not Found")

    async def _proxy(self, request: web_request.BaseRequest) -> web.StreamResponse:
        head = self._state_for(request, "serve").head
        path = request.path
        if path == "/-/healthz":
            return web_response.Response(text="success")
        if path == "/-/routes":
            return web_response.json_response(head.routes())
        app = head.route(path)
        if app is None:
            host = request.host
            return web_response.Response(
                status=404,
                text=f"Path '{path}' not found. Ping http://{host}/-/routes for available routes.",
            )
        if head.target_capacity == 0:
            return web_response.Response(status=503, text=f"{app}: no replica (target_capacity 0)")
        return web_response.Response(text=app, headers={POD_HEADER: _local_ip(request.transport)})

    def _handler(self, port_name: str) -> Any:
        route = {"dashboard": self._dashboard, "agent": self._agent, "serve": self._proxy}[
            port_name
        ]

        async def handle(request: web_request.BaseRequest) -> web.StreamResponse:
            key = (_local_ip(request.transport), port_name, request.method, request.path)
            self.requests[key] += 1
            try:
                return await route(request)
            except _Refused:
                # The transport is already reset; aiohttp's write goes nowhere.
                return web_response.Response(status=503)

        return handle

    async def start(self, host: str = "0.0.0.0") -> None:
        loop = asyncio.get_running_loop()
        for port_name, port in self.ports.items():
            server = web.Server(self._handler(port_name), access_log=None)
            self._web.append(server)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(4096)
            sock.setblocking(False)

            def factory(name: str = port_name, srv: web.Server = server) -> _Gate:
                return _Gate(self, name, srv)

            self._servers.append(await loop.create_server(factory, sock=sock))
            self.ports[port_name] = int(sock.getsockname()[1])

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        for web_server in self._web:
            await web_server.shutdown(timeout=1.0)
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()
        self._web.clear()


def has_default_route(table_path: str = "/proc/net/route") -> bool:
    """Whether this network namespace routes 0.0.0.0/0 anywhere (``/proc/net/route``)."""
    with open(table_path) as table:
        next(table, None)
        for line in table:
            fields = line.split()
            if len(fields) > 7 and fields[1] == "00000000" and fields[7] == "00000000":
                return True
    return False


def _rss_kib() -> int:
    with open(f"/proc/{os.getpid()}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def _serve_channel(inside: Inside) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out = sys.stdout

    def say(message: dict[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    say({"ready": True, "pid": os.getpid(), "ports": inside.ports})
    while True:
        line = await reader.readline()
        if not line:
            return  # the host part is gone: stop
        try:
            message = json.loads(line)
        except ValueError:
            continue
        op = message.get("op")
        answer: dict[str, Any]
        if op == "pods":
            inside.set_pods(
                {str(k): str(v) for k, v in dict(message.get("pods") or {}).items()},
                {str(k): str(v) for k, v in dict(message.get("proxies") or {}).items()},
            )
            answer = {"ok": True, "count": len(inside.heads), "proxies": len(inside.proxies)}
        elif op == "fault":
            answer = inside.fault(message)
        elif op == "state":
            answer = {
                "ok": True, "ips": sorted(inside.heads), "rss_kib": _rss_kib(),
                "requests": [[*key, n] for key, n in sorted(inside.requests.items())],
                "job_requests": [
                    [*key, n] for key, n in sorted(inside.job_requests.items()) if n
                ],
            }  # fmt: skip
        else:
            answer = {"ok": False, "error": f"unknown op {op!r}"}
        answer["id"] = message.get("id")
        say(answer)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.support.raysim.inside")
    parser.add_argument("--deploy-delay", type=float, default=serve.Behaviour.deploy_delay)
    parser.add_argument("--delete-delay", type=float, default=serve.Behaviour.delete_delay)
    parser.add_argument("--unimportable", default="", help="comma-separated module names")
    add_job_arguments(parser)
    parser.add_argument("--dashboard-port", type=int, default=DEFAULT_PORTS["dashboard"])
    parser.add_argument("--serve-port", type=int, default=DEFAULT_PORTS["serve"])
    parser.add_argument("--agent-port", type=int, default=DEFAULT_PORTS["agent"])
    return parser.parse_args(argv)


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    """``--job-pending-s``, ``--job-run-s``, ``--job-outcome``: :class:`jobs.Defaults`."""
    defaults = jobs_.Defaults()
    parser.add_argument("--job-pending-s", type=float, default=defaults.pending_s)
    parser.add_argument("--job-run-s", type=float, default=defaults.run_s)
    parser.add_argument("--job-outcome", choices=jobs_.OUTCOMES, default=defaults.outcome)


def job_defaults_from(args: argparse.Namespace) -> jobs_.Defaults:
    return jobs_.Defaults(
        pending_s=args.job_pending_s, run_s=args.job_run_s, outcome=args.job_outcome
    )


def behaviour_from(args: argparse.Namespace) -> serve.Behaviour:
    return serve.Behaviour(
        deploy_delay=args.deploy_delay,
        delete_delay=args.delete_delay,
        unimportable=frozenset(m for m in args.unimportable.split(",") if m),
    )


async def _amain(args: argparse.Namespace) -> int:
    inside = Inside(
        behaviour_from(args),
        {"dashboard": args.dashboard_port, "serve": args.serve_port, "agent": args.agent_port},
        job_defaults=job_defaults_from(args),
    )
    await inside.start()
    try:
        await _serve_channel(inside)
    finally:
        await inside.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if has_default_route():
        print(
            "raysim-inside: this network namespace has a default route, so it is not the "
            "harness's pod namespace; refusing to listen here",
            file=sys.stderr,
        )
        return 2
    return asyncio.run(_amain(args))


if __name__ == "__main__":
    sys.exit(main())
