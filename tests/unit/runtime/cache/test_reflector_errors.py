"""The reflector and write-through under errors: surviving any error, tombstones, relists,
copies."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import http_exceptions

from runtime import metrics
from runtime.cache import informer as informer_
from runtime.cache import reflector as reflector_
from runtime.cache import store as store_
from runtime.client import client as client_
from runtime.client import errors, resources
from runtime.testing import fake
from tests.unit import helpers

CM = resources.default_registry.for_kind("v1", "ConfigMap")
Obj = dict[str, Any]


def cm(name: str, rv: str, **meta: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv, **meta},
            "data": {"k": "v"}}  # fmt: skip


def new(name: str) -> Obj:
    obj = cm(name, "")
    del obj["metadata"]["resourceVersion"]
    return obj


def reflector_errors(resource: resources.Resource) -> float:
    value = metrics.registry.get_sample_value("reflector_errors_total", {"resource": str(resource)})
    return value or 0.0


class ScriptedClient:
    """Lists answered from ``self.lists`` in turn; one watch stream fed by the test
    through ``self.events`` (an exception put there is raised by the stream).
    ``await self.events.join()`` returns once the reflector has handled all of them."""

    def __init__(self, *lists: client_.ListResult) -> None:
        self.lists = list(lists)
        self.events: asyncio.Queue[Obj | BaseException] = asyncio.Queue()

    async def list(self, resource: resources.Resource, namespace: str | None = None,
                   **_: Any) -> client_.ListResult:  # fmt: skip
        return self.lists.pop(0)

    async def watch(self, resource: resources.Resource, namespace: str | None = None,
                    **_: Any) -> AsyncIterator[Obj]:  # fmt: skip
        while True:
            item = await self.events.get()
            if isinstance(item, BaseException):
                self.events.task_done()
                raise item
            yield item
            self.events.task_done()  # handled: the reflector asks for the next one


Seen = list[tuple[str, str, str]]


async def started(client: ScriptedClient, **options: Any) -> tuple[informer_.SharedInformer, Seen]:
    informer = informer_.SharedInformer(client, CM, debug=True, **options)  # type: ignore[arg-type]
    seen: Seen = []
    informer.add_handler(
        lambda e: seen.append(
            (e.type, e.obj["metadata"]["name"], e.obj["metadata"]["resourceVersion"])
        )
    )
    informer.start()
    await informer.wait_for_sync()
    return informer, seen


# -- item 8: the reflector survives any exception ------------------------------------------


class FailingOnce(fake.FakeClient):
    """A fake whose watch stream raises ``error`` instead of delivering the first event
    for an object named ``poison`` (as aiohttp did for a line over 512 KiB)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(namespaces=["ns"])
        self.error: BaseException | None = error

    async def watch(self, *args: Any, **kwargs: Any) -> AsyncIterator[Obj]:  # type: ignore[override]
        async for event in super().watch(*args, **kwargs):
            if self.error is not None and event["object"]["metadata"].get("name") == "poison":
                error, self.error = self.error, None
                raise error
            yield event


@pytest.mark.parametrize(
    "error",
    [http_exceptions.LineTooLong(b"{...", 524288), RuntimeError("a bug"), KeyError("metadata")],
    ids=["LineTooLong", "RuntimeError", "KeyError"],
)
async def test_the_reflector_survives_any_exception_and_counts_it(error: Exception) -> None:
    client = FailingOnce(error)
    store = store_.Store()
    backoff = reflector_.Backoff(initial=0.001, cap=0.001)
    reflector = reflector_.Reflector(client, CM, store, lambda *a: None, backoff=backoff)  # type: ignore[arg-type]
    before = reflector_errors(CM)
    task = asyncio.create_task(reflector.run())
    try:
        await helpers.eventually(lambda: reflector.lists == 1, what="synced")
        await client.create(new("poison"))
        await client.create(new("after"))
        await helpers.eventually(
            lambda: sorted(store.keys()) == ["ns/after", "ns/poison"], what="caught up"
        )
        assert not task.done(), "the reflector is still running"
        assert reflector_errors(CM) == before + 1
        await client.create(new("later"))
        await helpers.eventually(lambda: "ns/later" in store, what="still watching")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_an_unexpected_list_error_is_retried() -> None:
    client = fake.FakeClient(namespaces=["ns", "other"])
    await client.create(new("a"))
    client.fail_next["list"] = TypeError("unexpected")
    store = store_.Store()
    backoff = reflector_.Backoff(initial=0.001, cap=0.001)
    reflector = reflector_.Reflector(client, CM, store, lambda *a: None, backoff=backoff)  # type: ignore[arg-type]
    task = asyncio.create_task(reflector.run())
    try:
        await helpers.eventually(lambda: "ns/a" in store, what="listed after the failure")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_backoff_jitters_within_its_cap() -> None:
    class Highest(random.Random):
        def random(self) -> float:
            return 0.999999

    backoff = reflector_.Backoff(initial=0.8, cap=30, rng=Highest())
    assert max(backoff.next() for _ in range(20)) <= 30
    spread = reflector_.Backoff(initial=0.8, cap=30, rng=random.Random(1))
    at_cap = [spread.next() for _ in range(200)][10:]
    assert all(0 < d <= 30 for d in at_cap)
    assert min(at_cap) < 15, "full jitter: waits spread over (0, cap]"


# -- item 9: tombstones, and relists that do not undo write-through ------------------------


async def test_a_delete_event_before_the_write_reply_does_not_resurrect_the_object() -> None:
    deleting = cm("a", "5", finalizers=["x"], deletionTimestamp="2026-01-01T00:00:00Z")
    client = ScriptedClient(client_.ListResult([deleting], "5"))
    informer, seen = await started(client)
    try:
        # Our update removed the last finalizer; the apiserver deleted the object at RV 7 and
        # the watch's DELETED event arrived before the PUT's reply.
        client.events.put_nowait({"type": "DELETED", "object": cm("a", "7", finalizers=["x"],
                                  deletionTimestamp="2026-01-01T00:00:00Z")})  # fmt: skip
        await client.events.join()
        assert "ns/a" not in informer.store
        # The reply: the real apiserver answers the deleted state at the deletion's RV ...
        assert not informer.apply_write(cm("a", "7", finalizers=["x"],
                                           deletionTimestamp="2026-01-01T00:00:00Z"))  # fmt: skip
        # ... and an object that is deleting without finalizers is never written through.
        assert not informer.apply_write(cm("a", "6", deletionTimestamp="2026-01-01T00:00:00Z"))
        assert "ns/a" not in informer.store
        assert seen == [("add", "a", "5"), ("delete", "a", "5")]  # its last known state
        # A new object of the same name is newer than the tombstone.
        assert informer.apply_write(cm("a", "8"))
        assert seen[-1] == ("add", "a", "8")
    finally:
        await informer.stop()


async def test_deleting_objects_without_finalizers_are_not_written_through() -> None:
    client = ScriptedClient(client_.ListResult([], "1"))
    informer, seen = await started(client)
    try:
        assert not informer.apply_write(cm("b", "9", deletionTimestamp="2026-01-01T00:00:00Z"))
        assert "ns/b" not in informer.store
        assert seen == []
    finally:
        await informer.stop()


async def test_a_relist_keeps_write_through_entries_newer_than_the_list() -> None:
    client = ScriptedClient(
        client_.ListResult([cm("a", "5"), cm("c", "3")], "5"),
        # The relist's snapshot (RV 8) is older than our writes of "a" (RV 9) and "b" (RV 10).
        client_.ListResult([cm("a", "8")], "8"),
    )
    informer, seen = await started(client)
    try:
        assert informer.apply_write(cm("a", "9"))
        assert informer.apply_write(cm("b", "10"))
        client.events.put_nowait(errors.Gone(410, "Expired", "too old resource version"))
        await helpers.eventually(lambda: informer.reflector.lists == 2, what="relisted")
        store = informer.store
        versions = {store_.key_for(o): o["metadata"]["resourceVersion"] for o in store.list()}
        assert versions == {"ns/a": "9", "ns/b": "10"}
        after_writes = seen[seen.index(("add", "b", "10")) + 1 :]
        assert after_writes == [("delete", "c", "3")], "c vanished; a and b are newer than the list"
    finally:
        await informer.stop()


async def test_a_relist_does_not_resurrect_what_a_tombstone_says_is_gone() -> None:
    client = ScriptedClient(
        client_.ListResult([cm("a", "5")], "5"),
        client_.ListResult([cm("a", "5")], "6"),  # a lagging snapshot still has "a"
    )
    informer, seen = await started(client)
    try:
        client.events.put_nowait({"type": "DELETED", "object": cm("a", "7")})
        client.events.put_nowait(errors.Gone(410, "Expired", "too old resource version"))
        await helpers.eventually(lambda: informer.reflector.lists == 2, what="relisted")
        assert "ns/a" not in informer.store
        assert seen == [("add", "a", "5"), ("delete", "a", "5")]  # its last known state
    finally:
        await informer.stop()


# -- item 11: write-through never stores the caller's own dict -----------------------------


async def test_write_through_without_a_transform_copies_the_object() -> None:
    client = ScriptedClient(client_.ListResult([], "1"))
    informer, _ = await started(client, transform=None)
    try:
        mine = cm("a", "2")
        assert informer.apply_write(mine)
        mine["data"]["k"] = "changed by the caller"
        cached = informer.store.get("ns/a")  # debug mode: raises if the cached object changed
        assert cached is not None
        assert cached is not mine
        assert cached["data"] == {"k": "v"}
    finally:
        await informer.stop()
