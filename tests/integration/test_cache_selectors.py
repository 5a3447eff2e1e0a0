"""Per-resource cache options against kube-apiserver: the selectors reach the server on list
and watch, so a Pod outside them never reaches the store (nor the handlers), one inside does,
and one that leaves them leaves the cache. Given through the builder, with an index, they are
what a reconciler run by a manager sees."""

from __future__ import annotations

import asyncio
from typing import Any

import runtime
from runtime import manager as manager_
from runtime.cache import cache as cache_
from runtime.client import client as client_
from runtime.client import errors, resources
from runtime.testing import controlplane
from tests.integration import helpers

POD = resources.default_registry.for_kind("v1", "Pod")


def pod(name: str, restart: str = "Always", **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels},
            "spec": {"restartPolicy": restart,
                     "containers": [{"name": "c", "image": "busybox"}]}}  # fmt: skip


async def check_filtered_view(
    cp: controlplane.ControlPlane,
    client: client_.Client,
    namespace: str,
    options: cache_.ByResource,
    inside: dict[str, Any],
    outside: dict[str, Any],
) -> cache_.Cache:
    other = await client_.Client.from_kubeconfig(cp.kubeconfig)
    async with other:
        # One of each exists before the first list, one of each is created while watching:
        # by another client (the watch alone) and by ours (write-through).
        await other.create({**outside, "metadata": {**outside["metadata"], "name": "out-0"}},
                           namespace=namespace)  # fmt: skip
        await other.create({**inside, "metadata": {**inside["metadata"], "name": "in-0"}},
                           namespace=namespace)  # fmt: skip
        cache = cache_.Cache(client, namespace=namespace, by_resource={POD: options}, debug=True)
        seen: list[str] = []
        informer = cache.informer(POD)
        informer.add_handler(lambda e: seen.append(e.obj["metadata"]["name"]))
        informer.start()
        await asyncio.wait_for(informer.wait_for_sync(), 30)
        for name, creator in (("1", other), ("2", client)):
            await creator.create(
                {**outside, "metadata": {**outside["metadata"], "name": f"out-{name}"}},
                namespace=namespace,
            )
            await creator.create(
                {**inside, "metadata": {**inside["metadata"], "name": f"in-{name}"}},
                namespace=namespace,
            )
        await helpers.eventually(lambda: {"in-0", "in-1", "in-2"} <= set(seen), 30, "inside pods")
        # The watch delivers in order: the out-1 create came before in-1, out-2 before in-2.
        assert not [n for n in seen if n.startswith("out-")], seen
        assert sorted(o["metadata"]["name"] for o in await cache.list(POD)) == [
            "in-0", "in-1", "in-2",
        ]  # fmt: skip
        for name in ("out-0", "out-1", "out-2"):
            try:
                await cache.get(POD, namespace, name)
            except errors.NotFound:
                continue
            raise AssertionError(f"{name} is outside the selectors but in the cache")
        # Every one of them is there, as the client (not the cache) sees.
        assert len((await client.list(POD, namespace)).items) == 6
        return cache


async def test_a_label_selector_keeps_other_pods_out_of_the_store(
    control_plane: controlplane.ControlPlane, client: client_.Client, namespace: str
) -> None:
    selector = "ray.io/node-type in (head,worker)"
    cache = await check_filtered_view(
        control_plane, client, namespace, cache_.ByResource(label_selector=selector),
        inside=pod("x", **{"ray.io/node-type": "worker"}), outside=pod("x", app="web"),
    )  # fmt: skip
    try:
        # A pod that loses the label leaves the cache (the server's watch says DELETED).
        other = await client_.Client.from_kubeconfig(control_plane.kubeconfig)
        async with other:
            await other.patch(POD, namespace, "in-1",
                              {"metadata": {"labels": {"ray.io/node-type": None}}})  # fmt: skip
        await helpers.eventually(
            lambda: f"{namespace}/in-1" not in cache.informer(POD).store, 30, "in-1 leaving"
        )
        cache.verify()
    finally:
        await cache.stop()


async def test_a_field_selector_keeps_other_pods_out_of_the_store(
    control_plane: controlplane.ControlPlane, client: client_.Client, namespace: str
) -> None:
    cache = await check_filtered_view(
        control_plane, client, namespace,
        cache_.ByResource(field_selector="spec.restartPolicy=Never"),
        inside=pod("x", restart="Never"), outside=pod("x"),
    )  # fmt: skip
    try:
        assert [r.field_selector for r in cache.informer(POD).reflectors] == [
            "spec.restartPolicy=Never"
        ]
        cache.verify()
    finally:
        await cache.stop()


CM = resources.default_registry.for_kind("v1", "ConfigMap")


def colour_index(obj: dict[str, Any]) -> list[str]:
    return [obj.get("data", {}).get("colour", "")]


async def test_a_reconciler_lists_by_a_builder_index_over_the_builders_selector(
    control_plane: controlplane.ControlPlane, client: client_.Client, namespace: str
) -> None:
    """A manager on kube-apiserver whose only controller is built with
    ``for_(ConfigMaps, cache=ByResource(label_selector=...))`` and ``with_index``: the
    unlabelled ConfigMap is never reconciled nor found by the index, and the index
    follows an update."""
    mgr = manager_.Manager(client, manager_.Options(
        name="index-test", namespace=namespace, metrics_bind_address="0",
        health_probe_bind_address="0",
        graceful_shutdown_timeout=5.0))  # fmt: skip
    reconciled: list[str] = []
    red: list[list[str]] = []

    async def reconcile_(request: runtime.Request) -> runtime.Result:
        reconciled.append(request.name)
        found = await mgr.cache.list(CM, index=("colour", "red"))
        red.append(sorted(o["metadata"]["name"] for o in found))
        return runtime.Result()

    (
        runtime.Builder(mgr)
        .for_(CM, cache=cache_.ByResource(label_selector="app=mine"))
        .with_index(CM, "colour", colour_index)
        .named(f"cm-colours-{namespace}")
        .complete(reconcile_)
    )

    def configmap(name: str, colour: str, **labels: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "data": {"colour": colour}}  # fmt: skip

    await client.create(configmap("theirs", "red"))  # before the start: the list skips it
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        await client.create(configmap("a", "red", app="mine"))
        await client.create(configmap("b", "blue", app="mine"))
        await client.create(configmap("late", "red"))  # while watching: the watch skips it
        await helpers.eventually(lambda: {"a", "b"} <= set(reconciled), 30, "a and b")
        assert red[-1] == ["a"]
        b = await client.get(CM, namespace, "b")
        b["data"]["colour"] = "red"
        await client.update(b)
        await helpers.eventually(lambda: red[-1] == ["a", "b"], 30, "b turning red")
        assert set(reconciled) == {"a", "b"}, "the unlabelled ConfigMaps were never seen"
        assert len((await client.list(CM, namespace)).items) >= 4  # the client sees them all
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
