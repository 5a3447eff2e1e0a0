"""``runtime/webhook/server.py``: the webhook server in-process over real TLS on
loopback: reviews answered per path, bad bodies refused with 400, metrics with
controller-runtime's names, a rotated certificate picked up by new connections,
readiness in the manager's ``/readyz`` (started before the caches), registration
through the builder. Bodies over the cap or without a length refused, junk refused before
it is parsed (what the server allocates measured), large bodies a few at a time (429
past the wait) while small ones keep being answered. (CA injection is
``test_cainject.py``'s; the checks themselves, ``test_intake.py``'s.)"""

from __future__ import annotations

import asyncio
import io
import json
import pathlib
import socket
import ssl
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from runtime import builder, manager, metrics, tls
from runtime.client import resources
from runtime.testing import fake
from runtime.webhook import admission, server
from tests.unit.runtime.webhook import widgets

WIDGETS = resources.Resource("test.dev", "v1", "Widget", "widgets")


def ca_context(ca: pathlib.Path) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    return context


def peer_serial(port: int, ca: pathlib.Path) -> int:
    import socket

    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        ca_context(ca).wrap_socket(raw, server_hostname="127.0.0.1") as conn,
    ):
        cert = conn.getpeercert()
        assert cert is not None
        return int(str(cert["serialNumber"]), 16)


def sample(name: str, *labels: str) -> float | None:
    names = dict(zip(("webhook", "code"), labels, strict=False))
    return metrics.registry.get_sample_value(name, names)


@pytest.fixture
async def running(tmp_path: pathlib.Path) -> AsyncIterator[server.Server]:
    srv = server.Server(
        server.Options(
            bind_address="127.0.0.1:0", cert_dir=tmp_path, reload_interval=0.1,
            self_signed=server.SelfSigned(ip_addresses=["127.0.0.1"]),
        )
    )  # fmt: skip
    server.register_for(srv, WIDGETS, validator=widgets.Recording(),
                        defaulter=widgets.SizeDefaulter(), converter=widgets.Widgets())  # fmt: skip
    stop = asyncio.Event()
    task = asyncio.create_task(srv.start(stop))
    for _ in range(100):
        if srv.address is not None or task.done():
            break
        await asyncio.sleep(0.05)
    assert srv.address is not None, task
    yield srv
    stop.set()
    await asyncio.wait_for(task, 5)
    assert srv.address is None


async def post(srv: server.Server, path: str, body: Any, **kwargs: Any) -> tuple[int, Any]:
    assert srv.address is not None
    url = f"https://127.0.0.1:{srv.address[1]}{path}"
    context = ca_context(pathlib.Path(srv.options.cert_dir) / "ca.crt")
    async with aiohttp.ClientSession() as session:
        request = session.post(url, json=body, ssl=context, **kwargs) if body is not None else (
            session.post(url, ssl=context, **kwargs))  # fmt: skip
        async with request as response:
            if response.content_type == "application/json":
                return response.status, await response.json()
            return response.status, await response.text()


async def test_admission_and_conversion_over_tls(running: server.Server) -> None:
    validate = server.validate_path(WIDGETS)
    assert validate == "/validate-test-dev-v1-widget"
    assert server.mutate_path(WIDGETS) == "/mutate-test-dev-v1-widget"
    before = sample("controller_runtime_webhook_requests_total", validate, "200") or 0.0

    status, body = await post(running, validate, widgets.review(object={"spec": {"size": -2}}))
    assert status == 200
    assert body["response"]["uid"] == "u-1"
    assert body["response"]["allowed"] is False
    assert body["response"]["status"]["message"] == "spec.size must be >= 0, got -2"

    status, body = await post(running, "/mutate-test-dev-v1-widget",
                              widgets.review(object={"metadata": {}, "spec": {}}))  # fmt: skip
    assert status == 200
    assert body["response"]["patchType"] == "JSONPatch"

    status, body = await post(running, "/convert", widgets.conversion_review(
        "test.dev/v2", widgets.widget("v1", {"size": 5})))  # fmt: skip
    assert body["response"]["convertedObjects"][0]["spec"] == {"dimensions": {"size": "5"}}

    assert sample("controller_runtime_webhook_requests_total", validate, "200") == before + 1
    assert (sample("controller_runtime_webhook_latency_seconds_count", validate) or 0) >= 1
    assert sample("controller_runtime_webhook_requests_in_flight", validate) == 0


async def test_bodies_that_are_no_review_get_400(running: server.Server) -> None:
    validate = server.validate_path(WIDGETS)
    before = sample("controller_runtime_webhook_requests_total", validate, "400") or 0.0
    status, text = await post(running, validate, None, data=b"{}",
                              headers={"Content-Type": "text/plain"})  # fmt: skip
    assert (status, text) == (400, "Content-Type must be application/json, got text/plain")
    status, text = await post(running, validate, None, data=b"{",
                              headers={"Content-Type": "application/json"})  # fmt: skip
    assert (status, text) == (400, "the body is no admission.k8s.io/v1 AdmissionReview")
    cut = b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {'
    status, text = await post(running, validate, None, data=cut,
                              headers={"Content-Type": "application/json"})  # fmt: skip
    assert status == 400
    assert text.startswith("the body is not JSON")
    status, text = await post(running, validate, {"kind": "AdmissionReview"})
    assert status == 400
    status, text = await post(running, "/convert", {"kind": "ConversionReview"})
    assert status == 400
    assert sample("controller_runtime_webhook_requests_total", validate, "400") == before + 4
    status, _ = await post(running, "/nothing-here", widgets.review())
    assert status == 404


async def test_a_rotated_certificate_serves_new_connections(running: server.Server) -> None:
    cert_dir = pathlib.Path(running.options.cert_dir)
    assert running.address is not None
    port = running.address[1]
    first = await asyncio.to_thread(peer_serial, port, cert_dir / "ca.crt")
    # Half a rotation (a key that does not match) is refused: the old pair keeps serving.
    (cert_dir / "tls.key").write_bytes(b"not a key")
    await asyncio.sleep(0.4)
    assert await asyncio.to_thread(peer_serial, port, cert_dir / "ca.crt") == first
    ca = tls.CA(cert_dir / "ca.crt", cert_dir / "ca.key")
    await asyncio.to_thread(tls.issue, ca, cert_dir, ip_addresses=["127.0.0.1"])
    for _ in range(50):
        await asyncio.sleep(0.1)
        if await asyncio.to_thread(peer_serial, port, cert_dir / "ca.crt") != first:
            break
    else:
        pytest.fail("the rotated certificate was never served")
    assert running.reloader is not None
    assert running.reloader.reloads == 1
    assert await running.serving()


async def test_registration_is_checked() -> None:
    srv = server.Server(server.Options(bind_address="127.0.0.1:0"))
    srv.register("/validate-x", widgets.Recording())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="registered at /validate-x already"):
        srv.register("/validate-x", widgets.Recording())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="starts with '/'"):
        srv.register("validate-y", widgets.Recording())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="already"):
        srv.register("/convert", widgets.Recording())  # type: ignore[arg-type]


async def test_missing_certificates_fail_the_start(tmp_path: pathlib.Path) -> None:
    srv = server.Server(server.Options(bind_address="127.0.0.1:0", cert_dir=tmp_path))
    with pytest.raises(tls.TLSError, match=r"tls\.crt"):
        await srv.start(asyncio.Event())
    assert not await srv.serving()


async def test_a_busy_port_names_the_webhook_server_and_its_option(tmp_path: pathlib.Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        srv = server.Server(
            server.Options(
                bind_address=f"127.0.0.1:{port}", cert_dir=tmp_path,
                self_signed=server.SelfSigned(ip_addresses=["127.0.0.1"]),
            )
        )  # fmt: skip
        with pytest.raises(manager.BindError) as caught:
            await srv.start(asyncio.Event())
    assert str(caught.value) == (
        f"the webhook server cannot listen on 127.0.0.1:{port} "
        "(webhook.server.Options.bind_address): address already in use"
    )
    assert not await srv.serving()


async def test_the_manager_serves_webhooks_before_its_caches_and_reports_readiness(
    tmp_path: pathlib.Path,
) -> None:
    options = manager.Options(
        name="t", metrics_bind_address="0", health_probe_bind_address="127.0.0.1:0",
        webhook=server.Options(bind_address="127.0.0.1:0", cert_dir=tmp_path,
                               self_signed=server.SelfSigned(ip_addresses=["127.0.0.1"])),
    )  # fmt: skip
    client = fake.FakeClient()
    client.registry.register(WIDGETS)
    mgr = manager.Manager(client, options)  # type: ignore[arg-type]

    async def reconcile(request: Any) -> Any:
        raise AssertionError("nothing to reconcile")

    builder.Builder(mgr).for_(WIDGETS).with_validator(widgets.Recording()).complete(reconcile)
    gadgets = resources.Resource("test.dev", "v1", "Gadget", "gadgets")
    client.registry.register(gadgets)
    builder.Builder(mgr).for_(gadgets).with_defaulter(widgets.SizeDefaulter()).with_converter(
        widgets.Widgets()
    ).complete(reconcile)
    srv = mgr.webhook_server
    assert srv is mgr.webhook_server  # one server
    assert srv.paths == [
        "/validate-test-dev-v1-widget", "/mutate-test-dev-v1-gadget", "/convert"
    ]  # fmt: skip

    # The caches never sync (the fake client's list of widgets is held): the webhook
    # server is serving anyway, and /readyz reports both.
    gate = asyncio.Event()
    original = client.list

    async def held_list(*args: Any, **kwargs: Any) -> Any:
        await gate.wait()
        return await original(*args, **kwargs)

    client.list = held_list  # type: ignore[method-assign]
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        for _ in range(100):
            if srv.address is not None and mgr.probe_address is not None:
                break
            await asyncio.sleep(0.05)
        assert srv.address is not None
        assert await srv.serving()
        url = f"http://127.0.0.1:{mgr.probe_address[1]}/readyz?verbose"  # type: ignore[index]
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            text = await response.text()
        assert response.status == 503
        assert "[+]webhook ok" in text
        assert "[-]caches failed" in text
    finally:
        gate.set()
        stop.set()
        await asyncio.wait_for(task, 10)
    assert srv.address is None


async def test_registration_after_start_and_injection_without_a_client_fail(
    tmp_path: pathlib.Path,
) -> None:
    srv = server.Server(server.Options(
        bind_address="127.0.0.1:0", cert_dir=tmp_path,
        self_signed=server.SelfSigned(ip_addresses=["127.0.0.1"], validating_configurations=["v"]),
    ))  # fmt: skip
    with pytest.raises(RuntimeError, match="needs a client"):
        await srv.start(asyncio.Event())
    with pytest.raises(RuntimeError, match="before the server starts"):
        srv.register("/late", widgets.Recording())  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="before the server starts"):
        srv.register_conversion("test.dev", "Widget", widgets.Widgets())
    assert srv.address is None  # the listener was closed on the way out


async def test_a_handler_that_raises_is_answered_500_and_a_failed_conversion_is_a_failure(
    tmp_path: pathlib.Path,
) -> None:
    class Broken:
        async def handle(self, request: Any) -> Any:
            raise RuntimeError("broken handler")

    srv = server.Server(server.Options(
        bind_address="127.0.0.1:0", cert_dir=tmp_path,
        self_signed=server.SelfSigned(ip_addresses=["127.0.0.1"]),
    ))  # fmt: skip
    srv.register("/broken", Broken())
    srv.register_conversion("test.dev", "Widget", widgets.Widgets())
    stop = asyncio.Event()
    task = asyncio.create_task(srv.start(stop))
    try:
        for _ in range(100):
            if srv.address is not None:
                break
            await asyncio.sleep(0.05)
        status, body = await post(srv, "/broken", widgets.review())
        assert status == 200
        assert body["response"]["allowed"] is False
        assert body["response"]["status"]["code"] == 500
        assert (
            body["response"]["status"]["message"] == "internal error: RuntimeError: broken handler"
        )
        status, body = await post(srv, "/convert", widgets.conversion_review(
            "test.dev/v9", widgets.widget("v1", {"size": 1})))  # fmt: skip
        assert body["response"]["result"]["status"] == "Failure"
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


async def test_a_webhook_server_that_cannot_listen_fails_the_manager_while_caches_sync(
    tmp_path: pathlib.Path,
) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        options = manager.Options(
            name="t", metrics_bind_address="0", health_probe_bind_address="0",
            cache_sync_timeout=30,
            webhook=server.Options(bind_address=f"127.0.0.1:{port}", cert_dir=tmp_path,
                                   self_signed=server.SelfSigned(ip_addresses=["127.0.0.1"])),
        )  # fmt: skip
        client = fake.FakeClient()
        client.registry.register(WIDGETS)
        mgr = manager.Manager(client, options)  # type: ignore[arg-type]
        server.register_for(mgr.webhook_server, WIDGETS, validator=widgets.Recording())
        mgr.cache.informer(WIDGETS)
        gate = asyncio.Event()  # the caches never sync: only the failure can end the start
        original = client.list

        async def held_list(*args: Any, **kwargs: Any) -> Any:
            await gate.wait()
            return await original(*args, **kwargs)

        client.list = held_list  # type: ignore[method-assign]
        began = asyncio.get_running_loop().time()
        with pytest.raises(RuntimeError, match="failed") as failed:
            await asyncio.wait_for(mgr.start(asyncio.Event()), 10)
        assert isinstance(failed.value.__cause__, OSError)
        assert asyncio.get_running_loop().time() - began < 5
        gate.set()


# -- what the server reads: the body's size, shape and how many at once ----------------------

MiB = 1024 * 1024


def padded_review(size: int) -> bytes:
    """A valid Widget AdmissionReview of ``size`` bytes (a long annotation pads it)."""
    review = widgets.review(object={"metadata": {"name": "w", "annotations": {"pad": ""}},
                                    "spec": {"size": 1}})  # fmt: skip
    empty = len(json.dumps(review).encode())
    review["request"]["object"]["metadata"]["annotations"]["pad"] = "x" * (size - empty)
    body = json.dumps(review).encode()
    assert len(body) == size
    return body


async def post_raw(
    srv: server.Server, path: str, data: Any, headers: dict[str, str] | None = None
) -> tuple[int, str, dict[str, str]]:
    assert srv.address is not None
    url = f"https://127.0.0.1:{srv.address[1]}{path}"
    context = ca_context(pathlib.Path(srv.options.cert_dir) / "ca.crt")
    if isinstance(data, bytes):
        data = io.BytesIO(data)  # aiohttp's advice for large bodies; still a Content-Length
    async with aiohttp.ClientSession() as session:
        try:
            async with session.post(url, data=data, ssl=context, headers={
                "Content-Type": "application/json", **(headers or {})}) as response:  # fmt: skip
                return response.status, await response.text(), dict(response.headers)
        except aiohttp.ClientOSError as exc:  # closed while the body was being sent
            return 0, str(exc), {}


async def test_a_body_over_the_cap_or_without_a_length_is_refused(
    running: server.Server,
) -> None:
    validate = server.validate_path(WIDGETS)
    cap = running.options.limits.max_body_bytes
    assert cap == 4 * MiB  # see the module docstring for why
    status, _, _ = await post_raw(running, validate, padded_review(cap))
    assert status == 200
    status, text, _ = await post_raw(running, validate, padded_review(cap + 1))
    assert (status, text) == (413, f"the body has {cap + 1} bytes, at most {cap}")

    async def chunks() -> AsyncIterator[bytes]:
        yield json.dumps(widgets.review()).encode()

    status, text, _ = await post_raw(running, validate, chunks())
    assert (status, text) == (411, "a webhook request needs a Content-Length")


async def test_bodies_that_are_no_review_are_refused_before_they_are_parsed(
    running: server.Server,
) -> None:
    validate = server.validate_path(WIDGETS)
    nested = (
        json.dumps(widgets.review())
        .encode()
        .replace(b'"spec": {"size": 1}', b'"spec": {"size": 1, "x": [' + b"{}," * 300_000 + b"{}]}")
    )  # a valid review, but 300,001 objects: more than any real one
    junk = {
        b"[" + b"{}," * 700_000 + b"{}]": (400, "the body is not a JSON object"),
        b'{"a": [' + b"{}," * 700_000 + b"{}]}": (400, "the body is no admission.k8s.io/v1 "
                                                       "AdmissionReview"),
        nested: (413, f"the body has {nested.count(b'{') + nested.count(b'[')} '{{' and '[' "
                      "(JSON objects and arrays), at most 200000"),
    }  # fmt: skip
    for body, (code, message) in junk.items():
        tracemalloc.start()
        try:
            status, text, _ = await post_raw(running, validate, body)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert (status, text) == (code, message)
        # Parsed, any of them would take ~25 bytes per byte (25 to 50 MiB). Refused, the
        # server holds the body once at most (a body that is no object is refused as it
        # starts); the rest is the client's buffers, in this same process.
        assert peak < 2 * len(body) + 4 * MiB, (len(body), peak)
    status, text, _ = await post_raw(running, "/convert", json.dumps(widgets.review()).encode())
    assert (status, text) == (400, "the body is no apiextensions.k8s.io/v1 ConversionReview")


class Gate:
    """A validator that holds each review until :attr:`open` is set."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.holding = 0

    async def validate_create(self, obj: Any, request: Any) -> list[str]:
        self.holding += 1
        await self.open.wait()
        return []

    async def validate_update(self, old: Any, obj: Any, request: Any) -> list[str]:
        raise AssertionError("only creates here")

    async def validate_delete(self, old: Any, request: Any) -> list[str]:
        raise AssertionError("only creates here")


async def test_large_bodies_are_read_a_few_at_a_time_and_small_ones_keep_being_answered(
    tmp_path: pathlib.Path,
) -> None:
    srv = server.Server(server.Options(
        bind_address="127.0.0.1:0", cert_dir=tmp_path,
        self_signed=server.SelfSigned(ip_addresses=["127.0.0.1"]),
    ))  # fmt: skip
    limits = srv.options.limits
    assert (limits.large_slots, limits.wait, limits.retry_after) == (2, 2.0, 1)
    gate = Gate()
    srv.register("/gate", admission.validating(gate))
    stop = asyncio.Event()
    task = asyncio.create_task(srv.start(stop))
    try:
        for _ in range(100):
            if srv.address is not None:
                break
            await asyncio.sleep(0.05)
        large = padded_review(limits.small_body_bytes + 1)
        held = [asyncio.create_task(post_raw(srv, "/gate", large)) for _ in range(2)]
        for _ in range(100):
            if gate.holding == 2:
                break
            await asyncio.sleep(0.02)
        assert gate.holding == 2
        began = asyncio.get_running_loop().time()
        third = post_raw(srv, "/gate", large)  # no slot is free
        status, text, headers = await asyncio.wait_for(third, limits.wait + 5)
        waited = asyncio.get_running_loop().time() - began
        assert (status, text) == (429, "too many webhook requests at once; retry")
        assert headers["Retry-After"] == "1"
        assert limits.wait <= waited < limits.wait + 1.5
        assert gate.holding == 2  # the third body was never handled
        small = asyncio.create_task(post_raw(srv, "/gate", json.dumps(widgets.review()).encode()))
        for _ in range(100):
            if gate.holding == 3:
                break
            await asyncio.sleep(0.02)
        assert gate.holding == 3  # a small review is handled while the large slots are held
        gate.open.set()
        answers = await asyncio.wait_for(asyncio.gather(*held, small), 10)
        assert [status for status, _, _ in answers] == [200, 200, 200]
    finally:
        gate.open.set()
        stop.set()
        await asyncio.wait_for(task, 5)
