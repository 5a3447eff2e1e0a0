from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable, Callable

import pytest
from structlog import contextvars as log_context
from structlog import testing as log_testing

from runtime import controller, metrics, reconcile, source
from runtime.testing import clock as fake
from tests.unit import helpers

_names = itertools.count()
Handler = Callable[[reconcile.Request], Awaitable[reconcile.Result | None]]


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


def count(name: str, ctrl: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, {"controller": ctrl, **labels})
    return value or 0.0


class Harness:
    """A controller on a fake clock, driven through a channel source."""

    def __init__(self, handler: Handler, **options: object) -> None:
        self.clock = fake.FakeClock()
        self.channel = source.Channel()
        self.name = unique("ctrl")
        self.ctrl = controller.Controller(
            self.name,
            handler,  # type: ignore[arg-type]
            options=controller.Options(clock=self.clock, **options),  # type: ignore[arg-type]
        )
        self.ctrl.watch(self.channel)
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Harness:
        self.task = asyncio.create_task(self.ctrl.start(self.stop))
        await self.idle()
        return self

    async def idle(self) -> None:
        """Until every request sent so far (and every delay that came due) is reconciled."""
        await self.ctrl.wait_idle()

    async def __aexit__(self, *exc: object) -> None:
        self.stop.set()
        assert self.task is not None
        await asyncio.wait_for(self.task, 5)

    def send(self, name: str = "a") -> None:
        self.channel.send(reconcile.Request("ns", name))

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        await self.idle()


async def test_success_forgets_and_does_not_requeue() -> None:
    calls: list[str] = []

    async def handler(req: reconcile.Request) -> reconcile.Result:
        calls.append(str(req))
        return reconcile.Result()

    async with Harness(handler) as h:
        h.send("a")
        await h.idle()
        await h.advance(3600)
        assert calls == ["ns/a"]
        assert count("controller_runtime_reconcile_total", h.name, result="success") == 1


async def test_none_is_success() -> None:
    calls = 0

    async def handler(req: reconcile.Request) -> None:
        nonlocal calls
        calls += 1

    async with Harness(handler) as h:
        h.send()
        await h.idle()
        await h.advance(60)
        assert calls == 1
        assert count("controller_runtime_reconcile_total", h.name, result="success") == 1


async def test_many_events_while_queued_give_one_reconcile() -> None:
    calls = 0

    async def handler(req: reconcile.Request) -> reconcile.Result:
        nonlocal calls
        calls += 1
        return reconcile.Result()

    h = Harness(handler)
    for _ in range(50):
        h.send("a")  # before start: all queued together
    async with h:
        await h.idle()
        assert calls == 1


async def test_event_during_reconcile_gives_exactly_one_more() -> None:
    calls = 0
    release = asyncio.Event()

    async def handler(req: reconcile.Request) -> reconcile.Result:
        nonlocal calls
        calls += 1
        if calls == 1:
            await release.wait()
        return reconcile.Result()

    async with Harness(handler, max_concurrent_reconciles=4) as h:
        h.send("a")
        await helpers.eventually(lambda: calls == 1, what="the first reconcile")
        for _ in range(10):
            h.send("a")
        # Held while it is processed: nothing is ready for the three idle workers.
        assert len(h.ctrl.queue) == 0
        assert h.ctrl.queue.processing == 1
        assert calls == 1, "a second worker must not take a key that is being reconciled"
        release.set()
        await h.idle()
        assert calls == 2


async def test_error_is_retried_with_growing_delay() -> None:
    times: list[float] = []
    h: Harness

    async def handler(req: reconcile.Request) -> reconcile.Result:
        times.append(h.clock.now())
        raise RuntimeError("boom")

    h = Harness(handler)
    with log_testing.capture_logs() as logs:
        async with h:
            h.send()
            await h.idle()
            for _ in range(5):
                await h.advance(0.005 * 2 ** (len(times) - 1))
    assert times == pytest.approx([0, 0.005, 0.015, 0.035, 0.075, 0.155])
    assert count("controller_runtime_reconcile_errors_total", h.name) == 6
    assert count("controller_runtime_reconcile_total", h.name, result="error") == 6
    failures = [entry for entry in logs if entry["event"].startswith("reconcile failed")]
    assert len(failures) == 6
    assert isinstance(failures[0]["exc_info"], RuntimeError)


async def test_success_after_errors_resets_backoff() -> None:
    outcomes = iter([RuntimeError("1"), RuntimeError("2"), None, RuntimeError("3")])
    times: list[float] = []
    h: Harness

    async def handler(req: reconcile.Request) -> reconcile.Result:
        times.append(h.clock.now())
        outcome = next(outcomes)
        if outcome is not None:
            raise outcome
        return reconcile.Result()

    h = Harness(handler)
    async with h:
        h.send()
        await h.idle()
        await h.advance(0.005)
        await h.advance(0.010)
        assert len(times) == 3
        assert h.ctrl.queue.num_requeues(reconcile.Request("ns", "a")) == 0
        h.send()
        await h.idle()
        assert len(times) == 4
        assert h.ctrl.queue.num_requeues(reconcile.Request("ns", "a")) == 1


async def test_terminal_error_is_not_retried() -> None:
    calls = 0

    async def handler(req: reconcile.Request) -> reconcile.Result:
        nonlocal calls
        calls += 1
        raise reconcile.TerminalError("spec is invalid")

    async with Harness(handler) as h:
        h.send()
        await h.idle()
        await h.advance(2000)
        assert calls == 1
        assert count("controller_runtime_terminal_reconcile_errors_total", h.name) == 1
        assert count("controller_runtime_reconcile_errors_total", h.name) == 1
        assert h.ctrl.queue.num_requeues(reconcile.Request("ns", "a")) == 0
        h.send()  # a new event is a new attempt
        await h.idle()
        assert calls == 2


async def test_requeue_after_is_honoured() -> None:
    times: list[float] = []
    h: Harness

    async def handler(req: reconcile.Request) -> reconcile.Result:
        times.append(h.clock.now())
        return reconcile.Result(requeue_after=30)

    h = Harness(handler)
    async with h:
        h.send()
        await h.idle()
        await h.advance(29.9)
        assert times == [0]
        await h.advance(0.1)
        await h.advance(30)
        assert times == pytest.approx([0, 30, 60])
        assert count("controller_runtime_reconcile_total", h.name, result="requeue_after") == 3


async def test_a_newer_pass_replaces_the_requeue_an_older_one_asked_for() -> None:
    """A pass run by an event between two polls sets the next poll; the older pass's
    poll timer causes no pass of its own (controller-runtime would run it)."""
    times: list[float] = []
    after = iter([2.0, 10.0, None])
    h: Harness

    async def handler(req: reconcile.Request) -> reconcile.Result:
        times.append(h.clock.now())
        return reconcile.Result(requeue_after=next(after))

    h = Harness(handler)
    async with h:
        h.send()  # pass 1 at 0: look again in 2 s
        await h.idle()
        await h.advance(1)
        h.send()  # pass 2 at 1 (an event): look again in 10 s
        await h.idle()
        await h.advance(5)
        assert times == pytest.approx([0, 1]), "pass 1's timer (at 2) was replaced"
        await h.advance(5)
        assert times == pytest.approx([0, 1, 11])
        await h.advance(60)
        assert times == pytest.approx([0, 1, 11]), "pass 3 asked for nothing"
        assert h.clock.pending_timers == 0


async def test_a_pass_without_requeue_drops_an_older_passs_requeue() -> None:
    times: list[float] = []
    after = iter([5.0, None])
    h: Harness

    async def handler(req: reconcile.Request) -> reconcile.Result:
        times.append(h.clock.now())
        return reconcile.Result(requeue_after=next(after, None))

    h = Harness(handler)
    async with h:
        h.send()
        await h.idle()
        await h.advance(1)
        h.send()  # this pass found nothing due
        await h.idle()
        await h.advance(30)
        assert times == pytest.approx([0, 1])


async def test_reconcile_timeout_cancels_and_retries() -> None:
    attempts = 0
    cancelled = False

    async def handler(req: reconcile.Request) -> reconcile.Result:
        nonlocal attempts, cancelled
        attempts += 1
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled = True
            raise
        return reconcile.Result()

    async with Harness(handler, reconcile_timeout=0.02) as h:
        h.send()
        await helpers.eventually(
            lambda: count("controller_runtime_reconcile_errors_total", h.name) == 1,
            5, "the timed-out reconcile counted as an error",
        )  # fmt: skip
        assert cancelled, "the reconcile was cancelled, not left running"
        assert attempts == 1, "no retry before the backoff (fake clock) has passed"
        await h.advance(0.005)
        await helpers.eventually(lambda: attempts == 2, 5, "the retry after the backoff")


async def test_own_timeout_error_of_reconciler_is_a_plain_error() -> None:
    async def handler(req: reconcile.Request) -> reconcile.Result:
        raise TimeoutError("dashboard did not answer")

    with log_testing.capture_logs() as logs:
        async with Harness(handler, reconcile_timeout=60) as h:
            h.send()
            await h.idle()
    [failure] = [e for e in logs if e["event"].startswith("reconcile failed")]
    assert isinstance(failure["exc_info"], TimeoutError)


async def test_wrong_return_type_is_an_error_not_a_crash() -> None:
    async def handler(req: reconcile.Request) -> object:
        return 42

    async with Harness(handler) as h:  # type: ignore[arg-type]
        h.send()
        await h.idle()
        assert count("controller_runtime_reconcile_errors_total", h.name) == 1
        h.send("b")
        await h.idle()
        assert count("controller_runtime_reconcile_errors_total", h.name) == 2


async def test_log_context_is_bound_per_reconcile() -> None:
    async def handler(req: reconcile.Request) -> reconcile.Result:
        raise RuntimeError("boom")

    with log_testing.capture_logs(processors=[log_context.merge_contextvars]) as logs:
        async with Harness(handler) as h:
            h.send("x")
            h.send("y")
            await h.idle()
    failures = [e for e in logs if e["event"].startswith("reconcile failed")]
    assert [(e["namespace"], e["name"], e["controller"]) for e in failures] == [
        ("ns", "x", h.name),
        ("ns", "y", h.name),
    ]
    assert failures[0]["reconcile_id"] != failures[1]["reconcile_id"]
    assert "reconcile_id" not in log_context.get_contextvars()


async def test_workers_reconcile_different_keys_concurrently() -> None:
    active = 0
    peak = 0
    release = asyncio.Event()

    async def handler(req: reconcile.Request) -> reconcile.Result:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await release.wait()
        active -= 1
        return reconcile.Result()

    async with Harness(handler, max_concurrent_reconciles=3) as h:
        for name in "abcde":
            h.send(name)
        await helpers.eventually(lambda: active == 3, what="three reconciles at once")
        assert len(h.ctrl.queue) == 2, "the other two wait for a worker"
        assert peak == 3
        assert count("controller_runtime_active_workers", h.name) == 3
        assert count("controller_runtime_max_concurrent_reconciles", h.name) == 3
        release.set()
        await h.idle()
        assert count("controller_runtime_active_workers", h.name) == 0


async def test_stop_lets_in_flight_reconcile_finish() -> None:
    started = asyncio.Event()
    release = asyncio.Event()
    finished: list[str] = []

    async def handler(req: reconcile.Request) -> reconcile.Result:
        started.set()
        await release.wait()
        finished.append(req.name)
        return reconcile.Result()

    h = Harness(handler)
    await h.__aenter__()
    h.send("a")
    h.send("queued")
    await started.wait()
    h.stop.set()
    assert h.task is not None
    done, _ = await asyncio.wait({h.task}, timeout=0.1)  # a graceful stop waits for it
    assert not done
    release.set()
    await asyncio.wait_for(h.task, 5)
    assert finished == ["a"], "in-flight finishes; queued keys are not started after stop"


async def test_stop_cancels_reconciles_after_the_deadline() -> None:
    cancelled = asyncio.Event()

    async def handler(req: reconcile.Request) -> reconcile.Result:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return reconcile.Result()

    h = Harness(handler, graceful_shutdown_timeout=0.05)
    async with h:
        h.send()
        await helpers.eventually(lambda: h.ctrl.queue.processing == 1, what="the reconcile")
    assert cancelled.is_set()


async def test_cancelling_start_stops_at_once() -> None:
    async def handler(req: reconcile.Request) -> reconcile.Result:
        await asyncio.sleep(3600)
        return reconcile.Result()

    h = Harness(handler)
    await h.__aenter__()
    h.send()
    await helpers.eventually(lambda: h.ctrl.queue.processing == 1, what="the reconcile")
    assert h.task is not None
    h.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await h.task


async def test_no_task_is_left_after_stop() -> None:
    async def handler(req: reconcile.Request) -> reconcile.Result:
        return reconcile.Result(requeue_after=5)

    before = asyncio.all_tasks()
    async with Harness(handler, max_concurrent_reconciles=4) as h:
        for name in "abcdef":
            h.send(name)
        await h.idle()
    assert asyncio.all_tasks() - before == set()
    assert h.clock.pending_timers == 0


async def test_syncing_source_is_awaited_before_workers_start() -> None:
    synced = asyncio.Event()
    calls: list[str] = []

    class Cache(source.Channel):
        async def wait_for_sync(self) -> None:
            await synced.wait()

    async def handler(req: reconcile.Request) -> reconcile.Result:
        calls.append(req.name)
        return reconcile.Result()

    cache = Cache()
    ctrl = controller.Controller(unique("sync"), handler)
    ctrl.watch(cache)
    stop = asyncio.Event()
    task = asyncio.create_task(ctrl.start(stop))
    cache.send(reconcile.Request("ns", "a"))
    done, _ = await asyncio.wait({task}, timeout=0.05)  # it waits for the sync ...
    assert not done
    assert calls == [], "no worker runs before the caches are synced"
    synced.set()
    await ctrl.wait_idle()  # ... and then the workers take what was queued
    assert calls == ["a"]
    stop.set()
    await task


async def test_cache_sync_timeout_fails_start_clearly() -> None:
    class NeverSynced(source.Channel):
        async def wait_for_sync(self) -> None:
            await asyncio.sleep(3600)

    async def handler(req: reconcile.Request) -> reconcile.Result:
        return reconcile.Result()

    ctrl = controller.Controller(
        unique("nosync"), handler, options=controller.Options(cache_sync_timeout=0.01)
    )
    ctrl.watch(NeverSynced())
    with pytest.raises(TimeoutError, match="caches did not sync"):
        await ctrl.start(asyncio.Event())


async def test_start_twice_and_watch_after_start_are_errors() -> None:
    async def handler(req: reconcile.Request) -> reconcile.Result:
        return reconcile.Result()

    async with Harness(handler) as h:
        with pytest.raises(RuntimeError, match="already started"):
            h.ctrl.watch(source.Channel())
        with pytest.raises(RuntimeError, match="already started"):
            await h.ctrl.start(asyncio.Event())


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_concurrent_reconciles": 0}, "max_concurrent_reconciles"),
        ({"reconcile_timeout": 0}, "reconcile_timeout"),
        ({"graceful_shutdown_timeout": -1}, "graceful_shutdown_timeout"),
    ],
)
def test_bad_options_are_rejected(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        controller.Options(**options)  # type: ignore[arg-type]


def test_bad_reconciler_and_source_are_rejected() -> None:
    with pytest.raises(TypeError, match="neither a Reconciler"):
        controller.Controller("x", 42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a name"):
        controller.Controller("", reconcile.Func(lambda r: None))  # type: ignore[arg-type,return-value]
    ctrl = controller.Controller(unique("x"), reconcile.Func(lambda r: None))  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="not a Source"):
        ctrl.watch(object())  # type: ignore[arg-type]


async def test_a_backlog_of_instant_reconciles_does_not_starve_the_loop() -> None:
    done = 0

    async def handler(req: reconcile.Request) -> reconcile.Result:
        nonlocal done
        done += 1  # never suspends, like a cache-only reconcile with nothing to write
        return reconcile.Result()

    h = Harness(handler)
    for i in range(100):
        h.send(str(i))
    seen_by_bystander: list[int] = []

    async def bystander() -> None:
        while done < 100:
            seen_by_bystander.append(done)
            await asyncio.sleep(0)

    h.task = asyncio.create_task(h.ctrl.start(h.stop))  # not `async with`: it waits for idle
    try:
        await asyncio.wait_for(bystander(), 5)
    finally:
        await h.__aexit__()
    assert len(seen_by_bystander) > 10, "other tasks must run while the backlog drains"
    assert done == 100


async def test_reconciler_that_swallows_the_timeout_still_counts_as_timed_out() -> None:
    attempts = 0

    async def handler(req: reconcile.Request) -> reconcile.Result:
        nonlocal attempts
        attempts += 1
        with contextlib.suppress(asyncio.CancelledError):  # misbehaving: swallows it
            await asyncio.sleep(3600)
        return reconcile.Result()

    with log_testing.capture_logs() as logs:
        async with Harness(handler, reconcile_timeout=0.02) as h:
            h.send()
            await helpers.eventually(
                lambda: count("controller_runtime_reconcile_errors_total", h.name) == 1,
                5, "the swallowed timeout counted as an error",
            )  # fmt: skip
            assert count("controller_runtime_reconcile_total", h.name, result="success") == 0
            assert attempts == 1
            await h.advance(0.005)
            await helpers.eventually(
                lambda: attempts == 2, 5, "the worker survives and the key is retried"
            )
    [failure, *_] = [e for e in logs if e["event"].startswith("reconcile failed")]
    assert "exceeded 0.02 s" in str(failure["exc_info"])


async def test_workers_that_end_before_stop_fail_the_controller() -> None:
    seen: list[str] = []

    async def handler(req: reconcile.Request) -> reconcile.Result:
        seen.append(req.name)
        return reconcile.Result()

    channel = source.Channel()
    ctrl = controller.Controller(
        "fp-workers-end", handler, options=controller.Options(clock=fake.FakeClock())
    )
    ctrl.watch(channel)
    stop = asyncio.Event()
    task = asyncio.create_task(ctrl.start(stop))
    try:
        channel.send(reconcile.Request("ns", "a"))
        await helpers.eventually(lambda: seen, 5, "a reconcile")
        ctrl.queue.shutdown()  # what only a bug would do while the controller runs
        with pytest.raises(RuntimeError, match="ended before stop"):
            await asyncio.wait_for(asyncio.shield(task), 5)
        left = [t for t in asyncio.all_tasks() if t.get_name().startswith("fp-workers-end-")]
        assert [t for t in left if not t.done()] == []
    finally:
        stop.set()
        await asyncio.gather(task, return_exceptions=True)
