"""The manager's servers and edges, in-process on the fake client: the probe
and metrics servers over real HTTP, a cache-sync timeout, runnables that are cancelled or
end on their own, a runnable that ignores cancellation (the lease is then kept), a stop while
waiting to lead, :func:`runtime.manager.serve`'s exit codes and signal handling, and the
elector's races and timeouts.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import socket
import time
from collections.abc import Awaitable, Iterator
from typing import Any

import aiohttp
import prometheus_client
import pytest
from structlog import testing as log_testing

from runtime import leaderelection, manager, metrics
from runtime.client import errors, resources
from runtime.testing import fake
from tests.unit import helpers

LEASES = leaderelection.LEASES
CONFIGMAPS = resources.default_registry.for_kind("v1", "ConfigMap")


def options(lease: str = "", **overrides: Any) -> manager.Options:
    settings: dict[str, Any] = {
        "name": "test-operator",
        "metrics_bind_address": "0",
        "health_probe_bind_address": "0",
        "leader_election": bool(lease),
        "leader_election_id": lease or "unused",
        "leader_election_namespace": "default",
        "lease_duration": 1,
        "renew_deadline": 0.5,
        "retry_period": 0.1,
        "graceful_shutdown_timeout": 5,
    }
    return manager.Options(**{**settings, **overrides})


class Blocking:
    """A runnable that runs until asked to stop."""

    def __init__(self, *, leader: bool = True) -> None:
        self.needs_leader_election = leader
        self.running = asyncio.Event()
        self.stopped = False

    async def start(self, stop: asyncio.Event) -> None:
        self.running.set()
        await stop.wait()
        self.stopped = True


async def finish(task: asyncio.Task[Any], stop: asyncio.Event | None = None) -> None:
    """End a manager left running by a failed assertion, so no task leaks."""
    if stop is not None:
        stop.set()
    if not task.done():
        task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def http_get(address: tuple[str, int] | None, path: str) -> tuple[int, str, str]:
    assert address is not None
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
        session.get(f"http://{address[0]}:{address[1]}{path}") as response,
    ):
        return response.status, await response.text(), response.headers["Content-Type"]


def lease_of(client: fake.FakeClient, name: str) -> dict[str, Any]:
    [lease] = [o for o in client.objects(LEASES) if o["metadata"]["name"] == name]
    return lease


async def held_lease(client: fake.FakeClient, name: str, holder: str = "someone-else") -> None:
    await client.create({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 60},
    })  # fmt: skip


def lease_errors(name: str, operation: str, reason: str) -> float:
    value = metrics.registry.get_sample_value(
        "leader_election_errors_total", {"name": name, "operation": operation, "reason": reason}
    )
    return value or 0.0


class Unlistable(fake.FakeClient):
    """RBAC forbids listing: the cache never syncs."""

    async def list(self, *args: Any, **kwargs: Any) -> Any:
        raise errors.Forbidden(403, "Forbidden", "configmaps is forbidden")

    def watch(self, *args: Any, **kwargs: Any) -> Any:
        raise errors.Forbidden(403, "Forbidden", "configmaps is forbidden")


# -- probes and metrics over HTTP ------------------------------------------------------------


async def test_failing_health_checks_answer_503_naming_each_failure() -> None:
    mgr = manager.Manager(
        fake.FakeClient(),  # type: ignore[arg-type]
        options(health_probe_bind_address="127.0.0.1:0", metrics_bind_address="127.0.0.1:0"),
    )

    def raises() -> bool:
        raise ConnectionError("the database is gone")

    async def async_false() -> bool:
        return False

    async def async_true() -> bool:
        return True

    mgr.add_healthz_check("returns-false", lambda: False)
    mgr.add_healthz_check("raises", raises)
    mgr.add_healthz_check("async-false", async_false)
    mgr.add_healthz_check("async-true", async_true)
    mgr.add_readyz_check("not-ready", lambda: False)
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        await helpers.eventually(lambda: mgr._caches_ready)
        assert mgr.probe_address is not None
        assert mgr.probe_address[1] != 0
        status, body, _ = await http_get(mgr.probe_address, "/healthz")
        assert status == 503
        assert body.splitlines() == [
            "[+]ping ok",
            "[-]returns-false failed",
            "[-]raises failed",
            "[-]async-false failed",
            "[+]async-true ok",
            "healthz check failed",
        ]
        status, body, _ = await http_get(mgr.probe_address, "/readyz")
        assert status == 503
        assert body.splitlines() == [
            "[+]ping ok",
            "[+]caches ok",
            "[-]not-ready failed",
            "readyz check failed",
        ]
        # the metrics server is a different one, on its own port
        assert mgr.metrics_address is not None
        assert mgr.metrics_address[1] not in (0, mgr.probe_address[1])
        status, body, content_type = await http_get(mgr.metrics_address, "/metrics")
        assert status == 200
        assert content_type == prometheus_client.CONTENT_TYPE_LATEST
        assert "\nprocess_start_time_seconds " in body, "the framework registry is served"
        status, _, _ = await http_get(mgr.metrics_address, "/healthz")
        assert status == 404, "probes are not served on the metrics port"
        stop.set()
        await asyncio.wait_for(asyncio.shield(task), 5)
        with pytest.raises(aiohttp.ClientConnectionError):
            await http_get(mgr.probe_address, "/healthz")
    finally:
        await finish(task, stop)


async def test_passing_checks_answer_200_and_list_them_only_when_verbose() -> None:
    mgr = manager.Manager(
        fake.FakeClient(),  # type: ignore[arg-type]
        options(health_probe_bind_address="127.0.0.1:0"),
    )

    async def async_true() -> bool:
        return True

    mgr.add_readyz_check("async-true", async_true)
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        await helpers.eventually(lambda: mgr._caches_ready)
        assert mgr.metrics_address is None, "metrics disabled by '0'"
        assert await http_get(mgr.probe_address, "/healthz") == (
            200, "healthz check passed\n", "text/plain; charset=utf-8"
        )  # fmt: skip
        status, body, _ = await http_get(mgr.probe_address, "/readyz?verbose")
        assert status == 200
        assert body.splitlines() == [
            "[+]ping ok",
            "[+]caches ok",
            "[+]async-true ok",
            "readyz check passed",
        ]
    finally:
        await finish(task, stop)


async def test_cache_sync_timeout_fails_start_with_a_clear_error_and_readyz_fails_meanwhile() -> (
    None
):
    mgr = manager.Manager(
        Unlistable(),  # type: ignore[arg-type]
        options(health_probe_bind_address="127.0.0.1:0", cache_sync_timeout=1.0),
    )
    mgr.cache.informer(CONFIGMAPS)
    worker = Blocking(leader=False)
    mgr.add(worker)
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        await helpers.eventually(lambda: mgr.probe_address is not None)
        status, body, _ = await http_get(mgr.probe_address, "/readyz")
        assert (status, "[-]caches failed" in body.splitlines()) == (503, True)
        started = time.monotonic()
        with pytest.raises(TimeoutError, match=r"caches did not sync within 1.0 s .*RBAC"):
            await asyncio.wait_for(asyncio.shield(task), 5)
        assert time.monotonic() - started < 3, "the 1 s timeout, not the 5 s bound"
        assert not worker.running.is_set(), "nothing runs on caches that never synced"
        with pytest.raises(aiohttp.ClientConnectionError):
            await http_get(mgr.probe_address, "/readyz")
    finally:
        await finish(task, stop)


def test_only_runnables_can_be_added() -> None:
    mgr = manager.Manager(fake.FakeClient(), options())  # type: ignore[arg-type]

    class NoStart:
        needs_leader_election = False

    with pytest.raises(TypeError, match="not a runnable"):
        mgr.add(NoStart())  # type: ignore[arg-type]


# -- runnables that end without being asked to ---------------------------------------------


class Returns:
    """Ends on its own, as if its loop had a bug."""

    def __init__(self, *, leader: bool) -> None:
        self.needs_leader_election = leader

    async def start(self, stop: asyncio.Event) -> None:
        await asyncio.sleep(0.05)


class CancelsItself:
    """Ends cancelled from within (a stray ``task.cancel()`` inside it)."""

    needs_leader_election = False

    async def start(self, stop: asyncio.Event) -> None:
        await asyncio.sleep(0.05)
        raise asyncio.CancelledError


@pytest.mark.parametrize("lease", ["", "ends-on-its-own"], ids=["no-election", "election"])
@pytest.mark.parametrize("leader", [True, False], ids=["leader", "non-leader"])
async def test_a_runnable_that_returns_on_its_own_fails_the_manager(
    lease: str, leader: bool
) -> None:
    mgr = manager.Manager(fake.FakeClient(), options(f"{lease}-{leader}".lower() if lease else ""))  # type: ignore[arg-type]
    other = Blocking(leader=not leader)
    mgr.add(Returns(leader=leader))
    mgr.add(other)
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        with pytest.raises(RuntimeError, match="stopped on its own"):
            await asyncio.wait_for(asyncio.shield(task), 5)
        assert not stop.is_set()
        if other.running.is_set():
            assert other.stopped, "the others were asked to stop, not cancelled"
    finally:
        await finish(task, stop)


async def test_a_runnable_cancelled_from_within_fails_the_manager() -> None:
    mgr = manager.Manager(fake.FakeClient(), options())  # type: ignore[arg-type]
    worker = Blocking()
    mgr.add(CancelsItself())
    mgr.add(worker)
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        with pytest.raises(RuntimeError, match="was cancelled"):
            await asyncio.wait_for(asyncio.shield(task), 5)
        assert not task.cancelled(), "a runnable's cancellation is not the manager's"
    finally:
        await finish(task, stop)


# -- leader election from the manager -------------------------------------------------------


async def test_stop_while_waiting_to_lead_returns_cleanly_and_leaves_the_lease_alone() -> None:
    client = fake.FakeClient()
    await held_lease(client, "standby-stop")
    mgr = manager.Manager(client, options("standby-stop"))  # type: ignore[arg-type]
    leader, other = Blocking(leader=True), Blocking(leader=False)
    mgr.add(leader)
    mgr.add(other)
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        await asyncio.wait_for(other.running.wait(), 5)
        await helpers.eventually(lambda: sum(v == "get" for v, _, _ in client.calls) >= 2)
        before = lease_of(client, "standby-stop")
        stop.set()
        await asyncio.wait_for(asyncio.shield(task), 3)  # no exception: a clean stop
        assert not leader.running.is_set(), "never led, so never ran"
        assert other.stopped
        assert mgr.elector is not None
        assert not mgr.elector.elected.is_set()
        assert lease_of(client, "standby-stop") == before, "not ours: not released"
    finally:
        await finish(task, stop)


class Stubborn:
    """A leader runnable that swallows the first cancellation and runs on until freed."""

    needs_leader_election = True

    def __init__(self) -> None:
        self.running = asyncio.Event()
        self.free = asyncio.Event()
        self.cancellations = 0
        self.task: asyncio.Task[Any] | None = None

    async def start(self, stop: asyncio.Event) -> None:
        self.task = asyncio.current_task()
        self.running.set()
        while True:
            try:
                await self.free.wait()
                return
            except asyncio.CancelledError:
                self.cancellations += 1
                if self.cancellations > 1:
                    raise


async def test_a_leader_runnable_ignoring_cancellation_keeps_the_lease_held() -> None:
    client = fake.FakeClient()
    mgr = manager.Manager(client, options("stubborn", graceful_shutdown_timeout=0.3))  # type: ignore[arg-type]
    stubborn = Stubborn()
    mgr.add(stubborn)
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        await asyncio.wait_for(stubborn.running.wait(), 5)
        assert mgr.elector is not None
        identity = mgr.elector.options.identity
        with log_testing.capture_logs() as logs:
            stop.set()
            await asyncio.wait_for(asyncio.shield(task), 5)
        assert stubborn.cancellations == 1
        assert stubborn.task is not None
        assert not stubborn.task.done()
        assert any(e["event"] == "runnable ignores cancellation" for e in logs), logs
        # it may still act as leader: the lease must not be handed to another replica
        assert lease_of(client, "stubborn")["spec"]["holderIdentity"] == identity
    finally:
        stubborn.free.set()
        if stubborn.task is not None:
            await asyncio.wait_for(stubborn.task, 2)
        await finish(task, stop)


# -- serve() and run() ----------------------------------------------------------------------


@pytest.fixture
def signal_handlers() -> Iterator[None]:
    """Restore the process's SIGTERM/SIGINT handlers whatever serve() did to them."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


async def test_serve_stops_cleanly_on_sigterm_and_exits_0(signal_handlers: None) -> None:
    client = fake.FakeClient()
    mgr = manager.Manager(client, options("serve-sigterm"))  # type: ignore[arg-type]
    worker = Blocking()
    mgr.add(worker)
    loop = asyncio.get_running_loop()
    before = signal.getsignal(signal.SIGTERM)
    task = asyncio.create_task(manager.serve(mgr))
    try:
        await asyncio.wait_for(worker.running.wait(), 5)
        # serve() installed its handler before starting the manager: SIGTERM is safe now
        # (checked, so that a serve() without one fails this test, not the test run)
        assert signal.getsignal(signal.SIGTERM) is not before
        os.kill(os.getpid(), signal.SIGTERM)
        assert await asyncio.wait_for(asyncio.shield(task), 5) == 0
        assert worker.stopped, "asked to stop, not cancelled"
        assert lease_of(client, "serve-sigterm")["spec"].get("holderIdentity") is None
        # its handlers are gone once it returned
        assert not loop.remove_signal_handler(signal.SIGTERM)
        assert not loop.remove_signal_handler(signal.SIGINT)
    finally:
        await finish(task)


async def test_serve_exits_1_when_the_manager_fails(signal_handlers: None) -> None:
    mgr = manager.Manager(
        Unlistable(),  # type: ignore[arg-type]
        options(cache_sync_timeout=0.2),
    )
    mgr.cache.informer(CONFIGMAPS)
    closed: list[bool] = []

    async def close() -> None:
        closed.append(True)

    mgr.client.close = close  # type: ignore[method-assign]
    loop = asyncio.get_running_loop()
    with log_testing.capture_logs() as logs:
        assert await asyncio.wait_for(manager.serve(mgr), 5) == 1
    assert closed == [True], "the client is closed on the way out"
    [failure] = [e for e in logs if e["event"] == "manager failed"]
    assert failure["log_level"] == "error"
    assert not loop.remove_signal_handler(signal.SIGTERM)


@pytest.mark.parametrize(
    ("field", "server"),
    [
        ("metrics_bind_address", "the metrics server"),
        ("health_probe_bind_address", "the health probe server"),
    ],
)
async def test_a_busy_port_is_one_line_naming_the_server_and_its_option(
    signal_handlers: None, field: str, server: str
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        mgr = manager.Manager(fake.FakeClient(), options(**{field: f"127.0.0.1:{port}"}))  # type: ignore[arg-type]
        with pytest.raises(manager.BindError) as caught:
            await mgr.start(asyncio.Event())
        assert str(caught.value) == (
            f"{server} cannot listen on 127.0.0.1:{port} (ManagerOptions.{field}): "
            "address already in use"
        )
        assert caught.value.errno == errno.EADDRINUSE
        assert isinstance(caught.value, OSError)
        again = manager.Manager(fake.FakeClient(), options(**{field: f"127.0.0.1:{port}"}))  # type: ignore[arg-type]
        with log_testing.capture_logs() as logs:
            assert await asyncio.wait_for(manager.serve(again), 5) == 1
    [line] = [e for e in logs if e["log_level"] == "error"]
    assert line["event"] == str(caught.value)
    assert "exc_info" not in line, "a bind error is said in one line, without a traceback"


def test_the_servers_listen_on_loopback_unless_told_otherwise() -> None:
    defaults = manager.Options(name="x")
    assert defaults.metrics_bind_address == "127.0.0.1:8080"
    assert defaults.health_probe_bind_address == "127.0.0.1:8081"


def test_run_returns_serves_exit_code(signal_handlers: None) -> None:
    mgr = manager.Manager(fake.FakeClient(), options())  # type: ignore[arg-type]
    mgr.add(Returns(leader=False))
    assert manager.run(mgr) == 1


# -- the elector ----------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def elector_options(identity: str, name: str, **kw: float) -> leaderelection.Options:
    timings: dict[str, Any] = {"lease_duration": 1, "renew_deadline": 0.4, "retry_period": 0.05}
    return leaderelection.Options(
        name=name, namespace="default", identity=identity, **{**timings, **kw}
    )


class GatedGets(fake.FakeClient):
    """Lease reads return only once ``readers`` candidates have read: they all see the same
    resourceVersion, and race on the update."""

    def __init__(self, readers: int) -> None:
        super().__init__()
        self.readers = readers
        self.gate = asyncio.Event()
        self.gated = False
        self._reads = 0

    async def get(self, resource: resources.Resource, namespace: str | None, name: str) -> Any:
        lease = await super().get(resource, namespace, name)
        if self.gated:
            self._reads += 1
            if self._reads >= self.readers:
                self.gate.set()
            await self.gate.wait()
        return lease


async def test_exactly_one_of_two_candidates_takes_over_an_expired_lease() -> None:
    client = GatedGets(readers=2)
    await held_lease(client, "takeover", holder="dead-leader")
    clock = Clock()
    a = leaderelection.LeaderElector(client, elector_options("a", "takeover"), monotonic=clock)
    b = leaderelection.LeaderElector(client, elector_options("b", "takeover"), monotonic=clock)
    # first sight: the lease is held, by our clocks not yet expired
    assert not await a._try_acquire_or_renew()
    assert not await b._try_acquire_or_renew()
    clock.t += 61
    client.gated = True
    updates = client.writes("update")
    with log_testing.capture_logs() as logs:
        won = await asyncio.wait_for(
            asyncio.gather(a._try_acquire_or_renew(), b._try_acquire_or_renew()), 5
        )
    assert sorted(won) == [False, True], won
    assert client.writes("update") == updates + 2, "both tried, with the same resourceVersion"
    winner = "a" if won[0] else "b"
    spec = lease_of(client, "takeover")["spec"]
    assert spec["holderIdentity"] == winner
    assert spec["leaseTransitions"] == 1
    # the loser lost a race (409): logged as ordinary, not counted as an error
    assert lease_errors("takeover", "update", "Conflict") == 0
    raced = [e for e in logs if e["event"] == "another candidate wrote the lease first"]
    assert [e["operation"] for e in raced] == ["update"]
    assert not [e for e in logs if e["log_level"] == "error"], logs


async def test_two_running_candidates_for_an_expired_lease_elect_one() -> None:
    client = GatedGets(readers=2)
    await held_lease(client, "takeover-run", holder="dead-leader")
    clock = Clock()
    a = leaderelection.LeaderElector(client, elector_options("a", "takeover-run"), monotonic=clock)
    b = leaderelection.LeaderElector(client, elector_options("b", "takeover-run"), monotonic=clock)
    assert not await a._try_acquire_or_renew()
    assert not await b._try_acquire_or_renew()
    clock.t += 61  # a's and b's view of the lease is now expired
    client.gated = True
    stop_a, stop_b = asyncio.Event(), asyncio.Event()
    tasks = [asyncio.create_task(a.run(stop_a)), asyncio.create_task(b.run(stop_b))]
    try:
        with log_testing.capture_logs() as logs:
            await asyncio.wait_for(aio_first(a.elected.wait(), b.elected.wait()), 5)
            client.gated = False
            await helpers.eventually(lambda: client.writes("update") >= 2)
        assert [e.get("operation") for e in logs if "first" in e["event"]] == ["update"], logs
        winner, loser = (a, b) if a.elected.is_set() else (b, a)
        # the loser sees a fresh holder renewing: it keeps waiting through a few retries
        for _ in range(3):
            seen = gets(client)
            await helpers.eventually(lambda seen=seen: gets(client) > seen + 1)  # type: ignore[misc]
            assert not loser.elected.is_set()
            assert winner.is_leader
        assert lease_of(client, "takeover-run")["spec"]["holderIdentity"] == winner.options.identity
    finally:
        stop_a.set()
        stop_b.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 5)


def gets(client: fake.FakeClient) -> int:
    return sum(verb == "get" for verb, _, _ in client.calls)


async def aio_first(*waits: Awaitable[Any]) -> None:
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_renewal_that_hangs_times_out_at_the_renew_deadline_and_loses() -> None:
    client = fake.FakeClient()
    name = "renew-hangs"
    elector = leaderelection.LeaderElector(client, elector_options("a", name))
    stop = asyncio.Event()
    task = asyncio.create_task(elector.run(stop))
    try:
        await asyncio.wait_for(elector.elected.wait(), 2)
        renewed = lease_of(client, name)["spec"]["renewTime"]

        async def hangs(*args: object, **kwargs: object) -> dict[str, object]:
            await asyncio.Event().wait()  # the API server never answers
            raise AssertionError("unreachable")

        client.update = hangs  # type: ignore[method-assign]
        started = time.monotonic()
        await asyncio.wait_for(asyncio.shield(task), 3)
        # the hanging call was cut at the renew deadline (0.4 s), not left to hang
        assert time.monotonic() - started < 2.5
        assert elector.lost
        assert not elector.is_leader
        assert lease_errors(name, "renew", "TimeoutError") >= 1
        spec = lease_of(client, name)["spec"]
        assert spec["holderIdentity"] == "a", "a lost lease is not released"
        assert spec["renewTime"] == renewed
    finally:
        await finish(task, stop)


async def test_a_failed_release_is_counted_and_the_elector_still_returns() -> None:
    client = fake.FakeClient()
    name = "release-fails"
    elector = leaderelection.LeaderElector(client, elector_options("a", name))
    stop = asyncio.Event()
    task = asyncio.create_task(elector.run(stop))
    try:
        await asyncio.wait_for(elector.elected.wait(), 2)
        update = client.update

        async def release_fails(obj: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
            if obj["spec"].get("holderIdentity") is None:
                raise errors.ServerError(503, "ServiceUnavailable", "etcd is down")
            return await update(obj, **kwargs)

        client.update = release_fails  # type: ignore[method-assign]
        with log_testing.capture_logs() as logs:
            stop.set()
            await asyncio.wait_for(asyncio.shield(task), 2)  # no exception
        assert lease_errors(name, "release", "ServiceUnavailable") == 1
        assert not [e for e in logs if e["event"] == "released the lease"]
        assert lease_of(client, name)["spec"]["holderIdentity"] == "a"
    finally:
        await finish(task, stop)


async def test_stop_while_acquiring_returns_promptly_without_writing() -> None:
    client = fake.FakeClient()
    name = "acquire-stop"
    await held_lease(client, name)
    # a long retry period: only the stop can end the wait early
    elector = leaderelection.LeaderElector(
        client, elector_options("a", name, lease_duration=15, renew_deadline=10, retry_period=5)
    )
    stop = asyncio.Event()
    task = asyncio.create_task(elector.run(stop))
    try:
        await helpers.eventually(lambda: any(v == "get" for v, _, _ in client.calls))
        writes = client.writes()
        stop.set()
        started = time.monotonic()
        await asyncio.wait_for(asyncio.shield(task), 2)
        assert time.monotonic() - started < 2, "not the 5 s retry period"
        assert not elector.elected.is_set()
        assert client.writes() == writes
        gauge = metrics.registry.get_sample_value("leader_election_master_status", {"name": name})
        assert gauge == 0
    finally:
        await finish(task, stop)


async def test_an_elector_stopped_before_it_runs_makes_no_call() -> None:
    client = fake.FakeClient()
    elector = leaderelection.LeaderElector(client, elector_options("a", "never"))
    stop = asyncio.Event()
    stop.set()
    await asyncio.wait_for(elector.run(stop), 1)
    assert client.calls == []
    assert not elector.elected.is_set()


async def test_a_stop_during_the_winning_call_still_releases_the_lease() -> None:
    client = fake.FakeClient()
    name = "won-while-stopping"
    stop = asyncio.Event()
    create = client.create

    async def create_then_stop(obj: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        created = await create(obj, **kwargs)
        stop.set()  # SIGTERM arrives while the create is in flight
        return created

    client.create = create_then_stop  # type: ignore[method-assign]
    elector = leaderelection.LeaderElector(client, elector_options("a", name))
    await asyncio.wait_for(elector.run(stop), 2)
    assert elector.elected.is_set()
    spec = lease_of(client, name)["spec"]
    assert spec.get("holderIdentity") is None, "released, not left to expire"
    assert spec["leaseDurationSeconds"] == 1
