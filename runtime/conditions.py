"""Conditions: ``metav1.Condition`` lists read and written by the rules of
apimachinery's ``meta`` package, for any resource's status.

A condition is a mapping with ``type``, ``status`` (``"True"``, ``"False"`` or
``"Unknown"``), ``reason``, ``message``, ``lastTransitionTime`` and
``observedGeneration``; a list holds one per ``type``. The rules:

- :func:`find` returns the condition of a type (Go's ``FindStatusCondition``); it
  also takes typed models with a ``type`` attribute (pydantic, dataclasses), so one
  lookup serves raw objects and typed APIs alike; :func:`of` and :func:`is_true` read
  an object's ``status.conditions`` (``IsStatusConditionTrue``: absent is not true);
- :func:`transition_time` is the one ``lastTransitionTime`` rule: it moves only when
  ``status`` changes (a new reason or message keeps it), and a condition that had none
  gets ``now``;
- :func:`make` builds a condition by that rule from the one it replaces, and
  :func:`put` replaces (or appends) it in a list, in place, keeping the list's order;
  :func:`set_condition` is the two in one call, as Go's ``SetStatusCondition``: both
  return whether the list changed (setting what is there already changes nothing, so
  the status writer has nothing to write);
- :func:`remove` drops a type (``RemoveStatusCondition``); :func:`is_false` is
  ``IsStatusConditionFalse`` (absent is neither true nor false) and :func:`has_status`
  ``IsStatusConditionPresentAndEqual``.

Times are RFC 3339 strings (:func:`runtime.clock.rfc3339`); nothing here reads a clock.

>>> old = [make("Ready", "False", "Starting", "", generation=1, now="t0")]
>>> put(old, make("Ready", "False", "Waiting", "pods", generation=1, now="t1", previous=old[0]))
True
>>> old[0]["reason"], old[0]["lastTransitionTime"]
('Waiting', 't0')
>>> ready = make("Ready", "True", "Ready", "", generation=1, now="t2", previous=find(old, "Ready"))
>>> put(old, ready)
True
>>> is_true({"status": {"conditions": old}}, "Ready"), old[0]["lastTransitionTime"]
(True, 't2')
>>> set_condition(old, "Ready", "True", "Ready", "", generation=1, now="t3")  # the same
False
>>> remove(old, "Ready"), old
(True, [])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

__all__ = [
    "find",
    "has_status",
    "is_false",
    "is_true",
    "make",
    "of",
    "put",
    "remove",
    "set_condition",
    "transition_time",
]

C = TypeVar("C")


def _type_of(condition: object) -> object:
    if isinstance(condition, Mapping):
        return condition.get("type")
    return getattr(condition, "type", None)


def find(conditions: Iterable[C] | None, type_: str) -> C | None:
    """The condition of ``type_`` in ``conditions`` (mappings or typed models), or None.

    >>> find(None, "Ready") is None, find([{"type": "Ready"}], "Ready")
    (True, {'type': 'Ready'})
    """
    return next((c for c in conditions or () if _type_of(c) == type_), None)


def of(obj: Mapping[str, Any] | None, type_: str) -> Mapping[str, Any] | None:
    """The condition of ``type_`` in a raw object's ``status.conditions``, or None."""
    status = (obj or {}).get("status") or {}
    found: Mapping[str, Any] | None = find(status.get("conditions"), type_)
    return found


def has_status(obj: Mapping[str, Any] | None, type_: str, status: str) -> bool:
    """Whether a raw object has condition ``type_`` with ``status`` (Go's
    ``IsStatusConditionPresentAndEqual``); absent is never equal.

    >>> has_status({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}},
    ...            "Ready", "Unknown")
    True
    """
    found = of(obj, type_)
    return found is not None and found.get("status") == status


def is_true(obj: Mapping[str, Any] | None, type_: str) -> bool:
    """Whether a raw object has condition ``type_`` with status ``"True"``.

    >>> is_true({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, "Ready")
    True
    >>> is_true({}, "Ready")
    False
    """
    return has_status(obj, type_, "True")


def is_false(obj: Mapping[str, Any] | None, type_: str) -> bool:
    """Whether a raw object has condition ``type_`` with status ``"False"`` (absent is
    neither true nor false)."""
    return has_status(obj, type_, "False")


def transition_time(previous: Mapping[str, Any] | None, status: str, now: str) -> str:
    """The ``lastTransitionTime`` of a condition with ``status`` replacing ``previous``:
    ``previous``'s when its status is the same and it has one, else ``now``.

    >>> transition_time({"status": "True", "lastTransitionTime": "t0"}, "True", "t1")
    't0'
    >>> transition_time({"status": "True", "lastTransitionTime": "t0"}, "False", "t1")
    't1'
    """
    if previous is not None and previous.get("status") == status:
        since = previous.get("lastTransitionTime")
        if since:
            return str(since)
    return now


def make(
    type_: str,
    status: str,
    reason: str,
    message: str,
    *,
    generation: int,
    now: str,
    previous: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A condition replacing ``previous`` (if any) by :func:`transition_time`'s rule.
    Every value is a plain ``str`` (enum members are ``str`` subclasses; the status
    writer compares what it would send)."""
    return {
        "type": str(type_),
        "status": str(status),
        "reason": str(reason),
        "message": str(message),
        "lastTransitionTime": transition_time(previous, str(status), now),
        "observedGeneration": int(generation),
    }


def put(conditions: list[dict[str, Any]], condition: Mapping[str, Any]) -> bool:
    """Replace the condition of ``condition``'s type in ``conditions`` (append when there
    is none), keeping the list's order; whether the list changed."""
    new = dict(condition)
    for index, current in enumerate(conditions):
        if _type_of(current) == new.get("type"):
            if current == new:
                return False
            conditions[index] = new
            return True
    conditions.append(new)
    return True


def set_condition(
    conditions: list[dict[str, Any]],
    type_: str,
    status: str,
    reason: str,
    message: str,
    *,
    generation: int,
    now: str,
) -> bool:
    """Set condition ``type_`` in ``conditions``, in place: :func:`make` from the one it
    replaces, then :func:`put`; whether the list changed.

    >>> conditions: list[dict[str, Any]] = []
    >>> set_condition(conditions, "Ready", "False", "Starting", "", generation=1, now="t0")
    True
    >>> set_condition(conditions, "Ready", "False", "Starting", "", generation=1, now="t1")
    False
    >>> conditions[0]["lastTransitionTime"]
    't0'
    """
    previous = find(conditions, type_)
    condition = make(
        type_, status, reason, message, generation=generation, now=now, previous=previous
    )
    return put(conditions, condition)


def remove(conditions: list[dict[str, Any]], type_: str) -> bool:
    """Drop the condition of ``type_`` from ``conditions``, in place; whether there was one."""
    for index, current in enumerate(conditions):
        if _type_of(current) == type_:
            del conditions[index]
            return True
    return False
