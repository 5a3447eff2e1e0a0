"""The RayCluster reconciler: one pass makes the cluster's objects match its spec, then
reports what the cache shows.

One :meth:`Reconciler.reconcile` reads the RayCluster and everything it owns from
the cache (never from the API server, but for the autoscaler's RBAC objects), and in
KubeRay v1.5.0's order:

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

**The shape of a pass** is *observe -> plan -> act*, as the RayService reconciler's:
after the lifecycle (a cluster gone, managed by another controller, or being deleted
without the clean-up finalizer: nothing to do), :mod:`controllers.raycluster.observe`
reads a read-only :class:`~controllers.raycluster.snapshot.Snapshot`,
:func:`controllers.raycluster.plan.plan` (pure: no client, no cache, no event loop)
decides every write, and :class:`controllers.raycluster.act.Executor` makes them. One
step interleaves: the status (step 5) is computed after the writes, from the cache read
again (:func:`controllers.raycluster.observe.after`): it reports what the server made of
them (the head pod's generated name, the pods now terminating, which a suspend waits
for). A cluster being deleted with the finalizer goes the same way
(:func:`~controllers.raycluster.observe.deleting`,
:func:`~controllers.raycluster.plan.deletion`,
:meth:`~controllers.raycluster.act.Executor.deletion`); only the clean-up Job's create
has outcomes the plan cannot know (one that exists already is waited for, briefly).

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

import datetime
from collections.abc import Callable
from typing import Any

import structlog

import api.v1 as v1
from controllers import statuswriter
from controllers.raycluster import act, names, observe, redis_cleanup
from controllers.raycluster import plan as plan_
from runtime import events, objects, reconcile
from runtime.cache import cache as cache_
from runtime.client import errors

__all__ = ["MetricsObserver", "Options", "Reconciler"]

Options = plan_.Options
MetricsObserver = act.MetricsObserver


class Reconciler:
    """One pass over one RayCluster (the module docstring says what it does). Its
    ``options`` and ``clock`` may be replaced between passes; the status writer keeps
    the clock it was made with."""

    def __init__(
        self,
        client: Any,
        cache: cache_.Cache,
        recorder: events.Recorder,
        options: Options | None = None,
        *,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
        metrics: MetricsObserver | None = None,
    ) -> None:
        """``clock``: the time (a timezone-aware ``datetime``, as the RayService reconciler
        takes it)."""
        self.client = client
        self.metrics = metrics
        self.cache = cache
        self.recorder = recorder
        self.options = options or Options()
        self.clock = clock
        self.writer = statuswriter.for_reconciler(
            client, cache, volatile=v1.raycluster.RayClusterStatus.VOLATILE_FIELDS, clock=clock
        )  # an annotation written meanwhile (the RayService's) is no 409
        self.executor = act.Executor(client, recorder, self.writer, metrics=metrics)
        self.log = structlog.get_logger("controllers.raycluster")

    async def reconcile(self, request: reconcile.Request) -> reconcile.Result:
        try:
            obj = await self.cache.get(v1.RAYCLUSTERS, request.namespace, request.name)
        except errors.NotFound:
            if self.metrics is not None:
                self.metrics.forget(request.namespace, request.name)
            return reconcile.Result()
        managed_by = (obj.get("spec") or {}).get("managedBy")
        if managed_by not in (None, "", names.MANAGED_BY):
            return reconcile.Result()
        now = self.clock()
        if obj["metadata"].get("deletionTimestamp"):
            if not objects.has_finalizer(obj, redis_cleanup.FINALIZER):
                return reconcile.Result()  # owner references let the garbage collector work
            seen = await observe.deleting(obj, cache=self.cache)
            return await self.executor.deletion(
                obj, plan_.deletion(seen, now=now, options=self.options)
            )

        snapshot = await observe.observe(
            obj, cache=self.cache, client=self.client, options=self.options
        )
        decided = plan_.plan(snapshot, now=now, options=self.options)
        if isinstance(decided, plan_.Refusal):
            await self.executor.refuse(obj, decided)
        if decided.add_finalizer:
            obj = await self.executor.add_finalizer(obj)  # a 409 retries the pass
        failure = await self.executor.writes(obj, decided)
        # The one interleave: the status reports what the writes made (see the docstring).
        after = await observe.after(obj, decided.cluster, cache=self.cache)
        new = plan_.status(decided.cluster, after, failure.failure if failure else None, now=now)
        await self.executor.write_status(obj, new)
        if failure is not None:
            self.executor.fail(obj, failure)
        return reconcile.Result()
