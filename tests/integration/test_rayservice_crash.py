"""Crash safety of the RayService controller: the manager dies right after one of its
writes, a fresh one (fresh memory) takes over, and the end state is the uncrashed run's.

The scenario: create a RayService, wait for Ready, change ``rayVersion``, wait until
traffic is on the new cluster and the old one is deleted after its delay. The manager
runs in this process; :class:`~tests.integration.rayservice_harness.Crash` makes every
request it would make after the chosen write hang for good (as if the process had died
at that instant), then the manager is cancelled without a graceful stop and a new one
is started on the same control plane. Crash points: right after the pending cluster is
created (before any status says so), right after the Serve config PUT to the new
cluster (before the ``serve-config-hash`` annotation), right after the head service is
pointed at the new cluster (before the serve service and the status follow), and during
the deletion delay (right after the old cluster got its ``delete-after``).

Checked against an uncrashed run of the same scenario (in its own namespace): the same
end state (:func:`~tests.integration.rayservice_harness.summary`), the same clusters
ever created (never more than one pending), exactly one Serve config PUT per cluster,
the same RayCluster writes (nothing done twice), and the old cluster deleted no earlier
than its ``delete-after``. The same holds for a manager stopped gracefully once the
service is Ready and replaced before the upgrade (its cache is filled by a LIST)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import pathlib
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import api.v1 as v1
from runtime.client import client as client_
from runtime.testing import controlplane
from tests.integration import helpers
from tests.integration import rayservice_harness as h
from tests.support import raysim

ROOT = pathlib.Path(__file__).parents[2]
CRD_DIR = ROOT / "config/crd/bases"
DELETION_DELAY = 4


@pytest.fixture(scope="module", autouse=True)
def crds(control_plane: controlplane.ControlPlane) -> list[str]:
    return control_plane.install_crds(CRD_DIR)


@pytest.fixture(scope="module")
def sim(control_plane: controlplane.ControlPlane) -> Iterator[raysim.Simulator]:
    with raysim.running(control_plane, deploy_delay=1.0) as simulator:
        yield simulator


@pytest.fixture(autouse=True)
def ray_kinds(client: client_.Client) -> None:
    v1.add_to_registry(client.registry)


@dataclasses.dataclass
class Outcome:
    summary: h.Obj
    clusters_seen: list[str]
    most_at_once: int
    serve_selectors: list[str | None]
    puts: dict[str, int]
    """Serve config PUTs per cluster."""
    deleted_early_by: float
    """Seconds the old cluster's deletion started before the ``delete-after`` it was first
    given (<= 0: not early; RFC 3339 stamps have whole seconds, so up to 1 s is on time)."""
    cluster_writes: int
    """PUTs and PATCHes of RayClusters (not their status) from the spec change to the end."""
    restart_s: float = 0.0
    """Seconds from the crash until the new manager was started."""
    crashed_after: str = ""


CrashPoint = Callable[[str], Callable[[str, str, Any], bool]]
"""Given the first cluster's name: the write to die right after."""


def _pending_created(first: str) -> Callable[[str, str, Any], bool]:
    return lambda method, path, body: method == "POST" and path.endswith("/rayclusters")


def _serve_put(first: str) -> Callable[[str, str, Any], bool]:
    return lambda method, path, body: method == "SERVE-PUT"


def _head_service_switched(first: str) -> Callable[[str, str, Any], bool]:
    return lambda method, path, body: (
        method in ("PUT", "PATCH") and path.endswith("/services/demo-head-svc")
    )


def _serve_service_switched(first: str) -> Callable[[str, str, Any], bool]:
    return lambda method, path, body: (
        method in ("PUT", "PATCH") and path.endswith("/services/demo-serve-svc")
    )


def _old_cluster_marked(first: str) -> Callable[[str, str, Any], bool]:
    def when(method: str, path: str, body: Any) -> bool:
        annotations = ((body or {}).get("metadata") or {}).get("annotations") or {}
        return (
            method in ("PUT", "PATCH")
            and path.endswith(f"/rayclusters/{first}")
            and bool(annotations.get(h.DELETE_AFTER_ANNOTATION))
        )

    return when


CRASH_POINTS: dict[str, CrashPoint] = {
    "pending-cluster-created": _pending_created,
    "serve-config-put": _serve_put,
    "old-cluster-marked-for-deletion": _old_cluster_marked,
    "head-service-switched": _head_service_switched,
    "during-deletion-delay": _serve_service_switched,
}
"""In the order the uncrashed run makes these writes. The last one is the last write
of the switch: traffic has moved and the old cluster waits for its ``delete-after``."""


RESTART = "graceful-restart-before-the-upgrade"
"""Not a crash: the manager is stopped as on SIGTERM once the service is Ready and a new
one (its cache filled by a LIST, not by watch events) does the upgrade."""


def cluster_writes(cp: controlplane.ControlPlane) -> int:
    """PUTs and PATCHes of RayClusters (not their status) the API server has answered."""
    return int(sum(n for (verb, res, sub), n in cp.request_counts().items()
                   if res == "rayclusters" and sub == "" and verb in ("PUT", "PATCH")))  # fmt: skip


async def scenario(
    cp: controlplane.ControlPlane, sim: raysim.Simulator, namespace: str, crash_at: str | None
) -> Outcome:
    client = await client_.Client.from_kubeconfig(cp.kubeconfig)
    v1.add_to_registry(client.registry)
    crash = h.Crash() if crash_at in CRASH_POINTS else None
    puts_before = h.serve_puts(sim)
    running = await h.start_manager(cp, namespace, crash=crash)
    try:
        async with client, h.Observer(client, namespace) as seen:
            await client.create(
                h.rayservice_obj(deletion_delay=DELETION_DELAY), namespace=namespace
            )
            ready = await h.wait_ready(client, namespace)
            first = ready["status"]["activeServiceStatus"]["rayClusterName"]
            if crash_at == RESTART:
                await running.stop()
                running = await h.start_manager(cp, namespace)
            elif crash is not None and crash_at is not None:
                crash.arm(CRASH_POINTS[crash_at](first))
            writes_before = cluster_writes(cp)
            current = await h.get_service(client, namespace)
            await client.update(h.changed(current, rayVersion="2.61.0"))
            restart_s = 0.0
            if crash is not None:
                await asyncio.wait_for(crash.fired.wait(), 60)
                crashed = time.monotonic()
                await running.kill()
                running = await h.start_manager(cp, namespace)
                restart_s = time.monotonic() - crashed

            def upgraded(obj: h.Obj) -> bool:
                active = (obj.get("status") or {}).get("activeServiceStatus") or {}
                return active.get("rayClusterName") not in (None, first) and h.is_ready(obj)

            done = await h.wait_for(client, namespace, upgraded, 60, "traffic on the new cluster")
            second = done["status"]["activeServiceStatus"]["rayClusterName"]

            async def only_second() -> bool:
                return await h.all_clusters(client, namespace) == [second]

            await helpers.eventually(only_second, 30, f"{first} deleted after its delay")
            await h.wait_ready(client, namespace)
            end = await h.summary(client, namespace)
            stamp = seen.first_delete_after[first]
            due = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
            by_ip = h.serve_puts(sim, since=puts_before)
            return Outcome(
                summary=end,
                clusters_seen=list(seen.clusters_seen),
                most_at_once=seen.most_at_once,
                serve_selectors=seen.clusters_selected("demo-serve-svc"),
                puts={c: by_ip.get(seen.head_ips[c], 0) for c in (first, second)},
                deleted_early_by=round(due - seen.deleted_at[first], 2),
                cluster_writes=cluster_writes(cp) - writes_before,
                restart_s=round(restart_s, 2),
                crashed_after=crash.what if crash is not None else "",
            )
    finally:
        await running.stop()
        h.release_finalizers(cp, namespace)


@pytest.fixture(scope="module")
def uncrashed(control_plane: controlplane.ControlPlane, sim: raysim.Simulator) -> Iterator[Outcome]:
    """The scenario without a crash, in a namespace of its own."""
    namespace = f"test-{secrets.token_hex(4)}"
    control_plane.request(
        "POST", "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
    )  # fmt: skip
    try:
        yield asyncio.run(scenario(control_plane, sim, namespace, None))
    finally:
        control_plane.request("DELETE", f"/api/v1/namespaces/{namespace}")


def test_the_uncrashed_run(uncrashed: Outcome) -> None:
    """The reference itself: two clusters one after the other, one PUT each."""
    first, second = uncrashed.clusters_seen
    assert uncrashed.most_at_once == 2
    assert uncrashed.serve_selectors == [first, second]
    assert uncrashed.puts == {first: 1, second: 1}
    assert uncrashed.deleted_early_by <= 1.0
    # The new cluster's serve-config-hash and the old one's delete-after.
    assert uncrashed.cluster_writes == 2
    assert uncrashed.summary["active"]["cluster"] == second
    assert list(uncrashed.summary["clusters"]) == [second]


async def test_a_restarted_manager_finishes_an_upgrade_like_the_first_one(
    control_plane: controlplane.ControlPlane,
    sim: raysim.Simulator,
    namespace: str,
    uncrashed: Outcome,
) -> None:
    outcome = await scenario(control_plane, sim, namespace, RESTART)
    assert outcome.summary == uncrashed.summary, json.dumps(
        {"restarted": outcome.summary, "uncrashed": uncrashed.summary}, indent=1, default=str
    )
    assert outcome.clusters_seen == uncrashed.clusters_seen
    assert outcome.puts == uncrashed.puts
    assert outcome.cluster_writes == uncrashed.cluster_writes, "RayCluster writes"


@pytest.mark.parametrize("crash_at", list(CRASH_POINTS))
async def test_a_crash_changes_nothing(
    control_plane: controlplane.ControlPlane,
    sim: raysim.Simulator,
    namespace: str,
    uncrashed: Outcome,
    crash_at: str,
) -> None:
    outcome = await scenario(control_plane, sim, namespace, crash_at)
    assert outcome.crashed_after, "the manager died where it should"
    assert outcome.summary == uncrashed.summary, json.dumps(
        {"crashed": outcome.summary, "uncrashed": uncrashed.summary}, indent=1, default=str
    )
    assert outcome.clusters_seen == uncrashed.clusters_seen, "never a second pending cluster"
    assert outcome.most_at_once <= 2
    assert outcome.serve_selectors == uncrashed.serve_selectors
    assert outcome.puts == uncrashed.puts, "a Serve config went twice to one cluster"
    # At most the step the crash cut short is redone (e.g. a delete-after taken off the
    # cluster that still serves and put on again): never a loop of writes.
    assert outcome.cluster_writes <= uncrashed.cluster_writes + 2, "RayCluster writes"
    # RFC 3339 stamps have whole seconds: a deletion up to 1 s before the stamp is on time.
    # It may come later by the time the manager was away (a delete-after written just
    # before the crash, on a cluster that still served, is written again afresh), no more.
    late = outcome.restart_s + 2.0
    assert -late <= outcome.deleted_early_by <= 1.0, (outcome.deleted_early_by, late)
