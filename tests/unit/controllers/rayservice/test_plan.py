"""controllers.rayservice.plan: every decision of a pass, from a hand-built snapshot.

No client, no cache, no event loop: each case builds the objects a pass would have
read (a RayService, its clusters and Services, what the target's dashboard said)
and checks the writes the plan lists, in order, and its status and requeue.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable
from typing import Any

import pytest

from controllers.ray import dashboard
from controllers.rayservice import clusters, plan, report, roles, services, validation
from controllers.rayservice import snapshot as snapshot_

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
SETTINGS = plan.Settings()
SERVE_CONFIG = "applications:\n  - name: fruit\n    import_path: fruit:app\n"
CONFIG = {"applications": [{"name": "fruit", "import_path": "fruit:app"}]}


def config(version: str = "2.60.0", groups: int = 1) -> dict[str, Any]:
    def template(name: str) -> dict[str, Any]:
        return {"spec": {"containers": [{"name": name, "image": f"rayproject/ray:{version}"}]}}

    return {
        "rayVersion": version,
        "headGroupSpec": {"rayStartParams": {}, "template": template("ray-head")},
        "workerGroupSpecs": [
            {"groupName": f"g{i}", "replicas": 1, "rayStartParams": {},
             "template": template("ray-worker")}
            for i in range(groups)
        ],
    }  # fmt: skip


def service(**spec: Any) -> dict[str, Any]:
    body = {"serveConfigV2": SERVE_CONFIG, "rayClusterConfig": config(),
            "rayClusterDeletionDelaySeconds": 30, **spec}  # fmt: skip
    return {
        "apiVersion": "ray.io/v1", "kind": "RayService",
        "metadata": {"name": "demo", "namespace": "ns", "uid": "svc-uid", "generation": 1,
                     "annotations": {}},
        "spec": body,
    }  # fmt: skip


def cluster(
    svc: dict[str, Any],
    cluster_config: dict[str, Any],
    *,
    name: str | None = None,
    annotations: dict[str, str] | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    """A cluster as ``svc`` would have created it for ``cluster_config``."""
    owner = {**svc, "spec": {**svc["spec"], "rayClusterConfig": cluster_config}}
    goal = clusters.spec_hash(cluster_config)
    made = clusters.desired_cluster(owner, name or clusters.cluster_name("demo", goal, {}))
    made["metadata"]["uid"] = f"uid-{made['metadata']['name']}"
    made["metadata"]["annotations"].update(annotations or {})
    if deleting:
        made["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return made


def head_pod(of: dict[str, Any], *, serve: str = "true") -> dict[str, Any]:
    return {
        "metadata": {"name": f"{of['metadata']['name']}-head-x", "namespace": "ns",
                     "labels": {"ray.io/serve": serve}},
        "status": {"podIP": "198.18.0.4"},
    }  # fmt: skip


def details(status: str = "RUNNING", deployed: bool = True) -> dashboard.ServeDetails:
    app: dict[str, Any] = {"status": status, "route_prefix": "/", "deployments": {}}
    if deployed:
        app["deployed_app_config"] = CONFIG["applications"][0]
    return dashboard.ServeDetails.model_validate({
        "applications": {"fruit": app},
        "proxies": {"n": {"node_ip": "198.18.0.4", "status": "HEALTHY"}},
    })  # fmt: skip


def view(
    of: dict[str, Any], answer: dashboard.ServeDetails | None = None, **kw: Any
) -> snapshot_.ServeView:
    return snapshot_.ServeView(
        cluster=of["metadata"]["name"],
        head=kw.pop("head", None) or head_pod(of),
        details=answer if answer is not None else details(),
        **kw,
    )


def snapshot(
    svc: dict[str, Any],
    owned: list[dict[str, Any]] = (),  # type: ignore[assignment]
    *,
    active: dict[str, Any] | None = None,
    serve: snapshot_.ServeView | None = None,
    endpoints: int = 0,
    names: dict[str, str | None] | None = None,
) -> snapshot_.Snapshot:
    head = services.head_service(svc, active) if active is not None else None
    serve_svc = services.serve_service(svc, active) if active is not None else None
    return snapshot_.Snapshot(
        service=svc,
        validated=validation.validate(svc),
        owned=tuple(owned),
        head_svc=head,
        serve_svc=serve_svc,
        endpoints=endpoints,
        names_in_use=names,
        serve=serve,
    )


def make(snap: snapshot_.Snapshot, memory: plan.Memory | None = None) -> plan.Plan:
    """The plan for ``snap``, its roles decided first, as observe does."""
    decided = roles.decide(snap, NOW, zero_downtime=SETTINGS.zero_downtime)
    return plan.plan(decided, now=NOW, memory=memory or plan.Memory(), settings=SETTINGS)


def ops(decided: plan.Plan) -> list[tuple[str, str]]:
    """The cluster writes as ``(operation, cluster name)``."""
    out = []
    for op in decided.clusters:
        target = (
            op.cluster
            if isinstance(op, plan.Keep | plan.Annotate)
            else op.obj
            if isinstance(op, plan.Delete)
            else op.desired
        )
        out.append((type(op).__name__, target["metadata"]["name"]))
    return out


def ready(decided: plan.Plan) -> dict[str, Any]:
    assert decided.status is not None
    return next(c for c in decided.status["conditions"] if c["type"] == "Ready")


OLD, NEW = config("2.60.0"), config("2.61.0")
SVC = service()
SVC_NEW = service(rayClusterConfig=NEW)
A = cluster(SVC, OLD, annotations={clusters.SERVE_CONFIG_ANNOTATION:
                                   clusters.serve_config_hash(CONFIG)})  # fmt: skip
B = cluster(SVC_NEW, NEW)
B_NAME, A_NAME = B["metadata"]["name"], A["metadata"]["name"]


@dataclasses.dataclass
class Case:
    """A pass: the snapshot, the cluster writes it must plan in order, and what else the
    plan must say (:func:`seen`'s keys), compared as one dict so a failure shows the
    difference."""

    snap: Callable[[], snapshot_.Snapshot]
    ops: list[tuple[str, str]]
    expect: dict[str, object] = dataclasses.field(default_factory=dict)
    memory: plan.Memory | None = None


CONDITIONS = ("Ready", "RollbackInProgress", "Suspending", "Suspended", "UpgradeInProgress")

VIEWS: dict[str, Callable[[plan.Plan], object]] = {
    "reported": lambda p: p.status is not None,
    "annotated": lambda p: p.serve_annotation is not None,
    "requeue": lambda p: p.requeue_after(0.0),
    "selectors": lambda p: [pt.desired["spec"]["selector"]["ray.io/cluster"] for pt in p.points],
    "deleted services": lambda p: [d.obj["metadata"]["name"] for d in p.delete_services],
    "event reasons": lambda p: [e.reason for e in p.events],
}
"""Keys of :attr:`Case.expect` that are not a plan attribute's path."""


def seen(decided: plan.Plan, key: str) -> object:
    """What ``key`` names in ``decided``: a :data:`VIEWS` entry, ``stamped <cluster>``
    (the ``delete-after`` written on it), ``<Condition>.<field>`` of the status, or an
    attribute path (``submit.cluster``; None when a step of it is None)."""
    if key in VIEWS:
        return VIEWS[key](decided)
    if key.startswith("stamped "):
        return _stamped(decided, key.removeprefix("stamped "))
    head, _, field = key.partition(".")
    if head in CONDITIONS:
        return _condition(decided, head)[field]
    value: object = decided
    for part in key.split("."):
        value = getattr(value, part) if value is not None else None
    return value


CASES = {
    "create: no cluster yet, one named after the hash": Case(
        lambda: snapshot(SVC, names={}),
        [("Create", A_NAME)],
        {"submit": None, "points": (), "reported": True},
    ),
    "keep: the active cluster matches, nothing to write": Case(
        lambda: snapshot(SVC, [A], active=A, serve=view(A), endpoints=1),
        [],
        {"submit": None, "points": (), "relabel": None, "Ready.status": "True"},
    ),
    "keep: a delete-after left on the active cluster is removed": Case(
        lambda: snapshot(
            SVC,
            [
                cluster(
                    SVC, OLD, annotations={clusters.DELETE_AFTER_ANNOTATION: "2026-01-01T00:00:30Z"}
                )
            ],
            active=A,
            endpoints=1,
        ),
        [("Keep", A_NAME)],
    ),
    "update in place: worker groups only appended": Case(
        lambda: snapshot(service(rayClusterConfig=config(groups=2)), [A], active=A, endpoints=1),
        [("UpdateInPlace", A_NAME)],
    ),
    "upgrade: a new config makes a pending cluster, the active one serves on": Case(
        lambda: snapshot(SVC_NEW, [A], active=A, names={A_NAME: "x"}, endpoints=1),
        [("Create", B_NAME)],
        {"points": ()},
    ),
    "replace pending: the spec moved on, the old pending cluster goes after the delay": Case(
        lambda: snapshot(
            service(rayClusterConfig=config("2.62.0")),
            [A, B],
            active=A,
            names={A_NAME: "x", B_NAME: "y"},
            endpoints=1,
        ),
        [("Create", cluster(SVC, config("2.62.0"))["metadata"]["name"]), ("Annotate", B_NAME)],
        {f"stamped {B_NAME}": "2026-01-01T00:00:30Z", "wake": (30.0,)},  # the deletion delay
    ),
    "dangling: a cluster no role claims gets a delete-after (KubeRay's delay)": Case(
        lambda: snapshot(SVC, [A, B], active=A, serve=view(A), endpoints=1),
        [("Annotate", B_NAME)],
        {f"stamped {B_NAME}": "2026-01-01T00:00:30Z", "wake": (30.0,)},
    ),
    "dangling: with no deletion delay, deleted at once": Case(
        lambda: snapshot(
            service(rayClusterDeletionDelaySeconds=0), [A, B], active=A, serve=view(A), endpoints=1
        ),
        [("Delete", B_NAME)],
    ),
    "rollback: the spec returned to the active one's": Case(
        lambda: snapshot(SVC, [A, B], active=A, serve=view(A), endpoints=1),
        [("Annotate", B_NAME)],
        {"RollbackInProgress.status": "True"},
    ),
    "rollback: in progress until the dropped cluster is gone": Case(
        lambda: snapshot(
            _with_condition(SVC, "RollbackInProgress", "True"),
            [
                A,
                cluster(
                    SVC_NEW,
                    NEW,
                    annotations={clusters.DELETE_AFTER_ANNOTATION: "2026-01-01T00:00:20Z"},
                ),
            ],
            active=A,
            serve=view(A),
            endpoints=1,
        ),
        [],
        {"RollbackInProgress.status": "True", "wake": (20.0,)},
    ),
    "suspend requested: only the status commits it, nothing deleted yet": Case(
        lambda: snapshot(service(suspend=True), [A], active=A, endpoints=1),
        [],
        {
            "Suspending.reason": "SuspendRequested",
            "deleted services": [],
            "wake": (SETTINGS.serve_poll_interval,),
        },
    ),
    "suspending: clusters and Services deleted, even with suspend turned false": Case(
        lambda: snapshot(
            _with_condition(SVC, "Suspending", "True", "SuspendRequested"),
            [A, cluster(SVC_NEW, NEW, deleting=True)],
            active=A,
            endpoints=1,
        ),
        [("Delete", A_NAME)],
        {
            "deleted services": ["demo-head-svc", "demo-serve-svc"],
            "Suspending.reason": "SuspendInProgress",
        },
    ),
    "suspending: nothing left, Suspended": Case(
        lambda: snapshot(_with_condition(service(suspend=True), "Suspending", "True")),
        [],
        {"Suspended.reason": "SuspendComplete"},
    ),
    "suspended: nothing to do, nothing written": Case(
        lambda: snapshot(_with_condition(service(suspend=True), "Suspended", "True")),
        [],
        {"reported": False, "requeue": None},
    ),
    "resumed: Initializing afresh and a new cluster in the same pass": Case(
        lambda: snapshot(_with_condition(SVC, "Suspended", "True", "SuspendComplete"), names={}),
        [("Create", A_NAME)],
        {
            "Suspended.reason": "RayServiceResumed",
            "Ready.lastTransitionTime": "2026-01-01T00:00:00Z",
        },
    ),
    "timeout: passed before ready, a Warning, clusters deleted after the delay": Case(
        lambda: snapshot(
            _initializing(service(), since="2025-12-31T23:00:00Z", timeout="30m"), [A]
        ),
        [("Annotate", A_NAME)],
        {
            "event reasons": ["RayServiceInitializingTimeout"],
            "Ready.reason": "InitializingTimeout",
            "wake": (30.0,),
        },
    ),
    "timeout: terminal, a new spec changes nothing, no status write": Case(
        lambda: snapshot(
            _generation(_with_condition(SVC_NEW, "Ready", "False", "InitializingTimeout"), 2),
            [
                cluster(
                    SVC, OLD, annotations={clusters.DELETE_AFTER_ANNOTATION: "2025-12-31T23:59:59Z"}
                )
            ],
            names={},
        ),
        [("Delete", A_NAME)],
        {"reported": False, "event reasons": [], "requeue": None},
    ),
    "delete when due: an old cluster's delete-after passed": Case(
        lambda: snapshot(
            SVC_NEW,
            [
                B,
                cluster(
                    SVC, OLD, annotations={clusters.DELETE_AFTER_ANNOTATION: "2025-12-31T23:59:00Z"}
                ),
            ],
            active=B,
            serve=view(B),
            endpoints=1,
        ),
        [("Delete", A_NAME)],
    ),
    "not yet due: an old cluster waits for its delete-after": Case(
        lambda: snapshot(
            SVC_NEW,
            [
                B,
                cluster(
                    SVC, OLD, annotations={clusters.DELETE_AFTER_ANNOTATION: "2026-01-01T00:00:20Z"}
                ),
            ],
            active=B,
            serve=view(B),
            endpoints=1,
        ),
        [],
        {"wake": (20.0,)},
    ),
    "switch traffic: the pending cluster runs, delete-after first, then the Services": Case(
        lambda: snapshot(SVC_NEW, [A, B], active=A, serve=view(B, details()), endpoints=1),
        [],
        {
            "delete_after.annotations": {clusters.DELETE_AFTER_ANNOTATION: "2026-01-01T00:00:30Z"},
            "selectors": [B_NAME, B_NAME],
            "reported": False,
            "memory.moved": NOW,
            "requeue": plan.ENDPOINTS_GRACE,
        },
    ),
    "submit: the target's serve-config-hash differs": Case(
        lambda: snapshot(
            SVC_NEW, [A, B], active=A, serve=view(B, details(deployed=False)), endpoints=1
        ),
        [],
        {"submit.cluster": B_NAME, "annotated": True, "points": ()},
    ),
    "no second PUT: Serve already runs the config, only the annotation is written": Case(
        lambda: snapshot(SVC_NEW, [A, B], active=A, serve=view(B, details()), endpoints=1),
        [],
        {"submit": None, "annotated": True},
    ),
    "relabel: the head's proxy is unhealthy": Case(
        lambda: snapshot(SVC, [A], active=A, serve=view(A, proxy_healthy=False), endpoints=1),
        [],
        {"relabel.value": "false"},
    ),
    "relabel: an excluded head is labelled not serving": Case(
        lambda: snapshot(
            service(excludeHeadPodFromServeSvc=True), [A], active=A, serve=view(A), endpoints=1
        ),
        [],
        {"relabel.value": "false"},
    ),
    "relabel: the serving head's proxy died during an upgrade": Case(
        lambda: dataclasses.replace(
            snapshot(SVC_NEW, [A, B], active=A, endpoints=1),
            serving_head=snapshot_.ProxyView(cluster=A_NAME, head=head_pod(A), healthy=False),
        ),
        [],
        {"relabel_serving.value": "false"},
    ),
    "relabel: the serving head's label already follows its proxy": Case(
        lambda: dataclasses.replace(
            snapshot(SVC_NEW, [A, B], active=A, endpoints=1),
            serving_head=snapshot_.ProxyView(cluster=A_NAME, head=head_pod(A), healthy=True),
        ),
        [],
        {"relabel_serving": None},
    ),
    "wait: the new cluster's name is held by one of ours being deleted": Case(
        lambda: snapshot(
            SVC_NEW,
            [A, cluster(SVC_NEW, NEW, deleting=True)],
            active=A,
            names={A_NAME: "x", B_NAME: clusters.spec_hash(NEW)},
            endpoints=1,
        ),
        [],
        {"wake": (SETTINGS.serve_poll_interval,)},
    ),
}


def _stamped(decided: plan.Plan, name: str) -> str | None:
    """The ``delete-after`` the plan writes on cluster ``name``."""
    for op in decided.clusters:
        if isinstance(op, plan.Annotate) and op.cluster["metadata"]["name"] == name:
            return op.annotations.get(clusters.DELETE_AFTER_ANNOTATION)
    return None


def _condition(decided: plan.Plan, type_: str) -> dict[str, Any]:
    assert decided.status is not None
    return next(c for c in decided.status["conditions"] if c["type"] == type_)


def _with_condition(
    svc: dict[str, Any], type_: str, status: str, reason: str | None = None
) -> dict[str, Any]:
    condition = {"type": type_, "status": status, "reason": reason or type_, "message": "",
                 "lastTransitionTime": "2025-12-31T00:00:00Z", "observedGeneration": 1}  # fmt: skip
    return {**svc, "status": {"conditions": [condition]}}


def _generation(svc: dict[str, Any], generation: int) -> dict[str, Any]:
    return {**svc, "metadata": {**svc["metadata"], "generation": generation}}


def _initializing(svc: dict[str, Any], *, since: str, timeout: str) -> dict[str, Any]:
    svc["metadata"]["annotations"][validation.INITIALIZING_TIMEOUT_ANNOTATION] = timeout
    svc["status"] = {"conditions": [{
        "type": "Ready", "status": "False", "reason": "Initializing", "message": "",
        "lastTransitionTime": since, "observedGeneration": 1}]}  # fmt: skip
    return svc


@pytest.mark.parametrize("name", list(CASES))
def test_decision(name: str) -> None:
    case = CASES[name]
    decided = make(case.snap(), case.memory)
    assert ops(decided) == case.ops
    assert {key: seen(decided, key) for key in case.expect} == case.expect


def test_an_invalid_service_is_a_terminal_error_with_one_warning() -> None:
    svc = service(upgradeStrategy={"type": "Sideways"})
    decided = make(snapshot(svc))
    assert decided.error is not None
    assert decided.error.terminal
    assert [e.reason for e in decided.events] == ["InvalidRayServiceSpec"]
    assert ready(decided)["reason"] == "ValidationFailed"
    svc["status"] = decided.status  # the next pass sees it reported: no second Warning
    assert make(snapshot(svc)).events == ()


def test_a_service_we_do_not_control_is_reported_and_never_touched() -> None:
    snap = snapshot(SVC, [A], active=A, endpoints=1)
    foreign = dict(snap.head_svc or {}, metadata={"name": "demo-head-svc", "namespace": "ns"})
    decided = make(dataclasses.replace(snap, head_svc=foreign))
    assert (decided.clusters, decided.points) == ((), ())
    assert ready(decided)["reason"] == "ServiceNotOwned"
    assert decided.requeue_after(0.0) == SETTINGS.serve_poll_max


def test_a_ready_unchanged_service_polls_less_often_up_to_the_ceiling() -> None:
    snap = snapshot(SVC, [A], active=A, serve=view(A), endpoints=1)
    memory, intervals = plan.Memory(), []
    for _ in range(5):
        decided = make(dataclasses.replace(snap, service={**SVC, "status": None}), memory)
        intervals.append(decided.poll)
        memory = decided.memory
    assert intervals == [2.0, 4.0, 8.0, 10.0, 10.0]


def test_a_slow_dashboard_is_polled_no_sooner_than_the_factor_times_its_answer() -> None:
    decided = make(snapshot(SVC, [A], active=A, serve=view(A), endpoints=1))
    assert decided.requeue_after(0.01) == SETTINGS.serve_poll_interval
    assert decided.requeue_after(1.5) == pytest.approx(1.5 * SETTINGS.slow_dashboard_factor)


def test_after_traffic_moved_the_report_waits_for_the_endpoints() -> None:
    snap = snapshot(SVC_NEW, [B], active=B, serve=view(B), endpoints=0)
    held = make(snap, plan.Memory(moved=NOW - datetime.timedelta(seconds=1)))
    assert held.status is None
    assert held.requeue_after(0.0) == pytest.approx(plan.ENDPOINTS_GRACE - 1)
    shown = make(dataclasses.replace(snap, endpoints=1), held.memory)
    assert shown.status is not None
    assert shown.memory.moved is None


def test_a_refused_put_reports_serves_answer_without_the_unread_applications() -> None:
    fresh = cluster(SVC, OLD)  # no serve-config-hash yet: the first PUT
    decided = make(snapshot(SVC, [fresh], serve=view(fresh, details(deployed=False))))
    assert decided.submit is not None
    assert ready(decided)["message"] == "RayService is initializing"
    assert decided.observed is not None
    status = report.after_put(
        decided.service, decided.observed, target=decided.target, applications=None,
        now="2026-01-01T00:00:00Z", refusal="Serve refused the config: import_path required",
    )  # fmt: skip
    message = next(c["message"] for c in status["conditions"] if c["type"] == "Ready")
    assert message == "RayService is initializing; Serve refused the config: import_path required"
    assert "applicationStatuses" not in (status.get("pendingServiceStatus") or {})


def test_a_dashboard_that_failed_is_raised_after_the_status() -> None:
    failure = "cannot read Serve applications of x: refused"
    failed = snapshot_.ServeView(cluster=A_NAME, head=head_pod(A), failure=failure)
    decided = make(snapshot(SVC, [A], active=A, serve=failed, endpoints=1))
    assert decided.error == plan.Failure(failure)
    assert decided.status is not None
    assert decided.poll is None


def test_a_plan_is_data_compared_whole() -> None:
    """The pass that moves traffic, as a whole plan: every field but those named is its
    default, so anything else this pass would write shows up in the difference."""
    snap = snapshot(SVC_NEW, [A, B], active=A, serve=view(B, details()), endpoints=1)
    decided = make(snap)
    assert make(snap) == decided, "the same snapshot, the same plan"
    head, serve_svc = snap.head_svc, snap.serve_svc
    assert head is not None
    assert serve_svc is not None
    expected = plan.Plan(
        service=SVC_NEW,
        now=NOW,
        serve_annotation=plan.Annotate(
            B, {clusters.SERVE_CONFIG_ANNOTATION: clusters.serve_config_hash(CONFIG)}
        ),
        target=B_NAME,
        slow_dashboard_factor=SETTINGS.slow_dashboard_factor,
        delete_after=plan.Annotate(A, {clusters.DELETE_AFTER_ANNOTATION: "2026-01-01T00:00:30Z"}),
        points=(
            plan.Point(head, services.retargeted(head, services.head_service(SVC_NEW, B))),
            plan.Point(
                serve_svc, services.retargeted(serve_svc, services.serve_service(SVC_NEW, B))
            ),
        ),
        switched=f"Traffic moved from RayCluster {A_NAME} to {B_NAME}",
        wake=(plan.ENDPOINTS_GRACE,),
        memory=plan.Memory(moved=NOW),
    )
    assert decided == expected
