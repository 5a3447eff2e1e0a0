from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable

import pytest

from runtime.cache import cache as cache_
from runtime.cache import informer as informer_
from runtime.cache import reflector as reflector_
from runtime.cache import store as store_
from runtime.client import errors, resources
from runtime.testing import fake
from tests.unit import helpers

CM = resources.default_registry.for_kind("v1", "ConfigMap")


def cm(name: str, ns: str = "ns", **labels: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "labels": labels}, "data": {}}  # fmt: skip


@pytest.fixture
async def env() -> tuple[fake.FakeClient, cache_.Cache]:
    client = fake.FakeClient(namespaces=["ns", "other"])
    cache = cache_.Cache(client, debug=True)  # type: ignore[arg-type]
    yield client, cache  # type: ignore[misc]
    cache.verify()
    await cache.stop()


async def test_first_read_syncs_then_serves_from_memory(env) -> None:  # type: ignore[no-untyped-def]
    client, cache = env
    for i in range(5):
        await client.create(cm(f"c{i}"))
    got = await cache.get(CM, "ns", "c3")
    assert got["metadata"]["name"] == "c3"
    calls_before = len(client.calls)
    for _ in range(100):
        await cache.get(CM, "ns", "c3")
        await cache.list(CM, "ns")
    assert len(client.calls) == calls_before, "reads never reach the API"
    with pytest.raises(errors.NotFound):
        await cache.get(CM, "ns", "missing")


async def test_watch_keeps_the_cache_current(env) -> None:  # type: ignore[no-untyped-def]
    client, cache = env
    await client.create(cm("a"))
    await cache.list(CM)
    await client.create(cm("b", app="web"))
    a = await client.get(CM, "ns", "a")
    a["data"] = {"k": "v"}
    await client.update(a)
    await client.delete(CM, "ns", "a")
    await client.delivered()
    assert [o["metadata"]["name"] for o in await cache.list(CM)] == ["b"]
    assert [o["metadata"]["name"] for o in await cache.list(CM, label_selector="app=web")] == ["b"]
    assert await cache.list(CM, label_selector="app=db") == []
    assert await cache.list(CM, "other-ns") == []


async def test_write_through_is_visible_before_the_watch_event(env) -> None:  # type: ignore[no-untyped-def]
    client, cache = env
    await client.create(cm("a"))
    cached = await cache.get(CM, "ns", "a")
    new = copy.deepcopy(cached)
    new["data"] = {"written": "yes"}
    written = await client.update(new)  # no settle(): the watch event has not run yet
    seen = await cache.get(CM, "ns", "a")
    assert seen["data"] == {"written": "yes"}
    assert seen["metadata"]["resourceVersion"] == written["metadata"]["resourceVersion"]


async def test_handlers_see_each_change_once_in_order(env) -> None:  # type: ignore[no-untyped-def]
    client, cache = env
    await client.create(cm("a"))
    informer = cache.informer(CM)
    informer.start()
    await informer.wait_for_sync()
    events: list[tuple[str, str]] = []
    informer.add_handler(lambda e: events.append((e.type, e.obj["metadata"]["name"])))
    assert events == [("add", "a")], "a late handler is replayed the cache"
    a = await client.get(CM, "ns", "a")
    a["data"] = {"x": "1"}
    await client.update(a)  # write-through delivers the update at once ...
    await client.delivered()  # ... and the watch event for the same RV is not delivered again
    await client.delete(CM, "ns", "a")
    await client.delivered()
    assert [t for t, _ in events] == ["add", "update", "delete"]


async def test_a_failing_handler_does_not_stop_the_others(env) -> None:  # type: ignore[no-untyped-def]
    client, cache = env
    informer = cache.informer(CM)
    informer.start()
    await informer.wait_for_sync()
    seen: list[str] = []

    def broken(event: informer_.Event) -> None:
        raise RuntimeError("handler bug")

    informer.add_handler(broken)
    informer.add_handler(lambda e: seen.append(e.obj["metadata"]["name"]))
    await client.create(cm("a"))
    await client.delivered()
    assert seen == ["a"]


async def test_relist_after_410_replaces_the_store_and_reports_deletes() -> None:
    client = fake.FakeClient(namespaces=["ns", "other"])
    store = store_.Store()
    events: list[tuple[str, str]] = []
    reflector = reflector_.Reflector(
        client,  # type: ignore[arg-type]
        CM,
        store,
        lambda kind, obj, old: events.append((kind, obj["metadata"]["name"])),
    )
    await client.create(cm("a"))
    await client.create(cm("b"))
    task = asyncio.create_task(reflector.run())
    await client.watched(CM)
    assert sorted(store.keys()) == ["ns/a", "ns/b"]
    # While the watch is broken, "a" goes away and "c" appears; then history is compacted.
    client.compact()
    client.expire_watches()  # the open watch ends with 410 Expired ...
    await client.delete(CM, "ns", "a")  # ... so these reach the store only by the relist
    await client.create(cm("c"))
    await helpers.eventually(lambda: reflector.lists == 2, what="the relist")
    await client.watched(CM)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert sorted(store.keys()) == ["ns/b", "ns/c"]
    assert reflector.lists == 2
    fresh = await client.list(CM)
    assert {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in fresh.items} == {
        o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in store.list()
    }
    assert ("delete", "a") in events


async def test_bookmarks_advance_the_resource_version() -> None:
    client = fake.FakeClient(namespaces=["ns", "other"])
    reflector = reflector_.Reflector(client, CM, store_.Store(), lambda *a: None)  # type: ignore[arg-type]
    task = asyncio.create_task(reflector.run())
    await client.watched(CM)
    synced_at = reflector.resource_version
    # A change to another kind moves the global resourceVersion, but no ConfigMap event
    # carries it to our reflector: only a bookmark can.
    await client.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}},
                        namespace="ns")  # fmt: skip
    await client.delivered()
    assert reflector.resource_version == synced_at != client.resource_version
    client.bookmark()
    await client.delivered()
    assert reflector.resource_version == client.resource_version
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_backoff_grows_with_jitter_caps_and_resets() -> None:
    from runtime.testing import clock as fake_clock

    clock = fake_clock.FakeClock()
    backoff = reflector_.Backoff(initial=0.8, cap=30, reset_after=120, clock=clock)
    delays = [backoff.next() for _ in range(8)]
    bases = [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30, 30]
    assert all(0 < d <= b for d, b in zip(delays, bases, strict=True))
    clock.advance(121)
    assert backoff.next() <= 0.8


async def test_label_selector_lists_match_a_full_scan(env) -> None:  # type: ignore[no-untyped-def]
    client, cache = env
    created: dict[str, dict[str, str]] = {}  # the labels of each ConfigMap made in "ns"
    for i in range(30):
        labels = {"app": f"a{i % 3}", "tier": ("front", "back")[i % 2]}
        if i % 5 == 0:
            labels["canary"] = "yes"
        ns = ("ns", "other")[i % 4 == 0]
        await client.create(cm(f"c{i}", ns=ns, **labels))
        if ns == "ns":
            created[f"c{i}"] = labels
    # each selector's meaning written out by hand, not by the selector module
    meanings: dict[str, Callable[[dict[str, str]], bool]] = {
        "app=a1": lambda la: la["app"] == "a1",
        "app in (a0,a2),tier=front": lambda la: la["app"] in ("a0", "a2") and la["tier"] == "front",
        "tier!=front": lambda la: la["tier"] != "front",
        "canary": lambda la: "canary" in la,
        "!canary,app=a0": lambda la: "canary" not in la and la["app"] == "a0",
        "app notin (a1)": lambda la: la["app"] != "a1",
    }
    for selector, means in meanings.items():
        expected = {name for name, labels in created.items() if means(labels)}
        assert expected, f"the data exercise {selector!r}"
        got = {o["metadata"]["name"] for o in await cache.list(CM, "ns", label_selector=selector)}
        assert got == expected, selector


async def test_watch_list_syncs_from_one_stream_and_keeps_watching() -> None:
    client = fake.FakeClient(namespaces=["ns", "other"])
    for i in range(5):
        await client.create(cm(f"c{i}"))
    cache = cache_.Cache(client, watch_list=True, debug=True)  # type: ignore[arg-type]
    try:
        assert len(await cache.list(CM)) == 5
        verbs = [verb for verb, _, _ in client.calls]
        assert "list" not in verbs, "no list request: the initial state came as watch events"
        await client.delete(CM, "ns", "c0")
        await client.create(cm("c9"))
        await client.delivered()
        names = sorted(o["metadata"]["name"] for o in await cache.list(CM))
        assert names == ["c1", "c2", "c3", "c4", "c9"]
        assert [verb for verb, _, _ in client.calls].count("watch") == 1, "one stream throughout"
    finally:
        await cache.stop()


async def test_a_delete_leaves_the_cache_before_the_watch_event(env) -> None:  # type: ignore[no-untyped-def]
    client, cache = env
    await client.create(cm("a"))
    await client.create(cm("b"))
    informer = cache.informer(CM)
    informer.start()
    await informer.wait_for_sync()
    events: list[tuple[str, str]] = []
    informer.add_handler(lambda e: events.append((e.type, e.obj["metadata"]["name"])))
    events.clear()
    await client.delete(CM, "ns", "a")  # no settle(): the watch event has not run yet
    with pytest.raises(errors.NotFound):
        await cache.get(CM, "ns", "a")
    assert [o["metadata"]["name"] for o in await cache.list(CM, "ns")] == ["b"]
    await client.delivered()  # the watch's DELETED event is not delivered a second time
    assert events == [("delete", "a")]


async def test_a_delete_the_server_defers_is_cached_as_terminating(env) -> None:  # type: ignore[no-untyped-def]
    client, cache = env
    obj = cm("a")
    obj["metadata"]["finalizers"] = ["example.com/hold"]
    await client.create(obj)
    assert "deletionTimestamp" not in (await cache.get(CM, "ns", "a"))["metadata"]
    await client.delete(CM, "ns", "a")
    seen = await cache.get(CM, "ns", "a")  # still there, but visibly going
    assert seen["metadata"]["deletionTimestamp"]


async def test_a_deleted_pod_whose_answer_is_the_object_leaves_the_cache(env) -> None:  # type: ignore[no-untyped-def]
    client, cache = env
    pods = resources.default_registry.for_kind("v1", "Pod")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"},
           "spec": {"containers": [{"name": "c", "image": "i"}]}}  # fmt: skip
    await client.create(pod)
    await cache.get(pods, "ns", "p")
    answer = await client.delete(pods, "ns", "p")
    assert answer is not None
    assert answer["kind"] == "Pod"
    assert await cache.list(pods, "ns") == []
    assert not cache.informer(pods).apply_delete("ns/p", answer), "already gone: no second event"
