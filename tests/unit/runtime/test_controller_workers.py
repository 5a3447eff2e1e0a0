"""The controller engine never leaks a worker, never loses one silently,
recognises wrapped terminal errors, stops while waiting for caches, and rejects
duplicate controller names."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable, Callable, Hashable

import pytest
from structlog import testing as log_testing

from runtime import controller, metrics, reconcile, source
from runtime.testing import clock as fake
from tests.unit import helpers

_names = itertools.count()
Handler = Callable[[reconcile.Request], Awaitable[reconcile.Result | None]]


def unique(prefix: str = "engine-workers") -> str:
    return f"{prefix}-{next(_names)}"


def count(name: str, ctrl: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, {"controller": ctrl, **labels})
    return value or 0.0


def controller_tasks(name: str) -> list[asyncio.Task[object]]:
    """Tasks the controller ``name`` made that have not ended."""
    return [t for t in asyncio.all_tasks() if t.get_name().startswith(f"{name}-") and not t.done()]


class Running:
    """A controller on a fake clock fed by a channel, started in a task."""

    def __init__(self, handler: Handler, **options: object) -> None:
        self.clock = fake.FakeClock()
        self.channel = source.Channel()
        self.name = unique()
        self.ctrl = controller.Controller(
            self.name,
            handler,  # type: ignore[arg-type]
            options=controller.Options(clock=self.clock, **options),  # type: ignore[arg-type]
        )
        self.ctrl.watch(self.channel)
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(self.ctrl.start(self.stop))

    def send(self, name: str) -> None:
        self.channel.send(reconcile.Request("ns", name))

    async def finish(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 5)


# -- item 1: nothing of a controller runs once start has returned or raised ------------------------


async def test_cancel_during_graceful_stop_cancels_and_awaits_the_workers() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def handler(req: reconcile.Request) -> reconcile.Result:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return reconcile.Result()

    run = Running(handler, graceful_shutdown_timeout=3600)
    run.send("a")
    await asyncio.wait_for(started.wait(), 5)
    run.stop.set()
    done, _ = await asyncio.wait({run.task}, timeout=0.05)
    assert not done, "the graceful stop waits for the in-flight reconcile"
    run.task.cancel()  # the manager's deadline passed first
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(run.task, 5)
    assert cancelled.is_set(), "the in-flight reconcile was cancelled"
    assert controller_tasks(run.name) == [], "no worker outlives start"


async def test_repeated_cancels_still_wait_for_a_slow_cleanup() -> None:
    started = asyncio.Event()
    cleaned_up = asyncio.Event()

    async def handler(req: reconcile.Request) -> reconcile.Result:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            for _ in range(10):  # cleanup that takes a few steps and survives re-cancels
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(0)
            cleaned_up.set()
        return reconcile.Result()

    run = Running(handler, graceful_shutdown_timeout=3600)
    run.send("a")
    await asyncio.wait_for(started.wait(), 5)
    run.stop.set()
    done, _ = await asyncio.wait({run.task}, timeout=0.05)  # in its graceful stop
    assert not done
    run.task.cancel()
    await asyncio.sleep(0)
    run.task.cancel()
    await asyncio.sleep(0)
    run.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(run.task, 5)
    assert cleaned_up.is_set(), "start ended before its reconcile did"
    assert controller_tasks(run.name) == []


# -- item 2: a worker never dies silently --------------------------------------------------------


async def test_cancelled_error_from_someone_elses_future_is_a_reconcile_error() -> None:
    seen: list[str] = []
    loop = asyncio.get_running_loop()

    async def handler(req: reconcile.Request) -> reconcile.Result:
        seen.append(req.name)
        if req.name == "a" and seen.count("a") == 1:
            future: asyncio.Future[None] = loop.create_future()
            loop.call_soon(future.cancel)  # e.g. a shared client call cancelled by its owner
            await future
        return reconcile.Result()

    with log_testing.capture_logs() as logs:
        run = Running(handler)
        run.send("a")
        run.send("b")
        await helpers.eventually(lambda: "b" in seen)
        assert count("controller_runtime_reconcile_errors_total", run.name) == 1
        assert count("controller_runtime_active_workers", run.name) == 0
        run.clock.advance(0.005)  # the rate-limited retry of "a"
        await helpers.eventually(lambda: seen.count("a") == 2)
        await run.finish()
    [failure] = [e for e in logs if e["event"].startswith("reconcile failed")]
    assert isinstance(failure["exc_info"], asyncio.CancelledError)


async def test_base_exception_from_a_reconciler_is_a_reconcile_error() -> None:
    class Odd(BaseException):
        pass

    seen: list[str] = []

    async def handler(req: reconcile.Request) -> reconcile.Result:
        seen.append(req.name)
        if req.name == "a":
            raise Odd("not an Exception")
        return reconcile.Result()

    run = Running(handler)
    run.send("a")
    run.send("b")
    await helpers.eventually(lambda: "b" in seen)
    assert count("controller_runtime_reconcile_errors_total", run.name) == 1
    await run.finish()


async def test_a_key_that_is_not_a_request_is_logged_and_dropped() -> None:
    seen: list[str] = []

    async def handler(req: reconcile.Request) -> reconcile.Result:
        seen.append(req.name)
        return reconcile.Result()

    with log_testing.capture_logs() as logs:
        run = Running(handler)
        run.channel.send("ns/a")  # type: ignore[arg-type]  # a map function's mistake
        run.send("b")
        await helpers.eventually(lambda: seen == ["b"])
        assert count("controller_runtime_active_workers", run.name) == 0
        await run.finish()
    [error] = [e for e in logs if e["log_level"] == "error"]
    assert "not a Request" in error["event"]
    assert error["key"] == "'ns/a'"


async def test_an_engine_failure_fails_start_loudly() -> None:
    class BrokenLimiter:
        def when(self, item: Hashable) -> float:
            raise ZeroDivisionError("limiter bug")

        def forget(self, item: Hashable) -> None:
            return None

        def num_requeues(self, item: Hashable) -> int:
            return 0

    async def handler(req: reconcile.Request) -> reconcile.Result:
        raise RuntimeError("transient")

    with log_testing.capture_logs() as logs:
        run = Running(handler, rate_limiter=BrokenLimiter(), max_concurrent_reconciles=2)
        run.send("a")
        with pytest.raises(RuntimeError, match="worker failed") as info:
            await asyncio.wait_for(run.task, 5)
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert controller_tasks(run.name) == []
    assert any(e["log_level"] == "error" and "worker failed" in e["event"] for e in logs)


# -- item 4: a wrapped TerminalError is terminal ---------------------------------------------------


async def _terminal_in_group() -> None:
    async def fail() -> None:
        raise reconcile.TerminalError("spec is invalid")

    async with asyncio.TaskGroup() as group:
        group.create_task(fail())


async def _terminal_as_cause() -> None:
    try:
        raise reconcile.TerminalError("spec is invalid")
    except reconcile.TerminalError as exc:
        raise RuntimeError("while applying the spec") from exc


async def _terminal_deep() -> None:
    try:
        await _terminal_in_group()
    except ExceptionGroup as group:
        raise ExceptionGroup("outer", [ValueError("other"), RuntimeError("x")]) from group


@pytest.mark.parametrize("raiser", [_terminal_in_group, _terminal_as_cause, _terminal_deep])
async def test_wrapped_terminal_error_is_not_retried(raiser: Callable[[], Awaitable[None]]) -> None:
    calls = 0

    async def handler(req: reconcile.Request) -> reconcile.Result:
        nonlocal calls
        calls += 1
        await raiser()
        return reconcile.Result()

    run = Running(handler)
    run.send("a")
    await helpers.eventually(lambda: calls == 1)
    await run.ctrl.wait_idle()
    run.clock.advance(2000)
    await run.ctrl.wait_idle()
    assert calls == 1, "a terminal error, however wrapped, is not requeued"
    assert count("controller_runtime_terminal_reconcile_errors_total", run.name) == 1
    assert run.ctrl.queue.waiting == 0
    await run.finish()


async def test_terminal_error_only_as_context_is_retried() -> None:
    calls = 0

    async def handler(req: reconcile.Request) -> reconcile.Result:
        nonlocal calls
        calls += 1
        try:
            raise reconcile.TerminalError("first")
        except reconcile.TerminalError:
            raise RuntimeError("cleanup failed") from None

    run = Running(handler)
    run.send("a")
    await helpers.eventually(lambda: calls == 1)
    run.clock.advance(0.005)
    await helpers.eventually(lambda: calls == 2)
    await run.finish()


# -- item 5: a stop while waiting for caches is honoured at once -----------------------------------


class NeverSynced(source.Channel):
    def __init__(self) -> None:
        super().__init__()
        self.waiting = asyncio.Event()

    async def wait_for_sync(self) -> None:
        self.waiting.set()
        await asyncio.Event().wait()


async def test_stop_while_waiting_for_cache_sync_returns_promptly() -> None:
    async def handler(req: reconcile.Request) -> reconcile.Result:
        raise AssertionError("no reconcile before the caches sync")

    src = NeverSynced()
    ctrl = controller.Controller(
        unique(), handler, options=controller.Options(cache_sync_timeout=3600)
    )
    ctrl.watch(src)
    stop = asyncio.Event()
    task = asyncio.create_task(ctrl.start(stop))
    await asyncio.wait_for(src.waiting.wait(), 5)
    stop.set()
    await asyncio.wait_for(task, 5)  # returns, no TimeoutError
    assert ctrl.queue.shutting_down


async def test_cancel_while_waiting_for_cache_sync_shuts_the_queue() -> None:
    async def handler(req: reconcile.Request) -> reconcile.Result:
        return reconcile.Result()

    src = NeverSynced()
    ctrl = controller.Controller(unique(), handler)
    ctrl.watch(src)
    task = asyncio.create_task(ctrl.start(asyncio.Event()))
    await asyncio.wait_for(src.waiting.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert ctrl.queue.shutting_down


# -- item 6: controller names are unique per process -----------------------------------------------


async def _noop(req: reconcile.Request) -> reconcile.Result:
    return reconcile.Result()


def test_duplicate_controller_name_is_rejected() -> None:
    name = unique("dup")
    controller.Controller(name, _noop)
    with pytest.raises(ValueError, match=f"controller named {name!r} already exists"):
        controller.Controller(name, _noop)


def test_name_validation_can_be_skipped() -> None:
    name = unique("dup")
    controller.Controller(name, _noop)
    skip = controller.Options(skip_name_validation=True)
    twin = controller.Controller(name, _noop, options=skip)
    assert twin.name == name


def test_names_taken_inside_names_released_are_free_after_it() -> None:
    kept, released = unique("kept"), unique("released")
    controller.Controller(kept, _noop)
    with controller.names_released():
        controller.Controller(released, _noop)
        with pytest.raises(ValueError, match="already exists"):
            controller.Controller(released, _noop)  # still unique inside the block
    controller.Controller(released, _noop)  # free again
    with pytest.raises(ValueError, match="already exists"):
        controller.Controller(kept, _noop)  # taken before the block: still taken


def test_a_rejected_options_error_does_not_reserve_the_name() -> None:
    name = unique("dup")
    with pytest.raises(TypeError):
        controller.Controller(name, 42)  # type: ignore[arg-type]
    controller.Controller(name, _noop)


async def test_workqueue_series_carry_the_controller_label() -> None:
    async def handler(req: reconcile.Request) -> reconcile.Result:
        return reconcile.Result()

    run = Running(handler)
    run.send("a")
    await helpers.eventually(
        lambda: count("controller_runtime_reconcile_total", run.name, result="success") == 1
    )
    labels = {"controller": run.name, "name": run.name}
    assert metrics.registry.get_sample_value("workqueue_adds_total", labels) == 1
    await run.finish()
