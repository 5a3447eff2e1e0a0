"""A controller-runtime-style framework for Kubernetes operators, in asyncio.

The pieces, bottom up (each module's docstring is its contract):

- :mod:`runtime.reconcile`: the :class:`Reconciler` protocol, :class:`Request`,
  :class:`Result` and :class:`TerminalError` - what a reconcile is asked and what
  its answers mean. Level-based: read the world, converge it, never depend on
  which event woke you.
- :mod:`runtime.workqueue`: client-go's work queue (one worker per key, adds
  collapse), delayed adds, and rate limiters (per-key exponential backoff plus a
  token bucket shared by all keys).
- :mod:`runtime.source`: where requests come from (:class:`source.Channel` for
  in-process triggers).
- :mod:`runtime.controller`: :class:`Controller` wires sources -> queue ->
  workers -> reconciler and applies each outcome to the queue.
- :mod:`runtime.metrics`: the Prometheus registry the framework reports into
  (``workqueue_*`` and ``controller_runtime_*`` series).
- :mod:`runtime.clock` and :mod:`runtime.testing`: injectable time and the test kit.

A minimal controller:

>>> import asyncio, runtime
>>> async def reconcile(request: runtime.Request) -> runtime.Result:
...     return runtime.Result()
>>> ctrl = runtime.Controller("example", reconcile, options=runtime.ControllerOptions())
>>> ctrl.watch(runtime.source.Channel()) is ctrl
True
"""

from runtime import clock, controller, metrics, reconcile, source, workqueue
from runtime.controller import Controller
from runtime.controller import Options as ControllerOptions
from runtime.reconcile import Func, Reconciler, Request, Result, TerminalError

__all__ = [
    "Controller",
    "ControllerOptions",
    "Func",
    "Reconciler",
    "Request",
    "Result",
    "TerminalError",
    "clock",
    "controller",
    "metrics",
    "reconcile",
    "source",
    "workqueue",
]
