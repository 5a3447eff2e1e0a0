"""Plan: one pure function from a :class:`~controllers.raycluster.snapshot.Snapshot` and the
clock to every write of a RayCluster pass, in KubeRay v1.7.0's order (see
:mod:`controllers.raycluster.reconciler` for what each step means).

No client, no cache, no event loop: an import-linter contract in ``pyproject.toml`` holds
this module and everything it imports to that. The objects it plans are built by the pure
builders (:mod:`~controllers.raycluster.pods`, :mod:`~controllers.raycluster.services`,
:mod:`~controllers.raycluster.autoscaler`, :mod:`~controllers.raycluster.auth`,
:mod:`~controllers.raycluster.redis_cleanup`); their random parts (a token Secret's token,
a multi-host replica's name) are drawn here, as the builders draw them.

- :func:`plan`: a cluster not being deleted: a :class:`Refusal` (its spec cannot be
  reconciled), or a :class:`Plan`: the clean-up finalizer, the owned objects to create,
  the pod creates and deletes, a failure known before any write, an error;
- :func:`deletion`: a cluster being deleted that carries the Redis clean-up finalizer: a
  :class:`Deletion`;
- :func:`status`: the status, from what the cache shows after the writes.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import api.v1 as v1
from api.v1 import raycluster as raycluster_
from controllers.raycluster import (
    auth,
    autoscaler,
    names,
    pods,
    redis_cleanup,
    report,
    services,
)
from controllers.raycluster import snapshot as snapshot_
from runtime import clock
from runtime.client import resources

__all__ = [
    "REQUEUE_SHORT",
    "Create",
    "CreateJob",
    "Delete",
    "Deletion",
    "DropFinalizer",
    "Event",
    "Options",
    "Plan",
    "Refusal",
    "deletion",
    "has_ended",
    "owned",
    "plan",
    "role_not_owned",
    "status",
]

Obj = dict[str, Any]
REQUEUE_SHORT = 2.0
"""Seconds: KubeRay's ``DefaultRequeueDuration``."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    """How the reconciler builds pods. Every field states its default."""

    cluster_domain: str = "cluster.local"
    """The DNS domain in worker addresses. Default ``cluster.local`` (the operator's ``main``
    passes ``$CLUSTER_DOMAIN``, :mod:`controllers.environment`)."""
    created_by: str = names.CREATED_BY
    """The ``app.kubernetes.io/created-by`` label value. Default ``rayservice-operator``."""
    random_pod_delete: bool = False
    """Scale autoscaled groups down without ``workersToDelete`` (KubeRay's
    ``ENABLE_RANDOM_POD_DELETE``). Default off."""
    pod_defaults: pods.PodDefaults = dataclasses.field(default_factory=pods.PodDefaults)
    """Sidecars, env vars, annotations and labels added to every pod (KubeRay's
    ``Configuration`` file). Default none."""
    redis_cleanup: bool = True
    """Hold GCS fault-tolerant (Redis) clusters with the clean-up finalizer until a Job has
    deleted their Redis keys (KubeRay's ``ENABLE_GCS_FT_REDIS_CLEANUP``). Default on."""


# -- what a plan holds --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """An Event on the RayCluster."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str
    action: str


@dataclasses.dataclass(frozen=True, slots=True)
class Create:
    """Create ``obj`` (its controller reference is the RayCluster's, set when it is made)."""

    resource: resources.Resource
    obj: Obj
    failure: str | None = None
    """A pod's: the ``ReplicaFailure`` reason when the server refuses it. None for an owned
    object: one that exists meanwhile is left alone, another refusal is an error."""
    cached: bool = True
    """An owned object looked up in the cache; False: by GET (the autoscaler's RBAC: the
    operator has no business watching every Role of the cluster; the token Secret: its
    token may not list or watch Secrets at all, :mod:`controllers.rbac`)."""
    must_own: bool = False
    """The autoscaler's Role: one that exists meanwhile must be controlled by the cluster
    (:func:`role_not_owned` when not)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Delete:
    """Delete ``pods`` (by uid; one gone already is skipped)."""

    pods: tuple[Mapping[str, Any], ...]
    failure: str
    """The ``ReplicaFailure`` reason when the server refuses one."""


@dataclasses.dataclass(frozen=True, slots=True)
class Refusal:
    """A spec that cannot be reconciled: a Warning, the status (when the spec could be
    read) and a :class:`~runtime.reconcile.TerminalError`."""

    message: str
    """The Warning ``InvalidRayClusterSpec``'s message."""
    status: Obj | None
    error: str
    """The TerminalError's text."""
    cause: BaseException | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan:
    """A pass over a cluster not being deleted."""

    cluster: v1.RayCluster
    add_finalizer: bool = False
    """Add the Redis clean-up finalizer (a conditional update) before anything else."""
    writes: tuple[Create | Delete, ...] = ()
    """In order; the first one refused stops the rest and is the pass's failure."""
    failure: report.Failure | None = None
    """Known before any write (after the writes listed before it): the pass's failure."""
    error: str | None = None
    """Raised after the writes, without a status (several head pods)."""


@dataclasses.dataclass(frozen=True, slots=True)
class CreateJob:
    """Create the Redis clean-up Job; look again in ``remaining`` seconds."""

    job: Obj
    """As :func:`controllers.raycluster.redis_cleanup.job` builds it."""
    remaining: float
    """Seconds until the finalizer is forced off."""


@dataclasses.dataclass(frozen=True, slots=True)
class DropFinalizer:
    """Remove the Redis clean-up finalizer (conditional; a cluster gone already is fine)."""

    finished: Mapping[str, Any] | None = None
    """The clean-up Job's end (its name, outcome, storage namespace), logged first."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Deletion:
    """A pass over a cluster being deleted that carries the Redis clean-up finalizer."""

    delete: tuple[Mapping[str, Any], ...] = ()
    """Its live pods (``FailedDeleteAllPods`` when refused: a Warning and an error)."""
    steps: tuple[Event | DropFinalizer | CreateJob, ...] = ()
    """After the deletes, in order."""
    requeue_after: float | None = None


# -- a cluster not being deleted ----------------------------------------------------------


def plan(
    snapshot: snapshot_.Snapshot, *, now: datetime.datetime, options: Options
) -> Refusal | Plan:
    """The writes of one pass over ``snapshot.obj`` (not being deleted)."""
    obj, cluster = snapshot.obj, snapshot.cluster
    if cluster is None or snapshot.problems:
        return _refusal(snapshot, now)
    add_finalizer = (
        options.redis_cleanup
        and redis_cleanup.applies(cluster)
        and redis_cleanup.FINALIZER not in (obj["metadata"].get("finalizers") or ())
    )
    writes, stop = _owned_writes(snapshot, cluster, options)
    if stop is not None:
        return Plan(cluster=cluster, add_finalizer=add_finalizer, writes=writes, failure=stop)
    pod_writes, error = _pod_writes(cluster, snapshot.pods, options)
    return Plan(
        cluster=cluster,
        add_finalizer=add_finalizer,
        writes=(*writes, *pod_writes),
        error=error,
    )


def _refusal(snapshot: snapshot_.Snapshot, now: datetime.datetime) -> Refusal:
    """A spec that does not validate, or whose objects cannot be created."""
    if snapshot.cluster is None:
        assert snapshot.invalid is not None
        message = "; ".join(v1.meta.error_messages(snapshot.invalid))
        return Refusal(message, None, str(snapshot.invalid), snapshot.invalid)
    message = "; ".join(snapshot.problems)
    failure = report.Failure("InvalidRayClusterSpec", message)
    # Its pods cannot exist (their labels or names would be invalid): nothing listed.
    new = report.compute(snapshot.cluster, [], None, failure=failure, now=clock.rfc3339(now))
    return Refusal(message, new, message)


def owned(
    cluster: v1.RayCluster, annotations: Mapping[str, Any], options: Options
) -> tuple[list[Create], report.Failure | None]:
    """The owned objects a cluster wants, in creation order: the autoscaler's
    ServiceAccount, Role and RoleBinding (with in-tree autoscaling), the token Secret,
    the head service, the serve service (``ray.io/enable-serve-service: "true"``), the
    headless worker service; and the failure that stops the list (a serve service that
    cannot be built)."""
    wanted: list[Create] = []
    for desired in autoscaler.rbac_objects(cluster, created_by=options.created_by):
        resource = resources.default_registry.resource_for(desired)
        wanted.append(Create(resource, desired, cached=False, must_own=resource.kind == "Role"))
    secret = auth.generated_secret(cluster)
    if secret is not None:  # before the pods, whose env refers to it
        wanted.append(Create(auth.SECRETS, secret, cached=False))
    head = services.head_service(cluster, created_by=options.created_by)
    wanted.append(Create(services.SERVICES, head))
    if annotations.get(names.ENABLE_SERVE_SERVICE_ANNOTATION) == "true":
        try:
            wanted.append(Create(services.SERVICES, services.serve_service(cluster)))
        except ValueError as exc:
            return wanted, report.Failure("InvalidRayClusterSpec", str(exc))
    if services.needs_headless_worker_service(cluster):
        wanted.append(Create(services.SERVICES, services.headless_worker_service(cluster)))
    return wanted, None


def key(obj: Mapping[str, Any]) -> tuple[str, str]:
    """How :attr:`~controllers.raycluster.snapshot.Snapshot.owned` names an object."""
    return str(obj.get("kind")), str(obj["metadata"]["name"])


def role_not_owned(name: str) -> report.Failure:
    """The failure of a Role of the autoscaler's name that the cluster does not control."""
    return report.Failure(
        "RoleNotOwned",
        f"Role {name} exists and is not controlled by this RayCluster: the "
        "autoscaler's RoleBinding is not created (rename the Role, or the head's "
        "serviceAccountName)",
    )


def _owned_writes(
    snapshot: snapshot_.Snapshot, cluster: v1.RayCluster, options: Options
) -> tuple[tuple[Create, ...], report.Failure | None]:
    """The creates of the owned objects missing from the snapshot (one that exists is
    never rewritten, as in KubeRay), up to the failure that stops them."""
    annotations = snapshot.obj["metadata"].get("annotations") or {}
    wanted, failure = owned(cluster, annotations, options)
    writes: list[Create] = []
    for create in wanted:
        controlled = snapshot.owned.get(key(create.obj))
        if controlled is None:
            writes.append(dataclasses.replace(create, obj=_as_created(create)))
        elif create.must_own and not controlled:
            return tuple(writes), role_not_owned(create.obj["metadata"]["name"])
    return tuple(writes), failure


def _as_created(create: Create) -> Obj:
    """The builder's object as :func:`runtime.objects.create_or_update` creates it."""
    meta = create.obj["metadata"]
    made: Obj = {
        "apiVersion": create.resource.api_version,
        "kind": create.resource.kind,
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
    }
    made.update({k: v for k, v in create.obj.items() if k != "metadata"})
    made["metadata"].update(meta)
    return made


def _pod_writes(
    cluster: v1.RayCluster, found: Sequence[Mapping[str, Any]], options: Options
) -> tuple[list[Create | Delete], str | None]:
    """The pod creates and deletes (see the reconciler's step 4), and the error that
    stops them (several head pods)."""
    live = [p for p in found if not p["metadata"].get("deletionTimestamp")]
    phase = report.suspend_phase(cluster)
    if phase == raycluster_.ConditionType.SUSPENDING or (phase is None and cluster.spec.suspend):
        return _delete(live, "FailedDeleteAllPods"), None
    if phase == raycluster_.ConditionType.SUSPENDED and cluster.spec.suspend:
        return [], None
    heads = [p for p in live if pods.is_head(p)]
    if len(heads) > 1:
        found_names = ", ".join(sorted(p["metadata"]["name"] for p in heads))
        return [], f"{len(heads)} head pods ({found_names}); delete the extra ones"
    writes: list[Create | Delete] = []
    if heads and has_ended(heads[0]):
        writes += _delete(heads, "FailedDeleteHeadPod")
        heads = []
    if not heads:
        head = pods.head_pod(cluster, **_pod_options(options))
        writes.append(Create(pods.PODS, head, "FailedCreateHeadPod"))
    for group in cluster.spec.worker_group_specs or ():
        members = [p for p in live if not pods.is_head(p) and pods.group_of(p) == group.group_name]
        writes += _group(cluster, group, members, options)
    return writes, None


def _pod_options(options: Options) -> dict[str, Any]:
    """The pod builders' keywords (:func:`~controllers.raycluster.pods.head_pod`, ...)."""
    return {
        "cluster_domain": options.cluster_domain,
        "created_by": options.created_by,
        "defaults": options.pod_defaults,
    }


def _delete(victims: Sequence[Mapping[str, Any]], reason: str) -> list[Create | Delete]:
    return [Delete(tuple(victims), reason)] if victims else []


def _doomed(group: raycluster_.WorkerGroupSpec) -> set[str]:
    return set((group.scale_strategy and group.scale_strategy.workers_to_delete) or ())


_Replicas = list[list[Mapping[str, Any]]]
"""A group's replicas, each its pods (a single-host replica: one pod)."""


def _group(
    cluster: v1.RayCluster,
    group: raycluster_.WorkerGroupSpec,
    members: list[Mapping[str, Any]],
    options: Options,
) -> list[Create | Delete]:
    """One worker group brought to :func:`~controllers.raycluster.pods.desired_workers`:
    the pods to replace or listed in ``workersToDelete`` deleted, then :func:`_scale`."""
    if group.suspend:
        return _delete(members, "FailedDeleteWorkerPod")
    if group.num_of_hosts > 1:
        writes, live = _multi_host_deletes(group, members)
    else:
        writes, live = _single_host_deletes(group, members)
    if live is None:  # the deletions wake the next pass, which goes on
        return writes
    return writes + _scale(cluster, group, options, live)


def _single_host_deletes(
    group: raycluster_.WorkerGroupSpec, members: list[Mapping[str, Any]]
) -> tuple[list[Create | Delete], _Replicas]:
    """The ended pods and those listed in ``workersToDelete``, deleted together; the rest."""
    ended = [p for p in members if has_ended(p)]
    doomed = _doomed(group)
    listed = [p for p in members if p["metadata"]["name"] in doomed and p not in ended]
    gone = {p["metadata"]["name"] for p in (*ended, *listed)}
    running = [[p] for p in members if p["metadata"]["name"] not in gone]
    return _delete([*ended, *listed], "FailedDeleteWorkerPod"), running


def _multi_host_deletes(
    group: raycluster_.WorkerGroupSpec, members: list[Mapping[str, Any]]
) -> tuple[list[Create | Delete], _Replicas | None]:
    """A group of ``numOfHosts > 1``, one whole replica at a time (KubeRay v1.7.0's
    ``reconcileMultiHostWorkerGroup``): incomplete replicas deleted (and nothing else this
    pass), else those with a pod in ``workersToDelete`` (likewise), else the ended ones;
    the live replicas (None: nothing more this pass)."""
    replicas: dict[str, list[Mapping[str, Any]]] = {}
    for pod in members:
        name = (pod["metadata"].get("labels") or {}).get(names.REPLICA_NAME_LABEL) or ""
        replicas.setdefault(name, []).append(pod)
    incomplete = [
        pod
        for name, replica in replicas.items()
        if not name or len(replica) < group.num_of_hosts
        for pod in replica
    ]
    if incomplete:
        return _delete(incomplete, "FailedDeleteWorkerPod"), None
    doomed = _doomed(group)
    listed = [
        name
        for name, replica in replicas.items()
        if any(p["metadata"]["name"] in doomed for p in replica)
    ]
    if listed:
        return _delete([p for n in listed for p in replicas[n]], "FailedDeleteWorkerPod"), None
    ended = [name for name, replica in replicas.items() if any(map(has_ended, replica))]
    writes = _delete([p for n in ended for p in replicas[n]], "FailedDeleteWorkerPod")
    return writes, [replica for name, replica in replicas.items() if name not in ended]


def _scale(
    cluster: v1.RayCluster,
    group: raycluster_.WorkerGroupSpec,
    options: Options,
    live: _Replicas,
) -> list[Create | Delete]:
    """The group's ``live`` replicas (each its pods, a single-host replica one pod) brought
    to the number it wants: more with the lowest free replica indexes, or fewer (not Ready,
    then the newest, first, by a replica's first host; with in-tree autoscaling the
    autoscaler picks them, through ``workersToDelete``). Single-host pods are deleted in
    that order, whole replicas in the group's."""
    hosts = max(group.num_of_hosts, 1)
    diff = pods.desired_workers(group) // hosts - len(live)
    firsts = [replica[0] for replica in live]
    if diff > 0:
        used = [i for i in map(_replica_index, firsts) if i is not None]
        return _create_workers(cluster, group, options, used=used, replicas=diff)
    if diff >= 0 or (cluster.spec.enable_in_tree_autoscaling and not options.random_pod_delete):
        return []
    chosen = _scale_down_order(firsts)[:-diff]
    if hosts == 1:
        return _delete(chosen, "FailedDeleteWorkerPod")
    ids = {id(pod) for pod in chosen}
    victims = [p for replica in live if id(replica[0]) in ids for p in replica]
    return _delete(victims, "FailedDeleteWorkerPod")


def _create_workers(
    cluster: v1.RayCluster,
    group: raycluster_.WorkerGroupSpec,
    options: Options,
    *,
    used: Sequence[int],
    replicas: int,
) -> list[Create | Delete]:
    writes: list[Create | Delete] = []
    for slot in pods.replica_slots(group, used=used, replicas=replicas):
        pod = pods.worker_pod(cluster, group, **_pod_options(options), **slot)
        writes.append(Create(pods.PODS, pod, "FailedCreateWorkerPod"))
    return writes


def _replica_index(pod: Mapping[str, Any]) -> int | None:
    """The pod's ``ray.io/worker-group-replica-index``, if it has a readable one."""
    value = ((pod.get("metadata") or {}).get("labels") or {}).get(names.REPLICA_INDEX_LABEL)
    try:
        return int(str(value)) if value is not None else None
    except ValueError:
        return None


def has_ended(pod: Mapping[str, Any]) -> bool:
    """KubeRay's rule for pods to replace: ended, or Ray's container gone for good."""
    pod_status = pod.get("status") or {}
    if pod_status.get("phase") in ("Failed", "Succeeded"):
        return True
    if pod_status.get("phase") != "Running":
        return False
    if (pod.get("spec") or {}).get("restartPolicy") != "Never":
        return False
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    ray_name = containers[0].get("name")  # the Ray container is the first
    for container in pod_status.get("containerStatuses") or ():
        if container.get("name") == ray_name:
            return bool((container.get("state") or {}).get("terminated"))
    return False


def _scale_down_order(running: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Pods to remove first: not Ready before Ready, then the newest first."""
    newest_first = sorted(
        running, key=lambda p: str(p["metadata"].get("creationTimestamp") or ""), reverse=True
    )
    return sorted(newest_first, key=report.is_running_and_ready)  # stable: not Ready first


def status(
    cluster: v1.RayCluster,
    after: snapshot_.After,
    failure: report.Failure | None,
    *,
    now: datetime.datetime,
) -> Obj:
    """The status to write after the pass's writes
    (:func:`controllers.raycluster.report.compute`)."""
    return report.compute(
        cluster, after.pods, after.head_service, failure=failure, now=clock.rfc3339(now)
    )


# -- a cluster being deleted --------------------------------------------------------------


def deletion(snapshot: snapshot_.Snapshot, *, now: datetime.datetime, options: Options) -> Deletion:
    """The Redis clean-up of a cluster being deleted that carries its finalizer (see the
    reconciler's step 1)."""
    cluster = snapshot.cluster
    if cluster is None:
        why = f"the spec cannot be read, so Redis cannot be cleaned: {snapshot.invalid}"
        return _force(why)
    if redis_cleanup.embedded(cluster):  # switched to RocksDB: nothing in Redis
        return Deletion(steps=(DropFinalizer(),))
    if not options.redis_cleanup:
        return Deletion()  # ENABLE_GCS_FT_REDIS_CLEANUP=false: the user's job
    if not redis_cleanup.ft_enabled(cluster):
        return _force("GCS fault tolerance is no longer configured: nothing says where Redis is")
    live = tuple(p for p in snapshot.pods if not p["metadata"].get("deletionTimestamp"))
    if any(pods.is_head(p) for p in snapshot.pods):
        # The GCS may still write to Redis: wait until the head pod is gone (its deletion
        # event brings the cluster back).
        return Deletion(delete=live)
    remaining = _until_forced(snapshot.obj, now)
    storage = redis_cleanup.storage_namespace(cluster)
    if remaining <= 0:
        timeout = redis_cleanup.deletion_timeout(snapshot.obj)
        return _force(
            f"the Redis clean-up did not finish within {timeout:g} s of the deletion; Redis "
            f"storage namespace {storage!r} may need a manual clean-up",
            delete=live,
        )
    if snapshot.jobs:
        return dataclasses.replace(_job_finished(snapshot.jobs[0], storage, remaining), delete=live)
    job = redis_cleanup.job(cluster, **_pod_options(options), owner=snapshot.obj)
    return Deletion(delete=live, steps=(CreateJob(job, remaining),))


def _job_finished(job: Mapping[str, Any], storage: str, remaining: float) -> Deletion:
    """The clean-up Job exists: wait for it, or drop the finalizer once it has ended."""
    outcome = redis_cleanup.finished(job)
    if outcome is None:
        return Deletion(requeue_after=remaining)  # or the Job's next change
    name = job["metadata"]["name"]
    fields = {"job": name, "outcome": outcome, "storage_namespace": storage}
    steps: list[Event | DropFinalizer | CreateJob] = []
    if outcome == "Failed":
        message = (
            f"Redis clean-up Job {name} failed: delete the storage namespace {storage!r} by hand"
        )
        steps.append(Event("Warning", "RedisCleanupFailed", message, "Cleanup"))
    steps.append(DropFinalizer(fields))
    return Deletion(steps=tuple(steps))


def _force(why: str, *, delete: tuple[Mapping[str, Any], ...] = ()) -> Deletion:
    """Drop the finalizer now, with a Warning saying why."""
    message = f"Removed the finalizer {redis_cleanup.FINALIZER}: {why}"
    event = Event("Warning", "ForceDeletedStuckCluster", message, "Cleanup")
    return Deletion(delete=delete, steps=(DropFinalizer(), event))


def _until_forced(obj: Mapping[str, Any], now: datetime.datetime) -> float:
    """Seconds until the finalizer is forced off (<= 0: now); ``now`` in whole seconds, as
    the API writes times."""
    started = clock.parse_rfc3339(obj["metadata"].get("deletionTimestamp"))
    moment = clock.parse_rfc3339(clock.rfc3339(now))
    timeout = redis_cleanup.deletion_timeout(obj)
    if started is None or moment is None:
        return timeout
    return min(timeout, timeout - (moment - started).total_seconds())  # a clock behind
