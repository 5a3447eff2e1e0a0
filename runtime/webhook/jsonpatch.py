"""RFC 6902 JSON patches computed by diffing two JSON documents.

:func:`diff` returns the operations that turn ``old`` into ``new`` - what a mutating
admission webhook answers (``patchType: JSONPatch``). Only ``add``, ``remove`` and
``replace`` are used, each at the deepest path where the two documents differ:

- objects: a key only in ``new`` is ``add``-ed, a key only in ``old`` is ``remove``-d,
  a key in both is compared recursively;
- arrays: the common prefix is compared element by element, extra elements of ``new``
  are ``add``-ed at their index in order, surplus elements of ``old`` are ``remove``-d
  from the last one down (so each index is valid when its operation applies);
- anything else (scalars, or values of different JSON types) is ``replace``-d.

The root itself is never replaced (the API server refuses ``replace`` at ``""``): two
roots of different types raise :class:`ValueError`. Path segments are escaped as RFC
6901 says (``~`` as ``~0``, ``/`` as ``~1``). ``1`` and ``1.0`` are different values
(``true`` and ``1`` too), since they serialise differently.

>>> diff({"a": 1, "b": {"c/d": [1, 2]}}, {"a": 1, "b": {"c/d": [1]}, "e~": None})
[{'op': 'remove', 'path': '/b/c~1d/1'}, {'op': 'add', 'path': '/e~0', 'value': None}]
"""

from __future__ import annotations

from typing import Any

__all__ = ["diff", "escape"]

Operation = dict[str, Any]


def escape(segment: str) -> str:
    """One path segment, escaped (RFC 6901).

    >>> escape("a/b~c")
    'a~1b~0c'
    """
    return segment.replace("~", "~0").replace("/", "~1")


def diff(old: Any, new: Any) -> list[Operation]:
    """The operations that turn ``old`` into ``new`` (see the module docstring)."""
    if _same(old, new):
        return []
    if not (isinstance(old, dict) and isinstance(new, dict)) and not (
        isinstance(old, list) and isinstance(new, list)
    ):
        raise ValueError("the root of a patched document must keep its type (object or array)")
    ops: list[Operation] = []
    _diff(old, new, "", ops)
    return ops


def _kind(value: Any) -> type:
    # Exact types: bool is an int in Python but another JSON type; 1 and 1.0 differ.
    return type(value)


def _same(a: Any, b: Any) -> bool:
    if _kind(a) is not _kind(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _diff(old: Any, new: Any, path: str, ops: list[Operation]) -> None:
    if _same(old, new):
        return
    if isinstance(old, dict) and isinstance(new, dict):
        for key in old:
            if key not in new:
                ops.append({"op": "remove", "path": f"{path}/{escape(key)}"})
        for key, value in new.items():
            where = f"{path}/{escape(key)}"
            if key in old:
                _diff(old[key], value, where, ops)
            else:
                ops.append({"op": "add", "path": where, "value": value})
    elif isinstance(old, list) and isinstance(new, list):
        common = min(len(old), len(new))
        for i in range(common):
            _diff(old[i], new[i], f"{path}/{i}", ops)
        for i in range(common, len(new)):
            ops.append({"op": "add", "path": f"{path}/{i}", "value": new[i]})
        for i in reversed(range(common, len(old))):
            ops.append({"op": "remove", "path": f"{path}/{i}"})
    else:
        ops.append({"op": "replace", "path": path, "value": new})
