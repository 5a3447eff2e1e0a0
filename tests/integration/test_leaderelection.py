"""Leader election races against the real API server: its 409s decide them.

Two candidates that read an expired Lease at the same resourceVersion both try to take
it over; kube-apiserver lets exactly one update through. A leader whose Lease was taken
from under it cannot clear the new holder's Lease when it releases.
"""

from __future__ import annotations

import asyncio
from typing import Any

from structlog import testing as log_testing

from runtime import leaderelection, metrics
from runtime.client import client as client_
from runtime.client import resources

LEASES = leaderelection.LEASES


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class GatedGets:
    """The real client, whose Lease reads return only once ``readers`` candidates have
    read: they all see the same resourceVersion and race on the update."""

    def __init__(self, client: client_.Client, readers: int) -> None:
        self.client = client
        self.readers = readers
        self.gated = False
        self.gate = asyncio.Event()
        self._reads = 0

    async def get(
        self, resource: resources.Resource, namespace: str | None, name: str
    ) -> dict[str, Any]:
        lease = await self.client.get(resource, namespace, name)
        if self.gated:
            self._reads += 1
            if self._reads >= self.readers:
                self.gate.set()
            await self.gate.wait()
        return lease

    async def create(self, obj: dict[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        return await self.client.create(obj, namespace=namespace)

    async def update(
        self, obj: dict[str, Any], *, subresource: str | None = None
    ) -> dict[str, Any]:
        return await self.client.update(obj, subresource=subresource)


def options(identity: str, name: str, namespace: str, **timings: Any) -> leaderelection.Options:
    settings: dict[str, Any] = {"lease_duration": 1, "renew_deadline": 0.5, "retry_period": 0.1}
    return leaderelection.Options(
        name=name, namespace=namespace, identity=identity, **{**settings, **timings}
    )


def conflicts(name: str, operation: str) -> float:
    value = metrics.registry.get_sample_value(
        "leader_election_errors_total", {"name": name, "operation": operation, "reason": "Conflict"}
    )
    return value or 0.0


async def create_lease(client: client_.Client, namespace: str, name: str, holder: str) -> None:
    await client.create({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 1, "leaseTransitions": 4},
    })  # fmt: skip


async def test_exactly_one_of_two_candidates_takes_over_an_expired_lease(
    client: client_.Client, namespace: str
) -> None:
    name = "race"
    await create_lease(client, namespace, name, holder="dead-leader")
    gated = GatedGets(client, readers=2)
    clock = Clock()
    a = leaderelection.LeaderElector(gated, options("a", name, namespace), monotonic=clock)
    b = leaderelection.LeaderElector(gated, options("b", name, namespace), monotonic=clock)
    assert not await a._try_acquire_or_renew(), "first sight: wait a full lease"
    assert not await b._try_acquire_or_renew()
    clock.t += 2  # the holder has not renewed for longer than the lease, by our clocks
    gated.gated = True
    with log_testing.capture_logs() as logs:
        won = await asyncio.wait_for(
            asyncio.gather(a._try_acquire_or_renew(), b._try_acquire_or_renew()), 10
        )
    assert sorted(won) == [False, True], won
    winner, loser = (a, b) if won[0] else (b, a)
    lease = await client.get(LEASES, namespace, name)
    assert lease["spec"]["holderIdentity"] == winner.options.identity
    assert lease["spec"]["leaseTransitions"] == 5, "one transition, not two"
    # the server refused the loser's update with 409: an ordinary lost race
    raced = [e for e in logs if e["event"] == "another candidate wrote the lease first"]
    assert [(e["operation"], e["identity"]) for e in raced] == [
        ("update", loser.options.identity)
    ], logs
    assert conflicts(name, "update") == 0
    # on its next attempt the loser sees a new holder: it waits a full lease again
    gated.gated = False
    assert not await loser._try_acquire_or_renew()
    assert (await client.get(LEASES, namespace, name))["spec"]["holderIdentity"] == (
        winner.options.identity
    )


async def test_a_release_after_the_lease_was_taken_over_leaves_the_new_holder(
    client: client_.Client, namespace: str
) -> None:
    name = "stale-release"
    # a long retry period: ``a`` makes no call between the takeover and its stop
    elector = leaderelection.LeaderElector(
        client,
        options("a", name, namespace, lease_duration=30, renew_deadline=20, retry_period=10),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(elector.run(stop))
    try:
        await asyncio.wait_for(elector.elected.wait(), 10)
        lease = await client.get(LEASES, namespace, name)
        lease["spec"]["holderIdentity"] = "b"  # b took over (a was partitioned, say)
        await client.update(lease)
        with log_testing.capture_logs() as logs:
            stop.set()
            await asyncio.wait_for(asyncio.shield(task), 30)
        # a's release carries the resourceVersion it wrote: the server answers 409
        assert (await client.get(LEASES, namespace, name))["spec"]["holderIdentity"] == "b"
        assert not [e for e in logs if e["event"] == "released the lease"], logs
        assert [e.get("operation") for e in logs if "first" in e["event"]] == ["release"]
    finally:
        stop.set()
        if not task.done():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
