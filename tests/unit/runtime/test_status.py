from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest
from structlog.testing import capture_logs

from runtime import metrics, status
from runtime.client import errors, resources
from runtime.testing import clock as clock_
from runtime.testing import fake

WIDGET = resources.Resource("test.dev", "v1", "Widget", "widgets")


@pytest.fixture
async def client() -> fake.FakeClient:
    registry = resources.default_registry.copy()
    registry.register(WIDGET)
    c = fake.FakeClient(registry, namespaces=["ns"])
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

    attempts: list[str] = []

    class Always:
        def __getattr__(self, name: str) -> Any:
            return getattr(client, name)

        async def update_status(self, body: dict[str, Any]) -> dict[str, Any]:
            attempts.append(body["metadata"]["resourceVersion"])
            raise errors.Conflict(409, "Conflict", "always stale")

    writer.client = Always()  # type: ignore[assignment]
    reads = client.calls.count(("get", str(WIDGET), ""))
    with pytest.raises(errors.Conflict, match="always stale"):
        await writer.update(obj, {"phase": "X"})
    assert len(attempts) == 3, "exactly max_attempts writes, then the last Conflict"
    # one fresh read before each retry, none before the first attempt
    assert client.calls.count(("get", str(WIDGET), "")) - reads == 2


async def test_one_attempt_means_no_retry_and_no_reread(client: fake.FakeClient) -> None:
    writer = status.StatusWriter(client, max_attempts=1)
    stale = await current(client)
    other = copy.deepcopy(stale)
    other["status"] = {"phase": "SetByOther"}
    await client.update_status(other)
    writes, reads = (
        client.writes(subresource="status"),
        client.calls.count(("get", str(WIDGET), "")),
    )
    with pytest.raises(errors.Conflict):
        await writer.update(stale, {"phase": "Mine"})
    assert client.writes(subresource="status") == writes + 1
    assert client.calls.count(("get", str(WIDGET), "")) == reads


async def test_a_first_write_that_succeeds_is_written_once(client: fake.FakeClient) -> None:
    writer = status.StatusWriter(client)
    writes = client.writes(subresource="status")
    result = await writer.update(await current(client), {"phase": "A"})
    assert (result.outcome, result.writes) == (status.Outcome.WRITTEN, 1)
    assert result.obj["status"] == {"phase": "A"}
    assert client.writes(subresource="status") == writes + 1


async def test_the_given_object_is_not_modified(client: fake.FakeClient) -> None:
    writer = status.StatusWriter(client, stamps={"t": lambda: "now"})
    obj = await current(client)
    snapshot = copy.deepcopy(obj)
    await writer.update(obj, {"phase": "A"})
    assert obj == snapshot


class SchemaServer:
    """The fake API server behind a CRD status schema: it prunes ``extra`` (also inside
    ``conditions``) and defaults ``mode`` to ``"auto"``, as a structural schema does."""

    def __init__(self, client: fake.FakeClient, default: Any = "auto") -> None:
        self.client = client
        self.default = default

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    async def update_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        body = copy.deepcopy(obj)
        st = body.setdefault("status", {})
        st.pop("extra", None)
        for condition in st.get("conditions") or []:
            condition.pop("extra", None)
        st.setdefault("mode", self.default() if callable(self.default) else self.default)
        return await self.client.update_status(body)


def mismatches(field: str) -> float:
    value = metrics.registry.get_sample_value(
        "status_write_mismatch_total", {"kind": "Widget", "field": field}
    )
    return value or 0.0


def stamped(server: Any, **options: Any) -> status.StatusWriter:
    ticks = itertools.count()
    return status.StatusWriter(server, volatile={"lastUpdateTime"},
                               stamps={"lastUpdateTime": lambda: f"T{next(ticks)}"},
                               **options)  # fmt: skip


async def test_a_status_the_server_prunes_and_defaults_is_written_once(
    client: fake.FakeClient,
) -> None:
    writer = stamped(SchemaServer(client))
    before = mismatches("status.extra")
    with capture_logs() as logs:
        for i in range(10):  # an idle controller; each write would wake it again
            desired = {"phase": "Ready", "extra": "x", "conditions": [{"type": "A", "extra": i}]}
            result = await writer.update(await current(client), desired)
    assert client.writes(subresource="status") == 1
    assert result.outcome is status.Outcome.SKIPPED
    warned = sorted((e["kind"], e["field"], e["change"]) for e in logs
                    if e["log_level"] == "warning")  # fmt: skip
    assert warned == [("Widget", "status.conditions[*].extra", "pruned"),
                      ("Widget", "status.extra", "pruned"),
                      ("Widget", "status.mode", "defaulted")]  # fmt: skip
    assert mismatches("status.extra") - before == 1


async def test_real_changes_are_still_written_on_the_servers_terms(
    client: fake.FakeClient,
) -> None:
    writer = stamped(SchemaServer(client))

    async def update(new: dict[str, Any]) -> status.Outcome:
        return (await writer.update(await current(client), new)).outcome

    assert await update({"phase": "A", "extra": 1}) is status.Outcome.WRITTEN
    assert await update({"phase": "A", "extra": 2}) is status.Outcome.SKIPPED
    assert await update({"phase": "B", "extra": 2}) is status.Outcome.WRITTEN
    assert await update({"phase": "B", "mode": "manual"}) is status.Outcome.WRITTEN
    assert (await current(client))["status"]["mode"] == "manual"
    assert await update({"phase": "B", "mode": "manual"}) is status.Outcome.SKIPPED
    # leaving mode out again means the default: the server must be told
    assert await update({"phase": "B"}) is status.Outcome.WRITTEN
    assert (await current(client))["status"]["mode"] == "auto"
    assert await update({"phase": "B"}) is status.Outcome.SKIPPED
    assert client.writes(subresource="status") == 4


async def test_what_one_object_taught_applies_to_the_others_of_its_kind(
    client: fake.FakeClient,
) -> None:
    await client.create({"apiVersion": "test.dev/v1", "kind": "Widget",
                         "metadata": {"name": "w2", "namespace": "ns"}})  # fmt: skip
    server = SchemaServer(client)
    desired = {"phase": "Ready", "extra": "x"}
    for name in ("w", "w2"):
        await stamped(server).update(await client.get(WIDGET, "ns", name), desired)
    writes = client.writes(subresource="status")
    restarted = stamped(server)  # a new process: nothing learned yet
    first = await restarted.update(await client.get(WIDGET, "ns", "w"), desired)
    assert first.outcome is status.Outcome.WRITTEN  # it has to learn once
    second = await restarted.update(await client.get(WIDGET, "ns", "w2"), desired)
    assert second.outcome is status.Outcome.SKIPPED
    assert client.writes(subresource="status") == writes + 1


async def test_a_default_that_differs_per_object_is_left_to_the_server(
    client: fake.FakeClient,
) -> None:
    await client.create({"apiVersion": "test.dev/v1", "kind": "Widget",
                         "metadata": {"name": "w2", "namespace": "ns"}})  # fmt: skip
    serial = itertools.count()
    writer = stamped(SchemaServer(client, default=lambda: f"m{next(serial)}"))
    for _ in range(5):  # e.g. a webhook that fills in a per-object value
        for name in ("w", "w2"):
            await writer.update(await client.get(WIDGET, "ns", name), {"phase": "P"})
    assert client.writes(subresource="status") <= 3


async def test_what_is_learned_is_bounded(client: fake.FakeClient) -> None:
    writer = stamped(SchemaServer(client), max_learned=4)
    for i in range(20):
        await writer.update(await current(client), {"phase": "P", "extra": i, f"k{i}": None,
                                                   "conditions": [{"type": str(i)}]})  # fmt: skip
    assert 0 < len(writer.learned()) <= 4
    assert all(len(entry) == 3 for entry in writer.learned())  # (kind, field, change)


async def test_a_change_the_server_stops_making_is_forgotten(client: fake.FakeClient) -> None:
    server = SchemaServer(client)
    clock = clock_.FakeClock()
    writer = stamped(server, clock=clock, relearn_after=600)
    await writer.update(await current(client), {"phase": "A", "extra": 1})
    assert ("Widget", "status.extra", "pruned") in writer.learned()
    server.update_status = client.update_status  # type: ignore[method-assign]  # schema upgraded
    clock.advance(599)
    still = await writer.update(await current(client), {"phase": "A", "extra": 1})
    assert still.outcome is status.Outcome.SKIPPED  # trusted for a while ...
    clock.advance(2)
    first = await writer.update(await current(client), {"phase": "A", "extra": 1})
    assert first.outcome is status.Outcome.WRITTEN
    assert first.obj["status"]["extra"] == 1
    assert ("Widget", "status.extra", "pruned") not in writer.learned()
    # ... and a write that shows the change is gone forgets it at once
    await writer.update(await current(client), {"phase": "B", "extra": 1})  # learns nothing
    server.update_status = SchemaServer(client).update_status  # type: ignore[method-assign]
    await writer.update(await current(client), {"phase": "C", "extra": 1})
    assert ("Widget", "status.extra", "pruned") in writer.learned()
    server.update_status = client.update_status  # type: ignore[method-assign]
    await writer.update(await current(client), {"phase": "D", "extra": 1})
    assert ("Widget", "status.extra", "pruned") not in writer.learned()
    assert writer.learned() == []  # the default for mode is gone too
    again = await writer.update(await current(client), {"phase": "D", "extra": 1})
    assert again.outcome is status.Outcome.SKIPPED


async def test_each_mismatch_is_counted_and_logged_once(client: fake.FakeClient) -> None:
    writer = stamped(SchemaServer(client))
    before = mismatches("status.extra")
    with capture_logs() as logs:
        for i in range(5):  # real changes: five writes, each one pruned
            await writer.update(await current(client), {"phase": f"P{i}", "extra": i})
    assert client.writes(subresource="status") == 5
    assert mismatches("status.extra") - before == 5
    warned = [e["field"] for e in logs if e["log_level"] == "warning"]
    assert sorted(warned) == ["status.extra", "status.mode"]


class _Latest:
    """A stand-in for the cache: the newest copy the test says there is."""

    def __init__(self, client: fake.FakeClient) -> None:
        self.client = client

    async def get(self, resource: resources.Resource, namespace: str | None, name: str) -> Any:
        return await self.client.get(resource, namespace, name)


async def test_a_newer_copy_of_the_same_generation_is_the_base_no_conflict(
    client: fake.FakeClient,
) -> None:
    async def touch(obj: dict[str, Any], label: str) -> None:
        """Another writer changes the metadata only: same generation, new resourceVersion."""
        changed = copy.deepcopy(obj)
        changed["metadata"]["labels"] = {"touched": label}
        await client.update(changed)

    read = await current(client)  # what the pass read
    await touch(read, "1")
    writer = status.StatusWriter(client, latest=_Latest(client))
    status_calls = client.writes(subresource="status")
    result = await writer.update(read, {"phase": "Ready"})
    assert result.outcome is status.Outcome.WRITTEN
    assert client.writes(subresource="status") == status_calls + 1  # no 409 on the way
    assert (await current(client))["status"] == {"phase": "Ready"}

    # Without the reader, the same stale read costs a 409 (and a GET) first.
    stale = await current(client)
    await touch(stale, "2")
    status_calls = client.writes(subresource="status")
    result = await status.StatusWriter(client).update(stale, {"phase": "Done"})
    assert result.outcome is status.Outcome.CONFLICT_RESOLVED
    assert client.writes(subresource="status") == status_calls + 2


async def test_a_newer_generation_makes_the_status_stale_without_a_request(
    client: fake.FakeClient,
) -> None:
    read = await current(client)
    changed = copy.deepcopy(read)
    changed["spec"]["size"] = 2
    await client.update(changed)
    writes = client.writes(subresource="status")
    writer = status.StatusWriter(client, latest=_Latest(client))
    result = await writer.update(read, {"phase": "Ready"})
    assert result.outcome is status.Outcome.STALE
    assert client.writes(subresource="status") == writes


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
    with capture_logs() as logs:
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
