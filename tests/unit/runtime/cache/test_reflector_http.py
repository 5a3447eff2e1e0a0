"""Cache failure paths, in-process: the reflector against a scripted HTTP server on
127.0.0.1 (a watch answered with HTTP >= 400, a server refusing WatchList, a watch-list
stream ending before its initial-events marker), the informer's resync loop,
``Cache.list(index=)``, and what write-through must ignore."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from runtime import metrics, predicate
from runtime.cache import cache as cache_
from runtime.cache import informer as informer_
from runtime.cache import reflector as reflector_
from runtime.cache import store as store_
from runtime.client import client as client_
from runtime.client import resources
from runtime.testing import fake
from tests.unit import helpers

CM = resources.default_registry.for_kind("v1", "ConfigMap")
Obj = dict[str, Any]


def cm(name: str, rv: str, ns: str = "ns", **meta: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": rv, **meta}}  # fmt: skip


def configmap(name: str, ns: str = "ns", **meta: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, **meta}}  # fmt: skip


def reflector_errors() -> float:
    value = metrics.registry.get_sample_value("reflector_errors_total", {"resource": str(CM)})
    return value or 0.0


# -- a scripted API server on loopback ---------------------------------------------------------


def event(kind: str, obj: Obj) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def initial_events_end(rv: str) -> bytes:
    return event("BOOKMARK", {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {
        "resourceVersion": rv, "annotations": {"k8s.io/initial-events-end": "true"}}})  # fmt: skip


def status_body(code: int, reason: str, message: str = "") -> bytes:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "code": code, "reason": reason, "message": message}).encode()  # fmt: skip


class Server:
    """Answers lists from ``lists`` and watches from ``watches``, each in turn. A watch
    answer is ``(status, body)``; status 200 streams ``body`` (event lines) and then ends
    the stream, unless it is the last one scripted: that one stays open (as a live watch
    does) until the test ends."""

    def __init__(self) -> None:
        self.lists: list[tuple[int, bytes]] = []
        self.watches: list[tuple[int, bytes]] = []
        self.requests: list[dict[str, str]] = []
        self.closing = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(dict(request.query))
        if request.query.get("watch") != "true":
            code, body = self.lists.pop(0)
            return web.Response(status=code, body=body, content_type="application/json")
        if not self.watches:
            pytest.fail(f"an unscripted watch: {dict(request.query)}")
        code, body = self.watches.pop(0)
        if code != 200:
            return web.Response(status=code, body=body, content_type="application/json")
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(body)
        if not self.watches:
            await self.closing.wait()
        return response

    def watch_queries(self) -> list[dict[str, str]]:
        return [q for q in self.requests if q.get("watch") == "true"]


def list_body(rv: str, *objs: Obj) -> tuple[int, bytes]:
    body = {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {"resourceVersion": rv},
            "items": list(objs)}  # fmt: skip
    return 200, json.dumps(body).encode()


@pytest.fixture
async def server() -> AsyncIterator[tuple[Server, client_.Client]]:
    srv = Server()
    async with helpers.api_server(srv.handle) as client:
        yield srv, client
        srv.closing.set()


class Running:
    """A reflector into a debug store, its events recorded, running until the test ends."""

    def __init__(self, client: client_.Client, watch_list: bool = False) -> None:
        self.store = store_.Store(debug=True)
        self.seen: list[tuple[str, str, str]] = []
        self.synced = asyncio.Event()
        self.reflector = reflector_.Reflector(
            client, CM, self.store,
            lambda kind, obj, old: self.seen.append(
                (kind, obj["metadata"]["name"], obj["metadata"]["resourceVersion"])),
            on_synced=self.synced.set, watch_list=watch_list,
            backoff=reflector_.Backoff(initial=0.001, cap=0.001),
        )  # fmt: skip
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Running:
        self.task = asyncio.create_task(self.reflector.run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None
        assert not self.task.done(), "the reflector stopped on its own"
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


@pytest.mark.parametrize(
    ("code", "body"),
    [
        (500, status_body(500, "InternalError")),
        (429, status_body(429, "TooManyRequests")),
        (403, b"forbidden, and not a Status"),
    ],
    ids=["500", "429", "403-plain-text"],
)
async def test_a_watch_answered_with_an_error_status_is_retried_from_the_same_version(
    server: tuple[Server, client_.Client], code: int, body: bytes
) -> None:
    srv, client = server
    srv.lists = [list_body("10", cm("a", "10"))]
    srv.watches = [(code, body), (200, event("ADDED", cm("b", "11")))]
    before = reflector_errors()
    async with Running(client) as running:
        await helpers.eventually(
            lambda: "ns/b" in running.store, what="the retried watch delivers b"
        )
        assert reflector_errors() == before + 1
        assert running.reflector.lists == 1, "a failed watch is resumed, not relisted"
        watches = srv.watch_queries()
        assert [q.get("resourceVersion") for q in watches] == ["10", "10"]
        assert running.seen == [("add", "a", "10"), ("add", "b", "11")]


async def test_a_watch_answered_410_relists_from_etcd(
    server: tuple[Server, client_.Client],
) -> None:
    srv, client = server
    srv.lists = [list_body("10", cm("a", "10"), cm("b", "10")), list_body("20", cm("a", "15"))]
    srv.watches = [(410, status_body(410, "Expired", "too old resource version")),
                   (200, event("ADDED", cm("c", "21")))]  # fmt: skip
    before = reflector_errors()
    async with Running(client) as running:
        await helpers.eventually(lambda: "ns/c" in running.store, what="watching after the relist")
        lists = [q for q in srv.requests if q.get("watch") != "true"]
        assert [q.get("resourceVersion") for q in lists] == ["0", ""], "the relist is consistent"
        assert srv.watch_queries()[-1]["resourceVersion"] == "20"
        assert sorted(running.store.keys()) == ["ns/a", "ns/c"]
        assert running.seen[2:] == [("update", "a", "15"), ("delete", "b", "10"),
                                    ("add", "c", "21")]  # fmt: skip
        assert reflector_errors() == before, "410 is not an error"


@pytest.mark.parametrize(
    ("code", "reason"), [(422, "Invalid"), (400, "BadRequest"), (403, "Forbidden")]
)
async def test_a_server_refusing_watch_list_gets_list_and_watch(
    server: tuple[Server, client_.Client], code: int, reason: str
) -> None:
    srv, client = server
    srv.watches = [
        (code, status_body(code, reason, "sendInitialEvents is forbidden for watch unless the "
                                         "WatchList feature gate is enabled")),
        (200, event("ADDED", cm("b", "6"))),
    ]  # fmt: skip
    srv.lists = [list_body("5", cm("a", "5"))]
    before = reflector_errors()
    async with Running(client, watch_list=True) as running:
        await asyncio.wait_for(running.synced.wait(), 5)
        await helpers.eventually(lambda: "ns/b" in running.store, what="the watch after the list")
        refused, watch = srv.watch_queries()
        assert refused["sendInitialEvents"] == "true"
        assert refused["resourceVersionMatch"] == "NotOlderThan"
        assert "sendInitialEvents" not in watch
        assert watch["resourceVersion"] == "5"
        assert running.reflector.watch_list is False, "not asked again"
        assert running.seen == [("add", "a", "5"), ("add", "b", "6")]
        assert reflector_errors() == before, "a refusal is not an error"


async def test_a_watch_list_ending_before_its_marker_is_retried_and_not_half_applied(
    server: tuple[Server, client_.Client],
) -> None:
    srv, client = server
    srv.watches = [
        # The stream ends after part of the initial state (a proxy cut it, the server restarted).
        (200, event("ADDED", cm("a", "5")) + event("ADDED", cm("ghost", "4"))),
        (200, event("ADDED", cm("a", "5")) + event("BOOKMARK", {"metadata": {
            "resourceVersion": "6"}}) + event("ADDED", cm("b", "7")) + initial_events_end("8")
         + event("MODIFIED", cm("a", "9"))),
    ]  # fmt: skip
    before = reflector_errors()
    async with Running(client, watch_list=True) as running:
        await asyncio.wait_for(running.synced.wait(), 5)
        await helpers.eventually(
            lambda: running.seen[-1:] == [("update", "a", "9")], what="the same stream goes on"
        )
        assert running.seen == [("add", "a", "5"), ("add", "b", "7"), ("update", "a", "9")]
        assert "ns/ghost" not in running.store, "nothing from the cut stream was applied"
        assert reflector_errors() == before + 1
        assert running.reflector.lists == 1
        assert [q.get("sendInitialEvents") for q in srv.watch_queries()] == ["true", "true"]
        assert not [q for q in srv.requests if q.get("watch") != "true"], "no list request"


async def test_a_watch_list_that_ends_normally_is_resumed_as_a_plain_watch(
    server: tuple[Server, client_.Client],
) -> None:
    srv, client = server
    srv.watches = [
        (200, event("ADDED", cm("a", "5")) + initial_events_end("6")
         + event("MODIFIED", cm("a", "7"))),  # then the server's timeoutSeconds ends it
        (200, event("ADDED", cm("b", "8"))),
    ]  # fmt: skip
    async with Running(client, watch_list=True) as running:
        await helpers.eventually(lambda: "ns/b" in running.store, what="the resumed watch")
        first, resumed = srv.watch_queries()
        assert first["sendInitialEvents"] == "true"
        assert "sendInitialEvents" not in resumed, "no second copy of the initial state"
        assert resumed["resourceVersion"] == "7"
        assert running.seen == [("add", "a", "5"), ("update", "a", "7"), ("add", "b", "8")]
        assert running.reflector.lists == 1


async def test_a_watch_that_ends_normally_is_resumed_without_a_list(
    server: tuple[Server, client_.Client],
) -> None:
    srv, client = server
    srv.lists = [list_body("10", cm("a", "10"))]
    srv.watches = [
        (200, event("MODIFIED", cm("a", "12")) + event("BOOKMARK", {"metadata": {
            "resourceVersion": "15"}})),  # then the server's timeoutSeconds ends it
        # An older event (our own newer write got there first) and a delete of a key we
        # never had change nothing, but move the resourceVersion.
        (200, event("MODIFIED", cm("a", "11")) + event("DELETED", cm("never-seen", "16"))
         + event("ADDED", cm("c", "17"))),
    ]  # fmt: skip
    before = reflector_errors()
    async with Running(client) as running:
        await helpers.eventually(lambda: "ns/c" in running.store, what="the resumed watch")
        assert [q["resourceVersion"] for q in srv.watch_queries()] == ["10", "15"]
        assert running.reflector.lists == 1
        assert running.seen == [("add", "a", "10"), ("update", "a", "12"), ("add", "c", "17")]
        assert running.store.get("ns/a")["metadata"]["resourceVersion"] == "12"  # type: ignore[index]
        assert running.reflector.resource_version == "17"
        assert reflector_errors() == before


async def test_write_answers_the_cache_cannot_place_leave_the_write_and_the_cache_alone(
    server: tuple[Server, client_.Client],
) -> None:
    srv, client = server
    cache = cache_.Cache(client)
    scale = {"apiVersion": "autoscaling/v1", "kind": "Scale",  # not a registered kind
             "metadata": {"name": "d", "namespace": "ns", "resourceVersion": "3"},
             "spec": {"replicas": 2}}  # fmt: skip
    srv.lists = [(200, json.dumps(scale).encode()), (201, b"")]  # (a create answering no body)
    deployment = resources.default_registry.for_kind("apps/v1", "Deployment")
    answer = await client.patch(deployment, "ns", "d", {"spec": {"replicas": 2}},
                                subresource="scale")  # fmt: skip
    assert answer == scale
    assert await client.create(cm("x", "")) is None
    assert cache.has_synced(), "no informer was made for either answer"


# -- the informer's resync loop -----------------------------------------------------------------


async def test_resync_redelivers_the_cached_objects_as_updates_without_api_calls() -> None:
    client = fake.FakeClient(namespaces=["ns"])
    await client.create(configmap("a"))
    informer = informer_.SharedInformer(client, CM, resync=0.01, debug=True)  # type: ignore[arg-type]
    events: list[informer_.Event] = []
    informer.add_handler(events.append)
    informer.start()
    try:
        await asyncio.wait_for(informer.wait_for_sync(), 5)
        calls = list(client.calls)
        await helpers.eventually(
            lambda: sum(e.type == "update" for e in events) >= 2, what="two resyncs"
        )
        resyncs = [e for e in events if e.type == "update"]
        assert all(e.old is e.obj for e in resyncs), "a resync is an update with old is obj"
        assert all(not predicate.resource_version_changed(e) for e in resyncs)
        assert events[0].type == "add"
        # A change is seen by the next resync: it reads the cache as it is now.
        current = await client.get(CM, "ns", "a")
        current["data"] = {"k": "changed"}
        written = await client.update(current)
        await client.create(configmap("b"))
        mark = len(events)
        await helpers.eventually(lambda: {e.obj["metadata"]["name"] for e in events[mark:]
                             if e.type == "update" and e.old is e.obj} == {"a", "b"},
                    what="a resync of both")  # fmt: skip
        resynced_a = next(e.obj for e in events[mark:] if e.obj["metadata"]["name"] == "a")
        assert resynced_a["metadata"]["resourceVersion"] == written["metadata"]["resourceVersion"]
        assert client.calls[len(calls) :] == [
            ("get", "configmaps", ""), ("update", "configmaps", ""), ("create", "configmaps", "")
        ], "only the test's own calls: a resync reads the cache"  # fmt: skip
    finally:
        await informer.stop()
    assert not informer.started
    stopped_at = len(events)
    await asyncio.sleep(0.05)
    assert len(events) == stopped_at, "stop() ends the resync loop"


# -- Cache.list(index=) -----------------------------------------------------------------------


def by_app(obj: Obj) -> list[str]:
    app = (obj["metadata"].get("labels") or {}).get("app")
    return [app] if app else []


async def test_list_by_a_custom_index_follows_changes_and_combines_with_filters() -> None:
    client = fake.FakeClient(namespaces=["ns", "other"])
    cache = cache_.Cache(client, indexers={"configmaps": {"by-app": by_app}}, debug=True)  # type: ignore[arg-type]

    async def names(**kwargs: Any) -> set[str]:
        return {f"{o['metadata']['namespace']}/{o['metadata']['name']}"
                for o in await cache.list(CM, **kwargs)}  # fmt: skip

    try:
        await client.create(configmap("w1", labels={"app": "web", "tier": "front"}))
        await client.create(configmap("w2", labels={"app": "web"}))
        await client.create(configmap("w3", "other", labels={"app": "web", "tier": "front"}))
        await client.create(configmap("d1", labels={"app": "db"}))
        await client.create(configmap("none"))
        assert await names(index=("by-app", "web")) == {"ns/w1", "ns/w2", "other/w3"}
        assert await names(index=("by-app", "db")) == {"ns/d1"}
        assert await names(index=("by-app", "cache")) == set()
        assert await names(namespace="ns", index=("by-app", "web")) == {"ns/w1", "ns/w2"}
        assert await names(index=("by-app", "web"), label_selector="tier=front") == {
            "ns/w1", "other/w3"}  # fmt: skip
        assert await names(index=("namespace", "other")) == {"other/w3"}
        # The index, once built, follows watch events: a re-label moves, a delete removes.
        w2 = await client.get(CM, "ns", "w2")
        w2["metadata"]["labels"]["app"] = "db"
        await client.update(w2)
        await client.delete(CM, "ns", "w1")
        await helpers.eventually(lambda: "ns/w1" not in cache.informer(CM).store, what="the delete")
        assert await names(index=("by-app", "web")) == {"other/w3"}
        assert await names(index=("by-app", "db")) == {"ns/d1", "ns/w2"}
        with pytest.raises(KeyError, match="by-app"):
            await cache.list(CM, index=("by-name", "x"))
    finally:
        await cache.stop()


async def test_owner_index_lists_what_an_owner_controls() -> None:
    client = fake.FakeClient(namespaces=["ns"])
    cache = cache_.Cache(client, debug=True)  # type: ignore[arg-type]
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "u-1"}
    try:
        await client.create(configmap("controlled", ownerReferences=[{**ref, "controller": True}]))
        await client.create(configmap("referenced", ownerReferences=[ref]))
        listed = await cache.list(CM, index=("owner", "u-1"))
        assert [o["metadata"]["name"] for o in listed] == ["controlled"]
    finally:
        await cache.stop()


# -- a namespaced cache ---------------------------------------------------------------------------


async def test_a_namespaced_cache_ignores_writes_to_other_namespaces() -> None:
    client = fake.FakeClient(namespaces=["ns", "other"])
    indexers = {"configmaps": {"by-app": by_app}}
    cache = cache_.Cache(client, namespace="ns", indexers=indexers, debug=True)  # type: ignore[arg-type]
    try:
        await cache.start()
        informer = cache.informer(CM)  # registered after start(): started at once
        assert informer.started
        await asyncio.wait_for(informer.wait_for_sync(), 5)
        await client.create(configmap("mine", labels={"app": "web"}))
        await client.create(configmap("theirs", "other", labels={"app": "web"}))  # observed
        assert [o["metadata"]["name"] for o in await cache.list(CM)] == ["mine"]
        assert [o["metadata"]["name"] for o in await cache.list(CM, "ns", index=(
            "by-app", "web"))] == ["mine"]  # fmt: skip
        with pytest.raises(cache_.NamespaceNotWatched):  # not NotFound: it is not watched
            await cache.get(CM, "other", "theirs")
        assert cache.has_synced()
    finally:
        await cache.stop()


# -- resourceVersions that are not integers (an aggregated API server not backed by etcd) -----


def test_opaque_resource_versions_compare_by_equality_and_a_relist_wins() -> None:
    store = store_.Store(debug=True)
    store.upsert(cm("a", "rv-x"))
    assert store.upsert_if_newer(cm("a", "rv-x")) is None, "the same version is not applied"
    assert store.upsert_if_newer(cm("a", "rv-b")) is not None, "another one is (order unknown)"
    store.upsert(cm("b", "rv-y"))
    # A relist cannot tell whether what is stored is newer: the list wins, and what it does
    # not have is deleted.
    upserted, deleted = store.replace([cm("a", "rv-0")], "list-1")
    assert [obj["metadata"]["resourceVersion"] for obj, _ in upserted] == ["rv-0"]
    assert [obj["metadata"]["name"] for obj in deleted] == ["b"]
    assert sorted(store.keys()) == ["ns/a"]
    # A delete at an opaque version leaves a tombstone that only that version matches.
    store.delete("ns/a", "rv-gone")
    assert store.upsert_if_newer(cm("a", "rv-gone")) is None
    assert store.upsert_if_newer(cm("a", "rv-new")) is not None
