from __future__ import annotations

from typing import Any

import pytest

from runtime import objects
from runtime.cache import cache as cache_
from runtime.client import resources
from runtime.testing import fake

CM = resources.default_registry.for_kind("v1", "ConfigMap")


async def test_create_or_update_creates_updates_and_skips() -> None:
    client = fake.FakeClient(namespaces=["ns"])
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
    client = fake.FakeClient(namespaces=["ns"])

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


POD = resources.default_registry.for_kind("v1", "Pod")


async def test_quantities_the_server_canonicalised_are_not_rewritten() -> None:
    # The API server stores "1000m" as "1", "1024Mi" as "1Gi" and drops empty maps;
    # a mutate that says the same in other words must not cause a write.
    client = fake.FakeClient(namespaces=["ns"])
    await client.create({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": "p", "namespace": "ns"},
                         "spec": {"containers": [{"name": "c", "image": "i", "resources": {
                             "limits": {"cpu": "2", "memory": "1Gi"},
                             "requests": {"cpu": "1", "memory": "512Mi"}}}]}})  # fmt: skip
    cache = cache_.Cache(client, debug=True)  # type: ignore[arg-type]

    def mutate(pod: dict[str, Any]) -> None:
        pod["metadata"]["annotations"] = {}
        container = pod["spec"]["containers"][0]
        container["resources"] = {"limits": {"cpu": 2, "memory": "1024Mi"},
                                  "requests": {"cpu": "1000m", "memory": "0.5Gi"}}  # fmt: skip
        container["env"] = []

    try:
        for _ in range(3):
            op, _ = await objects.create_or_update(client, POD, "ns", "p", mutate, cache=cache)
            assert op is objects.Operation.UNCHANGED
        assert client.writes() == 1  # the create above

        def more_cpu(pod: dict[str, Any]) -> None:
            mutate(pod)
            pod["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "2001m"

        op, _ = await objects.create_or_update(client, POD, "ns", "p", more_cpu, cache=cache)
        assert op is objects.Operation.UPDATED
    finally:
        await cache.stop()


async def test_the_returned_object_is_the_callers_own() -> None:
    client = fake.FakeClient(namespaces=["ns"])
    cache = cache_.Cache(client, debug=True, transform=None)  # type: ignore[arg-type]

    def mutate(obj: dict[str, Any]) -> None:
        obj["data"] = {"k": "v"}

    try:
        for expected in (objects.Operation.CREATED, objects.Operation.UNCHANGED):
            op, obj = await objects.create_or_update(client, CM, "ns", "c", mutate, cache=cache)
            assert op is expected
            obj["data"]["k"] = "changed by the caller"  # allowed: it is a private copy
            cache.verify()  # raises CacheMutationError if that was the cached object
            assert (await cache.get(CM, "ns", "c"))["data"] == {"k": "v"}

        def update(obj: dict[str, Any]) -> None:
            obj["data"] = {"k": "w"}

        op, obj = await objects.create_or_update(client, CM, "ns", "c", update, cache=cache)
        assert op is objects.Operation.UPDATED
        obj["data"]["k"] = "changed by the caller"
        cache.verify()
    finally:
        await cache.stop()


def test_a_controller_reference_keeps_other_owners_references() -> None:
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "o", "uid": "u1"}}
    other_ref = {"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "u2"}
    obj: dict[str, Any] = {"metadata": {"ownerReferences": [dict(other_ref)]}}
    objects.set_controller_reference(owner, obj)
    refs = obj["metadata"]["ownerReferences"]
    assert refs[0] == other_ref
    assert [(r["uid"], r.get("controller")) for r in refs] == [("u2", None), ("u1", True)]
