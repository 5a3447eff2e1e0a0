from __future__ import annotations

from runtime import events
from runtime.client import resources
from runtime.testing import fake

EVENTS = resources.Resource("", "v1", "Event", "events")
OBJ = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "c", "namespace": "ns", "uid": "u1", "resourceVersion": "3"},
}


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


async def test_repeats_update_one_event() -> None:
    client = fake.FakeClient()
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
    client = fake.FakeClient()
    recorder = events.Recorder(client, "test")
    for i in range(20):
        recorder.event(OBJ, "Warning", "Failed", f"boom {i}")
    await recorder.flush()
    messages = [e["message"] for e in client.objects(EVENTS)]
    assert len(messages) == 11  # 10 distinct, then one combined series
    assert sum(m.startswith("(combined from similar events)") for m in messages) == 1


async def test_spam_filter_caps_writes_per_object_and_refills() -> None:
    client = fake.FakeClient()
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
    client = fake.FakeClient()
    from runtime.client import errors

    client.fail_next["create"] = errors.Forbidden(403, "Forbidden", "events is forbidden")
    recorder = events.Recorder(client, "test")
    recorder.event(OBJ, "Normal", "Created", "ok")
    await recorder.flush()
    assert client.objects(EVENTS) == []
