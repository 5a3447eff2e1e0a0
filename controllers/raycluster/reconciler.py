"""The RayCluster reconciler: one pass makes the cluster's objects match its spec, then
reports what the cache shows.

One :meth:`Reconciler.reconcile` reads the RayCluster and everything it owns from
the cache (never from the API server), and in KubeRay v1.5.0's order:

1. skips a cluster whose ``spec.managedBy`` names another controller, and one being
   deleted unless it carries the Redis clean-up finalizer (owner references let the
   garbage collector remove its pods and services). With that finalizer
   (:mod:`controllers.raycluster.redis_cleanup`, KubeRay v1.7.0's flow): its head and
   worker pods are deleted; once the head pod is gone (the GCS no longer writes to
   Redis) the clean-up Job is created (a Normal ``CreatedRedisCleanupJob`` Event; a
   refused create is a Warning ``FailedToCreateRedisCleanupJob`` and an error); when
   the Job is ``Complete`` or ``Failed`` (``FailureTarget`` included; a failure is a
   Warning ``RedisCleanupFailed``) the finalizer is removed; past the
   ``ray.io/gcs-ft-deletion-timeout`` (checked once the head is gone) it is removed
   anyway with a Warning ``ForceDeletedStuckCluster``. The pass is woken by the pods'
   and the Job's changes and, for the timeout, ``requeue_after``. A stale finalizer is
   removed at once on a cluster now on the embedded (RocksDB) backend, as KubeRay
   does, and - unlike KubeRay, which leaves such a cluster Terminating for ever - on
   one whose fault tolerance is no longer configured or whose spec cannot be read
   (Warning ``ForceDeletedStuckCluster``). With ``ENABLE_GCS_FT_REDIS_CLEANUP=false``
   (:attr:`Options.redis_cleanup`) the finalizer is neither added nor touched;
2. refuses a cluster whose objects cannot be created at all (see
   :func:`controllers.raycluster.validation.problems`: a name too long for the
   ``ray.io/cluster`` label or for the generated pod names, duplicate groups):
   ``ReplicaFailure`` with reason ``InvalidRayClusterSpec`` and the problems as
   the message, one Warning Event, and a :class:`~runtime.reconcile.TerminalError`
   - no retry until the spec changes;
   then, with GCS fault tolerance on the Redis backend, adds the clean-up finalizer
   (a conditional update) before anything is created;
3. with ``enableInTreeAutoscaling``, creates the autoscaler's ServiceAccount,
   Role and RoleBinding; with token authentication (``authOptions``, KubeRay v1.6+),
   the Secret ``<cluster>`` holding a random token
   (:func:`controllers.raycluster.auth.generated_secret`: not with ``mode: disabled``,
   ``secretName`` or Kubernetes token auth), through the cache, which holds the Secrets
   labelled ``ray.io/cluster`` (an unlabelled Secret of that name is not seen: its
   create fails with AlreadyExists, which is ignored, and the pods use it); creates the
   head service (and the serve service when
   the ``ray.io/enable-serve-service`` annotation is ``true``). Owned objects
   are created when missing through :func:`runtime.objects.create_or_update`
   and, as KubeRay does, never rewritten afterwards: an existing object is never
   written;
4. pods (those labelled ``ray.io/cluster=<name>``; terminating ones are gone
   already): a suspending cluster loses every pod; otherwise the head pod is
   created when missing and deleted when it has ended (phase ``Failed`` or
   ``Succeeded``, or its Ray container terminated under ``restartPolicy:
   Never``), and each worker group is brought to
   :func:`~controllers.raycluster.pods.desired_workers`: ended pods are
   replaced, ``scaleStrategy.workersToDelete`` that still exist are deleted, then
   the difference is created, or deleted not-Ready pods first then the newest
   (with in-tree autoscaling the autoscaler chooses, through ``workersToDelete``,
   unless ``ENABLE_RANDOM_POD_DELETE=true``); a suspended group loses its pods. New
   workers carry KubeRay v1.7.0's replica labels (``RayMultiHostIndexing``, on by
   default there): the lowest free ``ray.io/worker-group-replica-index``; a group with
   ``numOfHosts > 1`` is handled a whole replica (its ``numOfHosts`` pods sharing a
   ``ray.io/worker-group-replica-name``) at a time, as KubeRay does: a replica missing a
   pod, or with a pod that ended or is listed in ``workersToDelete``, is deleted
   whole, and replicas are created or removed whole. Unlike KubeRay, a multi-host pod
   without a replica name (made before replica indexing) counts as an incomplete
   replica and is deleted; KubeRay ignores such pods and creates full replicas next to
   them;
5. computes the status (:func:`controllers.raycluster.report.compute`) from the
   cache - which already holds this pass's own creates and deletes (write-through) -
   and hands it to the :class:`~runtime.status.StatusWriter`, which writes only
   when it means something new.

With a :class:`MetricsObserver` (``metrics=``, :mod:`controllers.metrics` when
metrics are enabled), each status the pass wrote is reported to it together with
the cluster as the pass read it, and a RayCluster found gone (NotFound in the
cache) is reported as forgotten.

A create or delete the server refuses stops step 4: the status says
``ReplicaFailure`` with the reason (``FailedCreateHeadPod``,
``FailedCreateWorkerPod``, ``FailedDeleteHeadPod``, ``FailedDeleteWorkerPod``,
``FailedDeleteAllPods``) and the server's message, a Warning Event with KubeRay's
reason for it (``FailedToCreateHeadPod``, ``FailedToCreateWorkerPod``,
``FailedToDeleteHeadPod``, ``FailedToDeleteWorkerPod``, ``FailedToDeletePodCollection``)
is recorded (the recorder aggregates repeats), and the error is raised so
the work queue retries with its growing per-item backoff - never a hot loop.

Nothing is requeued on a timer (but a deletion's timeout): pods, services and clean-up
Jobs are watched (``owns``), so
a converged cluster costs no request at all. No Normal Events are written for
routine creates and deletes (each would be a write per pod; KubeRay writes
them); failures get Warning Events.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import pydantic
import structlog

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
    validation,
)
from runtime import clock, events, objects, reconcile
from runtime import status as runtime_status
from runtime.cache import cache as cache_
from runtime.client import errors, resources

__all__ = ["MetricsObserver", "Options", "Reconciler"]

Obj = dict[str, Any]
_REQUEUE_SHORT = 2.0  # seconds: KubeRay's DefaultRequeueDuration
_Result = reconcile.Result  # in annotations, where the method `reconcile` hides the module


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


class MetricsObserver(Protocol):
    """What the reconciler tells the metrics (:class:`controllers.metrics.ProvisionedDurations`)."""

    def status_written(self, before: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
        """A pass wrote ``status`` over ``before`` (the RayCluster as the pass read it)."""
        ...

    def forget(self, namespace: str, name: str) -> int:
        """The RayCluster ``namespace/name`` is gone."""
        ...


class _ReplicaFailure(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.failure = report.Failure(reason, message)


class Reconciler:
    """See the module docstring."""

    def __init__(
        self,
        client: Any,
        cache: cache_.Cache,
        recorder: events.Recorder,
        options: Options | None = None,
        *,
        now: Callable[[], str] = clock.rfc3339,
        metrics: MetricsObserver | None = None,
    ) -> None:
        self.client = client
        self.metrics = metrics
        self.cache = cache
        self.recorder = recorder
        self.options = options or Options()
        self.now = now
        self.writer = runtime_status.StatusWriter(
            client,
            volatile=raycluster_.RayClusterStatus.VOLATILE_FIELDS,
            stamps={"lastUpdateTime": now},
            latest=cache,  # an annotation written meanwhile (the RayService's) is no 409
        )
        self.log = structlog.get_logger("controllers.raycluster")

    async def reconcile(self, request: reconcile.Request) -> reconcile.Result:
        try:
            obj = await self.cache.get(v1.RAYCLUSTERS, request.namespace, request.name)
        except errors.NotFound:
            if self.metrics is not None:
                self.metrics.forget(request.namespace, request.name)
            return reconcile.Result()
        meta = obj["metadata"]
        managed_by = (obj.get("spec") or {}).get("managedBy")
        if managed_by not in (None, "", names.MANAGED_BY):
            return reconcile.Result()
        if meta.get("deletionTimestamp"):
            return await self._deleting(obj)
        try:
            cluster = v1.RayCluster.model_validate(obj)
        except pydantic.ValidationError as exc:
            await self._refuse(obj, None, v1.meta.error_messages(exc))
            raise reconcile.TerminalError(str(exc)) from exc
        problems = validation.problems(cluster)
        if problems:
            await self._refuse(obj, cluster, problems)
            raise reconcile.TerminalError("; ".join(problems))
        if (
            self.options.redis_cleanup
            and redis_cleanup.applies(cluster)
            and not objects.has_finalizer(obj, redis_cleanup.FINALIZER)
        ):
            desired = copy.deepcopy(obj)
            objects.add_finalizer(desired, redis_cleanup.FINALIZER)
            obj = await self.client.update(desired)  # conditional: a 409 retries the pass

        failure: _ReplicaFailure | None = None
        try:
            await self._owned_objects(obj, cluster)
            await self._pods(obj, cluster)
        except _ReplicaFailure as exc:
            failure = exc
        await self._write_status(obj, cluster, failure.failure if failure else None)
        if failure is not None:
            reason, action = _EVENTS.get(failure.failure.reason, (failure.failure.reason, "Create"))
            self.recorder.event(obj, "Warning", reason, failure.failure.message, action=action)
            raise failure
        return reconcile.Result()

    # -- deletion ---------------------------------------------------------------------------

    async def _deleting(self, obj: Obj) -> _Result:
        """A RayCluster being deleted: nothing to do unless it carries the Redis clean-up
        finalizer (owner references let the garbage collector remove its objects)."""
        if not objects.has_finalizer(obj, redis_cleanup.FINALIZER):
            return reconcile.Result()
        try:
            cluster = v1.RayCluster.model_validate(obj)
        except pydantic.ValidationError as exc:
            message = f"the spec cannot be read, so Redis cannot be cleaned: {exc}"
            return await self._force_finalizer(obj, message)
        if redis_cleanup.embedded(cluster):  # switched to RocksDB: nothing in Redis
            await self._drop_finalizer(obj)
            return reconcile.Result()
        if not self.options.redis_cleanup:
            return reconcile.Result()  # ENABLE_GCS_FT_REDIS_CLEANUP=false: the user's job
        if not redis_cleanup.ft_enabled(cluster):
            message = "GCS fault tolerance is no longer configured: nothing says where Redis is"
            return await self._force_finalizer(obj, message)

        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        found = await self._cluster_pods(namespace, name)
        try:
            live = [p for p in found if not p["metadata"].get("deletionTimestamp")]
            await self._delete(live, "FailedDeleteAllPods")
        except _ReplicaFailure as exc:
            reason, action = _EVENTS.get(exc.failure.reason, (exc.failure.reason, "Delete"))
            self.recorder.event(obj, "Warning", reason, exc.failure.message, action=action)
            raise
        if any(pods.is_head(p) for p in found):
            # The GCS may still write to Redis: wait until the head pod is gone (its
            # deletion event brings the cluster back).
            return reconcile.Result()

        jobs = [
            j
            for j in await self.cache.list(
                redis_cleanup.JOBS, namespace, label_selector=redis_cleanup.job_selector(name)
            )
            if objects.is_controlled_by(j, obj)
        ]
        remaining = self._until_forced(obj)
        if remaining <= 0:
            message = (
                f"the Redis clean-up did not finish within {redis_cleanup.deletion_timeout(obj):g} "
                f"s of the deletion; Redis storage namespace "
                f"{redis_cleanup.storage_namespace(cluster)!r} may need a manual clean-up"
            )
            return await self._force_finalizer(obj, message)
        if jobs:
            outcome = redis_cleanup.finished(jobs[0])
            if outcome is None:
                return reconcile.Result(requeue_after=remaining)  # or the Job's next change
            self.log.info(
                "redis clean-up job finished",
                job=jobs[0]["metadata"]["name"],
                outcome=outcome,
                storage_namespace=redis_cleanup.storage_namespace(cluster),
            )
            if outcome == "Failed":
                self.recorder.event(
                    obj,
                    "Warning",
                    "RedisCleanupFailed",
                    f"Redis clean-up Job {jobs[0]['metadata']['name']} failed: delete the "
                    f"storage namespace {redis_cleanup.storage_namespace(cluster)!r} by hand",
                    action="Cleanup",
                )
            await self._drop_finalizer(obj)
            return reconcile.Result()
        job = redis_cleanup.job(
            cluster,
            cluster_domain=self.options.cluster_domain,
            created_by=self.options.created_by,
            defaults=self.options.pod_defaults,
            owner=obj,
        )
        job_name = job["metadata"]["name"]
        try:
            await self.client.create(job, namespace=namespace)
        except errors.AlreadyExists:  # not ours (a cluster of this name before), or racing
            return reconcile.Result(requeue_after=min(remaining, _REQUEUE_SHORT))
        except errors.ApiError as exc:
            self.recorder.event(
                obj,
                "Warning",
                "FailedToCreateRedisCleanupJob",
                f"Failed to create Redis cleanup Job {namespace}/{job_name}: {exc.message or exc}",
                action="Create",
            )
            raise
        self.recorder.event(
            obj, "Normal", "CreatedRedisCleanupJob",
            f"Created Redis cleanup Job {namespace}/{job_name}", action="Create",
        )  # fmt: skip
        return reconcile.Result(requeue_after=remaining)

    def _until_forced(self, obj: Obj) -> float:
        """Seconds until the finalizer is forced off (<= 0: now)."""
        started = clock.parse_rfc3339(obj["metadata"].get("deletionTimestamp"))
        now = clock.parse_rfc3339(self.now())
        timeout = redis_cleanup.deletion_timeout(obj)
        if started is None or now is None:
            return timeout
        return min(timeout, timeout - (now - started).total_seconds())  # a clock behind

    async def _force_finalizer(self, obj: Obj, why: str) -> _Result:
        await self._drop_finalizer(obj)
        self.recorder.event(
            obj, "Warning", "ForceDeletedStuckCluster",
            f"Removed the finalizer {redis_cleanup.FINALIZER}: {why}", action="Cleanup",
        )  # fmt: skip
        return reconcile.Result()

    async def _drop_finalizer(self, obj: Obj) -> None:
        desired = copy.deepcopy(obj)
        if not objects.remove_finalizer(desired, redis_cleanup.FINALIZER):
            return
        try:
            await self.client.update(desired)  # conditional on resourceVersion
        except errors.NotFound:
            return

    # -- status ---------------------------------------------------------------------------

    async def _cluster_pods(self, namespace: str, name: str) -> list[Obj]:
        """The cluster's head and worker pods (not its clean-up Job's)."""
        found = await self.cache.list(pods.PODS, namespace, label_selector=pods.selector(name))
        return [p for p in found if pods.node_type_of(p) != pods.REDIS_CLEANUP]

    async def _write_status(
        self, obj: Obj, cluster: v1.RayCluster, failure: report.Failure | None
    ) -> None:
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        found = await self._cluster_pods(namespace, name)
        try:
            head_service: Obj | None = await self.cache.get(
                services.SERVICES, namespace, names.head_service_name_for(cluster)
            )
        except errors.NotFound:
            head_service = None
        new = report.compute(cluster, found, head_service, failure=failure, now=self.now())
        result = await self.writer.update(obj, new)
        if result.writes and self.metrics is not None:
            self.metrics.status_written(obj, result.obj.get("status") or {})
        if result.outcome is runtime_status.Outcome.STALE:
            raise RuntimeError("the RayCluster changed while its status was computed; again")

    async def _refuse(self, obj: Obj, cluster: v1.RayCluster | None, problems: list[str]) -> None:
        message = "; ".join(problems)
        self.recorder.event(obj, "Warning", "InvalidRayClusterSpec", message, action="Validate")
        if cluster is None:
            return
        failure = report.Failure("InvalidRayClusterSpec", message)
        # Its pods cannot exist (their labels or names would be invalid): nothing to list.
        await self.writer.update(
            obj, report.compute(cluster, [], None, failure=failure, now=self.now())
        )

    # -- owned objects ----------------------------------------------------------------------

    async def _ensure(
        self, owner: Obj, resource: resources.Resource, desired: Obj, *, cached: bool = True
    ) -> Obj | None:
        """Create ``desired`` if no object of its name exists; never rewrite one. Returns the
        object as it exists (None when it was created by someone else meanwhile).
        ``cached=False`` reads by GET instead of the cache (which would list and watch the
        kind cluster-wide)."""
        meta = desired["metadata"]

        def mutate(current: Obj) -> None:
            if "uid" in current["metadata"]:
                return  # exists: KubeRay leaves it as it is, and so do we
            current.update({k: v for k, v in desired.items() if k != "metadata"})
            current["metadata"].update(meta)
            objects.set_controller_reference(owner, current)

        try:
            _, current = await objects.create_or_update(
                self.client, resource, meta["namespace"], meta["name"], mutate,
                cache=self.cache if cached else None,
            )  # fmt: skip
        except errors.AlreadyExists:  # created since we looked
            return None
        return current

    async def _autoscaler_rbac(self, obj: Obj, cluster: v1.RayCluster) -> None:
        """The autoscaler's ServiceAccount, Role and RoleBinding, read by GET (never cached:
        the operator has no business watching every Role of the cluster). The RoleBinding
        is made only to a Role this RayCluster controls: a Role of that name someone else
        made (an admin's, say) is reported, never bound to the cluster's ServiceAccount."""
        for desired in autoscaler.rbac_objects(cluster, created_by=self.options.created_by):
            resource = self.client.resource_for(desired)
            current = await self._ensure(obj, resource, desired, cached=False)
            if resource != autoscaler.ROLES:
                continue
            namespace, name = desired["metadata"]["namespace"], desired["metadata"]["name"]
            if current is None:
                current = await self.client.get(autoscaler.ROLES, namespace, name)
            if not objects.is_controlled_by(current, obj):
                raise _ReplicaFailure(
                    "RoleNotOwned",
                    f"Role {name} exists and is not controlled by this RayCluster: the "
                    "autoscaler's RoleBinding is not created (rename the Role, or the head's "
                    "serviceAccountName)",
                )

    async def _owned_objects(self, obj: Obj, cluster: v1.RayCluster) -> None:
        created_by = self.options.created_by
        await self._autoscaler_rbac(obj, cluster)
        secret = auth.generated_secret(cluster)
        if secret is not None:  # before the pods, whose env refers to it
            await self._ensure(obj, auth.SECRETS, secret)
        await self._ensure(
            obj, services.SERVICES, services.head_service(cluster, created_by=created_by)
        )
        annotations = obj["metadata"].get("annotations") or {}
        if annotations.get(names.ENABLE_SERVE_SERVICE_ANNOTATION) == "true":
            try:
                serve = services.serve_service(cluster)
            except ValueError as exc:
                raise _ReplicaFailure("InvalidRayClusterSpec", str(exc)) from exc
            await self._ensure(obj, services.SERVICES, serve)
        if services.needs_headless_worker_service(cluster):
            await self._ensure(obj, services.SERVICES, services.headless_worker_service(cluster))

    # -- pods -------------------------------------------------------------------------------

    async def _pods(self, obj: Obj, cluster: v1.RayCluster) -> None:
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        found = [p for p in await self._cluster_pods(namespace, name)
                 if not p["metadata"].get("deletionTimestamp")]  # fmt: skip
        phase = report.suspend_phase(cluster)
        if phase == raycluster_.ConditionType.SUSPENDING or (
            phase is None and cluster.spec.suspend
        ):
            await self._delete(found, "FailedDeleteAllPods")
            return
        if phase == raycluster_.ConditionType.SUSPENDED and cluster.spec.suspend:
            return

        heads = [p for p in found if pods.is_head(p)]
        if len(heads) > 1:
            found_names = ", ".join(sorted(p["metadata"]["name"] for p in heads))
            raise RuntimeError(f"{len(heads)} head pods ({found_names}); delete the extra ones")
        if heads and _has_ended(heads[0]):
            await self._delete(heads, "FailedDeleteHeadPod")
            heads = []
        if not heads:
            head = pods.head_pod(
                cluster,
                cluster_domain=self.options.cluster_domain,
                created_by=self.options.created_by,
                defaults=self.options.pod_defaults,
            )
            await self._create(obj, head, "FailedCreateHeadPod")

        for group in cluster.spec.worker_group_specs or ():
            members = [
                p for p in found if not pods.is_head(p) and pods.group_of(p) == group.group_name
            ]
            await self._group(obj, cluster, group, members)

    async def _group(
        self,
        obj: Obj,
        cluster: v1.RayCluster,
        group: raycluster_.WorkerGroupSpec,
        members: list[Obj],
    ) -> None:
        if group.suspend:
            await self._delete(members, "FailedDeleteWorkerPod")
            return
        if group.num_of_hosts > 1:
            await self._multi_host_group(obj, cluster, group, members)
            return
        ended = [p for p in members if _has_ended(p)]
        doomed = set((group.scale_strategy and group.scale_strategy.workers_to_delete) or ())
        listed = [p for p in members if p["metadata"]["name"] in doomed and p not in ended]
        await self._delete([*ended, *listed], "FailedDeleteWorkerPod")
        gone = {p["metadata"]["name"] for p in (*ended, *listed)}
        running = [p for p in members if p["metadata"]["name"] not in gone]
        diff = pods.desired_workers(group) - len(running)
        if diff > 0:
            used = [i for i in map(_replica_index, running) if i is not None]
            await self._create_workers(obj, cluster, group, used=used, replicas=diff)
        elif diff < 0:
            if cluster.spec.enable_in_tree_autoscaling and not self.options.random_pod_delete:
                return  # the autoscaler picks the pods, through workersToDelete
            await self._delete(_scale_down_order(running)[:-diff], "FailedDeleteWorkerPod")

    async def _multi_host_group(
        self,
        obj: Obj,
        cluster: v1.RayCluster,
        group: raycluster_.WorkerGroupSpec,
        members: list[Obj],
    ) -> None:
        """A group of ``numOfHosts > 1``, one whole replica at a time (KubeRay v1.7.0's
        ``reconcileMultiHostWorkerGroup``)."""
        replicas: dict[str, list[Obj]] = {}
        for pod in members:
            name = (pod["metadata"].get("labels") or {}).get(names.REPLICA_NAME_LABEL) or ""
            replicas.setdefault(name, []).append(pod)
        incomplete = [
            pod
            for name, replica in replicas.items()
            if not name or len(replica) < group.num_of_hosts
            for pod in replica
        ]
        if incomplete:  # the deletions wake the next pass, which creates the replacements
            await self._delete(incomplete, "FailedDeleteWorkerPod")
            return
        doomed = set((group.scale_strategy and group.scale_strategy.workers_to_delete) or ())
        listed = [
            name
            for name, replica in replicas.items()
            if any(p["metadata"]["name"] in doomed for p in replica)
        ]
        if listed:
            await self._delete([p for n in listed for p in replicas[n]], "FailedDeleteWorkerPod")
            return
        ended = [name for name, replica in replicas.items() if any(map(_has_ended, replica))]
        await self._delete([p for n in ended for p in replicas[n]], "FailedDeleteWorkerPod")
        live = {name: replica for name, replica in replicas.items() if name not in ended}
        diff = pods.desired_workers(group) // group.num_of_hosts - len(live)
        if diff > 0:
            used = [i for i in (_replica_index(r[0]) for r in live.values()) if i is not None]
            await self._create_workers(obj, cluster, group, used=used, replicas=diff)
        elif diff < 0:
            if cluster.spec.enable_in_tree_autoscaling and not self.options.random_pod_delete:
                return  # the autoscaler picks the replicas, through workersToDelete
            order = _scale_down_order([r[0] for r in live.values()])  # by their first host
            firsts = {id(pod) for pod in order[:-diff]}
            victims = [p for replica in live.values() if id(replica[0]) in firsts for p in replica]
            await self._delete(victims, "FailedDeleteWorkerPod")

    async def _create_workers(
        self,
        obj: Obj,
        cluster: v1.RayCluster,
        group: raycluster_.WorkerGroupSpec,
        *,
        used: Sequence[int],
        replicas: int,
    ) -> None:
        for slot in pods.replica_slots(group, used=used, replicas=replicas):
            pod = pods.worker_pod(cluster, group, cluster_domain=self.options.cluster_domain,
                                  created_by=self.options.created_by,
                                  defaults=self.options.pod_defaults, **slot)  # fmt: skip
            await self._create(obj, pod, "FailedCreateWorkerPod")

    async def _create(self, owner: Obj, pod: Obj, reason: str) -> None:
        objects.set_controller_reference(owner, pod)
        try:
            await self.client.create(pod, namespace=owner["metadata"]["namespace"])
        except errors.ApiError as exc:
            raise _ReplicaFailure(reason, _stable(exc.message or str(exc), pod)) from exc

    async def _delete(self, victims: Sequence[Mapping[str, Any]], reason: str) -> None:
        for pod in victims:
            meta = pod["metadata"]
            try:
                await self.client.delete(
                    pods.PODS, meta["namespace"], meta["name"], uid=meta.get("uid")
                )
            except (errors.NotFound, errors.Conflict):
                continue  # already gone (a Conflict on the uid: a new pod took the name)
            except errors.ApiError as exc:
                raise _ReplicaFailure(reason, exc.message or str(exc)) from exc


_EVENTS = {
    "FailedCreateHeadPod": ("FailedToCreateHeadPod", "Create"),
    "FailedCreateWorkerPod": ("FailedToCreateWorkerPod", "Create"),
    "FailedDeleteHeadPod": ("FailedToDeleteHeadPod", "Delete"),
    "FailedDeleteWorkerPod": ("FailedToDeleteWorkerPod", "Delete"),
    "FailedDeleteAllPods": ("FailedToDeletePodCollection", "Delete"),
}
"""``ReplicaFailure`` reason -> KubeRay v1.7.0's Event reason and action for it."""


def _stable(message: str, pod: Mapping[str, Any]) -> str:
    """``message`` without the random part of the pod's generated name, so that every retry
    reports the same failure (one status write, one Event whose count grows)."""
    prefix = pod["metadata"].get("generateName")
    if not prefix:
        return message
    return re.sub(re.escape(prefix) + r"[a-z0-9]{5}\b", prefix + "<generated>", message)


def _replica_index(pod: Mapping[str, Any]) -> int | None:
    """The pod's ``ray.io/worker-group-replica-index``, if it has a readable one."""
    value = ((pod.get("metadata") or {}).get("labels") or {}).get(names.REPLICA_INDEX_LABEL)
    try:
        return int(str(value)) if value is not None else None
    except ValueError:
        return None


def _has_ended(pod: Mapping[str, Any]) -> bool:
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


def _scale_down_order(running: list[Obj]) -> list[Obj]:
    """Pods to remove first: not Ready before Ready, then the newest first."""

    newest_first = sorted(
        running, key=lambda p: str(p["metadata"].get("creationTimestamp") or ""), reverse=True
    )
    return sorted(newest_first, key=report.is_running_and_ready)  # stable: not Ready first
