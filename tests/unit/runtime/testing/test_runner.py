"""runtime.testing.runner without a server: a real Manager on the fake client for the
promises about up and logs, stand-in managers for the ways a manager can misbehave."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import types
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import structlog

import runtime
from examples import configmap_mirror
from runtime import controller
from runtime.testing import fake, runner

CONFIGMAPS = runtime.client.resources.default_registry.for_kind("v1", "ConfigMap")


def quiet_manager() -> runtime.Manager:
    return runtime.Manager(
        fake.FakeClient(),  # type: ignore[arg-type]
        runtime.ManagerOptions(
            name="quiet",
            metrics_bind_address="0",
            health_probe_bind_address="0",
            graceful_shutdown_timeout=5,
        ),
    )


@dataclasses.dataclass
class StandIn:
    """Just enough of a Manager for the runner: ``add``, ``options``, ``start``."""

    start_: Callable[[asyncio.Event, list[Any]], Awaitable[None]]
    graceful_shutdown_timeout: float = 0.2
    runnables: list[Any] = dataclasses.field(default_factory=list)

    @property
    def options(self) -> Any:
        return types.SimpleNamespace(graceful_shutdown_timeout=self.graceful_shutdown_timeout)

    def add(self, runnable: Any) -> None:
        self.runnables.append(runnable)

    async def start(self, stop: asyncio.Event) -> None:
        await self.start_(stop, self.runnables)


async def start_runnables(stop: asyncio.Event, runnables: list[Any]) -> None:
    """What a manager does once up: run the runnables until stopped."""
    async with asyncio.TaskGroup() as group:
        for runnable in runnables:
            group.create_task(runnable.start(stop))


async def test_up_means_the_controllers_run_and_the_log_is_the_manager_s_only() -> None:
    manager = quiet_manager()
    reconciled = asyncio.Event()

    async def reconcile(request: runtime.Request) -> runtime.Result:
        structlog.get_logger("test.reconciler").info("reconciling", key=str(request))
        reconciled.set()
        return runtime.Result()

    with controller.names_released():
        runtime.Builder(manager).for_(CONFIGMAPS).named("runner-unit").complete(reconcile)
    await manager.client.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "default", "name": "a"}}
    )
    async with runner.running(manager) as run:
        assert manager.cache.has_synced()
        await asyncio.wait_for(reconciled.wait(), 5)
        structlog.get_logger("test.body").info("a line of the body")
        run.check()  # nothing to raise while it runs
    events = [(r.event, r.fields.get("controller")) for r in run.log]
    assert ("caches synced", None) in events
    assert ("reconciling", "runner-unit") in events  # a reconcile's bound context is kept
    assert all(r.event != "a line of the body" for r in run.log)
    assert events[-1] == ("stopped", None)
    assert "reconciling" in run.log_text()


async def test_the_log_tells_each_pass_and_what_create_or_update_did() -> None:
    """One debug line per pass and per create_or_update, with the pass's key bound."""
    manager = quiet_manager()
    with controller.names_released():
        configmap_mirror.build(manager)
    meta = {"namespace": "default", "name": "a", "labels": {"mirror": "true"}}
    source = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"}, "metadata": meta}
    await manager.client.create(source)
    async with runner.running(manager) as run:
        await runtime.testing.eventually(
            lambda: any(r.fields.get("operation") == "created" for r in run.log), within=5
        )
    written = [r for r in run.log if r.event == "create_or_update"]
    assert written[0].level == "debug"
    assert written[0].fields["operation"] == "created"
    assert written[0].fields["object"] == "default/a-mirror"
    assert written[0].fields["resource"] == "configmaps"
    assert written[0].fields["name"] == "a", "inside the pass: its key is bound"
    passes = [r for r in run.log if r.event == "reconciled"]
    assert passes, "a line per pass"
    assert passes[0].level == "debug"
    assert passes[0].fields["controller"] == "configmap-mirror"
    assert passes[0].fields["reconcile_id"] == written[0].fields["reconcile_id"]
    assert passes[0].fields["requeue_after"] is None
    assert "create_or_update" in run.log_text()


async def test_a_failure_before_up_is_raised_by_the_with_statement() -> None:
    async def fail(stop: asyncio.Event, runnables: list[Any]) -> None:
        raise PermissionError("forbidden: cannot list configmaps")

    log: list[runner.LogRecord] = []
    with pytest.raises(PermissionError, match="forbidden"):
        async with runner.running(StandIn(fail), log=log):  # type: ignore[arg-type]
            pytest.fail("not up")


async def test_a_manager_that_returns_before_up_is_an_error() -> None:
    async def give_up(stop: asyncio.Event, runnables: list[Any]) -> None:
        return None

    with pytest.raises(RuntimeError, match="returned before it was up"):
        async with runner.running(StandIn(give_up)):  # type: ignore[arg-type]
            pytest.fail("not up")


async def test_not_up_in_time_is_not_up_and_the_manager_is_stopped() -> None:
    stopped = asyncio.Event()

    async def never_up(stop: asyncio.Event, runnables: list[Any]) -> None:
        await stop.wait()
        stopped.set()

    with pytest.raises(runner.NotUp, match=r"0\.05 s"):
        async with runner.running(StandIn(never_up), up_timeout=0.05):  # type: ignore[arg-type]
            pytest.fail("not up")
    assert stopped.is_set()


async def test_a_manager_that_does_not_stop_is_cancelled_and_reported() -> None:
    cancelled = asyncio.Event()

    async def deaf(stop: asyncio.Event, runnables: list[Any]) -> None:
        for runnable in runnables:
            asyncio.get_running_loop().call_soon(runnable.up.set)
        try:
            await asyncio.Event().wait()  # ignores stop
        except asyncio.CancelledError:
            cancelled.set()
            raise

    stand_in = StandIn(deaf, graceful_shutdown_timeout=0.05)
    with pytest.raises(runner.NotStopped, match="did not stop"):
        async with runner.running(stand_in, stop_grace=0.05):  # type: ignore[arg-type]
            pass
    assert cancelled.is_set()


async def test_a_failure_while_running_is_raised_at_the_end_and_by_check() -> None:
    broke = asyncio.Event()

    async def breaks(stop: asyncio.Event, runnables: list[Any]) -> None:
        async with asyncio.TaskGroup() as group:
            for runnable in runnables:
                group.create_task(runnable.start(stop))
            await asyncio.sleep(0.01)
            raise OSError("watch connection lost")

    async def body() -> None:
        async with runner.running(StandIn(breaks)) as run:  # type: ignore[arg-type]
            while True:
                try:
                    run.check()
                except BaseException:
                    broke.set()
                    raise
                await asyncio.sleep(0.01)

    with pytest.raises(ExceptionGroup) as caught:
        await body()
    assert broke.is_set()
    assert caught.group_contains(OSError, match="watch connection lost")


async def test_the_body_s_failure_is_the_context_of_the_manager_s() -> None:
    async def breaks_when_stopped(stop: asyncio.Event, runnables: list[Any]) -> None:
        await start_runnables(stop, runnables)
        raise OSError("failed while stopping")

    async def body() -> None:
        async with runner.running(StandIn(breaks_when_stopped)):  # type: ignore[arg-type]
            raise AssertionError("the test failed")

    with pytest.raises(OSError, match="failed while stopping") as caught:
        await body()
    assert isinstance(caught.value.__context__, AssertionError)


async def test_a_body_failure_alone_is_raised_as_it_is() -> None:
    async def body() -> None:
        async with runner.running(StandIn(start_runnables)):  # type: ignore[arg-type]
            raise KeyError("the test's own")

    with pytest.raises(KeyError, match="the test's own"):
        await body()


async def test_check_says_a_manager_that_stopped_on_its_own_or_was_cancelled() -> None:
    run = runner.Running(quiet_manager())
    run.check()  # not started: nothing to say

    async def returns() -> None:
        return None

    run._task = asyncio.create_task(returns())
    await run._task
    with pytest.raises(RuntimeError, match="stopped before it was asked"):
        run.check()
    run._task = asyncio.create_task(asyncio.sleep(10))
    run._task.cancel()
    await asyncio.gather(run._task, return_exceptions=True)
    with pytest.raises(RuntimeError, match="cancelled"):
        run.check()


def test_a_log_record_reads_as_one_line() -> None:
    at = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    record = runner.LogRecord(at, "info", "caches synced", {"b": 2, "a": "x"})
    assert str(record) == "2026-01-01T00:00:00.000+00:00 [info   ] caches synced a='x' b=2"
    assert str(runner.LogRecord(at, "error", "bare", {})).endswith("[error  ] bare")


def test_a_logged_exception_is_recorded_with_its_traceback() -> None:
    at = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    try:
        raise ValueError("bad spec")
    except ValueError as exc:
        record = runner.LogRecord(at, "error", "reconcile failed", {"exc_info": exc, "n": 1})
    text = str(record)
    assert text.startswith("2026-01-01T00:00:00.000+00:00 [error  ] reconcile failed n=1\n")
    assert "Traceback (most recent call last)" in text
    assert text.endswith("ValueError: bad spec")


async def test_log_exception_in_the_manager_records_the_exception_being_handled() -> None:
    logged = asyncio.Event()

    class Failing:
        needs_leader_election = False

        async def start(self, stop: asyncio.Event) -> None:
            try:
                raise LookupError("no such thing")
            except LookupError:
                structlog.get_logger("test.runnable").exception("it broke")
            logged.set()
            await stop.wait()

    manager = quiet_manager()
    manager.add(Failing())
    async with runner.running(manager) as run:
        await asyncio.wait_for(logged.wait(), 5)
    [record] = [r for r in run.log if r.event == "it broke"]
    assert isinstance(record.fields["exc_info"], LookupError)
    assert "LookupError: no such thing" in str(record)


async def test_a_processor_tuple_is_replaced_by_a_list_that_records() -> None:
    saved = structlog.get_config()["processors"]
    structlog.configure(processors=tuple(p for p in saved if p is not runner._record))
    try:
        async with runner.running(quiet_manager()) as run:
            pass
        assert any(r.event == "caches synced" for r in run.log)
    finally:
        structlog.configure(processors=saved)
