"""The cache reader: reconcilers read from watch-fed stores, not from the API server.

- :meth:`Cache.get` and :meth:`Cache.list` read from one
  :class:`~runtime.cache.informer.SharedInformer` per resource. An informer is
  created **on first use** (the first read starts it and waits until it has
  synced); :meth:`Cache.informer` registers it ahead of time (for event
  sources), and :meth:`Cache.start` starts every registered informer - a
  manager does that before leader election, so a standby replica keeps warm
  caches and takes over without relisting.
- Objects are handed out **without copying**. They are shared with every other
  reader and with the store: never mutate one; ``copy.deepcopy`` it first.
  ``Cache(debug=True)`` (use it in tests) makes a read of an object that was
  mutated since it was stored raise
  :class:`~runtime.cache.store.CacheMutationError`, and :meth:`Cache.verify`
  checks everything.
- **Write-through**: the cache observes its client's writes; the object a
  create/update/patch returns is put into the store at once when it is newer
  than the cached one, so the next reconcile sees our own write even before the
  watch event arrives (KubeRay's stale-status writes came from exactly that gap).
  The store keeps a copy, never the caller's dict; an object a delete already
  removed (its DELETED event came first) is not brought back, and a relist does
  not undo writes newer than its snapshot (see :mod:`runtime.cache.informer`).
  **Deletes too**: an object our client deleted leaves the cache at once (or
  is stored as terminating, when the server keeps it for finalizers or a grace
  period), so a reconcile that scales down does not count what it just deleted.
- ``namespaces`` restricts the cache to those namespaces (fewer objects, and
  RBAC may allow no more: a Role per namespace instead of a ClusterRole); empty
  (the default) watches all of them. ``namespace="a"`` is a shorthand for
  ``namespaces=["a"]``; giving both is a :class:`ValueError`. Each namespaced
  resource is then listed and watched once per namespace (never cluster-wide),
  into one store per resource (see :mod:`runtime.cache.informer`): ``get``,
  ``list`` without a namespace, label selectors and indexes answer across the
  watched namespaces, event handlers see each namespace's events once, and
  ``has_synced``/``wait_for_sync`` cover them all. Cluster-scoped resources get
  one cluster-wide watch, as without namespaces. (One cluster-wide watch with a
  field selector cannot replace the per-namespace ones: ``metadata.namespace``
  takes no set (``in (a,b)`` is a 400), and an account holding only Roles is
  refused any cluster-scope list, selector or not - measured on kube-apiserver 1.35.)
- **The cache is a filtered view.** ``by_resource`` gives, per resource, a
  :class:`ByResource`: a label selector and a field selector (sent to the server
  on every list and watch, so memory and watch traffic go only to the matching
  objects), a transform and indexers. An object outside a resource's selectors is
  simply **not there**: ``get`` raises :class:`~runtime.client.errors.NotFound`,
  ``list`` leaves it out (whatever selector the call gives), event handlers never
  see it, and one that stops matching (a label removed) leaves the cache as a
  delete. Write-through keeps to the view: our own write of a non-matching object
  is not stored. So a reconciler must only look through the cache at objects the
  selectors let in - a reconciler that would create what it cannot see would
  create it again and again (AlreadyExists); read anything else with the client.
  Resources without an entry are cached whole (the default).
- **Options after construction** (controller-runtime's ``FieldIndexer.IndexField``, and
  its ``ByObject`` given late): :meth:`Cache.index_field` adds a named index to one
  resource at any time, also to a running informer (an index is built on its first
  query); :meth:`Cache.configure` gives a resource its :class:`ByResource` until its
  informer exists - afterwards the selectors could no longer apply, so it raises, as it
  does for a resource already configured (one set of options per resource: the cache is
  shared by every reader). :class:`runtime.builder.Builder` calls both.
- A read of a namespaced resource **in a namespace the cache does not watch**
  (``get``, or ``list`` given that namespace) raises :class:`NamespaceNotWatched`,
  as controller-runtime's multi-namespace cache errors for an unknown namespace:
  an empty answer would look like "nothing there" and lead a reconciler to
  create what exists, or report missing what it merely cannot see. It is not a
  :class:`~runtime.client.errors.NotFound`, so ``except NotFound: create`` does
  not catch it. Read such objects with the client instead (and grant the RBAC).

>>> import asyncio
>>> from runtime.testing import fake
>>> from runtime.client import resources
>>> CM = resources.default_registry.for_kind("v1", "ConfigMap")
>>> async def demo():
...     client = fake.FakeClient(namespaces=["a", "b", "c"])
...     for ns in ("a", "b", "c"):
...         await client.create({"apiVersion": "v1", "kind": "ConfigMap",
...                              "metadata": {"name": "x", "namespace": ns}})
...     cache = Cache(client, namespaces=["a", "b"])
...     try:
...         seen = sorted(o["metadata"]["namespace"] for o in await cache.list(CM))
...         try:
...             await cache.get(CM, "c", "x")
...         except NamespaceNotWatched as exc:
...             return seen, str(exc)
...     finally:
...         await cache.stop()
>>> asyncio.run(demo())
(['a', 'b'], 'configmaps in namespace "c": not watched by this cache (it watches a, b)')
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TypeVar

from runtime.cache import fields as fields_
from runtime.cache import informer as informer_
from runtime.cache import selector as selector_
from runtime.cache import store as store_
from runtime.client import client as client_
from runtime.client import errors, resources

_K = TypeVar("_K")
_V = TypeVar("_V")

__all__ = ["ByResource", "ByResourceMap", "Cache", "NamespaceNotWatched", "by_resource_of"]


class FrozenMap(Mapping[_K, _V]):
    """A read-only, hashable mapping (so that options holding one stay hashable)."""

    __slots__ = ("_hash", "_items")

    def __init__(self, items: Mapping[_K, _V] | None = None) -> None:
        self._items: dict[_K, _V] = dict(items or {})
        self._hash: int | None = None

    def __getitem__(self, key: _K) -> _V:
        return self._items[key]

    def __iter__(self) -> Iterator[_K]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._items.items()))
        return self._hash

    def __repr__(self) -> str:
        return f"FrozenMap({self._items!r})"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ByResource:
    """What the cache holds of one resource (controller-runtime's ``cache.ByObject``).
    Selectors are checked at construction (``ValueError``)."""

    label_selector: str | None = None
    """Cache only the objects whose labels match (apimachinery syntax, e.g.
    ``app.kubernetes.io/component in (primary,replica)``); sent to the server on every list and
    watch. Default ``None``: every object."""

    field_selector: str | None = None
    """Cache only the objects whose fields match (``spec.nodeName=n1,status.phase!=Failed``,
    see :mod:`runtime.cache.fields`; the server supports a few fields per kind); sent
    on every list and watch. Default ``None``: every object."""

    transform: store_.Transform | None = None
    """Runs on every object of this resource before it is stored, **after** the
    cache's own ``transform`` (by default
    :func:`~runtime.cache.store.default_transform`: ``managedFields`` dropped,
    strings interned). It gets an object of its own (it may change it in place) and
    returns what to store, e.g. without fields the reconcilers never read. Default
    ``None``: the cache's transform only."""

    indexers: Mapping[str, store_.Indexer] = dataclasses.field(default_factory=FrozenMap)
    """Extra indexes (name -> ``Callable[[obj], Iterable[str]]``), queried with
    ``cache.list(..., index=(name, value))``. Default: none but ``namespace`` and
    ``owner``, which every store has."""

    def __post_init__(self) -> None:
        if self.label_selector:
            selector_.parse(self.label_selector)
        if self.field_selector:
            fields_.parse(self.field_selector)
        object.__setattr__(self, "indexers", FrozenMap(self.indexers))


ByResourceMap = (
    Mapping[resources.Resource, ByResource]
    | Mapping[str, ByResource]
    | Mapping[resources.Resource | str, ByResource]
)
"""Per-resource options keyed by resources, by their ``str()``, or by both."""


def by_resource_of(given: ByResourceMap | None) -> Mapping[str, ByResource]:
    """``given`` keyed by each resource's ``str()`` (``"pods"``, ``"databases.example.com"``),
    read-only and hashable; ``TypeError`` for a value that is not a :class:`ByResource`,
    ``ValueError`` for two keys naming the same resource."""
    out: dict[str, ByResource] = {}
    items: Iterable[tuple[resources.Resource | str, ByResource]] = (given or {}).items()
    for key, options in items:
        if not isinstance(options, ByResource):
            raise TypeError(f"cache options for {key}: expected ByResource, got {options!r}")
        name = str(key)
        if name in out:
            raise ValueError(f"cache options for {name} given twice")
        out[name] = options
    return FrozenMap(out)


class NamespaceNotWatched(LookupError):
    """A read of a namespaced resource in a namespace the cache does not watch."""

    def __init__(
        self, resource: resources.Resource, namespace: str | None, watched: Sequence[str]
    ) -> None:
        where = f'namespace "{namespace}"' if namespace else "all namespaces"
        super().__init__(
            f"{resource} in {where}: not watched by this cache (it watches {', '.join(watched)})"
        )
        self.resource = resource
        self.namespace = namespace


class Cache:
    """See the module docstring."""

    def __init__(
        self,
        client: client_.Client,
        *,
        namespace: str | None = None,
        namespaces: Sequence[str] = (),
        by_resource: ByResourceMap | None = None,
        indexers: Mapping[str, Mapping[str, store_.Indexer]] | None = None,
        transform: store_.Transform | None = store_.default_transform,
        resync: float | None = None,
        debug: bool = False,
        watch_list: bool = False,
    ) -> None:
        """``watch_list=True`` syncs informers with one streaming watch instead of a
        list (see :mod:`runtime.cache.reflector`). ``by_resource`` maps a resource (or
        its ``str()``, e.g. ``"pods"``, ``"databases.example.com"``) to what the cache holds
        of it (:class:`ByResource`). ``indexers`` (the older spelling) maps a resource's
        ``str()`` to extra indexers; they join those of ``by_resource`` (one name given
        in both is a ``ValueError``). ``transform`` runs on every object of every
        resource, before a :attr:`ByResource.transform`."""
        self.client = client
        self.namespaces = informer_.namespaces_of(namespace, namespaces)
        """The watched namespaces; ``()``: all."""
        self._watched = frozenset(self.namespaces)
        self.by_resource = by_resource_of(by_resource)
        """What the cache holds of each resource, keyed by the resource's ``str()``;
        a resource not in it is cached whole."""
        self.indexers = {k: dict(v) for k, v in (indexers or {}).items()}
        for name, options in self.by_resource.items():
            mine = self.indexers.setdefault(name, {})
            for index in options.indexers:
                if index in mine:
                    raise ValueError(f"index {index!r} of {name} given twice")
            mine.update(options.indexers)
        self.transform = transform
        self.resync = resync
        self.debug = debug
        self.watch_list = watch_list
        self._informers: dict[resources.Resource, informer_.SharedInformer] = {}
        self._synced_stores: dict[resources.Resource, store_.Store] = {}
        self._started = False
        client.add_write_observer(self._on_write)
        client.add_delete_observer(self._on_delete)

    def configure(self, resource: resources.Resource, options: ByResource) -> None:
        """Hold of ``resource`` what ``options`` say (see the module docstring): a
        ``ValueError`` if it already has options or one of its indexes' names is taken,
        a ``RuntimeError`` once its informer exists."""
        name = str(resource)
        if not isinstance(options, ByResource):
            raise TypeError(f"cache options for {name}: expected ByResource, got {options!r}")
        if name in self.by_resource:
            raise ValueError(f"cache options for {name} given twice")
        if resource in self._informers:
            raise RuntimeError(
                f"cache options for {name} come too late: its informer exists (give them "
                "before anything reads or watches it, e.g. in the manager's options)"
            )
        mine = self.indexers.get(name, {})
        for index in options.indexers:
            if index in mine:
                raise ValueError(f"index {index!r} of {name} given twice")
        self.by_resource = FrozenMap({**self.by_resource, name: options})
        self.indexers.setdefault(name, {}).update(options.indexers)

    def index_field(self, resource: resources.Resource, name: str, indexer: store_.Indexer) -> None:
        """Add the index ``name`` (``indexer(obj)`` -> the values it is found under) to
        ``resource``, for ``list(resource, index=(name, value))``; a ``ValueError`` if the
        resource has an index of that name already."""
        mine = self.indexers.setdefault(str(resource), {})
        found = self._informers.get(resource)
        taken = set(mine) | (set(found.store.indexers) if found is not None else set())
        if name in taken or name in ("namespace", "owner"):
            raise ValueError(f"index {name!r} of {resource} given twice")
        mine[name] = indexer
        if found is not None:
            found.store.indexers[name] = indexer  # built on its first query

    def informer(self, resource: resources.Resource) -> informer_.SharedInformer:
        """The informer for ``resource``, created on first use; started at once if the
        cache is started (else by :meth:`start`, or by the first read)."""
        found = self._informers.get(resource)
        if found is None:
            options = self.by_resource.get(str(resource)) or ByResource()
            found = informer_.SharedInformer(
                self.client,
                resource,
                namespaces=self.namespaces,
                label_selector=options.label_selector,
                field_selector=options.field_selector,
                indexers=self.indexers.get(str(resource)),
                transform=self.transform,
                then_transform=options.transform,
                resync=self.resync,
                debug=self.debug,
                watch_list=self.watch_list,
            )
            self._informers[resource] = found
            if self._started:
                found.start()
        return found

    async def start(self) -> None:
        """Start every informer registered so far, and any registered later."""
        self._started = True
        for informer in list(self._informers.values()):
            informer.start()

    async def _synced(self, resource: resources.Resource) -> store_.Store:
        informer = self._informers.get(resource)
        if informer is None or not informer.has_synced():
            informer = self.informer(resource)
            informer.start()  # a read starts its informer even before the cache is started
            await informer.wait_for_sync()
        self._synced_stores[resource] = informer.store
        return informer.store

    async def get(
        self, resource: resources.Resource, namespace: str | None, name: str
    ) -> store_.Obj:
        """The cached object (read-only!); raises :class:`~runtime.client.errors.NotFound`
        (or :class:`NamespaceNotWatched`)."""
        if self._watched and namespace not in self._watched and resource.namespaced:
            raise NamespaceNotWatched(resource, namespace, self.namespaces)
        store = self._synced_stores.get(resource)
        if store is None:
            store = await self._synced(resource)
        # The hot path of every reconcile: no copies, and the store's dict read inline.
        key = f"{namespace}/{name}" if namespace else name
        obj = store.get(key) if store.debug else store._items.get(key)
        if obj is None:
            raise errors.NotFound(404, "NotFound", f'{resource} "{name}" not found in the cache')
        return obj

    async def list(
        self,
        resource: resources.Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        index: tuple[str, str] | None = None,
    ) -> builtins.list[store_.Obj]:
        """Cached objects (read-only!), by namespace (default: every watched one), label
        selector and/or an index; raises :class:`NamespaceNotWatched` for a namespace
        the cache does not watch."""
        if namespace and self._watched and resource.namespaced:
            if namespace not in self._watched:
                raise NamespaceNotWatched(resource, namespace, self.namespaces)
            if len(self._watched) == 1:
                namespace = None  # every cached object is in it already
        store = await self._synced(resource)
        selector = selector_.parse(label_selector) if label_selector else None
        narrowest = selector.narrowest() if selector is not None else None
        if index is not None:
            objs = store.by_index(*index)
        elif narrowest is not None:
            label, values = narrowest
            objs = [o for value in values for o in store.by_label(label, value)]
        elif namespace:
            objs = store.by_index("namespace", namespace)
            namespace = None  # already applied
        else:
            objs = store.list()
        if namespace:
            objs = [o for o in objs if o["metadata"].get("namespace") == namespace]
        if selector is not None:
            objs = [o for o in objs if selector.matches(o["metadata"].get("labels"))]
        return objs

    def has_synced(self) -> bool:
        return all(i.has_synced() for i in self._informers.values())

    async def wait_for_sync(self) -> None:
        for informer in list(self._informers.values()):
            await informer.wait_for_sync()

    async def stop(self) -> None:
        self._started = False
        self._synced_stores.clear()
        for informer in list(self._informers.values()):
            await informer.stop()

    def verify(self) -> None:
        """Raise :class:`~runtime.cache.store.CacheMutationError` if a cached object changed."""
        for informer in self._informers.values():
            informer.store.verify()

    def _on_delete(
        self, resource: resources.Resource, namespace: str | None, name: str, answer: object
    ) -> None:
        informer = self._informers.get(resource)
        if informer is None or not informer.watches(namespace):
            return
        informer.apply_delete(f"{namespace}/{name}" if namespace else name, answer)

    def _on_write(self, obj: store_.Obj) -> None:
        if not isinstance(obj, dict) or "metadata" not in obj:
            return
        try:
            resource = self.client.registry.for_object(obj)
        except LookupError:
            return
        informer = self._informers.get(resource)
        if informer is None:
            return
        informer.apply_write(obj)  # it drops objects of namespaces it does not watch
