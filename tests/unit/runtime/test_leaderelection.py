from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import aiohttp
import pytest
from structlog import testing as log_testing

from runtime import leaderelection, metrics
from runtime.client import errors
from runtime.testing import fake
from tests.unit import helpers

LEASES = leaderelection.LEASES


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def options(identity: str, name: str = "lock", **kw: float) -> leaderelection.Options:
    defaults = {"lease_duration": 1, "renew_deadline": 0.4, "retry_period": 0.05}
    return leaderelection.Options(
        name=name, namespace="default", identity=identity, **{**defaults, **kw}
    )


async def test_first_candidate_creates_and_holds_the_lease() -> None:
    client = fake.FakeClient()
    elector = leaderelection.LeaderElector(client, options("a"))
    stop = asyncio.Event()
    task = asyncio.create_task(elector.run(stop))
    await asyncio.wait_for(elector.elected.wait(), 2)
    lease = await client.get(LEASES, "default", "lock")
    assert lease["spec"]["holderIdentity"] == "a"
    assert lease["spec"]["leaseTransitions"] == 0
    stop.set()
    await task
    released = await client.get(LEASES, "default", "lock")
    assert released["spec"].get("holderIdentity") is None
    assert released["spec"]["leaseDurationSeconds"] == 1


async def test_standby_waits_while_the_holder_renews_then_takes_over() -> None:
    client = fake.FakeClient()
    a = leaderelection.LeaderElector(client, options("a", lease_duration=1.0, renew_deadline=0.5))
    b = leaderelection.LeaderElector(client, options("b", lease_duration=1.0, renew_deadline=0.5))
    stop_a, stop_b = asyncio.Event(), asyncio.Event()
    task_a = asyncio.create_task(a.run(stop_a))
    await asyncio.wait_for(a.elected.wait(), 2)
    reads: list[float] = []  # when b read the Lease (loop time)
    b.client = _Reading(client, reads)  # type: ignore[assignment]
    task_b = asyncio.create_task(b.run(stop_b))

    def b_looked_after_a_lease_had_passed() -> bool:
        # b's first read started its lease_duration countdown; a read more than a
        # lease (plus a retry) later is one where b would take over an unrenewed lease.
        return len(reads) >= 2 and reads[-1] - reads[0] > 1.0 + 0.05

    await helpers.eventually(b_looked_after_a_lease_had_passed, 5, "b reading the lease")
    assert not b.elected.is_set(), "a keeps renewing, so b must wait"
    assert (await client.get(LEASES, "default", "lock"))["spec"]["holderIdentity"] == "a"
    task_a.cancel()  # a dies without releasing (like SIGKILL)
    await asyncio.gather(task_a, return_exceptions=True)
    await asyncio.wait_for(b.elected.wait(), 3)
    lease = await client.get(LEASES, "default", "lock")
    assert lease["spec"]["holderIdentity"] == "b"
    assert lease["spec"]["leaseTransitions"] == 1
    stop_b.set()
    await task_b


class _Reading:
    """The fake client, noting the loop time of each ``get`` (a Lease read)."""

    def __init__(self, client: fake.FakeClient, reads: list[float]) -> None:
        self._client, self._reads = client, reads

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def get(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self._reads.append(asyncio.get_running_loop().time())
        return await self._client.get(*args, **kwargs)


async def test_expiry_is_judged_by_our_clock_not_the_holders_timestamps() -> None:
    client = fake.FakeClient()
    await client.create({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "lock", "namespace": "default"},
        # renewTime far in the past by the holder's (skewed) clock
        "spec": {"holderIdentity": "other", "leaseDurationSeconds": 15,
                 "renewTime": "2000-01-01T00:00:00.000000Z"},
    })  # fmt: skip
    clock = Clock()
    elector = leaderelection.LeaderElector(client, options("me"), monotonic=clock)
    assert not await elector._try_acquire_or_renew(), "first sight: wait a full lease"
    clock.t += 14
    assert not await elector._try_acquire_or_renew()
    clock.t += 2
    assert await elector._try_acquire_or_renew()


async def test_leadership_is_lost_when_renewal_fails_past_the_deadline() -> None:
    client = fake.FakeClient()
    elector = leaderelection.LeaderElector(client, options("a"))
    stop = asyncio.Event()
    task = asyncio.create_task(elector.run(stop))
    await asyncio.wait_for(elector.elected.wait(), 2)

    async def broken(*args: object, **kwargs: object) -> dict[str, object]:
        raise errors.ServerError(503, "ServiceUnavailable", "etcd is down")

    client.get = broken  # type: ignore[method-assign]
    await asyncio.wait_for(task, 3)
    assert elector.lost
    assert not elector.is_leader


def test_timings_are_validated() -> None:
    with pytest.raises(ValueError, match="lease_duration > renew_deadline"):
        leaderelection.Options(name="x", lease_duration=5, renew_deadline=10)


def test_lease_durations_must_be_whole_seconds() -> None:
    # leaseDurationSeconds is an integer in the API: 1.5 used to be written as 1.
    with pytest.raises(ValueError, match="whole number of seconds"):
        leaderelection.Options(name="x", lease_duration=1.5, renew_deadline=1, retry_period=0.2)
    assert leaderelection.Options(name="x", namespace="n", lease_duration=15.0).lease_duration == 15


def test_the_namespace_defaults_to_the_pods(tmp_path: pathlib.Path) -> None:
    sa_file = tmp_path / "namespace"
    default = leaderelection.default_namespace
    assert default({"POD_NAMESPACE": "ops"}, sa_file) == "ops"
    assert default({}, sa_file) == "default", "out of cluster"
    sa_file.write_text("from-sa\n")
    assert default({}, sa_file) == "from-sa"
    assert default({"POD_NAMESPACE": "ops"}, sa_file) == "ops"
    assert default({"POD_NAMESPACE": ""}, sa_file) == "from-sa"


def test_options_namespace_follows_pod_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "operator-ns")
    assert leaderelection.Options(name="x").namespace == "operator-ns"


def error_count(name: str, operation: str, reason: str) -> float:
    value = metrics.registry.get_sample_value(
        "leader_election_errors_total", {"name": name, "operation": operation, "reason": reason}
    )
    return value or 0.0


async def test_a_forbidden_lease_is_an_error_on_every_attempt_and_counted() -> None:
    client = fake.FakeClient()

    async def forbidden(*args: object, **kwargs: object) -> dict[str, object]:
        raise errors.Forbidden(
            403, "Forbidden", 'leases.coordination.k8s.io "forbidden-lock" is forbidden'
        )

    client.get = forbidden  # type: ignore[method-assign]
    elector = leaderelection.LeaderElector(client, options("a", name="forbidden-lock"))
    stop = asyncio.Event()
    with log_testing.capture_logs() as logs:
        task = asyncio.create_task(elector.run(stop))
        await helpers.eventually(lambda: error_count("forbidden-lock", "get", "Forbidden") >= 3)
        stop.set()
        await asyncio.wait_for(task, 2)
    failures = [e for e in logs if "forbidden" in str(e.get("error", "")).lower()]
    assert len(failures) >= 3, logs
    assert all(e["log_level"] == "error" for e in failures), failures
    assert all(e.get("reason") == "Forbidden" for e in failures), failures
    assert not elector.elected.is_set()


@pytest.mark.parametrize(
    "error",
    [
        aiohttp.ServerDisconnectedError(),
        aiohttp.ClientPayloadError("Response payload is not completed"),
        TimeoutError(),
        RuntimeError("something nobody expected"),
    ],
    ids=["ServerDisconnectedError", "ClientPayloadError", "TimeoutError", "RuntimeError"],
)
async def test_any_exception_from_a_renewal_is_a_failed_attempt(error: Exception) -> None:
    client = fake.FakeClient()
    name = f"renew-{type(error).__name__}"
    # A generous renew deadline: this is about the exception, not timing (with 0.4 s, a
    # loop stalled by a loaded machine lost the lease and failed the test now and then).
    elector = leaderelection.LeaderElector(
        client, options("a", name=name, lease_duration=10, renew_deadline=5)
    )
    stop = asyncio.Event()
    task = asyncio.create_task(elector.run(stop))
    await asyncio.wait_for(elector.elected.wait(), 2)
    client.fail_next["get"] = error
    await helpers.eventually(lambda: error_count(name, "get", type(error).__name__) >= 1)
    before = client.writes("update")
    await helpers.eventually(lambda: client.writes("update") > before + 2)  # renewing again
    assert not task.done(), task
    assert elector.is_leader
    lease = await client.get(LEASES, "default", name)
    assert lease["spec"]["holderIdentity"] == "a"
    stop.set()
    await asyncio.wait_for(task, 2)


async def test_a_timeout_on_the_lease_create_is_retried() -> None:
    client = fake.FakeClient()
    client.fail_next["create"] = TimeoutError()
    elector = leaderelection.LeaderElector(client, options("a", name="create-timeout"))
    stop = asyncio.Event()
    task = asyncio.create_task(elector.run(stop))
    try:
        await asyncio.wait_for(elector.elected.wait(), 2)
    finally:
        stop.set()
        await asyncio.wait_for(task, 2)
    assert error_count("create-timeout", "create", "TimeoutError") == 1


async def test_a_lost_race_is_not_counted_as_an_error() -> None:
    client = fake.FakeClient()
    client.fail_next["create"] = errors.AlreadyExists(409, "AlreadyExists", "exists")
    elector = leaderelection.LeaderElector(client, options("a", name="lost-race"))
    stop = asyncio.Event()
    task = asyncio.create_task(elector.run(stop))
    await asyncio.wait_for(elector.elected.wait(), 2)
    stop.set()
    await asyncio.wait_for(task, 2)
    assert error_count("lost-race", "create", "AlreadyExists") == 0


async def test_an_elector_that_dies_does_not_release_the_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = fake.FakeClient()
    elector = leaderelection.LeaderElector(client, options("a", name="dies"))

    async def broken_renew(stop: asyncio.Event) -> None:
        raise RuntimeError("a bug in the renew loop")

    monkeypatch.setattr(elector, "_renew", broken_renew)
    with pytest.raises(RuntimeError, match="a bug"):
        await asyncio.wait_for(elector.run(asyncio.Event()), 2)
    lease = await client.get(LEASES, "default", "dies")
    # The manager's controllers may still be running: only a clean stop releases.
    assert lease["spec"]["holderIdentity"] == "a"


async def test_the_release_call_is_bounded() -> None:
    client = fake.FakeClient()
    elector = leaderelection.LeaderElector(client, options("a", name="slow-release"))
    stop = asyncio.Event()
    task = asyncio.create_task(elector.run(stop))
    await asyncio.wait_for(elector.elected.wait(), 2)
    update = client.update

    async def hanging_release(obj: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        if obj["spec"].get("holderIdentity") is None:
            await asyncio.Event().wait()  # the API server never answers
        return await update(obj, **kwargs)

    client.update = hanging_release  # type: ignore[method-assign]
    stop.set()
    # renew_deadline (0.4 s) bounds the release call
    await asyncio.wait_for(task, 2)
    assert error_count("slow-release", "release", "TimeoutError") == 1
