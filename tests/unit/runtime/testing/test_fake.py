"""The fake client answers like kube-apiserver (each behaviour here is also checked against
the real server by tests/integration/test_fake_vs_apiserver.py)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest

from runtime.client import errors, resources
from runtime.testing import fake

CM = resources.default_registry.for_kind("v1", "ConfigMap")
NAMESPACES = resources.default_registry.for_kind("v1", "Namespace")
WIDGET = resources.Resource("test.rayservice.dev", "v1", "Widget", "widgets")


def cm(name: str = "a", **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "data": {"k": "v"}}  # fmt: skip


def widget(name: str = "w", size: int = 1) -> dict[str, Any]:
    return {"apiVersion": "test.rayservice.dev/v1", "kind": "Widget",
            "metadata": {"name": name, "namespace": "ns"}, "spec": {"size": size}}  # fmt: skip


def new_client() -> fake.FakeClient:
    registry = resources.default_registry.copy()
    registry.register(WIDGET)
    return fake.FakeClient(registry, namespaces=["ns"])


async def take(events: AsyncIterator[dict[str, Any]], n: int) -> list[tuple[str, str]]:
    """The next ``n`` events as (type, name), within a bound."""
    got: list[tuple[str, str]] = []
    async with asyncio.timeout(2):
        async for event in events:
            got.append((event["type"], event["object"]["metadata"].get("name", "")))
            if len(got) == n:
                break
    return got


async def test_resource_version_generation_and_conflicts() -> None:
    client = new_client()
    created = await client.create(widget())
    assert created["metadata"]["generation"] == 1
    with pytest.raises(errors.AlreadyExists):
        await client.create(widget())
    stale = copy.deepcopy(created)
    created["spec"] = {"size": 2}
    updated = await client.update(created)
    assert updated["metadata"]["generation"] == 2
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    stale["spec"] = {"size": 3}
    with pytest.raises(errors.Conflict):
        await client.update(stale)
    noop = await client.update(copy.deepcopy(updated))
    assert noop["metadata"]["resourceVersion"] == updated["metadata"]["resourceVersion"]
    labelled = copy.deepcopy(noop)
    labelled["metadata"]["labels"] = {"a": "b"}
    assert (await client.update(labelled))["metadata"]["generation"] == 2, "metadata is not spec"


async def test_status_subresource_is_separate() -> None:
    client = new_client()
    obj = widget()
    obj["status"] = {"phase": "dropped"}
    created = await client.create(obj)
    assert "status" not in created
    created["status"] = {"phase": "A"}
    created["spec"] = {"size": 7}  # ignored by status writes
    after = await client.update_status(created)
    assert after["status"] == {"phase": "A"}
    assert after["spec"] == {"size": 1}
    assert after["metadata"]["generation"] == 1
    after["status"] = {"phase": "ignored by spec writes"}
    after["spec"] = {"size": 2}
    final = await client.update(after)
    assert final["status"] == {"phase": "A"}
    assert final["spec"] == {"size": 2}


async def test_a_config_map_has_no_generation_and_no_status_subresource() -> None:
    client = new_client()
    created = await client.create(cm())
    assert "generation" not in created["metadata"]
    created["data"] = {"k": "v2"}
    updated = await client.update(created)
    assert "generation" not in updated["metadata"]
    updated["status"] = {"x": 1}
    with pytest.raises(errors.NotFound):
        await client.update_status(updated)
    with pytest.raises(errors.NotFound):
        await client.patch(CM, "ns", "a", {"status": {"x": 1}}, subresource="status")
    assert "status" not in await client.get(CM, "ns", "a")


async def test_a_custom_resource_update_needs_a_resource_version() -> None:
    client = new_client()
    created = await client.create(widget())
    del created["metadata"]["resourceVersion"]
    created["spec"] = {"size": 2}
    with pytest.raises(errors.Invalid, match="must be specified for an update"):
        await client.update(created)
    with pytest.raises(errors.Invalid, match="must be specified for an update"):
        await client.update_status(created)
    unconditional = await client.create(cm())
    del unconditional["metadata"]["resourceVersion"]
    unconditional["data"] = {"k": "v2"}
    assert (await client.update(unconditional))["data"] == {"k": "v2"}, "built-ins allow it"


async def test_a_create_with_a_resource_version_is_refused() -> None:
    client = new_client()
    obj = cm()
    obj["metadata"]["resourceVersion"] = "5"
    with pytest.raises(errors.ServerError, match="resourceVersion should not be set"):
        await client.create(obj)
    assert client.objects(CM) == []
    obj["metadata"]["resourceVersion"] = "0"
    assert await client.create(obj), '"0" is no version, and accepted'


async def test_delete_with_a_finalizer_bumps_the_generation() -> None:
    client = new_client()
    obj = widget()
    obj["metadata"]["finalizers"] = ["x"]
    await client.create(obj)
    held = await client.delete(WIDGET, "ns", "w")
    assert held is not None
    assert held["metadata"]["deletionTimestamp"]
    assert held["metadata"]["deletionGracePeriodSeconds"] == 0
    assert held["metadata"]["generation"] == 2
    again = await client.delete(WIDGET, "ns", "w")
    assert again == held, "a second delete changes nothing"
    held["metadata"]["finalizers"].append("y")
    with pytest.raises(errors.Invalid, match="no new finalizers"):
        await client.update(held)
    config = cm()
    config["metadata"]["finalizers"] = ["x"]
    await client.create(config)
    held_cm = await client.delete(CM, "ns", "a")
    assert held_cm is not None
    assert held_cm["metadata"]["deletionTimestamp"]
    assert "generation" not in held_cm["metadata"]


async def test_removing_the_last_finalizer_deletes_and_is_observed() -> None:
    client = new_client()
    obj = widget()
    obj["metadata"]["finalizers"] = ["x"]
    await client.create(obj)
    held = await client.delete(WIDGET, "ns", "w")
    assert held is not None
    seen: list[dict[str, Any]] = []
    client.add_write_observer(seen.append)
    async with contextlib.aclosing(
        client.watch(WIDGET, "ns", resource_version=client.resource_version)
    ) as events:
        rv_before = int(client.resource_version)
        held["metadata"]["finalizers"] = []
        answer = await client.update(held)
        assert [o["metadata"]["name"] for o in seen] == ["w"], "write observers see the update"
        assert seen[0] == answer
        assert "finalizers" not in answer["metadata"], "the server drops an empty list"
        assert answer["metadata"]["resourceVersion"] == held["metadata"]["resourceVersion"]
        assert int(client.resource_version) == rv_before + 1, "one change: the deletion"
        [(kind, _)] = await take(events, 1)
        assert kind == "DELETED"
    with pytest.raises(errors.NotFound):
        await client.get(WIDGET, "ns", "w")


async def test_delete_answers_a_status_or_the_held_object() -> None:
    client = new_client()
    created = await client.create(cm())
    answer = await client.delete(CM, "ns", "a")
    assert answer is not None
    assert answer["kind"] == "Status"
    assert answer["status"] == "Success"
    assert answer["details"] == {
        "name": "a",
        "kind": "configmaps",
        "uid": created["metadata"]["uid"],
    }
    await client.create(widget())
    answer = await client.delete(WIDGET, "ns", "w")
    assert answer is not None
    assert answer["kind"] == "Status"
    assert answer["details"]["group"] == "test.rayservice.dev"
    await client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gone"}})
    answer = await client.delete(NAMESPACES, None, "gone")
    assert answer is not None
    assert answer["kind"] == "Namespace", "namespaces (like pods and services) answer the object"


async def test_create_in_a_missing_namespace_is_not_found() -> None:
    client = fake.FakeClient()
    with pytest.raises(errors.NotFound, match='namespaces "ns" not found'):
        await client.create(cm())
    assert await client.create({**cm(), "metadata": {"name": "a", "namespace": "default"}})
    await client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    assert await client.create(cm())
    names = {o["metadata"]["name"] for o in (await client.list(NAMESPACES)).items}
    assert {"default", "kube-system", "ns"} <= names
    client.add_namespaces("other")
    assert await client.create({**cm(), "metadata": {"name": "a", "namespace": "other"}})
    await client.delete(NAMESPACES, None, "other")
    assert [o["metadata"]["namespace"] for o in client.objects(CM)] == ["default", "ns"]


async def test_a_label_selector_watch_sees_objects_leave_and_enter_it() -> None:
    client = new_client()
    await client.create(cm("a", app="web"))
    async with contextlib.aclosing(
        client.watch(CM, "ns", resource_version=client.resource_version, label_selector="app=web")
    ) as events:
        current = await client.get(CM, "ns", "a")
        current["metadata"]["labels"] = {"app": "db"}
        moved = await client.update(current)
        moved["metadata"]["labels"] = {"app": "web"}
        await client.update(moved)
        assert await take(events, 2) == [("DELETED", "a"), ("ADDED", "a")]


async def test_field_selectors_filter_lists_and_watches() -> None:
    client = new_client()
    await client.create(cm("a"))
    await client.create(cm("b"))
    listed = await client.list(CM, "ns", field_selector="metadata.name!=a")
    assert [o["metadata"]["name"] for o in listed.items] == ["b"]
    both = await client.list(CM, field_selector="metadata.namespace=ns,metadata.name=a")
    assert [o["metadata"]["name"] for o in both.items] == ["a"]
    async with contextlib.aclosing(client.watch(CM, "ns", field_selector="data.k=v")) as events:
        assert sorted(await take(events, 2)) == [("ADDED", "a"), ("ADDED", "b")]
        a = await client.get(CM, "ns", "a")
        a["data"] = {"k": "other"}
        a = await client.update(a)
        await client.create(cm("c"))
        a["data"] = {"k": "v"}
        await client.update(a)
        assert await take(events, 3) == [("DELETED", "a"), ("ADDED", "c"), ("ADDED", "a")]
    with pytest.raises(ValueError, match="invalid field selector"):
        await client.list(CM, field_selector="metadata.name")


async def test_a_watch_without_resource_version_starts_with_the_current_objects() -> None:
    client = new_client()
    await client.create(cm("a"))
    await client.create(cm("b", app="web"))
    async with contextlib.aclosing(client.watch(CM, "ns")) as events:
        assert sorted(await take(events, 2)) == [("ADDED", "a"), ("ADDED", "b")]
        await client.create(cm("c"))
        assert await take(events, 1) == [("ADDED", "c")]
    async with contextlib.aclosing(client.watch(CM, "ns", label_selector="app=web")) as events:
        assert await take(events, 1) == [("ADDED", "b")]


async def test_compaction_ends_only_new_watches_and_expire_watches_ends_open_ones() -> None:
    client = new_client()
    await client.create(cm("a"))
    old_rv = client.resource_version
    await client.create(cm("b"))
    last_rv = client.resource_version
    await client.create(cm("c"))
    async with contextlib.aclosing(client.watch(CM, "ns", resource_version=old_rv)) as events:
        assert await take(events, 2) == [("ADDED", "b"), ("ADDED", "c")]
        client.compact()
        await client.create(cm("d"))
        assert await take(events, 1) == [("ADDED", "d")], "an open watch keeps streaming"
        with pytest.raises(errors.Gone):
            await take(client.watch(CM, "ns", resource_version=old_rv), 1)
        # etcd keeps the revision it compacted at: a watch just before it still works.
        async with contextlib.aclosing(client.watch(CM, resource_version=last_rv)) as recent:
            assert await take(recent, 2) == [("ADDED", "c"), ("ADDED", "d")]
        client.expire_watches()
        with pytest.raises(errors.Gone):
            await take(events, 1)
