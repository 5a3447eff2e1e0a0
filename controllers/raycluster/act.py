"""Act: carry out a RayCluster pass's :mod:`~controllers.raycluster.plan`, the only part of
the pass that writes (through the client, the Event recorder and the status writer).

In the plan's order: a :class:`~controllers.raycluster.plan.Refusal`'s Warning, its
status, its :class:`~runtime.reconcile.TerminalError`; a
:class:`~controllers.raycluster.plan.Plan`'s clean-up finalizer (a conditional update:
a 409 retries the pass), then its creates and deletes, each given the RayCluster as its
controller. The first refused pod write stops the rest and is the pass's failure
(:class:`ReplicaFailure`: its message made stable, :func:`stable`); an owned object that
exists meanwhile is left alone (the autoscaler's Role must then be controlled by the
cluster: one GET tells). The status is written by :meth:`Executor.write_status` once the
cache has been read again, and :meth:`Executor.fail` records the failure's Warning and
raises it. A :class:`~controllers.raycluster.plan.Deletion`'s pod deletes (a refused one:
a Warning and the error), then its steps.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn, Protocol

import structlog

from controllers.raycluster import plan as plan_
from controllers.raycluster import pods, redis_cleanup, report
from runtime import events, objects, reconcile
from runtime import status as runtime_status
from runtime.client import errors

__all__ = ["EVENTS", "Executor", "MetricsObserver", "ReplicaFailure", "stable"]

Obj = dict[str, Any]


class MetricsObserver(Protocol):
    """What the reconciler tells the metrics (:class:`controllers.metrics.ProvisionedDurations`)."""

    def status_written(self, before: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
        """A pass wrote ``status`` over ``before`` (the RayCluster as the pass read it)."""
        ...

    def forget(self, namespace: str, name: str) -> int:
        """The RayCluster ``namespace/name`` is gone."""
        ...


class ReplicaFailure(Exception):
    """A write the pass needed failed (or could not be made): the ``ReplicaFailure``."""

    def __init__(self, failure: report.Failure) -> None:
        super().__init__(f"{failure.reason}: {failure.message}")
        self.failure = failure


EVENTS = {
    "FailedCreateHeadPod": ("FailedToCreateHeadPod", "Create"),
    "FailedCreateWorkerPod": ("FailedToCreateWorkerPod", "Create"),
    "FailedDeleteHeadPod": ("FailedToDeleteHeadPod", "Delete"),
    "FailedDeleteWorkerPod": ("FailedToDeleteWorkerPod", "Delete"),
    "FailedDeleteAllPods": ("FailedToDeletePodCollection", "Delete"),
}
"""``ReplicaFailure`` reason -> KubeRay v1.7.0's Event reason and action for it."""


class Executor:
    """Carries out plans with one client, recorder and status writer."""

    def __init__(
        self,
        client: Any,
        recorder: events.Recorder,
        writer: runtime_status.StatusWriter,
        *,
        metrics: MetricsObserver | None = None,
    ) -> None:
        self.client = client
        self.recorder = recorder
        self.writer = writer
        self.metrics = metrics
        self.log = structlog.get_logger("controllers.raycluster")

    # -- a cluster not being deleted ------------------------------------------------------

    async def refuse(self, obj: Obj, refusal: plan_.Refusal) -> NoReturn:
        """The Warning, the status (when there is one), the TerminalError."""
        self.recorder.event(
            obj, "Warning", "InvalidRayClusterSpec", refusal.message, action="Validate"
        )
        if refusal.status is not None:
            await self.writer.update(obj, refusal.status)
        raise reconcile.TerminalError(refusal.error) from refusal.cause

    async def add_finalizer(self, obj: Obj) -> Obj:
        """The clean-up finalizer added (conditional on resourceVersion); the updated object."""
        desired = copy.deepcopy(obj)
        objects.add_finalizer(desired, redis_cleanup.FINALIZER)
        updated: Obj = await self.client.update(desired)
        return updated

    async def writes(self, owner: Obj, plan: plan_.Plan) -> ReplicaFailure | None:
        """The plan's creates and deletes; the pass's failure, if any. An error of the plan
        is raised once they are made."""
        try:
            for write in plan.writes:
                if isinstance(write, plan_.Delete):
                    await self._delete(write.pods, write.failure)
                else:
                    await self._create(owner, write)
        except ReplicaFailure as exc:
            return exc
        if plan.error is not None:
            raise RuntimeError(plan.error)
        return ReplicaFailure(plan.failure) if plan.failure is not None else None

    async def write_status(self, obj: Obj, new: Mapping[str, Any]) -> None:
        """Hand ``new`` to the status writer (a written one is reported to the metrics); a
        spec changed meanwhile is an error: the queue retries with a fresh view."""
        result = await self.writer.update(obj, new)
        if result.writes and self.metrics is not None:
            self.metrics.status_written(obj, result.obj.get("status") or {})
        if result.outcome is runtime_status.Outcome.STALE:
            raise RuntimeError("the RayCluster changed while its status was computed; again")

    def fail(self, obj: Obj, failure: ReplicaFailure, *, action: str = "Create") -> NoReturn:
        """The failure's Warning (KubeRay's reason for it), then the failure raised."""
        reason, action = EVENTS.get(failure.failure.reason, (failure.failure.reason, action))
        self.recorder.event(obj, "Warning", reason, failure.failure.message, action=action)
        raise failure

    async def _create(self, owner: Obj, create: plan_.Create) -> None:
        made = objects.set_controller_reference(owner, copy.deepcopy(create.obj))
        namespace = owner["metadata"]["namespace"]
        try:
            await self.client.create(made, namespace=namespace)
        except errors.ApiError as exc:
            if create.failure is not None:
                message = stable(exc.message or str(exc), made)
                raise ReplicaFailure(report.Failure(create.failure, message)) from exc
            if not isinstance(exc, errors.AlreadyExists):
                raise
            if create.must_own:  # created since we looked: by whom?
                name = made["metadata"]["name"]
                current = await self.client.get(create.resource, namespace, name)
                if not objects.is_controlled_by(current, owner):
                    raise ReplicaFailure(plan_.role_not_owned(name)) from None

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
                raise ReplicaFailure(report.Failure(reason, exc.message or str(exc))) from exc

    # -- a cluster being deleted ----------------------------------------------------------

    async def deletion(self, obj: Obj, plan: plan_.Deletion) -> reconcile.Result:
        """The pods deleted (a refused delete: its Warning and the error), then the steps."""
        try:
            await self._delete(plan.delete, "FailedDeleteAllPods")
        except ReplicaFailure as exc:
            self.fail(obj, exc, action="Delete")
        for step in plan.steps:
            if isinstance(step, plan_.Event):
                self.recorder.event(obj, step.type, step.reason, step.message, action=step.action)
            elif isinstance(step, plan_.DropFinalizer):
                if step.finished is not None:
                    self.log.info("redis clean-up job finished", **step.finished)
                await self._drop_finalizer(obj)
            else:
                return await self._create_job(obj, step)
        if plan.requeue_after is not None:
            return reconcile.Result(requeue_after=plan.requeue_after)
        return reconcile.Result()

    async def _drop_finalizer(self, obj: Obj) -> None:
        desired = copy.deepcopy(obj)
        if not objects.remove_finalizer(desired, redis_cleanup.FINALIZER):
            return
        try:
            await self.client.update(desired)  # conditional on resourceVersion
        except errors.NotFound:
            return

    async def _create_job(self, obj: Obj, step: plan_.CreateJob) -> reconcile.Result:
        namespace = obj["metadata"]["namespace"]
        job_name = step.job["metadata"]["name"]
        try:
            await self.client.create(step.job, namespace=namespace)
        except errors.AlreadyExists:  # not ours (a cluster of this name before), or racing
            return reconcile.Result(requeue_after=min(step.remaining, plan_.REQUEUE_SHORT))
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
        return reconcile.Result(requeue_after=step.remaining)


def stable(message: str, pod: Mapping[str, Any]) -> str:
    """``message`` without the random part of the pod's generated name, so that every retry
    reports the same failure (one status write, one Event whose count grows)."""
    prefix = pod["metadata"].get("generateName")
    if not prefix:
        return message
    return re.sub(re.escape(prefix) + r"[a-z0-9]{5}\b", prefix + "<generated>", message)
