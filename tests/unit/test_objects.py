from __future__ import annotations

from typing import Any

import pytest

from runtime import objects
from runtime.cache import cache as cache_
from runtime.client import resources
from runtime.testing import fake

CM = resources.default_registry.for_kind("v1", "ConfigMap")


async def test_create_or_update_creates_updates_and_skips() -> None:
    client = fake.FakeClient()
    cache = cache_.Cache(client, debug=True)  # type: ignore[arg-type]
    value = {"k": "1"}

    def mutate(obj: dict[str, Any]) -> None:
        obj["data"] = dict(value)
        obj["metadata"].setdefault("labels", {})["app"] = "x"

    try:
        op, _ = await objects.create_or_update(client, CM, "ns", "c", mutate, cache=cache)
        assert op is objects.Operation.CREATED
        for _ in range(5):
            op, _ = await objects.create_or_update(client, CM, "ns", "c", mutate, cache=cache)
            assert op is objects.Operation.UNCHANGED
        value["k"] = "2"
        op, obj = await objects.create_or_update(client, CM, "ns", "c", mutate, cache=cache)
        assert op is objects.Operation.UPDATED
        assert obj["data"] == {"k": "2"}
        assert client.writes() == 2
        assert [c for c in client.calls if c[0] == "get"] == [], "reads came from the cache"
        cache.verify()  # mutate only ever saw copies
    finally:
        await cache.stop()


async def test_create_or_update_refuses_renames() -> None:
    client = fake.FakeClient()

    def rename(obj: dict[str, Any]) -> None:
        obj["metadata"]["name"] = "other"

    with pytest.raises(ValueError, match="must not change"):
        await objects.create_or_update(client, CM, "ns", "c", rename)


def test_controller_reference_is_exclusive() -> None:
    a = {"apiVersion": "v1", "kind": "X", "metadata": {"name": "a", "uid": "ua"}}
    b = {"apiVersion": "v1", "kind": "X", "metadata": {"name": "b", "uid": "ub"}}
    child: dict[str, Any] = {"metadata": {"name": "c"}}
    objects.set_controller_reference(a, child)
    objects.set_controller_reference(a, child)  # idempotent
    assert len(child["metadata"]["ownerReferences"]) == 1
    with pytest.raises(objects.AlreadyOwnedError, match="already controlled by X a"):
        objects.set_controller_reference(b, child)


def test_finalizers() -> None:
    obj: dict[str, Any] = {"metadata": {}}
    assert objects.add_finalizer(obj, "f")
    assert not objects.add_finalizer(obj, "f")
    assert objects.remove_finalizer(obj, "f")
    assert not objects.remove_finalizer(obj, "f")
    assert obj["metadata"]["finalizers"] == []
