from __future__ import annotations

import copy
from typing import Any

import pytest

from runtime import metrics, status
from runtime.client import errors, resources
from runtime.testing import fake

WIDGET = resources.Resource("test.dev", "v1", "Widget", "widgets")


@pytest.fixture
async def client() -> fake.FakeClient:
    registry = resources.default_registry.copy()
    registry.register(WIDGET)
    c = fake.FakeClient(registry)
    await c.create({"apiVersion": "test.dev/v1", "kind": "Widget",
                    "metadata": {"name": "w", "namespace": "ns"}, "spec": {"size": 1}})  # fmt: skip
    return c


def counted(outcome: str) -> float:
    value = metrics.registry.get_sample_value(
        "status_writes_total", {"kind": "Widget", "outcome": outcome}
    )
    return value or 0.0


async def current(client: fake.FakeClient) -> dict[str, Any]:
    return await client.get(WIDGET, "ns", "w")


async def test_a_new_status_is_written_once_then_skipped(client: fake.FakeClient) -> None:
    writer = status.StatusWriter(client, volatile={"lastUpdateTime"},
                                 stamps={"lastUpdateTime": lambda: "T1"})  # fmt: skip
    skipped_before = counted("skipped")
    first = await writer.update(await current(client), {"phase": "Ready", "replicas": 1})
    assert first.outcome is status.Outcome.WRITTEN
    assert first.obj["status"] == {"phase": "Ready", "replicas": 1, "lastUpdateTime": "T1"}
    for _ in range(10):  # an idle controller reconciling again and again
        again = await writer.update(await current(client), {"phase": "Ready", "replicas": 1.0})
        assert again.outcome is status.Outcome.SKIPPED
    assert client.writes(subresource="status") == 1
    assert counted("skipped") - skipped_before == 10


@pytest.mark.parametrize(
    ("old", "new", "same"),
    [
        ({"a": 1}, {"a": 1.0}, True),
        ({"a": 1, "b": None}, {"a": 1}, True),
        ({"x": {"p": 1, "q": 2}}, {"x": {"q": 2, "p": 1}}, True),
        ({"a": 1, "lastUpdateTime": "t1"}, {"a": 1, "lastUpdateTime": "t2"}, True),
        (
            {"apps": [{"healthLastUpdateTime": "t1", "s": "OK"}]},
            {"apps": [{"healthLastUpdateTime": "t2", "s": "OK"}]},
            True,
        ),
        ({"a": 1}, {"a": 2}, False),
        ({"l": [1, 2]}, {"l": [2, 1]}, False),
        ({}, {"a": 0}, False),
    ],
)
def test_semantic_equality(old: dict[str, Any], new: dict[str, Any], same: bool) -> None:
    assert status.equal(old, new, volatile={"lastUpdateTime", "healthLastUpdateTime"}) is same


async def test_stamps_are_only_set_on_a_real_write(client: fake.FakeClient) -> None:
    stamps = iter(["T1", "T2", "T3"])
    writer = status.StatusWriter(client, volatile={"lastUpdateTime"},
                                 stamps={"lastUpdateTime": lambda: next(stamps)})  # fmt: skip
    await writer.update(await current(client), {"phase": "A"})
    await writer.update(await current(client), {"phase": "A"})
    await writer.update(await current(client), {"phase": "B"})
    assert (await current(client))["status"]["lastUpdateTime"] == "T2"


async def test_conflict_on_same_generation_is_resolved(client: fake.FakeClient) -> None:
    writer = status.StatusWriter(client)
    stale = await current(client)
    other = copy.deepcopy(stale)
    other["status"] = {"phase": "SetByOther"}
    await client.update_status(other)  # someone else wrote status: our copy is stale now
    result = await writer.update(stale, {"phase": "Mine"})
    assert result.outcome is status.Outcome.CONFLICT_RESOLVED
    assert (await current(client))["status"] == {"phase": "Mine"}
    assert result.writes == 1


async def test_conflict_after_a_spec_change_reports_stale(client: fake.FakeClient) -> None:
    writer = status.StatusWriter(client)
    stale = await current(client)
    newer = copy.deepcopy(stale)
    newer["spec"]["size"] = 2
    await client.update(newer)  # the spec moved on: generation 2
    result = await writer.update(stale, {"phase": "ComputedForSize1"})
    assert result.outcome is status.Outcome.STALE
    assert result.requeue
    assert "status" not in await current(client), "a status for an old spec is never written"


async def test_conflict_where_the_other_writer_wrote_the_same(client: fake.FakeClient) -> None:
    writer = status.StatusWriter(client)
    stale = await current(client)
    other = copy.deepcopy(stale)
    other["status"] = {"phase": "Same"}
    await client.update_status(other)
    writes = client.writes(subresource="status")
    result = await writer.update(stale, {"phase": "Same"})
    assert result.outcome is status.Outcome.CONFLICT_RESOLVED
    assert client.writes(subresource="status") == writes + 1  # only the failed attempt


async def test_persistent_conflicts_are_bounded(client: fake.FakeClient) -> None:
    writer = status.StatusWriter(client, max_attempts=3)
    obj = await current(client)

    class Always:
        def __getattr__(self, name: str) -> Any:
            return getattr(client, name)

        async def update_status(self, body: dict[str, Any]) -> dict[str, Any]:
            raise errors.Conflict(409, "Conflict", "always stale")

    writer.client = Always()  # type: ignore[assignment]
    with pytest.raises(errors.Conflict):
        await writer.update(obj, {"phase": "X"})


async def test_the_given_object_is_not_modified(client: fake.FakeClient) -> None:
    writer = status.StatusWriter(client, stamps={"t": lambda: "now"})
    obj = await current(client)
    snapshot = copy.deepcopy(obj)
    await writer.update(obj, {"phase": "A"})
    assert obj == snapshot
