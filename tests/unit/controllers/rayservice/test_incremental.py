"""NewClusterWithIncrementalUpgrade: the state machine alone, then every step of a pass
planned from a hand-built snapshot (what a restarted operator would read at that step).

The objects are the truth: the HTTPRoute's weights and its ``ray.io/traffic-migrated-at``,
Serve's ``target_capacity``. A snapshot taken in the middle of an upgrade plans the next
step, never a restart of the upgrade.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import itertools
from typing import Any

import pytest

from controllers.ray import dashboard
from controllers.rayservice import (
    clusters,
    gateway,
    incremental,
    plan,
    roles,
    services,
    validation,
)
from controllers.rayservice import snapshot as snapshot_
from runtime import clock

NOW = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)
ALLOWED = gateway.GatewayClasses.parse(["traefik"])
"""The operator allows the tests' class (``--gateway-classes=traefik``)."""
SETTINGS = plan.Settings(gateway_classes=ALLOWED)
SERVE_CONFIG = "applications:\n  - name: fruit\n    import_path: fruit:app\n"
CONFIG = {"applications": [{"name": "fruit", "import_path": "fruit:app"}]}
OPTIONS = {
    "maxSurgePercent": 50, "stepSizePercent": 25, "intervalSeconds": 30,
    "gatewayClassName": "traefik",
}  # fmt: skip

Obj = dict[str, Any]


# -- the state machine ----------------------------------------------------------------------


def run(surge: int, step: int, *, to_cap: int, frm_cap: int, to_traffic: int) -> list[Any]:
    """Every step from a state until Done, each taken at once (the interval passed, both
    ready); checks the invariants on the way."""
    options = incremental.Options(max_surge=surge, step=step, interval=1.0)
    taken: list[Any] = []
    for _ in range(1000):
        to = incremental.Side("to", to_cap, to_traffic, True)
        frm = incremental.Side("from", frm_cap, 100 - to_traffic, True)
        got = incremental.next_step(to, frm, options, since=None, routable=True)
        taken.append(got)
        if isinstance(got, incremental.Done):
            return taken
        if isinstance(got, incremental.SetCapacity):
            if got.cluster == "to":
                to_cap = got.value
            else:
                frm_cap = got.value
        else:
            assert isinstance(got, incremental.MoveTraffic)
            to_traffic = got.to
        assert to_cap + frm_cap <= 100 + surge, "more capacity than 100 + maxSurgePercent"
        assert to_traffic <= to_cap, "traffic sent to capacity that is not there"
        assert 100 - to_traffic <= frm_cap, "the old cluster's share exceeds its capacity"
    raise AssertionError(f"no end after 1000 steps: {taken[-5:]}")


VALID = [(s, t) for s, t in itertools.product([1, 25, 50, 100], [1, 10, 25, 100]) if t <= s]


@pytest.mark.parametrize(("surge", "step"), VALID)
def test_a_forward_upgrade_always_ends_within_its_bounds(surge: int, step: int) -> None:
    taken = run(surge, step, to_cap=0, frm_cap=100, to_traffic=0)
    assert isinstance(taken[0], incremental.SetCapacity)  # capacity comes before traffic
    assert taken[0] == incremental.SetCapacity("to", min(100, surge))


def test_a_rollback_mid_way_keeps_capacity_under_the_traffic_kuberay_would_drop() -> None:
    """Mid-upgrade (old 50 % capacity and traffic, new 100 % capacity, 50 % traffic), the
    spec goes back: to = the old cluster. KubeRay's floor of 0 would take the new cluster
    to 0 capacity (maxSurgePercent 100) while it still has half the traffic."""
    options = incremental.Options(max_surge=100, step=25, interval=1.0)
    to = incremental.Side("old", 50, 50, True)
    frm = incremental.Side("new", 100, 50, True)
    got = incremental.next_step(to, frm, options, since=None, routable=True)
    assert got == incremental.SetCapacity("new", 50)  # never below its 50 % of traffic
    assert run(100, 25, to_cap=50, frm_cap=100, to_traffic=50)[-1] == incremental.Done()


@pytest.mark.parametrize(
    ("to", "frm", "since", "routable", "expected"),
    [
        # done: all traffic to, nothing left on from (or from unreadable at full capacity)
        ((100, 100, True), (0, 0, True), None, False, incremental.Done()),
        ((100, 100, True), (None, 0, True), None, True, incremental.Done()),
        # nothing moves while the gateway or the route is not ready
        ((0, 0, True), (100, 100, True), None, False, "not Accepted and Programmed"),
        # a capacity that was not read holds everything
        ((None, 0, True), (100, 100, True), None, True, "is not known yet"),
        # capacity up, then down on the other side once the total passed 100
        ((0, 0, True), (100, 100, True), None, True, incremental.SetCapacity("to", 50)),
        ((50, 50, True), (100, 50, True), None, True, incremental.SetCapacity("from", 50)),
        # ... only once the gateway had the interval to route by the last weights
        ((100, 100, True), (50, 0, True), 29.0, True, "shrinks in 1 s"),
        ((100, 100, True), (50, 0, True), 30.0, True, incremental.SetCapacity("from", 0)),
        # traffic follows capacity, only while ready and only once the interval passed
        ((50, 25, True), (100, 75, True), None, True, incremental.MoveTraffic(50)),
        ((50, 25, False), (100, 75, True), None, True, "not all RUNNING"),
        ((50, 25, True), (100, 75, True), 29.0, True, "due in 1 s"),
        ((50, 25, True), (100, 75, True), 30.0, True, incremental.MoveTraffic(50)),
        # a step never goes past the capacity
        ((40, 30, True), (100, 70, True), None, True, incremental.MoveTraffic(40)),
    ],
)  # fmt: skip
def test_next_step(
    to: tuple[int | None, int, bool], frm: tuple[int | None, int, bool], since: float | None,
    routable: bool, expected: Any,
) -> None:  # fmt: skip
    options = incremental.Options(max_surge=50, step=25, interval=30.0)
    got = incremental.next_step(
        incremental.Side("to", *to), incremental.Side("from", *frm), options,
        since=since, routable=routable,
    )  # fmt: skip
    if isinstance(expected, str):
        assert isinstance(got, incremental.Wait)
        assert expected in got.reason
    else:
        assert got == expected


# -- passes -----------------------------------------------------------------------------------


def config(version: str) -> Obj:
    def template(name: str) -> Obj:
        return {"spec": {"containers": [{"name": name, "image": f"rayproject/ray:{version}"}]}}

    return {
        "rayVersion": version,
        "enableInTreeAutoscaling": True,
        "headGroupSpec": {"rayStartParams": {}, "template": template("ray-head")},
        "workerGroupSpecs": [
            {"groupName": "g", "replicas": 1, "minReplicas": 0, "maxReplicas": 4,
             "rayStartParams": {}, "template": template("ray-worker")},
        ],
    }  # fmt: skip


def service(cluster_config: Obj, status: Obj | None = None, **strategy: Any) -> Obj:
    return {
        "apiVersion": "ray.io/v1", "kind": "RayService",
        "metadata": {"name": "demo", "namespace": "ns", "uid": "svc-uid", "generation": 1},
        "spec": {
            "serveConfigV2": SERVE_CONFIG, "rayClusterConfig": cluster_config,
            "upgradeStrategy": {"type": "NewClusterWithIncrementalUpgrade",
                                "clusterUpgradeOptions": {**OPTIONS, **strategy}},
        },
        "status": status or {},
    }  # fmt: skip


def cluster(svc: Obj, cluster_config: Obj) -> Obj:
    owner = {**svc, "spec": {**svc["spec"], "rayClusterConfig": cluster_config}}
    name = clusters.cluster_name("demo", clusters.spec_hash(cluster_config), {})
    made = clusters.desired_cluster(owner, name)
    made["metadata"]["uid"] = f"uid-{name}"
    made["metadata"]["annotations"][clusters.SERVE_CONFIG_ANNOTATION] = clusters.serve_config_hash(
        CONFIG
    )
    return made


OLD, NEW = config("2.60.0"), config("2.61.0")
A = cluster(service(OLD), OLD)
B = cluster(service(NEW), NEW)
A_NAME, B_NAME = A["metadata"]["name"], B["metadata"]["name"]


def view(of: Obj, capacity: float | None, status: str = "RUNNING") -> snapshot_.ServeView:
    app = {"status": status, "route_prefix": "/", "deployments": {},
           "deployed_app_config": CONFIG["applications"][0]}  # fmt: skip
    answer = dashboard.ServeDetails.model_validate({
        "applications": {"fruit": app}, "target_capacity": capacity,
        "proxies": {"n": {"node_ip": "198.18.0.4", "status": "HEALTHY"}},
    })  # fmt: skip
    head = {"metadata": {"name": f"{of['metadata']['name']}-head", "namespace": "ns",
                         "labels": {"ray.io/serve": "true"}},
            "status": {"podIP": "198.18.0.4"}}  # fmt: skip
    return snapshot_.ServeView(
        cluster=of["metadata"]["name"], head=head, details=answer,
    )  # fmt: skip


READY = [{"type": t, "status": "True"} for t in ("Accepted", "Programmed")]


def gw(svc: Obj, ready: bool = True) -> Obj:
    made = gateway.gateway(svc, "traefik")
    made["metadata"]["resourceVersion"] = "1"
    made["status"] = {"conditions": READY if ready else []}
    return made


def route(svc: Obj, weights: dict[str, int], *, at: datetime.datetime, ready: bool = True) -> Obj:
    backends = [gateway.Backend(name, 8000, weight) for name, weight in weights.items()]
    made = gateway.route(svc, backends, migrated_at=clock.rfc3339(at))
    made["metadata"]["resourceVersion"] = "1"
    parent = {
        "parentRef": {"name": "demo-gateway", "namespace": "ns"},
        "conditions": [
            {"type": "Accepted", "status": "True"},
            {"type": "ResolvedRefs", "status": "True" if ready else "False"},
        ],
    }
    made["status"] = {"parents": [parent]}  # fmt: skip
    return made


def snapshot(
    svc: Obj, owned: list[Obj], *, active: Obj | None, serve: snapshot_.ServeView | None = None,
    other: snapshot_.ServeView | None = None, gateway_obj: Obj | None = None,
    route_obj: Obj | None = None, endpoints: dict[str, int] | None = None,
    names: dict[str, str | None] | None = None, gateway_api: bool = True,
) -> snapshot_.Snapshot:  # fmt: skip
    return snapshot_.Snapshot(
        service=svc,
        validated=validation.validate(svc),
        owned=tuple(owned),
        head_svc=services.head_service(svc, active) if active is not None else None,
        endpoints=sum((endpoints or {}).values()),
        names_in_use=names,
        serve=serve,
        other_serve=other,
        gateway=gateway_obj,
        route=route_obj,
        cluster_services={
            c["metadata"]["name"]: services.cluster_serve_service(svc, c) for c in owned
        },
        cluster_endpoints=endpoints or {},
        gateway_api=gateway_api,
    )


def make(snap: snapshot_.Snapshot, settings: plan.Settings = SETTINGS) -> plan.Plan:
    """The plan for ``snap``, its roles decided first, as observe does."""
    decided = roles.decide(
        snap, NOW, zero_downtime=settings.zero_downtime, incremental_gate=settings.incremental
    )
    return plan.plan(decided, now=NOW, memory=plan.Memory(), settings=settings)


def route_weights(p: plan.Plan) -> dict[str, int] | None:
    written = [pt.desired for pt in p.gateway_points if pt.desired["kind"] == "HTTPRoute"]
    return gateway.weights(written[0]) if written else None


def entry(p: plan.Plan, which: str) -> Obj:
    assert p.status is not None
    found: Obj = p.status[which]
    return found


def test_the_first_cluster_gets_its_gateway_and_full_capacity_but_no_route_yet() -> None:
    svc = service(OLD)
    p = make(snapshot(svc, [A], active=None, serve=view(A, None, "DEPLOYING")))
    assert [pt.desired["kind"] for pt in p.gateway_points] == ["Gateway"]
    assert p.gateway_points[0].current is None
    assert [s["metadata"]["name"] for s in p.cluster_services] == []  # it exists already
    assert p.submit is None  # the config runs already (its hash annotation says so)


def test_an_idle_service_writes_nothing_at_all() -> None:
    """Ready, with its Gateway and route accepted: every pass plans the same status and no
    object write (KubeRay v1.7.0 writes its status on each 2 s pass here)."""
    svc = service(OLD)
    snap = snapshot(
        svc, [A], active=A, serve=view(A, 100), gateway_obj=gw(svc),
        route_obj=route(svc, {A_NAME: 100}, at=NOW - datetime.timedelta(hours=1)),
        endpoints={A_NAME: 2},
    )  # fmt: skip
    first = make(snap)
    assert first.gateway_points == ()
    assert first.points == ()
    assert first.capacity is None
    assert entry(first, "activeServiceStatus")["targetCapacity"] == 100
    assert entry(first, "activeServiceStatus")["trafficRoutedPercent"] == 100
    assert first.status is not None
    assert first.status["numServeEndpoints"] == 2
    again = make(snapshot(
        {**svc, "status": first.status}, [A], active=A, serve=view(A, 100),
        gateway_obj=gw(svc), route_obj=snap.route, endpoints={A_NAME: 2},
    ))  # fmt: skip
    assert again.status == first.status  # the writer compares: no write
    assert again.gateway_points == ()


def test_a_new_spec_starts_a_cluster_without_worker_replicas() -> None:
    svc = service(NEW)
    p = make(snapshot(
        svc, [A], active=A, serve=None, gateway_obj=gw(svc),
        route_obj=route(svc, {A_NAME: 100}, at=NOW), names={A_NAME: ""},
    ))  # fmt: skip
    (created,) = [op for op in p.clusters if isinstance(op, plan.Create)]
    assert created.desired["metadata"]["name"] == B_NAME
    assert all("replicas" not in g for g in created.desired["spec"]["workerGroupSpecs"])


def upgrade(
    weights: dict[str, int], a_cap: float | None, b_cap: float | None, *,
    ago: float = 3600.0, svc: Obj | None = None, b_status: str = "RUNNING",
    gateway_ready: bool = True,
) -> snapshot_.Snapshot:  # fmt: skip
    """Mid-upgrade as a restarted operator reads it from the objects."""
    svc = svc or service(NEW)
    at = NOW - datetime.timedelta(seconds=ago)
    return snapshot(
        svc, [A, B], active=A, serve=view(B, b_cap, b_status), other=view(A, a_cap),
        gateway_obj=gw(svc, gateway_ready), route_obj=route(svc, weights, at=at),
        endpoints={A_NAME: 1, B_NAME: 1},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("weights", "a_cap", "b_cap", "ago", "capacity", "moved"),
    [
        # the pending cluster's capacity goes up first
        ({A_NAME: 100, B_NAME: 0}, 100, 0, 3600, (B_NAME, 50), None),
        # then traffic, one step
        ({A_NAME: 100, B_NAME: 0}, 100, 50, 3600, None, {B_NAME: 25, A_NAME: 75}),
        # not before the interval since the last step (read from the route)
        ({A_NAME: 75, B_NAME: 25}, 100, 50, 10, None, None),
        ({A_NAME: 75, B_NAME: 25}, 100, 50, 31, None, {B_NAME: 50, A_NAME: 50}),
        # caught up, the total is above 100: the old cluster shrinks
        ({A_NAME: 50, B_NAME: 50}, 100, 50, 3600, (A_NAME, 50), None),
        ({A_NAME: 50, B_NAME: 50}, 50, 50, 3600, (B_NAME, 100), None),
        ({A_NAME: 0, B_NAME: 100}, 50, 100, 3600, (A_NAME, 0), None),
    ],
)  # fmt: skip
def test_a_restarted_operator_takes_the_next_step_of_the_upgrade(
    weights: dict[str, int], a_cap: int, b_cap: int, ago: float,
    capacity: tuple[str, int] | None, moved: dict[str, int] | None,
) -> None:  # fmt: skip
    p = make(upgrade(weights, a_cap, b_cap, ago=ago))
    assert p.error is None
    assert p.clusters == ()  # no cluster created, deleted or restarted
    if capacity is None:
        assert p.capacity is None
    else:
        assert p.capacity is not None
        assert (p.capacity.cluster, p.capacity.config["target_capacity"]) == capacity
        assert p.capacity.config["applications"] == CONFIG["applications"]
        name, value = capacity
        which = "activeServiceStatus" if name == A_NAME else "pendingServiceStatus"
        assert entry(p, which)["targetCapacity"] == value  # reported with the step
    assert route_weights(p) == moved
    if moved is None and capacity is None:
        # woken when the next step is due (the dashboard poll may come sooner)
        assert any(w == pytest.approx(30 - ago) for w in p.wake), p.wake
    if moved is not None:
        assert entry(p, "pendingServiceStatus")["trafficRoutedPercent"] == moved[B_NAME]
        assert entry(p, "pendingServiceStatus")["lastTrafficMigratedTime"] == clock.rfc3339(NOW)
    assert p.points == ()  # the head Service stays on the active cluster


def test_nothing_moves_while_the_gateway_is_not_programmed() -> None:
    p = make(upgrade({A_NAME: 100, B_NAME: 0}, 100, 0, gateway_ready=False))
    assert p.capacity is None
    assert route_weights(p) is None


def test_traffic_waits_for_the_new_clusters_applications() -> None:
    p = make(upgrade({A_NAME: 100, B_NAME: 0}, 100, 50, b_status="DEPLOYING"))
    assert route_weights(p) is None


def test_done_promotes_the_new_cluster_and_schedules_the_old_ones_deletion() -> None:
    p = make(upgrade({A_NAME: 0, B_NAME: 100}, 0, 100))
    assert route_weights(p) == {B_NAME: 100}
    assert [pt.desired["metadata"]["name"] for pt in p.points] == ["demo-head-svc"]
    assert services.selected_cluster(p.points[0].desired) == B_NAME
    assert p.delete_after is not None
    assert p.delete_after.cluster["metadata"]["name"] == A_NAME


def test_a_reverted_spec_rolls_traffic_back_to_the_active_cluster() -> None:
    svc = service(OLD)  # the spec went back to A's
    snap = upgrade({A_NAME: 50, B_NAME: 50}, 50, 100, svc=svc)
    snap = snap.__class__(**{**snap.__dict__, "serve": view(A, 50), "other_serve": view(B, 100)})
    p = make(snap)
    assert p.clusters == ()  # B is drained, not dropped
    rollback = next(c for c in p.status["conditions"] if c["type"] == "RollbackInProgress")
    assert (rollback["status"], rollback["reason"]) == ("True", "DesiredClusterSpecChanged")
    assert entry(p, "pendingServiceStatus")["rayClusterName"] == B_NAME
    # traffic caught up with A's capacity: B shrinks first, never below its 50 % of traffic
    assert p.capacity is not None
    assert (p.capacity.cluster, p.capacity.config["target_capacity"]) == (B_NAME, 50)
    assert route_weights(p) is None
    # with B at 50, A grows back; with A at 100, traffic returns to it step by step
    snap = snap.__class__(**{**snap.__dict__, "other_serve": view(B, 50)})
    p = make(snap)
    assert p.capacity is not None
    assert (p.capacity.cluster, p.capacity.config["target_capacity"]) == (A_NAME, 100)
    snap = snap.__class__(**{**snap.__dict__, "serve": view(A, 100)})
    assert route_weights(make(snap)) == {A_NAME: 75, B_NAME: 25}


def test_a_finished_rollback_drops_the_drained_cluster_from_the_route() -> None:
    svc = service(OLD)
    snap = upgrade({A_NAME: 100, B_NAME: 0}, 100, 0, svc=svc)
    snap = snap.__class__(**{**snap.__dict__, "serve": view(A, 100), "other_serve": view(B, 0)})
    p = make(snap)
    assert route_weights(p) == {A_NAME: 100}
    again = make(snap.__class__(**{**snap.__dict__, "route": route(svc, {A_NAME: 100}, at=NOW)}))
    assert [type(op).__name__ for op in again.clusters] == ["Annotate"]  # B's delete-after


def test_a_third_spec_mid_upgrade_rolls_back_before_a_new_cluster() -> None:
    svc = service(config("2.62.0"))
    snap = upgrade({A_NAME: 75, B_NAME: 25}, 100, 50, svc=svc)
    snap = snap.__class__(**{**snap.__dict__, "serve": view(A, 100), "other_serve": view(B, 50),
                             "names_in_use": {A_NAME: "", B_NAME: ""}})  # fmt: skip
    p = make(snap)
    assert not [op for op in p.clusters if isinstance(op, plan.Create)]
    assert p.submit is None  # the new config waits for its own cluster
    assert route_weights(p) == {A_NAME: 100, B_NAME: 0}


def test_with_the_gate_off_the_strategy_behaves_as_none() -> None:
    svc = service(NEW)
    off = plan.Settings(incremental=False, gateway_classes=ALLOWED)
    snap = snapshot_.Snapshot(
        service=svc, validated=validation.validate(svc, incremental=False), owned=(A,),
        head_svc=services.head_service(svc, A), serve_svc=services.serve_service(svc, A),
        endpoints=1, serve=view(A, None),
    )  # fmt: skip
    p = make(snap, off)
    assert p.clusters == ()  # no new cluster: None's rule
    assert p.gateway_points == ()


def test_without_the_gateway_api_the_service_says_so_and_stops() -> None:
    svc = service(OLD)
    p = make(snapshot(svc, [A], active=A, serve=view(A, 100), gateway_api=False))
    assert p.error is not None
    assert p.error.terminal
    ready = next(c for c in p.status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "GatewayAPIUnavailable"
    assert [e.reason for e in p.events] == ["GatewayAPIUnavailable"]


def test_a_class_the_operator_does_not_allow_gets_no_gateway_and_says_which_flag() -> None:
    """Secure default: no ``--gateway-classes``, no Gateway of any class. The service is
    reported (a condition and one Warning naming the flag), nothing is created, and the
    error is terminal: no retry loop; a restart with the class allowed plans it again."""
    svc = service(OLD)
    snap = snapshot(svc, [A], active=None, serve=view(A, None, "DEPLOYING"))
    p = make(snap, plan.Settings())
    assert p.gateway_points == ()
    assert p.clusters == ()
    assert p.cluster_services == ()
    assert p.submit is None
    assert p.error is not None
    assert p.error.terminal
    assert p.status is not None
    ready = next(c for c in p.status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "GatewayClassNotAllowed")
    assert "gatewayClassName 'traefik' is not allowed" in ready["message"]
    assert "--gateway-classes=traefik" in ready["message"]
    assert [(e.type, e.reason) for e in p.events] == [("Warning", "GatewayClassNotAllowed")]
    assert p.events[0].message == ready["message"]
    other = plan.Settings(gateway_classes=gateway.GatewayClasses.parse(["istio"]))
    assert make(snap, other).gateway_points == ()
    # Allowed (by name, or every class with '*'): the same snapshot gets its Gateway.
    for allowed in (ALLOWED, gateway.GatewayClasses.parse(["*"])):
        p = make(snap, plan.Settings(gateway_classes=allowed))
        assert [pt.desired["spec"]["gatewayClassName"] for pt in p.gateway_points] == ["traefik"]
        assert p.error is None


def test_a_class_not_allowed_mid_upgrade_stops_without_touching_the_objects() -> None:
    """An operator restarted without the class while a Gateway of it exists (made before,
    or by KubeRay): nothing is written, the route's weights stay where they are."""
    p = make(upgrade({A_NAME: 75, B_NAME: 25}, 100, 50), plan.Settings())
    assert (p.gateway_points, p.clusters, p.capacity) == ((), (), None)
    assert p.error is not None
    assert p.error.terminal


def test_the_gate_off_needs_no_allowed_class() -> None:
    svc = service(NEW)
    snap = snapshot_.Snapshot(
        service=svc, validated=validation.validate(svc, incremental=False), owned=(A,),
        head_svc=services.head_service(svc, A), serve_svc=services.serve_service(svc, A),
        endpoints=1, serve=view(A, None),
    )  # fmt: skip
    p = make(snap, plan.Settings(incremental=False))
    assert p.error is None
    assert p.gateway_points == ()


def test_a_gateway_we_do_not_control_is_never_written() -> None:
    svc = service(OLD)
    foreign = gw(svc)
    foreign["metadata"]["ownerReferences"] = []
    p = make(snapshot(svc, [A], active=A, serve=view(A, 100), gateway_obj=foreign))
    assert p.gateway_points == ()
    ready = next(c for c in p.status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "GatewayNotOwned"
    assert (
        "Gateway demo-gateway exists and is not controlled by this RayService" in (ready["message"])
    )


VEG = "applications:\n  - name: veg\n    import_path: veg:app\n"


def new_config_upgrade() -> snapshot_.Snapshot:
    """Mid-upgrade to a cluster that runs a new Serve config (its hash annotation says so)."""
    svc = service(NEW)
    svc["spec"]["serveConfigV2"] = VEG
    b = copy.deepcopy(B)
    b["metadata"]["annotations"][clusters.SERVE_CONFIG_ANNOTATION] = clusters.serve_config_hash(
        {"applications": [{"name": "veg", "import_path": "veg:app"}]}
    )
    snap = upgrade({A_NAME: 50, B_NAME: 50}, 100, 50, svc=svc)
    return dataclasses.replace(snap, owned=(A, b))


def test_the_old_cluster_keeps_its_own_config_when_its_capacity_changes() -> None:
    """The spec's Serve config changed with the cluster: the old cluster's capacity PUT
    carries the config it runs, as Serve reports it deployed, not the new one."""
    p = make(new_config_upgrade())
    assert p.capacity is not None
    assert p.capacity.cluster == A_NAME
    assert p.capacity.config == {"applications": CONFIG["applications"], "target_capacity": 50}


def test_a_capacity_change_without_a_known_config_is_an_error_not_a_guess() -> None:
    snap = new_config_upgrade()
    old = snap.other_serve
    assert old is not None
    assert old.details is not None
    bare = {"status": "RUNNING", "route_prefix": "/", "deployments": {}}  # no deployed config
    details = old.details.model_copy(
        update={"applications": {"fruit": dashboard.ApplicationDetails.model_validate(bare)}}
    )
    snap = dataclasses.replace(snap, other_serve=dataclasses.replace(old, details=details))
    p = make(snap)
    assert p.capacity is None
    assert p.error is not None
    assert not p.error.terminal
    assert "config it runs is not known" in p.error.message


# -- a spec reverted at any step of an upgrade ------------------------------------------------

State = tuple[dict[str, int], int, int]
"""The route's weights, A's Serve ``target_capacity``, B's: what a pass reads."""

STRATEGIES = [(50, 25), (75, 25), (25, 10), (100, 100)]
"""``(maxSurgePercent, stepSizePercent)``: steps that divide the capacities and steps
that do not, a floor that binds on the way back (75), and the whole at once (100)."""


def stepped(p: plan.Plan, state: State) -> State:
    """The state after ``p``'s step: a ``target_capacity`` PUT, or new weights."""
    weights, a_cap, b_cap = state
    if p.capacity is not None:
        value = p.capacity.config["target_capacity"]
        a_cap, b_cap = (value, b_cap) if p.capacity.cluster == A_NAME else (a_cap, value)
    return (route_weights(p) or weights), a_cap, b_cap


def forward_states(surge: int, step: int) -> list[State]:
    """Every state a forward upgrade from A to B passes through, each pass taken once the
    interval passed, up to the pass that promotes B."""
    svc = service(NEW, maxSurgePercent=surge, stepSizePercent=step)
    state: State = ({A_NAME: 100, B_NAME: 0}, 100, 0)
    states = []
    for _ in range(100):
        states.append(state)
        p = make(upgrade(*state, svc=svc))
        assert p.error is None
        if p.points:  # done: the head Service moves to B
            return states
        following = stepped(p, state)
        assert following != state, f"the upgrade is stuck at {state}"
        state = following
    raise AssertionError(f"no end after 100 passes: {states[-3:]}")


FORWARD = [
    (surge, step, state) for surge, step in STRATEGIES for state in forward_states(surge, step)
]


def reverted(state: State, svc: Obj) -> snapshot_.Snapshot:
    """The same objects with the spec back at A's (``svc``): the target is A, the drained
    one B."""
    snap = upgrade(*state, svc=svc)
    _, a_cap, b_cap = state
    return dataclasses.replace(snap, serve=view(A, a_cap), other_serve=view(B, b_cap))


@pytest.mark.parametrize(
    ("surge", "step", "state"), FORWARD,
    ids=[f"surge{m}-step{t}-A{a}-B{b}-B{w[B_NAME]}%" for m, t, (w, a, b) in FORWARD],
)  # fmt: skip
def test_a_spec_reverted_at_any_step_of_the_upgrade_rolls_back(
    surge: int, step: int, state: State
) -> None:
    """Whatever step the upgrade reached (read from the objects, as a restarted operator
    would), going back to A's spec moves capacity and traffic back to A one step a pass,
    never leaving a cluster less capacity than its share of the traffic, and ends with B
    out of the route and scheduled for deletion."""
    svc = service(OLD, maxSurgePercent=surge, stepSizePercent=step)
    for _ in range(100):
        p = make(reverted(state, svc))
        assert p.error is None
        if route_weights(p) == {A_NAME: 100}:  # done: B leaves the route
            break
        assert p.clusters == ()  # B is drained, not dropped, and no cluster is created
        assert p.points == ()  # the head Service stays on A
        following = stepped(p, state)
        assert following != state, f"the rollback is stuck at {state}"
        (before, a_before, _), (weights, a_cap, b_cap) = state, following
        assert weights[A_NAME] >= before[A_NAME], "traffic left the active cluster"
        assert a_cap >= a_before, "the active cluster lost capacity"
        assert a_cap >= weights[A_NAME], "A got more traffic than its capacity"
        assert b_cap >= weights[B_NAME], "B kept more traffic than its capacity"
        assert a_cap + b_cap <= 100 + surge, "more capacity than 100 + maxSurgePercent"
        state = following
    else:
        raise AssertionError(f"no end of the rollback after 100 passes, at {state}")
    _, a_cap, b_cap = state
    assert (a_cap, b_cap) == (100, 0)  # capacity is back on A
    after = dataclasses.replace(reverted(state, svc), route=route(svc, {A_NAME: 100}, at=NOW))
    assert [type(op).__name__ for op in make(after).clusters] == ["Annotate"]  # B's delete-after


def test_the_rollbacks_start_from_every_step_of_real_upgrades() -> None:
    """The states above are whole upgrades: from A alone to B with everything."""
    for surge, step in STRATEGIES:
        states = [state for m, t, state in FORWARD if (m, t) == (surge, step)]
        assert states[0] == ({A_NAME: 100, B_NAME: 0}, 100, 0)
        assert states[-1] == ({A_NAME: 0, B_NAME: 100}, 0, 100)
        assert len(states) >= 100 // step + 2  # every traffic step, and capacity steps
