"""The webhook server: HTTPS endpoints for admission and conversion webhooks.

A :class:`Server` is a manager runnable (:attr:`Server.needs_leader_election` is
false: every replica serves, as the API server calls any of them through the Service).
The manager starts it **before its caches**, since a cache of a kind whose conversion
webhook this server answers could not sync without it (controller-runtime does the
same); :meth:`runtime.manager.Manager.webhook_server` makes one and adds it.

**Endpoints**, registered before :meth:`Server.start`:

- :meth:`Server.register` ``(path, handler)``: an admission handler
  (:class:`runtime.webhook.admission.Handler`) at ``path``;
- :meth:`Server.register_conversion` ``(group, kind, converter)``: a converter
  (:class:`runtime.webhook.conversion.Converter`), all of them served at ``/convert``;
- :func:`register_for` ``(server, resource, validator=, defaulter=, converter=)``:
  the three at controller-runtime's paths, ``/validate-<group>-<version>-<kind>`` and
  ``/mutate-<group>-<version>-<kind>`` (dots of the group as ``-``, kind lower-cased:
  :func:`validate_path`, :func:`mutate_path`) and ``/convert``. The builder's
  ``with_validator``/``with_defaulter``/``with_converter`` call it.

Each endpoint takes ``POST`` with ``Content-Type: application/json`` and a
``Content-Length`` of at most 4 MiB. What it reads, and how many bodies at once, is
:mod:`runtime.webhook.intake`'s (:attr:`Options.limits`): a body that is too large (413),
has no length (411), is no review of the right kind (400) - checked on its bytes before
it is parsed - or finds no free slot within 2 s (429 with ``Retry-After``) is answered
with an error, which the API server counts as a failed call (the webhook's
``failurePolicy`` decides); anything else is answered HTTP 200 with the review (see
:mod:`runtime.webhook.admission` and :mod:`runtime.webhook.conversion`). A request holds
its slot until it is answered, so a flood of large or junk bodies costs bounded memory
(~150 MiB at most) and stalls the event loop at most one bounded parse at a time: the
manager's other work (its leader Lease among it) goes on.

**Certificates** (:class:`Options`): the server presents ``<cert_dir>/<cert_name>``
with key ``<cert_dir>/<key_name>`` (controller-runtime's defaults: ``tls.crt``,
``tls.key`` in ``$TMPDIR/k8s-webhook-server/serving-certs``), e.g. a Secret mounted by
cert-manager. They are re-read every ``reload_interval`` seconds and the new pair is
used for new connections when they changed (:class:`runtime.tls.Reloader`). With
:attr:`Options.self_signed`, the server instead generates a CA and a serving
certificate for the given names into ``cert_dir`` at start, and once it listens writes
the CA as ``caBundle`` into the named webhook configurations and CRDs
(:mod:`runtime.webhook.cainject`; needs the manager's client). Every replica makes its
own CA: self-signed mode is for one replica (development, tests), not for HA.

**Metrics** (controller-runtime's names, label ``webhook`` = the path):
``controller_runtime_webhook_requests_total{webhook,code}`` (``code``: the HTTP
status, refusals included), ``controller_runtime_webhook_latency_seconds{webhook}`` (histogram) and
``controller_runtime_webhook_requests_in_flight{webhook}``.

**Readiness**: :meth:`Server.serving` is true once a TLS handshake with the server's
own address succeeds (the manager adds it to ``/readyz`` as ``webhook``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import pathlib
import ssl
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog
from aiohttp import web

from runtime import metrics, tls
from runtime._internal import aio
from runtime.client import client as client_
from runtime.client import resources
from runtime.webhook import admission, cainject, conversion, intake

__all__ = [
    "CONVERT_PATH",
    "Options",
    "SelfSigned",
    "Server",
    "mutate_path",
    "register_for",
    "validate_path",
]

CONVERT_PATH = "/convert"
_READ_BUFSIZE = 16 * 1024
_CHECK_TIMEOUT = 2.0

REQUESTS = metrics.Family(
    "controller_runtime_webhook_requests_total",
    "Total number of admission requests by HTTP status code.",
    "counter",
    ("webhook", "code"),
)
LATENCY = metrics.Family(
    "controller_runtime_webhook_latency_seconds",
    "Histogram of the latency of processing admission requests",
    "histogram",
    ("webhook",),
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
IN_FLIGHT = metrics.Family(
    "controller_runtime_webhook_requests_in_flight",
    "Current number of admission requests being served.",
    "gauge",
    ("webhook",),
)


def _segment(resource: resources.Resource) -> str:
    return f"{resource.group.replace('.', '-')}-{resource.version}-{resource.kind.lower()}"


def validate_path(resource: resources.Resource) -> str:
    """``/validate-<group>-<version>-<kind>``.

    >>> validate_path(resources.Resource("example.com", "v1", "Database", "databases"))
    '/validate-example-com-v1-database'
    """
    return f"/validate-{_segment(resource)}"


def mutate_path(resource: resources.Resource) -> str:
    """``/mutate-<group>-<version>-<kind>``."""
    return f"/mutate-{_segment(resource)}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SelfSigned:
    """Generate the certificates at start, and where to inject the CA."""

    dns_names: Sequence[str] = ()
    """DNS names of the serving certificate (e.g. ``<service>.<namespace>.svc``). Default none."""
    ip_addresses: Sequence[str] = ()
    """IP addresses of the serving certificate (e.g. ``127.0.0.1``). Default none; give at
    least one name or address."""
    validating_configurations: Sequence[str] = ()
    """ValidatingWebhookConfiguration names whose webhooks get the CA. Default none."""
    mutating_configurations: Sequence[str] = ()
    """MutatingWebhookConfiguration names whose webhooks get the CA. Default none."""
    crds: Sequence[str] = ()
    """CRD names (``<plural>.<group>``) whose conversion webhook gets the CA. Default none."""
    days: int = 365
    """Validity of both certificates. Default 365."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    """Webhook server settings. Every field states its default."""

    bind_address: str = ":9443"
    """``host:port`` to listen on (port ``0``: any free port, see :attr:`Server.address`).
    Default ``:9443`` (all interfaces), controller-runtime's port."""
    cert_dir: pathlib.Path = pathlib.Path(tempfile.gettempdir(), "k8s-webhook-server",
                                          "serving-certs")  # fmt: skip
    """Where the certificate and key are (or are generated). Default
    ``$TMPDIR/k8s-webhook-server/serving-certs``."""
    cert_name: str = "tls.crt"
    """Default ``tls.crt``."""
    key_name: str = "tls.key"
    """Default ``tls.key``."""
    reload_interval: float = 10.0
    """Seconds between checks of the certificate files for a rotation. Default 10."""
    self_signed: SelfSigned | None = None
    """Generate a CA and certificate at start instead of reading given ones. Default ``None``."""
    limits: intake.Limits = dataclasses.field(default_factory=intake.Limits)
    """What a request may send, and how many are served at once (:mod:`runtime.webhook.intake`).
    Default ``intake.Limits()``: 4 MiB bodies, 2 large and 16 small at once."""


def _parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host or "0.0.0.0", int(port)


class Server:
    """See the module docstring."""

    needs_leader_election = False
    start_before_caches = True

    def __init__(
        self, options: Options | None = None, *, client: client_.Client | None = None
    ) -> None:
        self.options = options or Options()
        self.client = client
        self._admission: dict[str, admission.Handler] = {}
        self.converters = conversion.Converters()
        self.address: tuple[str, int] | None = None
        """Where the server listens, once started (the real port if 0 was asked)."""
        self.ca_bundle: bytes | None = None
        """The generated CA (PEM), in self-signed mode once started."""
        self.reloader: tls.Reloader | None = None
        self._lanes = intake.Lanes(self.options.limits)
        self._started = False
        self.log = structlog.get_logger("runtime.webhook")

    def __repr__(self) -> str:
        return f"webhook.Server({self.options.bind_address})"

    # -- registration ----------------------------------------------------------------------

    def _check_path(self, path: str) -> None:
        if self._started:
            raise RuntimeError("register webhooks before the server starts")
        if not path.startswith("/"):
            raise ValueError(f"a webhook path starts with '/': {path!r}")
        if path in self._admission or path == CONVERT_PATH:
            raise ValueError(f"a webhook is registered at {path} already")

    def register(self, path: str, handler: admission.Handler) -> None:
        """Serve the admission ``handler`` at ``path``."""
        self._check_path(path)
        self._admission[path] = handler

    def register_conversion(self, group: str, kind: str, converter: conversion.Converter) -> None:
        """Serve ``converter`` for ``kind.group`` at ``/convert``."""
        if self._started:
            raise RuntimeError("register webhooks before the server starts")
        self.converters.register(group, kind, converter)

    @property
    def paths(self) -> list[str]:
        return [*self._admission, *([CONVERT_PATH] if self.converters else [])]

    # -- running -----------------------------------------------------------------------------

    async def _certificates(self) -> tls.Reloader:
        opts = self.options
        cert_dir = pathlib.Path(opts.cert_dir)
        signed = opts.self_signed
        if signed is not None:
            await asyncio.to_thread(cert_dir.mkdir, parents=True, exist_ok=True)
            ca = await asyncio.to_thread(tls.new_ca, cert_dir, days=signed.days)
            await asyncio.to_thread(
                tls.issue, ca, cert_dir, dns_names=signed.dns_names,
                ip_addresses=signed.ip_addresses, days=signed.days,
                cert_name=opts.cert_name, key_name=opts.key_name,
            )  # fmt: skip
            self.ca_bundle = ca.bundle()
        return tls.Reloader(cert_dir / opts.cert_name, cert_dir / opts.key_name)

    async def _inject(self) -> None:
        signed = self.options.self_signed
        if signed is None or self.ca_bundle is None:
            return
        if not (signed.validating_configurations or signed.mutating_configurations or signed.crds):
            return
        if self.client is None:
            raise RuntimeError("injecting the CA needs a client (Server(client=...))")
        await cainject.inject(
            self.client, self.ca_bundle,
            validating=signed.validating_configurations,
            mutating=signed.mutating_configurations, crds=signed.crds,
        )  # fmt: skip
        self.log.info(
            "CA injected", validating=list(signed.validating_configurations),
            mutating=list(signed.mutating_configurations), crds=list(signed.crds),
        )  # fmt: skip

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=self.options.limits.max_body_bytes)
        for path, handler in self._admission.items():
            app.router.add_post(path, self._metered(path, self._admission_endpoint(handler)))
        if self.converters:
            convert = self._endpoint(
                conversion.API_VERSION, "ConversionReview", self._convert_review
            )
            app.router.add_post(CONVERT_PATH, self._metered(CONVERT_PATH, convert))
        return app

    async def start(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set (see the module docstring)."""
        self._started = True
        self.reloader = reloader = await self._certificates()
        # handler_cancellation: a caller that hangs up frees its slot at once (and a body left
        # unread after a refusal is not waited for the whole lingering time). read_bufsize:
        # what a connection waiting for a slot buffers (aiohttp's default is 4x more).
        runner = web.AppRunner(
            self._app(), access_log=None, handler_cancellation=True, read_bufsize=_READ_BUFSIZE
        )
        await runner.setup()
        watcher: asyncio.Task[None] | None = None
        try:
            host, port = _parse_address(self.options.bind_address)
            site = web.TCPSite(runner, host, port, ssl_context=reloader.context)
            await aio.listen(
                site, "the webhook server", "webhook.server.Options.bind_address", (host, port)
            )
            server = site._server
            assert server is not None
            bound = server.sockets[0].getsockname()  # type: ignore[attr-defined]
            self.address = (str(bound[0]), int(bound[1]))
            self.log.info("webhook server listening", address=self.address, paths=self.paths)
            watcher = asyncio.create_task(
                reloader.watch(stop, self.options.reload_interval), name="webhook-cert-watcher"
            )
            await self._inject()
            await stop.wait()
        finally:
            if watcher is not None:
                watcher.cancel()
                await asyncio.gather(watcher, return_exceptions=True)
            await runner.cleanup()
            self.address = None

    async def serving(self) -> bool:
        """True if a TLS handshake with the server succeeds now (the readiness check)."""
        if self.address is None:
            return False
        host, port = self.address
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=context), _CHECK_TIMEOUT
            )
        except (OSError, TimeoutError):
            return False
        writer.close()
        with contextlib.suppress(OSError, TimeoutError):
            await asyncio.wait_for(writer.wait_closed(), _CHECK_TIMEOUT)
        return True

    # -- requests ----------------------------------------------------------------------------

    def _metered(
        self, path: str, serve: Callable[[web.Request], Awaitable[web.Response]]
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        in_flight = IN_FLIGHT.gauge(path)
        latency = LATENCY.histogram(path)

        async def metered(request: web.Request) -> web.Response:
            began = time.perf_counter()
            in_flight.inc()
            status = 500
            try:
                response = await serve(request)
                status = response.status
                return response
            finally:
                in_flight.dec()
                latency.observe(time.perf_counter() - began)
                REQUESTS.counter(path, str(status)).inc()

        return metered

    async def _read(self, request: web.Request, length: int) -> bytearray:
        """The body of ``length`` bytes, refused as soon as its first byte is no ``{``."""
        limits = self.options.limits
        body = bytearray(length)  # zero pages: memory only as it is filled
        got = 0
        start: int | None = 0
        try:
            async with asyncio.timeout(limits.read_timeout):
                with memoryview(body) as view:
                    while got < length:
                        chunk = await request.content.readany()
                        if not chunk:
                            raise intake.Refused(400, "the body ended before its Content-Length")
                        view[got : got + len(chunk)] = chunk
                        got += len(chunk)
                        if start is not None:
                            start = intake.check_start(view[:got], start)
        except TimeoutError:
            raise intake.Refused(
                408, f"the body did not arrive within {limits.read_timeout:g} s"
            ) from None
        return body

    def _endpoint(
        self,
        api_version: str,
        kind: str,
        answer: Callable[[web.Request, Any], Awaitable[web.Response]],
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        """Serve ``answer(request, review)`` for the bodies :mod:`runtime.webhook.intake`
        lets in (the parsed JSON, not yet checked as a review); ``answer`` may raise
        :class:`~runtime.webhook.intake.Refused` too."""
        limits = self.options.limits

        async def serve(request: web.Request) -> web.Response:
            try:
                intake.check_headers(request.content_type, request.content_length, limits)
                length = request.content_length or 0
                async with self._lanes.slot(length):
                    body = await self._read(request, length)
                    review = intake.parse(body, api_version, kind, limits)
                    del body
                    return await answer(request, review)
            except intake.Refused as exc:
                self.log.warning(
                    "request refused", path=request.path, status=exc.status, error=exc.message
                )
                headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
                return web.Response(status=exc.status, text=exc.message, headers=headers)

        return serve

    def _admission_endpoint(
        self, handler: admission.Handler
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def answer(request: web.Request, body: Any) -> web.Response:
            try:
                review = admission.Request.from_review(body)
            except ValueError as exc:
                raise intake.Refused(400, str(exc)) from None
            try:
                verdict = await handler.handle(review)
            except Exception as exc:
                self.log.exception("admission handler failed", path=request.path)
                verdict = admission.Response.deny(
                    f"internal error: {type(exc).__name__}: {exc}", code=500,
                    reason="InternalError",
                )  # fmt: skip
            self.log.debug(
                "admission", path=request.path, uid=review.uid, operation=review.operation,
                namespace=review.namespace, name=review.name, allowed=verdict.allowed,
                patched=len(verdict.patch),
            )  # fmt: skip
            return web.json_response(verdict.review(review.uid))

        return self._endpoint(admission.API_VERSION, "AdmissionReview", answer)

    async def _convert_review(self, request: web.Request, body: Any) -> web.Response:
        try:
            review = conversion.Request.from_review(body)
        except ValueError as exc:
            raise intake.Refused(400, str(exc)) from None
        answer = self.converters.review(review)
        result = answer["response"]["result"]
        if result["status"] != "Success":
            self.log.warning("conversion failed", message=result.get("message"))
        return web.json_response(answer)


def register_for(
    server: Server,
    resource: resources.Resource,
    *,
    validator: admission.Validator | None = None,
    defaulter: admission.Defaulter | None = None,
    converter: conversion.Converter | None = None,
) -> list[str]:
    """Register ``resource``'s webhooks at controller-runtime's paths; the paths."""
    paths = []
    if validator is not None:
        server.register(validate_path(resource), admission.validating(validator))
        paths.append(validate_path(resource))
    if defaulter is not None:
        server.register(mutate_path(resource), admission.defaulting(defaulter))
        paths.append(mutate_path(resource))
    if converter is not None:
        server.register_conversion(resource.group, resource.kind, converter)
        paths.append(CONVERT_PATH)
    return paths
