"""Per-resource cache options (``Cache(by_resource=...)``, ``manager.Options.cache_by_resource``):
selectors reach the server on list and watch, the cache is the filtered view, write-through
keeps to it, transforms and indexers apply per resource; the same given after construction
(``Cache.index_field``, ``Cache.configure``) and through the builder."""

from __future__ import annotations

from typing import Any

import pytest

from runtime import builder, manager, reconcile
from runtime.cache import cache as cache_
from runtime.cache import informer as informer_
from runtime.client import client as client_
from runtime.client import errors, resources
from runtime.testing import fake
from tests.unit import helpers

POD = resources.default_registry.for_kind("v1", "Pod")
CM = resources.default_registry.for_kind("v1", "ConfigMap")
RAY_PODS = "ray.io/node-type in (head,worker)"


def pod(name: str, node: str = "", **labels: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec,
            "metadata": {"name": name, "namespace": "ns", "labels": labels,
                         "managedFields": [{"manager": "m"}]}}  # fmt: skip


class Recording(fake.FakeClient):
    """A fake that remembers the selectors of every list and watch."""

    def __init__(self) -> None:
        super().__init__(namespaces=["ns"])
        self.selectors: list[tuple[str, str, str | None, str | None]] = []

    async def list(self, resource: resources.Resource, namespace: str | None = None,
                   **kw: Any) -> client_.ListResult:  # fmt: skip
        self.selectors.append(
            ("list", str(resource), kw.get("label_selector"), kw.get("field_selector"))
        )
        return await super().list(resource, namespace, **kw)

    def watch(self, resource: resources.Resource, namespace: str | None = None,
              **kw: Any) -> Any:  # fmt: skip
        self.selectors.append(
            ("watch", str(resource), kw.get("label_selector"), kw.get("field_selector"))
        )
        return super().watch(resource, namespace, **kw)


@pytest.fixture
def client() -> Recording:
    return Recording()


def names(objs: list[dict[str, Any]]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objs)


async def test_label_selector_is_sent_and_the_cache_is_the_filtered_view(client: Recording) -> None:
    await client.create(pod("ray-head", **{"ray.io/node-type": "head"}))
    await client.create(pod("theirs", app="web"))
    cache = cache_.Cache(client, by_resource={POD: cache_.ByResource(label_selector=RAY_PODS)},  # type: ignore[arg-type]
                         debug=True)  # fmt: skip
    try:
        assert names(await cache.list(POD)) == ["ray-head"]
        assert names(await cache.list(POD, "ns", label_selector="app=web")) == []
        with pytest.raises(errors.NotFound):
            await cache.get(POD, "ns", "theirs")
        await client.watched(POD)
        assert ("list", "pods", RAY_PODS, None) in client.selectors
        assert ("watch", "pods", RAY_PODS, None) in client.selectors
        # Another resource is cached whole, without selectors.
        await cache.list(CM)
        assert ("list", "configmaps", None, None) in client.selectors

        # A new matching pod arrives; a new other pod never does; a pod that loses the
        # label leaves the cache (the watch says DELETED), one that gains it arrives.
        seen: list[tuple[str, str]] = []
        cache.informer(POD).add_handler(lambda e: seen.append((e.type, e.obj["metadata"]["name"])))
        await client.create(pod("ray-worker", **{"ray.io/node-type": "worker"}))
        await client.create(pod("theirs-2"))
        theirs = await client.get(POD, "ns", "theirs")
        theirs["metadata"]["labels"]["ray.io/node-type"] = "worker"
        await client.update(theirs)
        await client.delivered()
        assert names(await cache.list(POD)) == ["ray-head", "ray-worker", "theirs"]
        head = await client.get(POD, "ns", "ray-head")
        del head["metadata"]["labels"]["ray.io/node-type"]
        await client.update(head)
        await client.delivered()
        assert names(await cache.list(POD)) == ["ray-worker", "theirs"]
        assert ("delete", "ray-head") in seen
        assert all(name != "theirs-2" for _, name in seen)
        cache.verify()
    finally:
        await cache.stop()


async def test_field_selector_is_sent_and_filters(client: Recording) -> None:
    await client.create(pod("on-n1", node="n1"))
    await client.create(pod("on-n2", node="n2"))
    await client.create(pod("unscheduled"))
    cache = cache_.Cache(client, by_resource={"pods": cache_.ByResource(  # type: ignore[arg-type]
        field_selector="spec.nodeName=n1")})  # fmt: skip
    try:
        assert names(await cache.list(POD)) == ["on-n1"]
        await client.watched(POD)
        assert ("list", "pods", None, "spec.nodeName=n1") in client.selectors
        assert ("watch", "pods", None, "spec.nodeName=n1") in client.selectors
        await client.create(pod("later-n1", node="n1"))
        await client.create(pod("later-n2", node="n2"))
        await client.delivered()
        assert names(await cache.list(POD)) == ["later-n1", "on-n1"]
    finally:
        await cache.stop()


async def test_write_through_keeps_to_the_filtered_view(client: Recording) -> None:
    cache = cache_.Cache(client, by_resource={POD: cache_.ByResource(label_selector=RAY_PODS)})  # type: ignore[arg-type]
    try:
        await cache.list(POD)
        seen: list[tuple[str, str]] = []
        cache.informer(POD).add_handler(lambda e: seen.append((e.type, e.obj["metadata"]["name"])))
        # Our own write of a pod outside the selector is not stored (no watch event yet).
        await client.create(pod("theirs"))
        with pytest.raises(errors.NotFound):
            await cache.get(POD, "ns", "theirs")
        created = await client.create(pod("head", **{"ray.io/node-type": "head"}))
        assert (await cache.get(POD, "ns", "head"))["metadata"]["resourceVersion"] == (
            created["metadata"]["resourceVersion"]
        )
        # Our write that takes it out of the selector removes it at once, as a delete.
        del created["metadata"]["labels"]["ray.io/node-type"]
        await client.update(created)
        with pytest.raises(errors.NotFound):
            await cache.get(POD, "ns", "head")
        assert seen == [("add", "head"), ("delete", "head")]
        await client.delivered()  # the watch's DELETED for it is not delivered twice
        assert seen == [("add", "head"), ("delete", "head")]
        assert await cache.list(POD) == []
    finally:
        await cache.stop()


async def test_transform_runs_after_the_default_one_on_a_copy(client: Recording) -> None:
    calls: list[dict[str, Any]] = []

    def drop_spec(obj: dict[str, Any]) -> dict[str, Any]:
        calls.append(obj)
        obj.pop("spec", None)  # in place: the object is the cache's own
        return obj

    cache = cache_.Cache(client, by_resource={POD: cache_.ByResource(transform=drop_spec)})  # type: ignore[arg-type]
    try:
        await client.create(pod("listed"))
        listed = await cache.get(POD, "ns", "listed")
        assert "spec" not in listed
        assert "managedFields" not in listed["metadata"], "the default transform ran first"
        mine = pod("written")
        mine["metadata"]["resourceVersion"] = ""
        answer = await client.create(mine)
        written = await cache.get(POD, "ns", "written")
        assert "spec" not in written
        assert "managedFields" not in written["metadata"]
        assert "spec" in answer, "the caller's object is never the one transformed"
        await client.create(cm("c"))
        assert "data" in await cache.get(CM, "ns", "c"), "other resources: default only"
        assert calls
    finally:
        await cache.stop()


def cm(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns"}, "data": {"k": "v"}}  # fmt: skip


async def test_indexers_per_resource_and_the_older_argument(client: Recording) -> None:
    def by_node(obj: dict[str, Any]) -> list[str]:
        return [obj["spec"].get("nodeName", "")]

    def by_key(obj: dict[str, Any]) -> list[str]:
        return list(obj.get("data") or {})

    cache = cache_.Cache(
        client,  # type: ignore[arg-type]
        by_resource={POD: cache_.ByResource(indexers={"node": by_node})},
        indexers={"configmaps": {"key": by_key}},
    )
    try:
        await client.create(pod("a", node="n1"))
        await client.create(pod("b", node="n2"))
        await client.create(cm("c"))
        assert names(await cache.list(POD, index=("node", "n2"))) == ["b"]
        assert names(await cache.list(CM, index=("key", "k"))) == ["c"]
    finally:
        await cache.stop()
    with pytest.raises(ValueError, match="given twice"):
        cache_.Cache(
            client,  # type: ignore[arg-type]
            by_resource={"pods": cache_.ByResource(indexers={"node": by_node})},
            indexers={"pods": {"node": by_node}},
        )


def test_options_are_checked_and_normalised() -> None:
    with pytest.raises(ValueError, match="invalid label selector"):
        cache_.ByResource(label_selector="a in (b")
    with pytest.raises(ValueError, match="invalid field selector"):
        cache_.ByResource(field_selector="spec.nodeName")
    with pytest.raises(ValueError, match="given twice"):
        cache_.by_resource_of({POD: cache_.ByResource(), "pods": cache_.ByResource()})
    with pytest.raises(TypeError, match="expected ByResource"):
        cache_.by_resource_of({"pods": {"label_selector": "a"}})  # type: ignore[dict-item]
    normalised = cache_.by_resource_of({POD: cache_.ByResource(label_selector="a")})
    assert list(normalised) == ["pods"]
    with pytest.raises(TypeError):
        normalised["x"] = cache_.ByResource()  # type: ignore[index]


async def test_the_managers_option_reaches_its_cache_and_stays_hashable() -> None:
    client = fake.FakeClient()
    by = {POD: cache_.ByResource(label_selector=RAY_PODS)}
    options = manager.Options(name="x", cache_by_resource=by)
    assert options == manager.Options(name="x", cache_by_resource={"pods": by[POD]})
    hash(options)
    assert dict(manager.Options(name="x").cache_by_resource) == {}, "default: nothing filtered"
    mgr = manager.Manager(client, options)  # type: ignore[arg-type]
    assert mgr.cache.by_resource["pods"].label_selector == RAY_PODS
    informer = mgr.cache.informer(POD)
    assert isinstance(informer, informer_.SharedInformer)
    assert [r.label_selector for r in informer.reflectors] == [RAY_PODS]
    assert mgr.cache.informer(CM).reflector.label_selector is None
    with pytest.raises(ValueError, match="invalid label selector"):
        manager.Options(name="x", cache_by_resource={"pods": cache_.ByResource(label_selector="(")})


# -- options after construction: Cache.index_field, Cache.configure, the builder ------------


def by_node(obj: dict[str, Any]) -> list[str]:
    return [obj["spec"].get("nodeName", "")]


async def test_an_index_added_before_or_after_the_informer_started_answers(
    client: Recording,
) -> None:
    cache = cache_.Cache(client)  # type: ignore[arg-type]
    try:
        cache.index_field(POD, "node", by_node)  # before: the informer is made with it
        await client.create(pod("a", node="n1"))
        await client.create(pod("b", node="n2"))
        assert names(await cache.list(POD, index=("node", "n1"))) == ["a"]
        assert names(await cache.list(POD)) == ["a", "b"]  # running and synced now
        cache.index_field(POD, "first-letter", lambda o: [o["metadata"]["name"][0]])
        await client.create(pod("bb", node="n1"))
        await helpers.eventually(lambda: len(cache.informer(POD).store) == 3, what="bb")
        assert names(await cache.list(POD, index=("first-letter", "b"))) == ["b", "bb"]
        assert names(await cache.list(POD, index=("node", "n1"))) == ["a", "bb"]
        for taken in ("node", "first-letter", "namespace", "owner"):
            with pytest.raises(ValueError, match="given twice"):
                cache.index_field(POD, taken, by_node)
    finally:
        await cache.stop()


async def test_configure_gives_options_until_the_informer_exists(client: Recording) -> None:
    cache = cache_.Cache(client, by_resource={CM: cache_.ByResource()})  # type: ignore[arg-type]
    try:
        cache.index_field(POD, "node", by_node)
        with pytest.raises(ValueError, match="index 'node' of pods given twice"):
            cache.configure(POD, cache_.ByResource(indexers={"node": by_node}))
        cache.configure(POD, cache_.ByResource(label_selector=RAY_PODS, indexers={"n": by_node}))
        await client.create(pod("ray", node="n1", **{"ray.io/node-type": "head"}))
        await client.create(pod("web", node="n1", app="web"))
        assert names(await cache.list(POD, index=("node", "n1"))) == ["ray"]
        assert names(await cache.list(POD, index=("n", "n1"))) == ["ray"]
        assert ("list", "pods", RAY_PODS, None) in client.selectors
        with pytest.raises(ValueError, match="cache options for pods given twice"):
            cache.configure(POD, cache_.ByResource())
        with pytest.raises(ValueError, match="configmaps given twice"):
            cache.configure(CM, cache_.ByResource())
        secrets = resources.default_registry.for_kind("v1", "Secret")
        cache.informer(secrets)
        with pytest.raises(RuntimeError, match="come too late: its informer exists"):
            cache.configure(secrets, cache_.ByResource(label_selector="a=b"))
        with pytest.raises(TypeError, match="expected ByResource"):
            cache.configure(CM, {"label_selector": "a"})  # type: ignore[arg-type]
    finally:
        await cache.stop()


async def test_the_builder_gives_the_managers_cache_selectors_and_indexes(
    client: Recording,
) -> None:
    mgr = manager.Manager(client, manager.Options(  # type: ignore[arg-type]
        name="x", metrics_bind_address="0", health_probe_bind_address="0"))  # fmt: skip

    async def reconcile_(request: reconcile.Request) -> reconcile.Result:
        return reconcile.Result()

    (
        builder.Builder(mgr)
        .for_(CM, cache=cache_.ByResource(label_selector="mine=yes"))
        .owns(POD, cache=cache_.ByResource(field_selector="spec.nodeName=n1"))
        .with_index(POD, "node", by_node)
        .named(f"builder-cache-{id(client)}")
        .complete(reconcile_)
    )
    assert mgr.cache.by_resource["configmaps"].label_selector == "mine=yes"
    assert [r.field_selector for r in mgr.cache.informer(POD).reflectors] == ["spec.nodeName=n1"]
    await client.create(pod("on-n1", node="n1"))
    await client.create(pod("on-n2", node="n2"))
    try:
        assert names(await mgr.cache.list(POD, index=("node", "n1"))) == ["on-n1"]
        assert names(await mgr.cache.list(POD)) == ["on-n1"]
    finally:
        await mgr.cache.stop()
    # A second controller cannot narrow what the first one's informer already holds.
    second = builder.Builder(mgr).named(f"second-{id(client)}")
    second.for_(POD, cache=cache_.ByResource(label_selector="a=b"))
    with pytest.raises(ValueError, match="cache options for pods given twice"):
        second.complete(reconcile_)
    with pytest.raises(TypeError, match="expected ByResource"):
        builder.Builder(mgr).for_(POD, cache="a=b")  # type: ignore[arg-type]
