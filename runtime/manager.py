"""The manager: one process, started in the right order, one active replica, stopped cleanly.

A :class:`Manager` owns the client, the cache, the event recorder and a set
of **runnables** - anything with ``async def start(stop: asyncio.Event)`` that
blocks until ``stop`` is set (a :class:`~runtime.controller.Controller` is
one). A runnable whose ``needs_leader_election`` attribute is true (the
default for controllers) runs only on the elected leader.

:meth:`Manager.start` order:

1. HTTP servers: metrics (``/metrics``: the framework registry) and probes
   (``/healthz``, ``/readyz``; named checks, ``?verbose`` lists them);
2. the cache: every informer registered so far starts; start-up fails with a
   clear error if they do not sync within ``cache_sync_timeout`` (``/readyz``
   fails until they have);
3. runnables that need no leader election (the event recorder);
4. leader election, when on (Lease ``leader_election_id``): wait to be elected;
5. the other runnables (controllers).

Then it runs until its ``stop`` event is set, a runnable fails, or leadership
is lost, and stops in reverse order: leader runnables first (each gets
``graceful_shutdown_timeout`` to finish in-flight work), then the lease is
released, then the others, the cache and the servers. A runnable's failure
or a lost lease makes :meth:`Manager.start` raise, so the process exits
non-zero and its pod restarts. :func:`serve` (or :func:`run`) wires SIGTERM/SIGINT
to ``stop``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import signal
from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

import prometheus_client
import structlog
from aiohttp import web

from runtime import events, leaderelection, metrics
from runtime._internal import aio
from runtime.cache import cache as cache_
from runtime.client import client as client_

__all__ = ["LeadershipLost", "Manager", "Options", "Runnable", "run", "serve"]

Check = Callable[[], bool | Awaitable[bool]]


@runtime_checkable
class Runnable(Protocol):
    """Something the manager runs: ``start`` blocks until ``stop`` is set."""

    async def start(self, stop: asyncio.Event) -> None: ...


class LeadershipLost(RuntimeError):
    """The lease could not be renewed; the process must stop."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    """Manager settings. Every field states its default."""

    namespace: str | None = None
    """Watch only this namespace. Default: all namespaces."""

    metrics_bind_address: str = ":8080"
    """``host:port`` for ``/metrics``; ``"0"`` disables it. Default ``:8080`` (all interfaces)."""

    health_probe_bind_address: str = ":8081"
    """``host:port`` for ``/healthz`` and ``/readyz``; ``"0"`` disables. Default ``:8081``."""

    leader_election: bool = False
    """Run leader runnables only while holding the Lease. Default off."""

    leader_election_id: str = "rayservice-operator-leader"
    """The Lease name. Default "rayservice-operator-leader"."""

    leader_election_namespace: str = "default"
    """The Lease namespace. Default "default"."""

    lease_duration: float = 15.0
    """Default 15 s (see :mod:`runtime.leaderelection`)."""

    renew_deadline: float = 10.0
    """Default 10 s."""

    retry_period: float = 2.0
    """Default 2 s."""

    graceful_shutdown_timeout: float = 30.0
    """Seconds each runnable gets to stop. Default 30 s."""

    cache_sync_timeout: float = 120.0
    """Seconds the caches get to sync at start-up. Default 120 s."""

    component: str = "rayservice-operator"
    """Name used for Events' source. Default "rayservice-operator"."""


def _parse_address(address: str) -> tuple[str, int] | None:
    if address in ("", "0"):
        return None
    host, _, port = address.rpartition(":")
    return host or "0.0.0.0", int(port)


class Manager:
    """See the module docstring."""

    def __init__(self, client: client_.Client, options: Options | None = None) -> None:
        self.client = client
        self.options = options or Options()
        self.cache = cache_.Cache(client, namespace=self.options.namespace)
        self.events = events.Recorder(client, self.options.component)
        self.elector: leaderelection.LeaderElector | None = None
        self._runnables: list[Runnable] = [self.events]
        self._healthz: dict[str, Check] = {"ping": lambda: True}
        self._readyz: dict[str, Check] = {"ping": lambda: True, "caches": self._caches_synced}
        self._caches_ready = False
        self._sites: list[web.AppRunner] = []
        self.metrics_address: tuple[str, int] | None = None
        """Where ``/metrics`` is served, once started (the real port if 0 was asked)."""
        self.probe_address: tuple[str, int] | None = None
        self.log = structlog.get_logger("runtime.manager")

    # -- registration --------------------------------------------------------------------------

    def add(self, runnable: Runnable) -> None:
        if not isinstance(runnable, Runnable):
            raise TypeError(f"{runnable!r} is not a runnable (needs async start(stop))")
        self._runnables.append(runnable)

    def add_healthz_check(self, name: str, check: Check) -> None:
        self._healthz[name] = check

    def add_readyz_check(self, name: str, check: Check) -> None:
        self._readyz[name] = check

    def _caches_synced(self) -> bool:
        return self._caches_ready and self.cache.has_synced()

    # -- running ---------------------------------------------------------------------------------

    async def start(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set (see the module docstring for the order)."""
        opts = self.options
        await self._start_servers()
        started: list[tuple[Runnable, asyncio.Event, asyncio.Task[None]]] = []
        elector_task: asyncio.Task[None] | None = None
        elector_stop = asyncio.Event()
        failure: BaseException | None = None
        try:
            await self.cache.start()
            try:
                async with asyncio.timeout(opts.cache_sync_timeout):
                    await self.cache.wait_for_sync()
            except TimeoutError:
                raise TimeoutError(
                    f"caches did not sync within {opts.cache_sync_timeout} s "
                    "(is the CRD installed, and does RBAC allow list/watch?)"
                ) from None
            self._caches_ready = True
            self.log.info("caches synced")
            leaders = [r for r in self._runnables if getattr(r, "needs_leader_election", True)]
            others = [r for r in self._runnables if r not in leaders]
            for runnable in others:
                started.append(self._launch(runnable))
            if opts.leader_election and leaders:
                self.elector = leaderelection.LeaderElector(
                    self.client,
                    leaderelection.Options(
                        name=opts.leader_election_id,
                        namespace=opts.leader_election_namespace,
                        lease_duration=opts.lease_duration,
                        renew_deadline=opts.renew_deadline,
                        retry_period=opts.retry_period,
                    ),
                )
                elector_task = asyncio.create_task(self.elector.run(elector_stop), name="elector")
                await aio.wait_first(self.elector.elected, stop, tasks=[elector_task])
                if stop.is_set() or not self.elector.elected.is_set():
                    return
            for runnable in leaders:
                started.append(self._launch(runnable))
            watched = [task for _, _, task in started]
            if elector_task is not None:
                watched.append(elector_task)
            await self._until_stop_or_failure(stop, watched)
            if self.elector is not None and self.elector.lost:
                raise LeadershipLost("leader election lost; stopping")
            for runnable, _, task in started:
                if task.done() and not task.cancelled() and task.exception() is not None:
                    raise RuntimeError(f"runnable {runnable!r} failed") from task.exception()
                if task.done() and not stop.is_set():
                    raise RuntimeError(f"runnable {runnable!r} stopped on its own")
        except BaseException as exc:
            failure = exc
            raise
        finally:
            await self._shutdown(started, elector_task, elector_stop, failure)

    def _launch(self, runnable: Runnable) -> tuple[Runnable, asyncio.Event, asyncio.Task[None]]:
        own_stop = asyncio.Event()
        task = asyncio.create_task(runnable.start(own_stop), name=f"runnable-{runnable!r}")
        return runnable, own_stop, task

    async def _until_stop_or_failure(
        self, stop: asyncio.Event, tasks: list[asyncio.Task[None]]
    ) -> None:
        await aio.wait_first(stop, tasks=tasks)

    async def _shutdown(
        self,
        started: list[tuple[Runnable, asyncio.Event, asyncio.Task[None]]],
        elector_task: asyncio.Task[None] | None,
        elector_stop: asyncio.Event,
        failure: BaseException | None,
    ) -> None:
        timeout = self.options.graceful_shutdown_timeout
        self.log.info("stopping", reason=repr(failure) if failure else "requested")
        leaders = [s for s in started if getattr(s[0], "needs_leader_election", True)]
        others = [s for s in started if s not in leaders]
        for group in (leaders, None, others):
            if group is None:
                elector_stop.set()  # releases the lease once the leader runnables are done
                if elector_task is not None:
                    await asyncio.gather(elector_task, return_exceptions=True)
                continue
            for _, own_stop, _ in reversed(group):
                own_stop.set()
            tasks = [task for _, _, task in group]
            if tasks:
                _, pending = await asyncio.wait(tasks, timeout=timeout)
                for task in pending:
                    self.log.warning(
                        "runnable did not stop in time; cancelling", task=task.get_name()
                    )
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        await self.cache.stop()
        for runner in reversed(self._sites):
            await runner.cleanup()
        self._sites.clear()
        self.log.info("stopped")

    # -- HTTP ----------------------------------------------------------------------------------

    async def _start_servers(self) -> None:
        metrics_at = _parse_address(self.options.metrics_bind_address)
        if metrics_at is not None:
            app = web.Application()
            app.router.add_get("/metrics", self._serve_metrics)
            self.metrics_address = await self._serve(app, metrics_at)
        probes_at = _parse_address(self.options.health_probe_bind_address)
        if probes_at is not None:
            app = web.Application()
            app.router.add_get("/healthz", self._serve_healthz)
            app.router.add_get("/readyz", self._serve_readyz)
            self.probe_address = await self._serve(app, probes_at)

    async def _serve(self, app: web.Application, address: tuple[str, int]) -> tuple[str, int]:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, address[0], address[1])
        await site.start()
        self._sites.append(runner)
        server = site._server
        assert server is not None
        host, port = server.sockets[0].getsockname()[:2]  # type: ignore[attr-defined]
        return str(host), int(port)

    async def _serve_metrics(self, request: web.Request) -> web.Response:
        body = prometheus_client.generate_latest(metrics.registry)
        return web.Response(
            body=body, headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST}
        )

    async def _serve_healthz(self, request: web.Request) -> web.Response:
        return await self._serve_checks(request, self._healthz, "healthz")

    async def _serve_readyz(self, request: web.Request) -> web.Response:
        return await self._serve_checks(request, self._readyz, "readyz")

    async def _serve_checks(
        self, request: web.Request, checks: dict[str, Check], name: str
    ) -> web.Response:
        lines, healthy = [], True
        for check_name, check in checks.items():
            try:
                result = check()
                if asyncio.iscoroutine(result) or isinstance(result, Awaitable):
                    result = await result
                ok = bool(result)
            except Exception:
                ok = False
            healthy &= ok
            lines.append(f"[{'+' if ok else '-'}]{check_name} {'ok' if ok else 'failed'}")
        text = f"{name} check {'passed' if healthy else 'failed'}"
        if "verbose" in request.query or not healthy:
            text = "\n".join([*lines, text])
        return web.Response(text=text + "\n", status=200 if healthy else 503)


async def serve(manager: Manager) -> int:
    """Run ``manager`` until SIGTERM/SIGINT; the exit code (0, or 1 on failure)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await manager.start(stop)
    except LeadershipLost as exc:
        manager.log.error(str(exc))
        return 1
    except Exception:
        manager.log.exception("manager failed")
        return 1
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        with contextlib.suppress(Exception):
            await manager.client.close()
    return 0


def run(manager: Manager) -> int:
    """:func:`serve` in a new event loop, for ``main()`` functions."""
    return asyncio.run(serve(manager))
