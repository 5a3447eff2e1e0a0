"""The controller against the real API server: re-parenting an owned object wakes
both owners, and a stop while the caches cannot sync (the kind is not served) is prompt."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from runtime import controller, handler, reconcile, source
from runtime.cache import cache as cache_
from runtime.client import client as client_
from runtime.client import resources
from tests.integration import helpers

CM = resources.default_registry.for_kind("v1", "ConfigMap")
SECRET = resources.default_registry.for_kind("v1", "Secret")
MISSING = resources.Resource("test.rayservice.dev", "v1", "Missing", "missings")


def owner_ref(owner: dict[str, Any]) -> dict[str, Any]:
    meta = owner["metadata"]
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": meta["name"], "uid": meta["uid"],
            "controller": True}  # fmt: skip


async def test_reparenting_an_owned_object_wakes_the_old_and_the_new_owner(
    client: client_.Client, namespace: str
) -> None:
    owners = {}
    for name in ("owner-a", "owner-b"):
        owners[name] = await client.create(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}},
            namespace=namespace,
        )
    await client.create(
        {"apiVersion": "v1", "kind": "Secret",
         "metadata": {"name": "child", "ownerReferences": [owner_ref(owners["owner-a"])]}},
        namespace=namespace,
    )  # fmt: skip
    seen: list[str] = []

    async def reconciler(request: reconcile.Request) -> reconcile.Result:
        seen.append(request.name)
        return reconcile.Result()

    cache = cache_.Cache(client, namespace=namespace)
    ctrl = controller.Controller(f"reparent-{secrets.token_hex(4)}", reconciler)
    ctrl.watch(source.Kind(cache, SECRET, handler.for_owner("v1", "ConfigMap")))
    stop = asyncio.Event()
    task = asyncio.create_task(ctrl.start(stop))
    try:
        await helpers.eventually(lambda: seen == ["owner-a"], 30, "the initial list")
        seen.clear()
        child = await client.get(SECRET, namespace, "child")
        child["metadata"]["ownerReferences"] = [owner_ref(owners["owner-b"])]
        await client.update(child)
        await helpers.eventually(
            lambda: sorted(seen) == ["owner-a", "owner-b"], 30, "both owners reconciled"
        )
        seen.clear()
        child = await client.get(SECRET, namespace, "child")
        child["metadata"]["ownerReferences"] = []
        await client.update(child)
        await helpers.eventually(lambda: seen == ["owner-b"], 30, "the orphaning owner")
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await cache.stop()


class Observed(source.Kind):
    """A Kind source that tells when the controller starts waiting for its cache."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.waiting = asyncio.Event()

    async def wait_for_sync(self) -> None:
        self.waiting.set()
        await super().wait_for_sync()


async def test_stop_while_a_kind_cannot_sync_returns_promptly(client: client_.Client) -> None:
    async def reconciler(request: reconcile.Request) -> reconcile.Result:
        raise AssertionError("nothing to reconcile before the caches sync")

    cache = cache_.Cache(client)
    ctrl = controller.Controller(
        f"nosync-{secrets.token_hex(4)}",
        reconciler,
        options=controller.Options(cache_sync_timeout=3600),
    )
    src = Observed(cache, MISSING)
    ctrl.watch(src)
    stop = asyncio.Event()
    task = asyncio.create_task(ctrl.start(stop))
    try:
        await asyncio.wait_for(src.waiting.wait(), 30)
        assert not cache.informer(MISSING).has_synced()
        assert not task.done()
        stop.set()
        await asyncio.wait_for(task, 5)  # not after the 3600 s sync timeout
    finally:
        stop.set()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await cache.stop()
