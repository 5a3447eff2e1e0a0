"""The manager against the real control plane: election, failover, probes, metrics, events."""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
import pytest

import runtime
import runtime.status  # its status_writes_total, as any operator writing statuses has
from examples import configmap_mirror
from runtime.client import client as client_
from runtime.client import errors, resources
from runtime.testing import controlplane
from tests.integration import helpers

ROOT = pathlib.Path(__file__).parents[2]
CM = configmap_mirror.CONFIGMAPS
EVENTS = resources.Resource("", "v1", "Event", "events")
LEASES = resources.Resource("coordination.k8s.io", "v1", "Lease", "leases")


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


# Leader election settings the failover test runs the example with (controller-runtime's
# defaults are 15 s / 10 s / 2 s; these keep lease > renew deadline > 1.2 x retry).
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 4, 3.0, 1.0
# After a SIGKILL the standby takes over once the Lease has gone unrenewed for a lease
# duration by its own clock: it notices the last renewal within one jittered retry
# (1.2 x retry) and, once that lease has run out, tries again within another. The leader
# renews every retry period: that much again covers latency and our polling.
FAILOVER_BOUND = LEASE_DURATION + 2 * 1.2 * RETRY_PERIOD + RETRY_PERIOD


class Process:
    """The example operator as a separate process with its own ports."""

    def __init__(self, kubeconfig: pathlib.Path, namespace: str, log: pathlib.Path) -> None:
        self.metrics_port, self.probe_port = controlplane.free_ports(2)
        self.log = log
        with open(log, "wb") as out:
            self.popen = self._spawn(kubeconfig, namespace, out)

    def _spawn(self, kubeconfig: pathlib.Path, namespace: str, out: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "examples.configmap_mirror", "--kubeconfig", str(kubeconfig),
             "--namespace", namespace, "--leader-elect",
             f"--leader-elect-lease-duration={LEASE_DURATION}",
             f"--leader-elect-renew-deadline={RENEW_DEADLINE}",
             f"--leader-elect-retry-period={RETRY_PERIOD}",
             f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
             f"--health-probe-bind-address=127.0.0.1:{self.probe_port}"],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            # the Lease lives in the pod's namespace: here, the test's own
            env={**os.environ, "PYTHONPATH": str(ROOT), "POD_NAMESPACE": namespace},
        )  # fmt: skip

    async def master_status(self) -> float | None:
        """``leader_election_master_status`` (1 leading, 0 standby), None before it is served."""
        try:
            _, text = await http_get(f"http://127.0.0.1:{self.metrics_port}/metrics")
        except (aiohttp.ClientError, OSError):
            return None
        prefix = 'leader_election_master_status{name="configmap-mirror-leader"} '
        values = [float(line[len(prefix) :]) for line in text.splitlines()
                  if line.startswith(prefix)]  # fmt: skip
        return values[0] if values else None

    async def is_leader(self) -> bool:
        return await self.master_status() == 1

    async def is_standby(self) -> bool:
        return await self.master_status() == 0

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


async def lease_spec(client: client_.Client, namespace: str) -> dict[str, Any]:
    return dict((await client.get(LEASES, namespace, "configmap-mirror-leader"))["spec"])


async def poll_lease(
    client: client_.Client, namespace: str, until: Callable[[dict[str, Any]], bool],
    within: float, what: str,
) -> tuple[float, dict[str, Any]]:  # fmt: skip
    """Read the Lease every 20 ms until ``until(spec)``; return when (monotonic) and the spec.
    (``helpers.eventually`` polls every 100 ms: too coarse to time a kill or a takeover.)"""
    deadline = time.monotonic() + within
    while not until(spec := await lease_spec(client, namespace)):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {within} s (last: {spec})")
        await asyncio.sleep(0.02)
    return time.monotonic(), spec


# Kill points within the renew cycle, as fractions of the retry period after a renewal.
KILL_OFFSETS = (0.05, 0.4, 0.75)


async def test_two_managers_one_leader_and_failover_after_sigkill(
    control_plane: controlplane.ControlPlane,
    client: client_.Client,
    namespace: str,
    processes: list[Process],
    tmp_path: pathlib.Path,
) -> None:
    assert control_plane.kubeconfig is not None

    kubeconfig = control_plane.kubeconfig

    def start(name: str) -> Process:
        processes.append(Process(kubeconfig, namespace, tmp_path / f"{name}.log"))
        return processes[-1]

    replicas = [start("m0"), start("m1")]

    async def one_leader() -> list[Process] | None:
        leaders = [p for p in replicas if await p.is_leader()]
        standbys = [p for p in replicas if await p.is_standby()]
        return leaders if len(leaders) == 1 and len(standbys) == 1 else None

    [leader] = await helpers.eventually(one_leader, 60, "one leader and one standby")
    [standby] = [p for p in replicas if p is not leader]
    await client.create(configmap("before", namespace, mirror="true"))
    await helpers.eventually(lambda: mirrored(client, namespace, "before"), 30, "a mirror")

    # The standby stays standby while the leader renews: watch the renewals cover more than
    # a lease duration, the holder unchanged throughout.
    holder = (await lease_spec(client, namespace))["holderIdentity"]
    seen = [(time.monotonic(), (await lease_spec(client, namespace))["renewTime"])]
    while seen[-1][0] - seen[0][0] <= LEASE_DURATION + RETRY_PERIOD:
        renewed = seen[-1][1]
        at, spec = await poll_lease(
            client, namespace, lambda s, r=renewed: s["renewTime"] != r,
            RENEW_DEADLINE, "a renewal within the renew deadline",
        )  # fmt: skip
        assert spec["holderIdentity"] == holder, "the lease changed hands while renewed"
        seen.append((at, spec["renewTime"]))
    assert len(seen) >= LEASE_DURATION / RETRY_PERIOD, seen
    assert await standby.is_standby(), "the standby stays standby"

    failovers: list[tuple[float, float]] = []
    for round_, offset in enumerate(KILL_OFFSETS):
        # Kill `offset` of a retry period after a renewal we observe.
        last = (await lease_spec(client, namespace))["renewTime"]
        renewed_at, spec = await poll_lease(
            client, namespace, lambda s, r=last: s["renewTime"] != r, RENEW_DEADLINE, "a renewal"
        )
        holder = spec["holderIdentity"]
        await asyncio.sleep(renewed_at + offset * RETRY_PERIOD - time.monotonic())
        leader.popen.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        taken_at, spec = await poll_lease(
            client, namespace, lambda s, h=holder: s.get("holderIdentity") not in (None, h),
            FAILOVER_BOUND + 10, "a takeover",
        )  # fmt: skip
        failover = taken_at - killed_at
        failovers.append((offset, failover))
        # Not before the lease ran out (counted from the last renewal, which we saw within
        # a poll of its write) ...
        assert taken_at - renewed_at >= LEASE_DURATION - 0.5, failovers
        # ... and within the bound that follows from the settings.
        assert failover <= FAILOVER_BOUND, f"{failovers}: bound {FAILOVER_BOUND:.1f} s"
        await helpers.eventually(standby.is_leader, 10, "the new holder serving as leader")
        name = f"after-{round_}"
        await client.create(configmap(name, namespace, mirror="true"))
        await helpers.eventually(
            lambda name=name: mirrored(client, namespace, name), 30, "a mirror after"
        )
        # The new leader's standby: a fresh replica, waiting before the next kill.
        leader, standby = standby, start(f"m{round_ + 2}")
        await helpers.eventually(standby.is_standby, 30, "a fresh standby")
    # reported in the closing note
    print("\nfailover after SIGKILL (offset in retry periods, seconds):",
          [(o, round(f, 2)) for o, f in failovers], f"bound {FAILOVER_BOUND:.1f} s")  # fmt: skip


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
            name="readyz-test",
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
        metrics_url = f"http://127.0.0.1:{manager.metrics_address[1]}/metrics"
        success = (
            'controller_runtime_reconcile_total{controller="late-controller",result="success"}'
        )
        # The series exist from the start; a reconcile that really ran moves the counter.
        status, text = await http_get(metrics_url)
        assert sample(text, success) == 0, "no Late exists yet: nothing to reconcile"
        await client.create({"apiVersion": f"{group}/v1", "kind": "Late",
                             "metadata": {"name": "one", "namespace": namespace}})  # fmt: skip

        async def reconciled() -> bool:
            return sample((await http_get(metrics_url))[1], success) >= 1

        await helpers.eventually(reconciled, 30, "a successful reconcile of the Late")
        status, text = await http_get(metrics_url)
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


async def test_events_k8s_io_v1_events_are_accepted_and_their_series_grows(
    client: client_.Client, namespace: str
) -> None:
    """kube-apiserver validates events.k8s.io/v1 Events strictly (eventTime, action,
    reportingController and reportingInstance required; a series only on update): a
    body it refused would only be logged, so this asks the real server."""
    target = await client.create(configmap("watched", namespace))
    options = runtime.events.Options(api="events.k8s.io/v1", reporting_instance="manager-0")
    recorder = runtime.events.Recorder(client, "example-controller", options=options)
    for _ in range(3):
        recorder.event(target, "Warning", "FailedToCreateHeadPod", "quota", action="Create")
    await recorder.flush()
    listed = await client.list(runtime.events.EVENTS_V1, namespace)
    [event] = [e for e in listed.items if e["regarding"]["name"] == "watched"]
    assert (event["reason"], event["action"], event["note"]) == (
        "FailedToCreateHeadPod", "Create", "quota")  # fmt: skip
    assert event["reportingController"] == "example-controller"
    assert event["series"]["count"] == 3
    # kubectl describe reads core v1: the same Event, seen through the other API.
    core = await client.list(EVENTS, namespace)
    [seen] = [e for e in core.items if e["involvedObject"]["name"] == "watched"]
    assert (seen["reason"], seen["message"], seen["action"]) == (
        "FailedToCreateHeadPod",
        "quota",
        "Create",
    )


def sample(text: str, series: str) -> float:
    """The value of ``series`` (name and labels, exactly as exported) in a /metrics text."""
    values = [float(line[len(series) :]) for line in text.splitlines()
              if line.startswith(series + " ")]  # fmt: skip
    assert len(values) == 1, f"{series} exported {len(values)} times"
    return values[0]


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
