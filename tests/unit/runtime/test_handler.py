"""Event handlers: which requests an event causes."""

from __future__ import annotations

from typing import Any

from runtime import handler, reconcile
from runtime.cache import informer


def ref(name: str, *, kind: str = "RayService", api_version: str = "ray.io/v1",
        controller: bool = True) -> dict[str, Any]:  # fmt: skip
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": f"uid-{name}",
            "controller": controller}  # fmt: skip


def obj(*refs: dict[str, Any], namespace: str | None = "ns") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "child", "ownerReferences": list(refs)}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"metadata": meta}


def req(name: str, namespace: str = "ns") -> reconcile.Request:
    return reconcile.Request(namespace, name)


OWNER = handler.for_owner("ray.io/v1", "RayService")


def test_for_object_enqueues_the_object() -> None:
    assert handler.for_object()(informer.Event("add", obj())) == [req("child")]
    assert handler.for_object()(informer.Event("add", obj(namespace=None))) == [req("child", "")]


def test_for_owner_enqueues_only_a_controller_owner_of_the_kind() -> None:
    event = informer.Event(
        "add",
        obj(
            ref("not-controller", controller=False),
            ref("other-kind", kind="RayCluster"),
            ref("other-group", api_version="example.com/v1"),
            ref("svc", api_version="ray.io/v1alpha1"),  # same group, older version
        ),
    )
    assert OWNER(event) == [req("svc")]


def test_update_enqueues_the_old_and_the_new_owner() -> None:
    moved = informer.Event("update", obj(ref("new")), old=obj(ref("old")))
    assert sorted(OWNER(moved)) == [req("new"), req("old")]


def test_orphaning_wakes_the_old_owner() -> None:
    orphaned = informer.Event("update", obj(), old=obj(ref("old")))
    assert OWNER(orphaned) == [req("old")]
    adopted = informer.Event("update", obj(ref("new")), old=obj())
    assert OWNER(adopted) == [req("new")]


def test_unchanged_owner_is_enqueued_once() -> None:
    same = informer.Event("update", obj(ref("svc")), old=obj(ref("svc")))
    assert OWNER(same) == [req("svc")]
    resync = obj(ref("svc"))
    assert OWNER(informer.Event("update", resync, old=resync)) == [req("svc")]


def test_delete_enqueues_the_last_known_owner() -> None:
    assert OWNER(informer.Event("delete", obj(ref("svc")))) == [req("svc")]


def test_cluster_scoped_owner_gets_an_empty_namespace() -> None:
    for_node = handler.for_owner("v1", "Node", namespaced=False)
    pod = obj(ref("node-1", kind="Node", api_version="v1"))
    assert for_node(informer.Event("add", pod)) == [req("node-1", "")]


def test_map_to_enqueues_what_the_function_returns() -> None:
    fn = handler.map_to(lambda o: [req("x"), req("y")])
    assert fn(informer.Event("add", obj())) == [req("x"), req("y")]
