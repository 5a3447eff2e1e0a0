"""The cache against the real API server: big objects, finalizer deletes racing our own
writes, lists racing write-through, and label selectors the server and the cache agree on."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from runtime import metrics
from runtime.cache import cache as cache_
from runtime.cache import informer as informer_
from runtime.cache import selector as selector_
from runtime.client import client as client_
from runtime.client import errors, resources
from runtime.testing import controlplane
from tests.integration import helpers
from tests.support import selectors

CM = resources.default_registry.for_kind("v1", "ConfigMap")
MIB = 1024 * 1024
FINALIZER = "test.rayservice.dev/hold"


def configmap(name: str, **fields: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, **fields}


def reflector_errors() -> float:
    value = metrics.registry.get_sample_value("reflector_errors_total", {"resource": str(CM)})
    return value or 0.0


@pytest.mark.parametrize("watch_list", [False, True], ids=["list+watch", "watch-list"])
async def test_a_1mib_configmap_reaches_the_cache_and_the_watch_goes_on(
    control_plane: controlplane.ControlPlane, client: client_.Client, namespace: str,
    watch_list: bool,
) -> None:  # fmt: skip
    # Another writer: our own client's writes would reach the cache by write-through.
    other = await client_.Client.from_kubeconfig(control_plane.kubeconfig)
    await other.create(configmap("big-before", data={"k": "b" * MIB}), namespace=namespace)
    cache = cache_.Cache(client, namespace=namespace, watch_list=watch_list, debug=True)
    errors_before = reflector_errors()
    try:
        # (with watch_list, the initial state itself is a stream of watch events)
        await asyncio.wait_for(cache.list(CM), 30)
        store = cache.informer(CM).store
        # (a list at resourceVersion 0 may predate the create; the watch then brings it)
        await helpers.eventually(lambda: f"{namespace}/big-before" in store, 30, "big-before")
        assert len(store.get(f"{namespace}/big-before")["data"]["k"]) == MIB  # type: ignore[index]
        # A watch event carrying 1 MiB (aiohttp's line reader stops at 512 KiB).
        await other.create(configmap("big", data={"k": "x" * MIB}), namespace=namespace)
        await helpers.eventually(lambda: f"{namespace}/big" in store, 30, "the 1 MiB object")
        assert len(store.get(f"{namespace}/big")["data"]["k"]) == MIB  # type: ignore[index]
        await other.create(configmap("small", data={"k": "v"}), namespace=namespace)
        await helpers.eventually(lambda: f"{namespace}/small" in store, 30, "the watch goes on")
        assert reflector_errors() == errors_before, "no error, no relist"
        assert cache.informer(CM).reflector.lists == 1
    finally:
        await cache.stop()
        await other.close()


async def test_removing_the_last_finalizer_leaves_no_ghost_in_the_cache(
    client: client_.Client, namespace: str
) -> None:
    cache = cache_.Cache(client, namespace=namespace, debug=True)
    informer = cache.informer(CM)
    events: list[informer_.Event] = []
    informer.add_handler(events.append)
    informer.start()
    key = f"{namespace}/held"
    try:
        await informer.wait_for_sync()
        await client.create(configmap("held", metadata={"name": "held", "finalizers": [FINALIZER]}),
                            namespace=namespace)  # fmt: skip
        await client.delete(CM, namespace, "held")
        deleting = await helpers.eventually(
            lambda: (o := informer.store.get(key)) and "deletionTimestamp" in o["metadata"] and o,
            30, "the deletionTimestamp in the cache",
        )  # fmt: skip
        released = copy.deepcopy(deleting)
        released["metadata"]["finalizers"] = []
        reply = await client.update(released)  # the server deletes the object
        await helpers.eventually(lambda: key not in informer.store, 30, "the DELETED event")
        # The same reply arriving only now (after the DELETED event) must not bring it back.
        assert not informer.apply_write(reply)
        assert not informer.apply_write(copy.deepcopy(deleting))  # nor an older copy
        assert key not in informer.store
        with pytest.raises(errors.NotFound):
            await cache.get(CM, namespace, "held")
        mine = [e.type for e in events if e.obj["metadata"]["name"] == "held"]
        assert mine[-1] == "delete"
        assert "add" not in mine[mine.index("delete") :], f"resurrected: {mine}"
    finally:
        await cache.stop()


class HeldLists(client_.Client):
    """A client whose lists, once fetched, wait for ``release`` before they are returned,
    so a test can write while the list's snapshot is already taken."""

    fetched: asyncio.Event
    release: asyncio.Event

    async def list(self, *args: Any, **kwargs: Any) -> client_.ListResult:
        result = await super().list(*args, **kwargs)
        self.fetched.set()
        await self.release.wait()
        return result


async def test_a_list_does_not_undo_writes_made_after_its_snapshot(
    control_plane: controlplane.ControlPlane, namespace: str
) -> None:
    client = await HeldLists.from_kubeconfig(control_plane.kubeconfig)
    client.fetched, client.release = asyncio.Event(), asyncio.Event()
    await client.create(configmap("a", data={"v": "1"}), namespace=namespace)
    cache = cache_.Cache(client, namespace=namespace, debug=True)
    informer = cache.informer(CM)
    events: list[tuple[str, str, str]] = []
    informer.add_handler(
        lambda e: events.append((e.type, e.obj["metadata"]["name"], e.obj["data"]["v"]))
    )
    try:
        informer.start()
        await asyncio.wait_for(client.fetched.wait(), 30)
        # The list's snapshot is taken; our writes land in the store first (write-through).
        a = await client.get(CM, namespace, "a")
        a["data"]["v"] = "2"
        written_a = await client.update(a)
        written_b = await client.create(configmap("b", data={"v": "1"}), namespace=namespace)
        client.release.set()
        await informer.wait_for_sync()
        store = informer.store
        assert (
            store.get(f"{namespace}/a")["metadata"]["resourceVersion"]
            == (  # type: ignore[index]
                written_a["metadata"]["resourceVersion"]
            )
        )
        assert f"{namespace}/b" in store
        assert ("delete", "b", "1") not in events, "b was written after the snapshot"
        assert ("update", "a", "1") not in events, "a was not rolled back to the snapshot"
        # The watch from the list's resourceVersion then changes nothing.
        fresh = await client.list(CM, namespace)
        await helpers.eventually(
            lambda: {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in store.list()}
            == {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in fresh.items},
            30, "the cache equal to a fresh list",
        )  # fmt: skip
        assert (
            written_b["metadata"]["resourceVersion"]
            == (
                store.get(f"{namespace}/b")["metadata"]["resourceVersion"]  # type: ignore[index]
            )
        )
    finally:
        await cache.stop()
        await client.close()


async def test_label_selectors_are_accepted_and_matched_as_by_the_server(
    client: client_.Client, namespace: str
) -> None:
    labelled = {"none": {}, "a-empty": {"a": ""}, "a-x": {"a": "x"},
                "a-y-b5": {"a": "y", "b": "5"}, "b7": {"b": "7"}, "in": {"in": "notin"},
                "app": {"app.kubernetes.io/name": "web", "tier": "front"}}  # fmt: skip
    for name, labels in labelled.items():
        await client.create(configmap(name, metadata={"name": name, "labels": labels}),
                            namespace=namespace)  # fmt: skip
    texts = sorted({*selectors.REJECTED, *(text for text, _, _ in selectors.ACCEPTED)})
    disagreements = []
    for text in texts:
        try:
            listed = await client.list(CM, namespace, label_selector=text)
            server: set[str] | str = {o["metadata"]["name"] for o in listed.items}
        except errors.BadRequest:
            server = "rejected"
        try:
            parsed = selector_.parse(text)
            ours: set[str] | str = {n for n, labels in labelled.items() if parsed.matches(labels)}
        except ValueError:
            ours = "rejected"
        if server != ours:
            disagreements.append((text, server, ours))
    assert disagreements == []


POD = resources.default_registry.for_kind("v1", "Pod")


async def test_our_deletes_reach_the_cache_before_the_watch(
    client: client_.Client, namespace: str
) -> None:
    cache = cache_.Cache(client, namespace=namespace, debug=True)
    try:
        await client.create(configmap("gone"), namespace=namespace)
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "graceful"},
               "spec": {"containers": [{"name": "c", "image": "busybox"}]}}  # fmt: skip
        await client.create(pod, namespace=namespace)
        await helpers.eventually(lambda: cache.get(CM, namespace, "gone"), 30, "the ConfigMap")

        async def running() -> dict[str, Any] | None:
            found = await cache.get(POD, namespace, "graceful")
            return found if (found.get("status") or {}).get("phase") == "Running" else None

        await helpers.eventually(running, 60, "the pod bound and Running (kwok)")
        # A ConfigMap goes at once: the server answers a Status, the cache drops it now.
        await client.delete(CM, namespace, "gone")
        with pytest.raises(errors.NotFound):
            await cache.get(CM, namespace, "gone")
        # A bound pod has a grace period: the server answers it terminating, and so does
        # the cache, at once - then the watch brings its end.
        answer = await client.delete(POD, namespace, "graceful")
        assert answer is not None
        assert answer["metadata"].get("deletionTimestamp")
        cached = await cache.get(POD, namespace, "graceful")
        assert cached["metadata"]["deletionTimestamp"] == answer["metadata"]["deletionTimestamp"]

        async def gone() -> bool:
            try:
                await cache.get(POD, namespace, "graceful")
            except errors.NotFound:
                return True
            return False

        await helpers.eventually(gone, 60, "the pod gone from the cache")
    finally:
        await cache.stop()
