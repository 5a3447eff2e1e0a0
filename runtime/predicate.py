"""Predicates: which events are worth a reconcile.

A predicate is ``Callable[[Event], bool]``; events it rejects are dropped before
they reach the work queue. Creates and deletes always pass the ``*_changed``
predicates; they judge updates only:

- :func:`generation_changed`: the spec changed (``metadata.generation`` moved).
  Status-only writes - including our own - do not trigger a reconcile. Beware:
  a status wiped by someone else then does not self-heal until the next event.
- :func:`resource_version_changed`: anything changed (drops resync no-ops).
- :func:`label_changed`, :func:`annotation_changed`;
- :func:`spec_or_metadata_changed`: any of the three above (what an object's own
  controller usually wants: not its status writes, not ``resourceVersion`` or
  ``managedFields`` noise).
- :func:`field_changed`: the value at one path changed (a missing one is ``None``), for
  a controller that reads only part of what it watches - e.g. a child's
  ``status.conditions`` and not its progress counters.
- :func:`and_`, :func:`or_`, :func:`not_` combine them.

>>> from runtime.cache.informer import Event
>>> old = {"metadata": {"generation": 1, "resourceVersion": "5"}}
>>> new = {"metadata": {"generation": 1, "resourceVersion": "6"}}
>>> event = Event("update", new, old)
>>> generation_changed(event), resource_version_changed(event)
(False, True)
>>> or_(generation_changed, label_changed)(Event("update", new, old))
False
>>> finished = field_changed("status", "conditions")
>>> finished(Event("update", {**new, "status": {"active": 1}}, old))
False
>>> finished(Event("update", {**new, "status": {"conditions": [{"type": "Complete"}]}}, old))
True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from runtime.cache import informer

__all__ = [
    "Predicate",
    "and_",
    "annotation_changed",
    "field_changed",
    "generation_changed",
    "label_changed",
    "not_",
    "or_",
    "resource_version_changed",
    "spec_or_metadata_changed",
]

Predicate = Callable[[informer.Event], bool]


def field_changed(*path: str) -> Predicate:
    """Updates whose value at ``path`` (keys from the object's root) differs; creates and
    deletes pass. A key missing on the way is ``None``."""
    if not path:
        raise ValueError("field_changed needs a path")

    def at(obj: Any) -> Any:
        for key in path:
            if not isinstance(obj, Mapping):
                return None
            obj = obj.get(key)
        return obj

    def changed(event: informer.Event) -> bool:
        if event.type != "update" or event.old is None:
            return True
        return bool(at(event.old) != at(event.obj))

    changed.__name__ = f"{'.'.join(path)}_changed"
    return changed


def _meta_changed(field: str) -> Predicate:
    changed = field_changed("metadata", field)
    changed.__name__ = f"{field}_changed"
    return changed


generation_changed: Predicate = _meta_changed("generation")
resource_version_changed: Predicate = _meta_changed("resourceVersion")
label_changed: Predicate = _meta_changed("labels")
annotation_changed: Predicate = _meta_changed("annotations")


def and_(*predicates: Predicate) -> Predicate:
    return lambda event: all(p(event) for p in predicates)


def or_(*predicates: Predicate) -> Predicate:
    return lambda event: any(p(event) for p in predicates)


def not_(predicate: Predicate) -> Predicate:
    return lambda event: not predicate(event)


spec_or_metadata_changed: Predicate = or_(generation_changed, label_changed, annotation_changed)
