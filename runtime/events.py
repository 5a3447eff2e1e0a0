"""Kubernetes Events, recorded without ever becoming a storm.

``recorder.event(obj, "Warning", "ServeConfigInvalid", "serveConfigV2 is not YAML: ...")``
returns at once; a background task (the recorder is a runnable the manager
starts) writes Events, which ``kubectl describe`` shows: core ``v1`` Events by
default (client-go's ``tools/record``), or ``events.k8s.io/v1`` Events with
``Options(api="events.k8s.io/v1")`` (client-go's ``tools/events``): then the
``component`` is the Event's ``reportingController``, ``reporting_instance`` its
``reportingInstance``, ``action`` (default: the reason) says what the controller did,
the message is the ``note``, and a repeat updates the Event's ``series`` (``count``
from 2, ``lastObservedTime``) instead of ``count``/``lastTimestamp``. Either way:

- **Deduplication**: the same (object, type, reason, message) again within
  ``dedupe_window`` (10 min) increments ``count`` and ``lastTimestamp`` of the
  existing Event (one PATCH) instead of creating a new one.
- **Aggregation**: more than ``max_similar`` (10) different messages with the
  same (object, type, reason) within the window are folded into one Event whose
  message says "(combined from similar events)".
- **Spam filter**: each object may cause ``burst`` (25) writes, refilled at one
  per ``refill_seconds`` (300 s); beyond that, events are dropped (and counted in
  ``events_dropped_total``). A controller stuck in a hot loop therefore costs a
  handful of API writes, not thousands.
- The queue of pending events is bounded (``max_pending``, 1000); the oldest are
  dropped first.
- **Recording never fails anything**: :meth:`Recorder.event` never raises, and a
  write that fails for any reason (an API error, a dropped connection, a bug in a
  transport) is logged, counted in ``events_write_errors_total{write}``, and
  skipped; the recorder goes on with the next Event.
- **Bounded memory**: the per-object state behind deduplication, aggregation and
  the spam filter is kept for the ``max_objects`` (4096) most recently seen
  objects (least recently used forgotten first).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import os
import socket
import time
from collections.abc import Callable
from typing import Any, Literal, Protocol

import structlog

from runtime import clock, metrics
from runtime._internal import aio
from runtime.client import errors, resources

__all__ = ["EVENTS", "EVENTS_V1", "Options", "Recorder"]

EVENTS = resources.Resource("", "v1", "Event", "events")
"""Core ``v1`` Events."""
EVENTS_V1 = resources.Resource("events.k8s.io", "v1", "Event", "events")
"""``events.k8s.io/v1`` Events."""
EventType = Literal["Normal", "Warning"]

_written = metrics.Family(
    "events_written_total", "Kubernetes Events written, by type and write (create or patch)",
    "counter", ("type", "write"),
)  # fmt: skip
_failed = metrics.Family(
    "events_write_errors_total", "Event writes that failed, by write (create or patch)",
    "counter", ("write",),
)  # fmt: skip
_dropped = metrics.Family(
    "events_dropped_total", "Events dropped by the spam filter or a full queue", "counter",
    ("reason",),
)  # fmt: skip


class EventClient(Protocol):
    async def create(
        self, obj: dict[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]: ...

    async def patch(
        self, resource: resources.Resource, namespace: str | None, name: str, patch: Any, *,
        patch_type: Any = "merge", subresource: str | None = None, force: bool = False,
    ) -> dict[str, Any]: ...  # fmt: skip


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    """Recorder limits. Every field states its default."""

    dedupe_window: float = 600.0
    """Seconds within which repeats update one Event. Default 600."""

    max_similar: int = 10
    """Distinct messages per (object, type, reason) before they are combined. Default 10."""

    burst: int = 25
    """Writes an object may cause at once. Default 25."""

    refill_seconds: float = 300.0
    """Seconds per refilled write token. Default 300."""

    max_pending: int = 1000
    """Events waiting to be written before the oldest are dropped. Default 1000."""

    max_objects: int = 4096
    """Objects whose deduplication and spam-filter state is kept (least recently
    used forgotten first). Default 4096."""

    api: Literal["v1", "events.k8s.io/v1"] = "v1"
    """Which Event API to write (see the module docstring). Default core ``v1``."""

    reporting_instance: str = dataclasses.field(
        default_factory=lambda: os.environ.get("POD_NAME") or socket.gethostname()
    )
    """``events.k8s.io/v1``'s ``reportingInstance``. Default ``$POD_NAME``, else the
    host name."""


@dataclasses.dataclass
class _Series:
    name: str
    namespace: str
    count: int
    last_seen: float


@dataclasses.dataclass
class _ObjectState:
    """What the recorder remembers about one involved object."""

    tokens: float
    refilled_at: float
    series: dict[tuple[str, str, str], _Series] = dataclasses.field(default_factory=dict)
    """(type, reason, message or "(combined)") -> the Event written for it."""
    similar: dict[tuple[str, str], dict[str, float]] = dataclasses.field(default_factory=dict)
    """(type, reason) -> message -> when last seen."""


class Recorder:
    """Records Events for objects (see the module docstring)."""

    needs_leader_election = False

    def __init__(
        self,
        client: EventClient,
        component: str,
        *,
        options: Options | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.component = component
        self.options = options or Options()
        self._now = monotonic
        self._pending: collections.deque[tuple[dict[str, Any], str, str, str, str]] = (
            collections.deque(maxlen=self.options.max_pending)
        )
        self._wakeup = asyncio.Event()
        self._objects: collections.OrderedDict[str, _ObjectState] = collections.OrderedDict()
        self.log = structlog.get_logger("runtime.events").bind(component=component)

    def event(
        self,
        obj: dict[str, Any],
        type_: EventType,
        reason: str,
        message: str,
        *,
        action: str | None = None,
    ) -> None:
        """Queue an Event about ``obj``; never blocks, never raises. ``action``: what
        the controller did (``events.k8s.io/v1``; default the reason)."""
        if len(self._pending) == self._pending.maxlen:
            _dropped.counter("queue_full").inc()
        self._pending.append((obj, type_, reason, message[:1024], action or reason))
        self._wakeup.set()

    async def start(self, stop: asyncio.Event) -> None:
        """Write queued Events until ``stop`` is set (then flush what is queued)."""
        while True:
            await self.flush()
            if stop.is_set():
                return
            self._wakeup.clear()
            await aio.wait_first(self._wakeup, stop)

    async def flush(self) -> None:
        """Write everything queued now (for tests and shutdown)."""
        while self._pending:
            await self._write(*self._pending.popleft())

    def tracked_objects(self) -> int:
        """How many objects' state the recorder holds (at most ``max_objects``)."""
        return len(self._objects)

    def _state(self, uid: str, now: float) -> _ObjectState:
        state = self._objects.get(uid)
        if state is None:
            state = self._objects[uid] = _ObjectState(float(self.options.burst), now)
            while len(self._objects) > self.options.max_objects:
                self._objects.popitem(last=False)
        else:
            self._objects.move_to_end(uid)
        return state

    def _allow(self, state: _ObjectState, now: float) -> bool:
        opts = self.options
        state.tokens = min(
            float(opts.burst), state.tokens + (now - state.refilled_at) / opts.refill_seconds
        )
        state.refilled_at = now
        if state.tokens < 1:
            return False
        state.tokens -= 1
        return True

    async def _write(
        self, obj: dict[str, Any], type_: str, reason: str, message: str, action: str
    ) -> None:
        write = "create"
        try:
            meta = obj.get("metadata") or {}
            uid = meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"
            namespace = meta.get("namespace") or "default"
            now = self._now()
            window = self.options.dedupe_window
            state = self._state(uid, now)
            similar = state.similar.setdefault((type_, reason), {})
            for old, seen in list(similar.items()):
                if now - seen > window:
                    del similar[old]
            similar[message] = now
            if len(similar) > self.options.max_similar:
                message = f"(combined from similar events): {message}"
                key = (type_, reason, "(combined)")
            else:
                key = (type_, reason, message)
            series = state.series.get(key)
            if series is not None and now - series.last_seen > window:
                series = None
            if not self._allow(state, now):
                _dropped.counter("spam_filter").inc()
                return
            v1 = self.options.api == "v1"
            if series is not None:
                write = "patch"
                series.count += 1
                series.last_seen = now
                patch: dict[str, Any] = (
                    {"count": series.count, "lastTimestamp": clock.rfc3339(), "message": message}
                    if v1
                    else {"series": {"count": series.count, "lastObservedTime": clock.micro_time()},
                          "note": message}
                )  # fmt: skip
                await self.client.patch(
                    EVENTS if v1 else EVENTS_V1, series.namespace, series.name, patch
                )
                _written.counter(type_, "patch").inc()
                return
            regarding = {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            }
            metadata = {
                "name": f"{meta.get('name', 'object')}.{time.time_ns():x}",
                "namespace": namespace,
            }
            if v1:
                stamp = clock.rfc3339()
                body: dict[str, Any] = {
                    "apiVersion": "v1", "kind": "Event", "metadata": metadata,
                    "involvedObject": regarding, "type": type_, "reason": reason,
                    "message": message, "count": 1, "firstTimestamp": stamp,
                    "lastTimestamp": stamp, "source": {"component": self.component},
                    "reportingComponent": self.component,
                }  # fmt: skip
            else:
                body = {
                    "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": metadata,
                    "eventTime": clock.micro_time(), "reportingController": self.component,
                    "reportingInstance": self.options.reporting_instance, "action": action,
                    "reason": reason, "regarding": regarding, "note": message, "type": type_,
                }  # fmt: skip
            created = await self.client.create(body, namespace=namespace)
            _written.counter(type_, "create").inc()
            state.series[key] = _Series(created["metadata"]["name"], namespace, 1, now)
        except errors.NotFound:
            if write == "patch":  # the Event expired server-side; next time create anew
                state.series.pop(key, None)
            _failed.counter(write).inc()
            self.log.warning("writing an event failed", reason=reason, error="NotFound")
        except Exception as exc:  # any failure: recording events must never stop anything
            _failed.counter(write).inc()
            self.log.warning("writing an event failed", reason=reason, error=repr(exc))
