"""Controllers: a reconciler fed by sources through a rate-limited work queue.

A :class:`Controller` owns one :class:`~runtime.workqueue.RateLimitingQueue` of
:class:`~runtime.reconcile.Request` keys. Its sources add keys; its workers
(``max_concurrent_reconciles`` of them) take keys one at a time and call the
reconciler; the outcome decides what happens to the key (the table in
:mod:`runtime.reconcile` and in the engine: error -> rate-limited requeue,
:class:`~runtime.reconcile.TerminalError` -> no requeue, ``requeue_after`` ->
forget + delayed add, success -> forget).

Guarantees:

- one key is never reconciled by two workers at once; many events for a key
  collapse into one reconcile;
- a worker never dies of a reconcile: whatever a reconcile raises (any exception
  type, also a :class:`asyncio.CancelledError` it did not get from the controller)
  is logged with its traceback (structlog, with ``controller``, ``namespace``,
  ``name`` and ``reconcile_id`` bound in the context) and is a failure
  (requeue with backoff, or none for a terminal one); a queue key that is not a
  :class:`~runtime.reconcile.Request` is logged and dropped. A worker that fails
  anyway is an engine bug: the controller stops and ``start`` raises
  :class:`RuntimeError` (so a manager exits non-zero);
- each reconcile is bounded by ``reconcile_timeout``;
- each pass is one log line: a failure an ``error`` with its traceback, a success a
  ``debug`` line ``reconciled`` (with ``requeue_after`` and ``seconds``), and each
  :func:`runtime.objects.create_or_update` inside it a ``debug`` line saying
  ``created``, ``updated`` or ``unchanged``; at the default ``info`` level of
  :func:`runtime.log.configure` the debug lines are dropped before any processing, and
  the test kit records them (a failing test's manager log shows what each pass did);
- :meth:`Controller.start` waits for its syncing sources (at most
  ``cache_sync_timeout``, then :class:`TimeoutError`), and returns at once if
  ``stop`` is set meanwhile. Then it blocks until ``stop`` is set; no new
  reconcile starts, in-flight ones get ``graceful_shutdown_timeout`` to finish and
  are cancelled after it. Keys still queued are dropped: reconciliation is
  level-based, and whoever runs next relists everything;
- however ``start`` ends (returns, raises, or is cancelled, also during the
  graceful stop), every task the controller made has ended by then: a
  cancellation cancels the in-flight reconciles and waits for them (each further
  cancellation is passed on; a reconcile that swallows them all holds ``start`` up).

Names: a controller's name must be unique in the process (it labels the
metrics); a duplicate is rejected unless ``Options.skip_name_validation``.
Inside ``with names_released():`` names are taken as usual and given back when
the block ends (a test kit builds the same controllers once per test).

Metrics (``controller`` label): ``controller_runtime_reconcile_total{result}``,
``controller_runtime_reconcile_errors_total``,
``controller_runtime_terminal_reconcile_errors_total``,
``controller_runtime_reconcile_time_seconds``, ``controller_runtime_active_workers``,
``controller_runtime_max_concurrent_reconciles``, and the queue's ``workqueue_*``
series with ``controller`` and ``name`` both the controller name.

>>> import asyncio
>>> from runtime import reconcile, source
>>> async def demo():
...     seen = []
...     stop = asyncio.Event()
...     async def hello(request):
...         seen.append(str(request)); stop.set()
...         return reconcile.Result()
...     channel = source.Channel()
...     ctrl = Controller("demo", hello)
...     ctrl.watch(channel)
...     channel.send(reconcile.Request("default", "a"))
...     await ctrl.start(stop)
...     return seen
>>> asyncio.run(demo())
['default/a']
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable, Iterator

from runtime import clock as clock_
from runtime import reconcile
from runtime import source as source_
from runtime._internal import engine
from runtime.workqueue import ratelimiter, ratelimiting

__all__ = ["Controller", "Options", "names_released"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    """How a controller runs. Every field states its default."""

    max_concurrent_reconciles: int = 1
    """Workers reconciling different keys concurrently. Default 1."""

    reconcile_timeout: float | None = 300.0
    """Seconds a single reconcile may take before it is cancelled and retried
    with backoff. ``None`` disables the bound. Default 300 s."""

    graceful_shutdown_timeout: float = 30.0
    """Seconds in-flight reconciles get to finish on stop. Default 30 s."""

    cache_sync_timeout: float = 120.0
    """Seconds to wait for syncing sources before failing start. Default 120 s."""

    rate_limiter: ratelimiter.RateLimiter | None = None
    """Paces retries. Default: :func:`~runtime.workqueue.default_controller_rate_limiter`
    (per key 5 ms -> 1000 s exponential, overall 10 qps burst 100)."""

    clock: clock_.Clock | None = None
    """Time source for the queue and the default rate limiter. Default: real time."""

    skip_name_validation: bool = False
    """Allow a name another controller of this process already has (for tests that
    build the same controller many times; the two then share their metric series).
    Default False: a duplicate name is rejected."""

    def __post_init__(self) -> None:
        if self.max_concurrent_reconciles < 1:
            raise ValueError(
                f"max_concurrent_reconciles must be >= 1, got {self.max_concurrent_reconciles}"
            )
        for field in ("graceful_shutdown_timeout", "cache_sync_timeout"):
            if getattr(self, field) < 0:
                raise ValueError(f"{field} must be >= 0, got {getattr(self, field)}")
        if self.reconcile_timeout is not None and not self.reconcile_timeout > 0:
            raise ValueError(f"reconcile_timeout must be > 0 or None, got {self.reconcile_timeout}")


_used_names: set[str] = set()
"""Names of the controllers built in this process (never released, like controller-runtime's)."""


@contextlib.contextmanager
def names_released() -> Iterator[None]:
    """Give back, when the block ends, the controller names taken inside it."""
    before = set(_used_names)
    try:
        yield
    finally:
        _used_names.intersection_update(before)


ReconcilerLike = reconcile.Reconciler | Callable[[reconcile.Request], Awaitable[reconcile.Result]]


class Controller:
    """Runs ``reconciler`` for keys from its sources (see the module docstring).

    ``name`` labels logs and metrics and names the work queue; it must be unique
    in the process (a second controller with the same name is rejected with
    :class:`ValueError`, unless ``options.skip_name_validation``). ``reconciler``
    is a :class:`~runtime.reconcile.Reconciler` or a plain ``async def``.
    """

    needs_leader_election = True
    """Only the elected leader runs controllers (a manager capability)."""

    def __init__(
        self, name: str, reconciler: ReconcilerLike, *, options: Options | None = None
    ) -> None:
        if not name:
            raise ValueError("a controller needs a name")
        options = options or Options()
        if not isinstance(reconciler, reconcile.Reconciler):
            if not callable(reconciler):
                raise TypeError(f"{reconciler!r} is neither a Reconciler nor an async function")
            reconciler = reconcile.Func(reconciler)
        if not options.skip_name_validation:
            if name in _used_names:
                raise ValueError(
                    f"a controller named {name!r} already exists; names label the metrics "
                    "and logs and must be unique in a process (Options.skip_name_validation "
                    "allows a duplicate, for tests)"
                )
            _used_names.add(name)
        self.name = name
        self.options = options
        self.reconciler = reconciler
        self.queue: ratelimiting.RateLimitingQueue[reconcile.Request] = (
            ratelimiting.RateLimitingQueue(
                name, rate_limiter=options.rate_limiter, clock=options.clock
            )
        )
        self._sources: list[source_.Source] = []
        self._started = False
        self._running = asyncio.Event()

    def watch(self, *sources: source_.Source) -> Controller:
        """Add sources; they are started by :meth:`start`. Returns ``self``."""
        if self._started:
            raise RuntimeError(f"controller {self.name!r} is already started; watch before start")
        for src in sources:
            if not isinstance(src, source_.Source):
                raise TypeError(f"{src!r} is not a Source (it needs async start(queue))")
        self._sources.extend(sources)
        return self

    async def start(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set, then stop gracefully (see the module docstring).

        Cancelling the task that runs ``start`` (also during the graceful stop)
        stops at once: in-flight reconciles are cancelled and awaited, then the
        cancellation propagates.
        """
        if self._started:
            raise RuntimeError(f"controller {self.name!r} was already started")
        self._started = True
        options = self.options
        await engine.Engine(
            self.name,
            self.reconciler,
            self.queue,
            self._sources,
            workers=options.max_concurrent_reconciles,
            reconcile_timeout=options.reconcile_timeout,
            cache_sync_timeout=options.cache_sync_timeout,
            graceful_shutdown_timeout=options.graceful_shutdown_timeout,
            running=self._running,
        ).run(stop)

    async def wait_idle(self) -> None:
        """Return once the workers run (sources started, caches synced) and every request
        queued so far has been reconciled; requests waiting for a delay or a backoff do
        not count. What tests await instead of letting the event loop spin."""
        await self._running.wait()
        await self.queue.wait_idle()
