"""The Builder over a Manager on the fake client: ``for_``, ``owns`` (controller owner
references), ``watches`` (a map function), per-source predicates and event filters, options,
and the informers it registers before the manager starts."""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest

from runtime import builder, controller, handler, manager, predicate, reconcile
from runtime.cache import informer as informer_
from runtime.client import resources
from runtime.testing import fake, runner
from tests.unit import helpers

WIDGET = resources.Resource("test.rayservice.dev", "v1", "Widget", "widgets")
CM = resources.default_registry.for_kind("v1", "ConfigMap")
SECRET = resources.default_registry.for_kind("v1", "Secret")
Obj = dict[str, Any]
_names = itertools.count()


def new_client() -> fake.FakeClient:
    registry = resources.default_registry.copy()
    registry.register(WIDGET)
    return fake.FakeClient(registry, namespaces=["ns"])


def new_manager(client: fake.FakeClient) -> manager.Manager:
    options = manager.Options(
        name="builder-test", metrics_bind_address="0", health_probe_bind_address="0"
    )
    return manager.Manager(client, options)  # type: ignore[arg-type]


def widget(name: str, **meta: Any) -> Obj:
    return {"apiVersion": "test.rayservice.dev/v1", "kind": "Widget",
            "metadata": {"name": name, "namespace": "ns", **meta}, "spec": {"size": 1}}  # fmt: skip


def owned_by(owner: Obj | str, kind: str = "Widget", controller: bool = True) -> list[Obj]:
    name, uid = (owner, "uid-" + owner) if isinstance(owner, str) else (
        owner["metadata"]["name"], owner["metadata"]["uid"])  # fmt: skip
    return [{"apiVersion": "test.rayservice.dev/v1", "kind": kind, "name": name, "uid": uid,
             "controller": controller}]  # fmt: skip


def configmap(name: str, **meta: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", **meta}, "data": {"k": "v"}}  # fmt: skip


def secret(name: str, **meta: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": "ns", **meta}}  # fmt: skip


def skipped(event: informer_.Event) -> bool:
    return (event.obj["metadata"].get("annotations") or {}).get("skip") == "true"


def labelled_for_a_widget(event: informer_.Event) -> bool:
    return "widget" in (event.obj["metadata"].get("labels") or {})


def widget_of_secret(obj: Obj) -> list[reconcile.Request]:
    name = (obj["metadata"].get("labels") or {}).get("widget", "unlabelled")
    return [reconcile.Request("ns", name)]


class Recorder:
    """The reconciler: records each request it is called with."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def reconcile(self, request: reconcile.Request) -> reconcile.Result:
        self.seen.append(str(request))
        return reconcile.Result()

    async def next(self, expected: list[str], what: str) -> None:
        """Wait until exactly ``expected`` were reconciled after what was seen so far."""
        start = len(self.seen)
        await helpers.eventually(lambda: len(self.seen) >= start + len(expected), what=what)
        await asyncio.sleep(0.01)  # room for an unexpected extra reconcile to show up
        assert self.seen[start:] == expected, what


@pytest.fixture
async def running() -> AsyncIterator[tuple[fake.FakeClient, Recorder, Obj]]:
    client = new_client()
    w1 = await client.create(widget("w1"))
    mgr = new_manager(client)
    recorder = Recorder()
    name = f"builder-failure-paths-{next(_names)}"  # controller names are unique per process
    ctrl = (
        builder.Builder(mgr)
        .for_(WIDGET, predicates=(predicate.generation_changed,))
        .owns(CM, predicates=(predicate.label_changed,))
        .watches(
            SECRET,
            handler.map_to(widget_of_secret),
            predicates=(predicate.and_(predicate.resource_version_changed, labelled_for_a_widget),),
        )
        .with_event_filter(predicate.not_(skipped))
        .with_options(reconcile_timeout=42.0)
        .named(name)
        .complete(recorder)
    )
    assert ctrl.name == name
    assert ctrl.options.reconcile_timeout == 42.0
    # complete() registered an informer per source with the manager's cache: they exist
    # (and have not synced) before the manager starts, so it waits for them.
    assert not mgr.cache.has_synced()
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        await asyncio.wait_for(mgr.cache.wait_for_sync(), 5)
        assert all(mgr.cache.informer(r).started for r in (WIDGET, CM, SECRET))
        await recorder.next(["ns/w1"], "the initial list enqueues the for_ object")
        yield client, recorder, w1
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_for_enqueues_the_object_and_its_predicates_filter_it(
    running: tuple[fake.FakeClient, Recorder, Obj],
) -> None:
    client, recorder, w1 = running
    with_status = copy.deepcopy(w1)
    with_status["status"] = {"ready": True}
    await client.update_status(with_status)  # generation unchanged: filtered by for_'s predicate
    current = await client.get(WIDGET, "ns", "w1")
    current["spec"]["size"] = 2
    await client.update(current)
    await recorder.next(["ns/w1"], "only the spec change, not the status write")
    await client.create(widget("w-skip", annotations={"skip": "true"}))  # the event filter
    await client.create(widget("w2"))
    await recorder.next(["ns/w2"], "an annotated widget is filtered by with_event_filter")


async def test_owns_enqueues_the_controller_owner_only(
    running: tuple[fake.FakeClient, Recorder, Obj],
) -> None:
    client, recorder, w1 = running
    await client.create(configmap("child", ownerReferences=owned_by(w1)))
    await recorder.next(["ns/w1"], "a new owned object wakes its owner")
    await client.create(configmap("loose", ownerReferences=owned_by(w1, controller=False)))
    await client.create(configmap("other-kind", ownerReferences=owned_by("w9", kind="Gadget")))
    await client.create(configmap("free"))
    await client.create(configmap("skipped", ownerReferences=owned_by("w8"),
                                  annotations={"skip": "true"}))  # fmt: skip
    await client.create(configmap("marker", ownerReferences=owned_by("w3")))
    await recorder.next(["ns/w3"], "no controller ref / another kind / filtered: no owner")


async def test_owns_predicates_apply_to_owned_objects_only(
    running: tuple[fake.FakeClient, Recorder, Obj],
) -> None:
    client, recorder, w1 = running
    child = await client.create(configmap("child", ownerReferences=owned_by(w1)))
    await recorder.next(["ns/w1"], "created")
    child["data"] = {"k": "changed"}
    child = await client.update(child)  # labels unchanged: label_changed drops it
    child["metadata"]["labels"] = {"tier": "x"}
    await client.update(child)
    await recorder.next(["ns/w1"], "only the label change of the owned object")
    # ConfigMaps have no generation: had for_'s generation_changed been applied to this
    # source too, the label change above would not have passed.


async def test_watches_maps_with_its_function_and_filters_with_its_predicates(
    running: tuple[fake.FakeClient, Recorder, Obj],
) -> None:
    client, recorder, _ = running
    await client.create(secret("unlabelled"))  # dropped by the source's own predicate
    await client.create(secret("s-skip", labels={"widget": "w7"}, annotations={"skip": "true"}))
    labelled = await client.create(secret("s1", labels={"widget": "w5"}))
    await recorder.next(["ns/w5"], "the map function names the widget")
    labelled["metadata"]["labels"]["widget"] = "w6"
    await client.update(labelled)
    await recorder.next(["ns/w6"], "re-labelled: the map function follows the new object")


def test_a_builder_needs_exactly_one_for() -> None:
    mgr = new_manager(new_client())
    with pytest.raises(ValueError, match="for_"):
        builder.Builder(mgr).owns(CM).complete(Recorder())
    with pytest.raises(ValueError, match="once"):
        builder.Builder(mgr).for_(WIDGET).for_(CM)


def test_the_default_name_is_the_for_resources_plural() -> None:
    mgr = new_manager(new_client())
    ctrl = (
        builder.Builder(mgr)
        .for_(WIDGET)
        .with_options(skip_name_validation=True, max_concurrent_reconciles=3)
        .complete(Recorder())
    )
    assert ctrl.name == "widgets"
    assert ctrl.options.max_concurrent_reconciles == 3


def test_complete_registers_the_resources_it_is_given_and_keeps_what_is_there() -> None:
    client = fake.FakeClient(resources.default_registry.copy(), namespaces=["ns"])
    assert ("test.rayservice.dev/v1", "Widget") not in client.registry
    gadgets = resources.Resource("test.rayservice.dev", "v1", "Gadget", "gadgets")
    mine_cm = resources.Resource("", "v1", "ConfigMap", "configmaps", namespaced=True)
    before = client.registry.for_kind("v1", "ConfigMap")
    with controller.names_released():
        (
            builder.Builder(new_manager(client))
            .for_(WIDGET)
            .owns(mine_cm)
            .watches(gadgets, handler.for_object())
            .named(f"registers-{next(_names)}")
            .complete(lambda request: None)  # type: ignore[arg-type, return-value]
        )
    assert client.registry.for_kind("test.rayservice.dev/v1", "Widget") is WIDGET
    assert client.registry.for_kind("test.rayservice.dev/v1", "Gadget") is gadgets
    assert client.registry.for_kind("v1", "ConfigMap") is before, "not replaced"


async def test_a_reconciler_writes_its_custom_resource_without_registering_it() -> None:
    client = fake.FakeClient(resources.default_registry.copy(), namespaces=["ns"])
    mgr = new_manager(client)
    written = asyncio.Event()

    async def reconcile(request: Any) -> Any:
        current = await mgr.cache.get(WIDGET, request.namespace, request.name)
        await mgr.client.update({**current, "spec": {"size": 2}})
        written.set()

    with controller.names_released():
        builder.Builder(mgr).for_(WIDGET).named(f"writes-{next(_names)}").complete(reconcile)
    await client.create(widget("w"))
    async with runner.running(mgr):
        await asyncio.wait_for(written.wait(), 5)
    assert (await client.get(WIDGET, "ns", "w"))["spec"] == {"size": 2}
