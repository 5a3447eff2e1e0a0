"""Every annotation the operator reads, set to hostile values, on the faithful fake.

Whoever may edit a RayCluster or a RayService may write any string, up to the API
server's 256 KiB of annotations, into the annotations the operator reads. None of them
may crash a pass (a hot loop of errors), leave a deletion stuck, or make the operator
wait for centuries: a number too long, not a number, or out of range is read as the
annotation's default (or refused with a condition where the annotation is validated),
and a number in range is clamped where a bound matters.
"""

from __future__ import annotations

import datetime
import math
from typing import Any

import pytest

import api.v1 as v1
from controllers.raycluster import names, redis_cleanup
from controllers.rayservice import clusters, validation
from runtime import clock, reconcile
from tests.unit.controllers.raycluster import scenario as cluster_scenario
from tests.unit.controllers.raycluster import test_redis_cleanup
from tests.unit.controllers.rayservice import scenario as service_scenario

HOSTILE = [
    "9" * 10_000,  # past Python's 4,300-digit int() limit: ValueError
    "9" * 401,  # an int, but no float: OverflowError
    "9" * 19,  # past int64
    "x" * 10_000,
    "-" + "9" * 400,
    "1e400",
    "NaN",
    "inf",
    "\u0663\u0660",  # Arabic-Indic digits: int() reads them, Go does not
    " 20",
    "",
]
HOSTILE_IDS = [f"{v[:6]}..{len(v)}" if len(v) > 12 else repr(v) for v in HOSTILE]

RAYCLUSTER_ANNOTATIONS = [
    redis_cleanup.DELETION_TIMEOUT_ANNOTATION,
    names.FT_ENABLED_ANNOTATION,
    names.EXTERNAL_STORAGE_NS_ANNOTATION,
    names.OVERWRITE_CONTAINER_CMD_ANNOTATION,
    names.ENABLE_SERVE_SERVICE_ANNOTATION,
    names.KUBERAY_VERSION_ANNOTATION,
]
"""What the RayCluster controller reads from a RayCluster's annotations."""

RAYSERVICE_CLUSTER_ANNOTATIONS = [
    clusters.HASH_ANNOTATION,
    clusters.NUM_WORKER_GROUPS_ANNOTATION,
    clusters.KUBERAY_VERSION_ANNOTATION,
    clusters.SERVE_CONFIG_ANNOTATION,
    clusters.DELETE_AFTER_ANNOTATION,
]
"""What the RayService controller reads from the annotations of the clusters it owns."""


async def _pass(env: cluster_scenario.Env | service_scenario.Env) -> float | None:
    """One reconcile: its requeue (finite and bounded), or None where it refused the spec
    with a :class:`~runtime.reconcile.TerminalError` (the controller turns that into a
    condition and an Event, and no retry) whose message does not echo a hostile value."""
    try:
        result = await env.reconcile()
    except reconcile.TerminalError as refused:
        message = str(refused)
        await env.synced()
        assert len(message) < 500, message[:200]
        return None
    wait = result.requeue_after
    assert wait is None or (math.isfinite(wait) and 0 <= wait <= 3600), wait
    return wait


@pytest.mark.parametrize("value", HOSTILE, ids=HOSTILE_IDS)
def test_the_deletion_timeout_reads_hostile_values_as_its_default(value: str) -> None:
    obj = {"metadata": {"annotations": {redis_cleanup.DELETION_TIMEOUT_ANNOTATION: value}}}
    assert redis_cleanup.deletion_timeout(obj) == redis_cleanup.DEFAULT_DELETION_TIMEOUT


def test_the_deletion_timeout_is_clamped() -> None:
    def timeout(text: str) -> float:
        obj = {"metadata": {"annotations": {redis_cleanup.DELETION_TIMEOUT_ANNOTATION: text}}}
        return redis_cleanup.deletion_timeout(obj)

    assert timeout("86400") == 86400.0
    assert timeout(str(2**63 - 1)) == redis_cleanup.MAX_DELETION_TIMEOUT
    assert timeout("+20") == 20.0  # Go's strconv.Atoi takes a sign


@pytest.mark.parametrize("annotation", RAYCLUSTER_ANNOTATIONS)
@pytest.mark.parametrize("value", HOSTILE, ids=HOSTILE_IDS)
async def test_a_gcs_ft_cluster_with_a_hostile_annotation_is_deleted_on_time(
    annotation: str, value: str
) -> None:
    """Each pass succeeds and waits a finite, bounded time; past the default timeout the
    finalizer is forced off (a hostile ``gcs-ft-deletion-timeout`` raised on every pass
    before, so the cluster stayed Terminating)."""
    env = cluster_scenario.Env()
    try:
        await _deleted_on_time(env, annotation, value)
    finally:
        env.cache.verify()
        await env.cache.stop()


async def _deleted_on_time(env: cluster_scenario.Env, annotation: str, value: str) -> None:
    await env.client.create(test_redis_cleanup.ft_cluster(annotations={annotation: value}))
    await env.synced()
    await _pass(env)
    await env.run_all()
    await _pass(env)
    await env.client.delete(v1.RAYCLUSTERS, "ns", "demo")
    await env.synced()
    if not env.client.objects(v1.RAYCLUSTERS):  # refused before it had our finalizer
        return
    deleted = clock.parse_rfc3339((await env.cluster())["metadata"]["deletionTimestamp"])
    assert deleted is not None
    at = {"now": deleted + datetime.timedelta(seconds=5)}
    env.reconciler.clock = lambda: at["now"]
    for _ in range(2):
        wait = await _pass(env)
        assert wait is None or wait <= redis_cleanup.DEFAULT_DELETION_TIMEOUT
    at["now"] = deleted + datetime.timedelta(seconds=redis_cleanup.DEFAULT_DELETION_TIMEOUT)
    await env.reconcile()
    assert env.client.objects(v1.RAYCLUSTERS) == []


@pytest.mark.parametrize("annotation", RAYSERVICE_CLUSTER_ANNOTATIONS)
@pytest.mark.parametrize("value", HOSTILE, ids=HOSTILE_IDS)
async def test_a_rayservice_whose_cluster_carries_a_hostile_annotation_keeps_serving(
    env: service_scenario.Env, annotation: str, value: str
) -> None:
    name = await env.converge_first_cluster()
    cluster = await env.client.get(v1.RAYCLUSTERS, "ns", name)
    cluster["metadata"].setdefault("annotations", {})[annotation] = value
    await env.client.update(cluster)
    await env.synced()
    for _ in range(3):
        await _pass(env)
    ready = service_scenario.condition(await env.service(), "Ready")
    assert ready["status"] == "True"


@pytest.mark.parametrize("value", HOSTILE, ids=HOSTILE_IDS)
async def test_a_hostile_initializing_timeout_is_a_condition_not_a_crash(
    env: service_scenario.Env, value: str
) -> None:
    obj: dict[str, Any] = service_scenario.rayservice()
    obj["metadata"]["annotations"] = {validation.INITIALIZING_TIMEOUT_ANNOTATION: value}
    await env.client.create(obj)
    await env.synced()
    await _pass(env)
    if value:  # empty means absent
        status = (await env.service()).get("status") or {}
        reasons = {c.get("reason") for c in status.get("conditions") or []}
        assert "ValidationFailed" in reasons or status.get("serviceStatus"), status


RAYCLUSTER_NUMBER_FIELDS = [
    ("rayVersion",),
    ("headGroupSpec", "rayStartParams", "dashboard-port"),
    ("headGroupSpec", "rayStartParams", "dashboard-agent-listen-port"),
    ("workerGroupSpecs", 0, "rayStartParams", "dashboard-agent-listen-port"),
]
"""The RayCluster's string fields the operator reads as numbers (a version's parts, ports)."""


@pytest.mark.parametrize("path", RAYCLUSTER_NUMBER_FIELDS, ids=lambda p: "/".join(map(str, p)))
@pytest.mark.parametrize(
    "value",
    [*HOSTILE, "2." + "9" * 5_000, "2.9." + "9" * 25],
    ids=[*HOSTILE_IDS, "2.9..", "2.9.9.."],
)
async def test_a_raycluster_with_a_hostile_number_field_is_built_or_refused(
    path: tuple[str | int, ...], value: str
) -> None:
    obj = cluster_scenario.raycluster()
    node: Any = obj["spec"]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    env = cluster_scenario.Env()
    try:
        await env.client.create(obj)
        await env.synced()
        await _pass(env)
        await env.run_all()
        await _pass(env)
    finally:
        await env.cache.stop()
