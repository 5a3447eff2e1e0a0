"""An async Kubernetes REST client: generic over kinds, typed errors, bounded and retried.

Objects are plain JSON dicts (``{"apiVersion": ..., "kind": ..., "metadata": ...}``);
:mod:`runtime.client.resources` maps a kind to its URL. Authentication and TLS
come from :mod:`runtime.client.kubeconfig` for a plain kubeconfig and in a pod, and
from kubernetes-asyncio's ``Configuration`` otherwise (exec plugins, auth providers and
token refresh included), so whatever ``kubectl`` accepts works.

Contract:

- **Every request has a timeout** (``Options.timeout``, default 30 s); a watch has
  none in total but an **inactivity** timeout (``Options.watch_inactivity_timeout``,
  default 120 s, longer than the server's bookmark interval) so a silent
  half-open stream is noticed.
- **Watch events of any size** are read: the stream is split on newlines here, with
  no line-length limit (an event carries a whole object, up to etcd's ~1.5 MiB).
- **Errors are typed** (:mod:`runtime.client.errors`), carrying the server's message.
- **Retries** (tenacity, ``Options.max_attempts`` attempts, default 5): 429 on any
  verb, honouring ``Retry-After`` (the request was not processed); 5xx and
  connection errors only on idempotent verbs (GET, PUT, DELETE); never 409 or 422.
- **Patches always say their content type**: ``merge`` (application/merge-patch+json),
  ``json`` (application/json-patch+json), ``strategic``, ``apply`` (server-side
  apply, with ``field_manager`` and ``force``).
- **Identity**: every write says its ``fieldManager`` and every request its
  User-Agent, both derived from ``Options.name`` unless set (:func:`identity`, the one
  place): ``<name>`` and ``<name> k8s-controller-runtime/<version>``. A client with no
  name takes its :class:`~runtime.manager.Manager`'s (:meth:`Client.default_name`);
  one that nobody named is ``k8s-controller-runtime``, never an operator.
- **Client-side rate limiting** is off by default (``Options.qps=None``, as in
  controller-runtime since v0.21, relying on the server's priority and
  fairness); set ``qps``/``burst`` to turn token buckets on. There is **one bucket per
  API resource** (``Options.rate_limit_scope="resource"``, the default: group and
  resource read from the request's path, a subresource sharing its parent's bucket, any
  other path one bucket of its own), as controller-runtime's client, which makes one
  REST client and so one client-go bucket per kind: the same ``qps`` then allows the
  same throughput as there. ``rate_limit_scope="client"`` makes one bucket for every
  request of the client. Each throttled request's
  wait for its token (0 when one was there) is observed in
  ``rest_client_rate_limiter_duration_seconds`` (histogram by ``verb`` and ``host``, with
  client-go's name, labels and buckets).
- **Write observers**: after each successful create/update/patch (also of
  ``status``), every function added with :meth:`Client.add_write_observer` is
  called with the object the server returned; after each successful delete,
  every function added with :meth:`Client.add_delete_observer` is called with
  the resource, namespace, name and the server's answer (the object, or a
  ``Status``). The cache uses both for write-through.
- **Redirects are never followed**: a 3xx answer is :class:`errors.Redirected`
  (naming its ``Location``); from :meth:`Client.send` it comes back as it is. Following
  one would re-send the request's body and bearer token to wherever it points.
- **Bodies are read with a cap**: an answer longer than ``Options.max_response_bytes``
  (default 256 MiB, a page of 500 large objects) raises :class:`errors.ResponseTooLarge`
  as soon as it is known (``Content-Length``, or while reading), keeping nothing of it;
  a watch event longer than ``Options.max_watch_event_bytes`` (default 16 MiB, ten
  times etcd's largest object) ends the watch the same way; :meth:`Client.send` takes
  its own ``max_bytes``.
- **Raw requests** (:meth:`Client.send`): one request through the same session and
  credentials, with no retry and no error mapping, answering status and bytes; for
  subresources whose answers are not Kubernetes objects (``services/<svc>:<port>/proxy``,
  ``pods/<pod>:<port>/proxy``).
- **One write per object at a time**: in one client, updates, patches and deletes of
  the same object (``resource``, namespace, name; any subresource) are made one after
  the other, never overlapping (:meth:`Client.writing`; a task already inside it for
  that object goes on). Two controllers of one manager writing the same object (one its
  status, the other an annotation) then never race each other into a 409: the second
  waits for the first's answer, which the write observers have given the cache, so a
  status writer that reads the newest copy inside :meth:`Client.writing` writes on the
  right ``resourceVersion``. Different objects are never held up.
- Counts ``rest_client_requests_total{code,method,host}`` like client-go.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import contextvars
import dataclasses
import io
import json
import os
import pathlib
import ssl
import urllib.parse
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Literal

import aiohttp
import tenacity

import runtime
from runtime import metrics
from runtime.client import errors, kubeconfig, resources
from runtime.workqueue import ratelimiter

__all__ = [
    "FRAMEWORK",
    "Client",
    "ListResult",
    "Options",
    "PatchType",
    "RawResponse",
    "WatchEvent",
    "identity",
    "limiter_key",
]

PatchType = Literal["merge", "json", "strategic", "apply"]
_PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}
_IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE"})
_LARGE_BODY = 512 * 1024
"""Request bodies above this many bytes are streamed from a buffer (objects go up to
etcd's ~1.5 MiB; aiohttp warns about raw bytes bodies over 1 MiB)."""
_CLOSE_WAIT = 1.0
"""Seconds ``Client.close`` waits for aborted watch connections' sockets to close."""

Obj = dict[str, Any]
WatchEvent = dict[str, Any]
"""``{"type": "ADDED"|"MODIFIED"|"DELETED"|"BOOKMARK"|"ERROR", "object": {...}}``."""

_requests = metrics.Family(
    "rest_client_requests_total",
    "Number of HTTP requests, partitioned by status code, method, and host.",
    "counter",
    ("code", "method", "host"),
)
_limiter_wait = metrics.Family(
    "rest_client_rate_limiter_duration_seconds",
    "Client side rate limiter latency in seconds. Broken down by verb, and host.",
    "histogram",
    ("verb", "host"),
    # client-go's buckets (k8s.io/component-base/metrics/prometheus/restclient)
    buckets=(0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0),
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    """Client behaviour. Every field states its default."""

    timeout: float = 30.0
    """Seconds for one request, connect to last byte. Default 30 s."""

    watch_inactivity_timeout: float = 120.0
    """Seconds a watch may stay silent (no event, no bookmark) before it is dropped.
    Default 120 s."""

    max_attempts: int = 5
    """Attempts per request when retrying 429s, 5xx and connection errors. Default 5."""

    retry_max_wait: float = 10.0
    """Cap on the backoff between attempts (a server's Retry-After is honoured up to
    this). Default 10 s."""

    qps: float | None = None
    """Client-side request rate limit; ``None`` (default) turns it off."""

    burst: int = 10
    """Bucket size when ``qps`` is set. Default 10."""

    rate_limit_scope: Literal["resource", "client"] = "resource"
    """What one token bucket limits when ``qps`` is set: ``"resource"`` (default) each API
    resource's requests (``pods``, ``rayservices.ray.io``, ...; subresources with their
    resource), as controller-runtime's per-kind REST clients; ``"client"`` all of them."""

    name: str | None = None
    """Who writes through this client (the operator's name): the default of
    ``field_manager`` and ``user_agent``. Default ``None``: a
    :class:`runtime.manager.Manager` given this client names it after itself
    (:meth:`Client.default_name`); a client no manager named is ``FRAMEWORK``
    (``"k8s-controller-runtime"``)."""

    field_manager: str | None = None
    """``fieldManager`` for writes and server-side apply. Default ``None``: the name."""

    user_agent: str | None = None
    """User-Agent header. Default ``None``: ``"<name> k8s-controller-runtime/<version>"``
    (the name's product token first, then the framework's and its version)."""

    max_response_bytes: int = 256 * 1024 * 1024
    """Longest answer body read (larger: :class:`errors.ResponseTooLarge`). Default 256 MiB."""

    max_watch_event_bytes: int = 16 * 1024 * 1024
    """Longest watch event read (larger ends the watch with
    :class:`errors.ResponseTooLarge`). Default 16 MiB."""


@dataclasses.dataclass(frozen=True, slots=True)
class ListResult:
    """All pages of a list, and the resourceVersion to watch from."""

    items: list[Obj]
    resource_version: str


@dataclasses.dataclass(frozen=True, slots=True)
class RawResponse:
    """An answer as the server sent it (see :meth:`Client.send`)."""

    status: int
    content_type: str
    body: bytes
    location: str = ""
    """The ``Location`` header (of a redirect, which is never followed)."""


FRAMEWORK = "k8s-controller-runtime"
"""The framework's distribution name: the name of a client nobody named."""


def identity(options: Options) -> tuple[str, str]:
    """``(field manager, User-Agent)`` for ``options``: the defaults of
    :class:`Options` applied, here only.

    >>> identity(Options(name="mirror"))[0], identity(Options(name="mirror", field_manager="m"))[0]
    ('mirror', 'm')
    >>> identity(Options(name="mirror"))[1] == f"mirror {FRAMEWORK}/{runtime.__version__}"
    True
    """
    name = options.name or FRAMEWORK
    agent = options.user_agent or (
        f"{FRAMEWORK}/{runtime.__version__}" if name == FRAMEWORK
        else f"{name} {FRAMEWORK}/{runtime.__version__}"
    )  # fmt: skip
    return options.field_manager or name, agent


def limiter_key(path: str) -> str:
    """The API resource a request's path names (``<resource>.<group>``, ``<resource>`` in the
    core group), its subresources and its collection included; ``""`` for any other path.
    With ``Options.rate_limit_scope="resource"`` each key has its own token bucket.

    >>> limiter_key("/apis/ray.io/v1/namespaces/ns/rayservices/s/status")
    'rayservices.ray.io'
    >>> limiter_key("/api/v1/pods"), limiter_key("/api/v1/namespaces/ns/pods/p/log")
    ('pods', 'pods')
    >>> limiter_key("/api/v1/namespaces"), limiter_key("/api/v1/namespaces/ns")
    ('namespaces', 'namespaces')
    >>> limiter_key("/apis/coordination.k8s.io/v1/namespaces/ns/leases/l?x=1")
    'leases.coordination.k8s.io'
    >>> limiter_key("/version"), limiter_key("/apis/ray.io/v1"), limiter_key("/apis")
    ('', '', '')
    """
    parts = path.split("?", 1)[0].strip("/").split("/")
    if parts[0] == "api" and len(parts) > 2:
        group, rest = "", parts[2:]
    elif parts[0] == "apis" and len(parts) > 3:
        group, rest = parts[1], parts[3:]
    else:
        return ""
    if rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    return f"{rest[0]}.{group}" if group else rest[0]


WriteObserver = Callable[[Obj], None]
DeleteObserver = Callable[[resources.Resource, str | None, str, Any], None]


class _Retryable(Exception):
    """Wraps an error that the retry policy may retry."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


ObjectKey = tuple[str, str, str]
"""(resource's plural with its group, namespace or "", name): what :meth:`Client.writing`
serialises on."""

_held: contextvars.ContextVar[frozenset[ObjectKey]] = contextvars.ContextVar(
    "runtime_client_writing", default=frozenset()
)
"""The objects the current task is writing (inside :meth:`Client.writing`)."""


class Client:
    """See the module docstring. Create with :meth:`from_kubeconfig`, :meth:`in_cluster`
    or :meth:`from_configuration`; close with :meth:`close` (or ``async with``)."""

    def __init__(
        self,
        configuration: Any,
        *,
        options: Options | None = None,
        registry: resources.Registry | None = None,
    ) -> None:
        self.configuration = configuration
        self.options = options or Options()
        self.registry = registry or resources.default_registry.copy()
        self.host = str(configuration.host).rstrip("/")
        self._host_label = urllib.parse.urlsplit(self.host).netloc
        self._session: aiohttp.ClientSession | None = None
        # Watch connections until their socket is closed: see close().
        self._watch_transports: dict[asyncio.Future[None], asyncio.Transport] = {}
        # Token buckets by limiter key (limiter_key(path), or "" for the whole client):
        # made on first use, so an unlimited client holds none.
        self._buckets: dict[str, ratelimiter.TokenBucket] = {}
        self._write_observers: list[WriteObserver] = []
        self._delete_observers: list[DeleteObserver] = []
        self._writing: weakref.WeakValueDictionary[ObjectKey, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    # -- construction ------------------------------------------------------------------------

    @classmethod
    async def from_kubeconfig(
        cls, path: str | os.PathLike[str] | None = None, *, context: str | None = None,
        options: Options | None = None,
    ) -> Client:  # fmt: skip
        """A client for a kubeconfig (default ``$KUBECONFIG`` or ``~/.kube/config``).

        A plain kubeconfig (certificates or a token) is read by
        :mod:`runtime.client.kubeconfig`; anything else (exec plugins, auth providers,
        a ``$KUBECONFIG`` list to merge) by kubernetes-asyncio, imported only then: it
        is the framework's optional dependency (``k8s-controller-runtime[full-kubeconfig]``),
        and ``ImportError`` says so when such a kubeconfig meets an installation without it."""
        if path is None:
            listed = [e for e in os.environ.get("KUBECONFIG", "").split(os.pathsep) if e]
            if len(listed) <= 1:  # one file, nothing to merge
                path = listed[0] if listed else pathlib.Path.home() / ".kube" / "config"
        if path is not None and (light := kubeconfig.from_kubeconfig(path, context)):
            return cls(light, options=options)
        try:
            from kubernetes_asyncio import client as k8s
            from kubernetes_asyncio import config as k8s_config
        except ModuleNotFoundError as exc:
            what = f"kubeconfig {path}" if path is not None else "a $KUBECONFIG list"
            raise ImportError(
                f"{what} needs kubernetes-asyncio (exec plugins, auth providers, merging):"
                " pip install 'k8s-controller-runtime[full-kubeconfig]'"
            ) from exc

        configuration = k8s.Configuration()
        await k8s_config.load_kube_config(
            config_file=str(path) if path else None, context=context,
            client_configuration=configuration,
        )  # fmt: skip
        return cls(configuration, options=options)

    @classmethod
    def in_cluster(cls, *, options: Options | None = None) -> Client:
        """A client from the pod's service account (its token re-read when it rotates)."""
        return cls(kubeconfig.in_cluster(), options=options)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every connection, and return once their sockets are closed.

        A watch ended by cancellation closes its connection gracefully, which over TLS
        is a shutdown exchange with the server that outlives the connector (it no longer
        knows the connection); an event loop closed right after (``asyncio.run``'s end,
        a test's loop) would leave those sockets open until the garbage collector warns
        about them. Closing the client aborts such connections and waits (1 s at most)
        until they are gone."""
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._watch_transports:
            for transport in list(self._watch_transports.values()):
                transport.abort()
            await asyncio.wait(list(self._watch_transports), timeout=_CLOSE_WAIT)

    def _track_watch(self, connection: aiohttp.connector.Connection | None) -> None:
        protocol = connection.protocol if connection is not None else None
        transport = connection.transport if connection is not None else None
        closed = protocol.closed if protocol is not None else None
        if transport is None or closed is None or closed in self._watch_transports:
            return
        self._watch_transports[closed] = transport
        closed.add_done_callback(self._untrack_watch)

    def _untrack_watch(self, closed: asyncio.Future[None]) -> None:
        self._watch_transports.pop(closed, None)
        # A shutdown cut short ends the connection with an error (an abort, or a server
        # still sending events after our close_notify): expected, and nobody else reads
        # it, so take it here rather than have asyncio log "exception never retrieved".
        if not closed.cancelled():
            closed.exception()

    def _ssl_context(self) -> ssl.SSLContext:
        cfg = self.configuration
        context = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
        if cfg.cert_file:
            context.load_cert_chain(cfg.cert_file, keyfile=cfg.key_file)
        if not cfg.verify_ssl:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(ssl=self._ssl_context(), limit=100)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    def default_name(self, name: str) -> None:
        """Name this client ``name`` (:attr:`Options.name`) unless its options already
        do; from the next request on. A :class:`runtime.manager.Manager` calls it with
        its own name."""
        if self.options.name is None:
            self.options = dataclasses.replace(self.options, name=name)

    # -- observers ---------------------------------------------------------------------------

    def add_write_observer(self, observer: WriteObserver) -> None:
        """Call ``observer(obj)`` with every object a successful write returns."""
        self._write_observers.append(observer)

    def add_delete_observer(self, observer: DeleteObserver) -> None:
        """Call ``observer(resource, namespace, name, answer)`` after every successful delete."""
        self._delete_observers.append(observer)

    def _observe_delete(
        self, resource: resources.Resource, namespace: str | None, name: str, answer: Any
    ) -> None:
        for observer in self._delete_observers:
            observer(resource, namespace, name, answer)

    def _observe_write(self, obj: Obj) -> Obj:
        for observer in self._write_observers:
            observer(obj)
        return obj

    # -- the transport -----------------------------------------------------------------------

    def _bucket(self, path: str) -> ratelimiter.TokenBucket | None:
        """The token bucket a request to ``path`` waits for; None without ``qps``."""
        qps = self.options.qps
        if not qps:
            return None
        key = limiter_key(path) if self.options.rate_limit_scope == "resource" else ""
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = ratelimiter.TokenBucket(qps, self.options.burst)
        return bucket

    async def _throttle(self, method: str, path: str) -> None:
        """Wait for a token of the request's client-side bucket, when ``qps`` is set; the
        wait (0 when a token was there) goes into ``rest_client_rate_limiter_duration_seconds``."""
        bucket = self._bucket(path)
        if bucket is not None:
            delay = bucket.when(None)
            _limiter_wait.histogram(method, self._host_label).observe(delay)
            if delay > 0:
                await asyncio.sleep(delay)

    async def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": identity(self.options)[1]}
        if content_type:
            headers["Content-Type"] = content_type
        # kubernetes-asyncio keeps the (already prefixed) token under "BearerToken".
        token = await self.configuration.get_api_key_with_prefix(
            "BearerToken", alias="authorization"
        )
        if token:
            headers["Authorization"] = token
        return headers

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        request_timeout: float | None = None,
    ) -> Any:
        """One API call with the retry policy; returns the decoded JSON body (or None)."""
        method = method.upper()
        idempotent = method in _IDEMPOTENT

        def retryable(exc: BaseException) -> bool:
            if not isinstance(exc, _Retryable):
                return False
            inner = exc.error
            if isinstance(inner, errors.TooManyRequests):
                return True
            if isinstance(inner, errors.ServerError | aiohttp.ClientConnectionError | TimeoutError):
                return idempotent
            return False

        def wait(state: tenacity.RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome else None
            inner = exc.error if isinstance(exc, _Retryable) else None
            if isinstance(inner, errors.ApiError) and inner.retry_after is not None:
                return min(inner.retry_after, self.options.retry_max_wait)
            backoff = tenacity.wait_random_exponential(
                multiplier=0.1, max=self.options.retry_max_wait
            )
            return float(backoff(state))

        # The first attempt runs outside tenacity: its retry loop costs ~35 us of CPU
        # even when the first attempt succeeds (it re-wraps its callbacks on every
        # step), and most requests do succeed at once. A failure the policy retries
        # enters the loop as its attempt 1, replayed without a request: the waits and
        # the attempt bound are unchanged.
        try:
            return await self._once(method, path, query, body, content_type, request_timeout)
        except (errors.ApiError, aiohttp.ClientConnectionError, TimeoutError) as exc:
            failed = _Retryable(exc)
            if self.options.max_attempts <= 1 or not retryable(failed):
                raise
            first: _Retryable | None = failed
        try:
            async for attempt in tenacity.AsyncRetrying(
                retry=tenacity.retry_if_exception(retryable),
                wait=wait,
                stop=tenacity.stop_after_attempt(self.options.max_attempts),
                reraise=True,
            ):
                with attempt:
                    if first is not None:
                        replayed, first = first, None
                        raise replayed
                    try:
                        return await self._once(
                            method, path, query, body, content_type, request_timeout
                        )
                    except (errors.ApiError, aiohttp.ClientConnectionError, TimeoutError) as exc:
                        raise _Retryable(exc) from exc
        except _Retryable as wrapped:
            raise wrapped.error from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        client_timeout: aiohttp.ClientTimeout | None = None,
        throttle: bool = True,
        max_bytes: int | None = None,
    ) -> RawResponse:
        """One request with the client's session and credentials, **without** retries or
        error mapping: any status comes back as a :class:`RawResponse`; connection errors
        and timeouts propagate as aiohttp raises them. ``headers`` are added to (and may
        override) the client's own; ``client_timeout`` defaults to ``Options.timeout`` in total.
        ``throttle=False`` skips the client-side token bucket: for data-plane calls
        tunnelled through the API server's proxy subresources, which client-go's callers
        (controller-runtime's HTTP client) make outside the REST client's QPS budget too,
        so that they never delay the controller's own reads and writes. ``max_bytes``
        (default ``Options.max_response_bytes``) caps the body read
        (:class:`errors.ResponseTooLarge`); a redirect is returned, never followed."""
        method = method.upper()
        if throttle:
            await self._throttle(method, path)
        all_headers = await self._headers(None)
        all_headers.update(headers or {})
        async with self._get_session().request(
            method,
            self.host + path,
            params=_query(query),
            data=body,
            headers=all_headers,
            timeout=client_timeout or aiohttp.ClientTimeout(total=self.options.timeout),
            allow_redirects=False,
        ) as response:
            _requests.counter(str(response.status), method, self._host_label).inc()
            limit = self.options.max_response_bytes if max_bytes is None else max_bytes
            raw = await read_capped(response, limit, method, path)
            return RawResponse(
                response.status,
                response.headers.get("Content-Type", ""),
                raw,
                response.headers.get("Location", ""),
            )

    async def _once(
        self, method: str, path: str, query: Mapping[str, Any] | None, body: Any,
        content_type: str | None, request_timeout: float | None,
    ) -> Any:  # fmt: skip
        await self._throttle(method, path)
        data: bytes | io.BytesIO | None = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            if len(data) > _LARGE_BODY:
                data = io.BytesIO(data)  # aiohttp streams it (and warns about raw bytes)
            content_type = content_type or "application/json"
        session = self._get_session()
        async with session.request(
            method,
            self.host + path,
            params=_query(query),
            data=data,
            headers=await self._headers(content_type),
            timeout=aiohttp.ClientTimeout(total=request_timeout or self.options.timeout),
            allow_redirects=False,
        ) as response:
            _requests.counter(str(response.status), method, self._host_label).inc()
            if 300 <= response.status < 400:
                raise errors.Redirected(response.status, response.headers.get("Location", ""))
            raw = await read_capped(response, self.options.max_response_bytes, method, path)
            decoded = _decode(raw)
            if response.status >= 400:
                raise errors.from_status(
                    response.status,
                    decoded if isinstance(decoded, dict) else {"message": str(decoded)},
                    _retry_after(response.headers.get("Retry-After")),
                )
            return decoded

    # -- verbs ---------------------------------------------------------------------------------

    def resource_for(self, obj_or_resource: Obj | resources.Resource) -> resources.Resource:
        return self.registry.resource_for(obj_or_resource)

    async def get(self, resource: resources.Resource, namespace: str | None, name: str) -> Obj:
        result: Obj = await self.request("GET", resource.path(namespace, name))
        return result

    async def list(
        self,
        resource: resources.Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        page_size: int = 500,
    ) -> ListResult:
        """Every page of a list (``limit``/``continue``), and the list's resourceVersion.
        Each item names its ``apiVersion`` and ``kind`` (the server omits them for
        built-in kinds)."""
        items: list[Obj] = []
        token: str | None = None
        list_rv = ""
        while True:
            query = {
                "labelSelector": label_selector,
                "fieldSelector": field_selector,
                "limit": page_size,
                "continue": token,
                # A resourceVersion only applies to the first page.
                "resourceVersion": resource_version if token is None else None,
            }
            page = await self.request("GET", resource.path(namespace), query=query)
            for item in page.get("items") or ():
                # The server leaves apiVersion and kind out of the items of built-in kinds'
                # lists; every object we hand out names its kind, as client-go's
                # unstructured lists do, so it can be written back as it is.
                if isinstance(item, dict):
                    item.setdefault("apiVersion", resource.api_version)
                    item.setdefault("kind", resource.kind)
                items.append(item)
            meta = page.get("metadata") or {}
            list_rv = meta.get("resourceVersion", list_rv)
            token = meta.get("continue") or None
            if not token:
                return ListResult(items, list_rv)

    @contextlib.asynccontextmanager
    async def writing(
        self, resource: resources.Resource, namespace: str | None, name: str
    ) -> AsyncIterator[None]:
        """Hold the object's write turn (see the module docstring): writes to it from
        other tasks wait until this block ends; this task's own go on."""
        key = (f"{resource.plural}.{resource.group}", namespace or "", name)
        held = _held.get()
        if key in held:
            yield
            return
        lock = self._writing.get(key)
        if lock is None:
            lock = self._writing[key] = asyncio.Lock()
        async with lock:
            token = _held.set(held | {key})
            try:
                yield
            finally:
                _held.reset(token)

    async def create(self, obj: Obj, *, namespace: str | None = None) -> Obj:
        resource = self.resource_for(obj)
        ns = namespace or obj.get("metadata", {}).get("namespace")
        created = await self.request("POST", resource.path(ns), query=self._manager(), body=obj)
        return self._observe_write(created)

    async def update(self, obj: Obj, *, subresource: str | None = None) -> Obj:
        """PUT the object; its ``metadata.resourceVersion`` makes the write conditional."""
        resource = self.resource_for(obj)
        meta = obj["metadata"]
        async with self.writing(resource, meta.get("namespace"), meta["name"]):
            updated = await self.request(
                "PUT",
                resource.path(meta.get("namespace"), meta["name"], subresource),
                query=self._manager(),
                body=obj,
            )
            return self._observe_write(updated)

    async def update_status(self, obj: Obj) -> Obj:
        """PUT the status subresource (spec changes in ``obj`` are ignored by the server)."""
        return await self.update(obj, subresource="status")

    async def patch(
        self,
        resource: resources.Resource,
        namespace: str | None,
        name: str,
        patch: Any,
        *,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
        force: bool = False,
    ) -> Obj:
        """PATCH with an explicit content type (see the module docstring)."""
        if patch_type not in _PATCH_CONTENT_TYPES:
            raise ValueError(f"patch_type must be one of {sorted(_PATCH_CONTENT_TYPES)}")
        query = self._manager()
        if patch_type == "apply" and force:
            query["force"] = "true"
        async with self.writing(resource, namespace, name):
            patched = await self.request(
                "PATCH",
                resource.path(namespace, name, subresource),
                query=query,
                body=patch,
                content_type=_PATCH_CONTENT_TYPES[patch_type],
            )
            return self._observe_write(patched)

    async def delete(
        self,
        resource: resources.Resource,
        namespace: str | None,
        name: str,
        *,
        propagation_policy: Literal["Foreground", "Background", "Orphan"] | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> Obj | None:
        """DELETE; ``uid``/``resource_version`` become preconditions; returns the answer."""
        options: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        preconditions = {
            k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v
        }
        if preconditions:
            options["preconditions"] = preconditions
        async with self.writing(resource, namespace, name):
            result: Obj | None = await self.request(
                "DELETE", resource.path(namespace, name), body=options
            )
            self._observe_delete(resource, namespace, name, result)
            return result

    async def watch(
        self,
        resource: resources.Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        timeout_seconds: int | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        allow_bookmarks: bool = True,
        send_initial_events: bool = False,
    ) -> AsyncIterator[WatchEvent]:
        """Stream watch events until the server ends the watch (``timeout_seconds``).

        ``ERROR`` events are raised as typed errors (a 410 as :class:`errors.Gone`);
        a stream silent for longer than the inactivity timeout raises ``TimeoutError``.
        """
        query: dict[str, Any] = {
            "watch": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": timeout_seconds,
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "allowWatchBookmarks": "true" if allow_bookmarks else None,
        }
        if send_initial_events:
            query["sendInitialEvents"] = "true"
            query["resourceVersionMatch"] = "NotOlderThan"
        await self._throttle("GET", resource.path(namespace))
        session = self._get_session()
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=self.options.timeout,
            sock_read=self.options.watch_inactivity_timeout,
        )
        async with session.get(
            self.host + resource.path(namespace),
            params=_query(query),
            headers=await self._headers(None),
            timeout=timeout,
            allow_redirects=False,
        ) as response:
            self._track_watch(response.connection)
            _requests.counter(str(response.status), "WATCH", self._host_label).inc()
            if 300 <= response.status < 400:
                raise errors.Redirected(response.status, response.headers.get("Location", ""))
            if response.status >= 400:
                raw = await read_capped(
                    response, self.options.max_response_bytes, "WATCH", resource.path(namespace)
                )
                decoded = _decode(raw)
                raise errors.from_status(
                    response.status, decoded if isinstance(decoded, dict) else {}
                )
            limit = self.options.max_watch_event_bytes
            async for line in _lines(response.content, limit, resource.path(namespace)):
                if not line.strip():
                    continue
                event: WatchEvent = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    raise errors.from_status(int(status.get("code") or 500), status)
                yield event

    async def discover(self, api_version: str) -> builtins.list[resources.Resource]:
        """Register every resource the server serves for ``api_version`` (``group/version``)."""
        group, _, version = api_version.rpartition("/")
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        found = []
        for item in (await self.request("GET", path)).get("resources", []):
            if "/" in item["name"]:
                continue  # subresources
            found.append(
                self.registry.register(
                    resources.Resource(
                        group, version, item["kind"], item["name"], bool(item["namespaced"])
                    )
                )
            )
        return found

    def _manager(self) -> dict[str, Any]:
        return {"fieldManager": identity(self.options)[0]}


async def read_capped(response: aiohttp.ClientResponse, limit: int, method: str, url: str) -> bytes:
    """The body of ``response``, refused (:class:`errors.ResponseTooLarge`) past ``limit``
    bytes: at once when ``Content-Length`` says so, else as soon as the chunks read
    exceed it (what was read is dropped). Shared by every HTTP client of the project."""
    declared = response.content_length
    if declared is not None and declared > limit:
        response.close()  # the unread body makes the connection unusable: drop it now
        raise errors.ResponseTooLarge(method, url, limit)
    body = bytearray()
    async for chunk in response.content.iter_any():
        if len(body) + len(chunk) > limit:
            response.close()
            raise errors.ResponseTooLarge(method, url, limit)
        body += chunk
    return bytes(body)


async def _lines(stream: aiohttp.StreamReader, limit: int, url: str) -> AsyncIterator[bytes]:
    """The newline-separated lines of a stream, each at most ``limit`` bytes.

    aiohttp's own line reader raises ``LineTooLong`` past a limit (512 KiB in aiohttp
    3.x) that a watch event of a large object (etcd allows ~1.5 MiB) exceeds, so the
    chunks are split here; a line spanning chunks is joined once, when it ends. A line
    longer than ``limit`` raises :class:`errors.ResponseTooLarge`.
    """
    pending = bytearray()
    async for chunk in stream.iter_any():
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            if len(pending) + end - start > limit:
                raise errors.ResponseTooLarge("WATCH", url, limit)
            if pending:
                pending += chunk[start:end]
                yield bytes(pending)
                pending.clear()
            else:
                yield chunk[start:end]
            start = end + 1
        if len(pending) + len(chunk) - start > limit:
            raise errors.ResponseTooLarge("WATCH", url, limit)
        pending += chunk[start:]
    if pending:
        yield bytes(pending)


def _query(query: Mapping[str, Any] | None) -> dict[str, str]:
    if not query:
        return {}
    return {k: str(v) for k, v in query.items() if v is not None}


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        return None
