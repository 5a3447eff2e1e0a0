"""controllers.metrics: KubeRay v1.7.0's kuberay_* families, read from a real cache on the
faithful fake API server; the provisioned duration through the RayCluster reconciler; the
enable_metrics gate and a second registration in fresh processes (the registry is global)."""

from __future__ import annotations

import copy
import datetime
import os
import pathlib
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from typing import Any

import pytest

import api.v1 as v1
from controllers import metrics
from controllers.raycluster import reconciler as reconciler_
from runtime import clock
from runtime.cache import cache as cache_
from runtime.client import resources
from runtime.testing import fake
from tests.unit.controllers.raycluster import scenario as cluster_scenario
from tests.unit.controllers.rayservice import scenario as service_scenario

ROOT = pathlib.Path(__file__).parents[3]
Samples = dict[str, list[tuple[dict[str, str], float]]]


def samples(collector: metrics.Collector) -> Samples:
    found: Samples = {}
    for family in collector.collect():
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return {n: sorted(series, key=lambda s: s[0]["name"]) for n, series in found.items()}


class World:
    """A fake API server, a started cache on it and a collector reading that cache."""

    def __init__(self) -> None:
        registry = resources.default_registry.copy()
        v1.add_to_registry(registry)
        self.client = fake.FakeClient(registry, namespaces=["ns"])
        self.cache = cache_.Cache(self.client, debug=True)  # type: ignore[arg-type]
        self.collector = metrics.Collector()
        self.collector.add_source(
            self.cache.informer(v1.RAYCLUSTERS), self.cache.informer(v1.RAYSERVICES)
        )

    async def start(self) -> None:
        await self.cache.start()
        await self.cache.wait_for_sync()

    async def create(self, obj: dict[str, Any], status: dict[str, Any] | None = None) -> str:
        created = await self.client.create(copy.deepcopy(obj))
        if status is not None:
            created = copy.deepcopy(created)
            created["status"] = status
            await self.client.update_status(created)
        await self.client.delivered()
        return str(created["metadata"]["uid"])


@pytest.fixture
async def world() -> AsyncIterator[World]:
    w = World()
    await w.start()
    yield w
    w.cache.verify()  # a scrape never changes a cached object
    await w.cache.stop()


def conditions(**statuses: str) -> dict[str, Any]:
    return {"conditions": [{"type": t, "status": s, "reason": "R", "message": "",
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}
                           for t, s in statuses.items()]}  # fmt: skip


def provisioned(value: str) -> dict[str, Any]:
    return conditions(RayClusterProvisioned=value)


def cluster(name: str, **labels: str) -> dict[str, Any]:
    obj = cluster_scenario.raycluster(name)
    obj["metadata"]["labels"] = labels
    return obj


def service(name: str) -> dict[str, Any]:
    obj = service_scenario.rayservice()
    obj["metadata"]["name"] = name
    return obj


async def test_cluster_info_and_provisioned_condition_per_cached_cluster(world: World) -> None:
    plain = await world.create(cluster("plain"), provisioned("True"))
    owned = await world.create(
        cluster("owned", **{"ray.io/originated-from-crd": "RayService"}), provisioned("False")
    )
    bare = await world.create(cluster("bare"))  # no status at all
    assert samples(world.collector) == {
        "kuberay_cluster_info": [
            ({"name": "bare", "namespace": "ns", "uid": bare, "owner_kind": "None"}, 1.0),
            ({"name": "owned", "namespace": "ns", "uid": owned, "owner_kind": "RayService"}, 1.0),
            ({"name": "plain", "namespace": "ns", "uid": plain, "owner_kind": "None"}, 1.0),
        ],
        "kuberay_cluster_condition_provisioned": [
            ({"name": "bare", "namespace": "ns", "uid": bare, "condition": "false"}, 1.0),
            ({"name": "owned", "namespace": "ns", "uid": owned, "condition": "false"}, 1.0),
            ({"name": "plain", "namespace": "ns", "uid": plain, "condition": "true"}, 1.0),
        ],
    }


async def test_service_info_ready_and_upgrade_in_progress_per_cached_service(world: World) -> None:
    serving = await world.create(service("serving"), conditions(Ready="True"))
    upgrading = await world.create(
        service("upgrading"), conditions(Ready="False", UpgradeInProgress="True")
    )
    assert samples(world.collector) == {
        "kuberay_service_info": [
            ({"name": "serving", "namespace": "ns", "uid": serving}, 1.0),
            ({"name": "upgrading", "namespace": "ns", "uid": upgrading}, 1.0),
        ],
        "kuberay_service_condition_ready": [
            ({"name": "serving", "namespace": "ns", "uid": serving, "condition": "true"}, 1.0),
            ({"name": "upgrading", "namespace": "ns", "uid": upgrading, "condition": "false"}, 1.0),
        ],
        "kuberay_service_condition_upgrade_in_progress": [
            ({"name": "serving", "namespace": "ns", "uid": serving, "condition": "false"}, 1.0),
            ({"name": "upgrading", "namespace": "ns", "uid": upgrading, "condition": "true"}, 1.0),
        ],
    }


async def test_a_condition_change_shows_in_the_next_scrape(world: World) -> None:
    await world.create(cluster("demo"), provisioned("False"))
    current = copy.deepcopy(await world.client.get(v1.RAYCLUSTERS, "ns", "demo"))
    current["status"] = provisioned("True")
    await world.client.update_status(current)
    await world.client.delivered()
    [(labels, _)] = samples(world.collector)["kuberay_cluster_condition_provisioned"]
    assert labels["condition"] == "true"


async def test_deleted_objects_are_gone_from_the_next_scrape(world: World) -> None:
    await world.create(cluster("gone"))
    await world.create(cluster("kept"))
    await world.create(service("gone"))
    await world.client.delete(v1.RAYCLUSTERS, "ns", "gone")
    await world.client.delete(v1.RAYSERVICES, "ns", "gone")
    await world.client.delivered()
    found = samples(world.collector)
    assert [s[0]["name"] for s in found["kuberay_cluster_info"]] == ["kept"]
    assert [s[0]["name"] for s in found["kuberay_cluster_condition_provisioned"]] == ["kept"]
    for name in ("kuberay_service_info", "kuberay_service_condition_ready",
                 "kuberay_service_condition_upgrade_in_progress"):  # fmt: skip
        assert name not in found, "no RayService left: no series (and no family, as in Go)"


async def test_nothing_from_a_cache_not_synced_yet_or_stopped() -> None:
    w = World()
    await w.client.create(cluster("demo"))
    assert samples(w.collector) == {}, "informers not started: nothing, not a partial list"
    await w.start()
    assert "kuberay_cluster_info" in samples(w.collector)
    await w.cache.stop()
    assert samples(w.collector) == {}, "a stopped cache is no source"


async def test_two_caches_on_one_server_report_each_object_once(world: World) -> None:
    uid = await world.create(cluster("demo"))
    second = cache_.Cache(world.client, debug=True)  # type: ignore[arg-type]
    world.collector.add_source(second.informer(v1.RAYCLUSTERS), second.informer(v1.RAYSERVICES))
    await second.start()
    await second.wait_for_sync()
    try:
        assert [s[0]["uid"] for s in samples(world.collector)["kuberay_cluster_info"]] == [uid]
        await world.cache.stop()
        assert [s[0]["uid"] for s in samples(world.collector)["kuberay_cluster_info"]] == [uid]
    finally:
        await second.stop()


# -- kuberay_cluster_provisioned_duration_seconds, through the RayCluster reconciler ----------

CREATED_AT = 1767225600.0  # what the test clock says while the fake stamps creationTimestamp


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)  # the scenario's time


@pytest.fixture
async def env() -> AsyncIterator[tuple[cluster_scenario.Env, metrics.ProvisionedDurations, Clock]]:
    e = cluster_scenario.Env()
    wall = Clock()
    durations = metrics.ProvisionedDurations(now=wall)
    e.reconciler = reconciler_.Reconciler(
        e.client, e.cache, e.recorder,
        reconciler_.Options(cluster_domain="cluster.local", random_pod_delete=False),
        clock=lambda: NOW, metrics=durations,
    )  # fmt: skip
    yield e, durations, wall
    e.cache.verify()
    await e.cache.stop()


def durations_of(durations: metrics.ProvisionedDurations) -> list[tuple[dict[str, str], float]]:
    return [(dict(s.labels), s.value) for s in durations.family().samples]


async def test_duration_is_set_once_when_provisioned_turns_true_and_dropped_when_gone(
    env: tuple[cluster_scenario.Env, metrics.ProvisionedDurations, Clock],
) -> None:
    e, durations, wall = env
    await e.client.create(cluster_scenario.raycluster())
    created = await e.cluster()
    started = clock.parse_rfc3339(created["metadata"]["creationTimestamp"])
    assert started is not None
    await e.reconcile()
    assert durations_of(durations) == [], "pods created, not Running: not provisioned"
    await e.run_all()
    wall.now = started.timestamp() + 42.5
    await e.reconcile()
    assert (await e.cluster())["status"]["conditions"][1]["status"] == "True"  # Provisioned
    uid = created["metadata"]["uid"]
    assert durations_of(durations) == [({"name": "demo", "namespace": "ns", "uid": uid}, 42.5)]

    # Later passes (a worker restarts: a status write, Provisioned stays True) keep it.
    wall.now += 100
    labels = [(p, p["metadata"]["labels"]) for p in await e.pods()]
    [worker, *_] = [p for p, label in labels if label["ray.io/node-type"] == "worker"]
    await e.set_phase(worker, ready=False)
    writes = e.status_writes()
    await e.reconcile()
    assert e.status_writes() == writes + 1
    assert durations_of(durations) == [({"name": "demo", "namespace": "ns", "uid": uid}, 42.5)]

    await e.client.delete(v1.RAYCLUSTERS, "ns", "demo")
    await e.synced()
    await e.reconcile()
    assert durations_of(durations) == [], "NotFound: the series is deleted"


async def test_a_cluster_already_provisioned_when_read_is_not_reported_again(
    env: tuple[cluster_scenario.Env, metrics.ProvisionedDurations, Clock],
) -> None:
    """As in KubeRay: the duration is observed on the transition only (so not after a restart)."""
    e, durations, _ = env
    await e.client.create(cluster_scenario.raycluster())
    current = copy.deepcopy(await e.cluster())
    current["status"] = provisioned("True")
    await e.client.update_status(current)
    await e.synced()
    await e.reconcile()
    assert e.status_writes() == 2, "the pass wrote its status"
    assert durations_of(durations) == []


async def test_forget_drops_every_uid_of_the_name_and_nothing_else() -> None:
    durations = metrics.ProvisionedDurations(now=lambda: CREATED_AT + 5)
    for name, uid in (("a", "u1"), ("a", "u2"), ("b", "u3")):
        before = {"metadata": {"name": name, "namespace": "ns", "uid": uid,
                               "creationTimestamp": "2026-01-01T00:00:00Z"}}  # fmt: skip
        assert durations.status_written(before, provisioned("True"))
    assert durations.forget("ns", "a") == 2
    assert durations_of(durations) == [({"name": "b", "namespace": "ns", "uid": "u3"}, 5.0)]
    assert durations.forget("other", "b") == 0


# -- the gate and a second registration, each in a fresh process ------------------------------

SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from prometheus_client import generate_latest
    import api.v1 as v1, controllers
    from controllers import metrics as kuberay_metrics
    from controllers.raycluster import interface
    from runtime import manager, metrics
    from runtime.client import resources
    from runtime.testing import fake
    from tests.unit.controllers.raycluster import scenario

    def new_manager():
        registry = resources.default_registry.copy()
        v1.add_to_registry(registry)
        client = fake.FakeClient(registry, namespaces=["ns"])
        return manager.Manager(client, manager.Options(
            name="rayservice-operator", metrics_bind_address="0", health_probe_bind_address="0"))

    def registered():
        return sorted(n for n in metrics.registry._names_to_collectors if n.startswith("kuberay_"))

    async def main(mode):
        mgr = new_manager()
        controllers.setup.setup(mgr, enable_metrics=(mode != "off"))
        await mgr.client.create(scenario.raycluster())
        await mgr.cache.start()
        await mgr.cache.wait_for_sync()
        print("registered", registered())
        print("exposed", "kuberay_cluster_info{" in generate_latest(metrics.registry).decode())
        if mode == "twice":
            second = new_manager()
            again = kuberay_metrics.enable(second)  # a second manager in this process
            print("same", again is kuberay_metrics.enable(mgr))
            await second.client.create(scenario.raycluster("other"))
            await second.cache.start()
            await second.cache.wait_for_sync()
            await mgr.cache.stop()
            text = generate_latest(metrics.registry).decode()
            print("names", sorted(line.split('name="')[1].split('"')[0]
                                  for line in text.splitlines()
                                  if line.startswith("kuberay_cluster_info{")))
            await second.cache.stop()
        else:
            await mgr.cache.stop()

    asyncio.run(main(sys.argv[1]))
    """
)


def run_script(mode: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], cwd=ROOT, env=env,
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_without_enable_metrics_no_kuberay_family_is_registered() -> None:
    assert run_script("off") == ["registered []", "exposed False"]


def test_with_enable_metrics_every_family_is_registered_and_served() -> None:
    assert run_script("on") == [f"registered {sorted(metrics.NAMES)}", "exposed True"]


def test_a_second_manager_in_the_process_registers_nothing_twice_and_is_reported() -> None:
    """The registry is the process's: the second enable adds a source, and a stopped
    manager's cache stops reporting (the other manager's cluster is all that is left)."""
    assert run_script("twice") == [
        f"registered {sorted(metrics.NAMES)}", "exposed True", "same True", "names ['other']",
    ]  # fmt: skip
