from __future__ import annotations

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
