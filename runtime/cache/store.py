"""The object store behind an informer: keyed objects, indexes, and no copies.

- Keys are ``namespace/name`` (``name`` for cluster-scoped objects).
- **Indexers** map an object to index values; ``namespace`` (the object's
  namespace) and ``owner`` (the UID of its controller owner reference) are
  declared by default, and users add their own (``Callable[[obj], Iterable[str]]``).
  **Label indexes** exist for every label key.
- Every index is **built on first use** (:meth:`Store.by_index`,
  :meth:`Store.by_label`) and maintained from then on: memory goes to the
  indexes a controller actually queries (an index costs ~60 bytes per object
  and value, a fifth of a small object's JSON size), not to all of them.
- A **transform** runs on every object before it is stored; the default drops
  ``metadata.managedFields`` (often half an object's size, and never needed by a
  reconciler) and interns dict keys and short strings, so thousands of similar
  objects share their repeated text.
- Reads hand out the **stored objects themselves, never copies**: they are
  read-only by contract. In debug mode (:attr:`Store.debug`, on in tests) every
  stored object's serialisation is remembered, and a read or replacement of an
  object whose content changed since it was stored raises
  :class:`CacheMutationError` naming it.
- :meth:`Store.upsert_if_newer` applies an object only if its resourceVersion is
  newer than both the stored one and the key's **tombstone**: a delete given a
  resourceVersion (a watch's DELETED event, or a relist that no longer has the
  key) remembers ``key -> resourceVersion`` for ``tombstone_ttl`` seconds (default
  300), at most ``max_tombstones`` keys (default 10,000, oldest dropped first), so
  an older copy of a deleted object - our own write's reply arriving after the
  DELETED event, a lagging list - is never stored again. A newer object of the same
  name (a re-creation) is.
- :meth:`Store.replace` given the list's resourceVersion keeps what is newer than
  the list: a stored object whose resourceVersion is above the listed one's (our
  write-through got there first) stays, and a stored object missing from the list
  but newer than the list itself (written after the snapshot) is not deleted.
  Comparisons of resourceVersions that are not integers never keep the stored copy.

The store belongs to one event loop and is not thread-safe.

>>> store = Store()
>>> pod = {"metadata": {"namespace": "ns", "name": "a", "resourceVersion": "5",
...        "managedFields": [{"manager": "kubectl"}]}}
>>> _ = store.upsert(pod)
>>> stored = store.get("ns/a")
>>> "managedFields" in stored["metadata"]
False
>>> [o["metadata"]["name"] for o in store.by_index("namespace", "ns")]
['a']
>>> store.upsert_if_newer({"metadata": {"namespace": "ns", "name": "a", "resourceVersion": "4"}})
>>> _ = store.delete("ns/a", resource_version="6")
>>> store.upsert_if_newer({"metadata": {"namespace": "ns", "name": "a", "resourceVersion": "6"}})
>>> store.tombstone("ns/a")
'6'
"""

from __future__ import annotations

import builtins
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from runtime import clock as clock_

__all__ = [
    "CacheMutationError",
    "Indexer",
    "Store",
    "Transform",
    "default_transform",
    "intern_strings",
    "key_for",
    "namespace_index",
    "newer",
    "owner_index",
]

Obj = dict[str, Any]
Indexer = Callable[[Obj], Iterable[str]]
Transform = Callable[[Obj], Obj]

_INTERN_MAX = 64
"""Strings up to this length are interned (names, label values, enum-like fields)."""


class CacheMutationError(RuntimeError):
    """A cached object was changed in place; cached objects are read-only."""


def key_for(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


def namespace_index(obj: Obj) -> Iterable[str]:
    namespace = obj["metadata"].get("namespace")
    return (namespace,) if namespace else ()


def owner_index(obj: Obj) -> Iterable[str]:
    """The UID of the object's controller owner reference, if any."""
    for ref in obj["metadata"].get("ownerReferences") or ():
        if ref.get("controller"):
            return (ref["uid"],)
    return ()


_UNIQUE_VALUES = frozenset({"uid", "resourceVersion", "name", "podIP", "hostIP", "ip"})
"""Keys whose string values are (nearly) unique per object: interning those would only
add an entry to the interpreter's intern table for each object."""


def _label_indexer(key: str) -> Indexer:
    def index(obj: Obj) -> Iterable[str]:
        value = (obj["metadata"].get("labels") or {}).get(key)
        return () if value is None else (value,)

    return index


def intern_strings(value: Any) -> Any:
    """A copy of a decoded JSON value with interned keys and short repeated strings.

    (Decoded JSON holds exactly ``dict``, ``list``, ``str``, numbers, booleans and None:
    exact type checks, and scalars handled without a call, keep this cheap; it runs on
    every object every watch event brings.)

    >>> intern_strings({"a": ["x", 1, {"b": None}], "uid": "u"})
    {'a': ['x', 1, {'b': None}], 'uid': 'u'}
    """
    kind = type(value)
    if kind is dict:
        out: dict[str, Any] = {}
        for k, v in value.items():
            t = type(v)
            if t is str:
                out[_intern(k)] = v if (k in _UNIQUE_VALUES or len(v) > _INTERN_MAX) else _intern(v)
            elif t in _SCALARS or k in _UNIQUE_VALUES:
                out[_intern(k)] = v
            else:
                out[_intern(k)] = intern_strings(v)
        return out
    if kind is list:
        return [
            (_intern(v) if len(v) <= _INTERN_MAX else v) if type(v) is str
            else v if type(v) in _SCALARS
            else intern_strings(v)
            for v in value
        ]  # fmt: skip
    if kind is str:
        return _intern(value) if len(value) <= _INTERN_MAX else value
    if kind in _SCALARS:
        return value
    return _intern_slow(value)


_intern = sys.intern
_SCALARS = frozenset({int, float, bool, type(None)})


def _intern_slow(value: Any) -> Any:
    """What is not exactly a JSON type: subclasses of dict, list and str, and the rest."""
    if isinstance(value, dict):
        return {
            _intern(str(k)): (v if k in _UNIQUE_VALUES else intern_strings(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [intern_strings(v) for v in value]
    if isinstance(value, str):
        return _intern(str(value)) if len(value) <= _INTERN_MAX else value
    return value


def default_transform(obj: Obj) -> Obj:
    """Drop ``metadata.managedFields``, intern keys and short strings."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = dict(obj)
        obj["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    result: Obj = intern_strings(obj)
    return result


def newer(candidate: str | None, current: str | None) -> bool:
    """Whether resourceVersion ``candidate`` is newer than ``current``.

    resourceVersions are opaque, but every apiserver backed by etcd issues
    increasing integers; when both parse as integers they are compared, otherwise
    the candidate is taken as newer (the safe default for a cache fed by a watch).
    """
    if current is None or candidate is None:
        return True
    try:
        return int(candidate) > int(current)
    except ValueError:
        return candidate != current


def _provably_newer(candidate: str | None, current: str | None) -> bool:
    """Whether both resourceVersions are integers and ``candidate`` is the larger: the
    only case in which a stored object may be kept over what the server just listed."""
    if candidate is None or current is None:
        return False
    try:
        return int(candidate) > int(current)
    except ValueError:
        return False


def _rv(obj: Mapping[str, Any]) -> str | None:
    rv = obj["metadata"].get("resourceVersion")
    return str(rv) if rv else None


def _fingerprint(obj: Obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


class Store:
    """Objects by key, with indexes (see the module docstring)."""

    def __init__(
        self,
        indexers: Mapping[str, Indexer] | None = None,
        *,
        transform: Transform | None = default_transform,
        debug: bool = False,
        clock: clock_.Clock | None = None,
        tombstone_ttl: float = 300.0,
        max_tombstones: int = 10_000,
    ) -> None:
        self.indexers: dict[str, Indexer] = {"namespace": namespace_index, "owner": owner_index}
        self.indexers.update(indexers or {})
        self.transform = transform
        self.debug = debug
        self.tombstone_ttl = tombstone_ttl
        self.max_tombstones = max_tombstones
        self._clock = clock or clock_.REAL_CLOCK
        self._items: dict[str, Obj] = {}
        self._indices: dict[str, dict[str, set[str]]] = {}  # built ones only
        self._fingerprints: dict[str, str] = {}
        self._tombstones: dict[str, tuple[str, float]] = {}  # key -> (RV, when); oldest first

    # -- reads (no copies) -------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: str) -> bool:
        return key in self._items

    def get(self, key: str) -> Obj | None:
        obj = self._items.get(key)
        if obj is not None and self.debug:
            self._check(key, obj)
        return obj

    def list(self) -> builtins.list[Obj]:
        objs = list(self._items.values())
        if self.debug:
            for obj in objs:
                self._check(key_for(obj), obj)
        return objs

    def keys(self) -> Iterator[str]:
        return iter(list(self._items))

    def tombstone(self, key: str) -> str | None:
        """The resourceVersion at which ``key`` was deleted, while remembered."""
        entry = self._tombstones.get(key)
        if entry is None:
            return None
        if self._clock.now() - entry[1] > self.tombstone_ttl:
            del self._tombstones[key]
            return None
        return entry[0]

    def accepts(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` is newer than the stored copy and than the key's tombstone."""
        key = key_for(obj)
        rv = _rv(obj)
        current = self._items.get(key)
        if current is not None and not newer(rv, _rv(current)):
            return False
        tombstone = self.tombstone(key)
        return tombstone is None or newer(rv, tombstone)

    def by_index(self, index: str, value: str) -> builtins.list[Obj]:
        """Objects whose ``index`` values include ``value`` (builds the index once)."""
        built = self._indices.get(index)
        if built is None:
            indexer = self.indexers.get(index)
            if indexer is None:
                raise KeyError(f"no index named {index!r} (have {sorted(self.indexers)})")
            built = self._indices[index] = {}
            for item_key, obj in self._items.items():
                for indexed in indexer(obj):
                    built.setdefault(indexed, set()).add(item_key)
        keys = built.get(value, ())
        objs = [self._items[k] for k in keys]
        if self.debug:
            for key, obj in zip(keys, objs, strict=True):
                self._check(key, obj)
        return objs

    def by_label(self, key: str, value: str) -> builtins.list[Obj]:
        """Objects whose label ``key`` equals ``value`` (an index per label key, built once)."""
        name = f"label:{key}"
        if name not in self.indexers:
            self.indexers[name] = _label_indexer(key)
        return self.by_index(name, value)

    # -- writes ------------------------------------------------------------------------------

    def upsert(self, obj: Obj) -> tuple[Obj, Obj | None]:
        """Store ``obj`` (transformed); returns ``(stored, previous)``."""
        if self.transform is not None:
            obj = self.transform(obj)
        key = key_for(obj)
        previous = self._items.get(key)
        if previous is not None and self.debug:
            self._check(key, previous)
        self._items[key] = obj
        self._tombstones.pop(key, None)
        self._reindex(key, obj, previous)
        if self.debug:
            self._fingerprints[key] = _fingerprint(obj)
        return obj, previous

    def upsert_if_newer(self, obj: Obj) -> tuple[Obj, Obj | None] | None:
        """Store ``obj`` if :meth:`accepts` it; returns ``(stored, previous)``, else ``None``."""
        return self.upsert(obj) if self.accepts(obj) else None

    def delete(self, key: str, resource_version: str | None = None) -> Obj | None:
        """Remove ``key``; with the deletion's ``resource_version``, remember a tombstone, and
        keep a stored object that is provably newer than the deletion (a re-creation)."""
        if resource_version:
            self._bury(key, resource_version)
            current = self._items.get(key)
            if current is not None and _provably_newer(_rv(current), resource_version):
                return None
        previous = self._items.pop(key, None)
        if previous is None:
            return None
        if self.debug:
            self._check(key, previous)
            self._fingerprints.pop(key, None)
        self._reindex(key, None, previous)
        return previous

    def replace(
        self,
        objs: Iterable[Obj],
        resource_version: str | None = None,
        *,
        namespace: str | None = None,
    ) -> tuple[builtins.list[tuple[Obj, Obj | None]], builtins.list[Obj]]:
        """Make the store hold ``objs``, a list taken at ``resource_version``.

        Without ``resource_version`` the store then holds exactly ``objs``. With it,
        what is newer than the list survives (see the module docstring), listed objects
        at or below their key's tombstone are skipped, and vanished keys get a tombstone
        at ``resource_version``. With ``namespace``, ``objs`` is that namespace's list
        and only its keys are replaced (a store fed by one list per namespace).
        Returns ``(upserted, deleted)``: ``(stored, previous)`` pairs for the objects
        stored, and the objects that vanished.
        """
        upserted: builtins.list[tuple[Obj, Obj | None]] = []
        seen: set[str] = set()
        for obj in objs:
            key = key_for(obj)
            seen.add(key)
            if resource_version:
                current = self._items.get(key)
                if current is not None and _provably_newer(_rv(current), _rv(obj)):
                    continue  # our write-through is newer than the snapshot
                tombstone = self.tombstone(key)
                if tombstone is not None and not newer(_rv(obj), tombstone):
                    continue  # deleted after the snapshot was taken
            upserted.append(self.upsert(obj))
        deleted = []
        prefix = f"{namespace}/" if namespace else ""
        for key in [k for k in self._items if k not in seen and k.startswith(prefix)]:
            current = self._items[key]
            if resource_version and _provably_newer(_rv(current), resource_version):
                continue  # written after the snapshot was taken
            gone = self.delete(key, resource_version)
            if gone is not None:
                deleted.append(gone)
        return upserted, deleted

    def verify(self) -> None:
        """Debug mode: raise :class:`CacheMutationError` if any stored object was mutated."""
        for key, obj in self._items.items():
            self._check(key, obj)

    def _bury(self, key: str, resource_version: str) -> None:
        tombstones = self._tombstones
        tombstones.pop(key, None)  # re-inserted last: the dict stays oldest first
        now = self._clock.now()
        tombstones[key] = (resource_version, now)
        while tombstones:
            oldest, (_, when) = next(iter(tombstones.items()))
            if len(tombstones) <= self.max_tombstones and now - when <= self.tombstone_ttl:
                break
            del tombstones[oldest]

    def _check(self, key: str, obj: Obj) -> None:
        expected = self._fingerprints.get(key)
        if expected is not None and _fingerprint(obj) != expected:
            raise CacheMutationError(
                f"cached object {key} was mutated in place; objects from the cache are "
                "shared and read-only: copy before changing (copy.deepcopy)"
            )

    def _reindex(self, key: str, obj: Obj | None, previous: Obj | None) -> None:
        # Old index values are recomputed from the previous object rather than kept
        # per key: that bookkeeping would cost ~100 bytes per object and index.
        for name, index in self._indices.items():
            indexer = self.indexers[name]
            old_values = set(indexer(previous)) if previous is not None else set()
            new_values = set(indexer(obj)) if obj is not None else set()
            for value in old_values - new_values:
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]
            for value in new_values - old_values:
                index.setdefault(value, set()).add(key)
