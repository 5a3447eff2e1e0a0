"""A controller-runtime-style framework for Kubernetes operators, in asyncio.

The pieces, bottom up (each module's docstring is its contract):

- :mod:`runtime.reconcile`: the :class:`Reconciler` protocol, :class:`Request`,
  :class:`Result` and :class:`TerminalError` - what a reconcile is asked and what
  its answers mean. Level-based: read the world, converge it, never depend on
  which event woke you.
- :mod:`runtime.workqueue`: client-go's work queue (one worker per key, adds
  collapse), delayed adds, and rate limiters (per-key exponential backoff plus a
  token bucket shared by all keys).
- :mod:`runtime.client`: an async REST client, generic over kinds, with typed
  errors, timeouts and retries on every call.
- :mod:`runtime.cache`: watch-fed informers and the cache reader reconcilers
  read from (zero GETs per reconcile, no copies, write-through of our own writes).
- :mod:`runtime.status`: the status writer - no write when nothing meaningful
  changed, optimistic concurrency, conflicts resolved or reported stale;
  :mod:`runtime.conditions`: ``metav1.Condition`` lookup and the
  ``lastTransitionTime`` rule, for the status you compute.
- :mod:`runtime.objects`: change-gated ``create_or_update``, owner references, finalizers.
- :mod:`runtime.quantity`: Kubernetes quantities parsed to exact values (``"1000m"``
  is ``"1"``), so that both of the above compare them as the API server means them.
- :mod:`runtime.source`, :mod:`runtime.handler`, :mod:`runtime.predicate`: where
  requests come from (:class:`source.Kind` for a cached resource,
  :class:`source.Channel` for in-process triggers), which requests an event
  causes, and which events count.
- :mod:`runtime.controller`: :class:`Controller` wires sources -> queue ->
  workers -> reconciler and applies each outcome to the queue.
- :mod:`runtime.manager`: :class:`Manager` runs it all in order (metrics and
  probe servers, caches, leader election via :mod:`runtime.leaderelection`,
  controllers) and stops it cleanly; :mod:`runtime.builder`'s :class:`Builder`
  wires a reconciler to resources; :mod:`runtime.events` records Events
  without storms; :mod:`runtime.log` configures structlog.
- :mod:`runtime.metrics`: the Prometheus registry the framework reports into
  (``workqueue_*`` and ``controller_runtime_*`` series); :mod:`runtime.delegatedauth`
  lets only callers the API server authenticates and authorizes read it
  (``ManagerOptions(metrics_secure=True)``).
- :mod:`runtime.webhook`: admission (validating, mutating) and conversion webhooks
  served by the manager over HTTPS, with :mod:`runtime.tls` for their certificates
  (self-signed generation, reloading on rotation).
- :mod:`runtime.clock` and :mod:`runtime.testing`: injectable time and the test kit.

A minimal controller:

>>> import asyncio, runtime
>>> async def reconcile(request: runtime.Request) -> runtime.Result:
...     return runtime.Result()
>>> ctrl = runtime.Controller("minimal", reconcile, options=runtime.ControllerOptions())
>>> ctrl.watch(runtime.source.Channel()) is ctrl
True
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names, for type checkers; at run time they load on first use
    from runtime import (
        builder,
        cache,
        client,
        clock,
        conditions,
        controller,
        delegatedauth,
        events,
        handler,
        leaderelection,
        log,
        manager,
        metrics,
        objects,
        predicate,
        quantity,
        reconcile,
        source,
        status,
        tls,
        webhook,
        workqueue,
    )
    from runtime.builder import Builder
    from runtime.controller import Controller
    from runtime.controller import Options as ControllerOptions
    from runtime.manager import Manager
    from runtime.manager import Options as ManagerOptions
    from runtime.reconcile import Func, Reconciler, Request, Result, TerminalError

__version__ = "0.1.0"
"""The version of both distributions built from this repository (the framework,
``k8s-controller-runtime``, and the operator on it): the one place it is written."""

__all__ = [
    "Builder",
    "Controller",
    "ControllerOptions",
    "Func",
    "Manager",
    "ManagerOptions",
    "Reconciler",
    "Request",
    "Result",
    "TerminalError",
    "__version__",
    "builder",
    "cache",
    "client",
    "clock",
    "conditions",
    "controller",
    "delegatedauth",
    "events",
    "handler",
    "leaderelection",
    "log",
    "manager",
    "metrics",
    "objects",
    "predicate",
    "quantity",
    "reconcile",
    "source",
    "status",
    "tls",
    "webhook",
    "workqueue",
]

_NAMES = {
    "Builder": ("runtime.builder", "Builder"),
    "Controller": ("runtime.controller", "Controller"),
    "ControllerOptions": ("runtime.controller", "Options"),
    "Manager": ("runtime.manager", "Manager"),
    "ManagerOptions": ("runtime.manager", "Options"),
    "Func": ("runtime.reconcile", "Func"),
    "Reconciler": ("runtime.reconcile", "Reconciler"),
    "Request": ("runtime.reconcile", "Request"),
    "Result": ("runtime.reconcile", "Result"),
    "TerminalError": ("runtime.reconcile", "TerminalError"),
}


def __getattr__(name: str) -> Any:
    """The facade loads lazily (PEP 562): ``runtime.Controller`` or ``runtime.cache``
    imports its module on first use, so that importing one pure module of the framework
    (``runtime.clock``, ``runtime.conditions``) does not load the client, the cache or
    aiohttp."""
    if name in _NAMES:
        module, attribute = _NAMES[name]
        value = getattr(importlib.import_module(module), attribute)
    elif name in __all__ and not name.startswith("_"):
        value = importlib.import_module(f"runtime.{name}")
    else:
        raise AttributeError(f"module 'runtime' has no attribute {name!r}")
    globals()[name] = value
    return value
