"""The manager: one process, started in the right order, one active replica, stopped cleanly.

**Identity.** An operator has one name, :attr:`Options.name` (required): its Lease
is ``<name>-leader``, its Events' source ``<name>``, and a client that has no name of
its own gets this one (:meth:`runtime.client.Client.default_name`: field manager
``<name>``), unless the options say otherwise.

A :class:`Manager` owns the client, the cache, the event recorder (sending through a
client of its own, :attr:`Manager.events_client`: same credentials, its own token
bucket, as client-go's event broadcaster) and a set of **runnables** - anything
with ``async def start(stop: asyncio.Event)`` that blocks until ``stop`` is set (a
:class:`~runtime.controller.Controller` is one). A runnable whose
``needs_leader_election`` attribute is true (the default for controllers) runs only on
the elected leader.

:meth:`Manager.start` order:

1. HTTP servers: metrics (``/metrics``: the framework registry; with
   ``metrics_secure``, over HTTPS and only to callers the API server authenticates
   and authorizes, see :mod:`runtime.delegatedauth`, through reviews sent by a client
   of their own, :attr:`Manager.review_client`) and probes (``/healthz``,
   ``/readyz``; named checks, ``?verbose`` lists them); then the runnables whose
   ``start_before_caches`` attribute is true, which need no leader election: the
   webhook server (:attr:`Manager.webhook_server`, made on first use with
   :attr:`Options.webhook`; ``/readyz`` then includes ``webhook``, true once it
   completes a TLS handshake), as a cache may need its conversion webhook to sync;
2. the cache: every informer registered so far starts; start-up fails with a
   clear error if they do not sync within ``cache_sync_timeout`` (``/readyz``
   fails until they have). A ``stop`` during the wait returns at once;
3. runnables that need no leader election (the event recorder);
4. leader election, when on - whether or not any runnable needs it, so
   ``leader_election_master_status`` is always exported: wait to be elected.
   A standby is ready (``/readyz`` passes once the caches synced), also while
   its Lease calls fail; the Lease lives in the pod's namespace unless
   ``leader_election_namespace`` says otherwise;
5. the other runnables (controllers).

**Event-loop lag.** From :meth:`Manager.start` until it returns, the histogram
``event_loop_lag_seconds`` samples how late the one event loop runs what is due
(:attr:`Options.event_loop_lag_interval`; :mod:`runtime._internal.looplag`).

**Supervision.** Every runnable's task and the elector's are watched from
the moment they start: a runnable that fails, is cancelled or returns before
it was asked to, an elector that ends (lease lost, or a bug), make
:meth:`Manager.start` raise after the shutdown (:class:`LeadershipLost` for a
lost lease), so the process exits non-zero and its pod restarts.

**Shutdown** (on ``stop``, or on such a failure) runs in reverse order within
**one budget**, ``graceful_shutdown_timeout`` for the whole sequence:

1. leader runnables: asked to stop, and cancelled when the budget is spent.
   If the lease is gone (lost, or the elector died) they are cancelled **at
   once**, with no grace (another replica may already lead), also when that
   happens in the middle of a graceful stop;
2. the lease is released as soon as they have all ended (never while one may
   still run); the release call gets what is left of the budget, at least 1 s;
3. the other runnables (cancelled when the budget is spent), the cache and
   the servers.

:func:`serve` (or :func:`run`) wires SIGTERM/SIGINT to ``stop``; a second
signal exits the process at once with status 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import pathlib
import signal
import socket
import ssl
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import prometheus_client
import structlog
from aiohttp import web

from runtime import delegatedauth, events, leaderelection, metrics
from runtime import tls as tls_
from runtime._internal import aio, looplag
from runtime.cache import cache as cache_
from runtime.cache import informer as informer_
from runtime.client import client as client_
from runtime.webhook import server as webhook_

__all__ = ["BindError", "LeadershipLost", "Manager", "Options", "Runnable", "run", "serve"]

Check = Callable[[], bool | Awaitable[bool]]

_MIN_RELEASE_WAIT = 1.0
"""Seconds the Lease release may take even when the shutdown budget is spent."""

_MIN_CANCEL_WAIT = 1.0
"""Seconds cancelled runnables get to unwind even when the shutdown budget is spent."""

_CERT_POLL = 10.0
"""Seconds between two reads of the metrics certificate files (rotation)."""


@runtime_checkable
class Runnable(Protocol):
    """Something the manager runs: ``start`` blocks until ``stop`` is set."""

    async def start(self, stop: asyncio.Event) -> None: ...


BindError = aio.BindError
"""A server of the manager could not listen (:class:`OSError`); the message names the
server, the address and the :class:`Options` field that gave it."""


class LeadershipLost(RuntimeError):
    """The lease could not be renewed; the process must stop."""


def _needs_leader_election(runnable: object) -> bool:
    return bool(getattr(runnable, "needs_leader_election", True))


def _before_caches(runnable: object) -> bool:
    return bool(getattr(runnable, "start_before_caches", False)) and not _needs_leader_election(
        runnable
    )


@dataclasses.dataclass(frozen=True)
class _Started:
    runnable: Runnable
    stop: asyncio.Event
    task: asyncio.Task[None]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    """Manager settings. Every field states its default; ``name`` has none."""

    name: str
    """Who this operator is, e.g. ``"configmap-mirror"``: required, and the default of
    its Lease (``leader_election_id``: ``<name>-leader``), its Events' source
    (``component``: ``<name>``) and, through the :class:`Manager`, of its client's field
    manager and User-Agent (:attr:`runtime.client.client.Options.name`). Two operators
    with different names never share a Lease nor look alike in ``managedFields``."""

    namespaces: Sequence[str] = ()
    """Watch only these namespaces (the cache lists and watches each one; the RBAC then
    needs only Roles there, see ``config/overlays/namespaced``). Default ``()``: all."""

    namespace: str | None = None
    """A shorthand for ``namespaces=[namespace]``; give one of the two, not both.
    Default ``None``."""

    cache_by_resource: cache_.ByResourceMap = dataclasses.field(default_factory=dict)
    """What the cache holds of each resource (:class:`runtime.cache.ByResource`: label
    and field selectors sent on list and watch, a transform, indexers), keyed by the
    resource or its ``str()`` (``"pods"``); an object outside a resource's selectors
    is absent from the cache (see :mod:`runtime.cache.cache`). Default ``{}``: every
    object of every resource, with the default transform (``managedFields`` dropped)."""

    metrics_bind_address: str = "127.0.0.1:8080"
    """``host:port`` for ``/metrics``; ``"0"`` disables it; ``":8080"`` is every interface
    (what a Pod's scraper needs: an operator's own flags or manifests choose that). Default
    ``127.0.0.1:8080``, loopback only, so that a manager started on a laptop or in a test
    exposes nothing. A port that cannot be bound stops the start with
    :class:`BindError` naming the server and this option."""

    metrics_secure: bool = False
    """Serve ``/metrics`` over HTTPS, to callers the API server authenticates (a bearer
    token, by TokenReview) and authorizes (a SubjectAccessReview for ``get`` on the
    non-resource URL ``/metrics``): 401 without a valid token, 403 when not allowed
    (:mod:`runtime.delegatedauth`; controller-runtime's ``SecureServing`` plus
    ``filters.WithAuthenticationAndAuthorization``). The manager's identity then needs
    ``create`` on ``tokenreviews`` and ``subjectaccessreviews``. The certificate:
    ``metrics_ssl_context``, else ``metrics_cert_dir``'s files, else a self-signed one
    made at start (for ``localhost``, the host name and 127.0.0.1; scrapers then skip
    verification, as with controller-runtime's default). Default off: plain HTTP, no
    checks."""

    metrics_cert_dir: str | None = None
    """With ``metrics_secure``: the directory holding the serving certificate (chain) and
    its key, ``metrics_cert_name`` and ``metrics_key_name`` (e.g. a mounted
    ``kubernetes.io/tls`` Secret), read at start and again when their contents change
    (checked every 10 s: a rotated Secret is served without a restart). Default ``None``:
    a self-signed certificate."""

    metrics_cert_name: str = "tls.crt"
    """The certificate's file name in ``metrics_cert_dir``. Default "tls.crt"."""

    metrics_key_name: str = "tls.key"
    """The key's file name in ``metrics_cert_dir``. Default "tls.key"."""

    metrics_ssl_context: ssl.SSLContext | None = None
    """With ``metrics_secure``: a ready server-side TLS context instead of
    ``metrics_cert_dir`` (e.g. one that reloads rotated certificate files). Default ``None``."""

    metrics_auth: delegatedauth.Options = dataclasses.field(default_factory=delegatedauth.Options)
    """With ``metrics_secure``: review timeout, how long answers are cached, how many
    reviews may be in flight (past that: 429) and the budget of the reviews' own client
    (:attr:`Manager.review_client`). Default :class:`runtime.delegatedauth.Options` (60 s
    for tokens and allows, 30 s for denials; 16 in flight; 10 reviews a second, bursts of
    20)."""

    health_probe_bind_address: str = "127.0.0.1:8081"
    """``host:port`` for ``/healthz`` and ``/readyz``; ``"0"`` disables; ``":8081"`` is every
    interface (a kubelet's probes need that: set it in the operator's flags or manifests).
    Default ``127.0.0.1:8081``, loopback only (see ``metrics_bind_address``)."""

    leader_election: bool = False
    """Run leader runnables only while holding the Lease. Default off."""

    leader_election_id: str = ""
    """The Lease name. Default ``""``: ``<name>-leader``."""

    leader_election_namespace: str | None = None
    """The Lease namespace. Default: the pod's own (``$POD_NAMESPACE``, else the service
    account's namespace file), ``"default"`` out of a cluster
    (:func:`runtime.leaderelection.default_namespace`)."""

    lease_duration: float = 15.0
    """Whole seconds. Default 15 s (see :mod:`runtime.leaderelection`)."""

    renew_deadline: float = 10.0
    """Default 10 s."""

    retry_period: float = 2.0
    """Default 2 s."""

    graceful_shutdown_timeout: float = 30.0
    """Seconds the whole shutdown may take (one budget for all runnables, not each);
    keep it below the pod's ``terminationGracePeriodSeconds``. Default 30 s."""

    cache_sync_timeout: float = 120.0
    """Seconds the caches get to sync at start-up. Default 120 s."""

    event_loop_lag_interval: float | None = 0.25
    """Seconds between two samples of ``event_loop_lag_seconds`` (how late the event loop
    ran a timer: the wait every reconcile, watch event and handler shares, whatever the
    queues and rate limiters say). ``None`` samples nothing. Default 0.25 s."""

    component: str = ""
    """Name used for Events' source. Default ``""``: ``name``."""

    events: events.Options = dataclasses.field(default_factory=events.Options)
    """Options of every Event recorder (:attr:`Manager.events`, :meth:`Manager.recorder`),
    e.g. ``events.Options(api="events.k8s.io/v1")``. Default core ``v1`` Events with the
    recorder's default limits."""

    webhook: webhook_.Options = dataclasses.field(default_factory=webhook_.Options)
    """The webhook server's settings (:attr:`Manager.webhook_server`; no server runs
    unless it is asked for). Default :class:`runtime.webhook.server.Options`: port 9443,
    ``tls.crt``/``tls.key`` in ``$TMPDIR/k8s-webhook-server/serving-certs``."""

    def __post_init__(self) -> None:
        # The defaults derived from the name, applied here only.
        if not self.name:
            raise ValueError("manager.Options needs a name (the operator's)")
        if not self.leader_election_id:
            object.__setattr__(self, "leader_election_id", f"{self.name}-leader")
        if not self.component:
            object.__setattr__(self, "component", self.name)
        # Fail at construction on both or bad names; keep a hashable tuple of them.
        names = informer_.namespaces_of(None, self.namespaces)
        informer_.namespaces_of(self.namespace, names)
        object.__setattr__(self, "namespaces", names)
        # Read-only, keyed by str(resource), hashable; bad entries fail here.
        object.__setattr__(self, "cache_by_resource", cache_.by_resource_of(self.cache_by_resource))
        _check_metrics_tls(self)


def _check_metrics_tls(options: Options) -> None:
    """TLS settings only with ``metrics_secure``."""
    given = options.metrics_cert_dir is not None or options.metrics_ssl_context is not None
    if given and not options.metrics_secure:
        raise ValueError("metrics_cert_dir / metrics_ssl_context need metrics_secure=True")


def _election_options(options: Options) -> leaderelection.Options | None:
    """The elector's settings (validated now, so bad ones fail early); None when off."""
    if not options.leader_election:
        return None
    namespace = options.leader_election_namespace or leaderelection.default_namespace()
    return leaderelection.Options(
        name=options.leader_election_id,
        namespace=namespace,
        lease_duration=options.lease_duration,
        renew_deadline=options.renew_deadline,
        retry_period=options.retry_period,
    )


def _parse_address(address: str) -> tuple[str, int] | None:
    if address in ("", "0"):
        return None
    host, _, port = address.rpartition(":")
    return host or "0.0.0.0", int(port)


class Manager:
    """See the module docstring."""

    def __init__(self, client: client_.Client, options: Options) -> None:
        self.client = client
        self.options = options
        # A client given no name of its own takes the manager's (field manager, User-Agent);
        # a stand-in without the method (a fake) has no identity to set.
        if (name_client := getattr(client, "default_name", None)) is not None:
            name_client(options.name)
        self.cache = cache_.Cache(
            client,
            namespace=self.options.namespace,
            namespaces=self.options.namespaces,
            by_resource=self.options.cache_by_resource,
        )
        self.events_client: client_.Client = self._sibling_client()
        """The client Events are sent with: the manager's credentials, options and kinds,
        but its own connections and token bucket (as client-go's event broadcaster has a
        client of its own), so that Events never take the controllers' rate limit. A
        stand-in that is not a :class:`runtime.client.Client` (a fake) is used as is."""
        self.events = events.Recorder(
            self.events_client, self.options.component, options=self.options.events
        )
        self._recorders: dict[str, events.Recorder] = {self.options.component: self.events}
        self.elector: leaderelection.LeaderElector | None = None
        """The leader elector, once :meth:`start` got to leader election."""
        self._election = _election_options(self.options)
        self._runnables: list[Runnable] = [self.events]
        self._healthz: dict[str, Check] = {"ping": lambda: True}
        self._readyz: dict[str, Check] = {"ping": lambda: True, "caches": self._caches_synced}
        self._caches_ready = False
        self._sites: list[web.AppRunner] = []
        self._servers_stop = asyncio.Event()
        self._server_tasks: list[asyncio.Task[None]] = []
        self._scratch: list[tempfile.TemporaryDirectory[str]] = []
        self.metrics_address: tuple[str, int] | None = None
        """Where ``/metrics`` is served, once started (the real port if 0 was asked)."""
        self.probe_address: tuple[str, int] | None = None
        self._webhook_server: webhook_.Server | None = None
        self.review_client: client_.Client | None = None
        """With ``metrics_secure``, once started: the client the TokenReviews and
        SubjectAccessReviews of ``/metrics`` go through (:meth:`_review_client`)."""
        self.log = structlog.get_logger("runtime.manager")

    # -- registration --------------------------------------------------------------------------

    def add(self, runnable: Runnable) -> None:
        if not isinstance(runnable, Runnable):
            raise TypeError(f"{runnable!r} is not a runnable (needs async start(stop))")
        self._runnables.append(runnable)

    def recorder(self, component: str) -> events.Recorder:
        """The Event recorder that reports as ``component`` (controller-runtime's
        ``GetEventRecorderFor``): one per name, started with the manager (ask before
        :meth:`start`). ``component`` :attr:`Options.component` is :attr:`events`."""
        found = self._recorders.get(component)
        if found is None:
            found = self._recorders[component] = events.Recorder(
                self.events_client, component, options=self.options.events
            )
            self.add(found)
        return found

    @property
    def webhook_server(self) -> webhook_.Server:
        """The webhook server (controller-runtime's ``GetWebhookServer``): made with
        :attr:`Options.webhook` and the manager's client on first access, added as a
        runnable, its readiness added to ``/readyz`` as ``webhook``. Register webhooks on
        it before :meth:`start`."""
        if self._webhook_server is None:
            self._webhook_server = webhook_.Server(self.options.webhook, client=self.client)
            self.add(self._webhook_server)
            self.add_readyz_check("webhook", self._webhook_server.serving)
        return self._webhook_server

    def add_healthz_check(self, name: str, check: Check) -> None:
        self._healthz[name] = check

    def add_readyz_check(self, name: str, check: Check) -> None:
        self._readyz[name] = check

    def _caches_synced(self) -> bool:
        return self._caches_ready and self.cache.has_synced()

    # -- running ---------------------------------------------------------------------------------

    async def start(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set (see the module docstring for the order and the failures)."""
        started: list[_Started] = []
        elector_task: asyncio.Task[None] | None = None
        elector_stop = asyncio.Event()
        failure: BaseException | None = None
        lag_stop = asyncio.Event()
        lag: asyncio.Task[None] | None = None
        if self.options.event_loop_lag_interval is not None:
            lag = asyncio.create_task(
                looplag.watch(lag_stop, self.options.event_loop_lag_interval), name="loop-lag"
            )
        try:
            await self._start_servers()
            early = [r for r in self._runnables if _before_caches(r)]
            started.extend(self._launch(r) for r in early)
            await self.cache.start()
            if not await self._wait_for_caches(stop, started):
                self._raise_if_failed(stop, started, None)
                return
            self._caches_ready = True
            self.log.info("caches synced")
            leaders = [r for r in self._runnables if _needs_leader_election(r)]
            started.extend(
                self._launch(r) for r in self._runnables if r not in leaders and r not in early
            )
            if self._election is not None:
                self.elector = leaderelection.LeaderElector(self.client, self._election)
                elector_task = asyncio.create_task(
                    self.elector.run(elector_stop), name="leader-elector"
                )
                await aio.wait_first(
                    self.elector.elected, stop, tasks=[elector_task, *(s.task for s in started)]
                )
                self._raise_if_failed(stop, started, elector_task)
                if stop.is_set():
                    return
            started.extend(self._launch(r) for r in leaders)
            watched = [s.task for s in started]
            if elector_task is not None:
                watched.append(elector_task)
            await aio.wait_first(stop, tasks=watched)
            self._raise_if_failed(stop, started, elector_task)
        except BaseException as exc:
            failure = exc
            raise
        finally:
            try:
                await self._shutdown(started, elector_task, elector_stop, failure)
            finally:
                lag_stop.set()
                if lag is not None:
                    await aio.cancel_and_wait([lag])

    async def _wait_for_caches(self, stop: asyncio.Event, early: list[_Started]) -> bool:
        """True once the caches synced, False if ``stop`` was set or an ``early`` runnable
        ended first (the caller tells which)."""
        timeout = self.options.cache_sync_timeout
        halt = asyncio.Event()
        watcher = asyncio.ensure_future(aio.wait_first(stop, tasks=[s.task for s in early]))
        watcher.add_done_callback(lambda _: halt.set())
        try:
            synced = await aio.wait_unless_stopped(
                self.cache.wait_for_sync(), halt, timeout, "cache-sync"
            )
        except TimeoutError:
            raise TimeoutError(
                f"caches did not sync within {timeout} s "
                "(is the CRD installed, and does RBAC allow list/watch?)"
            ) from None
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        if not synced and stop.is_set():
            self.log.info("stop requested while waiting for the caches")
        return synced

    def _launch(self, runnable: Runnable) -> _Started:
        own_stop = asyncio.Event()
        task = asyncio.create_task(runnable.start(own_stop), name=f"runnable-{runnable!r}")
        return _Started(runnable, own_stop, task)

    def _raise_if_failed(
        self,
        stop: asyncio.Event,
        started: list[_Started],
        elector_task: asyncio.Task[None] | None,
    ) -> None:
        """Raise if the elector or a runnable ended without being asked to."""
        if elector_task is not None and elector_task.done():
            # The elector returns on its own only when the lease is lost.
            if self.elector is not None and self.elector.lost:
                raise LeadershipLost("leader election lost; stopping")
            cause = None if elector_task.cancelled() else elector_task.exception()
            raise RuntimeError("leader election ended unexpectedly") from cause
        for s in started:
            if not s.task.done():
                continue
            if s.task.cancelled():
                raise RuntimeError(f"runnable {s.runnable!r} was cancelled")
            if (exc := s.task.exception()) is not None:
                raise RuntimeError(f"runnable {s.runnable!r} failed") from exc
            if not stop.is_set():
                raise RuntimeError(f"runnable {s.runnable!r} stopped on its own")

    async def _shutdown(
        self,
        started: list[_Started],
        elector_task: asyncio.Task[None] | None,
        elector_stop: asyncio.Event,
        failure: BaseException | None,
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.options.graceful_shutdown_timeout
        self.log.info("stopping", reason=repr(failure) if failure else "requested")
        leaders = [s for s in started if _needs_leader_election(s.runnable)]
        others = [s for s in started if s not in leaders]
        # 1. Leader runnables. Without the lease (lost, or the elector died) they may not
        #    run one step more: cancel them at once, as controller-runtime does.
        lease_gone = elector_task is not None and elector_task.done()
        if lease_gone and leaders:
            self.log.error("not leader any more: cancelling the leader runnables at once")
        leaders_stopped = await self._stop_group(
            leaders, deadline, graceful=not lease_gone, abort=elector_task
        )
        # 2. The lease, as soon as no leader runnable runs any more.
        if elector_task is not None:
            if leaders_stopped:
                elector_stop.set()
                release_wait = max(deadline - loop.time(), _MIN_RELEASE_WAIT)
                await asyncio.wait([elector_task], timeout=release_wait)
            if not elector_task.done():  # never release while a leader runnable may still run
                elector_task.cancel()
            await asyncio.gather(elector_task, return_exceptions=True)
        # 3. The rest, the cache and the servers.
        await self._stop_group(others, deadline, graceful=True)
        await self.cache.stop()
        self._servers_stop.set()
        await asyncio.gather(*self._server_tasks, return_exceptions=True)
        self._server_tasks.clear()
        for runner in reversed(self._sites):
            await runner.cleanup()
        self._sites.clear()
        if self.review_client is not None and self.review_client is not self.client:
            await self.review_client.close()
        if self.events_client is not self.client:
            await self.events_client.close()
        for scratch in self._scratch:
            scratch.cleanup()
        self._scratch.clear()
        self.log.info("stopped")

    async def _stop_group(
        self,
        group: list[_Started],
        deadline: float,
        *,
        graceful: bool,
        abort: asyncio.Task[None] | None = None,
    ) -> bool:
        """Stop ``group`` by ``deadline`` (cancelling what is left then), or cancel it at once
        if not ``graceful`` or once ``abort`` ends. True if every task has ended."""
        loop = asyncio.get_running_loop()
        pending = {s.task for s in group if not s.task.done()}
        late = graceful  # what is still pending after a graceful wait ran out of budget
        if graceful:
            for s in reversed(group):
                s.stop.set()
            while pending and (remaining := deadline - loop.time()) > 0:
                waiting = set(pending)
                if abort is not None and not abort.done():
                    waiting.add(abort)
                done, _ = await asyncio.wait(
                    waiting, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
                )
                pending -= done
                if abort is not None and abort in done and pending:
                    self.log.error("leader election ended while stopping: cancelling at once")
                    late = False
                    break
        for task in pending:
            if late:
                self.log.warning("runnable did not stop in time; cancelling", task=task.get_name())
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=max(deadline - loop.time(), _MIN_CANCEL_WAIT))
        tasks = [s.task for s in group]
        await asyncio.gather(*(t for t in tasks if t.done()), return_exceptions=True)
        for task in tasks:
            if not task.done():
                self.log.error("runnable ignores cancellation", task=task.get_name())
        return all(t.done() for t in tasks)

    # -- HTTP ----------------------------------------------------------------------------------

    async def _start_servers(self) -> None:
        self._servers_stop.clear()
        metrics_at = _parse_address(self.options.metrics_bind_address)
        if metrics_at is not None:
            tls: ssl.SSLContext | None = None
            app = web.Application()
            if self.options.metrics_secure:
                tls = await self._metrics_tls()
                self.review_client = self._review_client()
                auth = delegatedauth.DelegatedAuth(self.review_client, self.options.metrics_auth)
                app.middlewares.append(auth.middleware)
            app.router.add_get("/metrics", self._serve_metrics)
            self.metrics_address = await self._serve(
                app, metrics_at, "the metrics server", "metrics_bind_address", tls
            )
        probes_at = _parse_address(self.options.health_probe_bind_address)
        if probes_at is not None:
            app = web.Application()
            app.router.add_get("/healthz", self._serve_healthz)
            app.router.add_get("/readyz", self._serve_readyz)
            self.probe_address = await self._serve(
                app, probes_at, "the health probe server", "health_probe_bind_address"
            )

    def _review_client(self) -> client_.Client:
        """The secure metrics' reviews' client: the manager's credentials, options and
        kinds, but its own connections and token bucket (``metrics_auth.review_qps`` and
        ``review_burst``), so that reviews a flood of tokens costs never take the
        controllers' rate limit nor queue before their requests. A stand-in that is not a
        :class:`runtime.client.Client` (a fake) answers the reviews itself."""
        auth = self.options.metrics_auth
        return self._sibling_client(qps=auth.review_qps, burst=auth.review_burst)

    def _sibling_client(self, **options: Any) -> client_.Client:
        """A client like the manager's (credentials, options with ``options`` replaced,
        kinds) with its own connections and token bucket; the manager's own when it is a
        stand-in (a fake)."""
        client = self.client
        if not isinstance(client, client_.Client):
            return client
        replaced = dataclasses.replace(client.options, **options)
        return client_.Client(client.configuration, options=replaced, registry=client.registry)

    async def _metrics_tls(self) -> ssl.SSLContext:
        """The metrics server's TLS context: ``metrics_ssl_context`` as given; else the
        files of ``metrics_cert_dir``, or of a self-signed certificate made now in a
        private temporary directory, followed for rotation every ``_CERT_POLL`` seconds
        (:class:`runtime.tls.Reloader`) until the servers stop."""
        options = self.options
        if options.metrics_ssl_context is not None:
            return options.metrics_ssl_context
        if options.metrics_cert_dir is not None:
            directory = pathlib.Path(options.metrics_cert_dir)
            cert, key = directory / options.metrics_cert_name, directory / options.metrics_key_name
        else:
            scratch = tempfile.TemporaryDirectory(prefix="metrics-serving-cert-")
            self._scratch.append(scratch)
            _, pair = await asyncio.to_thread(
                tls_.self_signed, pathlib.Path(scratch.name),
                dns_names=["localhost", socket.gethostname()], ip_addresses=["127.0.0.1"],
            )  # fmt: skip
            cert, key = pair.cert, pair.key
            self.log.info("metrics served with a self-signed certificate (no metrics_cert_dir)")
        reloader = await asyncio.to_thread(tls_.Reloader, cert, key)
        watch = asyncio.create_task(
            reloader.watch(self._servers_stop, _CERT_POLL), name="metrics-cert-watcher"
        )
        self._server_tasks.append(watch)
        return reloader.context

    async def _serve(
        self,
        app: web.Application,
        address: tuple[str, int],
        server: str,
        option: str,
        tls: ssl.SSLContext | None = None,
    ) -> tuple[str, int]:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, address[0], address[1], ssl_context=tls)
        try:
            await aio.listen(site, server, f"ManagerOptions.{option}", address)
        except aio.BindError:
            await runner.cleanup()
            raise
        self._sites.append(runner)
        listening = site._server
        assert listening is not None
        host, port = listening.sockets[0].getsockname()[:2]  # type: ignore[attr-defined]
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
    """Run ``manager`` until SIGTERM/SIGINT; the exit code (0, or 1 on failure).

    The first signal starts the graceful shutdown; a second one exits the process at
    once with status 1, without waiting for anything.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        if stop.is_set():
            manager.log.error("second signal: exiting at once", signal=sig.name)
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(1)
        manager.log.info("signal received: shutting down", signal=sig.name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        await manager.start(stop)
    except (LeadershipLost, aio.BindError) as exc:  # said in full by the message
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
