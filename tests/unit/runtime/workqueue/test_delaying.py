from __future__ import annotations

import asyncio
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.testing import clock as fake
from runtime.workqueue import delaying


async def drain(q: delaying.DelayingQueue[str]) -> list[str]:
    out = []
    while len(q):
        key = await q.get()
        q.done(key)
        out.append(key)
    return out


async def test_keys_become_ready_in_order_of_ready_time() -> None:
    clock = fake.FakeClock()
    q: delaying.DelayingQueue[str] = delaying.DelayingQueue(clock=clock)
    q.add_after("c", 3)
    q.add_after("a", 1)
    q.add_after("b", 2)
    assert len(q) == 0
    clock.advance(0.999)
    assert len(q) == 0
    clock.advance(0.001)
    assert await drain(q) == ["a"]
    clock.advance(5)
    assert await drain(q) == ["b", "c"]


async def test_earlier_ready_time_wins() -> None:
    clock = fake.FakeClock()
    q: delaying.DelayingQueue[str] = delaying.DelayingQueue(clock=clock)
    q.add_after("k", 10)
    q.add_after("k", 2)  # brings it forward
    q.add_after("k", 5)  # does not postpone it
    assert q.waiting == 1
    clock.advance(2)
    assert await drain(q) == ["k"]
    clock.advance(20)
    assert await drain(q) == [], "a superseded entry must not fire again"


async def test_requeue_after_is_replaced_by_the_newer_call_even_a_later_one() -> None:
    clock = fake.FakeClock()
    q: delaying.DelayingQueue[str] = delaying.DelayingQueue(clock=clock)
    q.requeue_after("k", 2)
    q.requeue_after("k", 5)  # postpones it: the newer pass decides
    assert q.waiting == 1
    clock.advance(4.9)
    assert await drain(q) == []
    clock.advance(0.1)
    assert await drain(q) == ["k"]
    clock.advance(20)
    assert await drain(q) == [], "the replaced timer never fires"
    assert clock.pending_timers == 0


async def test_requeue_after_and_add_after_are_independent() -> None:
    """An event delay (add_after) is neither postponed nor dropped by a pass's requeue,
    and a pass's requeue is not brought forward by it."""
    clock = fake.FakeClock()
    q: delaying.DelayingQueue[str] = delaying.DelayingQueue(clock=clock)
    q.add_after("k", 1)
    q.requeue_after("k", 10)
    q.cancel_requeue("other")  # nothing to drop: no error
    assert q.waiting == 1, "one key, two timers"
    clock.advance(1)
    assert await drain(q) == ["k"]
    assert q.waiting == 1
    clock.advance(9)
    assert await drain(q) == ["k"]
    q.requeue_after("k", 3)
    q.add_after("k", 5)
    q.cancel_requeue("k")
    clock.advance(3)
    assert await drain(q) == [], "cancelled"
    clock.advance(2)
    assert await drain(q) == ["k"], "add_after's wait stayed"


async def test_requeue_after_zero_adds_now_and_shutdown_drops_the_timers() -> None:
    clock = fake.FakeClock()
    q: delaying.DelayingQueue[str] = delaying.DelayingQueue(clock=clock)
    q.requeue_after("now", 0)
    assert await drain(q) == ["now"]
    q.requeue_after("later", 5)
    q.shutdown()
    q.requeue_after("after-shutdown", 1)
    assert q.waiting == 0
    assert clock.pending_timers == 0


async def test_zero_or_negative_delay_is_an_immediate_add() -> None:
    q: delaying.DelayingQueue[str] = delaying.DelayingQueue(clock=fake.FakeClock())
    q.add_after("a", 0)
    q.add_after("b", -1)
    assert await drain(q) == ["a", "b"]


async def test_delayed_add_collapses_with_a_pending_add() -> None:
    clock = fake.FakeClock()
    q: delaying.DelayingQueue[str] = delaying.DelayingQueue(clock=clock)
    q.add("k")
    q.add_after("k", 1)
    clock.advance(1)
    assert await drain(q) == ["k"]


async def test_one_timer_armed_for_the_earliest_key() -> None:
    clock = fake.FakeClock()
    q: delaying.DelayingQueue[int] = delaying.DelayingQueue(clock=clock)
    for i in range(100):
        q.add_after(i, 100 - i)
    assert clock.pending_timers == 1
    clock.advance(1)
    assert len(q) == 1
    assert clock.pending_timers == 1


async def test_shutdown_drops_waiting_keys_and_the_timer() -> None:
    clock = fake.FakeClock()
    q: delaying.DelayingQueue[str] = delaying.DelayingQueue(clock=clock)
    q.add_after("a", 1)
    q.shutdown()
    q.add_after("b", 1)
    assert clock.pending_timers == 0
    clock.advance(5)
    assert len(q) == 0
    assert q.waiting == 0


async def test_real_clock_fires_without_polling() -> None:
    q: delaying.DelayingQueue[str] = delaying.DelayingQueue()
    q.add_after("x", 0.01)
    assert len(q) == 0
    assert await q.get() == "x"
    q.done("x")


async def test_bringing_keys_forward_leaves_no_pile_of_stale_entries() -> None:
    clock = fake.FakeClock()
    q: delaying.DelayingQueue[int] = delaying.DelayingQueue(clock=clock)
    for key in range(100):
        for step in range(100):
            q.add_after(key, 10_000 - step)  # each call brings the key forward
    assert q.waiting == 100
    assert len(q._heap) <= 2 * q.waiting + 64, "the heap must not grow with every bring-forward"
    clock.advance(10_000 - 99)
    assert sorted(await drain(q)) == list(range(100))
    assert q.waiting == 0
    clock.advance(10_000)
    assert await drain(q) == [], "no stale entry fires"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("add_after"), st.integers(0, 5), st.integers(-1, 20)),
            st.tuples(st.just("advance"), st.just(0), st.integers(0, 10)),
        ),
        max_size=80,
    )
)
def test_matches_a_reference_model(ops: list[tuple[str, int, int]]) -> None:
    """Against a dict of ready times: the earliest wins, each key fires once, in time order."""

    async def run() -> None:
        clock = fake.FakeClock()
        q: delaying.DelayingQueue[int] = delaying.DelayingQueue(clock=clock)
        ready_at: dict[int, float] = {}
        queued: list[int] = []
        for op, key, arg in ops:
            if op == "add_after":
                q.add_after(key, arg)
                if arg <= 0:
                    if key not in queued:
                        queued.append(key)
                else:
                    ready_at[key] = min(ready_at.get(key, float("inf")), clock.now() + arg)
            else:
                clock.advance(arg)
                due = sorted((t, k) for k, t in ready_at.items() if t <= clock.now())
                for _, k in due:
                    del ready_at[k]
                    if k not in queued:
                        queued.append(k)
            assert q.waiting == len(ready_at)
            assert len(q) == len(queued)
            assert len(q._heap) <= 2 * q.waiting + 64
        got = await drain(q)
        assert sorted(got) == sorted(queued)

    asyncio.run(run())


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
