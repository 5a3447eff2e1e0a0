from __future__ import annotations

import asyncio

import pytest

from runtime import leaderelection
from runtime.client import errors
from runtime.testing import fake

LEASES = leaderelection.LEASES


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def options(identity: str, **kw: float) -> leaderelection.Options:
    defaults = {"lease_duration": 0.6, "renew_deadline": 0.4, "retry_period": 0.05}
    return leaderelection.Options(name="lock", identity=identity, **{**defaults, **kw})


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
    task_b = asyncio.create_task(b.run(stop_b))
    await asyncio.sleep(1.5)  # longer than the lease: a keeps renewing, so b must wait
    assert not b.elected.is_set()
    task_a.cancel()  # a dies without releasing (like SIGKILL)
    await asyncio.gather(task_a, return_exceptions=True)
    await asyncio.wait_for(b.elected.wait(), 3)
    lease = await client.get(LEASES, "default", "lock")
    assert lease["spec"]["holderIdentity"] == "b"
    assert lease["spec"]["leaseTransitions"] == 1
    stop_b.set()
    await task_b


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
