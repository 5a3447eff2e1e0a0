"""A cache over several namespaces: one list+watch per namespace, reads across them."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from runtime import manager, source
from runtime.cache import cache as cache_
from runtime.cache import informer as informer_
from runtime.cache import store as store_
from runtime.client import errors, resources
from runtime.reconcile import Request
from runtime.testing import fake
from tests.unit import helpers

CM = resources.default_registry.for_kind("v1", "ConfigMap")
NODES = resources.default_registry.for_kind("v1", "Node")


def cm(name: str, ns: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "labels": labels}, "data": {}}  # fmt: skip


def by_app(obj: store_.Obj) -> list[str]:
    app = (obj["metadata"].get("labels") or {}).get("app")
    return [app] if app else []


class Recording(fake.FakeClient):
    """The fake API server, remembering the namespace of every list and watch, and able
    to hold the lists of one namespace until released."""

    def __init__(self, namespaces: list[str]) -> None:
        super().__init__(namespaces=namespaces)
        self.requests: list[tuple[str, str, str | None]] = []
        self.hold: dict[str | None, asyncio.Event] = {}

    async def list(self, resource: resources.Resource, namespace: str | None = None,
                   **options: Any) -> Any:  # fmt: skip
        self.requests.append(("list", str(resource), namespace))
        held = self.hold.get(namespace)
        if held is not None:
            await held.wait()
        return await super().list(resource, namespace, **options)

    def watch(self, resource: resources.Resource, namespace: str | None = None,
              **options: Any) -> AsyncGenerator[Any, None]:  # fmt: skip
        self.requests.append(("watch", str(resource), namespace))
        return super().watch(resource, namespace, **options)


class Requests:
    """A queue that only remembers what was added."""

    def __init__(self) -> None:
        self.added: list[str] = []

    def add(self, item: Request) -> None:
        self.added.append(str(item))

    def add_after(self, item: Request, delay: float) -> None:
        self.added.append(str(item))


@pytest.fixture
async def env() -> AsyncGenerator[tuple[Recording, cache_.Cache], None]:
    client = Recording(namespaces=["a", "b", "c"])
    cache = cache_.Cache(
        client,  # type: ignore[arg-type]
        namespaces=["a", "b"],
        indexers={"configmaps": {"by-app": by_app}},
        debug=True,
    )
    yield client, cache
    cache.verify()
    await cache.stop()


def names(objs: list[store_.Obj]) -> list[str]:
    return sorted(f"{o['metadata'].get('namespace')}/{o['metadata']['name']}" for o in objs)


async def test_each_namespace_is_listed_and_watched_and_nothing_else(env) -> None:  # type: ignore[no-untyped-def]
    client, cache = env
    for ns in ("a", "b", "c"):
        await client.create(cm("x", ns, app="web"))
    assert names(await cache.list(CM)) == ["a/x", "b/x"]
    await client.create(cm("y", "c"))
    await client.create(cm("y", "b"))
    await client.delivered()
    assert names(await cache.list(CM)) == ["a/x", "b/x", "b/y"], "c never reaches the cache"
    requests = [r for r in client.requests if r[1] == "configmaps"]
    assert sorted(requests) == [
        ("list", "configmaps", "a"), ("list", "configmaps", "b"),
        ("watch", "configmaps", "a"), ("watch", "configmaps", "b"),
    ]  # fmt: skip
    assert [r.namespace for r in cache.informer(CM).reflectors] == ["a", "b"]


async def test_reads_answer_across_the_namespaces(env) -> None:  # type: ignore[no-untyped-def]
    client, cache = env
    await client.create(cm("x", "a", app="web"))
    await client.create(cm("y", "b", app="web"))
    await client.create(cm("z", "b", app="db"))
    await client.create(cm("w", "c", app="web"))
    assert (await cache.get(CM, "a", "x"))["metadata"]["namespace"] == "a"
    assert (await cache.get(CM, "b", "y"))["metadata"]["namespace"] == "b"
    with pytest.raises(errors.NotFound):
        await cache.get(CM, "a", "y")
    assert names(await cache.list(CM, label_selector="app=web")) == ["a/x", "b/y"]
    assert names(await cache.list(CM, "b", label_selector="app=web")) == ["b/y"]
    assert names(await cache.list(CM, index=("by-app", "web"))) == ["a/x", "b/y"]
    assert names(await cache.list(CM, "a", index=("by-app", "web"))) == ["a/x"]
    assert names(await cache.list(CM, "b")) == ["b/y", "b/z"]


async def test_a_namespace_outside_the_set_is_an_error_not_an_empty_answer(env) -> None:  # type: ignore[no-untyped-def]
    client, cache = env
    await client.create(cm("w", "c"))
    with pytest.raises(cache_.NamespaceNotWatched, match=r'namespace "c".*watches a, b'):
        await cache.get(CM, "c", "w")
    with pytest.raises(cache_.NamespaceNotWatched):
        await cache.list(CM, "c")
    with pytest.raises(cache_.NamespaceNotWatched, match="all namespaces"):
        await cache.get(CM, None, "w")
    with pytest.raises(cache_.NamespaceNotWatched) as raised:
        await cache.list(CM, "c", label_selector="app=web")
    assert not isinstance(raised.value, errors.NotFound), "`except NotFound: create` must miss it"
    assert raised.value.namespace == "c"


async def test_handlers_see_every_namespace_once_and_in_order(env) -> None:  # type: ignore[no-untyped-def]
    client, cache = env
    await client.create(cm("early", "a"))
    informer = cache.informer(CM)
    events: list[tuple[str, str]] = []
    informer.add_handler(lambda e: events.append((e.type, store_.key_for(e.obj))))
    informer.start()
    await asyncio.wait_for(informer.wait_for_sync(), 5)
    for ns in ("a", "b", "c"):
        await client.create(cm("x", ns))
    b = await client.get(CM, "b", "x")
    b["data"] = {"k": "v"}
    await client.update(b)
    await client.delete(CM, "a", "x")
    await client.delete(CM, "c", "x")
    await client.delivered()
    assert events == [("add", "a/early"), ("add", "a/x"), ("add", "b/x"), ("update", "b/x"),
                      ("delete", "a/x")]  # fmt: skip


async def test_synced_only_when_every_namespace_has_listed(env) -> None:  # type: ignore[no-untyped-def]
    client, cache = env
    await client.create(cm("x", "a"))
    await client.create(cm("y", "b"))
    client.hold["b"] = asyncio.Event()
    informer = cache.informer(CM)
    await cache.start()
    await helpers.eventually(lambda: len(informer.store) == 1, 5, "namespace a listed")
    assert not informer.has_synced()
    assert not cache.has_synced()
    waiting = asyncio.ensure_future(cache.wait_for_sync())
    await client.delivered()
    assert not waiting.done()
    late: list[str] = []
    informer.add_handler(lambda e: late.append(store_.key_for(e.obj)))
    assert late == ["a/x"], "a handler added meanwhile gets what was listed so far"
    client.hold["b"].set()
    await asyncio.wait_for(waiting, 5)
    assert informer.has_synced()
    assert cache.has_synced()
    assert late == ["a/x", "b/y"], "... and the rest once listed, once each"


async def test_a_relist_of_one_namespace_leaves_the_others_alone(env) -> None:  # type: ignore[no-untyped-def]
    client, cache = env
    await client.create(cm("x", "a"))
    await client.create(cm("y", "b"))
    informer = cache.informer(CM)
    events: list[tuple[str, str]] = []
    informer.add_handler(lambda e: events.append((e.type, store_.key_for(e.obj))))
    await cache.start()
    await asyncio.wait_for(cache.wait_for_sync(), 5)
    events.clear()
    await client.delete(CM, "b", "y")
    client.expire_watches()  # every watch ends with 410: both namespaces relist
    await helpers.eventually(lambda: all(r.lists == 2 for r in informer.reflectors), 5, "relists")
    await client.delivered()
    assert names(await cache.list(CM)) == ["a/x"]
    # a's relist re-delivers a/x as an update (as any relist does); it never deletes it
    assert events == [("delete", "b/y"), ("update", "a/x")], "b's relist leaves a alone"


def test_a_scoped_replace_touches_one_namespace() -> None:
    store = store_.Store(debug=True)
    for key in ("a/x", "a/gone", "b/y"):
        ns, name = key.split("/")
        store.upsert({"metadata": {"namespace": ns, "name": name, "resourceVersion": "5"}})
    upserted, deleted = store.replace(
        [{"metadata": {"namespace": "a", "name": "x", "resourceVersion": "7"}}], "8", namespace="a"
    )
    assert [store_.key_for(o) for o, _ in upserted] == ["a/x"]
    assert [store_.key_for(o) for o in deleted] == ["a/gone"]
    assert sorted(store.keys()) == ["a/x", "b/y"]
    store.replace([], "9")  # unscoped: the whole store
    assert len(store) == 0


async def test_write_through_goes_to_the_right_namespace_and_no_further(env) -> None:  # type: ignore[no-untyped-def]
    client, cache = env
    await client.create(cm("x", "a"))
    await client.create(cm("y", "b"))
    await cache.list(CM)
    y = copy.deepcopy(await cache.get(CM, "b", "y"))
    y["data"] = {"written": "yes"}
    await client.update(y)  # no settle: the watch event has not been delivered yet
    assert (await cache.get(CM, "b", "y"))["data"] == {"written": "yes"}
    await client.create(cm("z", "c"))  # our own write, in a namespace not watched
    assert names(await cache.list(CM)) == ["a/x", "b/y"]
    assert not cache.informer(CM).apply_write(cm("forged", "c") | {"metadata": {
        "name": "forged", "namespace": "c", "resourceVersion": "999"}})  # fmt: skip
    await client.delete(CM, "a", "x")  # delete write-through: gone before the watch says so
    assert names(await cache.list(CM)) == ["b/y"]
    await client.delete(CM, "c", "z")
    await client.delivered()
    assert names(await cache.list(CM)) == ["b/y"]


async def test_cluster_scoped_resources_get_one_cluster_wide_watch(env) -> None:  # type: ignore[no-untyped-def]
    client, cache = env
    await client.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    assert names(await cache.list(NODES)) == ["None/n1"]
    assert (await cache.get(NODES, None, "n1"))["metadata"]["name"] == "n1"
    node = copy.deepcopy(await cache.get(NODES, None, "n1"))
    node["metadata"]["labels"] = {"zone": "z"}
    await client.update(node)  # written through, although it has no namespace
    assert (await cache.get(NODES, None, "n1"))["metadata"]["labels"] == {"zone": "z"}
    assert [r for r in client.requests if r[1] == "nodes"] == [
        ("list", "nodes", None), ("watch", "nodes", None)]  # fmt: skip
    assert cache.informer(NODES).namespaces == ()


async def test_stop_stops_every_namespace(env) -> None:  # type: ignore[no-untyped-def]
    client, cache = env
    await cache.list(CM)
    assert len(client._watchers) == 2
    await cache.stop()
    await client.delivered()
    assert client._watchers == [], "every namespace's watch ended"
    assert not cache.informer(CM).started


async def test_a_kind_source_gets_requests_from_every_namespace(env) -> None:  # type: ignore[no-untyped-def]
    client, cache = env
    await client.create(cm("x", "a"))
    kind = source.Kind(cache, CM)
    queue = Requests()
    await kind.start(queue)
    await asyncio.wait_for(kind.wait_for_sync(), 5)
    await client.create(cm("y", "b"))
    await client.create(cm("z", "c"))
    await client.delivered()
    assert sorted(queue.added) == ["a/x", "b/y"]


# -- options ----------------------------------------------------------------------------------


def test_namespace_is_a_shorthand_and_both_at_once_is_an_error() -> None:
    client = fake.FakeClient()
    assert cache_.Cache(client, namespace="a").namespaces == ("a",)  # type: ignore[arg-type]
    assert cache_.Cache(client, namespaces=["a", "b", "a"]).namespaces == ("a", "b")  # type: ignore[arg-type]
    assert cache_.Cache(client).namespaces == ()  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not both"):
        cache_.Cache(client, namespace="a", namespaces=["b"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not the string"):
        cache_.Cache(client, namespaces="ab")  # type: ignore[arg-type]
    for bad in ([""], ["a/b"]):
        with pytest.raises(ValueError, match="not a namespace name"):
            informer_.namespaces_of(None, bad)


async def test_the_managers_options_reach_its_cache() -> None:
    client = fake.FakeClient()
    options = manager.Options(name="x", namespaces=["team-a", "team-b", "team-a"])
    assert options.namespaces == ("team-a", "team-b")
    assert options == manager.Options(name="x", namespaces=("team-a", "team-b"))
    hash(options)
    assert manager.Manager(client, options).cache.namespaces == ("team-a", "team-b")  # type: ignore[arg-type]
    shorthand = manager.Manager(client, manager.Options(name="x", namespace="team-a"))  # type: ignore[arg-type]
    assert shorthand.cache.namespaces == ("team-a",)
    assert manager.Manager(client, manager.Options(name="x")).cache.namespaces == ()  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not both"):
        manager.Options(name="x", namespace="a", namespaces=["b"])
