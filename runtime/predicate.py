"""Predicates: which events are worth a reconcile.

A predicate is ``Callable[[Event], bool]``; events it rejects are dropped before
they reach the work queue. Creates and deletes always pass the ``*_changed``
predicates; they judge updates only:

- :func:`generation_changed`: the spec changed (``metadata.generation`` moved).
  Status-only writes - including our own - do not trigger a reconcile. Beware:
  a status wiped by someone else then does not self-heal until the next event.
  And only kinds with a spec have a generation (custom resources with a status
  subresource, Deployments, Jobs...): a ConfigMap, Secret or Lease has none, so
  this predicate drops **every** update of such a kind. It logs a warning (once per
  kind) the first time it drops an update whose objects have no generation;
  filter those kinds with :func:`resource_version_changed`, :func:`field_changed`
  (``"data"``) or :func:`label_selector` instead.
- :func:`resource_version_changed`: anything changed (drops resync no-ops).
- :func:`label_changed`, :func:`annotation_changed`;
- :func:`spec_or_metadata_changed`: any of the three above (what an object's own
  controller usually wants: not its status writes, not ``resourceVersion`` or
  ``managedFields`` noise).
- :func:`field_changed`: the value at one path changed (a missing one is ``None``), for
  a controller that reads only part of what it watches - e.g. a child's
  ``status.conditions`` and not its progress counters.
- :func:`label_selector`: objects whose labels match a selector (the cache's syntax,
  :mod:`runtime.cache.selector`); an update passes when the old *or* the new object
  matches, so an object that leaves the selector is seen leaving (its reconciler
  can undo what it did for it), unlike controller-runtime's
  ``LabelSelectorPredicate``, which looks at the new object only.
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
>>> mirrored = label_selector("mirror=true")
>>> was = {"metadata": {"labels": {"mirror": "true"}}}
>>> left = Event("update", {"metadata": {"labels": {}}}, was)
>>> mirrored(left), mirrored(Event("add", {"metadata": {"labels": {"mirror": "no"}}}))
(True, False)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import structlog

from runtime.cache import informer
from runtime.cache import selector as selector_

__all__ = [
    "Predicate",
    "and_",
    "annotation_changed",
    "field_changed",
    "generation_changed",
    "label_changed",
    "label_selector",
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


_log = structlog.get_logger("runtime.predicate")
_WARNED: set[tuple[object, object]] = set()
"""The (apiVersion, kind)s :func:`generation_changed` has warned about."""


def _generation_changed(event: informer.Event) -> bool:
    if event.type != "update" or event.old is None:
        return True
    old, new = _meta(event.old).get("generation"), _meta(event.obj).get("generation")
    if old is None and new is None:
        kind = (event.obj.get("apiVersion"), event.obj.get("kind"))
        if kind not in _WARNED:
            _WARNED.add(kind)
            _log.warning(
                "generation_changed drops every update of this kind: its objects have no "
                "metadata.generation; filter it with resource_version_changed, field_changed "
                "or label_selector",
                api_version=kind[0],
                kind=kind[1],
            )
        return False
    return bool(old != new)


def _meta(obj: Any) -> Mapping[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    return meta if isinstance(meta, Mapping) else {}


generation_changed: Predicate = _generation_changed
generation_changed.__name__ = "generation_changed"
resource_version_changed: Predicate = _meta_changed("resourceVersion")
label_changed: Predicate = _meta_changed("labels")
annotation_changed: Predicate = _meta_changed("annotations")


def label_selector(selector: str) -> Predicate:
    """Events of objects whose labels match ``selector``; an update passes when the old or
    the new object matches (see the module docstring). A malformed selector raises
    :class:`ValueError` here, when the predicate is made."""
    parsed = selector_.parse(selector)

    def matches(obj: Any) -> bool:
        labels = _meta(obj).get("labels")
        return parsed.matches(labels if isinstance(labels, Mapping) else {})

    def selected(event: informer.Event) -> bool:
        return matches(event.obj) or (event.old is not None and matches(event.old))

    selected.__name__ = f"label_selector({selector!r})"
    return selected


def and_(*predicates: Predicate) -> Predicate:
    return lambda event: all(p(event) for p in predicates)


def or_(*predicates: Predicate) -> Predicate:
    return lambda event: any(p(event) for p in predicates)


def not_(predicate: Predicate) -> Predicate:
    return lambda event: not predicate(event)


spec_or_metadata_changed: Predicate = or_(generation_changed, label_changed, annotation_changed)
