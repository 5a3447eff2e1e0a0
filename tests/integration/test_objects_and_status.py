"""create_or_update and the status writer against what a real API server does to
what it is sent: quantities rewritten into canonical form, empty maps dropped, status
fields pruned and defaulted by a CRD schema. None of it may cause a write per reconcile."""

from __future__ import annotations

import datetime
from typing import Any

from runtime import objects, status
from runtime.cache import cache as cache_
from runtime.client import client as client_
from runtime.client import errors, resources
from runtime.testing import controlplane
from tests.integration import helpers

POD = resources.default_registry.for_kind("v1", "Pod")
CM = resources.default_registry.for_kind("v1", "ConfigMap")
PRUNABLES = resources.Resource("test.rayservice.dev", "v1", "Prunable", "prunables")


class CountingClient:
    """The client, counting the writes ``create_or_update`` makes through it."""

    def __init__(self, client: client_.Client) -> None:
        self.client = client
        self.writes: list[str] = []

    async def get(self, resource: resources.Resource, namespace: str | None, name: str) -> Any:
        return await self.client.get(resource, namespace, name)

    async def create(self, obj: dict[str, Any], *, namespace: str | None = None) -> Any:
        self.writes.append("create")
        return await self.client.create(obj, namespace=namespace)

    async def update(self, obj: dict[str, Any], *, subresource: str | None = None) -> Any:
        self.writes.append("update")
        return await self.client.update(obj, subresource=subresource)


def puts(control_plane: controlplane.ControlPlane, resource: str, sub: str = "") -> float:
    """PUTs the API server counted (its verb label is ``UPDATE`` for built-in kinds and
    ``PUT`` for custom resources)."""
    counts = control_plane.request_counts()
    return sum(counts.get((verb, resource, sub), 0) for verb in ("UPDATE", "PUT"))


def pod_mutate(pod: dict[str, Any]) -> None:
    """Says everything in other words than the server stores them."""
    pod["metadata"].setdefault("labels", {})["app"] = "quantities"
    pod["metadata"]["annotations"] = {}
    containers = pod.setdefault("spec", {}).setdefault(
        "containers", [{"name": "main", "image": "example.invalid/none:1"}]
    )
    containers[0]["resources"] = {
        "limits": {"cpu": 2, "memory": "1024Mi"},
        "requests": {"cpu": "1000m", "memory": "0.5Gi"},
    }
    containers[0]["env"] = [{"name": "N", "value": "1000m"}]


async def test_pod_quantities_in_other_words_make_no_write(
    control_plane: controlplane.ControlPlane, client: client_.Client, namespace: str
) -> None:
    cache = cache_.Cache(client, namespace=namespace, debug=True)
    counting = CountingClient(client)
    try:
        op, created = await objects.create_or_update(
            counting, POD, namespace, "q", pod_mutate, cache=cache
        )
        assert op is objects.Operation.CREATED
        container = created["spec"]["containers"][0]
        assert container["resources"] == {  # the server's words for the same values
            "limits": {"cpu": "2", "memory": "1Gi"},
            "requests": {"cpu": "1", "memory": "512Mi"},
        }
        assert "annotations" not in created["metadata"]
        assert container["env"] == [{"name": "N", "value": "1000m"}]  # a string stays one
        updates = puts(control_plane, "pods")
        for _ in range(3):
            op, _ = await objects.create_or_update(
                counting, POD, namespace, "q", pod_mutate, cache=cache
            )
            assert op is objects.Operation.UNCHANGED
        assert counting.writes == ["create"]
        assert puts(control_plane, "pods") == updates

        def relabel(pod: dict[str, Any]) -> None:  # a real change is still written
            pod_mutate(pod)
            pod["metadata"]["labels"]["tier"] = "new"

        async def relabelled() -> dict[str, Any] | None:
            try:  # the scheduler and kwok write the pod too: a stale cache means 409, retry
                op, updated = await objects.create_or_update(
                    counting, POD, namespace, "q", relabel, cache=cache
                )
            except errors.Conflict:
                return None
            assert op is objects.Operation.UPDATED
            return updated

        updated = await helpers.eventually(relabelled, 30, "the relabel written")
        assert updated["metadata"]["labels"]["tier"] == "new"
        cache.verify()
    finally:
        await cache.stop()


async def test_configmap_empty_maps_make_no_write(client: client_.Client, namespace: str) -> None:
    cache = cache_.Cache(client, namespace=namespace, debug=True)
    counting = CountingClient(client)

    def mutate(cm: dict[str, Any]) -> None:
        cm["metadata"]["labels"] = {}
        cm["metadata"]["finalizers"] = []
        cm["data"] = {"k": "v"}
        cm["binaryData"] = {}

    try:
        for expected in ("created", "unchanged", "unchanged"):
            op, obj = await objects.create_or_update(
                counting, CM, namespace, "c", mutate, cache=cache
            )
            assert op.value == expected
            obj["data"]["k"] = "mine"  # the caller's own copy
        assert counting.writes == ["create"]
        cache.verify()
    finally:
        await cache.stop()


def stamp() -> str:
    """A new value on every write (as ``lastUpdateTime`` is, at a second's resolution)."""
    return datetime.datetime.now(datetime.UTC).isoformat()


async def test_status_the_schema_prunes_and_defaults_is_written_once(
    control_plane: controlplane.ControlPlane, client: client_.Client, namespace: str
) -> None:
    client.registry.register(PRUNABLES)
    cache = cache_.Cache(client, namespace=namespace, debug=True)
    writer = status.StatusWriter(client, volatile={"lastUpdateTime"},
                                 stamps={"lastUpdateTime": stamp})  # fmt: skip
    desired = {
        "phase": "Ready",
        "extra": "not in the schema",
        "conditions": [{"type": "Ready", "status": "True", "reason": "not in the schema"}],
    }
    try:
        for name in ("p1", "p2"):
            await client.create({"apiVersion": "test.rayservice.dev/v1", "kind": "Prunable",
                                 "metadata": {"name": name, "namespace": namespace},
                                 "spec": {"size": 1}})  # fmt: skip
        before = puts(control_plane, "prunables", "status")
        outcomes = []
        for _ in range(10):  # each write would be a watch event, and so another reconcile
            obj = await helpers.eventually(lambda: _cached(cache, namespace, "p1"), 30, "p1")
            outcomes.append((await writer.update(obj, desired)).outcome.value)
        assert outcomes == ["written"] + ["skipped"] * 9
        stored = (await client.get(PRUNABLES, namespace, "p1"))["status"]
        assert stored["mode"] == "auto"
        assert "extra" not in stored
        assert stored["conditions"] == [{"type": "Ready", "status": "True"}]
        assert sorted(writer.learned()) == [
            ("Prunable", "status.conditions[*].reason", "pruned"),
            ("Prunable", "status.extra", "pruned"),
            ("Prunable", "status.mode", "defaulted"),
        ]
        # p2 gets its status once too, and then keeps it
        for _ in range(3):
            obj = await helpers.eventually(lambda: _cached(cache, namespace, "p2"), 30, "p2")
            await writer.update(obj, desired)
        assert puts(control_plane, "prunables", "status") == before + 2
        # a real change is still written
        obj = await cache.get(PRUNABLES, namespace, "p1")
        changed = await writer.update(obj, {**desired, "phase": "Done"})
        assert changed.outcome is status.Outcome.WRITTEN
        assert changed.obj["status"]["phase"] == "Done"
    finally:
        await cache.stop()


async def _cached(cache: cache_.Cache, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return await cache.get(PRUNABLES, namespace, name)
    except errors.NotFound:
        return None
