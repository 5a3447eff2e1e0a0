"""The shared informer: one store per resource, fed by one reflector per watched namespace.

- ``namespaces`` (see :func:`namespaces_of`) restricts a **namespaced** resource
  to those namespaces: one list+watch per namespace (:attr:`SharedInformer.reflectors`),
  all feeding the same store and the same handlers, so reads and indexes answer
  across them; a relist of one namespace replaces only that namespace's objects.
  Empty means all namespaces (one cluster-wide list+watch). A cluster-scoped
  resource always gets one cluster-wide list+watch.

- Handlers are plain callables ``handler(event)`` taking an :class:`Event`; they
  are called **in the order the changes happened**, synchronously, on the event
  loop, so they must be quick (enqueue a key, never do I/O). A handler that
  raises is logged; the others and the informer go on.
- :meth:`SharedInformer.has_synced` turns true once every reflector's first list
  is complete; :meth:`SharedInformer.wait_for_sync` waits for it. A handler added
  later first gets what the store holds, as adds.
- ``resync`` (seconds, default off) re-delivers every cached object as an
  ``update`` with ``old is obj``, from the cache and without any API call (for
  controllers that must periodically re-check something external).
- :meth:`SharedInformer.apply_write` is write-through: an object returned by our
  own write replaces the cached one if it is newer (than the cached copy and than
  the key's tombstone, see :mod:`runtime.cache.store`), and handlers see it as an
  add or update at once; the watch event for the same resourceVersion is then not
  delivered a second time. So a reply that arrives after the watch's DELETED event
  for the same object (the update that removed the last finalizer deleted it) does
  not bring the object back. An object with a ``deletionTimestamp`` and no
  finalizers is never written through (it is gone or about to be; the watch says
  which). The object stored is a copy: the caller may go on changing its own. An
  object in a namespace the informer does not watch is never written through.

- ``label_selector`` and ``field_selector`` filter the informer: they are sent on
  every list and watch (see :mod:`runtime.cache.reflector`), so only matching
  objects are stored and handlers see no others. Write-through keeps to that view:
  a written object that does not match is not stored, and one that stopped matching
  leaves the store (handlers see a delete), as the watch's DELETED will say.
- ``transform`` runs on every object before it is stored (default:
  :func:`~runtime.cache.store.default_transform`), then ``then_transform`` if given.
  The object they get is the informer's own, never a caller's.

>>> namespaces_of("team-a", ())
('team-a',)
>>> namespaces_of(None, ["team-a", "team-b", "team-a"])
('team-a', 'team-b')
>>> namespaces_of("team-a", ["team-b"])
Traceback (most recent call last):
...
ValueError: give namespace (one) or namespaces (several), not both
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import structlog

from runtime.cache import fields as fields_
from runtime.cache import reflector as reflector_
from runtime.cache import selector as selector_
from runtime.cache import store as store_
from runtime.client import client as client_
from runtime.client import resources

__all__ = ["Event", "Handler", "SharedInformer", "namespaces_of"]


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """A change: ``obj`` is the new state (the last known state for a delete)."""

    type: Literal["add", "update", "delete"]
    obj: store_.Obj
    old: store_.Obj | None = None


Handler = Callable[[Event], None]


def namespaces_of(namespace: str | None, namespaces: Sequence[str]) -> tuple[str, ...]:
    """The namespaces to watch, from ``namespace`` (one, a shorthand) or ``namespaces``
    (several; duplicates dropped, order kept); ``()`` means all. Giving both is an error."""
    if isinstance(namespaces, str):
        raise TypeError(f"namespaces takes a sequence of names, not the string {namespaces!r}")
    if namespace is not None and namespaces:
        raise ValueError("give namespace (one) or namespaces (several), not both")
    names = (namespace,) if namespace is not None else tuple(dict.fromkeys(namespaces))
    for name in names:
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"not a namespace name: {name!r}")
    return names


class SharedInformer:
    """See the module docstring. Start with :meth:`start`, stop with :meth:`stop`."""

    def __init__(
        self,
        client: client_.Client,
        resource: resources.Resource,
        *,
        namespace: str | None = None,
        namespaces: Sequence[str] = (),
        label_selector: str | None = None,
        field_selector: str | None = None,
        indexers: Mapping[str, store_.Indexer] | None = None,
        transform: store_.Transform | None = store_.default_transform,
        then_transform: store_.Transform | None = None,
        resync: float | None = None,
        debug: bool = False,
        watch_list: bool = False,
    ) -> None:
        self.resource = resource
        watched = namespaces_of(namespace, namespaces)
        self.namespaces: tuple[str, ...] = watched if resource.namespaced else ()
        """The namespaces served; ``()``: all (or a cluster-scoped resource)."""
        self._watched = frozenset(self.namespaces)
        self.label_selector = label_selector
        self.field_selector = field_selector
        labels = selector_.parse(label_selector) if label_selector else None
        fields = fields_.parse(field_selector) if field_selector else None
        self._labels, self._fields = labels, fields
        # The default transform copies the object; write-through copies it otherwise.
        self._transform_copies = transform is store_.default_transform
        if then_transform is not None:
            first = transform
            transform = then_transform if first is None else lambda obj: then_transform(first(obj))
        self.store = store_.Store(indexers, transform=transform, debug=debug)
        self.resync = resync
        self._handlers: list[Handler] = []
        self._synced = asyncio.Event()
        self._unsynced: set[str | None] = set(self.namespaces or (None,))
        self._tasks: list[asyncio.Task[None]] = []
        self.log = structlog.get_logger("runtime.cache").bind(resource=str(resource))
        reflectors = []
        for scope in self.namespaces or (None,):
            reflector = reflector_.Reflector(
                client,
                resource,
                self.store,
                self._dispatch,
                namespace=scope,
                label_selector=label_selector,
                field_selector=field_selector,
                on_synced=functools.partial(self._reflector_synced, scope),
                watch_list=watch_list,
            )
            if scope is not None:
                reflector.log = reflector.log.bind(namespace=scope)
            reflectors.append(reflector)
        self.reflectors: tuple[reflector_.Reflector, ...] = tuple(reflectors)
        """One per watched namespace (one in all for all namespaces)."""
        self.reflector = reflectors[0]
        """The first of :attr:`reflectors` (the only one unless several namespaces)."""

    def watches(self, namespace: str | None) -> bool:
        """Whether objects of ``namespace`` belong in this informer."""
        return not self._watched or namespace in self._watched

    def selects(self, obj: store_.Obj) -> bool:
        """Whether ``obj`` matches the informer's label and field selectors."""
        if self._labels is not None and not self._labels.matches(obj["metadata"].get("labels")):
            return False
        return self._fields is None or self._fields.matches(obj)

    def _reflector_synced(self, scope: str | None) -> None:
        self._unsynced.discard(scope)
        if not self._unsynced:
            self._synced.set()

    def add_handler(self, handler: Handler) -> None:
        """Deliver future events to ``handler``, after what the store holds now as adds
        (everything once synced; with several namespaces, those listed so far)."""
        self._handlers.append(handler)
        for obj in self.store.list():
            self._call(handler, Event("add", obj))

    def has_synced(self) -> bool:
        return self._synced.is_set()

    async def wait_for_sync(self) -> None:
        await self._synced.wait()

    @property
    def started(self) -> bool:
        return bool(self._tasks)

    def start(self) -> None:
        """Start listing and watching (returns at once)."""
        if self._tasks:
            return
        for reflector in self.reflectors:
            where = f"-{reflector.namespace}" if reflector.namespace else ""
            self._tasks.append(
                asyncio.create_task(reflector.run(), name=f"reflector-{self.resource}{where}")
            )
        if self.resync:
            self._tasks.append(
                asyncio.create_task(self._resync_loop(self.resync), name=f"resync-{self.resource}")
            )

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def apply_write(self, obj: store_.Obj) -> bool:
        """Write-through of an object our client just wrote; True if it was stored."""
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return False
        if self._watched and meta.get("namespace") not in self._watched:
            return False
        store = self.store
        if not store.accepts(obj):
            return False
        if not self.selects(obj):
            # Outside the filtered view (now): the watch will say DELETED; say it first.
            key = store_.key_for(obj)
            gone = store.delete(key, meta.get("resourceVersion")) if key in store else None
            if gone is not None:
                self._dispatch("delete", gone, None)
            return False
        if not self._transform_copies:
            obj = copy.deepcopy(obj)  # the default transform copies; others need not
        stored, previous = store.upsert(obj)
        self._dispatch("add" if previous is None else "update", stored, previous)
        return True

    def apply_delete(self, key: str, answer: Any) -> bool:
        """Write-through of a delete our client just made; True if the store changed.

        ``answer`` is the server's: an object still there and terminating
        (finalizers, or a grace period a kubelet must honour) is stored as such
        when it is newer; anything else means the object is gone, and it leaves
        the store now, with a tombstone so the watch's late events for it are
        dropped. Either way handlers see the event once, before the watch would
        have delivered it.
        """
        store = self.store
        current = store.get(key)
        if current is None:
            return False
        obj: store_.Obj | None = (
            answer if isinstance(answer, dict) and answer.get("kind") != "Status" else None
        )
        meta = obj.get("metadata") if obj is not None else None
        if (
            obj is not None
            and isinstance(meta, dict)
            and meta.get("deletionTimestamp")
            and (meta.get("finalizers") or (meta.get("deletionGracePeriodSeconds") or 0) > 0)
        ):
            if not store.accepts(obj):
                return False
            stored, previous = store.upsert(copy.deepcopy(obj))
            self._dispatch("update", stored, previous)
            return True
        answered = meta.get("resourceVersion") if isinstance(meta, dict) else None
        kept = current["metadata"].get("resourceVersion")
        rv = answered if answered and store_.newer(answered, kept) else kept
        gone = store.delete(key, rv)
        if gone is None:
            return False
        self._dispatch("delete", gone, None)
        return True

    def _dispatch(self, kind: str, obj: store_.Obj, old: store_.Obj | None) -> None:
        event = Event(kind, obj, old)  # type: ignore[arg-type]
        for handler in self._handlers:
            self._call(handler, event)

    def _call(self, handler: Handler, event: Event) -> None:
        try:
            handler(event)
        except Exception:
            self.log.exception("event handler failed", handler=repr(handler), event_type=event.type)

    async def _resync_loop(self, period: float) -> None:
        await self._synced.wait()
        while True:
            await asyncio.sleep(period)
            for obj in self.store.list():
                self._dispatch("update", obj, obj)
