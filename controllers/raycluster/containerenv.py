"""Environment variables of a container (a pod template's, in wire form), shared by the
pod builders (:mod:`controllers.raycluster.pods`, :mod:`~controllers.raycluster.auth`,
:mod:`~controllers.raycluster.autoscaler`). Pure; :func:`of` changes its container in
place.

>>> container = {"name": "ray-head"}
>>> of(container).append(value("RAY_PORT", "6379"))
>>> has(container["env"], "RAY_PORT"), value("EMPTY", "")
(True, {'name': 'EMPTY'})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["field", "has", "of", "value"]


def of(container: dict[str, Any]) -> list[dict[str, Any]]:
    """``container``'s ``env`` list, made (empty) when it has none."""
    env = container.get("env")
    if not isinstance(env, list):
        env = container["env"] = []
    return env


def has(items: Any, name: str) -> bool:
    """Whether the list ``items`` (env vars, volume mounts...) has one named ``name``."""
    return isinstance(items, list) and any(
        isinstance(item, Mapping) and item.get("name") == name for item in items
    )


def value(name: str, text: str) -> dict[str, Any]:
    """An env var as Go serialises it: an empty value is left out."""
    return {"name": name, "value": text} if text else {"name": name}


def field(name: str, path: str) -> dict[str, Any]:
    """An env var read from the pod's field ``path`` (the downward API)."""
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
