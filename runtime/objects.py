"""Helpers for writing owned objects: change-gated create-or-update, owner references, finalizers.

:func:`create_or_update` is the spec/metadata counterpart of the status writer:
read the object (from the cache when one is given: zero GETs), apply
``mutate`` to a **copy**, and write only if the result differs semantically
from what is there. It never writes an object that did not change.

"Differs semantically" is :func:`runtime.equality.equal` on everything but
``status``, the way apimachinery's ``equality.Semantic.DeepEqual`` compares:
the API server answers in its own words, and a reconciler that says the same
thing in others must not write on every pass. So

- quantities compare by value where Kubernetes types them ``resource.Quantity``
  (container ``resources.limits``/``requests``, ``overhead``, ``capacity``,
  ``emptyDir.sizeLimit``...; see :func:`runtime.equality.normalize` for the exact
  rule): ``"1000m"`` equals the ``"1"`` the server stored, ``"1024Mi"`` equals
  ``"1Gi"``, ``2`` equals ``"2"``; elsewhere (an env var, a ConfigMap value) a
  string is compared as a string;
- ``{}``, ``[]`` and ``null`` equal an absent field (the server omits them).

Fields the server *adds* (defaults such as a Pod's ``imagePullPolicy``) are kept
because ``mutate`` edits a copy of the current object: set the fields you own,
do not replace whole sub-objects you do not.

The object returned is always the caller's own (a private copy, never the
cache's shared object), whatever the operation.

>>> owner = {"apiVersion": "example.com/v1", "kind": "Database",
...          "metadata": {"name": "db", "uid": "u1"}}
>>> child = {"metadata": {"name": "db-backup-abcde"}}
>>> set_controller_reference(owner, child)["metadata"]["ownerReferences"][0]["controller"]
True
>>> FINALIZER = "example.com/database-finalizer"
>>> add_finalizer(child, FINALIZER), has_finalizer(child, FINALIZER)
(True, True)
>>> add_finalizer(child, FINALIZER)   # already there: nothing to write
False
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from runtime import equality
from runtime.client import errors, resources

if TYPE_CHECKING:  # a type only: the pure helpers here load no cache
    from runtime.cache import cache as cache_

__all__ = [
    "AlreadyOwnedError",
    "Operation",
    "add_finalizer",
    "controller_of",
    "create_or_update",
    "has_finalizer",
    "is_controlled_by",
    "owner_reference",
    "remove_finalizer",
    "set_controller_reference",
]

Obj = dict[str, Any]


class WriteClient(Protocol):
    async def get(self, resource: resources.Resource, namespace: str | None, name: str) -> Obj: ...

    async def create(self, obj: Obj, *, namespace: str | None = None) -> Obj: ...

    async def update(self, obj: Obj, *, subresource: str | None = None) -> Obj: ...


class Operation(enum.Enum):
    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"


class AlreadyOwnedError(ValueError):
    """The object already has a different controller owner."""


def is_controlled_by(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    """Whether ``owner`` is ``obj``'s controller (an owner reference with
    ``controller: true`` and ``owner``'s uid; apimachinery's ``IsControlledBy``).

    >>> owner = {"metadata": {"uid": "u1"}}
    >>> is_controlled_by({"metadata": {"ownerReferences": [{"uid": "u1", "controller": True}]}},
    ...                  owner)
    True
    >>> is_controlled_by({"metadata": {"ownerReferences": [{"uid": "u1"}]}}, owner)
    False
    """
    uid = (owner.get("metadata") or {}).get("uid")
    ref = controller_of(obj)
    return uid is not None and ref is not None and ref.get("uid") == uid


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``obj``'s controller owner reference, or None (apimachinery's ``GetControllerOf``).

    >>> controller_of({"metadata": {"ownerReferences": [{"uid": "u1"},
    ...                                                 {"uid": "u2", "controller": True}]}})
    {'uid': 'u2', 'controller': True}
    """
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return ref
    return None


def owner_reference(
    owner: Mapping[str, Any],
    *,
    api_version: str | None = None,
    kind: str | None = None,
    block_owner_deletion: bool = True,
) -> Obj:
    """A controller owner reference to ``owner`` (apimachinery's ``NewControllerRef``).

    ``api_version`` and ``kind`` stand in when ``owner`` carries none (an object built
    by hand, or the raw items of a list answer: :class:`runtime.client.Client` fills
    them in on the items it returns, the API server does not); :class:`ValueError`
    when neither says.

    >>> owner_reference({"metadata": {"name": "db", "uid": "u1"}},
    ...                 api_version="example.com/v1", kind="Database")["kind"]
    'Database'
    """
    meta = owner.get("metadata") or {}
    version = owner.get("apiVersion") or api_version
    of_kind = owner.get("kind") or kind
    if not version or not of_kind:
        raise ValueError(f"the owner {meta.get('name')!r} says neither its apiVersion nor kind")
    return {
        "apiVersion": version,
        "kind": of_kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": block_owner_deletion,
    }


def set_controller_reference(
    owner: Mapping[str, Any],
    obj: Obj,
    *,
    api_version: str | None = None,
    kind: str | None = None,
    block_owner_deletion: bool = True,
) -> Obj:
    """Make ``owner`` the controller of ``obj`` (in place; returns ``obj``);
    ``api_version``/``kind`` as for :func:`owner_reference`.

    Raises :class:`AlreadyOwnedError` if another object is already its controller.
    """
    ref = owner_reference(
        owner, api_version=api_version, kind=kind, block_owner_deletion=block_owner_deletion
    )
    refs = obj.setdefault("metadata", {}).setdefault("ownerReferences", [])
    for i, existing in enumerate(refs):
        if existing.get("controller") and existing.get("uid") != ref["uid"]:
            raise AlreadyOwnedError(
                f"{obj['metadata'].get('name')} is already controlled by "
                f"{existing.get('kind')} {existing.get('name')}"
            )
        if existing.get("uid") == ref["uid"]:
            refs[i] = ref
            return obj
    refs.append(ref)
    return obj


def has_finalizer(obj: Obj, finalizer: str) -> bool:
    return finalizer in (obj.get("metadata", {}).get("finalizers") or ())


def add_finalizer(obj: Obj, finalizer: str) -> bool:
    """Add ``finalizer`` in place; False if it was already there (nothing to write)."""
    finalizers = obj.setdefault("metadata", {}).setdefault("finalizers", [])
    if finalizer in finalizers:
        return False
    finalizers.append(finalizer)
    return True


def remove_finalizer(obj: Obj, finalizer: str) -> bool:
    """Remove ``finalizer`` in place; False if it was not there (nothing to write)."""
    finalizers = obj.get("metadata", {}).get("finalizers") or []
    if finalizer not in finalizers:
        return False
    obj["metadata"]["finalizers"] = [f for f in finalizers if f != finalizer]
    return True


async def create_or_update(
    client: WriteClient,
    resource: resources.Resource,
    namespace: str | None,
    name: str,
    mutate: Callable[[Obj], None],
    *,
    cache: cache_.Cache | None = None,
) -> tuple[Operation, Obj]:
    """Create the object, or update it only if ``mutate`` changed it (see the module docstring).

    ``mutate(obj)`` gets a fresh skeleton (``apiVersion``, ``kind``, ``metadata.name``
    and ``namespace``) when the object does not exist, else a deep copy of the
    current one; it must not change the name or namespace.

    Returns the operation and the object as the server has it: the write's answer,
    or the current object when nothing changed - a private copy either way.
    """
    try:
        current = (
            await cache.get(resource, namespace, name)
            if cache is not None
            else await client.get(resource, namespace, name)
        )
    except errors.NotFound:
        skeleton: Obj = {
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "metadata": {"name": name, **({"namespace": namespace} if namespace else {})},
        }
        mutate(skeleton)
        _check_identity(skeleton, namespace, name)
        created = await client.create(skeleton, namespace=namespace)
        _did(Operation.CREATED, resource, namespace, name)
        return Operation.CREATED, copy.deepcopy(created)  # a cache may hold the answer
    desired = copy.deepcopy(current)
    mutate(desired)
    _check_identity(desired, namespace, name)
    if equality.equal(_without_status(current), _without_status(desired)):
        _did(Operation.UNCHANGED, resource, namespace, name)
        return Operation.UNCHANGED, copy.deepcopy(current) if cache is not None else current
    updated = await client.update(desired)
    _did(Operation.UPDATED, resource, namespace, name)
    return Operation.UPDATED, copy.deepcopy(updated)


_log = structlog.get_logger("runtime.objects")


def _did(operation: Operation, resource: resources.Resource, ns: str | None, name: str) -> None:
    """One debug line per :func:`create_or_update` (inside a reconcile, the controller's
    ``reconcile_id`` and key are bound to it): a test's manager log shows what was written."""
    _log.debug(
        "create_or_update", operation=operation.value, resource=str(resource),
        object=f"{ns}/{name}" if ns else name,
    )  # fmt: skip


def _without_status(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k != "status"}


def _check_identity(obj: Obj, namespace: str | None, name: str) -> None:
    meta = obj.get("metadata", {})
    if meta.get("name") != name or (namespace and meta.get("namespace") != namespace):
        raise ValueError("mutate must not change the object's name or namespace")
