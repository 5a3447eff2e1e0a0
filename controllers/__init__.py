"""The RayCluster and RayService reconcilers, built on :mod:`runtime` and :mod:`api`.

:func:`setup` registers every reconciler that exists with a manager; the
``rayservice-manager`` binary (:mod:`controllers.main`) calls it. Today that is
the RayCluster controller (:mod:`controllers.raycluster`); the RayService
controller arrives with its own issue.
"""

from __future__ import annotations

from typing import Any

from controllers import raycluster

__all__ = ["setup"]


def setup(manager: Any, *, max_concurrent_reconciles: int = 1) -> list[Any]:
    """Register the reconcilers with ``manager``; returns the controllers built."""
    return [raycluster.setup(manager, max_concurrent_reconciles=max_concurrent_reconciles)]
