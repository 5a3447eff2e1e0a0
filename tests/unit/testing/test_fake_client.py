from __future__ import annotations

import copy

import pytest

from runtime.client import errors, resources
from runtime.testing import fake

CM = resources.default_registry.for_kind("v1", "ConfigMap")


def cm(name: str = "a") -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns"}, "data": {"k": "v"}}  # fmt: skip


async def test_resource_version_generation_and_conflicts() -> None:
    client = fake.FakeClient()
    created = await client.create(cm())
    assert created["metadata"]["generation"] == 1
    with pytest.raises(errors.AlreadyExists):
        await client.create(cm())
    stale = copy.deepcopy(created)
    created["data"] = {"k": "v2"}
    updated = await client.update(created)
    assert updated["metadata"]["generation"] == 2
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    stale["data"] = {"k": "v3"}
    with pytest.raises(errors.Conflict):
        await client.update(stale)
    noop = await client.update(copy.deepcopy(updated))
    assert noop["metadata"]["resourceVersion"] == updated["metadata"]["resourceVersion"]


async def test_status_subresource_is_separate() -> None:
    client = fake.FakeClient()
    obj = cm()
    obj["status"] = {"dropped": True}
    created = await client.create(obj)
    assert "status" not in created
    created["status"] = {"phase": "A"}
    created["data"] = {"ignored": "by status writes"}
    after = await client.update_status(created)
    assert after["status"] == {"phase": "A"}
    assert after["data"] == {"k": "v"}
    assert after["metadata"]["generation"] == 1
    after["status"] = {"phase": "ignored by spec writes"}
    after["data"] = {"k": "new"}
    final = await client.update(after)
    assert final["status"] == {"phase": "A"}
    assert final["data"] == {"k": "new"}


async def test_finalizers_hold_deletion() -> None:
    client = fake.FakeClient()
    obj = cm()
    obj["metadata"]["finalizers"] = ["x"]  # type: ignore[index]
    await client.create(obj)
    await client.delete(CM, "ns", "a")
    held = await client.get(CM, "ns", "a")
    assert held["metadata"]["deletionTimestamp"]
    held["metadata"]["finalizers"] = []
    await client.update(held)
    with pytest.raises(errors.NotFound):
        await client.get(CM, "ns", "a")


async def test_merge_patch_and_write_counting() -> None:
    client = fake.FakeClient()
    await client.create(cm())
    patched = await client.patch(CM, "ns", "a", {"data": {"k": None, "n": "1"}})
    assert patched["data"] == {"n": "1"}
    assert client.writes() == 2
    assert client.writes("patch") == 1
