from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import structlog
from structlog import testing as log_testing

from runtime import events, metrics
from runtime.client import resources
from runtime.testing import fake
from tests.unit import helpers

EVENTS = resources.Resource("", "v1", "Event", "events")
OBJ = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "c", "namespace": "default", "uid": "u1", "resourceVersion": "3"},
}


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


async def test_repeats_update_one_event() -> None:
    client = fake.FakeClient(namespaces=["ns"])
    recorder = events.Recorder(client, "test")
    for _ in range(5):
        recorder.event(OBJ, "Warning", "Failed", "boom")
    await recorder.flush()
    [event] = client.objects(EVENTS)
    assert event["count"] == 5
    assert event["involvedObject"]["uid"] == "u1"
    assert event["source"] == {"component": "test"}
    assert client.writes("create") == 1
    assert client.writes("patch") == 4


async def test_many_different_messages_are_combined() -> None:
    client = fake.FakeClient(namespaces=["ns"])
    recorder = events.Recorder(client, "test")
    for i in range(20):
        recorder.event(OBJ, "Warning", "Failed", f"boom {i}")
    await recorder.flush()
    messages = [e["message"] for e in client.objects(EVENTS)]
    assert len(messages) == 11  # 10 distinct, then one combined series
    assert sum(m.startswith("(combined from similar events)") for m in messages) == 1


async def test_spam_filter_caps_writes_per_object_and_refills() -> None:
    client = fake.FakeClient(namespaces=["ns"])
    clock = Clock()
    recorder = events.Recorder(client, "test", monotonic=clock)
    for _ in range(100):
        recorder.event(OBJ, "Warning", "Failed", "boom")
    await recorder.flush()
    assert client.writes() == 25
    clock.t += 300  # one token back
    recorder.event(OBJ, "Warning", "Failed", "boom")
    recorder.event(OBJ, "Warning", "Failed", "boom")
    await recorder.flush()
    assert client.writes() == 26


async def test_write_failures_are_logged_not_raised() -> None:
    client = fake.FakeClient(namespaces=["ns"])
    from runtime.client import errors

    client.fail_next["create"] = errors.Forbidden(403, "Forbidden", "events is forbidden")
    recorder = events.Recorder(client, "test")
    recorder.event(OBJ, "Normal", "Created", "ok")
    await recorder.flush()
    assert client.objects(EVENTS) == []


class _Flaky:
    """A client whose writes raise what a dropped connection raises, then work again."""

    def __init__(self, failures: list[BaseException]) -> None:
        self.inner = fake.FakeClient(namespaces=["ns"])
        self.failures = failures

    async def create(self, obj: dict[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        if self.failures:
            raise self.failures.pop(0)
        return await self.inner.create(obj, namespace=namespace)

    async def patch(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if self.failures:
            raise self.failures.pop(0)
        return await self.inner.patch(*args, **kwargs)


def _failed(reason: str) -> float:
    return events._failed.counter(reason).get()


async def test_any_write_failure_is_counted_logged_and_the_recorder_goes_on() -> None:
    failures: list[BaseException] = [
        aiohttp.ServerDisconnectedError(),
        aiohttp.ClientPayloadError("truncated"),
        RuntimeError("a bug in a transport"),
    ]
    client = _Flaky(failures)
    recorder = events.Recorder(client, "test")  # type: ignore[arg-type]
    before = _failed("create")
    stop = asyncio.Event()
    task = asyncio.create_task(recorder.start(stop))
    with structlog.testing.capture_logs() as logs:
        for i in range(3):
            recorder.event(OBJ, "Warning", "Failed", f"lost {i}")
            await helpers.eventually(
                lambda i=i: _failed("create") - before == i + 1, what=f"failure {i} counted"
            )
        recorder.event(OBJ, "Normal", "Created", "after the failures")
        await helpers.eventually(lambda: client.inner.objects(EVENTS), what="the last event")
        assert not task.done(), "the recorder died on a failed write"
        stop.set()
        await asyncio.wait_for(task, 5)
    assert _failed("create") - before == 3
    assert [e["message"] for e in client.inner.objects(EVENTS)] == ["after the failures"]
    failed_lines = [entry for entry in logs if entry["event"] == "writing an event failed"]
    assert len(failed_lines) == 3
    assert "ServerDisconnectedError" in failed_lines[0]["error"]


async def test_per_object_state_is_bounded() -> None:
    client = fake.FakeClient(namespaces=["ns"])
    recorder = events.Recorder(client, "test", options=events.Options(max_objects=50))
    for i in range(200):
        obj = {**OBJ, "metadata": {**OBJ["metadata"], "uid": f"u{i}", "name": f"c{i}"}}
        recorder.event(obj, "Warning", "Failed", "boom")
    await recorder.flush()
    assert len(client.objects(EVENTS)) == 200
    assert recorder.tracked_objects() <= 50
    # A recent object still deduplicates into its existing Event.
    last = {**OBJ, "metadata": {**OBJ["metadata"], "uid": "u199", "name": "c199"}}
    recorder.event(last, "Warning", "Failed", "boom")
    await recorder.flush()
    assert len(client.objects(EVENTS)) == 200
    assert events.Options().max_objects == 4096


V1 = events.Options(api="events.k8s.io/v1", reporting_instance="manager-0")


async def test_events_k8s_io_v1_events_carry_action_controller_and_a_series() -> None:
    client = fake.FakeClient(namespaces=["ns"])
    recorder = events.Recorder(client, "raycluster-controller", options=V1)
    recorder.event(OBJ, "Warning", "FailedToCreateHeadPod", "quota", action="Create")
    recorder.event(OBJ, "Normal", "Reconciled", "fine")  # no action: the reason
    await recorder.flush()
    assert client.objects(EVENTS) == [], "no core v1 Event"
    first, second = sorted(client.objects(events.EVENTS_V1), key=lambda e: e["reason"])
    assert first["apiVersion"] == "events.k8s.io/v1"
    assert (first["reason"], first["action"], first["note"], first["type"]) == (
        "FailedToCreateHeadPod", "Create", "quota", "Warning")  # fmt: skip
    assert (first["reportingController"], first["reportingInstance"]) == (
        "raycluster-controller", "manager-0")  # fmt: skip
    assert first["regarding"]["uid"] == "u1"
    assert first["eventTime"].endswith("Z")
    assert "." in first["eventTime"], "a MicroTime"
    assert "series" not in first
    assert "count" not in first
    assert second["action"] == "Reconciled"
    for _ in range(3):
        recorder.event(OBJ, "Warning", "FailedToCreateHeadPod", "quota", action="Create")
    await recorder.flush()
    [repeated] = [e for e in client.objects(events.EVENTS_V1) if e["action"] == "Create"]
    assert repeated["series"]["count"] == 4, "the first repeat starts the series at 2"
    assert repeated["series"]["lastObservedTime"] >= repeated["eventTime"]
    assert client.writes("create") == 2
    assert client.writes("patch") == 3


def test_the_reporting_instance_defaults_to_the_pod_name(monkeypatch: Any) -> None:
    monkeypatch.setenv("POD_NAME", "rayservice-operator-7c9f-abcde")
    assert events.Options().reporting_instance == "rayservice-operator-7c9f-abcde"
    monkeypatch.delenv("POD_NAME")
    assert events.Options().reporting_instance  # the host name


def sample(name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


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
