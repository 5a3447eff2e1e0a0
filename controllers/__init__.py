"""The RayCluster and RayService reconcilers, built on :mod:`runtime` and :mod:`api`.

:func:`setup` registers every reconciler that exists with a manager; the
``rayservice-manager`` binary (:mod:`controllers.main`) calls it. The
reconcilers themselves arrive with their own issues; until then the manager
runs with none (serving probes, metrics and leader election).
"""

from __future__ import annotations

from typing import Any

__all__ = ["setup"]


def setup(manager: Any, *, max_concurrent_reconciles: int = 1) -> list[Any]:
    """Register the reconcilers with ``manager``; returns the controllers built."""
    return []
