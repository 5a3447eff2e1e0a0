"""Semantic equality of JSON values, as apimachinery's ``equality.Semantic.DeepEqual``.

Kubernetes answers in its own words: it drops empty maps and lists, and stores a
quantity in its canonical form (``"1000m"`` comes back as ``"1"``). A controller
that compares what it wants with what is there must not see those as changes, or it
writes on every pass. :func:`normalize` turns a value into one where ``==`` is that
equality, and :func:`equal` compares two. The status writer
(:mod:`runtime.status`) and change-gated writes (:mod:`runtime.objects`) use them.

>>> equal({"a": 1, "b": None, "lastUpdateTime": "x"}, {"a": 1.0, "lastUpdateTime": "y"},
...       volatile={"lastUpdateTime"})
True
>>> equal({"limits": {"cpu": "1000m"}, "labels": {}}, {"limits": {"cpu": 1}})
True
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from runtime import quantity

__all__ = [
    "MEANINGFUL_EMPTY",
    "QUANTITY_FIELDS",
    "QUANTITY_MAPS",
    "equal",
    "normalize",
    "normalize_top",
]

# Where Kubernetes has a resource.Quantity (see normalize): the values of maps
# under these keys (ResourceRequirements, ResourceList fields) ...
QUANTITY_MAPS = frozenset({
    "limits", "requests", "capacity", "allocatable", "allocatedResources", "hard", "used",
    "overhead",
})  # fmt: skip
# ... and these (parent key, key) fields.
QUANTITY_FIELDS = frozenset({("emptyDir", "sizeLimit"), ("resourceFieldRef", "divisor")})
# Fields where an empty object means something that absence does not (see normalize).
MEANINGFUL_EMPTY = frozenset({"emptyDir", "podSelector", "namespaceSelector", "labelSelector"})


def normalize(value: Any, volatile: Collection[str] = ()) -> Any:
    """``value`` in a form where ``==`` is semantic equality (a new structure; ``value``
    is not modified). The rules, like apimachinery's ``equality.Semantic.DeepEqual``:

    - keys whose value is ``None``, ``{}`` or ``[]`` (after normalising it) are
      dropped, at every depth: Kubernetes omits empty maps and lists, so they
      mean the same as absent ones (list items are kept: ``[{}]`` is not ``[]``).
      Except for the keys in :data:`MEANINGFUL_EMPTY`, where ``{}`` is a value:
      ``emptyDir: {}`` is a volume source, and an empty ``podSelector``,
      ``namespaceSelector`` or ``labelSelector`` selects everything where an
      absent one selects nothing or only the own namespace. ``selector`` is not
      among them (a Service's is a map the server drops when empty), so an empty
      label selector under that name is taken for an absent one;
    - keys named in ``volatile`` are dropped, at every depth;
    - **quantities**, only where Kubernetes types a field ``resource.Quantity``:
      the values of a map under a key in :data:`QUANTITY_MAPS` (``limits``,
      ``requests``, ``capacity``, ``allocatable``, ``allocatedResources``,
      ``hard``, ``used``, ``overhead``) and the fields in :data:`QUANTITY_FIELDS`
      (``emptyDir.sizeLimit``, ``resourceFieldRef.divisor``) become
      :class:`runtime.quantity.Quantity` values when they parse as one, so
      ``"1000m"``, ``"1"`` and ``1`` are equal there. Everywhere else a string is
      a string: an env var ``"1"`` is not ``"1000m"``, and a ConfigMap key named
      ``sizeLimit`` is not a quantity. (Quantities under generic names - a
      LimitRange's ``max``/``default``, an HPA target's ``value`` - are left out
      on purpose and compare as written);
    - numbers compare as Python numbers (``1 == 1.0``); an empty string, ``0`` and
      ``False`` are values, not absence.
    """
    return _normalize(value, frozenset(volatile), None)


def _normalize(value: Any, volatile: frozenset[str], parent: str | None) -> Any:
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if key in volatile:
                continue
            if (parent, key) in QUANTITY_FIELDS:
                item = _quantity(item, volatile)
            elif key in QUANTITY_MAPS and isinstance(item, Mapping):
                item = {k: _quantity(v, volatile) for k, v in item.items() if v is not None}
            else:
                item = _normalize(item, volatile, key)
            if not _empty(item) or (key in MEANINGFUL_EMPTY and item == {}):
                out[key] = item
        return out
    if isinstance(value, list | tuple):
        return [_normalize(item, volatile, None) for item in value]
    return value


def _quantity(value: Any, volatile: frozenset[str]) -> Any:
    parsed = quantity.parse_or_none(value)
    return parsed if parsed is not None else _normalize(value, volatile, None)


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, dict | list) and not value)


def normalize_top(value: Any, volatile: Collection[str] = ()) -> Any:
    """:func:`normalize`, with ``{}`` for an empty or absent value (a whole object or
    status: ``None``, ``{}`` and ``[]`` all mean "nothing")."""
    normal = _normalize(value, frozenset(volatile), None)
    return {} if _empty(normal) else normal


def equal(a: Any, b: Any, *, volatile: Collection[str] = ()) -> bool:
    """Semantic equality of two JSON values (the rules are :func:`normalize`'s)."""
    frozen = frozenset(volatile)
    return bool(normalize_top(a, frozen) == normalize_top(b, frozen))
