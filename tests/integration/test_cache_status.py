"""The cache and the status writer against the real API server."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from runtime import clock, status
from runtime.cache import cache as cache_
from runtime.cache import reflector as reflector_
from runtime.cache import store as store_
from runtime.client import client as client_
from runtime.client import errors, resources
from runtime.testing import controlplane
from tests.integration import helpers

CM = resources.default_registry.for_kind("v1", "ConfigMap")


def widget(name: str, namespace: str, kind: str = "Widget") -> dict[str, Any]:
    return {"apiVersion": "test.rayservice.dev/v1", "kind": kind,
            "metadata": {"name": name, "namespace": namespace}, "spec": {"size": 1}}  # fmt: skip


def names_and_versions(objs: list[dict[str, Any]]) -> dict[str, str]:
    return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in objs}


async def test_informer_syncs_1000_objects(client: client_.Client, namespace: str) -> None:
    sem = asyncio.Semaphore(20)

    async def make(i: int) -> None:
        async with sem:
            await client.create({"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": f"cm-{i:04d}", "labels": {"n": str(i % 7)}},
                                 "data": {"i": str(i)}}, namespace=namespace)  # fmt: skip

    await asyncio.gather(*(make(i) for i in range(1000)))
    cache = cache_.Cache(client, namespace=namespace, debug=True)
    try:
        # The first list reads the apiserver's watch cache (resourceVersion=0, as
        # client-go does), which may trail the last creates by a moment; the watch
        # brings the rest.
        store = cache.informer(CM).store
        await cache.list(CM, namespace)  # starts the informer and waits for its sync
        await helpers.eventually(lambda: len(store) == 1000, 10, "all 1000 objects cached")
        cached = await cache.list(CM, namespace)
        assert len(cached) == 1000
        fresh = await client.list(CM, namespace)
        assert names_and_versions(cached) == names_and_versions(fresh.items)
        assert len(await cache.list(CM, namespace, label_selector="n=3")) == len(
            [i for i in range(1000) if i % 7 == 3]
        )
    finally:
        await cache.stop()


def widget_requests(control_plane: controlplane.ControlPlane) -> dict[str, float]:
    """Namespaced requests for widgets the apiserver served, from its own ``/metrics``:
    ``LIST`` and ``WATCH`` (``apiserver_request_total``, by verb; a watch is counted when it
    ends) and ``WATCHLIST`` (``apiserver_watch_list_duration_seconds_count``: watches that
    streamed their initial state, counted once that state is sent)."""
    counts = {"LIST": 0.0, "WATCH": 0.0, "WATCHLIST": 0.0}
    for line in control_plane.metrics().splitlines():
        if 'resource="widgets"' not in line or 'scope="namespace"' not in line:
            continue
        value = float(line.rpartition(" ")[2])
        if line.startswith("apiserver_watch_list_duration_seconds_count{"):
            counts["WATCHLIST"] += value
        elif line.startswith("apiserver_request_total{") and 'subresource=""' in line:
            for verb in ("LIST", "WATCH"):
                if f'verb="{verb}"' in line:
                    counts[verb] += value
    return counts


async def test_watch_list_sync_equals_a_fresh_list_and_keeps_watching(
    control_plane: controlplane.ControlPlane, client: client_.Client, namespace: str
) -> None:
    for i in range(50):
        await client.create(widget(f"wl{i}", namespace))
    # What our own client asked for (the apiserver's LIST/WATCH totals also count the
    # namespace and garbage collectors of other tests' namespaces, so they cannot tell
    # our requests apart).
    calls: list[tuple[str, bool]] = []
    real_list, real_watch = client.list, client.watch

    async def list_(resource: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(("list", False))
        return await real_list(resource, *args, **kwargs)

    def watch(resource: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(("watch", bool(kwargs.get("send_initial_events"))))
        return real_watch(resource, *args, **kwargs)

    client.list = list_  # type: ignore[method-assign]
    client.watch = watch  # type: ignore[method-assign]
    before = widget_requests(control_plane)
    cache = cache_.Cache(client, namespace=namespace, watch_list=True, debug=True)
    try:
        cached = await cache.list(helpers.WIDGETS, namespace)
        # A real watch-list, not a silent fallback to list+watch: one watch asking for
        # the initial events and no list; the apiserver served a watch-list of widgets.
        assert calls == [("watch", True)], "the cache listed widgets or fell back"
        assert widget_requests(control_plane)["WATCHLIST"] >= before["WATCHLIST"] + 1
        assert cache.informer(helpers.WIDGETS).reflector.watch_list, "the reflector fell back"
        fresh = await client.list(helpers.WIDGETS, namespace)
        assert names_and_versions(cached) == names_and_versions(fresh.items)
        await client.delete(helpers.WIDGETS, namespace, "wl0")
        await helpers.eventually(
            lambda: len(cache.informer(helpers.WIDGETS).store) == 49, 30, "the delete seen"
        )
        # One stream throughout: no second watch, and the only list is ours above.
        assert calls == [("watch", True), ("list", False)]
    finally:
        await cache.stop()


async def test_relist_after_410_leaves_the_store_equal_to_a_fresh_list(
    control_plane: controlplane.ControlPlane, client: client_.Client, namespace: str
) -> None:
    for i in range(10):
        await client.create(widget(f"g{i}", namespace, "Gadget"))
    store = store_.Store(debug=True)
    events: list[tuple[str, str]] = []

    def record(kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        events.append((kind, obj["metadata"]["name"]))

    reflector = reflector_.Reflector(client, helpers.GADGETS, store, record, namespace=namespace)
    task = asyncio.create_task(reflector.run())
    await helpers.eventually(lambda: len(store) == 10, 30, "initial sync")
    # Disconnect; the world changes; etcd compacts the history we would resume from.
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await client.delete(helpers.GADGETS, namespace, "g0")
    g1 = await client.get(helpers.GADGETS, namespace, "g1")
    g1["spec"]["size"] = 9
    await client.update(g1)
    await client.create(widget("g-new", namespace, "Gadget"))
    control_plane.compact_etcd()
    task = asyncio.create_task(reflector.run())
    try:
        await helpers.eventually(lambda: reflector.lists == 2, 30, "a relist after 410")
        fresh = await client.list(helpers.GADGETS, namespace)
        assert names_and_versions(store.list()) == names_and_versions(fresh.items)
        assert ("delete", "g0") in events
        assert store.get(f"{namespace}/g1")["spec"]["size"] == 9  # type: ignore[index]
        # and it keeps watching after the relist
        await client.delete(helpers.GADGETS, namespace, "g2")
        await helpers.eventually(
            lambda: f"{namespace}/g2" not in store, 30, "a delete after relist"
        )
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_volatile_only_status_change_makes_no_write(
    control_plane: controlplane.ControlPlane, client: client_.Client, namespace: str
) -> None:
    created = await client.create(widget("w", namespace))
    writer = status.StatusWriter(client, volatile={"lastUpdateTime"},
                                 stamps={"lastUpdateTime": clock.rfc3339})  # fmt: skip
    first = await writer.update(created, {"phase": "Ready"})
    assert first.outcome is status.Outcome.WRITTEN
    # The apiserver labels a PUT of a custom resource with verb "PUT" (built-in kinds:
    # "UPDATE"); the first write proves the key is the one that counts our writes.
    key = ("PUT", "widgets", "status")
    before = control_plane.request_counts().get(key, 0)
    assert before >= 1
    obj = first.obj
    for i in range(20):
        result = await writer.update(obj, {"phase": "Ready", "lastUpdateTime": f"changed-{i}"})
        assert result.outcome is status.Outcome.SKIPPED
    assert control_plane.request_counts().get(key, 0) == before


async def test_two_concurrent_status_writers(client: client_.Client, namespace: str) -> None:
    created = await client.create(widget("w2", namespace))
    a = status.StatusWriter(client)
    b = status.StatusWriter(client)
    results = await asyncio.gather(
        a.update(copy.deepcopy(created), {"phase": "A", "byA": True}),
        b.update(copy.deepcopy(created), {"phase": "B", "byB": True}),
    )
    outcomes = sorted(r.outcome.value for r in results)
    assert outcomes == ["conflict_resolved", "written"]
    final = (await client.get(helpers.WIDGETS, namespace, "w2"))["status"]
    winner = next(r for r in results if r.outcome is status.Outcome.CONFLICT_RESOLVED)
    assert final == winner.obj["status"], "the last writer's full status is what stands"


async def test_a_status_write_and_another_controllers_patch_of_one_object_never_conflict(
    control_plane: controlplane.ControlPlane, client: client_.Client, namespace: str
) -> None:
    """Two controllers of one manager, one writing a Widget's status from the cache, the
    other patching its annotations at the same moment (KubeRay's RayCluster status and
    the RayService's annotation): the client's write turns make them take turns, and the
    status writer reads the newest copy in its turn, so no write is answered 409."""
    cache = cache_.Cache(client, namespace=namespace)
    try:
        await client.create(widget("w5", namespace))
        await helpers.eventually(lambda: _get_or_none(cache, namespace, "w5"), 30, "w5 cached")
        writer = status.StatusWriter(client, latest=cache)
        before = _widget_conflicts(control_plane)
        outcomes = []
        for i in range(20):
            seen = await cache.get(helpers.WIDGETS, namespace, "w5")  # the pass's read
            _, written = await asyncio.gather(  # the patch is sent first, then the status
                client.patch(helpers.WIDGETS, namespace, "w5",
                             {"metadata": {"annotations": {"round": str(i)}}}),
                writer.update(seen, {"phase": f"round-{i}"}),
            )  # fmt: skip
            outcomes.append(written.outcome)
        assert set(outcomes) == {status.Outcome.WRITTEN}, outcomes
        assert _widget_conflicts(control_plane) == before
        final = await client.get(helpers.WIDGETS, namespace, "w5")
        assert final["status"] == {"phase": "round-19"}
        assert final["metadata"]["annotations"]["round"] == "19"
    finally:
        await cache.stop()


async def test_concurrent_writer_after_a_spec_change_reports_stale(
    client: client_.Client, namespace: str
) -> None:
    created = await client.create(widget("w3", namespace))
    changed = copy.deepcopy(created)
    changed["spec"]["size"] = 2
    await client.update(changed)
    result = await status.StatusWriter(client).update(created, {"phase": "ForSize1"})
    assert result.outcome is status.Outcome.STALE
    assert "status" not in await client.get(helpers.WIDGETS, namespace, "w3")


async def test_own_write_is_visible_in_the_cache_at_once(
    client: client_.Client, namespace: str
) -> None:
    cache = cache_.Cache(client, namespace=namespace, debug=True)
    try:
        await client.create(widget("w4", namespace))
        cached = await helpers.eventually(
            lambda: _get_or_none(cache, namespace, "w4"), 30, "w4 in the cache"
        )
        result = await status.StatusWriter(client).update(cached, {"phase": "Written"})
        seen = await cache.get(helpers.WIDGETS, namespace, "w4")  # no waiting
        assert seen["status"] == {"phase": "Written"}
        assert seen["metadata"]["resourceVersion"] == result.obj["metadata"]["resourceVersion"]
    finally:
        await cache.stop()


async def test_mutating_a_cached_object_fails_loudly(
    client: client_.Client, namespace: str
) -> None:
    cache = cache_.Cache(client, namespace=namespace, debug=True)
    try:
        await client.create(widget("w5", namespace))
        cached = await helpers.eventually(
            lambda: _get_or_none(cache, namespace, "w5"), 30, "w5 in the cache"
        )
        cached["spec"]["size"] = 42  # the bug
        with pytest.raises(store_.CacheMutationError, match="w5 was mutated"):
            await cache.get(helpers.WIDGETS, namespace, "w5")
    finally:
        await cache.stop()


async def _get_or_none(cache: cache_.Cache, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return await cache.get(helpers.WIDGETS, namespace, name)
    except errors.NotFound:
        return None


def _widget_conflicts(control_plane: controlplane.ControlPlane) -> float:
    """Widget requests kube-apiserver answered 409, from its ``/metrics``."""
    return sum(
        float(line.rpartition(" ")[2])
        for line in control_plane.metrics().splitlines()
        if line.startswith("apiserver_request_total{")
        and 'resource="widgets"' in line
        and 'code="409"' in line
    )
