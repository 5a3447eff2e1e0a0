"""The reconcile contract: what a reconciler is asked, and what its answers mean.

A **reconciler** makes the world match what an object asks for. It is called
with a :class:`Request` - only a namespace and a name - and must:

- **read the current state** (the object, the things it owns, external
  systems) and converge it towards the desired state, step by step;
- **not depend on which event woke it**: reconciliation is *level-based*. Many
  events may collapse into one call, a call may come with no event at all (a
  periodic requeue, a restart, a relist), and the object may already be gone
  (then clean up, or do nothing). Anything needed to decide must be read again,
  never remembered only in memory;
- be **idempotent**: running it twice in a row with nothing changed must change
  nothing the second time (in particular: write no status).

One request is never reconciled by two workers at once (the work queue
guarantees it), but different requests run concurrently when the controller
has several workers.

What the outcome of :meth:`Reconciler.reconcile` means:

- **returns** ``Result()``: success. The key's retry backoff is reset; it is not
  requeued until something changes (a requeue an earlier pass asked for is dropped).
- **returns** ``Result(requeue_after=d)``: success, look again in ``d`` (seconds
  or a :class:`~datetime.timedelta`; must be > 0). Backoff is reset and the key is
  added after ``d`` - the way to poll something that sends no events (a Ray
  dashboard, a deadline). An earlier event still triggers an earlier reconcile.
  The newest successful pass decides: its ``d`` replaces the time an earlier pass
  asked for, also when it is later (controller-runtime keeps the earliest, so a
  pass run by an event between two polls adds a pass). Return the earliest of
  everything the pass found due.
- **raises** an exception: a transient failure. It is logged with its traceback
  and the key is requeued with the rate limiter's growing delay (5 ms, 10 ms, ...
  up to 1000 s, and at most 10 per second overall by default). Any ``Result`` is
  moot.
- **raises** :class:`TerminalError`: a failure that retrying cannot fix (an
  invalid spec, say). It is logged and counted, and the key is **not** requeued;
  the next change to the object triggers the next attempt. Report it on the
  object too (a status condition and an Event), since no retry will. A wrapped
  one counts too (:func:`is_terminal`): as the ``__cause__`` of what is raised
  (``raise X from terminal``) or inside an exception group (a
  :class:`asyncio.TaskGroup` of which one task raised it).
- **takes longer than the controller's reconcile timeout**: cancelled, and
  treated as a transient failure.

Every exception a reconcile raises is one of these outcomes, whatever its type
(also a :class:`asyncio.CancelledError` from a future someone else cancelled);
only the cancellation of the worker itself, when the controller stops, is not.

>>> import asyncio
>>> async def hello(request: Request) -> Result:
...     return Result(requeue_after=30)
>>> reconciler = Func(hello)
>>> asyncio.run(reconciler.reconcile(Request("default", "demo")))
Result(requeue_after=30.0)
>>> str(Request("default", "demo"))
'default/demo'
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable
from typing import NamedTuple, Protocol, runtime_checkable

__all__ = ["Func", "Reconciler", "Request", "Result", "TerminalError", "is_terminal"]


class Request(NamedTuple):
    """Identifies the object to reconcile; ``namespace`` is ``""`` for cluster-scoped kinds.

    A tuple, so it is cheap to hash and compare as a work-queue key.
    """

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


class Result:
    """A successful outcome; ``requeue_after`` asks for another look after that long."""

    __slots__ = ("requeue_after",)

    requeue_after: float | None

    def __init__(self, requeue_after: float | datetime.timedelta | None = None) -> None:
        if isinstance(requeue_after, datetime.timedelta):
            requeue_after = requeue_after.total_seconds()
        if requeue_after is not None:
            requeue_after = float(requeue_after)
            if not requeue_after > 0:
                raise ValueError(
                    f"requeue_after must be > 0 seconds, got {requeue_after}; "
                    "raise an exception to retry with backoff instead"
                )
        self.requeue_after = requeue_after

    def __repr__(self) -> str:
        return f"Result(requeue_after={self.requeue_after!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Result) and other.requeue_after == self.requeue_after

    def __hash__(self) -> int:
        return hash(self.requeue_after)


@runtime_checkable
class Reconciler(Protocol):
    """Converges one object's world towards its spec (see the module docstring)."""

    async def reconcile(self, request: Request) -> Result:
        """Reconcile ``request``; return a :class:`Result` or raise (see the module docstring)."""
        ...


class Func:
    """Adapts a plain ``async def f(request) -> Result`` to :class:`Reconciler`."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[Request], Awaitable[Result]]) -> None:
        self.fn = fn

    async def reconcile(self, request: Request) -> Result:
        return await self.fn(request)

    def __repr__(self) -> str:
        return f"Func({getattr(self.fn, '__qualname__', self.fn)!r})"


class TerminalError(Exception):
    """A reconcile failure that retrying cannot fix: logged, counted, never requeued.

    Chain the cause: ``raise TerminalError("spec.foo is invalid") from exc``.
    """


def is_terminal(exc: BaseException) -> bool:
    """Whether ``exc`` is, or wraps, a :class:`TerminalError` (Go's ``errors.Is``).

    Looks through ``__cause__`` chains and into exception groups, at any depth;
    ``__context__`` (an exception raised *while handling* another) is not wrapping.

    >>> try:
    ...     raise RuntimeError("while applying") from TerminalError("spec.x is invalid")
    ... except RuntimeError as exc:
    ...     is_terminal(exc), is_terminal(ExceptionGroup("g", [ValueError(), exc]))
    (True, True)
    >>> is_terminal(ValueError("transient"))
    False
    """
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, TerminalError):
            return True
        if isinstance(current, BaseExceptionGroup):
            todo.extend(current.exceptions)
        if current.__cause__ is not None:
            todo.append(current.__cause__)
    return False
