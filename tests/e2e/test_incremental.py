"""End to end: ``upgradeStrategy.type: NewClusterWithIncrementalUpgrade`` with the
``rayservice-manager`` binary, the Ray simulator and a real gateway (Traefik, started once
for the module, before any manager: a manager asks at start-up whether the Gateway API is
served).

Requests go through Traefik's entry point all the time (:class:`harness.GatewayTraffic`);
each answer names the pod that gave it, and so the cluster. Meanwhile :class:`Upgrade`
polls the HTTPRoute's weights, both clusters' Serve ``target_capacity`` (asked of their
heads), the clusters, the head Service and the RayService's conditions. What users live
through:

- an upgrade under traffic: no request fails; at each traffic step the new cluster answers
  its route weight's share (within 10 points, once Traefik had time to apply it); the total
  capacity stays within ``100 + maxSurgePercent``; in the end the route, the head Service
  and the status say the new cluster, and the old one goes after the deletion delay; at rest,
  before and after, the RayService is not written at all;
- the manager SIGKILLed mid-upgrade and replaced: the upgrade goes on from where it was
  (no new cluster, no weight or capacity ever going back), no request fails;
- the spec reverted mid-upgrade: a rollback (``RollbackInProgress``,
  ``DesiredClusterSpecChanged``) that brings the traffic back to the old cluster and
  deletes the new one after the delay, no request failing.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import ipaddress
import pathlib
import time
from typing import Any

import aiohttp
import pytest
import yaml

from runtime.client import client as client_
from runtime.client import errors, resources
from tests.e2e import harness, rayservices
from tests.support import gateway

# Every scenario here starts what only the suite's own cluster has (see own_cluster).
pytestmark = pytest.mark.own_cluster

Obj = dict[str, Any]
ROOT = pathlib.Path(__file__).parents[2]
SAMPLE = ROOT / "config" / "samples" / "ray_v1_rayservice.yaml"
NAME = "rayservice-sample"
HEAD_SERVICE = f"{NAME}-head-svc"
ROUTES = resources.Resource("gateway.networking.k8s.io", "v1", "HTTPRoute", "httproutes")
ROUTE = f"{NAME}-httproute"
SERVE_SERVICE_SUFFIX = "-serve-svc"
MIGRATED_ANNOTATION = "ray.io/traffic-migrated-at"
PATHS = {"/fruit": "fruit", "/calc/add": "calculator"}
"""What the sample's applications answer (the simulator answers an app's name)."""
MAX_SURGE = 50
OPTIONS = {
    "maxSurgePercent": MAX_SURGE,
    "stepSizePercent": 25,
    "intervalSeconds": 5,
    "gatewayClassName": gateway.GATEWAY_CLASS,
}
DELETION_DELAY = 5
SETTLE = 1.5
"""Seconds after a weight change was seen during which answers are not counted: Traefik
applies a route's change a moment after it is written."""
POLL = 0.2
SHARE_SAMPLE = 100
"""Answers at least counted at each traffic step."""
SHARE_TOLERANCE = 10
REST = 20.0
"""Seconds an idle RayService is watched for writes."""


def incremental_sample(namespace: str) -> Obj:
    """The sample RayService, upgraded incrementally through the ``traefik`` class, with
    the in-tree autoscaler (required) and a short deletion delay."""
    obj: Obj = yaml.safe_load(SAMPLE.read_text())
    obj["metadata"]["namespace"] = namespace
    spec = obj["spec"]
    spec["rayClusterDeletionDelaySeconds"] = DELETION_DELAY
    spec["upgradeStrategy"] = {
        "type": "NewClusterWithIncrementalUpgrade",
        "clusterUpgradeOptions": dict(OPTIONS),
    }
    spec["rayClusterConfig"]["enableInTreeAutoscaling"] = True
    return obj


def route_weights(route: Obj | None) -> dict[str, int]:
    """``{cluster: weight}`` of the route's first rule (backends ``<cluster>-serve-svc``)."""
    if route is None:
        return {}
    rules = (route.get("spec") or {}).get("rules") or [{}]
    return {
        str(ref["name"]).removesuffix(SERVE_SERVICE_SUFFIX): int(ref.get("weight", 1))
        for ref in rules[0].get("backendRefs") or []
    }


@dataclasses.dataclass(frozen=True)
class Step:
    """One stretch of time with the same route weights, and who answered then."""

    weights: dict[str, int]
    answers: int
    """Answers counted (those in the first :data:`SETTLE` s are not)."""
    share: float
    """Percent of them from the cluster the step is about."""

    def __str__(self) -> str:
        return f"{self.weights} -> {self.share:.1f} % of {self.answers}"


class Upgrade:
    """What an incremental upgrade of one RayService is made of, polled every
    :data:`POLL` s: the route's weights, both clusters' Serve ``target_capacity`` (from their
    heads, the cluster whose capacity may grow read first: reading the other one later can
    only see it lower, so a sum above the bound is real), which clusters exist, the head
    Service's cluster, and the RayService's conditions."""

    def __init__(
        self, api: client_.Client, world: harness.World, namespace: str, name: str = NAME
    ) -> None:
        self.api = api
        self.world = world
        self.namespace = namespace
        self.name = name
        self.routes: list[tuple[float, dict[str, int]]] = []
        """(when seen, weights), on every change."""
        self.generations: list[tuple[float, tuple[int, ...]]] = []
        """(when seen, (the route's generation, the generations its parent statuses were
        written for)), on every change."""
        self.capacities: list[tuple[float, dict[str, int]]] = []
        """(when seen, {cluster: target_capacity}), on every change (0 before Serve runs)."""
        self.most_capacity = 0
        self.clusters: list[tuple[float, frozenset[str]]] = []
        """(when seen, the RayClusters that exist), on every change."""
        self.uids: dict[str, set[str]] = {}
        """Cluster name -> the uids it had (a cluster deleted and created again has two)."""
        self.head_service: list[tuple[float, str | None]] = []
        """(when seen, the cluster the head Service selects), on every change."""
        self.conditions: list[tuple[float, str, str, str]] = []
        """(when seen, type, status, reason) of every condition change."""
        self.pods: dict[str, str] = {}
        """Pod IP -> its cluster (``ray.io/cluster``), of every pod seen."""
        self.heads: dict[str, str] = {}
        """Cluster -> its head pod's IP."""
        self.grows: str | None = None
        """The cluster whose Serve capacity may grow (read first)."""
        self._task: asyncio.Task[None] | None = None
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Upgrade:
        self._http = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=2, connect=1), trust_env=False
        )
        await self.poll()
        self._task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        assert self._http is not None
        failed = self._task.done() and not self._task.cancelled() and self._task.exception()
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        await self._http.close()
        if failed:
            raise failed

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(POLL)
            try:
                await self.poll()
            except (errors.ApiError, aiohttp.ClientError, OSError, TimeoutError):
                continue

    @staticmethod
    def _note(history: list[tuple[float, Any]], value: Any) -> None:
        if not history or history[-1][1] != value:
            history.append((time.monotonic(), value))

    async def poll(self) -> None:
        api, ns = self.api, self.namespace
        pods = await api.list(harness.PODS, ns, label_selector="ray.io/cluster")
        for pod in pods.items:
            ip = (pod.get("status") or {}).get("podIP")
            labels = pod["metadata"].get("labels") or {}
            if not ip:
                continue
            self.pods[ip] = labels["ray.io/cluster"]
            if labels.get("ray.io/node-type") == "head":
                self.heads[labels["ray.io/cluster"]] = ip
        listed = (await api.list(harness.RAYCLUSTERS, ns)).items
        for item in listed:
            self.uids.setdefault(item["metadata"]["name"], set()).add(item["metadata"]["uid"])
        names = frozenset(c["metadata"]["name"] for c in listed)
        self._note(self.clusters, names)
        try:
            route = await api.get(ROUTES, ns, ROUTE)
        except errors.NotFound:
            route = None
        self._note(self.routes, route_weights(route))
        if route is not None:
            acknowledged = [
                c.get("observedGeneration")
                for parent in (route.get("status") or {}).get("parents") or []
                for c in parent.get("conditions") or []
                if c.get("type") == "Accepted"
            ]
            self._note(self.generations, (route["metadata"]["generation"], *acknowledged))
        order = sorted(names, key=lambda n: n != self.grows)
        capacities = {}
        for cluster in order:
            found = await self.capacity(cluster)
            if found is not None:
                capacities[cluster] = found
        self._note(self.capacities, capacities)
        self.most_capacity = max(self.most_capacity, sum(capacities.values()))
        try:
            head = await api.get(harness.SERVICES, ns, HEAD_SERVICE)
            self._note(
                self.head_service, (head["spec"].get("selector") or {}).get("ray.io/cluster")
            )
        except errors.NotFound:
            pass
        obj = await rayservices.get(api, ns, self.name)
        for c in (obj.get("status") or {}).get("conditions") or []:
            seen = [x for x in self.conditions if x[1] == c["type"]]
            now = (c["type"], c["status"], c.get("reason", ""))
            if not seen or seen[-1][1:] != now:
                self.conditions.append((time.monotonic(), *now))

    async def capacity(self, cluster: str) -> int | None:
        """Serve's ``target_capacity`` on ``cluster``'s head (unset counts as 100, and 0
        while Serve runs no application); None when the head cannot be asked."""
        ip = self.heads.get(cluster)
        if ip is None:
            return None
        cidr = self.world.pod_cidr
        if cidr is None or ipaddress.ip_address(ip) not in cidr:
            raise AssertionError(f"head {ip} is outside the pod network ({cidr}): not dialled")
        assert self._http is not None
        try:
            async with self._http.get(f"http://{ip}:8265/api/serve/applications/") as answer:
                if answer.status != 200:
                    return None
                body = await answer.json()
        except (aiohttp.ClientError, OSError, TimeoutError):
            return None
        if not body.get("applications"):
            return 0
        value = body.get("target_capacity")
        return 100 if value is None else round(value)

    def timeline(self, origin: float) -> list[str]:
        """Every change seen, in order, at seconds since ``origin``."""
        names = sorted({c for _, n in self.clusters for c in n})
        short = {n: f"c{i}" for i, n in enumerate(names)}

        def brief(value: Any) -> str:
            text = str(value)
            for name, alias in short.items():
                text = text.replace(name, alias)
            return text

        found = [
            (at, f"{what} {brief(value)}")
            for what, history in (
                ("route", self.routes),
                ("generation", self.generations),
                ("capacity", self.capacities),
                ("clusters", [(t, sorted(v)) for t, v in self.clusters]),
                ("head", self.head_service),
            )
            for at, value in history
        ]
        found += [(at, f"{t}={s}/{r}") for at, t, s, r in self.conditions]
        return [f"{at - origin:7.2f} {text}" for at, text in sorted(found)] + [brief(short)]

    def weights(self) -> dict[str, int]:
        return self.routes[-1][1] if self.routes else {}

    def condition_seen(self, type_: str, status: str, reason: str | None = None) -> bool:
        return any(
            t == type_ and s == status and (reason is None or r == reason)
            for _, t, s, r in self.conditions
        )

    def steps(self, traffic: harness.GatewayTraffic, cluster: str, since: float) -> list[Step]:
        """Each route-weight stretch since ``since`` and the share of answers that came from
        ``cluster``'s pods then (after :data:`SETTLE` s; a stretch ends one poll before its
        successor was seen, when it may already have been written)."""
        found = []
        changes = [(t, w) for t, w in self.routes if w]
        for i, (start, weights) in enumerate(changes):
            end = changes[i + 1][0] - POLL if i + 1 < len(changes) else time.monotonic()
            if end < since:
                continue
            start = max(start, since)
            answered = [self.pods.get(ip, "?") for at, ip in traffic.answers
                        if start + SETTLE <= at < end]  # fmt: skip
            share = 100 * answered.count(cluster) / len(answered) if answered else 0.0
            found.append(Step(weights, len(answered), share))
        return found

    async def wait(self, check: Any, within: float, what: str) -> Any:
        async def done() -> Any:
            return check()

        return await harness.until(done, within, what)


def no_failures(traffic: harness.GatewayTraffic, upgrade: Upgrade) -> None:
    """No request failed, and every answer came from a pod of this RayService."""
    strangers = {ip for _, ip in traffic.answers if ip not in upgrade.pods}
    assert not strangers, f"answered by pods that are not this RayService's: {strangers}"
    failures = traffic.failures
    assert not failures, (
        f"{len(failures)} failed of {traffic.ok + len(failures)}, from {failures[0].at:.2f} s "
        f"to {failures[-1].at:.2f} s: {failures[:3]}"
    )


def shares_follow_weights(steps: list[Step], cluster: str) -> None:
    """Every stretch that split the traffic counted at least :data:`SHARE_SAMPLE` answers,
    and in every stretch ``cluster``'s share was its weight within :data:`SHARE_TOLERANCE`
    points (a stretch with one cluster at 100 % may be too short to count much)."""
    for step in steps:
        weight = step.weights.get(cluster, 0)
        if 0 < weight < 100:
            assert step.answers >= SHARE_SAMPLE, [str(s) for s in steps]
        if step.answers:
            assert abs(step.share - weight) <= SHARE_TOLERANCE, [str(s) for s in steps]


async def ready_behind_the_gateway(
    api: client_.Client,
    namespace: str,
    traffic: harness.GatewayTraffic,
    upgrade: Upgrade,
) -> str:
    """Wait until the RayService is Ready, routed 100 % to its cluster and answering
    through the gateway; its cluster."""
    obj = await rayservices.wait_ready(api, namespace, NAME)
    cluster = rayservices.active_cluster(obj)
    assert cluster is not None
    await upgrade.wait(lambda: upgrade.weights() == {cluster: 100}, 30, "the route to the cluster")
    await traffic.wait_routed(50, within=60)

    async def settled() -> bool:  # the worker joins the serve endpoints after Ready
        found = await rayservices.get(api, namespace, NAME)
        return bool((found.get("status") or {}).get("numServeEndpoints") == 2)

    await harness.until(settled, 30, "the head and the worker serving")
    return cluster


async def rest(api: client_.Client, namespace: str, seconds: float) -> None:
    """Nothing writes the RayService (nor the route's spec or annotation) for ``seconds``."""
    before = await rayservices.get(api, namespace, NAME)
    route = await api.get(ROUTES, namespace, ROUTE)
    await asyncio.sleep(seconds)
    after = await rayservices.get(api, namespace, NAME)
    later = await api.get(ROUTES, namespace, ROUTE)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], (
        before.get("status"),
        after.get("status"),
    )
    assert later["metadata"]["generation"] == route["metadata"]["generation"]
    annotations = [(r["metadata"].get("annotations") or {}).get(MIGRATED_ANNOTATION)
                   for r in (route, later)]  # fmt: skip
    assert annotations[0] == annotations[1], annotations


# -- scenarios ---------------------------------------------------------------------------------


async def test_an_incremental_upgrade_under_traffic_follows_the_route_and_loses_nothing(
    world: harness.World,
    api: client_.Client,
    namespace: str,
    traefik: gateway.Traefik,
    managers: harness.Managers,
) -> None:
    await managers.lead()
    await api.create(incremental_sample(namespace))
    async with (
        Upgrade(api, world, namespace) as upgrade,
        harness.GatewayTraffic(traefik.url, PATHS) as traffic,
    ):
        old = await ready_behind_the_gateway(api, namespace, traffic, upgrade)
        await rest(api, namespace, REST)  # at rest before: not one write

        changed = time.monotonic()
        await rayservices.update_spec(api, namespace, NAME, rayservices.bump_ray_version)

        def new_cluster() -> str | None:
            return next((c for c in upgrade.clusters[-1][1] if c != old), None)

        new = await upgrade.wait(new_cluster, 30, "a new cluster")
        upgrade.grows = new

        def promoted() -> bool:
            return bool(upgrade.head_service) and upgrade.head_service[-1][1] == new

        await upgrade.wait(promoted, 120, "the head Service on the new cluster")
        switched = upgrade.head_service[-1][0]
        duration = switched - changed
        obj = await rayservices.wait_ready(api, namespace, NAME, cluster_not=old, within=30)
        assert rayservices.active_cluster(obj) == new
        assert upgrade.weights() == {new: 100}

        def old_gone() -> bool:
            return upgrade.clusters[-1][1] == {new}

        await upgrade.wait(old_gone, DELETION_DELAY + 60, "the old cluster deleted")
        gone = upgrade.clusters[-1][0]
        await rest(api, namespace, REST)  # at rest after: not one write
        steps = upgrade.steps(traffic, new, since=changed)
    report = {
        "steps": [str(s) for s in steps],
        "capacities": [c for _, c in upgrade.capacities],
        "upgrade_s": round(duration, 1),
        "deleted_after_s": round(gone - switched, 1),
        "requests": traffic.ok,
        "failed": len(traffic.failures),
    }
    print(report, *upgrade.timeline(traffic.started), sep="\n")
    no_failures(traffic, upgrade)
    # Each traffic step (25, 50, 75 then 100) seen, and answered by its weights.
    routed = [s.weights.get(new, 0) for s in steps]
    assert sorted(set(routed) - {0}) == [25, 50, 75, 100], report
    assert routed == sorted(routed), report
    shares_follow_weights(steps, new)
    assert upgrade.most_capacity <= 100 + MAX_SURGE, report
    assert upgrade.capacities[-1][1] == {new: 100}, report
    # Deleted after the delay (its delete-after has whole seconds: up to 1 s early; the
    # polls see each change up to one poll late).
    assert DELETION_DELAY - 1 - 2 * POLL <= gone - switched <= DELETION_DELAY + 30, report
    obj = await rayservices.get(api, namespace, NAME)
    assert rayservices.condition(obj, "UpgradeInProgress")["status"] == "False"
    assert "pendingServiceStatus" not in obj["status"]
    assert obj["status"]["activeServiceStatus"]["trafficRoutedPercent"] == 100
    assert obj["status"]["activeServiceStatus"]["targetCapacity"] == 100


async def test_a_manager_killed_mid_upgrade_is_replaced_and_the_upgrade_goes_on(
    world: harness.World,
    api: client_.Client,
    namespace: str,
    traefik: gateway.Traefik,
    managers: harness.Managers,
) -> None:
    first = managers.start()
    await first.wait_leading()
    await api.create(incremental_sample(namespace))
    async with (
        Upgrade(api, world, namespace) as upgrade,
        harness.GatewayTraffic(traefik.url, PATHS) as traffic,
    ):
        old = await ready_behind_the_gateway(api, namespace, traffic, upgrade)
        await rayservices.update_spec(api, namespace, NAME, rayservices.bump_ray_version)

        def new_routed() -> str | None:
            return next((c for c, w in upgrade.weights().items() if c != old and w > 0), None)

        new = await upgrade.wait(new_routed, 60, "the first traffic step")
        upgrade.grows = new
        first.kill()
        killed_at = upgrade.weights()
        second = managers.start()
        await second.wait_leading(within=60)

        def finished() -> bool:
            return upgrade.weights() == {new: 100} and upgrade.head_service[-1][1] == new

        await upgrade.wait(finished, 120, "the upgrade finished by the new manager")

        def old_gone() -> bool:
            return upgrade.clusters[-1][1] == {new}

        await upgrade.wait(old_gone, DELETION_DELAY + 60, "the old cluster deleted")
        await rayservices.wait_ready(api, namespace, NAME, cluster_not=old, within=30)
    print(f"killed at {killed_at}", *upgrade.timeline(traffic.started), sep="\n")
    no_failures(traffic, upgrade)
    assert upgrade.uids.keys() == {old, new}, upgrade.uids  # nothing created again,
    assert all(len(uids) == 1 for uids in upgrade.uids.values()), upgrade.uids  # nor replaced
    routed = [w.get(new, 0) for _, w in upgrade.routes]
    assert routed == sorted(routed), (killed_at, upgrade.routes)  # weights never went back
    grown = [c[new] for _, c in upgrade.capacities if new in c]
    assert grown == sorted(grown), upgrade.capacities  # capacity never went back either
    assert upgrade.most_capacity <= 100 + MAX_SURGE, upgrade.capacities


async def test_a_spec_reverted_mid_upgrade_rolls_back_through_the_route(
    world: harness.World,
    api: client_.Client,
    namespace: str,
    traefik: gateway.Traefik,
    managers: harness.Managers,
) -> None:
    await managers.lead()
    created = await api.create(incremental_sample(namespace))
    original = copy.deepcopy(created["spec"]["rayClusterConfig"])
    async with (
        Upgrade(api, world, namespace) as upgrade,
        harness.GatewayTraffic(traefik.url, PATHS) as traffic,
    ):
        old = await ready_behind_the_gateway(api, namespace, traffic, upgrade)
        await rayservices.update_spec(api, namespace, NAME, rayservices.bump_ray_version)

        def new_routed() -> str | None:
            return next((c for c, w in upgrade.weights().items() if c != old and w > 0), None)

        new = await upgrade.wait(new_routed, 60, "the first traffic step")
        upgrade.grows = old  # from now on only the old cluster's capacity may grow
        reverted = time.monotonic()
        await rayservices.update_spec(
            api, namespace, NAME, lambda o: o["spec"].update(rayClusterConfig=original)
        )

        def rolling_back() -> bool:
            return upgrade.condition_seen("RollbackInProgress", "True", "DesiredClusterSpecChanged")

        await upgrade.wait(rolling_back, 30, "RollbackInProgress")

        def back() -> bool:
            return upgrade.weights() == {old: 100}

        await upgrade.wait(back, 60, "the route back to the old cluster alone")
        returned = upgrade.routes[-1][0]

        def new_gone() -> bool:
            return upgrade.clusters[-1][1] == {old}

        await upgrade.wait(new_gone, DELETION_DELAY + 60, "the new cluster deleted")
        gone = upgrade.clusters[-1][0]
        obj = await rayservices.wait_ready(api, namespace, NAME, within=30)
        steps = upgrade.steps(traffic, old, since=reverted)
    report = {
        "steps": [str(s) for s in steps],
        "capacities": [c for _, c in upgrade.capacities],
        "rollback_s": round(returned - reverted, 1),
        "deleted_after_s": round(gone - returned, 1),
        "requests": traffic.ok,
        "failed": len(traffic.failures),
    }
    print(report, *upgrade.timeline(traffic.started), sep="\n")
    no_failures(traffic, upgrade)
    assert rayservices.active_cluster(obj) == old
    assert rayservices.condition(obj, "RollbackInProgress").get("status", "False") == "False"
    assert upgrade.head_service[-1][1] == old
    assert {c for _, names in upgrade.clusters for c in names} == {old, new}
    back_weights = [w.get(old, 0) for t, w in upgrade.routes if t >= reverted]
    assert back_weights == sorted(back_weights), upgrade.routes  # only ever back to old
    assert upgrade.capacities[-1][1] == {old: 100}, report
    assert upgrade.most_capacity <= 100 + MAX_SURGE, report
    assert DELETION_DELAY - 1 - 2 * POLL <= gone - returned <= DELETION_DELAY + 30, report
