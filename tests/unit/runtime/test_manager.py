"""The manager's supervision, leader election and shutdown, on the fake client."""

from __future__ import annotations

import asyncio
import pathlib
import time
from typing import Any

import pytest
import yaml
from pydantic_settings import CliApp

from controllers import main as main_
from runtime import leaderelection, manager, metrics
from runtime.client import client as client_
from runtime.client import errors, resources
from runtime.testing import fake
from tests.unit import helpers

ROOT = helpers.ROOT
LEASES = leaderelection.LEASES
CONFIGMAPS = resources.default_registry.for_kind("v1", "ConfigMap")


def options(lease: str, **overrides: Any) -> manager.Options:
    settings: dict[str, Any] = {
        "name": "test-operator",
        "metrics_bind_address": "0",
        "health_probe_bind_address": "0",
        "leader_election": True,
        "leader_election_id": lease,
        "leader_election_namespace": "default",
        "lease_duration": 1,
        "renew_deadline": 0.5,
        "retry_period": 0.1,
    }
    return manager.Options(**{**settings, **overrides})


class Worker:
    """A runnable that, once asked to stop, goes on working for ``linger`` s (a slow
    reconcile); it counts the steps it takes after its stop and notes a cancellation."""

    def __init__(self, *, leader: bool = True, linger: float = 60.0) -> None:
        self.needs_leader_election = leader
        self.linger = linger
        self.running = asyncio.Event()
        self.done = False
        self.cancelled = False
        self.steps_after_stop = 0

    async def start(self, stop: asyncio.Event) -> None:
        self.running.set()
        try:
            await stop.wait()
            end = time.monotonic() + self.linger
            while time.monotonic() < end:
                await asyncio.sleep(0.02)
                self.steps_after_stop += 1
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        finally:
            self.done = True


def lease_of(client: fake.FakeClient, name: str, namespace: str = "default") -> dict[str, Any]:
    for lease in client.objects(LEASES):
        if lease["metadata"]["name"] == name and lease["metadata"]["namespace"] == namespace:
            return lease
    return {}


async def finish(task: asyncio.Task[None], stop: asyncio.Event) -> None:
    """Stop a manager left running by a failed assertion, so no task leaks."""
    stop.set()
    if not task.done():
        task.cancel()
    await asyncio.gather(task, return_exceptions=True)


# -- 5: stop while waiting for the caches ----------------------------------------------------


class Unlistable(fake.FakeClient):
    """RBAC forbids listing: the cache never syncs."""

    async def list(self, *args: Any, **kwargs: Any) -> Any:
        self._record("list", CONFIGMAPS)
        raise errors.Forbidden(403, "Forbidden", "configmaps is forbidden")

    def watch(self, *args: Any, **kwargs: Any) -> Any:
        raise errors.Forbidden(403, "Forbidden", "configmaps is forbidden")


async def test_stop_while_waiting_for_the_caches_returns_promptly() -> None:
    client = Unlistable()
    mgr = manager.Manager(client, options("sync-stop", cache_sync_timeout=30))  # type: ignore[arg-type]
    mgr.cache.informer(CONFIGMAPS)
    worker = Worker()
    mgr.add(worker)
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        await helpers.eventually(lambda: any(verb == "list" for verb, _, _ in client.calls))
        stop.set()
        started = time.monotonic()
        await asyncio.wait_for(asyncio.shield(task), 3)  # not the 30 s sync timeout
        assert time.monotonic() - started < 3
        assert not worker.running.is_set()
    finally:
        await finish(task, stop)


# -- 16: a lost lease stops the controllers at once ------------------------------------------


async def test_a_lost_lease_cancels_leader_runnables_at_once() -> None:
    client = fake.FakeClient()
    mgr = manager.Manager(client, options("lost-lease", graceful_shutdown_timeout=20))  # type: ignore[arg-type]
    worker = Worker()
    mgr.add(worker)
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        await asyncio.wait_for(worker.running.wait(), 5)

        async def unavailable(*args: object, **kwargs: object) -> dict[str, object]:
            raise errors.ServerError(503, "ServiceUnavailable", "etcd is down")

        client.get = unavailable  # type: ignore[method-assign]
        with pytest.raises(manager.LeadershipLost):
            # renew deadline 0.5 s; the old code gave the worker its 20 s graceful timeout
            await asyncio.wait_for(asyncio.shield(task), 4)
        assert worker.cancelled, "the leader runnable is cancelled, not asked to finish"
        assert worker.steps_after_stop == 0
    finally:
        await finish(task, stop)


async def test_serve_exits_non_zero_when_the_lease_is_lost() -> None:
    client = fake.FakeClient()
    mgr = manager.Manager(client, options("lost-serve"))  # type: ignore[arg-type]
    worker = Worker()
    mgr.add(worker)
    task = asyncio.create_task(manager.serve(mgr))
    try:
        await asyncio.wait_for(worker.running.wait(), 5)

        async def unavailable(*args: object, **kwargs: object) -> dict[str, object]:
            raise errors.ServerError(503, "ServiceUnavailable", "etcd is down")

        client.get = unavailable  # type: ignore[method-assign]
        assert await asyncio.wait_for(asyncio.shield(task), 4) == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_lease_lost_during_a_graceful_stop_cancels_at_once() -> None:
    client = fake.FakeClient()
    mgr = manager.Manager(client, options("lost-while-stopping", graceful_shutdown_timeout=20))  # type: ignore[arg-type]
    worker = Worker()
    mgr.add(worker)
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        await asyncio.wait_for(worker.running.wait(), 5)
        stop.set()  # the worker lingers: the elector keeps renewing meanwhile
        await helpers.eventually(lambda: worker.steps_after_stop > 0)

        async def unavailable(*args: object, **kwargs: object) -> dict[str, object]:
            raise errors.ServerError(503, "ServiceUnavailable", "etcd is down")

        client.get = unavailable  # type: ignore[method-assign]
        await asyncio.wait_for(asyncio.shield(task), 4)  # not the 20 s budget
        assert worker.cancelled
    finally:
        await finish(task, stop)


# -- 17: the elector is supervised -----------------------------------------------------------


async def test_an_elector_that_dies_fails_the_manager_and_keeps_the_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = fake.FakeClient()
    mgr = manager.Manager(client, options("elector-dies"))  # type: ignore[arg-type]
    worker = Worker()
    mgr.add(worker)

    async def broken_renew(self: leaderelection.LeaderElector, stop: asyncio.Event) -> None:
        await worker.running.wait()
        raise RuntimeError("a bug in the renew loop")

    monkeypatch.setattr(leaderelection.LeaderElector, "_renew", broken_renew)
    releases: list[bool] = []  # for each release: had the leader runnable stopped?
    update = client.update

    async def recording_update(obj: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        if obj.get("kind") == "Lease" and obj["spec"].get("holderIdentity") is None:
            releases.append(worker.done)
        return await update(obj, **kwargs)

    client.update = recording_update  # type: ignore[method-assign]
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        with pytest.raises(RuntimeError, match="leader election"):
            await asyncio.wait_for(asyncio.shield(task), 5)
        assert worker.cancelled, "we may not be leader any more: no grace"
        assert all(releases), "the lease was released while a controller ran"
        assert mgr.elector is not None
        assert lease_of(client, "elector-dies")["spec"]["holderIdentity"] == (
            mgr.elector.options.identity
        )
    finally:
        await finish(task, stop)


async def test_an_elector_that_dies_before_winning_fails_the_manager(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = fake.FakeClient()
    mgr = manager.Manager(client, options("dies-early"))  # type: ignore[arg-type]
    worker = Worker()
    mgr.add(worker)

    async def broken_acquire(self: leaderelection.LeaderElector, stop: asyncio.Event) -> bool:
        raise RuntimeError("a bug in the acquire loop")

    monkeypatch.setattr(leaderelection.LeaderElector, "_acquire", broken_acquire)
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        with pytest.raises(RuntimeError, match="leader election"):
            await asyncio.wait_for(asyncio.shield(task), 5)
        assert not worker.running.is_set()
    finally:
        await finish(task, stop)


async def test_a_runnable_failing_while_waiting_for_the_lease_fails_the_manager() -> None:
    client = fake.FakeClient()
    await client.create({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "held", "namespace": "default"},
        "spec": {"holderIdentity": "someone-else", "leaseDurationSeconds": 60},
    })  # fmt: skip
    mgr = manager.Manager(client, options("held"))  # type: ignore[arg-type]

    class Failing:
        needs_leader_election = False

        async def start(self, stop: asyncio.Event) -> None:
            await asyncio.sleep(0.1)
            raise ValueError("boom")

    worker = Worker()
    mgr.add(worker)
    mgr.add(Failing())
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        with pytest.raises(RuntimeError, match="failed") as caught:
            await asyncio.wait_for(asyncio.shield(task), 3)
        assert isinstance(caught.value.__cause__, ValueError)
        assert not worker.running.is_set()
    finally:
        await finish(task, stop)


# -- 19: shutdown ----------------------------------------------------------------------------


async def test_shutdown_has_one_budget_for_all_runnables() -> None:
    client = fake.FakeClient()
    mgr = manager.Manager(client, options("budget", graceful_shutdown_timeout=1.5))  # type: ignore[arg-type]
    leader, other = Worker(leader=True), Worker(leader=False)
    mgr.add(leader)
    mgr.add(other)
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        await asyncio.wait_for(asyncio.gather(leader.running.wait(), other.running.wait()), 5)
        started = time.monotonic()
        stop.set()
        await asyncio.wait_for(asyncio.shield(task), 10)
        elapsed = time.monotonic() - started
        # 1.5 s in all, not 1.5 s per group (3 s and more before)
        assert elapsed < 2.4, f"shutdown took {elapsed:.2f} s"
        assert leader.cancelled
        assert other.cancelled
    finally:
        await finish(task, stop)


async def test_the_lease_is_released_once_the_leader_runnables_stopped() -> None:
    client = fake.FakeClient()
    mgr = manager.Manager(client, options("release-order"))  # type: ignore[arg-type]
    leader = Worker(leader=True, linger=0.3)
    other = Worker(leader=False, linger=0)
    mgr.add(leader)
    mgr.add(other)
    order: list[str] = []
    update = client.update

    async def recording_update(obj: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        if obj.get("kind") == "Lease" and obj["spec"].get("holderIdentity") is None:
            order.append(f"release (leader done: {leader.done}, other done: {other.done})")
        return await update(obj, **kwargs)

    client.update = recording_update  # type: ignore[method-assign]
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        await asyncio.wait_for(leader.running.wait(), 5)
        stop.set()
        await asyncio.wait_for(asyncio.shield(task), 5)
        assert order == ["release (leader done: True, other done: False)"]
        assert lease_of(client, "release-order")["spec"].get("holderIdentity") is None
    finally:
        await finish(task, stop)


def test_fractional_lease_durations_are_rejected_when_the_manager_is_made() -> None:
    with pytest.raises(ValueError, match="whole number of seconds"):
        manager.Manager(fake.FakeClient(), options("fraction", lease_duration=1.5))  # type: ignore[arg-type]
    # without leader election, the lease settings are not used
    manager.Manager(
        fake.FakeClient(),  # type: ignore[arg-type]
        options("fraction", leader_election=False, lease_duration=1.5),
    )


# -- 20: leader election runs without leader runnables ---------------------------------------


async def test_leader_election_runs_without_leader_runnables() -> None:
    client = fake.FakeClient()
    mgr = manager.Manager(client, options("no-leaders"))  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        await helpers.eventually(lambda: lease_of(client, "no-leaders"))
        assert mgr.elector is not None
        holder = lease_of(client, "no-leaders")["spec"]["holderIdentity"]
        assert holder == mgr.elector.options.identity
        status = metrics.registry.get_sample_value(
            "leader_election_master_status", {"name": "no-leaders"}
        )
        assert status == 1
    finally:
        await finish(task, stop)


# -- 15: the lease lives in the pod's namespace ----------------------------------------------


async def test_the_lease_namespace_defaults_to_the_pods(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "operator-system")
    client = fake.FakeClient()
    await client.create(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "operator-system"}}
    )
    mgr = manager.Manager(
        client,  # type: ignore[arg-type]
        options("pod-ns", leader_election_namespace=None),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        await helpers.eventually(lambda: client.objects(LEASES))
        [lease] = client.objects(LEASES)
        assert lease["metadata"]["namespace"] == "operator-system"
    finally:
        await finish(task, stop)


def test_manager_options_default_to_the_pods_namespace() -> None:
    assert manager.Options(name="x").leader_election_namespace is None


def test_the_binary_defaults_to_the_pods_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAYSERVICE_LEADER_ELECTION_NAMESPACE", raising=False)
    settings = CliApp.run(main_.Settings, cli_args=[])
    assert settings.leader_election_namespace is None
    settings = CliApp.run(main_.Settings, cli_args=["--leader-election-namespace", "ops"])
    assert settings.leader_election_namespace == "ops"


# -- the deployment: the lease namespace reaches the pod, the budget fits the grace period --


def _manifest(path: str) -> dict[str, Any]:
    loaded = yaml.safe_load((ROOT / path).read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_the_deployment_can_hold_its_lease_and_stop_in_time() -> None:
    deployment = _manifest("config/manager/manager.yaml")
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    env = {e["name"]: e for e in container.get("env", [])}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert "--leader-election-namespace" not in " ".join(container.get("args", []))
    # the leases RBAC is granted where the pod runs, so the default namespace can lead
    role = _manifest("config/rbac/leader_election_role.yaml")
    binding = _manifest("config/rbac/leader_election_role_binding.yaml")
    namespace = deployment["metadata"]["namespace"]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == namespace
    lease_rules = [r for r in role["rules"] if "leases" in r["resources"]]
    assert {"get", "create", "update"} <= {v for r in lease_rules for v in r["verbs"]}
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": namespace}
    ]
    # SIGKILL must not cut the shutdown short
    budget = manager.Options(name="x").graceful_shutdown_timeout
    assert pod["terminationGracePeriodSeconds"] > budget


async def test_a_token_from_the_kubeconfig_is_sent(tmp_path: pathlib.Path) -> None:
    # kubernetes-asyncio keeps the token under "BearerToken" (in-cluster too): a client that
    # looked for "authorization" talked to the API server as system:anonymous.
    kubeconfig = tmp_path / "kubeconfig"
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "s3cret"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }  # fmt: skip
    kubeconfig.write_text(yaml.safe_dump(config))
    client = await client_.Client.from_kubeconfig(kubeconfig)
    try:
        headers = await client._headers(None)
    finally:
        await client.close()
    assert headers["Authorization"] == "Bearer s3cret"
