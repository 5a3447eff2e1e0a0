"""Every verb the generated roles grant is used by some code path, or is there for a
reason the API server imposes (named below).

Both reconcilers run on one recording fake client through a RayService's life (created,
served, upgraded, old cluster deleted, deleted), an autoscaled RayCluster's (its
RBAC objects, scaled down), a token-auth RayCluster's (its token Secret, and a user's
named token Secret read for the dashboard) and a GCS fault-tolerant RayCluster's
deletion (its Redis clean-up Job), then the RayJob reconciler through a RayJob's deletion
rules (workers suspended, cluster deleted, the RayJob deleted), a retried RayJob (its
cluster and submitter Job deleted, its head Service repointed) and a RayCronJob's tick
(a RayJob created); the kubernetes-proxy dashboard runs against a
stand-in API server. What they asked for is compared with ``config/rbac/role.yaml``
and the proxy role: a granted verb nobody uses fails here, so least privilege cannot
rot.
"""

from __future__ import annotations

import base64
import copy
import datetime
from typing import Any

import pytest
import yaml
from aiohttp import web

import api.v1 as v1
from controllers.ray import dashboard, tokens
from controllers.raycluster import reconciler as raycluster_reconciler
from controllers.raycronjob import reconciler as raycronjob_reconciler
from controllers.rayjob import plan
from controllers.rayjob import reconciler as rayjob_reconciler
from controllers.rayservice import gateway
from runtime import clock, delegatedauth, reconcile
from runtime.client import resources
from tests.unit import helpers
from tests.unit.controllers.rayservice import scenario

REQUEST, T0, Env, rayservice = scenario.REQUEST, scenario.T0, scenario.Env, scenario.rayservice

ROOT = helpers.ROOT
PODS = resources.default_registry.for_kind("v1", "Pod")
HTTPROUTES = gateway.HTTPROUTES

NOT_CALLED: dict[tuple[str, str, str], str] = {
    ("", "pods/resize", "patch"): "escalation: the autoscaler's Role grants it",
    ("ray.io", "rayclusters", "get"): (
        "escalation: the autoscaler's Role grants it; the status writer's re-read after a 409"
    ),
    ("ray.io", "rayclusters/finalizers", "update"): (
        "OwnerReferencesPermissionEnforcement: blockOwnerDeletion on pods and services"
    ),
    ("ray.io", "rayservices/finalizers", "update"): (
        "OwnerReferencesPermissionEnforcement: blockOwnerDeletion on RayClusters and services"
    ),
    ("", "pods", "get"): "escalation: the autoscaler's Role grants it",
    ("ray.io", "rayservices", "get"): "the status writer's re-read after a 409",
    ("ray.io", "rayjobs", "get"): "the status writer's re-read after a 409",
    ("ray.io", "raycronjobs", "get"): "the status writer's re-read after a 409",
    ("ray.io", "rayjobs/finalizers", "update"): (
        "OwnerReferencesPermissionEnforcement: blockOwnerDeletion on its cluster, Job, Service"
    ),
}
"""Granted verbs no request of this scenario makes, and why they are granted anyway."""


def granted(path: str) -> set[tuple[str, str, str]]:
    role = yaml.safe_load((ROOT / path).read_text())
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def used(calls: list[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
    found = set()
    for verb, resource, sub in calls:
        plural, _, group = resource.partition(".")
        found.add((group, f"{plural}/{sub}" if sub else plural, verb))
    return found


class Operator:
    """The two reconcilers and the recorder on ``env``'s client; the calls they make
    (not the test's own) are kept in ``calls``. List and watch come from the cache's
    informers, in the background: every list and watch counts."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.clusters = raycluster_reconciler.Reconciler(env.client, env.cache, env.recorder)
        self.calls: list[tuple[str, str, str]] = []

    async def _run(self, work: Any) -> None:
        start = len(self.env.client.calls)
        try:
            await work
        finally:
            self.calls += self.env.client.calls[start:]

    async def service(self) -> None:
        await self._run(self.env.reconciler.reconcile(REQUEST))
        await self.env.synced()

    async def cluster(self, name: str) -> None:
        await self._run(self.clusters.reconcile(reconcile.Request("ns", name)))
        await self.env.synced()

    async def flush(self) -> None:
        await self._run(self.env.recorder.flush())

    async def both(self) -> None:
        await self.service()
        for name in await self.env.live_clusters():
            await self.cluster(name)

    def used(self) -> set[tuple[str, str, str]]:
        watched = [c for c in self.env.client.calls if c[0] in ("list", "watch")]
        return used(self.calls + watched)


async def _life(env: Env, op: Operator) -> None:
    env.reconcile = op.service  # type: ignore[method-assign]  # converge_first_cluster's
    both = op.both

    old = await env.converge_first_cluster()
    await op.cluster(old)  # pods, services, status
    svc = await env.service()
    config = copy.deepcopy(svc["spec"]["rayClusterConfig"])
    config["rayVersion"] = "2.61.0"
    svc["spec"]["rayClusterConfig"] = config
    await env.client.update(svc)
    await env.synced()
    await both()
    new = next(n for n in await env.live_clusters() if n != old)
    for pod in (await env.client.list(PODS, "ns", label_selector=f"ray.io/cluster={new}")).items:
        if pod["metadata"]["labels"].get("ray.io/node-type") == "head":
            await env.client.delete(PODS, "ns", pod["metadata"]["name"])
    await env.start_head(new)
    await op.service()
    env.fake(new).set_all("RUNNING")
    await op.service()
    await op.service()
    env.now = T0 + datetime.timedelta(seconds=31)
    await both()
    # appended worker group: the serving cluster updated in place
    svc = await env.service()
    svc["spec"]["rayClusterConfig"]["workerGroupSpecs"].append(
        {**svc["spec"]["rayClusterConfig"]["workerGroupSpecs"][0], "groupName": "extra"}
    )
    await env.client.update(svc)
    await env.synced()
    await both()
    # an autoscaled RayCluster: its ServiceAccount, Role and RoleBinding; then scaled down
    auto = rayservice()["spec"]["rayClusterConfig"]
    auto["enableInTreeAutoscaling"] = True
    await env.client.create(
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": "auto", "namespace": "ns"},
            "spec": auto,
        }
    )
    await env.synced()
    await op.cluster("auto")
    cluster = await env.client.get(v1.RAYCLUSTERS, "ns", "auto")
    cluster["spec"]["workerGroupSpecs"][0]["replicas"] = 0
    selector = "ray.io/cluster=auto,ray.io/node-type=worker"
    found = await env.client.list(PODS, "ns", label_selector=selector)
    workers = [p["metadata"]["name"] for p in found.items]
    cluster["spec"]["workerGroupSpecs"][0]["scaleStrategy"] = {"workersToDelete": workers}
    await env.client.update(cluster)
    await env.synced()
    await op.cluster("auto")
    # token auth: the RayCluster controller looks the token Secret up by GET and makes it;
    # a user's named Secret is read by GET for the dashboard (Secrets are never listed)
    tok = rayservice()["spec"]["rayClusterConfig"]
    tok["authOptions"] = {"mode": "token"}
    await env.client.create(
        {"apiVersion": "ray.io/v1", "kind": "RayCluster",
         "metadata": {"name": "tok", "namespace": "ns"}, "spec": tok}
    )  # fmt: skip
    await env.synced()
    await op.cluster("tok")
    await env.client.create(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "mine", "namespace": "ns"},
         "data": {"auth_token": base64.b64encode(b"t").decode()}}
    )  # fmt: skip
    named = {"metadata": {"name": "tok", "namespace": "ns"},
             "spec": {**tok, "authOptions": {"mode": "token", "secretName": "mine"}}}  # fmt: skip
    await op._run(tokens.Tokens(env.client).token_for(named))
    # a GCS fault-tolerant RayCluster: its Redis clean-up finalizer (update), then deleted:
    # pods deleted, the clean-up Job created (and listed and watched through the cache)
    ft = rayservice()["spec"]["rayClusterConfig"]
    ft["gcsFaultToleranceOptions"] = {"redisAddress": "redis:6379"}
    await env.client.create(
        {"apiVersion": "ray.io/v1", "kind": "RayCluster",
         "metadata": {"name": "ft", "namespace": "ns"}, "spec": ft}
    )  # fmt: skip
    await env.synced()
    await op.cluster("ft")
    await op.cluster("ft")
    await env.client.delete(v1.RAYCLUSTERS, "ns", "ft")
    await env.synced()
    await op.cluster("ft")  # the pods go
    await op.cluster("ft")  # the head is gone: the Job
    # NewClusterWithIncrementalUpgrade: the per-cluster serve Service, the Gateway and the
    # HTTPRoute created, then each updated (a new class; a route edited by someone else)
    inc = rayservice(upgradeStrategy={"type": "NewClusterWithIncrementalUpgrade",
                                      "clusterUpgradeOptions": {
                                          "stepSizePercent": 50, "intervalSeconds": 10,
                                          "gatewayClassName": "a"}})  # fmt: skip
    inc["metadata"]["name"] = "inc"
    inc["spec"]["rayClusterConfig"]["enableInTreeAutoscaling"] = True
    await env.client.create(inc)
    await env.synced()

    async def incremental() -> None:
        await op._run(env.reconciler.reconcile(reconcile.Request("ns", "inc")))
        await env.synced()

    await incremental()
    (first,) = [n for n in await env.live_clusters() if n.startswith("inc-")]
    await env.start_head(first, serve="true")
    await incremental()
    env.fake(first).set_all("RUNNING")
    await incremental()
    await incremental()
    inc = await env.client.get(v1.RAYSERVICES, "ns", "inc")
    inc["spec"]["upgradeStrategy"]["clusterUpgradeOptions"]["gatewayClassName"] = "b"
    await env.client.update(inc)
    await env.synced()
    await incremental()
    route = await env.client.get(HTTPROUTES, "ns", "inc-httproute")
    route["metadata"]["annotations"] = {}
    await env.client.update(route)
    await env.synced()
    await incremental()
    # the same Warning twice: the recorder aggregates it with a patch
    for _ in range(2):
        env.recorder.event(await env.service(), "Warning", "Same", "the same message")
        await op.flush()
    await env.client.delete(v1.RAYSERVICES, "ns", "demo")
    await env.synced()
    await both()
    await both()


async def _rayjob_life(env: Env, op: Operator) -> None:
    """RayJobs: one whose deletion rules suspend the workers, then delete the cluster, then
    the RayJob; one whose failed first attempt is retried (its cluster and submitter Job
    deleted, its head Service repointed); a RayCronJob's tick (a RayJob created)."""
    jobs = rayjob_reconciler.Reconciler(
        env.client, env.cache, env.recorder, env.dashboards,
        rayjob_reconciler.Options(address_mode="pod-ip"), clock=lambda: env.now,
    )  # fmt: skip
    cron = raycronjob_reconciler.Reconciler(
        env.client, env.cache, env.recorder, clock=lambda: env.now
    )

    async def job(name: str) -> dict[str, Any]:
        await op._run(jobs.reconcile(reconcile.Request("ns", name)))
        await env.synced()
        found: dict[str, Any] = await env.client.get(v1.RAYJOBS, "ns", name)
        return found

    async def running(name: str) -> str:
        status = (await job(name))["status"]  # New -> Initializing
        await job(name)  # the cluster
        cluster = status["rayClusterName"]
        owner = await env.client.get(v1.RAYCLUSTERS, "ns", cluster)
        await env.start_head(cluster)
        await env.client.create({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"{cluster}-head-svc", "namespace": "ns"},
            "spec": {"selector": {"ray.io/cluster": cluster},
                     "ports": [{"name": "dashboard", "port": 8265}]},
        })  # fmt: skip
        owner["status"] = {"state": "ready"}
        await env.client.update_status(owner)
        await env.synced()
        await job(name)  # Running: the submitter Job
        await job(name)  # the RayJob's head Service
        return cluster

    async def finish(name: str, outcome: str) -> None:
        status = (await env.client.get(v1.RAYJOBS, "ns", name))["status"]
        env.fake(status["rayClusterName"]).set_job(status["jobId"], outcome)
        submitter = await env.client.get(plan.JOBS, "ns", name)
        done = {"type": "Complete", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        submitter["status"] = {"conditions": [done]}
        await env.client.update_status(submitter)
        await env.synced()
        await job(name)

    rules = [{"policy": policy, "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": ttl}}
             for policy, ttl in (("DeleteWorkers", 0), ("DeleteCluster", 10),
                                 ("DeleteSelf", 20))]  # fmt: skip
    spec = {"entrypoint": "python pi.py", "deletionStrategy": {"deletionRules": rules},
            "rayClusterSpec": rayservice()["spec"]["rayClusterConfig"]}  # fmt: skip
    await env.client.create(
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayJob",
            "metadata": {"name": "rules", "namespace": "ns"},
            "spec": spec,
        }
    )
    await env.synced()
    await running("rules")
    await finish("rules", "SUCCEEDED")
    finished = env.now
    for ttl in (0, 11, 21):
        env.now = finished + datetime.timedelta(seconds=ttl + 1)
        await job("rules")
    await op._run(jobs.reconcile(reconcile.Request("ns", "rules")))  # the finalizer: gone
    await env.synced()
    left = await env.client.list(v1.RAYJOBS, "ns")  # (the test's list, not the reconciler's)
    assert "rules" not in {j["metadata"]["name"] for j in left.items}
    retried = {**spec, "backoffLimit": 1}
    del retried["deletionStrategy"]
    await env.client.create(
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayJob",
            "metadata": {"name": "retried", "namespace": "ns"},
            "spec": retried,
        }
    )
    await env.synced()
    await running("retried")
    await finish("retried", "FAILED")
    for _ in range(4):  # Retrying: the cluster and the submitter deleted, then New
        await job("retried")
    await running("retried")  # the RayJob's head Service now points at the new cluster
    made = await env.client.create({
        "apiVersion": "ray.io/v1", "kind": "RayCronJob",
        "metadata": {"name": "nightly", "namespace": "ns"},
        "spec": {"schedule": "@every 1m",
                 "jobTemplate": {"entrypoint": "python etl.py",
                                 "rayClusterSpec": spec["rayClusterSpec"]}},
    })  # fmt: skip
    await env.synced()
    created = clock.parse_rfc3339(made["metadata"]["creationTimestamp"])
    assert created is not None
    env.now = created + datetime.timedelta(days=1)
    await op._run(cron.reconcile(reconcile.Request("ns", "nightly")))
    await env.synced()


@pytest.mark.gateway_api
async def test_every_verb_of_the_manager_role_is_used_or_explained(env: Env) -> None:
    op = Operator(env)
    await _life(env, op)
    await _rayjob_life(env, op)
    role = granted("config/rbac/role.yaml")
    unused = role - op.used() - set(NOT_CALLED)
    assert unused == set(), f"granted, never used, not explained: {sorted(unused)}"
    assert set(NOT_CALLED) <= role, "an explanation for a verb no longer granted"


async def test_the_proxy_role_is_exactly_what_the_proxy_mode_asks() -> None:
    seen: set[tuple[str, str, str]] = set()

    async def handle(request: web.Request) -> web.StreamResponse:
        resource = "services/proxy" if "/services/" in request.path else "pods/proxy"
        seen.add(("", resource, {"GET": "get", "PUT": "update"}[request.method]))
        if request.method == "GET" and "/services/" in request.path:
            return web.json_response({"applications": {}})
        return web.Response(status=200)

    async with helpers.api_server(handle) as api, dashboard.Dashboards(api=api) as owner:
        client = owner.client_for(
            dashboard.address("kubernetes-proxy", cluster="demo", namespace="ns")
        )
        await client.get_serve_applications()
        await client.put_serve_applications({"applications": []})
        pod = dashboard.ServePod(namespace="ns", name="demo-head-x", ip=None)
        assert await client.serve_proxy_healthy(pod)
    assert seen == granted("config/overlays/kubernetes-proxy/proxy_role.yaml")


async def test_the_metrics_auth_role_is_exactly_what_secure_metrics_asks() -> None:
    seen: set[tuple[str, str, str]] = set()

    class Recording:
        async def request(
            self, method: str, path: str, *, body: Any = None, request_timeout: Any = None
        ) -> Any:
            _, _, group, _, plural = path.split("/")  # /apis/<group>/v1/<plural>
            seen.add((group, plural, {"POST": "create"}[method]))
            user = {"username": "system:serviceaccount:monitoring:prometheus"}
            return {"status": {"authenticated": True, "user": user, "allowed": True}}

    auth = delegatedauth.DelegatedAuth(Recording())
    user = await auth.authenticate("a-token")
    assert user is not None
    assert await auth.authorize(user, "get", "/metrics")
    assert seen == granted("config/overlays/metrics-secure/metrics_auth_role.yaml")
