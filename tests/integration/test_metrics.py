"""Metrics on the real control plane: a manager set up with ``enable_metrics=True`` serves every
metric KubeRay v1.7.0's operator dashboard queries, with the label names its queries use.

What the dashboard queries is recorded in ``testdata/kuberay-v1.7.0/dashboard-metrics.json``
(``hack/golden/kuberay_dashboard_metrics.py`` writes it from KubeRay's
``config/grafana/KubeRay-Operator.json``). The manager runs in this process, watching the
test's namespace, with the RayService controller's dashboards faked (no Ray needed: the
RayService need only exist); kwok makes the pods Running and Ready."""

from __future__ import annotations

import asyncio
import json
import pathlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from prometheus_client import parser

import api.v1 as v1
import controllers.setup
from controllers.ray import fake as fake_dashboards
from runtime import manager as manager_
from runtime.client import client as client_
from runtime.testing import controlplane
from tests.integration import helpers, rayservice_harness

ROOT = pathlib.Path(__file__).parents[2]
CRD_DIR = ROOT / "config/crd/bases"
DASHBOARD = json.loads(
    (pathlib.Path(__file__).parent / "testdata/kuberay-v1.7.0/dashboard-metrics.json").read_text()
)
OURS = ("kuberay_", "controller_runtime_", "workqueue_")
"""The families the dashboard queries that this operator serves (``kube_*`` are
kube-state-metrics')."""
NOT_OURS = {"kuberay_job_info", "kuberay_job_deployment_status",
            "kuberay_job_execution_duration_seconds"}  # fmt: skip
"""RayJob families: this operator has no RayJob."""
TARGET_LABELS = {"pod", "namespace"}
"""Labels Prometheus adds from the scrape target (the operator's pod) - except where a
family has its own ``namespace`` (every ``kuberay_*`` one: the object's)."""

Series = dict[str, list[dict[str, str]]]


@pytest.fixture(scope="module", autouse=True)
def crds(control_plane: controlplane.ControlPlane) -> list[str]:
    return control_plane.install_crds(CRD_DIR)


@pytest.fixture
async def manager(
    control_plane: controlplane.ControlPlane, namespace: str
) -> AsyncIterator[manager_.Manager]:
    client = await client_.Client.from_kubeconfig(control_plane.kubeconfig)
    mgr = manager_.Manager(client, manager_.Options(
        name="rayservice-operator",
        namespace=namespace, metrics_bind_address="127.0.0.1:0", health_probe_bind_address="0",
        graceful_shutdown_timeout=5.0))  # fmt: skip
    controllers.setup.setup(mgr, dashboards=fake_dashboards.FakeDashboards(), enable_metrics=True)
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    try:
        yield mgr
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await client.close()
        rayservice_harness.release_finalizers(control_plane, namespace)


async def scrape(mgr: manager_.Manager) -> Series:
    """``/metrics`` over HTTP: the label sets of each sample name."""
    assert mgr.metrics_address is not None
    host, port = mgr.metrics_address
    assert host == "127.0.0.1"
    url = f"http://{host}:{port}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url, timeout=5) as response:
        assert response.status == 200
        text = await response.text()
    found: Series = {}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append(dict(sample.labels))
    return found


def ours(namespace: str, found: Series, name: str) -> list[dict[str, str]]:
    """The series of ``name`` about this test's objects (kuberay_*), or all of them."""
    series = found.get(name, [])
    if name.startswith("kuberay_"):
        return [labels for labels in series if labels.get("namespace") == namespace]
    return series


def expected_labels(name: str) -> set[str]:
    recorded = set(DASHBOARD["metrics"][name]["labels"])
    return recorded - (
        TARGET_LABELS - {"namespace"} if name.startswith("kuberay_") else TARGET_LABELS
    )


def raycluster_obj(name: str) -> dict[str, Any]:
    template = rayservice_harness.template
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": name},
            "spec": {"rayVersion": "2.60.0",
                     "headGroupSpec": {"rayStartParams": {}, "template": template("ray-head")},
                     "workerGroupSpecs": [rayservice_harness.worker_group()]}}  # fmt: skip


async def test_every_metric_the_dashboard_queries_is_served_with_its_labels(
    manager: manager_.Manager, client: client_.Client, namespace: str
) -> None:
    v1.add_to_registry(client.registry)
    queried = {n for n in DASHBOARD["metrics"] if n.startswith(OURS)}
    assert queried >= NOT_OURS, "the RayJob families we leave out are still what it queries"
    wanted = sorted(queried - NOT_OURS)
    await client.create(raycluster_obj("plain"), namespace=namespace)
    await client.create(rayservice_harness.rayservice_obj("web"), namespace=namespace)

    async def everything() -> Series | None:
        found = await scrape(manager)
        clusters = ours(namespace, found, "kuberay_cluster_info")
        provisioned = ours(namespace, found, "kuberay_cluster_provisioned_duration_seconds")
        ready = (
            all(ours(namespace, found, name) for name in wanted)
            and any(labels["owner_kind"] == "RayService" for labels in clusters)
            and any(labels["name"] == "plain" for labels in provisioned)
        )
        return found if ready else None

    found = await helpers.eventually(
        everything, 120, "every queried metric served (the RayCluster provisioned)"
    )
    for name in wanted:
        missing = [
            labels for labels in ours(namespace, found, name)
            if not expected_labels(name) <= set(labels)
        ]  # fmt: skip
        assert not missing, f"{name}: series without {sorted(expected_labels(name))}: {missing}"

    # The controller the dashboard's $Controller variable defaults to reports under that name.
    default = DASHBOARD["variables"]["Controller"]["current"]
    assert default in {
        labels["controller"] for labels in found["controller_runtime_reconcile_total"]
    }
    for kind in ("raycluster", "rayservice"):
        assert kind in {
            labels["controller"] for labels in found["controller_runtime_active_workers"]
        }
        assert {"controller": kind, "name": kind} in found["workqueue_depth"]

    info = {labels["name"]: labels for labels in ours(namespace, found, "kuberay_cluster_info")}
    plain = await client.get(v1.RAYCLUSTERS, namespace, "plain")
    assert info["plain"] == {"name": "plain", "namespace": namespace,
                             "uid": plain["metadata"]["uid"], "owner_kind": "None"}  # fmt: skip
    [durations] = [labels for labels in ours(namespace, found,
                                             "kuberay_cluster_provisioned_duration_seconds")
                   if labels["name"] == "plain"]  # fmt: skip
    assert durations == {"name": "plain", "namespace": namespace, "uid": plain["metadata"]["uid"]}

    # A deleted RayCluster's series go: the scrape-time ones and the provisioned duration.
    await client.delete(v1.RAYCLUSTERS, namespace, "plain")

    async def gone() -> bool:
        found = await scrape(manager)
        return not any(
            labels["name"] == "plain"
            for name in ("kuberay_cluster_info", "kuberay_cluster_condition_provisioned",
                         "kuberay_cluster_provisioned_duration_seconds")
            for labels in ours(namespace, found, name)
        )  # fmt: skip

    await helpers.eventually(gone, 60, "the deleted RayCluster's series gone")
