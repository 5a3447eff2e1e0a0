"""Event handlers: which requests a change to an object should cause.

A handler maps an :class:`~runtime.cache.informer.Event` to the
:class:`~runtime.reconcile.Request` keys to enqueue:

- :func:`for_object`: the object itself (``For(Database)``);
- :func:`for_owner`: its **controller** owner, if that owner has the given kind
  (``Owns(StatefulSet)``: a change to a StatefulSet reconciles its Database); on
  an update, the old object's owner too (an object that left its owner wakes it);
- :func:`map_to`: anything a function returns (for relations that are not
  owner references, e.g. by label).

>>> from runtime.cache.informer import Event
>>> ref = {"apiVersion": "example.com/v1", "kind": "Database", "name": "db",
...        "uid": "u1", "controller": True}
>>> pod = {"metadata": {"namespace": "ns", "name": "db-0", "ownerReferences": [ref]}}
>>> for_object()(Event("add", pod)), for_owner("example.com/v1", "Database")(Event("add", pod))
([Request(namespace='ns', name='db-0')], [Request(namespace='ns', name='db')])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from runtime import reconcile
from runtime.cache import informer

__all__ = ["EventHandler", "for_object", "for_owner", "map_to"]

EventHandler = Callable[[informer.Event], list[reconcile.Request]]


def for_object() -> EventHandler:
    """Enqueue the changed object."""

    def handle(event: informer.Event) -> list[reconcile.Request]:
        meta = event.obj["metadata"]
        return [reconcile.Request(meta.get("namespace") or "", meta["name"])]

    return handle


def for_owner(api_version: str, kind: str, *, namespaced: bool = True) -> EventHandler:
    """Enqueue the object's controller owner when it is a ``kind`` of ``api_version``.

    The group is compared, not the version (an owner reference written with an
    older version of the same group still matches). On an update the owners of
    both the old and the new object are enqueued (once, if they are the same), so
    orphaning or re-parenting an object also wakes the owner it left. The request
    is in the object's namespace, or in ``""`` when the owner's kind is cluster
    scoped (``namespaced=False``; pass the owner resource's ``namespaced``).
    """
    group = api_version.rpartition("/")[0]

    def owner(obj: dict[str, Any]) -> reconcile.Request | None:
        meta = obj["metadata"]
        for ref in meta.get("ownerReferences") or ():
            if not ref.get("controller") or ref.get("kind") != kind:
                continue
            if ref.get("apiVersion", "").rpartition("/")[0] != group:
                continue
            namespace = (meta.get("namespace") or "") if namespaced else ""
            return reconcile.Request(namespace, ref["name"])
        return None

    def handle(event: informer.Event) -> list[reconcile.Request]:
        new = owner(event.obj)
        old = owner(event.old) if event.old is not None and event.old is not event.obj else None
        if old is None or old == new:
            return [new] if new is not None else []
        return [old] if new is None else [old, new]

    return handle


def map_to(fn: Callable[[dict[str, Any]], Iterable[reconcile.Request]]) -> EventHandler:
    """Enqueue whatever ``fn(obj)`` returns."""

    def handle(event: informer.Event) -> list[reconcile.Request]:
        return list(fn(event.obj))

    return handle
