"""The controller engine: workers that turn reconcile outcomes into queue operations.

Private; :mod:`runtime.controller` validates options and builds it. The four-way
switch in :meth:`Engine.handle` is the heart:

==============================  ===========================================  =================
outcome                         queue operation                              ``result`` label
==============================  ===========================================  =================
raises (anything)               ``add_rate_limited`` (backoff grows)         ``error``
raises/wraps ``TerminalError``  ``forget``, no requeue; counted as terminal  ``error``
exceeds the timeout             ``add_rate_limited``                         ``error``
``Result(requeue_after=d)``     ``forget``, then ``requeue_after(d)``        ``requeue_after``
``Result()`` / ``None``         ``forget``, ``cancel_requeue``               ``success``
==============================  ===========================================  =================

A pass that ends (with or without ``requeue_after``) replaces the requeue an earlier pass
of its key asked for (:meth:`runtime.workqueue.delaying.DelayingQueue.requeue_after`):
the newest pass saw the newest state. A failed pass leaves it (its retry is a pass too).

"Raises (anything)" includes a :class:`asyncio.CancelledError` that is not the
cancellation of the worker itself (``Task.cancelling()`` is zero: a future the
reconciler awaited was cancelled by someone else). A queue key that is not a
:class:`~runtime.reconcile.Request` is logged and dropped. Anything else that ends
a worker is an engine bug: :meth:`Engine.run` stops the other workers and raises.
Whatever way :meth:`Engine.run` ends, no task it made is left running.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Sequence

import structlog
from structlog import contextvars as log_context

from runtime import metrics, reconcile
from runtime import source as source_
from runtime._internal import aio
from runtime.workqueue import queue as queue_
from runtime.workqueue import ratelimiting

__all__ = ["Engine"]

_RESULTS = ("success", "error", "requeue_after")

# controller-runtime's buckets for controller_runtime_reconcile_time_seconds.
_TIME_BUCKETS = (
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5),
    *(0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0),
    *(6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0),
)

_total = metrics.Family(
    "controller_runtime_reconcile_total",
    "Total number of reconciliations per controller",
    "counter",
    ("controller", "result"),
)
_errors = metrics.Family(
    "controller_runtime_reconcile_errors_total",
    "Total number of reconciliation errors per controller",
    "counter",
    ("controller",),
)
_terminal = metrics.Family(
    "controller_runtime_terminal_reconcile_errors_total",
    "Total number of terminal reconciliation errors per controller",
    "counter",
    ("controller",),
)
_time = metrics.Family(
    "controller_runtime_reconcile_time_seconds",
    "Length of time per reconciliation per controller",
    "histogram",
    ("controller",),
    buckets=_TIME_BUCKETS,
)
_active = metrics.Family(
    "controller_runtime_active_workers",
    "Number of currently used workers per controller",
    "gauge",
    ("controller",),
)
_max = metrics.Family(
    "controller_runtime_max_concurrent_reconciles",
    "Maximum number of concurrent reconciles per controller",
    "gauge",
    ("controller",),
)


class Engine:
    """Sources -> queue -> workers -> reconciler, for one controller."""

    def __init__(
        self,
        name: str,
        reconciler: reconcile.Reconciler,
        queue: ratelimiting.RateLimitingQueue[reconcile.Request],
        sources: Sequence[source_.Source],
        *,
        workers: int,
        reconcile_timeout: float | None,
        cache_sync_timeout: float,
        graceful_shutdown_timeout: float,
        running: asyncio.Event | None = None,
    ) -> None:
        self.name = name
        self.running = running
        """Set once the workers run (sources started, caches synced)."""
        self.reconciler = reconciler
        self.queue = queue
        self.sources = list(sources)
        self.workers = workers
        self.reconcile_timeout = reconcile_timeout
        self.cache_sync_timeout = cache_sync_timeout
        self.graceful_shutdown_timeout = graceful_shutdown_timeout
        self.log = structlog.get_logger("runtime.controller").bind(controller=name)
        self._ids = itertools.count(1)
        self._id_prefix = os.urandom(4).hex()
        self._slots: list[_Slot] = []
        self._results = {r: _total.counter(name, r) for r in _RESULTS}
        self._errors = _errors.counter(name)
        self._terminal = _terminal.counter(name)
        self._time = _time.histogram(name)
        self._active = _active.gauge(name)
        _max.gauge(name).set(workers)

    async def run(self, stop: asyncio.Event) -> None:
        """Start sources, wait for their caches, run workers until ``stop`` is set.

        Returns once stopped (also when ``stop`` is set while the caches are still
        syncing); raises :class:`TimeoutError` if they do not sync in time, and
        :class:`RuntimeError` if a worker fails (an engine bug, never a reconcile's
        failure). Cancelling it cancels the in-flight reconciles. However it ends,
        the queue is shut down and every task the engine made has ended.
        """
        try:
            for src in self.sources:
                await src.start(self.queue)
            if not await self._wait_for_sync(stop):
                self.log.info("stopped while waiting for caches to sync")
                return
            await self._run_workers(stop)
        finally:
            self.queue.shutdown()

    async def _wait_for_sync(self, stop: asyncio.Event) -> bool:
        """Wait for every syncing source; False when ``stop`` came first."""
        syncing = [s for s in self.sources if isinstance(s, source_.SyncingSource)]
        if not syncing:
            return not stop.is_set()
        try:
            return await aio.wait_unless_stopped(
                _sync_all(syncing), stop, self.cache_sync_timeout, f"{self.name}-cache-sync"
            )
        except TimeoutError:
            raise TimeoutError(
                f"controller {self.name!r}: caches did not sync within {self.cache_sync_timeout} s"
            ) from None

    async def _run_workers(self, stop: asyncio.Event) -> None:
        tasks: list[asyncio.Task[None]] = []
        for i in range(self.workers):
            slot = _Slot()
            slot.task = asyncio.create_task(self._worker(slot), name=f"{self.name}-worker-{i}")
            self._slots.append(slot)
            tasks.append(slot.task)
        watchdog = (
            asyncio.create_task(self._watchdog(), name=f"{self.name}-watchdog")
            if self.reconcile_timeout is not None
            else None
        )
        self.log.info("starting workers", worker_count=self.workers)
        if self.running is not None:
            self.running.set()
        try:
            await aio.wait_first(stop, tasks=tasks)
            ended = [task for task in tasks if task.done()]
            if ended:  # workers end only when the queue is shut down: an engine bug
                self.queue.shutdown()
                await aio.cancel_and_wait(tasks)
                self._raise_if_failed(tasks)
                if not stop.is_set():
                    raise RuntimeError(
                        f"controller {self.name!r}: worker {ended[0].get_name()!r} ended "
                        "before stop (was its queue shut down?)"
                    )
            else:
                await self._stop_workers(tasks)
                self._raise_if_failed(tasks)
        finally:
            # Also on cancellation, wherever it arrives: nothing may outlive run().
            self.queue.shutdown()
            await aio.cancel_and_wait([*tasks, *([watchdog] if watchdog is not None else [])])
            self._slots.clear()

    async def _stop_workers(self, tasks: list[asyncio.Task[None]]) -> None:
        self.log.info("stopping; waiting for in-flight reconciles", in_flight=self.queue.processing)
        self.queue.shutdown()
        _, pending = await asyncio.wait(tasks, timeout=self.graceful_shutdown_timeout)
        if pending:
            self.log.warning(
                "in-flight reconciles did not finish in time; cancelling them",
                cancelled=len(pending),
                timeout_seconds=self.graceful_shutdown_timeout,
            )
            await aio.cancel_and_wait(pending)
        self.log.info("all workers finished")

    def _raise_if_failed(self, tasks: list[asyncio.Task[None]]) -> None:
        """Raise if a worker raised: that is an engine bug, never a reconcile's failure."""
        failures = [t.exception() for t in tasks if t.done() and not t.cancelled()]
        errors = [exc for exc in failures if exc is not None]
        for exc in errors:
            self.log.error("worker failed; stopping the controller", exc_info=exc)
        if errors:
            raise RuntimeError(f"controller {self.name!r}: a worker failed") from errors[0]

    async def _watchdog(self) -> None:
        """Cancel reconciles that outlive ``reconcile_timeout``.

        One timer per controller instead of one per reconcile (``asyncio.timeout``
        costs a TimerHandle, a heap push and a cancel on every call - the largest
        single cost of a fast reconcile). Precision: a quarter of the timeout, at
        most 1 s.
        """
        assert self.reconcile_timeout is not None
        limit = self.reconcile_timeout
        tick = min(1.0, limit / 4)
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            for slot in self._slots:
                started = slot.started
                if started is not None and not slot.timed_out and now - started >= limit:
                    slot.timed_out = True
                    slot.task.cancel()

    async def _worker(self, slot: _Slot) -> None:
        queue = self.queue
        while not queue.shutting_down:
            try:
                request = await queue.get()
            except queue_.ShutDown:
                return
            try:
                await self.handle(request, slot)
            finally:
                queue.done(request)
            # A reconcile that never suspends (cache reads, nothing to write) would
            # otherwise let one worker drain a backlog without letting watches,
            # probes or the other workers run.
            await asyncio.sleep(0)

    async def handle(self, request: reconcile.Request, slot: _Slot) -> None:
        """Reconcile ``request`` once and apply the outcome to the queue.

        Whatever the reconcile raises is its outcome (a failure), except the
        cancellation of this worker (a stop), which propagates.
        """
        queue = self.queue
        if not isinstance(request, reconcile.Request):
            # A handler or map function enqueued something else; retrying cannot help.
            queue.forget(request)
            self.log.error("queue key is not a Request; dropped", key=repr(request))
            return
        self._active.value += 1
        started = time.monotonic()
        reconcile_id = f"{self._id_prefix}-{next(self._ids)}"
        tokens = log_context.bind_contextvars(
            controller=self.name,
            namespace=request.namespace,
            name=request.name,
            reconcile_id=reconcile_id,
        )
        try:
            result = await self._call(request, slot, started)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError) and slot.task.cancelling():
                raise  # this worker is being stopped
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            self._errors.value += 1
            self._results["error"].value += 1
            if reconcile.is_terminal(exc):
                queue.forget(request)
                self._terminal.value += 1
                self.log.error("terminal reconcile error; not requeued", exc_info=exc)
            else:
                queue.add_rate_limited(request)
                self.log.error(
                    "reconcile failed; requeued with backoff",
                    exc_info=exc,
                    requeues=queue.num_requeues(request),
                )
        else:
            queue.forget(request)
            if result.requeue_after is not None:
                queue.requeue_after(request, result.requeue_after)
                self._results["requeue_after"].value += 1
            else:
                queue.cancel_requeue(request)
                self._results["success"].value += 1
            # One line per pass (failures have theirs above), so a test's manager log
            # tells what the reconciler did; at the operator's default level it is dropped
            # before any processing.
            self.log.debug(
                "reconciled", requeue_after=result.requeue_after,
                seconds=round(time.monotonic() - started, 6),
            )  # fmt: skip
        finally:
            self._time.observe(time.monotonic() - started)
            self._active.value -= 1
            log_context.reset_contextvars(**tokens)

    async def _call(
        self, request: reconcile.Request, slot: _Slot, started: float
    ) -> reconcile.Result:
        slot.timed_out = False
        slot.started = started
        try:
            result = await self.reconciler.reconcile(request)
        except asyncio.CancelledError:
            if not slot.timed_out:
                raise  # a stop, or a cancellation the reconciler let escape (see handle)
            result = None  # reported below
        finally:
            slot.started = None
        if slot.timed_out:  # our watchdog fired (also when the reconciler swallowed it)
            slot.task.uncancel()
            raise ReconcileTimeout(f"reconcile of {request} exceeded {self.reconcile_timeout} s")
        if result is None:
            return _SUCCESS
        if not isinstance(result, reconcile.Result):
            raise TypeError(
                f"{self.reconciler!r}.reconcile returned {result!r}; expected a Result (or None)"
            )
        return result


async def _sync_all(sources: list[source_.SyncingSource]) -> None:
    async with asyncio.TaskGroup() as group:
        for src in sources:
            group.create_task(src.wait_for_sync())


class _Slot:
    """One worker: its task, and when its current reconcile started (None when idle)."""

    __slots__ = ("started", "task", "timed_out")

    def __init__(self) -> None:
        self.task: asyncio.Task[None] = None  # type: ignore[assignment]
        self.started: float | None = None
        self.timed_out = False


class ReconcileTimeout(Exception):
    """A reconcile took longer than the controller's ``reconcile_timeout``."""


_SUCCESS = reconcile.Result()
