"""An in-memory API server for unit tests, answering the way kube-apiserver does.

:class:`FakeClient` has the verbs of :class:`runtime.client.Client` (get, list,
create, update, update_status, patch with merge patches, delete, watch) and
keeps what makes controllers correct or wrong against a real server. Each rule
below is checked against a real kube-apiserver by
``tests/integration/test_fake_vs_apiserver.py``.

Versions and conflicts:

- every change bumps a global ``resourceVersion``; a no-op write does not;
- a write carrying a stale ``metadata.resourceVersion`` gets
  :class:`~runtime.client.errors.Conflict` (409); a create of an existing name
  :class:`~runtime.client.errors.AlreadyExists`; a create that carries a
  ``resourceVersion`` other than ``"0"`` is refused (500, as the server's storage
  layer does);
- an update **without** ``resourceVersion`` is refused with
  :class:`~runtime.client.errors.Invalid` (422, "must be specified for an update")
  for custom resources (and Leases, CRDs, PodDisruptionBudgets); other built-in
  kinds accept it as an unconditional write.

What each kind has (see :func:`traits`):

- **custom resources** (a group that is not a built-in one) are assumed to have a
  status subresource and get a ``generation``;
- built-in kinds have what kube-apiserver gives them: Pods, Deployments,
  ReplicaSets, Jobs, Ingresses, CRDs... have both; Services, Namespaces and
  Nodes have a status subresource but no generation; EndpointSlices a
  generation but no status; ConfigMaps, Secrets, Events, Leases, RBAC objects
  neither;
- where there is a **status subresource**, ``update`` ignores ``status``,
  ``update_status`` (and a patch of ``status``) changes only ``status``, and a
  create drops it; where there is none, ``status`` is dropped from every write
  and a ``/status`` write answers :class:`~runtime.client.errors.NotFound` (404);
- where there is a **generation**, ``metadata.generation`` starts at 1 and moves
  when the spec (anything but metadata and status) changes, and when a delete
  sets ``deletionTimestamp``; elsewhere it is absent.

Namespaces and deletion:

- a namespaced create into a namespace that does not exist answers
  :class:`~runtime.client.errors.NotFound` (404). ``default``, ``kube-system``,
  ``kube-public`` and ``kube-node-lease`` exist from the start; add more with
  ``FakeClient(namespaces=[...])``, :meth:`FakeClient.add_namespaces` or by
  creating Namespace objects. Deleting a namespace removes it and everything in
  it at once (a real server goes through ``Terminating`` first);
- a delete of an object with finalizers sets ``deletionTimestamp`` (and
  ``deletionGracePeriodSeconds: 0``, and bumps ``generation``) and answers the
  object (and no finalizer may be added from then on: 422); the update (or
  patch) that removes the last finalizer deletes it: the
  watch sees one DELETED event, and the answer is the object as written, at the
  resourceVersion it was sent with (and, like every stored object, without empty
  ``finalizers``, ``labels``, ``annotations`` or ``ownerReferences``);
- a delete that removes the object answers a ``Status`` (``kind: Status``,
  ``details`` naming it), except for Pods, Services, Namespaces and
  ServiceAccounts, whose deletes answer the deleted object. Pods are deleted at
  once (there is no kubelet to honour a grace period).

Watches:

- without a ``resourceVersion`` (or with ``"0"``), a watch starts with an ADDED
  event for each existing object, then streams changes; with one, it streams the
  changes after it (and BOOKMARKs on :meth:`FakeClient.bookmark`);
- lists and watches take label and field selectors (:mod:`runtime.cache.fields`:
  ``=``, ``==``, ``!=`` on any dotted path; a real server supports only a few
  fields per kind and refuses the others with 400, the fake does not check);
  on a watch, an object that stops matching arrives as DELETED and one that
  starts matching as ADDED;
- :meth:`FakeClient.compact` compacts at the current resourceVersion R, as etcd
  does: changes before R are forgotten, so a **new** watch that would replay one
  (from a resourceVersion below R - 1) answers :class:`~runtime.client.errors.Gone`
  (410), while open watches keep streaming; :meth:`FakeClient.expire_watches`
  ends the open watches with a 410 ERROR event (as a server does when a watcher
  falls too far behind).

Write observers (:meth:`FakeClient.add_write_observer`) are called with the answer
of every successful create, update and patch (status included), and delete
observers (:meth:`FakeClient.add_delete_observer`) after every successful delete,
as :class:`runtime.client.Client` does. Every call is
recorded in :attr:`FakeClient.calls` as ``(verb, resource, subresource)`` so tests
can count writes; returned objects are copies, as from a real server.

It is for unit tests only: integration tests use the real control plane
(:mod:`runtime.testing.controlplane`). Not covered: strategic
and server-side-apply patches, admission webhooks, schema validation, defaulting
(a Pod gets no ``status.phase``), garbage collection of owned objects.
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import dataclasses
import itertools
import uuid
from collections.abc import AsyncGenerator, Callable, Iterable
from typing import Any

from runtime import clock
from runtime.cache import fields as fields_
from runtime.cache import selector as selector_
from runtime.client import client as client_
from runtime.client import errors, resources

__all__ = ["FakeClient", "Traits", "merge_patch", "traits"]

Obj = dict[str, Any]
_NOT_SPEC = frozenset({"metadata", "status", "apiVersion", "kind"})
_SYSTEM_FIELDS = (
    "uid", "creationTimestamp", "generation", "namespace", "deletionTimestamp",
    "deletionGracePeriodSeconds",
)  # fmt: skip
_NAMESPACES = resources.Resource("", "v1", "Namespace", "namespaces", namespaced=False)
_INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")

_BUILTIN_GROUPS = frozenset({
    "", "apps", "batch", "autoscaling", "policy", "admissionregistration.k8s.io",
    "apiextensions.k8s.io", "apiregistration.k8s.io", "authentication.k8s.io",
    "authorization.k8s.io", "certificates.k8s.io", "coordination.k8s.io",
    "discovery.k8s.io", "events.k8s.io", "flowcontrol.apiserver.k8s.io",
    "internal.apiserver.k8s.io", "networking.k8s.io", "node.k8s.io",
    "rbac.authorization.k8s.io", "resource.k8s.io", "scheduling.k8s.io",
    "storage.k8s.io", "storagemigration.k8s.io",
})  # fmt: skip
# From kube-apiserver's registry (pkg/registry/*/strategy.go and storage.go), v1.35.
_WITH_STATUS = frozenset({
    ("", "Pod"), ("", "Service"), ("", "Namespace"), ("", "Node"),
    ("", "PersistentVolume"), ("", "PersistentVolumeClaim"), ("", "ReplicationController"),
    ("", "ResourceQuota"), ("apps", "Deployment"), ("apps", "ReplicaSet"),
    ("apps", "StatefulSet"), ("apps", "DaemonSet"), ("batch", "Job"), ("batch", "CronJob"),
    ("autoscaling", "HorizontalPodAutoscaler"), ("policy", "PodDisruptionBudget"),
    ("networking.k8s.io", "Ingress"), ("apiextensions.k8s.io", "CustomResourceDefinition"),
})  # fmt: skip
_WITH_GENERATION = frozenset({
    ("", "Pod"), ("", "PodTemplate"), ("", "ReplicationController"), ("apps", "Deployment"),
    ("apps", "ReplicaSet"), ("apps", "StatefulSet"), ("apps", "DaemonSet"),
    ("batch", "Job"), ("batch", "CronJob"), ("policy", "PodDisruptionBudget"),
    ("discovery.k8s.io", "EndpointSlice"), ("networking.k8s.io", "Ingress"),
    ("networking.k8s.io", "IngressClass"), ("networking.k8s.io", "NetworkPolicy"),
    ("scheduling.k8s.io", "PriorityClass"), ("apiextensions.k8s.io", "CustomResourceDefinition"),
})  # fmt: skip
_CONDITIONAL_UPDATE_ONLY = frozenset({
    ("coordination.k8s.io", "Lease"), ("policy", "PodDisruptionBudget"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
})  # fmt: skip
_DELETE_ANSWERS_OBJECT = frozenset({
    ("", "Pod"), ("", "Service"), ("", "Namespace"), ("", "ServiceAccount"),
    ("", "PersistentVolume"), ("", "PersistentVolumeClaim"), ("", "PodTemplate"),
    ("", "ResourceQuota"),
})  # fmt: skip


class _Filter:
    """A list's or watch's label and field selectors."""

    def __init__(self, label_selector: str | None, field_selector: str | None) -> None:
        self.labels = selector_.parse(label_selector or "")
        self.fields = fields_.parse(field_selector or "")

    def matches(self, obj: Obj) -> bool:
        return self.labels.matches(obj["metadata"].get("labels")) and self.fields.matches(obj)


@dataclasses.dataclass(frozen=True, slots=True)
class Traits:
    """How kube-apiserver serves a kind, as far as the fake client models it."""

    status_subresource: bool
    """``/status`` is served, and main-resource writes ignore ``status``."""
    generation: bool
    """``metadata.generation`` is kept (1 on create, +1 on spec changes and deletion)."""
    unconditional_update: bool
    """An update without ``resourceVersion`` is accepted (else 422)."""
    delete_answers_object: bool
    """A delete that removes the object answers the object (else a ``Status``)."""


def traits(resource: resources.Resource) -> Traits:
    """What the fake client assumes of ``resource``: a custom resource (a group that is
    not a built-in one) has a status subresource and a generation and refuses
    unconditional updates; a built-in kind has what kube-apiserver gives it.

    >>> traits(resources.default_registry.for_kind("v1", "ConfigMap")).generation
    False
    >>> traits(resources.Resource("example.com", "v1", "Database", "databases"))
    Traits(status_subresource=True, generation=True, unconditional_update=False, delete_answers_object=False)
    """  # noqa: E501
    if resource.group not in _BUILTIN_GROUPS:
        return Traits(True, True, False, False)
    key = (resource.group, resource.kind)
    return Traits(
        key in _WITH_STATUS,
        key in _WITH_GENERATION,
        key not in _CONDITIONAL_UPDATE_ONLY,
        key in _DELETE_ANSWERS_OBJECT,
    )


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


def _drop_empty_metadata(obj: Obj) -> None:
    """The server stores no empty labels, annotations, finalizers or owner references."""
    meta = obj["metadata"]
    for field in ("labels", "annotations", "finalizers", "ownerReferences"):
        if field in meta and not meta[field]:
            del meta[field]


_Change = tuple[str, Obj, Obj | None]
"""A queued watch event: (type, object, the object before a MODIFIED)."""


class FakeClient:
    """See the module docstring. ``namespaces`` are created (besides ``default`` and the
    ``kube-*`` ones) before anything else."""

    def __init__(
        self, registry: resources.Registry | None = None, *, namespaces: Iterable[str] = ()
    ) -> None:
        self.registry = registry or resources.default_registry.copy()
        self.calls: list[tuple[str, str, str]] = []
        self._objects: dict[tuple[resources.Resource, str], Obj] = {}
        self._rv = itertools.count(1)
        self._last_rv = 0
        self._history: list[tuple[int, resources.Resource, _Change]] = []
        self._compacted = 0
        self._watchers: list[tuple[resources.Resource, str | None, asyncio.Queue[_Change]]] = []
        self._watch_waiters: list[asyncio.Future[None]] = []
        self._write_observers: list[Callable[[Obj], None]] = []
        self._delete_observers: list[
            Callable[[resources.Resource, str | None, str, Any], None]
        ] = []
        self.fail_next: dict[str, BaseException] = {}
        """Errors to raise on the next call of a verb: ``{"update_status": Conflict(...)}``."""
        self.add_namespaces(*_INITIAL_NAMESPACES, *namespaces)

    # -- the Client surface ------------------------------------------------------------------

    def add_write_observer(self, observer: Callable[[Obj], None]) -> None:
        self._write_observers.append(observer)

    def add_delete_observer(
        self, observer: Callable[[resources.Resource, str | None, str, Any], None]
    ) -> None:
        self._delete_observers.append(observer)

    def _deleted(
        self, resource: resources.Resource, namespace: str | None, name: str, answer: Obj
    ) -> Obj:
        for observer in self._delete_observers:
            observer(resource, namespace, name, copy.deepcopy(answer))
        return answer

    def resource_for(self, obj_or_resource: Obj | resources.Resource) -> resources.Resource:
        return self.registry.resource_for(obj_or_resource)

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
        selector = _Filter(label_selector, field_selector)
        items = [
            copy.deepcopy(obj)
            for obj in self._current(resource)
            if (
                not namespace
                or not resource.namespaced
                or obj["metadata"].get("namespace") == namespace
            )
            and selector.matches(obj)
        ]
        return client_.ListResult(items, str(self._last_rv))

    async def create(self, obj: Obj, *, namespace: str | None = None) -> Obj:
        resource = self.resource_for(obj)
        self._record("create", resource)
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if resource.namespaced:
            meta["namespace"] = namespace or meta.get("namespace") or "default"
            if self._objects.get(self._key(_NAMESPACES, None, meta["namespace"])) is None:
                raise errors.NotFound(
                    404, "NotFound", f'namespaces "{meta["namespace"]}" not found'
                )
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise errors.Invalid(422, "Invalid", "metadata.name: Required value")
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if str(meta.get("resourceVersion") or "0").lstrip("0").isdigit():
            raise errors.ServerError(
                500, "", "resourceVersion should not be set on objects to be created"
            )
        key = self._key(resource, meta.get("namespace"), meta["name"])
        if key in self._objects:
            raise errors.AlreadyExists(
                409, "AlreadyExists", f'{resource} "{meta["name"]}" already exists'
            )
        self._insert(resource, key, obj)
        return self._written(obj)

    async def update(self, obj: Obj, *, subresource: str | None = None) -> Obj:
        if subresource == "status":
            return await self.update_status(obj)
        resource = self.resource_for(obj)
        self._record("update", resource)
        current = self._check_write(resource, obj)
        new = copy.deepcopy(obj)
        self._keep_system_fields(resource, current, new)
        return self._written(self._commit(resource, current, new))

    async def update_status(self, obj: Obj) -> Obj:
        resource = self.resource_for(obj)
        self._record("update", resource, "status")
        self._check_status_subresource(resource)
        current = self._check_write(resource, obj)
        new = copy.deepcopy(current)
        if obj.get("status") is None:
            new.pop("status", None)
        else:
            new["status"] = copy.deepcopy(obj["status"])
        return self._written(self._commit(resource, current, new))

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
        if subresource == "status":
            self._check_status_subresource(resource)
        current = self._find(resource, namespace, name)
        patched = merge_patch(current, patch)
        wanted_rv = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted_rv is not None and wanted_rv != current["metadata"]["resourceVersion"]:
            raise self._conflict(resource, name)
        patched["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        if subresource == "status":
            new = copy.deepcopy(current)
            new["status"] = patched.get("status")
            if new["status"] is None:
                del new["status"]
            return self._written(self._commit(resource, current, new))
        self._keep_system_fields(resource, current, patched)
        return self._written(self._commit(resource, current, patched))

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
            if current["metadata"].get("deletionTimestamp"):
                return self._deleted(resource, namespace, name, copy.deepcopy(current))
            new = copy.deepcopy(current)
            meta = new["metadata"]
            meta["deletionTimestamp"] = clock.rfc3339()
            meta["deletionGracePeriodSeconds"] = 0
            if meta.get("generation"):
                meta["generation"] += 1
            return self._deleted(resource, namespace, name, self._commit(resource, current, new))
        if resource == _NAMESPACES:
            for res, obj in builtins.list(self._objects.items()):
                if res[0].namespaced and obj["metadata"].get("namespace") == name:
                    self._remove(res[0], obj)
        gone = self._remove(resource, current)
        if traits(resource).delete_answers_object:
            return self._deleted(resource, namespace, name, gone)
        details = {"name": name, "group": resource.group, "kind": resource.plural,
                   "uid": current["metadata"]["uid"]}  # fmt: skip
        if not resource.group:
            del details["group"]
        answer = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                  "details": details}  # fmt: skip
        return self._deleted(resource, namespace, name, answer)

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
    ) -> AsyncGenerator[Obj, None]:
        self._record("watch", resource)
        selector = _Filter(label_selector, field_selector)
        queue: asyncio.Queue[_Change] = asyncio.Queue()
        if send_initial_events or resource_version in (None, "", "0"):
            for obj in self._current(resource):
                queue.put_nowait(("ADDED", copy.deepcopy(obj), None))
            if send_initial_events:  # WatchList: the end-of-initial-events bookmark
                queue.put_nowait(self._bookmark(resource, initial_events_end=True))
        else:
            since = int(resource_version)
            if since + 1 < self._compacted:  # its next change is forgotten
                raise errors.Gone(410, "Expired", "too old resource version")
            for rv, res, change in self._history:
                if rv > since and res == resource:
                    queue.put_nowait(copy.deepcopy(change))
        entry = (resource, namespace, queue)
        self._watchers.append(entry)
        for waiter in self._watch_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._watch_waiters.clear()
        try:
            async with asyncio.timeout(timeout_seconds):
                while True:
                    kind, obj, old = await queue.get()
                    # Done once the reader asks for the next event (or leaves): by then
                    # it has handled this one (see delivered()).
                    try:
                        if kind == "ERROR":
                            raise errors.from_status(obj.get("code", 500), obj)
                        if kind == "BOOKMARK":
                            if allow_bookmarks:
                                yield {"type": kind, "object": obj}
                            continue
                        meta = obj["metadata"]
                        if namespace and resource.namespaced and meta.get("namespace") != namespace:
                            continue
                        matches = selector.matches(obj)
                        if kind == "MODIFIED" and old is not None:
                            matched = selector.matches(old)
                            if matched and not matches:  # it left: DELETED, as it was before
                                old["metadata"]["resourceVersion"] = meta["resourceVersion"]
                                kind, obj, matches = "DELETED", old, True
                            elif matches and not matched:
                                kind = "ADDED"
                        if not matches:
                            continue
                        yield {"type": kind, "object": obj}
                    finally:
                        queue.task_done()
        except TimeoutError:
            return
        finally:
            self._watchers.remove(entry)
            while not queue.empty():  # never to be read: not pending for delivered()
                queue.get_nowait()
                queue.task_done()

    # -- test controls -------------------------------------------------------------------------

    def add_namespaces(self, *names: str) -> None:
        """Create Namespace objects with these names (existing ones are left alone)."""
        for name in names:
            key = self._key(_NAMESPACES, None, name)
            if key not in self._objects:
                self._insert(_NAMESPACES, key, {"apiVersion": "v1", "kind": "Namespace",
                                                "metadata": {"name": name}})  # fmt: skip

    async def delivered(self) -> None:
        """Return once every open watch has handed out every event so far and its reader
        has asked for the next one: whatever reads the watches (an informer, a cache)
        has handled every change made until now. Watches opened later do not count."""
        await asyncio.gather(*(queue.join() for _, _, queue in list(self._watchers)))

    async def watched(self, resource: resources.Resource, count: int = 1) -> None:
        """Return once ``count`` watches of ``resource`` are open and everything so far is
        :meth:`delivered` (a reflector started in a task has listed and is watching)."""
        while sum(1 for res, _, _ in self._watchers if res == resource) < count:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._watch_waiters.append(waiter)
            await waiter
        await self.delivered()

    def bookmark(self) -> None:
        """Send every watcher a BOOKMARK at the current resourceVersion."""
        for resource, _, queue in self._watchers:
            queue.put_nowait(self._bookmark(resource))

    def compact(self) -> None:
        """Forget history before the current resourceVersion, as etcd compaction does: a new
        watch that would need an older change gets 410 Gone; open watches keep streaming."""
        self._compacted = self._last_rv
        self._history = [change for change in self._history if change[0] >= self._compacted]

    def expire_watches(self) -> None:
        """End every open watch with an ERROR event carrying 410 Expired (as a server does to
        a watcher that fell too far behind); its reader sees :class:`errors.Gone`."""
        for _, _, queue in self._watchers:
            queue.put_nowait(
                ("ERROR", {"kind": "Status", "apiVersion": "v1", "metadata": {},
                           "status": "Failure", "code": 410, "reason": "Expired",
                           "message": "too old resource version"}, None)
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

    def _current(self, resource: resources.Resource) -> builtins.list[Obj]:
        return [obj for (res, _), obj in sorted(self._objects.items(), key=lambda kv: kv[0][1])
                if res == resource]  # fmt: skip

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

    @staticmethod
    def _check_status_subresource(resource: resources.Resource) -> None:
        if not traits(resource).status_subresource:
            raise errors.NotFound(404, "", "404 page not found")

    def _check_write(self, resource: resources.Resource, obj: Obj) -> Obj:
        meta = obj["metadata"]
        current = self._find(resource, meta.get("namespace"), meta["name"])
        rv = meta.get("resourceVersion")
        if not rv and not traits(resource).unconditional_update:
            raise errors.Invalid(
                422, "Invalid",
                f'{resource.kind}.{resource.group} "{meta["name"]}" is invalid: '
                "metadata.resourceVersion: Invalid value: 0: must be specified for an update",
            )  # fmt: skip
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise self._conflict(resource, meta["name"])
        return current

    @staticmethod
    def _keep_system_fields(resource: resources.Resource, current: Obj, new: Obj) -> None:
        """What a main-resource write may not change: system metadata, and ``status`` where
        there is a status subresource; a spec change bumps the generation."""
        kind = traits(resource)
        if kind.status_subresource and "status" in current:
            new["status"] = copy.deepcopy(current["status"])
        else:
            new.pop("status", None)
        meta, old = new["metadata"], current["metadata"]
        for field in _SYSTEM_FIELDS:
            if field in old:
                meta[field] = old[field]
            else:
                meta.pop(field, None)
        added = set(meta.get("finalizers") or ()) - set(old.get("finalizers") or ())
        if old.get("deletionTimestamp") and added:
            raise errors.Invalid(
                422, "Invalid",
                f'{resource.kind} "{old["name"]}" is invalid: metadata.finalizers: Forbidden: '
                "no new finalizers can be added if the object is being deleted",
            )  # fmt: skip
        if kind.generation and _spec(new) != _spec(current):
            meta["generation"] = old.get("generation", 1) + 1

    def _bump(self) -> str:
        self._last_rv = next(self._rv)
        return str(self._last_rv)

    def _insert(self, resource: resources.Resource, key: tuple[Any, str], obj: Obj) -> None:
        """Store a new object (``obj`` is updated in place to what was stored)."""
        meta = obj["metadata"]
        kind = traits(resource)
        obj.pop("status", None)
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
            meta.pop(field, None)
        if resource == _NAMESPACES:
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
            obj["spec"] = {"finalizers": ["kubernetes"]}
            obj["status"] = {"phase": "Active"}
        meta.update(
            uid=str(uuid.uuid4()), creationTimestamp=clock.rfc3339(), resourceVersion=self._bump()
        )
        if kind.generation:
            meta["generation"] = 1
        _drop_empty_metadata(obj)
        self._objects[key] = obj
        self._emit("ADDED", resource, obj, None)

    def _commit(self, resource: resources.Resource, current: Obj, new: Obj) -> Obj:
        """Apply a write; return the server's answer."""
        _drop_empty_metadata(new)
        new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        if new == current:
            return copy.deepcopy(current)  # a no-op write changes nothing, not even the RV
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            # The object is deleted as it was stored; the answer is the object as written.
            self._remove(resource, current)
            return copy.deepcopy(new)
        meta["resourceVersion"] = self._bump()
        self._objects[self._key(resource, meta.get("namespace"), meta["name"])] = new
        self._emit("MODIFIED", resource, new, current)
        return copy.deepcopy(new)

    def _remove(self, resource: resources.Resource, obj: Obj) -> Obj:
        """Delete ``obj``; return it at the deletion's resourceVersion."""
        meta = obj["metadata"]
        del self._objects[self._key(resource, meta.get("namespace"), meta["name"])]
        gone = copy.deepcopy(obj)
        gone["metadata"]["resourceVersion"] = self._bump()
        self._emit("DELETED", resource, gone, None)
        return gone

    def _emit(self, kind: str, resource: resources.Resource, obj: Obj, old: Obj | None) -> None:
        change: _Change = (kind, copy.deepcopy(obj), copy.deepcopy(old))
        self._history.append((self._last_rv, resource, change))
        for res, _, queue in self._watchers:
            if res == resource:
                queue.put_nowait(copy.deepcopy(change))

    def _bookmark(self, resource: resources.Resource, initial_events_end: bool = False) -> _Change:
        meta: Obj = {"resourceVersion": str(self._last_rv)}
        if initial_events_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        obj = {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": meta}
        return ("BOOKMARK", obj, None)

    def _written(self, obj: Obj) -> Obj:
        result = copy.deepcopy(obj)
        for observer in self._write_observers:
            observer(copy.deepcopy(obj))
        return result
