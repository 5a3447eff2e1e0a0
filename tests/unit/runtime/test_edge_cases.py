"""Edges of the runtime's smaller pieces.

The event recorder's dedupe window, full queue and server-side expiry; a controller whose
workers end before it was stopped; work cancelled from within; a key woken and cancelled
at once; a delayed key brought forward and fired late; a cyclic exception chain; owner
references that belong to others; values a webhook rewrites in a status.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

import pytest
from structlog import testing as log_testing

from runtime import controller, events, metrics, objects, reconcile, source, status
from runtime._internal import aio
from runtime.client import resources
from runtime.testing import clock as fake_clock
from runtime.testing import fake
from runtime.workqueue import delaying, queue
from tests.unit import helpers

EVENTS = resources.Resource("", "v1", "Event", "events")
OBJ = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "c", "namespace": "default", "uid": "u-fp", "resourceVersion": "3"},
}


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def sample(name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


# -- the event recorder ---------------------------------------------------------------------


async def test_a_full_event_queue_drops_the_oldest_and_counts_them() -> None:
    client = fake.FakeClient()
    recorder = events.Recorder(client, "test", options=events.Options(max_pending=3))
    dropped = sample("events_dropped_total", reason="queue_full")
    for i in range(5):
        recorder.event(OBJ, "Normal", f"Step{i}", "done")
    await recorder.flush()
    assert sorted(e["reason"] for e in client.objects(EVENTS)) == ["Step2", "Step3", "Step4"]
    assert sample("events_dropped_total", reason="queue_full") == dropped + 2


async def test_a_repeat_after_the_dedupe_window_creates_a_new_event() -> None:
    client = fake.FakeClient()
    clock = Clock()
    recorder = events.Recorder(
        client, "test", options=events.Options(dedupe_window=10), monotonic=clock
    )
    recorder.event(OBJ, "Warning", "Failed", "boom")
    recorder.event(OBJ, "Warning", "Failed", "boom")
    await recorder.flush()
    clock.t += 11
    recorder.event(OBJ, "Warning", "Failed", "boom")
    await recorder.flush()
    assert sorted(e["count"] for e in client.objects(EVENTS)) == [1, 2]
    assert (client.writes("create"), client.writes("patch")) == (2, 1)


async def test_similar_messages_older_than_the_window_are_not_combined() -> None:
    client = fake.FakeClient()
    clock = Clock()
    recorder = events.Recorder(
        client, "test", options=events.Options(dedupe_window=10, max_similar=2), monotonic=clock
    )
    recorder.event(OBJ, "Warning", "Failed", "one")
    recorder.event(OBJ, "Warning", "Failed", "two")
    await recorder.flush()
    clock.t += 11  # "one" and "two" are forgotten: "three" is the first in a new window
    recorder.event(OBJ, "Warning", "Failed", "three")
    await recorder.flush()
    assert sorted(e["message"] for e in client.objects(EVENTS)) == ["one", "three", "two"]
    # within the window, a third distinct message is combined
    recorder.event(OBJ, "Warning", "Failed", "four")
    recorder.event(OBJ, "Warning", "Failed", "five")
    await recorder.flush()
    combined = [e for e in client.objects(EVENTS) if e["message"].startswith("(combined")]
    assert [e["message"] for e in combined] == ["(combined from similar events): five"]


async def test_an_event_expired_on_the_server_is_created_anew() -> None:
    client = fake.FakeClient()
    recorder = events.Recorder(client, "test")
    recorder.event(OBJ, "Warning", "Failed", "boom")
    await recorder.flush()
    [first] = client.objects(EVENTS)
    await client.delete(EVENTS, "default", first["metadata"]["name"])  # the Event's TTL ran out
    failed = sample("events_write_errors_total", write="patch")
    with log_testing.capture_logs() as logs:
        recorder.event(OBJ, "Warning", "Failed", "boom")  # a patch of the expired Event
        await recorder.flush()
    assert sample("events_write_errors_total", write="patch") == failed + 1
    assert [(e["event"], e["error"]) for e in logs] == [("writing an event failed", "NotFound")]
    assert client.objects(EVENTS) == []
    recorder.event(OBJ, "Warning", "Failed", "boom")  # not another patch of a missing Event
    await recorder.flush()
    [second] = client.objects(EVENTS)
    assert second["count"] == 1
    assert second["metadata"]["name"] != first["metadata"]["name"]


# -- the controller engine ------------------------------------------------------------------


async def test_workers_that_end_before_stop_fail_the_controller() -> None:
    seen: list[str] = []

    async def handler(req: reconcile.Request) -> reconcile.Result:
        seen.append(req.name)
        return reconcile.Result()

    channel = source.Channel()
    ctrl = controller.Controller(
        "fp-workers-end", handler, options=controller.Options(clock=fake_clock.FakeClock())
    )
    ctrl.watch(channel)
    stop = asyncio.Event()
    task = asyncio.create_task(ctrl.start(stop))
    try:
        channel.send(reconcile.Request("ns", "a"))
        await helpers.eventually(lambda: seen, 5, "a reconcile")
        ctrl.queue.shutdown()  # what only a bug would do while the controller runs
        with pytest.raises(RuntimeError, match="ended before stop"):
            await asyncio.wait_for(asyncio.shield(task), 5)
        left = [t for t in asyncio.all_tasks() if t.get_name().startswith("fp-workers-end-")]
        assert [t for t in left if not t.done()] == []
    finally:
        stop.set()
        await asyncio.gather(task, return_exceptions=True)


# -- small helpers --------------------------------------------------------------------------


async def test_work_cancelled_from_within_is_an_error_not_a_stop() -> None:
    async def work() -> None:
        raise asyncio.CancelledError  # e.g. a library cancelling the wrong task

    with pytest.raises(RuntimeError, match="cancelled from within"):
        await asyncio.wait_for(aio.wait_unless_stopped(work(), asyncio.Event(), 5, "w"), 5)


async def test_a_getter_woken_and_cancelled_at_once_passes_the_key_on() -> None:
    q: queue.Queue[str] = queue.Queue()
    first = asyncio.create_task(q.get())
    second = asyncio.create_task(q.get())
    await helpers.eventually(lambda: q.getters == 2, what="both getters waiting")
    q.add("a")  # wakes ``first``...
    first.cancel()  # ...which is cancelled before it could take the key
    assert await asyncio.wait_for(second, 2) == "a", "the key did not wait for a third getter"
    with pytest.raises(asyncio.CancelledError):
        await first


class LateClock:
    """A clock whose timers fire only when the test says, however late."""

    def __init__(self) -> None:
        self.t = 0.0
        self.timers: list[Callable[[], None]] = []

    def now(self) -> float:
        return self.t

    def call_later(self, delay: float, callback: Callable[[], None]) -> LateClock:
        self.timers = [callback]  # only the latest timer is live (the queue re-arms)
        return self

    def cancel(self) -> None:
        self.timers = []


async def test_a_late_timer_adds_a_key_brought_forward_once() -> None:
    clock = LateClock()
    q: delaying.DelayingQueue[str] = delaying.DelayingQueue(clock=clock)
    q.add_after("a", 10)
    q.add_after("a", 7)  # brought forward: the entry for 10 is stale
    q.add_after("b", 11)
    clock.t = 12  # the loop was busy: the timer for 7 fires at 12, with 10 and 11 due too
    [fire] = clock.timers
    fire()
    assert (len(q), q.waiting) == (2, 0)
    assert [await q.get(), await q.get()] == ["a", "b"]


def test_is_terminal_survives_a_cyclic_cause_chain() -> None:
    a, b = RuntimeError("a"), ValueError("b")
    a.__cause__ = b
    b.__cause__ = a
    assert reconcile.is_terminal(a) is False
    group = ExceptionGroup("g", [a, reconcile.TerminalError("c")])
    b.__cause__ = group  # a -> b -> group -> (a, TerminalError)
    assert reconcile.is_terminal(a) is True


def test_a_controller_reference_keeps_other_owners_references() -> None:
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "o", "uid": "u1"}}
    other_ref = {"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "u2"}
    obj: dict[str, Any] = {"metadata": {"ownerReferences": [dict(other_ref)]}}
    objects.set_controller_reference(owner, obj)
    refs = obj["metadata"]["ownerReferences"]
    assert refs[0] == other_ref
    assert [(r["uid"], r.get("controller")) for r in refs] == [("u2", None), ("u1", True)]


# -- the status writer: a server that rewrites values ---------------------------------------

WIDGET = resources.Resource("test.dev", "v1", "Widget", "widgets")


class RewritingServer:
    """The fake API server behind a mutating webhook that rewrites status values of every
    JSON type: a string, a list, a boolean, a whole-number float and an object."""

    def __init__(self, client: fake.FakeClient) -> None:
        self.client = client
        self.rewrite_phase = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    async def update_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        body = copy.deepcopy(obj)
        st = body["status"]
        if self.rewrite_phase and isinstance(st.get("phase"), str):
            st["phase"] = st["phase"].upper()
        if isinstance(st.get("ports"), list):
            st["ports"] = sorted(set(st["ports"]))
        if st.get("ready") is True:
            st["ready"] = "True"
        if st.get("weight") == 2.0:
            st["weight"] = "2"
        if isinstance(st.get("target"), dict):
            st["target"] = f"{st['target']['host']}:80"
        return await self.client.update_status(body)


async def test_values_the_server_rewrites_are_learned_and_compared_on_its_terms() -> None:
    registry = resources.default_registry.copy()
    registry.register(WIDGET)
    client = fake.FakeClient(registry, namespaces=["ns"])
    await client.create({"apiVersion": "test.dev/v1", "kind": "Widget",
                         "metadata": {"name": "w", "namespace": "ns"}})  # fmt: skip
    server = RewritingServer(client)
    writer = status.StatusWriter(server)

    async def update(new: dict[str, Any]) -> status.Outcome:
        return (await writer.update(await client.get(WIDGET, "ns", "w"), new)).outcome

    desired = {"phase": "ready", "ports": [80, 80], "ready": True, "weight": 2.0,
               "target": {"host": "h"}}  # fmt: skip
    with log_testing.capture_logs() as logs:
        assert await update(desired) is status.Outcome.WRITTEN
    assert sorted(writer.learned()) == [
        ("Widget", f"status.{field}", "rewritten")
        for field in ("phase", "ports", "ready", "target", "weight")
    ]
    assert len([e for e in logs if e["log_level"] == "warning"]) == 5
    # the same desired status again: the server would store the same, so nothing is sent
    for _ in range(3):
        assert await update(desired) is status.Outcome.SKIPPED
    assert client.writes(subresource="status") == 1
    # a different value is not the one the server rewrote: it is written
    assert await update({**desired, "phase": "failed"}) is status.Outcome.WRITTEN
    assert (await client.get(WIDGET, "ns", "w"))["status"]["phase"] == "FAILED"
    assert await update({**desired, "ports": [81]}) is status.Outcome.WRITTEN
    phase_rules = [e for e in writer.learned() if e[1] == "status.phase"]
    assert len(phase_rules) == 2, "one per value sent: 'ready' and 'failed'"
    # the webhook stops rewriting the phase: the next write that shows it forgets the
    # rule for the value it sent ('ready'), not the one for 'failed'
    server.rewrite_phase = False
    assert await update({**desired, "extra": 1}) is status.Outcome.WRITTEN
    assert (await client.get(WIDGET, "ns", "w"))["status"]["phase"] == "ready"
    assert [e for e in writer.learned() if e[1] == "status.phase"] == phase_rules[:1]
    assert await update({**desired, "extra": 1}) is status.Outcome.SKIPPED
