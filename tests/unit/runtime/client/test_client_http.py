"""The client against a tiny local HTTP server (loopback only): retries, errors, content types."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s

import runtime
from runtime import metrics as runtime_metrics
from runtime.client import client as client_
from runtime.client import errors, resources
from tests.unit import helpers

CM = resources.default_registry.for_kind("v1", "ConfigMap")
Handler = Callable[[web.Request], Any]


class Server:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str, bytes]] = []
        self.responses: list[web.StreamResponse] = []
        self.watch_lines: list[bytes] = []
        self.times: list[float] = []
        """``time.monotonic()`` at each request's arrival."""
        self.user_agents: list[str] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.times.append(time.monotonic())
        self.user_agents.append(request.headers.get("User-Agent", ""))
        body = await request.read()
        self.requests.append(
            (request.method, request.path_qs, request.headers.get("Content-Type", ""), body)
        )
        if request.query.get("watch") == "true":
            response = web.StreamResponse()
            await response.prepare(request)
            for line in self.watch_lines:
                await response.write(line)
            return response
        return self.responses.pop(0)


def status(code: int, reason: str, message: str = "", **headers: str) -> web.Response:
    body = {"kind": "Status", "code": code, "reason": reason, "message": message}
    return web.json_response(body, status=code, headers=headers)


@pytest.fixture
async def server() -> AsyncIterator[tuple[Server, client_.Client]]:
    srv = Server()
    async with helpers.api_server(srv.handle) as client:
        yield srv, client


async def test_get_decodes_json(server: tuple[Server, client_.Client]) -> None:
    srv, client = server
    srv.responses.append(web.json_response({"metadata": {"name": "x"}}))
    assert await client.get(CM, "ns", "x") == {"metadata": {"name": "x"}}
    assert srv.requests[0][:2] == ("GET", "/api/v1/namespaces/ns/configmaps/x")


async def test_429_is_retried_honouring_retry_after(server: tuple[Server, client_.Client]) -> None:
    srv, fixture_client = server
    # Retry-After: 1 against an own backoff of at most 0.2 s for a first retry: a retry
    # sooner than 1 s means the header was ignored; the cap (5 s) is far from binding.
    options = client_.Options(timeout=5, retry_max_wait=5)
    async with client_.Client(fixture_client.configuration, options=options) as client:
        srv.responses += [status(429, "TooManyRequests", **{"Retry-After": "1"}),
                          web.json_response({"ok": True})]  # fmt: skip
        assert await client.get(CM, "ns", "x") == {"ok": True}
    assert len(srv.requests) == 2
    waited = srv.times[1] - srv.times[0]
    assert 0.95 <= waited < 3, f"retried after {waited:.2f} s, not after Retry-After's 1 s"


async def test_retry_after_is_capped_by_retry_max_wait(
    server: tuple[Server, client_.Client],
) -> None:
    srv, client = server  # retry_max_wait=0.01
    srv.responses += [status(429, "TooManyRequests", **{"Retry-After": "30"}),
                      web.json_response({"ok": True})]  # fmt: skip
    assert await client.get(CM, "ns", "x") == {"ok": True}
    assert srv.times[1] - srv.times[0] < 2, "a server's Retry-After never outwaits our cap"


async def test_5xx_retried_on_get_but_not_on_post(server: tuple[Server, client_.Client]) -> None:
    srv, client = server
    srv.responses += [status(503, "ServiceUnavailable"), web.json_response({"ok": 1})]
    assert await client.get(CM, "ns", "x") == {"ok": 1}
    srv.responses += [status(503, "ServiceUnavailable")]
    with pytest.raises(errors.ServerError):
        await client.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "y"}},
                            namespace="ns")  # fmt: skip
    assert [r[0] for r in srv.requests] == ["GET", "GET", "POST"]


@pytest.mark.parametrize("max_attempts", [1, 2, 3])
async def test_retryable_failures_make_exactly_max_attempts_requests(
    server: tuple[Server, client_.Client], max_attempts: int
) -> None:
    # The first attempt runs outside the retry loop and is replayed into it on a
    # retryable failure: that must neither add nor lose an attempt.
    srv, fixture_client = server
    options = client_.Options(timeout=2, retry_max_wait=0.01, max_attempts=max_attempts)
    async with client_.Client(fixture_client.configuration, options=options) as client:
        srv.responses += [status(503, "ServiceUnavailable", f"down {i}")
                          for i in range(max_attempts)]  # fmt: skip
        with pytest.raises(errors.ServerError, match=f"down {max_attempts - 1}"):
            await client.get(CM, "ns", "x")
        assert len(srv.requests) == max_attempts
        srv.responses += [status(503, "ServiceUnavailable"), web.json_response({"ok": 1})]
        expected: Any = {"ok": 1} if max_attempts > 1 else None
        if expected is None:
            with pytest.raises(errors.ServerError):
                await client.get(CM, "ns", "x")
        else:
            assert await client.get(CM, "ns", "x") == expected
    assert len(srv.requests) == max_attempts + min(max_attempts, 2)


async def test_conflict_and_invalid_are_never_retried(
    server: tuple[Server, client_.Client],
) -> None:
    srv, client = server
    srv.responses += [status(409, "Conflict", "the object has been modified")]
    obj = {"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "x", "namespace": "ns", "resourceVersion": "1"}}  # fmt: skip
    with pytest.raises(errors.Conflict, match="has been modified"):
        await client.update(obj)
    srv.responses += [status(422, "Invalid", "spec.x: Invalid value")]
    with pytest.raises(errors.Invalid):
        await client.update_status(obj)
    assert len(srv.requests) == 2
    assert srv.requests[1][1].startswith("/api/v1/namespaces/ns/configmaps/x/status")


async def test_patches_say_their_content_type(server: tuple[Server, client_.Client]) -> None:
    srv, client = server
    for patch_type, expected in [
        ("merge", "application/merge-patch+json"),
        ("json", "application/json-patch+json"),
        ("apply", "application/apply-patch+yaml"),
    ]:
        srv.responses.append(web.json_response({"metadata": {"name": "x"}}))
        await client.patch(CM, "ns", "x", {"data": {"a": "b"}}, patch_type=patch_type)  # type: ignore[arg-type]
        assert srv.requests[-1][2] == expected
    assert "force=true" not in srv.requests[-1][1]
    assert "fieldManager=k8s-controller-runtime" in srv.requests[-1][1], "nobody named it"


async def test_a_name_given_later_is_the_next_requests_identity(
    server: tuple[Server, client_.Client],
) -> None:
    srv, client = server
    for _ in range(3):
        srv.responses.append(web.json_response({"metadata": {"name": "x"}}))
    await client.patch(CM, "ns", "x", {"data": {}}, patch_type="apply")
    client.default_name("mirror")  # what a Manager named "mirror" does to its client
    await client.patch(CM, "ns", "x", {"data": {}}, patch_type="apply")
    client.default_name("another")  # named already: the first name stays
    await client.get(CM, "ns", "x")
    version = runtime.__version__
    assert srv.user_agents == [
        f"k8s-controller-runtime/{version}",
        f"mirror k8s-controller-runtime/{version}",
        f"mirror k8s-controller-runtime/{version}",
    ], "the session was made by the first request; the header follows the name"
    assert [r[1].rpartition("fieldManager=")[2] for r in srv.requests[:2]] == [
        "k8s-controller-runtime", "mirror",
    ]  # fmt: skip


async def test_set_identity_fields_win_over_the_name(
    server: tuple[Server, client_.Client],
) -> None:
    srv, fixture_client = server
    options = client_.Options(name="op", field_manager="op-writer", user_agent="op/1.2")
    async with client_.Client(fixture_client.configuration, options=options) as client:
        client.default_name("manager-name")
        srv.responses.append(web.json_response({"metadata": {"name": "x"}}))
        await client.patch(CM, "ns", "x", {"data": {}})
    assert srv.user_agents == ["op/1.2"]
    assert srv.requests[0][1].endswith("fieldManager=op-writer")


async def test_write_observers_see_written_objects(server: tuple[Server, client_.Client]) -> None:
    srv, client = server
    seen: list[dict[str, Any]] = []
    client.add_write_observer(seen.append)
    srv.responses.append(web.json_response({"metadata": {"name": "x", "resourceVersion": "7"}}))
    await client.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
                        namespace="ns")  # fmt: skip
    assert seen == [{"metadata": {"name": "x", "resourceVersion": "7"}}]


async def test_list_follows_continue_tokens(server: tuple[Server, client_.Client]) -> None:
    srv, client = server
    srv.responses += [
        web.json_response({"metadata": {"continue": "t1", "resourceVersion": "10"},
                           "items": [{"n": 1}]}),
        web.json_response({"metadata": {"resourceVersion": "10"}, "items": [{"n": 2}]}),
    ]  # fmt: skip
    result = await client.list(CM, "ns", resource_version="0", page_size=1)
    named = {"apiVersion": "v1", "kind": "ConfigMap"}  # the server leaves them out
    assert result.items == [{"n": 1, **named}, {"n": 2, **named}]
    assert result.resource_version == "10"
    assert "resourceVersion=0" in srv.requests[0][1]
    assert "continue=t1" in srv.requests[1][1]
    assert "resourceVersion" not in srv.requests[1][1]


async def test_watch_streams_events_and_raises_gone(server: tuple[Server, client_.Client]) -> None:
    srv, client = server
    srv.watch_lines = [
        json.dumps({"type": "ADDED", "object": {"metadata": {"name": "a"}}}).encode() + b"\n",
        json.dumps({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}).encode()
        + b"\n",
        json.dumps({"type": "ERROR", "object": {"code": 410, "reason": "Expired"}}).encode()
        + b"\n",
    ]
    seen = []

    async def consume() -> None:
        async for event in client.watch(CM, "ns", resource_version="5", timeout_seconds=60):
            seen.append(event["type"])

    with pytest.raises(errors.Gone):
        await consume()
    assert seen == ["ADDED", "BOOKMARK"]
    query = srv.requests[0][1]
    assert "allowWatchBookmarks=true" in query
    assert "timeoutSeconds=60" in query


async def test_silent_watch_hits_the_inactivity_timeout() -> None:
    async def silent(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        await asyncio.sleep(1)
        return response

    runner, port = await _answering(silent)
    client = client_.Client(
        k8s.Configuration(host=f"http://127.0.0.1:{port}"),
        options=client_.Options(watch_inactivity_timeout=0.2),
    )
    try:
        with pytest.raises(asyncio.TimeoutError):
            async for _ in client.watch(CM, "ns"):
                pass
    finally:
        await client.close()
        await runner.cleanup()


async def test_client_side_rate_limit_when_turned_on() -> None:
    runner, port = await _answering(_ok)
    limited = client_.Client(
        k8s.Configuration(host=f"http://127.0.0.1:{port}"),
        options=client_.Options(qps=20, burst=2),
    )
    waits = client_._limiter_wait.histogram("GET", f"127.0.0.1:{port}")
    try:
        t0 = asyncio.get_running_loop().time()
        for _ in range(6):
            await limited.get(CM, "ns", "x")
        assert asyncio.get_running_loop().time() - t0 >= 0.19  # 4 requests beyond the burst
        # Each request's wait is observed: 2 from the burst at once, 4 waited ~50 ms each.
        assert waits.count == 6
        assert 0.1 <= waits.sum <= 0.6  # less each request's own time (a loaded machine)
        assert waits.counts[0] >= 2  # the burst: under the first bucket (5 ms)
    finally:
        await limited.close()
        await runner.cleanup()


@pytest.mark.parametrize(
    ("scope", "waited"), [("resource", False), ("client", True)]
)  # fmt: skip
async def test_each_api_resource_has_its_own_bucket_unless_scoped_to_the_client(
    scope: str, waited: bool
) -> None:
    """controller-runtime's client limits each kind apart (a REST client per kind): a burst
    spent on ConfigMaps leaves Secrets theirs; a subresource spends its resource's."""
    runner, port = await _answering(_ok)
    limited = client_.Client(
        k8s.Configuration(host=f"http://127.0.0.1:{port}"),
        options=client_.Options(qps=2, burst=1, rate_limit_scope=scope),  # type: ignore[arg-type]
    )
    secrets = resources.default_registry.for_kind("v1", "Secret")
    loop = asyncio.get_running_loop()
    try:
        await limited.get(CM, "ns", "x")  # the ConfigMaps' one token
        t0 = loop.time()
        await limited.get(secrets, "ns", "x")
        assert (loop.time() - t0 >= 0.3) is waited  # a token per 0.5 s
        t0 = loop.time()
        await limited.request("GET", CM.path("ns", "y") + "/status")
        assert loop.time() - t0 >= 0.3, "a subresource waits for its resource's bucket"
    finally:
        await limited.close()
        await runner.cleanup()


def test_the_rate_limiter_histogram_is_client_gos() -> None:
    """Name, type, labels and buckets as client-go's, so dashboards built for it work."""
    (family,) = [
        m for m in runtime_metrics.registry.collect()
        if m.name == "rest_client_rate_limiter_duration_seconds"
    ]  # fmt: skip
    assert family.type == "histogram"
    assert client_._limiter_wait.labelnames == ("verb", "host")
    assert client_._limiter_wait.buckets == (
        0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0
    )  # fmt: skip


async def _answering(handler: Any) -> tuple[web.AppRunner, int]:
    """A local server answering every GET with ``handler``, and its port."""
    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


async def _ok(request: web.Request) -> web.Response:
    return web.json_response({})


async def test_watch_reads_events_of_any_size_split_anywhere(
    server: tuple[Server, client_.Client],
) -> None:
    """A watch event is one JSON line of any length (etcd allows objects of ~1.5 MiB; aiohttp's
    own line reader gives up at a fraction of that), however the stream is chunked."""
    srv, client = server
    big = "x" * (1536 * 1024)
    lines = [
        json.dumps({"type": "ADDED", "object": {"metadata": {"name": "a"}}}).encode() + b"\n",
        json.dumps(
            {"type": "ADDED", "object": {"metadata": {"name": "big"}, "data": {"k": big}}}
        ).encode()
        + b"\n",
        b"\n",
        json.dumps({"type": "MODIFIED", "object": {"metadata": {"name": "b"}}}).encode() + b"\n",
        json.dumps({"type": "DELETED", "object": {"metadata": {"name": "c"}}}).encode(),
    ]
    data = b"".join(lines)
    cuts = [0, 7, 30, len(lines[0]) + 5, len(data) - 40, len(data) - 10, len(data)]
    srv.watch_lines = [data[a:b] for a, b in itertools.pairwise(cuts)]
    seen = [
        (event["type"], event["object"]["metadata"]["name"])
        async for event in client.watch(CM, "ns", timeout_seconds=60)
    ]
    assert seen == [("ADDED", "a"), ("ADDED", "big"), ("MODIFIED", "b"), ("DELETED", "c")]


async def test_large_bodies_are_sent_without_warnings(
    server: tuple[Server, client_.Client],
) -> None:
    """An object near etcd's ~1.5 MiB limit is written like any other (aiohttp warns about
    raw bodies over 1 MiB, and warnings are errors in these tests)."""
    srv, client = server
    srv.responses.append(web.json_response({"metadata": {"name": "big"}}))
    big = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"},
           "data": {"k": "x" * (1536 * 1024)}}  # fmt: skip
    await client.create(big, namespace="ns")
    assert json.loads(srv.requests[0][3]) == big


async def test_writes_to_one_object_take_turns_and_other_objects_do_not_wait() -> None:
    """Overlapping writes to the same object are sent one after the other (the second
    after the first's answer); another object's write is not held up; a task inside
    its own turn writes on."""
    arrived: list[str] = []
    release: dict[str, asyncio.Event] = {}

    async def handle(request: web.Request) -> web.StreamResponse:
        name = request.path.rsplit("/", 1)[-1] if "/status" not in request.path else "a/status"
        arrived.append(f"{request.method} {name}")
        gate = release.setdefault(f"{request.method} {name}", asyncio.Event())
        await gate.wait()
        return web.json_response({"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": "a", "namespace": "ns"}})  # fmt: skip

    def cm(name: str) -> dict[str, Any]:
        meta = {"name": name, "namespace": "ns", "resourceVersion": "1"}
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}

    async with helpers.api_server(handle) as client:
        put = asyncio.create_task(client.update(cm("a")))
        await helpers.eventually(lambda: arrived == ["PUT a"])
        patch = asyncio.create_task(client.patch(CM, "ns", "a", {"data": {"x": "1"}}))
        other = asyncio.create_task(client.patch(CM, "ns", "b", {"data": {"x": "1"}}))
        await helpers.eventually(lambda: arrived == ["PUT a", "PATCH b"])
        await asyncio.sleep(0.05)
        assert arrived == ["PUT a", "PATCH b"], "the second write to a waits for the first"
        release.setdefault("PATCH b", asyncio.Event()).set()
        await other
        release["PUT a"].set()
        await put
        await helpers.eventually(lambda: arrived[-1] == "PATCH a")
        release.setdefault("PATCH a", asyncio.Event()).set()
        await patch

        async def nested() -> None:  # a status writer inside its turn writes on
            async with client.writing(CM, "ns", "a"):
                await client.update(cm("a"), subresource="status")

        release.setdefault("PUT a/status", asyncio.Event()).set()
        await asyncio.wait_for(nested(), 5)
        assert arrived[-1] == "PUT a/status"
