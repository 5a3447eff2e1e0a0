"""The fake client against kube-apiserver: the same calls on both, the same answers.

Each scenario below is run twice: on the real control plane (our
:class:`runtime.client.Client`) and on :class:`runtime.testing.fake.FakeClient`
(given the same namespace and test kinds). It returns what a caller can observe
(error class and HTTP status, ``generation``, ``deletionTimestamp``, the events a
watch delivers, ...) as plain data, and the two results must be equal. When the
fake drifts from the server, the assertion shows both.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from runtime.client import client as client_
from runtime.client import errors, resources
from runtime.testing import controlplane, fake
from tests.integration import helpers

Obj = dict[str, Any]
REGISTRY = resources.default_registry
CM = REGISTRY.for_kind("v1", "ConfigMap")
SERVICE_ACCOUNTS = REGISTRY.for_kind("v1", "ServiceAccount")
FINALIZER = "test.rayservice.dev/hold"


@dataclasses.dataclass
class Backend:
    """One side of the comparison."""

    client: Any  # client_.Client or fake.FakeClient: the same verbs
    namespace: str
    compact: Callable[[], object]
    """Compact the history (etcd compaction, or the fake's)."""


Scenario = Callable[[Backend], Awaitable[Any]]
SCENARIOS: dict[str, Scenario] = {}


def scenario(fn: Scenario) -> Scenario:
    SCENARIOS[fn.__name__] = fn
    return fn


# -- helpers ---------------------------------------------------------------------------------


async def outcome(call: Awaitable[Any]) -> str:
    """``"ok"``, or the typed error and HTTP status a call ended with."""
    try:
        await call
    except errors.ApiError as error:
        return f"{type(error).__name__} {error.status}"
    return "ok"


def cm(name: str, **labels: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}  # fmt: skip


def widget(name: str, kind: str = "Widget", **meta: Any) -> Obj:
    return {"apiVersion": "test.rayservice.dev/v1", "kind": kind,
            "metadata": {"name": name, **meta}, "spec": {"size": 1}}  # fmt: skip


def deletion_view(obj: Obj) -> dict[str, Any]:
    meta = obj["metadata"]
    return {
        "kind": obj.get("kind"),
        "generation": meta.get("generation"),
        "deleting": "deletionTimestamp" in meta,
        "grace": meta.get("deletionGracePeriodSeconds"),
        "finalizers": meta.get("finalizers"),
    }


@contextlib.asynccontextmanager
async def watching(
    backend: Backend, resource: resources.Resource, **options: Any
) -> AsyncIterator[AsyncIterator[Obj]]:
    events = backend.client.watch(resource, backend.namespace, timeout_seconds=30, **options)
    async with contextlib.aclosing(events):
        yield events


async def take(events: AsyncIterator[Obj], n: int) -> list[Obj]:
    """The next ``n`` events that are not bookmarks, within 20 s."""
    got: list[Obj] = []
    async with asyncio.timeout(20):
        async for event in events:
            if event["type"] != "BOOKMARK":
                got.append(event)
                if len(got) == n:
                    break
    return got


# -- kinds: generation, status subresource, unconditional updates ----------------------------


def builtin_objects() -> dict[str, tuple[Obj, Callable[[Obj], None]]]:
    """An object of each kind and a change to its spec (or data)."""

    def set_(path: str, value: Any) -> Callable[[Obj], None]:
        def change(obj: Obj) -> None:
            *parents, last = path.split(".")
            target: Any = obj
            for key in parents:
                target = target[int(key)] if key.isdigit() else target[key]
            target[last] = value

        return change

    template = {"metadata": {"labels": {"app": "t"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]}}  # fmt: skip
    return {
        "ConfigMap": ({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "1"}},
                      set_("data", {"a": "2"})),
        "Secret": ({"apiVersion": "v1", "kind": "Secret", "data": {"a": "MQ=="}},
                   set_("data", {"a": "Mg=="})),
        "ServiceAccount": ({"apiVersion": "v1", "kind": "ServiceAccount"},
                           set_("automountServiceAccountToken", False)),
        "Service": ({"apiVersion": "v1", "kind": "Service",
                     "spec": {"ports": [{"port": 80}], "selector": {"app": "t"}}},
                    set_("spec.ports", [{"port": 81}])),
        "Lease": ({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "spec": {"holderIdentity": "a"}}, set_("spec.holderIdentity", "b")),
        "EndpointSlice": ({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                           "addressType": "IPv4", "endpoints": []},
                          set_("ports", [{"port": 80, "name": "http", "protocol": "TCP"}])),
        "Role": ({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "rules": []},
                 set_("rules", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}])),
        "Deployment": ({"apiVersion": "apps/v1", "kind": "Deployment",
                        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "t"}},
                                 "template": template}},
                       set_("spec.template.spec.containers.0.image", "j")),
        "Widget": (widget("x"), set_("spec.size", 2)),
    }  # fmt: skip


async def changed(c: Any, obj: Obj, change: Callable[[Obj], None]) -> Obj:
    """Read, change and write ``obj`` until no controller's write gets in between (the
    deployment controller writes a new Deployment's status at once)."""
    meta = obj["metadata"]
    for _ in range(20):
        current = await c.get(c.resource_for(obj), meta["namespace"], meta["name"])
        change(current)
        try:
            updated: Obj = await c.update(current)
        except errors.Conflict:
            continue
        return updated
    raise AssertionError(f"{meta['name']}: 20 conflicts in a row")


@scenario
async def kinds_generation_status_and_unconditional_updates(backend: Backend) -> Any:
    c = backend.client
    seen = {}
    for kind, (template, change) in builtin_objects().items():
        obj = copy.deepcopy(template)
        obj["metadata"] = {"name": f"k-{kind.lower()}", "namespace": backend.namespace}
        created = await c.create(obj)
        updated = await changed(c, obj, change)
        unconditional = copy.deepcopy(updated)
        del unconditional["metadata"]["resourceVersion"]
        unconditional["metadata"]["labels"] = {"touched": "yes"}
        row = {
            "generation": [created["metadata"].get("generation"),
                           updated["metadata"].get("generation")],
            "unconditional update": await outcome(c.update(unconditional)),
        }  # fmt: skip
        if kind != "Deployment":  # its controller writes its status: a race
            current = await c.get(c.resource_for(obj), backend.namespace, obj["metadata"]["name"])
            current["status"] = {}
            row["status write"] = await outcome(c.update_status(current))
        seen[kind] = row
    return seen


@scenario
async def status_subresource_is_separate(backend: Backend) -> Any:
    c, ns = backend.client, backend.namespace
    created = await c.create(widget("s", namespace=ns, labels={}))
    with_status = copy.deepcopy(created)
    with_status["status"] = {"phase": "A"}
    with_status["spec"]["size"] = 5
    after_status = await c.update_status(with_status)
    spec_change = copy.deepcopy(after_status)
    spec_change["status"] = {"phase": "B"}
    spec_change["spec"]["size"] = 2
    after_spec = await c.update(spec_change)
    relabelled = copy.deepcopy(after_spec)
    relabelled["metadata"]["labels"] = {"a": "b"}
    after_labels = await c.update(relabelled)
    noop = await c.update(copy.deepcopy(after_labels))
    stale = copy.deepcopy(after_spec)
    stale["spec"]["size"] = 9
    return {
        "created status": created.get("status"),
        "status write": (after_status["status"], after_status["spec"],
                         after_status["metadata"]["generation"]),
        "spec write": (after_spec["status"], after_spec["spec"],
                       after_spec["metadata"]["generation"]),
        "label write generation": after_labels["metadata"]["generation"],
        "no-op keeps the version": noop["metadata"]["resourceVersion"]
        == after_labels["metadata"]["resourceVersion"],
        "stale write": await outcome(c.update(stale)),
    }  # fmt: skip


@scenario
async def config_map_status_writes_are_not_found(backend: Backend) -> Any:
    c, ns = backend.client, backend.namespace
    created = await c.create(cm("nostatus"), namespace=ns)
    with_status = copy.deepcopy(created)
    with_status["status"] = {"x": "y"}
    return {
        "generation": created["metadata"].get("generation"),
        "put status": await outcome(c.update_status(with_status)),
        "patch status": await outcome(
            c.patch(CM, ns, "nostatus", {"status": {"x": "y"}}, subresource="status")
        ),
        "status kept by a main write": "status" in await c.update(with_status),
    }


@scenario
async def custom_resource_update_without_resource_version(backend: Backend) -> Any:
    c, ns = backend.client, backend.namespace
    created = await c.create(widget("norv", namespace=ns))
    unconditional = copy.deepcopy(created)
    del unconditional["metadata"]["resourceVersion"]
    unconditional["spec"]["size"] = 3
    result: dict[str, Any] = {}
    for verb, call in (("update", c.update), ("update_status", c.update_status)):
        try:
            await call(copy.deepcopy(unconditional))
            result[verb] = "ok"
        except errors.Invalid as error:
            result[verb] = (error.status, "must be specified for an update" in error.message)
    return result


@scenario
async def create_with_a_resource_version(backend: Backend) -> Any:
    c, ns = backend.client, backend.namespace
    with_rv = cm("withrv")
    with_rv["metadata"]["resourceVersion"] = "5"
    zero = cm("zerorv")
    zero["metadata"]["resourceVersion"] = "0"
    try:
        await c.create(with_rv, namespace=ns)
        refused: Any = "ok"
    except errors.ApiError as error:
        refused = (type(error).__name__, error.status, error.message)
    return {"rv 5": refused, "rv 0": await outcome(c.create(zero, namespace=ns))}


@scenario
async def create_in_a_missing_namespace(backend: Backend) -> Any:
    missing = f"missing-{backend.namespace}"
    try:
        await backend.client.create(cm("lost"), namespace=missing)
    except errors.ApiError as error:
        return (type(error).__name__, error.status, error.message.replace(missing, "<ns>"))
    return "created"


@scenario
async def delete_with_a_finalizer(backend: Backend) -> Any:
    c, ns = backend.client, backend.namespace
    result = {}
    for resource, obj in ((helpers.WIDGETS, widget("held")), (CM, cm("held"))):
        obj["metadata"].update(namespace=ns, finalizers=[FINALIZER])
        await c.create(obj)
        held = await c.delete(resource, ns, "held")
        again = await c.delete(resource, ns, "held")
        current = await c.get(resource, ns, "held")
        result[resource.kind] = {
            "answer": deletion_view(held),
            "second delete changes nothing": again == held
            and current["metadata"]["resourceVersion"] == held["metadata"]["resourceVersion"],
        }
        held["metadata"]["finalizers"] = [FINALIZER, "test.rayservice.dev/other"]
        result[resource.kind]["adding a finalizer while deleting"] = await outcome(c.update(held))
        current["metadata"]["finalizers"] = []
        await c.update(current)
    return result


@scenario
async def removing_the_last_finalizer_deletes(backend: Backend) -> Any:
    c, ns = backend.client, backend.namespace
    obj = widget("fin", namespace=ns, finalizers=[FINALIZER])
    await c.create(obj)
    held = await c.delete(helpers.WIDGETS, ns, "fin")
    observed: list[Obj] = []
    c.add_write_observer(observed.append)
    async with watching(
        backend, helpers.WIDGETS, resource_version=held["metadata"]["resourceVersion"]
    ) as events:
        released = copy.deepcopy(held)
        released["metadata"]["finalizers"] = []
        answer = await c.update(released)
        [event] = await take(events, 1)
    return {
        "answer": deletion_view(answer),
        "answer keeps the version sent": answer["metadata"]["resourceVersion"]
        == held["metadata"]["resourceVersion"],
        "observed": [deletion_view(o) for o in observed],
        "event": (event["type"], deletion_view(event["object"])),
        "event is newer": int(event["object"]["metadata"]["resourceVersion"])
        > int(held["metadata"]["resourceVersion"]),
        "get": await outcome(c.get(helpers.WIDGETS, ns, "fin")),
    }  # fmt: skip


@scenario
async def delete_answers(backend: Backend) -> Any:
    c, ns = backend.client, backend.namespace
    result = {}
    objects: list[tuple[resources.Resource, Obj]] = [
        (CM, cm("del")),
        (helpers.WIDGETS, widget("del")),
        (
            SERVICE_ACCOUNTS,
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "del"}},
        ),
    ]
    for resource, obj in objects:
        obj["metadata"]["namespace"] = ns
        created = await c.create(obj)
        answer = await c.delete(resource, ns, "del")
        assert answer is not None
        details = answer.get("details") or {}
        result[resource.kind] = {
            "kind": answer.get("kind"),
            "status": answer.get("status"),
            "details": {k: v for k, v in details.items() if k != "uid"},
            "uid": (details or answer["metadata"]).get("uid") == created["metadata"]["uid"],
            "newer version": "resourceVersion" in answer.get("metadata", {})
            and int(answer["metadata"]["resourceVersion"])
            > int(created["metadata"]["resourceVersion"]),
        }  # fmt: skip
    return result


# -- watches ---------------------------------------------------------------------------------


@scenario
async def label_selector_watch_sees_objects_leave_and_enter(backend: Backend) -> Any:
    c, ns = backend.client, backend.namespace
    created = await c.create(cm("sel", app="web"), namespace=ns)
    rv = created["metadata"]["resourceVersion"]
    async with watching(backend, CM, resource_version=rv, label_selector="app=web") as events:
        current = copy.deepcopy(created)
        current["metadata"]["labels"] = {"app": "db"}
        left = await c.update(current)
        left["metadata"]["labels"] = {"app": "web"}
        back = await c.update(left)
        seen = await take(events, 2)
    return [
        (e["type"], e["object"]["metadata"]["labels"],
         e["object"]["metadata"]["resourceVersion"] == answer["metadata"]["resourceVersion"])
        for e, answer in zip(seen, (left, back), strict=True)
    ]  # fmt: skip


@scenario
async def watch_without_resource_version_starts_with_the_objects(backend: Backend) -> Any:
    c, ns = backend.client, backend.namespace
    await c.create(cm("w1"), namespace=ns)
    await c.create(cm("w2", app="web"), namespace=ns)
    async with watching(backend, CM) as events:
        initial = await take(events, 2)
        await c.create(cm("w3"), namespace=ns)
        after = await take(events, 1)
    async with watching(backend, CM, label_selector="app=web") as events:
        selected = await take(events, 1)
    return {
        "initial": sorted((e["type"], e["object"]["metadata"]["name"]) for e in initial),
        "after": [(e["type"], e["object"]["metadata"]["name"]) for e in after],
        "selected": [(e["type"], e["object"]["metadata"]["name"]) for e in selected],
    }


@scenario
async def compaction_ends_new_watches_not_open_ones(backend: Backend) -> Any:
    c, ns = backend.client, backend.namespace
    first = await c.create(widget("c1", "Gadget", namespace=ns))
    old_rv = first["metadata"]["resourceVersion"]
    await c.create(widget("c2", "Gadget", namespace=ns))
    await c.create(widget("c3", "Gadget", namespace=ns))
    async with watching(backend, helpers.GADGETS, resource_version=old_rv) as events:
        before = await take(events, 2)
        backend.compact()  # at the newest revision: c2's is gone, c3's is kept
        await c.create(widget("c4", "Gadget", namespace=ns))
        after = await take(events, 1)
        async with watching(backend, helpers.GADGETS, resource_version=old_rv) as stale:
            new_watch = await outcome(take(stale, 1))
    return {
        "open watch": [(e["type"], e["object"]["metadata"]["name"]) for e in before + after],
        "new watch from the compacted version": new_watch,
    }


# -- the comparison (after every scenario is registered) ------------------------------------


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_the_fake_answers_like_the_apiserver(
    name: str,
    control_plane: controlplane.ControlPlane,
    client: client_.Client,
    namespace: str,
) -> None:
    real = await SCENARIOS[name](Backend(client, namespace, control_plane.compact_etcd))
    registry = REGISTRY.copy()
    registry.register(helpers.WIDGETS)
    registry.register(helpers.GADGETS)
    fake_client = fake.FakeClient(registry, namespaces=[namespace])
    faked = await SCENARIOS[name](Backend(fake_client, namespace, fake_client.compact))
    assert faked == real, f"{name}: fake {faked!r} != apiserver {real!r}"
