"""The cache fed by the watch alone: changes another client makes (no write-through) reach
our cache once each, in order, interleaved with our own write-through writes; a write of
ours from a stale cached copy conflicts and leaves the cache as the server has it."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from runtime.cache import cache as cache_
from runtime.client import client as client_
from runtime.client import errors
from runtime.testing import controlplane
from tests.integration import helpers

WIDGETS = helpers.WIDGETS


def widget(name: str, size: int) -> dict[str, Any]:
    return {"apiVersion": "test.rayservice.dev/v1", "kind": "Widget",
            "metadata": {"name": name}, "spec": {"size": size}}  # fmt: skip


def rv(obj: dict[str, Any] | None) -> str | None:
    return obj["metadata"]["resourceVersion"] if obj else None


async def test_another_clients_changes_reach_the_cache_once_each_in_order(
    control_plane: controlplane.ControlPlane, client: client_.Client, namespace: str
) -> None:
    other = await client_.Client.from_kubeconfig(control_plane.kubeconfig)
    other.registry.register(helpers.WIDGETS)
    cache = cache_.Cache(client, namespace=namespace, debug=True)
    informer = cache.informer(helpers.WIDGETS)
    seen: list[tuple[str, str, str]] = []
    informer.add_handler(lambda e: seen.append((e.obj["metadata"]["name"], e.type, rv(e.obj))))  # type: ignore[arg-type]
    key = f"{namespace}/w"

    async def cached_at(version: str, what: str) -> None:
        await helpers.eventually(lambda: rv(informer.store.get(key)) == version, 30, what)

    try:
        informer.start()
        await asyncio.wait_for(informer.wait_for_sync(), 30)
        created = await other.create(widget("w", 1), namespace=namespace)
        await cached_at(rv(created), "their create")  # type: ignore[arg-type]
        changed = copy.deepcopy(created)
        changed["spec"]["size"] = 2
        changed = await other.update(changed)
        await cached_at(rv(changed), "their spec change")  # type: ignore[arg-type]
        changed["status"] = {"phase": "Ready"}
        with_status = await other.update_status(changed)
        await cached_at(rv(with_status), "their status write")  # type: ignore[arg-type]
        cached = await cache.get(helpers.WIDGETS, namespace, "w")
        assert cached["status"] == {"phase": "Ready"}
        assert cached["metadata"]["generation"] == 2

        # Our write is in the cache at once (write-through); its watch event is not
        # delivered again.
        mine = copy.deepcopy(cached)
        mine["spec"]["size"] = 3
        ours = await client.update(mine)
        assert rv(informer.store.get(key)) == rv(ours)
        # They write on top of ours; our next write, from the copy we had, conflicts.
        theirs = await other.get(helpers.WIDGETS, namespace, "w")
        theirs["spec"]["size"] = 4
        theirs = await other.update(theirs)
        await cached_at(rv(theirs), "their write after ours")  # type: ignore[arg-type]
        stale = copy.deepcopy(ours)
        stale["spec"]["size"] = 5
        with pytest.raises(errors.Conflict):
            await client.update(stale)
        assert informer.store.get(key)["spec"]["size"] == 4  # type: ignore[index]

        await other.delete(helpers.WIDGETS, namespace, "w")
        await helpers.eventually(lambda: key not in informer.store, 30, "their delete")
        with pytest.raises(errors.NotFound):
            await cache.get(helpers.WIDGETS, namespace, "w")
        # One stream, in order: once a later object arrived, every event for "w" has.
        await other.create(widget("marker", 1), namespace=namespace)
        await helpers.eventually(lambda: f"{namespace}/marker" in informer.store, 30, "marker")
        assert [(kind, version) for name, kind, version in seen if name == "w"] == [
            ("add", rv(created)), ("update", rv(changed)), ("update", rv(with_status)),
            ("update", rv(ours)), ("update", rv(theirs)), ("delete", rv(theirs)),
        ]  # fmt: skip
        assert informer.reflector.lists == 1, "no relist: the watch carried everything"
    finally:
        await cache.stop()
        await other.close()
