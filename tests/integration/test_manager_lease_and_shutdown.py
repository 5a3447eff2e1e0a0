"""The manager's leader election and shutdown against the real control plane:
the deployed RBAC, a forbidden lease, a partitioned leader, a second SIGTERM."""

from __future__ import annotations

import asyncio
import pathlib
import signal
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
import yaml
from structlog import testing as log_testing

import runtime
from runtime import metrics
from runtime.client import client as client_
from runtime.client import errors, resources
from runtime.testing import controlplane
from tests.integration import helpers

ROOT = pathlib.Path(__file__).parents[2]
CM = resources.default_registry.for_kind("v1", "ConfigMap")
LEASES = resources.Resource("coordination.k8s.io", "v1", "Lease", "leases")


def manifest(path: str, namespace: str) -> dict[str, Any]:
    """A hand-written manifest of config/, moved to ``namespace``."""
    obj = yaml.safe_load((ROOT / path).read_text())
    assert isinstance(obj, dict)
    obj["metadata"]["namespace"] = namespace
    for subject in obj.get("subjects", []):
        subject["namespace"] = namespace
    return obj


async def deployed_client(
    control_plane: controlplane.ControlPlane, namespace: str, tmp_path: pathlib.Path
) -> client_.Client:
    """A client with the operator's own identity and the leader-election RBAC of
    ``config/rbac``, as if deployed to ``namespace``."""
    account = manifest("config/rbac/service_account.yaml", namespace)
    role = manifest("config/rbac/leader_election_role.yaml", namespace)
    binding = manifest("config/rbac/leader_election_role_binding.yaml", namespace)
    control_plane.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", account)
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    control_plane.request("POST", f"{rbac}/roles", role)
    control_plane.request("POST", f"{rbac}/rolebindings", binding)
    name = account["metadata"]["name"]
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"expirationSeconds": 3600}}  # fmt: skip
    answer = control_plane.request(
        "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", request
    )
    assert control_plane.kubeconfig is not None
    config = yaml.safe_load(control_plane.kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": answer["status"]["token"]}
    path = tmp_path / "operator.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return await client_.Client.from_kubeconfig(path)


async def http_get(url: str) -> tuple[int, str]:
    assert url.startswith("http://127.0.0.1:")
    async with aiohttp.ClientSession() as session, session.get(url, timeout=5) as response:
        return response.status, await response.text()


async def stop_manager(task: asyncio.Task[None], stop: asyncio.Event) -> None:
    """Stop a manager and wait for it (cancel it if it does not stop in 30 s)."""
    stop.set()
    await asyncio.wait([task], timeout=30)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


# -- 15: the deployed manager leads; a forbidden one says why and stays ready ----------------


async def test_the_deployed_manager_leads_from_its_own_namespace(
    control_plane: controlplane.ControlPlane,
    client: client_.Client,
    namespace: str,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    operator = await deployed_client(control_plane, namespace, tmp_path)
    monkeypatch.setenv("POD_NAMESPACE", namespace)  # from the downward API in manager.yaml
    manager = runtime.Manager(
        operator,
        runtime.ManagerOptions(
            name="lease-test",
            namespace=namespace,
            metrics_bind_address="0",
            health_probe_bind_address="0",
            leader_election=True,
            leader_election_id="lease-deployed",
        ),
    )
    leading = helpers.Leading()
    manager.add(leading)
    stop = asyncio.Event()
    task = asyncio.create_task(manager.start(stop))
    try:
        await asyncio.wait_for(leading.running.wait(), 30)
        assert manager.elector is not None
        lease = await client.get(LEASES, namespace, "lease-deployed")
        assert lease["spec"]["holderIdentity"] == manager.elector.options.identity
        stop.set()
        await asyncio.wait_for(asyncio.shield(task), 30)
        released = await client.get(LEASES, namespace, "lease-deployed")
        assert released["spec"].get("holderIdentity") is None
    finally:
        await stop_manager(task, stop)
        await operator.close()


async def test_a_forbidden_lease_is_an_error_counted_and_the_standby_stays_ready(
    control_plane: controlplane.ControlPlane,
    namespace: str,
    tmp_path: pathlib.Path,
) -> None:
    operator = await deployed_client(control_plane, namespace, tmp_path)
    manager = runtime.Manager(
        operator,
        runtime.ManagerOptions(
            name="lease-test",
            namespace=namespace,
            metrics_bind_address="127.0.0.1:0",
            health_probe_bind_address="127.0.0.1:0",
            leader_election=True,
            leader_election_id="lease-forbidden",
            leader_election_namespace="default",  # RBAC grants leases only in `namespace`
            lease_duration=2,
            renew_deadline=1.5,
            retry_period=0.2,
        ),
    )
    leading = helpers.Leading()
    manager.add(leading)
    labels = {"name": "lease-forbidden", "operation": "get", "reason": "Forbidden"}

    def forbidden_attempts() -> float:
        return metrics.registry.get_sample_value("leader_election_errors_total", labels) or 0

    before = forbidden_attempts()
    stop = asyncio.Event()
    with log_testing.capture_logs() as logs:
        task = asyncio.create_task(manager.start(stop))
        try:
            await helpers.eventually(lambda: forbidden_attempts() >= before + 3, 30, "3 tries")
            assert manager.probe_address is not None
            assert manager.metrics_address is not None
            status, text = await http_get(f"http://127.0.0.1:{manager.probe_address[1]}/readyz")
            assert status == 200, f"a standby is ready: {text}"
            _, text = await http_get(f"http://127.0.0.1:{manager.metrics_address[1]}/metrics")
            assert (
                'leader_election_errors_total{name="lease-forbidden",operation="get",'
                'reason="Forbidden"}' in text
            )
            assert 'leader_election_master_status{name="lease-forbidden"} 0.0' in text
            assert not leading.running.is_set()
        finally:
            await stop_manager(task, stop)
            await operator.close()
    failures = [e for e in logs if e.get("reason") == "Forbidden"]
    assert len(failures) >= 3, [e for e in logs if e["log_level"] != "debug"]
    assert {e["log_level"] for e in failures} == {"error"}
    assert all("forbidden" in e["error"] for e in failures), failures[0]


# -- 16: a partitioned leader stops reconciling at once --------------------------------------


class Partitionable:
    """A client whose Lease calls fail with ``error()`` once ``partitioned`` is set; the
    rest of the API (the controllers' work) stays reachable."""

    def __init__(self, inner: client_.Client, error: Callable[[], Exception]) -> None:
        self._inner = inner
        self._error = error
        self.partitioned = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _check(self, is_lease: bool) -> None:
        if self.partitioned and is_lease:
            raise self._error()

    async def get(self, resource: resources.Resource, *args: Any, **kwargs: Any) -> Any:
        self._check(resource == LEASES)
        return await self._inner.get(resource, *args, **kwargs)

    async def create(self, obj: dict[str, Any], **kwargs: Any) -> Any:
        self._check(obj.get("kind") == "Lease")
        return await self._inner.create(obj, **kwargs)

    async def update(self, obj: dict[str, Any], **kwargs: Any) -> Any:
        self._check(obj.get("kind") == "Lease")
        return await self._inner.update(obj, **kwargs)


@pytest.mark.parametrize(
    "error",
    [
        lambda: errors.ServerError(503, "ServiceUnavailable", "etcd is unreachable"),
        aiohttp.ServerDisconnectedError,
    ],
    ids=["ServiceUnavailable", "ServerDisconnectedError"],
)
async def test_a_leader_that_loses_its_lease_stops_reconciling_at_once(
    control_plane: controlplane.ControlPlane,
    client: client_.Client,
    namespace: str,
    error: Callable[[], Exception],
) -> None:
    assert control_plane.kubeconfig is not None
    name = f"lease-{type(error()).__name__.lower()}"
    timings = {"lease_duration": 2, "renew_deadline": 1.5, "retry_period": 0.2}

    def options() -> runtime.ManagerOptions:
        return runtime.ManagerOptions(
            name="lease-test",
            namespace=namespace,
            metrics_bind_address="0",
            health_probe_bind_address="0",
            leader_election=True,
            leader_election_id=name,
            leader_election_namespace=namespace,
            graceful_shutdown_timeout=30,
            **timings,
        )

    a_client = Partitionable(await client_.Client.from_kubeconfig(control_plane.kubeconfig), error)
    b_client = await client_.Client.from_kubeconfig(control_plane.kubeconfig)
    a = runtime.Manager(a_client, options())  # type: ignore[arg-type]
    b = runtime.Manager(b_client, options())  # no controllers: it only competes
    steps: list[float] = []
    cancelled = asyncio.Event()

    async def long_reconcile(request: runtime.Request) -> runtime.Result:
        try:
            for i in range(300):  # one minute of work, a step every 0.2 s
                patch = {"metadata": {"annotations": {"step": str(i)}}}
                await a_client.patch(CM, request.namespace, request.name, patch)
                steps.append(time.monotonic())
                await asyncio.sleep(0.2)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return runtime.Result()

    runtime.Builder(a).for_(CM).named(name).complete(long_reconcile)
    a_stop, b_stop = asyncio.Event(), asyncio.Event()
    a_task = asyncio.create_task(a.start(a_stop))
    b_task: asyncio.Task[None] | None = None
    try:
        await helpers.eventually(lambda: a.elector and a.elector.is_leader, 30, "a leading")
        b_task = asyncio.create_task(b.start(b_stop))
        await client.create({"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": "work", "namespace": namespace}})  # fmt: skip
        await helpers.eventually(lambda: len(steps) >= 3, 30, "a reconciling")
        a_client.partitioned = True
        with pytest.raises(runtime.manager.LeadershipLost):
            # renew deadline 1.5 s; the old code waited for the reconcile's 30 s grace
            await asyncio.wait_for(asyncio.shield(a_task), 10)
        lost_at = time.monotonic()
        assert cancelled.is_set(), "the in-flight reconcile is cancelled"
        await helpers.eventually(lambda: b.elector and b.elector.is_leader, 30, "b taking over")
        b_leads_at = time.monotonic()
        assert [t for t in steps if t > lost_at] == []
        assert [t for t in steps if t > b_leads_at] == []
    finally:
        await stop_manager(a_task, a_stop)
        if b_task is not None:
            await stop_manager(b_task, b_stop)
        await a_client.close()
        await b_client.close()


# -- 19: a second signal exits at once --------------------------------------------------------


async def test_a_second_sigterm_exits_at_once(
    control_plane: controlplane.ControlPlane,
    client: client_.Client,
    namespace: str,
    tmp_path: pathlib.Path,
) -> None:
    log = tmp_path / "stubborn.log"
    # A reconcile of 10 min, a shutdown budget of 2 min: the first SIGTERM waits.
    proc = helpers.spawn_slow_manager(control_plane.kubeconfig, namespace, log, "600", "120")
    try:
        await client.create({"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": "stubborn", "namespace": namespace}})  # fmt: skip

        async def started() -> bool:
            obj = await client.get(CM, namespace, "stubborn")
            return (obj["metadata"].get("annotations") or {}).get("slow/phase") == "started"

        await helpers.eventually(started, 30, "the endless reconcile to start")
        proc.send_signal(signal.SIGTERM)
        await helpers.eventually(lambda: '"stopping"' in log.read_text(), 10, "shutdown begun")
        assert proc.poll() is None, "the first signal waits for the reconcile (2 min budget)"
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 10)
        elapsed = time.monotonic() - sent
        assert code == 1, log.read_text()[-2000:]
        assert elapsed < 5, f"exited {elapsed:.1f} s after the second signal"
        assert "second signal" in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
