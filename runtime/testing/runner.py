"""Run a :class:`~runtime.manager.Manager` in the background of a test.

``async with running(manager) as run:`` starts ``manager.start(stop)`` in a task
of its own and returns once the manager is **up**; the body of the ``with`` is
the test, talking to the API server while the manager reconciles; leaving the
block stops the manager and waits for it. The contract:

- **Up** means: the HTTP servers listen, every informer registered before the
  ``with`` has synced, and - with ``leader=True`` (the default) - the manager
  leads (leader election off, or its Lease acquired), so its controllers are
  running. ``leader=False`` returns as soon as the caches synced (a standby
  replica is up then). Nothing is polled: a runnable added to the manager
  marks the moment (the manager starts non-leader runnables right after the
  caches synced, and leader runnables once it leads).
- **Failures are never swallowed.** If the manager fails before it is up, the
  ``with`` statement raises its exception (a cache that cannot sync raises the
  manager's ``TimeoutError`` after ``cache_sync_timeout``); if it is not up
  within ``up_timeout`` seconds, :class:`NotUp`. If it fails while the body runs,
  the failure is raised when the block ends (if the body failed too, the body's
  exception is its ``__context__``: both are shown); :meth:`Running.check`
  raises it earlier, on demand.
- **Stopping** sets the manager's ``stop`` event, which runs its graceful
  shutdown (see :mod:`runtime.manager`); if the task has not ended within
  ``graceful_shutdown_timeout`` plus ``stop_grace`` seconds it is cancelled and
  :class:`NotStopped` is raised: a manager that does not stop is a bug the
  test should show. Nothing is left running after the block either way.
- **Logs**: every structlog line logged by the manager's task and the tasks it
  starts (the controllers, their reconciles, the cache) - and only those, not
  the test body's - is recorded in :attr:`Running.log` as it is emitted, whatever
  structlog renders it as elsewhere. The record is taken by a processor put at the
  front of structlog's configured chain, so it sees each event as logged
  (``event``, the logger's method name as the level, bound and contextvar keys,
  and the traceback of a logged exception); an event that the wrapper class
  filters out by level is not recorded. The
  pytest plugin (:mod:`runtime.testing.pytest_plugin`) attaches it to the report
  of a failing test.

The manager must not have been started; it is started once (a
:class:`~runtime.manager.Manager` is not restartable).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import datetime
import sys
import traceback
from collections.abc import AsyncIterator, MutableMapping
from typing import Any

import structlog

from runtime import manager as manager_

__all__ = ["LogRecord", "NotStopped", "NotUp", "Running", "running"]

_STOP_GRACE = 5.0
"""Seconds past the manager's own shutdown budget before its task is cancelled."""


class NotUp(TimeoutError):
    """The manager did not get up within the runner's ``up_timeout``."""


class NotStopped(RuntimeError):
    """The manager's task did not end within its shutdown budget (it was cancelled)."""


@dataclasses.dataclass(frozen=True, slots=True)
class LogRecord:
    """One structlog event of the manager, as it was logged."""

    time: datetime.datetime
    level: str
    event: str
    fields: dict[str, Any]

    def __str__(self) -> str:
        fields = dict(self.fields)
        exc = fields.pop("exc_info", None)
        pairs = " ".join(f"{k}={v!r}" for k, v in sorted(fields.items()))
        text = f"{self.time.isoformat(timespec='milliseconds')} [{self.level:<7}] {self.event}"
        text = f"{text} {pairs}" if pairs else text
        if isinstance(exc, BaseException):
            text += "\n" + "".join(traceback.format_exception(exc)).rstrip()
        return text


class Running:
    """A manager running in the background (see the module docstring)."""

    def __init__(self, manager: manager_.Manager, log: list[LogRecord] | None = None) -> None:
        self.manager = manager
        self.log: list[LogRecord] = log if log is not None else []
        """The manager's structlog events so far, oldest first."""
        self._task: asyncio.Task[None] | None = None

    def log_text(self) -> str:
        """:attr:`log` one line per event."""
        return "\n".join(str(record) for record in self.log)

    def check(self) -> None:
        """Raise the manager's failure if its task has ended on its own."""
        task = self._task
        if task is None or not task.done():
            return
        if task.cancelled():
            raise RuntimeError("the manager's task was cancelled")
        if (exc := task.exception()) is not None:
            raise exc
        raise RuntimeError("the manager stopped before it was asked to")


class _UpMarker:
    """A runnable whose start tells the runner that the manager got that far."""

    def __init__(self, needs_leader_election: bool) -> None:
        self.needs_leader_election = needs_leader_election
        self.up = asyncio.Event()

    async def start(self, stop: asyncio.Event) -> None:
        self.up.set()
        await stop.wait()

    def __repr__(self) -> str:
        return f"runner-up-marker(leader={self.needs_leader_election})"


_recording: contextvars.ContextVar[list[LogRecord] | None] = contextvars.ContextVar(
    "runtime.testing.runner.recording", default=None
)


def _record(logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> Any:
    """structlog processor: append the event to the running manager's log, if any."""
    sink = _recording.get()
    if sink is not None:
        fields = {**structlog.contextvars.get_contextvars(), **event_dict}
        event = str(fields.pop("event", ""))
        if fields.get("exc_info") is True:  # log.exception(...): the one being handled
            fields["exc_info"] = sys.exc_info()[1]
        sink.append(LogRecord(datetime.datetime.now(datetime.UTC), method_name, event, fields))
    return event_dict


def _install_recorder() -> None:
    """Put :func:`_record` first in structlog's processor chain (once).

    The configured list is changed in place, so loggers that were cached on
    first use (``cache_logger_on_first_use``) record too."""
    processors = structlog.get_config()["processors"]
    if _record in processors:
        return
    if isinstance(processors, list):
        processors.insert(0, _record)
    else:  # configured with another sequence: configure a list
        structlog.configure(processors=[_record, *processors])


@contextlib.asynccontextmanager
async def running(
    manager: manager_.Manager,
    *,
    leader: bool = True,
    up_timeout: float = 60.0,
    stop_grace: float = _STOP_GRACE,
    log: list[LogRecord] | None = None,
) -> AsyncIterator[Running]:
    """Start ``manager`` in the background, wait until it is up, stop it on exit.

    ``leader``: wait until it leads (default) or only until its caches synced.
    ``up_timeout``: seconds to get up (default 60). ``stop_grace``: seconds past the
    manager's ``graceful_shutdown_timeout`` before its task is cancelled (default 5).
    ``log``: the list to record into (:attr:`Running.log`; default a new one), so a
    caller holds the log also when the manager fails before it is up."""
    run = Running(manager, log)
    marker = _UpMarker(needs_leader_election=leader)
    manager.add(marker)
    _install_recorder()
    stop = asyncio.Event()
    context = contextvars.copy_context()
    context.run(_recording.set, run.log)
    task = asyncio.create_task(manager.start(stop), name="runner-manager", context=context)
    run._task = task
    propagating: BaseException | None = None
    try:
        await _wait_up(task, marker, up_timeout)
        yield run
    except BaseException as exc:
        propagating = exc
        raise
    finally:
        error = await _stop(run, task, stop, stop_grace)
        if error is not None and error is not propagating:
            # Raised from `finally`: the body's exception, if any, is chained as context.
            raise error


async def _wait_up(task: asyncio.Task[None], marker: _UpMarker, within: float) -> None:
    up = asyncio.create_task(marker.up.wait(), name="runner-wait-up")
    try:
        await asyncio.wait([task, up], timeout=within, return_when=asyncio.FIRST_COMPLETED)
    finally:
        up.cancel()
        await asyncio.gather(up, return_exceptions=True)
    if marker.up.is_set():
        return
    if task.done():
        task.result()  # the manager's own failure
        raise RuntimeError("the manager returned before it was up")
    raise NotUp(f"the manager was not up within {within} s")


async def _stop(
    run: Running, task: asyncio.Task[None], stop: asyncio.Event, grace: float
) -> BaseException | None:
    """Stop the manager; its failure (or :class:`NotStopped`), or None."""
    stop.set()
    budget = run.manager.options.graceful_shutdown_timeout + grace
    done, _ = await asyncio.wait([task], timeout=budget)
    if not done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return NotStopped(f"the manager did not stop within {budget} s")
    if task.cancelled():
        return RuntimeError("the manager's task was cancelled")
    return task.exception()
