"""A controller fed by the cache: events -> predicates -> handler -> queue -> reconcile."""

from __future__ import annotations

import asyncio
import copy

import pytest

from runtime import controller, handler, predicate, reconcile, source
from runtime.cache import cache as cache_
from runtime.client import resources
from runtime.testing import fake
from tests.unit import helpers

WIDGET = resources.Resource("test.rayservice.dev", "v1", "Widget", "widgets")
SECRET = resources.default_registry.for_kind("v1", "Secret")


async def test_owned_objects_reconcile_their_owner_and_status_writes_are_filtered() -> None:
    registry = resources.default_registry.copy()
    registry.register(WIDGET)
    client = fake.FakeClient(registry, namespaces=["ns"])
    cache = cache_.Cache(client, debug=True)  # type: ignore[arg-type]
    seen: list[str] = []

    async def reconciler(request: reconcile.Request) -> reconcile.Result:
        seen.append(str(request))
        return reconcile.Result()

    ctrl = controller.Controller("kind-source-test", reconciler)
    ctrl.watch(
        source.Kind(cache, WIDGET, predicates=[predicate.generation_changed]),
        source.Kind(cache, SECRET, handler.for_owner("test.rayservice.dev/v1", "Widget")),
    )
    owner = await client.create({"apiVersion": "test.rayservice.dev/v1", "kind": "Widget",
                                 "metadata": {"name": "owner", "namespace": "ns"}})  # fmt: skip
    stop = asyncio.Event()
    task = asyncio.create_task(ctrl.start(stop))
    try:
        await client.delivered()
        await ctrl.wait_idle()
        assert seen == ["ns/owner"], "the initial list enqueues every object once"
        ref = {"apiVersion": "test.rayservice.dev/v1", "kind": "Widget", "name": "owner",
               "uid": owner["metadata"]["uid"], "controller": True}  # fmt: skip
        await client.create({"apiVersion": "v1", "kind": "Secret",
                             "metadata": {"name": "child", "namespace": "ns",
                                          "ownerReferences": [ref]}})  # fmt: skip
        await client.delivered()
        await ctrl.wait_idle()
        assert seen == ["ns/owner", "ns/owner"], "a change to an owned object wakes its owner"
        current = await client.get(WIDGET, "ns", "owner")
        with_status = copy.deepcopy(current)
        with_status["status"] = {"x": 1}
        await client.update_status(with_status)
        await client.delivered()
        await ctrl.wait_idle()
        assert len(seen) == 2, "a status-only write does not pass generation_changed"
        cache.verify()
    finally:
        stop.set()
        await task
        await cache.stop()


async def test_a_delayed_source_turns_a_burst_of_child_changes_into_one_reconcile() -> None:
    registry = resources.default_registry.copy()
    registry.register(WIDGET)
    client = fake.FakeClient(registry, namespaces=["ns"])
    cache = cache_.Cache(client, debug=True)  # type: ignore[arg-type]
    seen: list[str] = []

    async def reconciler(request: reconcile.Request) -> reconcile.Result:
        seen.append(str(request))
        return reconcile.Result()

    owner = await client.create({"apiVersion": "test.rayservice.dev/v1", "kind": "Widget",
                                 "metadata": {"name": "owner", "namespace": "ns"}})  # fmt: skip
    ref = {"apiVersion": "test.rayservice.dev/v1", "kind": "Widget", "name": "owner",
           "uid": owner["metadata"]["uid"], "controller": True}  # fmt: skip
    ctrl = controller.Controller("kind-source-delay-test", reconciler)
    ctrl.watch(source.Kind(cache, SECRET, handler.for_owner("test.rayservice.dev/v1", "Widget"),
                           delay=0.3))  # fmt: skip
    stop = asyncio.Event()
    task = asyncio.create_task(ctrl.start(stop))
    try:
        await client.delivered()
        await ctrl.wait_idle()
        assert seen == []
        for i in range(5):
            await client.create({"apiVersion": "v1", "kind": "Secret",
                                 "metadata": {"name": f"child-{i}", "namespace": "ns",
                                              "ownerReferences": [ref]}})  # fmt: skip
        await client.delivered()
        await ctrl.wait_idle()
        assert seen == [], "not before the delay"
        await helpers.eventually(lambda: seen, within=5, what="the delayed reconcile")
        await asyncio.sleep(0.5)  # long enough for any second reconcile to have come
        assert seen == ["ns/owner"], "five changes, one reconcile"
    finally:
        stop.set()
        await task
        await cache.stop()


def test_a_negative_delay_is_refused() -> None:
    client = fake.FakeClient()
    cache = cache_.Cache(client)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="delay"):
        source.Kind(cache, SECRET, delay=-1)
