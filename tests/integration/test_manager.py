"""The manager against the real control plane: election, failover, probes, metrics, events."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

import runtime
from examples import configmap_mirror
from runtime.client import client as client_
from runtime.client import errors, resources
from runtime.testing import controlplane
from tests.integration import helpers

ROOT = pathlib.Path(__file__).parents[2]
CM = configmap_mirror.CONFIGMAPS
EVENTS = resources.Resource("", "v1", "Event", "events")
LEASES = resources.Resource("coordination.k8s.io", "v1", "Lease", "leases")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def http_get(url: str) -> tuple[int, str]:
    assert url.startswith("http://127.0.0.1:")
    async with aiohttp.ClientSession() as session, session.get(url, timeout=5) as response:
        return response.status, await response.text()


def configmap(name: str, namespace: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "data": {"k": name}}  # fmt: skip


async def mirrored(client: client_.Client, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return await client.get(CM, namespace, f"{name}-mirror")
    except errors.NotFound:
        return None


class Process:
    """The example operator as a separate process with its own ports."""

    def __init__(self, kubeconfig: pathlib.Path, namespace: str, log: pathlib.Path) -> None:
        self.metrics_port, self.probe_port = free_port(), free_port()
        self.log = log
        with open(log, "wb") as out:
            self.popen = self._spawn(kubeconfig, namespace, out)

    def _spawn(self, kubeconfig: pathlib.Path, namespace: str, out: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "examples.configmap_mirror", "--kubeconfig", str(kubeconfig),
             "--namespace", namespace, "--leader-elect",
             f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
             f"--health-probe-bind-address=127.0.0.1:{self.probe_port}"],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip

    async def is_leader(self) -> bool:
        try:
            _, text = await http_get(f"http://127.0.0.1:{self.metrics_port}/metrics")
        except (aiohttp.ClientError, OSError):
            return False
        return 'leader_election_master_status{name="configmap-mirror"} 1.0' in text

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(10)


@pytest.fixture
def processes(tmp_path: pathlib.Path) -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for process in started:
        process.stop()


async def test_two_managers_one_leader_and_failover_after_sigkill(
    control_plane: controlplane.ControlPlane,
    client: client_.Client,
    namespace: str,
    processes: list[Process],
    tmp_path: pathlib.Path,
) -> None:
    assert control_plane.kubeconfig is not None
    # Each election test uses a fresh Lease in the default namespace.
    with_lease_cleanup = contextlib_delete(client, "default", "configmap-mirror")
    await with_lease_cleanup
    for i in range(2):
        processes.append(Process(control_plane.kubeconfig, namespace, tmp_path / f"m{i}.log"))

    async def one_leader() -> list[Process] | None:
        leaders = [p for p in processes if await p.is_leader()]
        return leaders if len(leaders) == 1 else None

    [leader] = await helpers.eventually(one_leader, 60, "exactly one leader")
    standby = next(p for p in processes if p is not leader)
    await client.create(configmap("before", namespace, mirror="true"))
    await helpers.eventually(lambda: mirrored(client, namespace, "before"), 30, "a mirror")
    await asyncio.sleep(3)
    assert not await standby.is_leader(), "the standby stays standby"

    leader.popen.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    await helpers.eventually(standby.is_leader, 40, "the standby taking over")
    failover = time.monotonic() - killed_at
    print(f"\nfailover after SIGKILL: {failover:.1f} s")  # reported in the closing note
    assert failover <= 15 + 2 * 1.2 + 1, f"failover took {failover:.1f} s"
    await client.create(configmap("after", namespace, mirror="true"))
    await helpers.eventually(lambda: mirrored(client, namespace, "after"), 30, "a mirror after")
    await client.delete(LEASES, "default", "configmap-mirror")


async def contextlib_delete(client: client_.Client, namespace: str, name: str) -> None:
    with contextlib.suppress(errors.NotFound):
        await client.delete(LEASES, namespace, name)


async def test_sigterm_lets_the_in_flight_reconcile_finish(
    control_plane: controlplane.ControlPlane, client: client_.Client, namespace: str,
    tmp_path: pathlib.Path,
) -> None:  # fmt: skip
    log = tmp_path / "slow.log"
    proc = helpers.spawn_slow_manager(control_plane.kubeconfig, namespace, log)
    try:
        await client.create(configmap("slow", namespace))

        async def started() -> bool:
            obj = await client.get(CM, namespace, "slow")
            return (obj["metadata"].get("annotations") or {}).get("slow/phase") == "started"

        await helpers.eventually(started, 30, "the slow reconcile to start")
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 0, log.read_text()[-2000:]
        obj = await client.get(CM, namespace, "slow")
        assert obj["metadata"]["annotations"]["slow/phase"] == "finished", log.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_readyz_fails_until_caches_sync_and_metrics_are_served(
    control_plane: controlplane.ControlPlane, client: client_.Client, namespace: str
) -> None:
    group = f"late{os.getpid()}.test.rayservice.dev"
    late = resources.Resource(group, "v1", "Late", "lates")
    client.registry.register(late)
    manager = runtime.Manager(
        client,
        runtime.ManagerOptions(
            namespace=namespace,
            metrics_bind_address="127.0.0.1:0",
            health_probe_bind_address="127.0.0.1:0",
        ),
    )

    async def noop(request: runtime.Request) -> runtime.Result:
        return runtime.Result()

    runtime.Builder(manager).for_(late).named("late-controller").complete(noop)
    stop = asyncio.Event()
    task = asyncio.create_task(manager.start(stop))
    try:
        await helpers.eventually(lambda: manager.probe_address, 10, "probe server")
        assert manager.probe_address is not None
        assert manager.metrics_address is not None
        probes = f"http://127.0.0.1:{manager.probe_address[1]}"
        status, text = await http_get(f"{probes}/readyz")
        assert status == 503, text
        assert "[-]caches failed" in text
        status, _ = await http_get(f"{probes}/healthz")
        assert status == 200
        # The CRD appears: the reflector's retry lists it, and the manager becomes ready.
        await client.create(_crd(group))

        async def ready() -> bool:
            status, _ = await http_get(f"{probes}/readyz?verbose")
            return status == 200

        await helpers.eventually(ready, 60, "readyz after the caches synced")
        status, text = await http_get(f"{probes}/readyz?verbose")
        assert "[+]caches ok" in text
        status, text = await http_get(f"http://127.0.0.1:{manager.metrics_address[1]}/metrics")
        assert status == 200
        for series in [
            'workqueue_depth{controller="late-controller",name="late-controller"}',
            'controller_runtime_reconcile_total{controller="late-controller",result="success"}',
            "rest_client_requests_total{",
            "controller_runtime_max_concurrent_reconciles",
            "status_writes_total",
            "leader_election_master_status",
        ]:
            assert series in text, series
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        crds = resources.default_registry.for_kind(
            "apiextensions.k8s.io/v1", "CustomResourceDefinition"
        )
        await client.delete(crds, None, f"lates.{group}")


async def test_an_event_storm_is_aggregated(client: client_.Client, namespace: str) -> None:
    target = await client.create(configmap("noisy", namespace))
    recorder = runtime.events.Recorder(client, "storm-test")
    for i in range(200):  # a reconciler stuck in a hot loop
        recorder.event(target, "Warning", "ReconcileFailed", f"attempt failed: boom ({i % 3})")
    await recorder.flush()
    listed = await client.list(EVENTS, namespace)
    ours = [e for e in listed.items if e["involvedObject"]["name"] == "noisy"]
    assert 1 <= len(ours) <= 3, [e["message"] for e in ours]
    assert sum(e["count"] for e in ours) <= 25, "the spam filter caps writes per object"
    assert max(e["count"] for e in ours) > 1, "repeats update one Event"


def _crd(group: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"lates.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": "Late", "plural": "lates", "singular": "late"},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                "openAPIV3Schema": {"type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True}}}],
        },
    }  # fmt: skip
