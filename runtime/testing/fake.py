"""An in-memory API server for unit tests, with the semantics reconcilers depend on.

:class:`FakeClient` has the verbs of :class:`runtime.client.Client` (get, list,
create, update, update_status, patch with merge patches, delete, watch) and
keeps what makes controllers correct or wrong against a real server:

- every change bumps a global ``resourceVersion``; a no-op write does not;
- a write carrying a stale ``metadata.resourceVersion`` gets
  :class:`~runtime.client.errors.Conflict` (409); a create of an existing name
  :class:`~runtime.client.errors.AlreadyExists`;
- the **status subresource** is separate: ``update`` ignores ``status``,
  ``update_status`` changes only ``status``, and a create drops ``status``;
- ``metadata.generation`` starts at 1 and moves only when the spec (anything
  but metadata and status) changes;
- a delete of an object with finalizers only sets ``deletionTimestamp``; it goes
  away once an update empties its finalizers;
- watches get ADDED/MODIFIED/DELETED events after the resourceVersion they ask
  for (and BOOKMARKs on :meth:`FakeClient.bookmark`); :meth:`FakeClient.compact`
  makes older resourceVersions answer :class:`~runtime.client.errors.Gone`;
- every call is recorded in :attr:`FakeClient.calls` as ``(verb, resource, subresource)``
  so tests can count writes; returned objects are copies, as from a real server.

It is for unit tests only: integration tests use the real control plane
(:mod:`runtime.testing.controlplane`). Not covered: field selectors, strategic
and server-side-apply patches, admission, validation.
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import datetime
import itertools
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from runtime.cache import selector as selector_
from runtime.client import client as client_
from runtime.client import errors, resources

__all__ = ["FakeClient", "merge_patch"]

Obj = dict[str, Any]
_NOT_SPEC = frozenset({"metadata", "status", "apiVersion", "kind"})


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _spec(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in _NOT_SPEC}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeClient:
    """See the module docstring."""

    def __init__(self, registry: resources.Registry | None = None) -> None:
        self.registry = registry or resources.default_registry.copy()
        self.calls: list[tuple[str, str, str]] = []
        self._objects: dict[tuple[resources.Resource, str], Obj] = {}
        self._rv = itertools.count(1)
        self._last_rv = 0
        self._history: list[tuple[int, resources.Resource, Obj]] = []
        self._compacted = 0
        self._watchers: list[tuple[resources.Resource, str | None, asyncio.Queue[Obj]]] = []
        self._write_observers: list[Callable[[Obj], None]] = []
        self.fail_next: dict[str, BaseException] = {}
        """Errors to raise on the next call of a verb: ``{"update_status": Conflict(...)}``."""

    # -- the Client surface ------------------------------------------------------------------

    def add_write_observer(self, observer: Callable[[Obj], None]) -> None:
        self._write_observers.append(observer)

    def resource_for(self, obj_or_resource: Obj | resources.Resource) -> resources.Resource:
        if isinstance(obj_or_resource, resources.Resource):
            return obj_or_resource
        return self.registry.for_object(obj_or_resource)

    def writes(self, verb: str | None = None, subresource: str | None = None) -> int:
        """How many write calls were made (optionally of one verb / subresource)."""
        return sum(
            1
            for v, _, sub in self.calls
            if v in ("create", "update", "patch", "delete")
            and (verb is None or v == verb)
            and (subresource is None or sub == subresource)
        )

    async def get(self, resource: resources.Resource, namespace: str | None, name: str) -> Obj:
        self._record("get", resource)
        return copy.deepcopy(self._find(resource, namespace, name))

    async def list(
        self,
        resource: resources.Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        page_size: int = 500,
    ) -> client_.ListResult:
        self._record("list", resource)
        if field_selector:
            raise NotImplementedError("the fake client does not support field selectors")
        selector = selector_.parse(label_selector or "")
        items = [
            copy.deepcopy(obj)
            for (res, key), obj in sorted(self._objects.items(), key=lambda kv: kv[0][1])
            if res == resource
            and (not namespace or obj["metadata"].get("namespace") == namespace)
            and selector.matches(obj["metadata"].get("labels"))
        ]
        return client_.ListResult(items, str(self._last_rv))

    async def create(self, obj: Obj, *, namespace: str | None = None) -> Obj:
        resource = self.resource_for(obj)
        self._record("create", resource)
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if resource.namespaced:
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise errors.Invalid(422, "Invalid", "metadata.name: Required value")
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        key = self._key(resource, meta.get("namespace"), meta["name"])
        if key in self._objects:
            raise errors.AlreadyExists(
                409, "AlreadyExists", f'{resource} "{meta["name"]}" already exists'
            )
        obj.pop("status", None)
        meta.update(
            uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1,
            resourceVersion=self._bump(),
        )  # fmt: skip
        meta.pop("deletionTimestamp", None)
        self._objects[key] = obj
        self._emit("ADDED", resource, obj)
        return self._written(obj)

    async def update(self, obj: Obj, *, subresource: str | None = None) -> Obj:
        if subresource == "status":
            return await self.update_status(obj)
        resource = self.resource_for(obj)
        self._record("update", resource)
        current = self._check_write(resource, obj)
        new = copy.deepcopy(obj)
        new["status"] = copy.deepcopy(current.get("status"))
        if new["status"] is None:
            del new["status"]
        meta = new["metadata"]
        for field in ("uid", "creationTimestamp", "generation", "namespace", "deletionTimestamp"):
            if field in current["metadata"]:
                meta[field] = current["metadata"][field]
        if _spec(new) != _spec(current):
            meta["generation"] = current["metadata"].get("generation", 1) + 1
        return self._store(resource, current, new)

    async def update_status(self, obj: Obj) -> Obj:
        resource = self.resource_for(obj)
        self._record("update", resource, "status")
        current = self._check_write(resource, obj)
        new = copy.deepcopy(current)
        if obj.get("status") is None:
            new.pop("status", None)
        else:
            new["status"] = copy.deepcopy(obj["status"])
        return self._store(resource, current, new)

    async def patch(
        self,
        resource: resources.Resource,
        namespace: str | None,
        name: str,
        patch: Any,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
        force: bool = False,
    ) -> Obj:
        self._record("patch", resource, subresource or "")
        if patch_type != "merge":
            raise NotImplementedError(f"the fake client supports merge patches, not {patch_type}")
        current = self._find(resource, namespace, name)
        patched = merge_patch(current, patch)
        wanted_rv = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted_rv is not None and wanted_rv != current["metadata"]["resourceVersion"]:
            raise self._conflict(resource, name)
        patched["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        if subresource == "status":
            new = copy.deepcopy(current)
            new["status"] = patched.get("status")
            return self._store(resource, current, new)
        patched["status"] = copy.deepcopy(current.get("status"))
        if patched["status"] is None:
            del patched["status"]
        if _spec(patched) != _spec(current):
            patched["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
        return self._store(resource, current, patched)

    async def delete(
        self,
        resource: resources.Resource,
        namespace: str | None,
        name: str,
        *,
        propagation_policy: str | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> Obj | None:
        self._record("delete", resource)
        current = self._find(resource, namespace, name)
        if uid and current["metadata"]["uid"] != uid:
            raise self._conflict(resource, name)
        if resource_version and current["metadata"]["resourceVersion"] != resource_version:
            raise self._conflict(resource, name)
        if current["metadata"].get("finalizers"):
            if not current["metadata"].get("deletionTimestamp"):
                new = copy.deepcopy(current)
                new["metadata"]["deletionTimestamp"] = _now()
                return self._store(resource, current, new)
            return copy.deepcopy(current)
        self._remove(resource, current)
        return copy.deepcopy(current)

    async def watch(
        self,
        resource: resources.Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        timeout_seconds: int | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        allow_bookmarks: bool = True,
        send_initial_events: bool = False,
    ) -> AsyncIterator[Obj]:
        self._record("watch", resource)
        since = int(resource_version or self._last_rv)
        if since < self._compacted:
            raise errors.Gone(410, "Expired", "too old resource version")
        queue: asyncio.Queue[Obj] = asyncio.Queue()
        if send_initial_events:  # WatchList: the current state, then the end-of-initial bookmark
            for (res, _), obj in sorted(self._objects.items(), key=lambda kv: kv[0][1]):
                if res == resource:
                    queue.put_nowait({"type": "ADDED", "object": copy.deepcopy(obj)})
            queue.put_nowait(
                {"type": "BOOKMARK", "object": {"metadata": {
                    "resourceVersion": str(self._last_rv),
                    "annotations": {"k8s.io/initial-events-end": "true"}}}}
            )  # fmt: skip
        for rv, res, event in self._history:
            if rv > since and res == resource and not send_initial_events:
                queue.put_nowait(copy.deepcopy(event))
        entry = (resource, namespace, queue)
        self._watchers.append(entry)
        selector = selector_.parse(label_selector or "")
        try:
            async with asyncio.timeout(timeout_seconds):
                while True:
                    event = await queue.get()
                    meta = event["object"]["metadata"]
                    if event["type"] == "ERROR":
                        status = event["object"]
                        raise errors.from_status(status.get("code", 500), status)
                    if namespace and meta.get("namespace") not in (namespace, None):
                        continue
                    if event["type"] != "BOOKMARK" and not selector.matches(meta.get("labels")):
                        continue
                    yield event
        except TimeoutError:
            return
        finally:
            self._watchers.remove(entry)

    # -- test controls -------------------------------------------------------------------------

    def bookmark(self) -> None:
        """Send every watcher a BOOKMARK at the current resourceVersion."""
        for resource, _, queue in self._watchers:
            queue.put_nowait(
                {"type": "BOOKMARK", "object": {"apiVersion": resource.api_version,
                 "kind": resource.kind, "metadata": {"resourceVersion": str(self._last_rv)}}}
            )  # fmt: skip

    def compact(self) -> None:
        """Forget history: watches from older resourceVersions get 410, and open watches
        are ended with a 410 error event (as after etcd compaction)."""
        self._compacted = self._last_rv
        self._history.clear()
        for _, _, queue in self._watchers:
            queue.put_nowait(
                {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                 "message": "too old resource version", "metadata": {}}}
            )  # fmt: skip

    @property
    def resource_version(self) -> str:
        return str(self._last_rv)

    def objects(self, resource: resources.Resource) -> builtins.list[Obj]:
        """The stored objects of a kind (not copies; do not change them)."""
        return [obj for (res, _), obj in self._objects.items() if res == resource]

    # -- internals -----------------------------------------------------------------------------

    def _record(self, verb: str, resource: resources.Resource, sub: str = "") -> None:
        self.calls.append((verb, str(resource), sub))
        key = f"{verb}_{sub}" if sub else verb
        error = self.fail_next.pop(key, None)
        if error is not None:
            raise error

    @staticmethod
    def _key(resource: resources.Resource, namespace: str | None, name: str) -> tuple[Any, str]:
        return resource, f"{namespace}/{name}" if resource.namespaced else name

    def _find(self, resource: resources.Resource, namespace: str | None, name: str) -> Obj:
        obj = self._objects.get(self._key(resource, namespace, name))
        if obj is None:
            raise errors.NotFound(404, "NotFound", f'{resource} "{name}" not found')
        return obj

    @staticmethod
    def _conflict(resource: resources.Resource, name: str) -> errors.Conflict:
        return errors.Conflict(
            409, "Conflict",
            f'Operation cannot be fulfilled on {resource} "{name}": the object has been '
            "modified; please apply your changes to the latest version and try again",
        )  # fmt: skip

    def _check_write(self, resource: resources.Resource, obj: Obj) -> Obj:
        meta = obj["metadata"]
        current = self._find(resource, meta.get("namespace"), meta["name"])
        rv = meta.get("resourceVersion")
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise self._conflict(resource, meta["name"])
        return current

    def _bump(self) -> str:
        self._last_rv = next(self._rv)
        return str(self._last_rv)

    def _store(self, resource: resources.Resource, current: Obj, new: Obj) -> Obj:
        new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        if new == current:
            return copy.deepcopy(current)  # a no-op write changes nothing, not even the RV
        new["metadata"]["resourceVersion"] = self._bump()
        meta = new["metadata"]
        key = self._key(resource, meta.get("namespace"), meta["name"])
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self._objects[key] = new
            self._remove(resource, new)
            return copy.deepcopy(new)
        self._objects[key] = new
        self._emit("MODIFIED", resource, new)
        return self._written(new)

    def _remove(self, resource: resources.Resource, obj: Obj) -> None:
        meta = obj["metadata"]
        del self._objects[self._key(resource, meta.get("namespace"), meta["name"])]
        gone = copy.deepcopy(obj)
        gone["metadata"]["resourceVersion"] = self._bump()
        self._emit("DELETED", resource, gone)

    def _emit(self, kind: str, resource: resources.Resource, obj: Obj) -> None:
        event = {"type": kind, "object": copy.deepcopy(obj)}
        self._history.append((self._last_rv, resource, event))
        for res, _, queue in self._watchers:
            if res == resource:
                queue.put_nowait(copy.deepcopy(event))

    def _written(self, obj: Obj) -> Obj:
        result = copy.deepcopy(obj)
        for observer in self._write_observers:
            observer(copy.deepcopy(obj))
        return result
