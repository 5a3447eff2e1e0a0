"""The Serve config goes only to this RayService's own head, whatever names say.

In the ``service`` and ``kubernetes-proxy`` modes the dashboard is reached through
the cluster's head Service; it is used only when it is controlled by the RayCluster,
is no ``ExternalName`` alias and selects the cluster's head. A pod that merely
carries the head's labels is not the head.
"""

from __future__ import annotations

from typing import Any

import pytest

import api.v1 as v1
from controllers.ray import dashboard
from controllers.rayservice import clusters
from controllers.rayservice import reconciler as reconciler_
from runtime import reconcile
from runtime.client import resources
from tests.unit.controllers.rayservice import scenario

pytestmark = pytest.mark.address_mode("service")
REQUEST = scenario.REQUEST
Env = scenario.Env
rayservice = scenario.rayservice


SERVICES = resources.default_registry.for_kind("v1", "Service")
EVENTS = scenario.EVENTS
VICTIM = "victim-head-svc.tenant-b.svc.cluster.local"


async def head_service(env: Env, cluster: str, **spec: Any) -> None:
    owner = await env.client.get(v1.RAYCLUSTERS, "ns", cluster)
    body = {
        "selector": {"ray.io/cluster": cluster, "ray.io/node-type": "head"},
        "ports": [{"name": "dashboard", "port": 8265}],
        **spec,
    }
    await env.client.create({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": f"{cluster}-head-svc", "namespace": "ns", "ownerReferences": [
            {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": cluster,
             "uid": owner["metadata"]["uid"], "controller": True}]},
        "spec": body,
    })  # fmt: skip
    await env.synced()


async def first_cluster(env: Env) -> str:
    await env.client.create(rayservice())
    await env.synced()
    await env.reconcile()
    (name,) = await env.live_clusters()
    return name


async def test_through_its_own_head_service_the_config_is_submitted(env: Env) -> None:
    name = await first_cluster(env)
    await head_service(env, name)
    await env.start_head(name)
    await env.reconcile()
    assert env.fake(name).put_count == 1


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ({"type": "ExternalName", "externalName": VICTIM, "selector": None}, "ExternalName"),
        ({"selector": {"ray.io/cluster": "someone-else", "ray.io/node-type": "head"}}, "select"),
    ],
)
async def test_a_head_service_leading_elsewhere_gets_nothing(
    env: Env, spec: dict[str, Any], why: str
) -> None:
    name = await first_cluster(env)
    await head_service(env, name, **spec)
    await env.start_head(name)
    with pytest.raises(Exception, match=why):
        await env.reconciler.reconcile(REQUEST)
    assert env.fake(name).get_count == 0
    assert env.fake(name).put_count == 0


async def test_a_head_service_the_cluster_does_not_control_gets_nothing(env: Env) -> None:
    name = await first_cluster(env)
    await env.client.create({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": f"{name}-head-svc", "namespace": "ns"},
        "spec": {"type": "ExternalName", "externalName": VICTIM},
    })  # fmt: skip
    await env.synced()
    await env.start_head(name)
    with pytest.raises(Exception, match="not controlled by the RayCluster"):
        await env.reconciler.reconcile(REQUEST)
    assert (env.fake(name).get_count, env.fake(name).put_count) == (0, 0)


async def test_a_look_alike_head_pod_is_not_the_head(env: Env) -> None:
    env.reconciler.options = reconciler_.Options(address_mode="pod-ip")
    name = await first_cluster(env)
    pod = await env.client.create({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{name}-head-fake", "namespace": "ns", "labels": {
            "ray.io/cluster": name, "ray.io/node-type": "head", "ray.io/is-ray-node": "yes"}},
        "spec": {"containers": [{"name": "ray-head", "image": "ray"}]},
    })  # fmt: skip
    pod["status"] = {"phase": "Running", "podIP": "198.18.3.3",
                     "conditions": [{"type": "Ready", "status": "True"}]}  # fmt: skip
    await env.client.update_status(pod)
    await env.synced()
    result = await env.reconcile()
    assert isinstance(result, reconcile.Result)
    assert (env.fake(name).get_count, env.fake(name).put_count) == (0, 0)


SECRET_CONFIG = """\
applications:
- name: fruit
  import_path: fruit:app
  route_prefix: /fruit
  runtime_env:
    env_vars: {API_TOKEN: tok-5f3a9c-very-secret}
"""


async def test_serve_refusal_reaches_status_and_events_without_config_values(env: Env) -> None:
    env.reconciler.options = reconciler_.Options(address_mode="pod-ip")
    await env.client.create(rayservice(serveConfigV2=SECRET_CONFIG))
    await env.synced()
    await env.reconcile()
    (name,) = await env.live_clusters()
    await env.start_head(name)
    echo = (
        "Invalid Serve config: applications -> 0 -> runtime_env -> env_vars -> API_TOKEN: "
        "'tok-5f3a9c-very-secret' is not allowed in app fruit (fruit:app)"
    )
    env.fake(name).fail("put", dashboard.DashboardHTTPError(400, echo), times=1)
    with pytest.raises(Exception, match="cannot submit") as caught:
        await env.reconciler.reconcile(REQUEST)
    await env.recorder.flush()
    said = [e["note"] for e in (await env.client.list(EVENTS, "ns")).items]
    ready = next(c for c in (await env.service())["status"]["conditions"] if c["type"] == "Ready")
    for text in [str(caught.value), ready["message"], *said]:
        assert "tok-5f3a9c-very-secret" not in text
    assert "API_TOKEN: '<redacted>'" in ready["message"]
    assert "fruit:app" in ready["message"]
    assert caught.value.__cause__ is None  # no unredacted text in a logged traceback


async def test_a_foreign_cluster_squatting_the_name_is_routed_around_and_reported(
    env: Env,
) -> None:
    service = rayservice()
    goal = clusters.spec_hash(service["spec"]["rayClusterConfig"])
    squatted = clusters.cluster_name("demo", goal, {})
    await env.client.create({
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": squatted, "namespace": "ns",
                     "annotations": {clusters.HASH_ANNOTATION: goal}},  # a copied hash
        "spec": service["spec"]["rayClusterConfig"],
    })  # fmt: skip
    await env.client.create(service)
    await env.synced()
    await env.reconcile()
    live = await env.live_clusters()
    assert len(live) == 2, live
    (ours,) = [n for n in live if n != squatted]
    assert ours.startswith("demo-")
    pending = (await env.service())["status"]["pendingServiceStatus"]["rayClusterName"]
    assert pending == ours
    await env.recorder.flush()
    taken = [e for e in (await env.client.list(EVENTS, "ns")).items
             if e["reason"] == "RayClusterNameTaken"]  # fmt: skip
    assert len(taken) == 1
    assert squatted in taken[0]["note"]
