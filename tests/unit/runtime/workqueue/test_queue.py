from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.workqueue import queue
from tests.unit import helpers


async def test_fifo_order() -> None:
    q: queue.Queue[str] = queue.Queue()
    for key in "abc":
        q.add(key)
    assert [await q.get() for _ in range(3)] == ["a", "b", "c"]


async def test_adds_before_processing_collapse_into_one() -> None:
    q: queue.Queue[str] = queue.Queue()
    for _ in range(10):
        q.add("a")
    q.add("b")
    assert len(q) == 2
    assert await q.get() == "a"
    assert await q.get() == "b"
    assert len(q) == 0


async def test_add_while_processing_requeues_exactly_once_after_done() -> None:
    q: queue.Queue[str] = queue.Queue()
    q.add("a")
    key = await q.get()
    q.add("a")
    q.add("a")
    assert len(q) == 0, "a key being processed must not be handed to a second worker"
    q.done(key)
    assert len(q) == 1
    assert await q.get() == "a"
    q.done("a")
    assert len(q) == 0


async def test_get_waits_for_an_add() -> None:
    q: queue.Queue[str] = queue.Queue()
    getter = asyncio.create_task(q.get())
    await helpers.eventually(lambda: q.getters == 1, what="the getter waiting")
    assert not getter.done()
    q.add("x")
    assert await asyncio.wait_for(getter, 1) == "x"


async def test_cancelled_getter_does_not_swallow_a_key() -> None:
    q: queue.Queue[str] = queue.Queue()
    first = asyncio.create_task(q.get())
    second = asyncio.create_task(q.get())
    await helpers.eventually(lambda: q.getters == 2, what="both getters waiting")
    q.add("x")  # wakes `first` ...
    first.cancel()  # ... which is cancelled before it runs
    assert await asyncio.wait_for(second, 1) == "x"
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_shutdown_hands_out_queued_keys_then_raises() -> None:
    q: queue.Queue[str] = queue.Queue()
    q.add("a")
    q.shutdown()
    q.add("b")  # ignored after shutdown
    assert await q.get() == "a"
    with pytest.raises(queue.ShutDown):
        await q.get()


async def test_shutdown_wakes_waiting_getters() -> None:
    q: queue.Queue[str] = queue.Queue()
    getters = [asyncio.create_task(q.get()) for _ in range(3)]
    await helpers.eventually(lambda: q.getters == 3, what="three getters waiting")
    q.shutdown()
    results = await asyncio.gather(*getters, return_exceptions=True)
    assert all(isinstance(r, queue.ShutDown) for r in results)


async def test_concurrent_workers_never_hold_the_same_key() -> None:
    q: queue.Queue[int] = queue.Queue()
    held: set[int] = set()
    violations: list[int] = []
    processed: list[int] = []
    rng = random.Random(7)

    async def worker() -> None:
        while True:
            try:
                key = await q.get()
            except queue.ShutDown:
                return
            if key in held:
                violations.append(key)
            held.add(key)
            await asyncio.sleep(0)
            if rng.random() < 0.5:
                q.add(key)  # re-add while processing
            await asyncio.sleep(0)
            held.discard(key)
            processed.append(key)
            q.done(key)

    workers = [asyncio.create_task(worker()) for _ in range(8)]
    for _ in range(2000):
        q.add(rng.randrange(5))
        if rng.random() < 0.3:
            await asyncio.sleep(0)
    for _ in range(100_000):  # until every key is done
        if not len(q) and not q.processing:
            break
        await asyncio.sleep(0)
    assert not len(q)
    assert not q.processing
    q.shutdown()
    await asyncio.gather(*workers)
    assert violations == []
    assert len(processed) > 5


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.integers(0, 4)),
            st.tuples(st.just("get"), st.integers(0, 2)),
            st.tuples(st.just("done"), st.integers(0, 2)),
        ),
        max_size=60,
    )
)
def test_matches_a_reference_model(ops: list[tuple[str, int]]) -> None:
    """Against a set-based model: one holder per key, adds collapse, re-adds replay once."""

    async def run() -> None:
        q: queue.Queue[int] = queue.Queue()
        pending: list[int] = []  # model FIFO
        dirty: set[int] = set()
        processing: set[int] = set()
        workers: dict[int, int] = {}  # worker -> key it holds
        for op, arg in ops:
            if op == "add":
                q.add(arg)
                if arg not in dirty:
                    dirty.add(arg)
                    if arg not in processing:
                        pending.append(arg)
            elif op == "get" and arg not in workers and pending:
                key = await q.get()
                assert key == pending.pop(0)
                assert key not in processing, "a key was handed to two workers"
                processing.add(key)
                dirty.discard(key)
                workers[arg] = key
            elif op == "done" and arg in workers:
                key = workers.pop(arg)
                q.done(key)
                processing.discard(key)
                if key in dirty:
                    pending.append(key)
            assert len(q) == len(pending)
            assert q.processing == len(processing)

    asyncio.run(run())


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
