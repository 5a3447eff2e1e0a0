"""controllers.rayservice.poller: Serve polled off the worker while a deploy is pending,
and the reconciler that hands its pending deploys to it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from controllers.ray import dashboard, serve
from controllers.rayservice import poller as poller_
from runtime import reconcile
from tests.unit.controllers.rayservice import scenario

REQUEST = reconcile.Request("ns", "svc")


def details(status: str) -> serve.ServeDetails:
    return serve.ServeDetails.model_validate({"applications": {"a": {"status": status}}})


class Head:
    """Answers ``answers`` in turn (the last one again); an exception is raised."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.reads = 0
        self.in_flight = 0
        self.most_in_flight = 0

    async def get_serve_applications(self) -> serve.ServeDetails:
        self.reads += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.005)
            answer = self.answers[min(self.reads, len(self.answers)) - 1]
            if isinstance(answer, Exception):
                raise answer
            return answer  # type: ignore[no-any-return]
        finally:
            self.in_flight -= 1


class Queue:
    def __init__(self) -> None:
        self.added: list[reconcile.Request] = []

    def add(self, request: reconcile.Request) -> None:
        self.added.append(request)

    def add_after(self, request: reconcile.Request, delay: float) -> None:
        raise AssertionError("the poller adds at once")


async def started(poller: poller_.Poller) -> Queue:
    queue = Queue()
    await poller.channel.start(queue)
    return queue


async def until(probe: Any, seconds: float = 2.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not probe():
        assert loop.time() < deadline, "not in time"
        await asyncio.sleep(0.005)


async def test_unchanged_answers_ask_for_no_pass_a_change_asks_for_one() -> None:
    poller = poller_.Poller()
    queue = await started(poller)
    head = Head(*[details("DEPLOYING")] * 3, details("RUNNING"))
    poller.watch(REQUEST, head, poller_.fingerprint(details("DEPLOYING")), interval=0.01)
    await until(lambda: queue.added)
    assert queue.added == [REQUEST]
    assert head.reads == 4, "three unchanged answers, then the change"
    assert poller.watching == 0, "the watch ended with its pass"
    await asyncio.sleep(0.05)
    assert head.reads == 4
    assert queue.added == [REQUEST]


async def test_a_failed_read_asks_for_a_pass() -> None:
    poller = poller_.Poller()
    queue = await started(poller)
    head = Head(dashboard.DashboardError("connection refused"))
    poller.watch(REQUEST, head, poller_.fingerprint(details("DEPLOYING")), interval=0.01)
    await until(lambda: queue.added)
    assert (queue.added, head.reads) == ([REQUEST], 1)


async def test_stop_and_a_newer_watch_end_the_older_one() -> None:
    poller = poller_.Poller()
    queue = await started(poller)
    old, new = Head(details("RUNNING")), Head(details("DEPLOYING"))
    seen = poller_.fingerprint(details("DEPLOYING"))
    poller.watch(REQUEST, old, seen, interval=0.05)
    poller.watch(REQUEST, new, seen, interval=0.01)  # a newer pass: its client, its answer
    await asyncio.sleep(0.12)
    assert old.reads == 0, "replaced before its first read"
    assert new.reads >= 3
    assert queue.added == []
    poller.stop(REQUEST)
    reads = new.reads
    await asyncio.sleep(0.05)
    assert new.reads == reads
    assert poller.watching == 0


async def test_reads_in_flight_are_bounded_over_all_services() -> None:
    poller = poller_.Poller(concurrency=2)
    await started(poller)
    head = Head(details("DEPLOYING"))
    seen = poller_.fingerprint(details("DEPLOYING"))
    for i in range(10):
        poller.watch(reconcile.Request("ns", f"svc-{i}"), head, seen, interval=0.001)
    await until(lambda: head.reads >= 30)
    assert head.most_in_flight == 2
    await poller.close()
    assert poller.watching == 0


async def test_the_manager_stopping_ends_every_watch() -> None:
    poller = poller_.Poller()
    await started(poller)
    poller.watch(REQUEST, Head(details("DEPLOYING")),
                 poller_.fingerprint(details("DEPLOYING")), interval=0.01)  # fmt: skip
    stop = asyncio.Event()
    runner = asyncio.create_task(poller.start(stop))
    await asyncio.sleep(0.02)
    stop.set()
    await asyncio.wait_for(runner, 1)
    assert poller.watching == 0
    assert not poller.needs_leader_election


def test_concurrency_must_be_positive() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        poller_.Poller(concurrency=0)


async def test_the_reconciler_hands_a_pending_deploy_to_the_poller(env: scenario.Env) -> None:
    """While Serve deploys, no pass polls (no requeue); the poller's pass comes when the
    applications turn RUNNING, and that pass moves traffic."""
    poller = poller_.Poller()
    env.reconciler.poller = poller
    queue = await started(poller)
    try:
        await env.client.create(scenario.rayservice())
        await env.synced()
        await env.reconcile()
        (name,) = await env.live_clusters()
        await env.start_head(name)
        result = await env.reconcile()  # the PUT: Serve deploys now
        dash = env.fake(name)
        assert dash.put_count == 1
        assert result.requeue_after is None, "the poll is the poller's"
        assert poller.watching == 1
        result = await env.reconcile()  # an event's pass: reads DEPLOYING, hands over again
        assert result.requeue_after is None
        assert poller.watching == 1
        gets = dash.get_count
        await asyncio.sleep(2.3)  # one 2 s poll, unchanged: no pass
        assert dash.get_count == gets + 1
        assert queue.added == []
        dash.set_all("RUNNING")
        await until(lambda: queue.added, 5)
        assert queue.added == [scenario.REQUEST]
        assert poller.watching == 0
        await env.reconcile()
        serve_svc = await env.client.get(scenario.SERVICES, "ns", "demo-serve-svc")
        assert serve_svc["spec"]["selector"]["ray.io/cluster"] == name
        assert poller.watching == 0, "RUNNING: the passes poll again (the at-rest cadence)"
    finally:
        await poller.close()
