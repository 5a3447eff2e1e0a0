"""Act: carry out a RayJob pass's :mod:`~controllers.rayjob.plan`, the only part of the
pass that writes (through the client, the dashboard client, the Event recorder and the
status writer).

In the plan's order: the finalizer (a conditional update: a 409 retries the pass), the
writes - each create given the RayJob as its controller, KubeRay's Normal
``Created<what>`` / ``Deleted<what>`` / ``Updated<what>`` Event after it, and on a
refusal its Warning ``FailedTo<verb><what>`` and the error raised (the queue retries with
backoff); a create that exists meanwhile, a delete of one gone, are fine - then the
status, then the plan's Events. An ``HTTPMode`` submission (:class:`~controllers.rayjob
.plan.Submit`) that Ray refuses writes the plan's ``failed_status`` instead (the first
failure's time recorded) and the pass ends normally: the status-check timeout decides
when to give up; Ray answering that the id exists already is a success.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

import structlog

import api.v1 as v1
from controllers.ray import dashboard
from controllers.rayjob import names
from controllers.rayjob import plan as plan_
from runtime import events, objects, reconcile
from runtime import status as runtime_status
from runtime.client import errors

__all__ = ["Acted", "Executor"]

Obj = dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Acted:
    """A plan carried out: the pass's result, and the RayJob as the server has it now
    (after its finalizer and status writes; None when it deleted itself)."""

    result: reconcile.Result
    obj: Obj | None


class Executor:
    """Carries out plans with one client, recorder and status writer."""

    def __init__(
        self, client: Any, recorder: events.Recorder, writer: runtime_status.StatusWriter
    ) -> None:
        self.client = client
        self.recorder = recorder
        self.writer = writer
        self.log = structlog.get_logger("controllers.rayjob")

    async def act(
        self, obj: Obj, plan: plan_.Plan, *, client: dashboard.DashboardClient | None
    ) -> Acted:
        """Carry out ``plan`` for the RayJob ``obj``."""
        if plan.add_finalizer and not objects.has_finalizer(obj, names.FINALIZER):
            desired = copy.deepcopy(obj)
            objects.add_finalizer(desired, names.FINALIZER)
            obj = await self.client.update(desired)
        status = plan.status
        for write in plan.writes:
            if isinstance(write, plan_.Submit):
                if not await self._submit(obj, write, client):
                    status = write.failed_status
            elif isinstance(write, plan_.DeleteSelf):
                await self._delete_self(obj)
                return Acted(reconcile.Result(), None)
            else:
                await self._write(obj, write)
        if status is not None:
            written = await self.writer.update(obj, status)
            if written.outcome is runtime_status.Outcome.STALE:
                raise RuntimeError("the RayJob changed while its status was computed; again")
        for event in plan.events:
            self.recorder.event(obj, event.type, event.reason, event.message, action=event.action)
        if status is not None:
            obj = written.obj
        return Acted(reconcile.Result(requeue_after=plan.requeue_after), obj)

    async def finalize(
        self, obj: Obj, plan: plan_.Finalize, *, client: dashboard.DashboardClient | None
    ) -> reconcile.Result:
        """Stop the Ray job (a failure is only logged, as KubeRay), then drop the finalizer."""
        if plan.stop_job_id is not None and client is not None:
            try:
                await client.stop_job(plan.stop_job_id)
            except dashboard.DashboardError as exc:
                self.log.info(
                    "could not stop the Ray job of a deleted RayJob",
                    job_id=plan.stop_job_id,
                    error=str(exc),
                )
        desired = copy.deepcopy(obj)
        if objects.remove_finalizer(desired, names.FINALIZER):
            with contextlib.suppress(errors.NotFound):
                await self.client.update(desired)  # conditional on resourceVersion
        return reconcile.Result()

    async def _submit(
        self, obj: Obj, submit: plan_.Submit, client: dashboard.DashboardClient | None
    ) -> bool:
        if client is None:
            return False
        try:
            await client.submit_job(submit.request)
        except dashboard.DashboardJobExists:
            return True  # submitted by an earlier pass that did not live to record it
        except dashboard.DashboardError as exc:
            self.log.info("job submission failed", job=_key(obj), error=str(exc))
            return False
        return True

    async def _delete_self(self, obj: Obj) -> None:
        meta = obj["metadata"]
        try:
            await self.client.delete(
                v1.RAYJOBS, meta["namespace"], meta["name"], uid=meta.get("uid")
            )
        except (errors.NotFound, errors.Conflict):
            return

    async def _write(self, owner: Obj, write: plan_.Create | plan_.Delete | plan_.Update) -> None:
        namespace = owner["metadata"]["namespace"]
        if isinstance(write, plan_.Create):
            verb, past = "Create", "Created"
            made = objects.set_controller_reference(owner, copy.deepcopy(write.obj))
            name = made["metadata"]["name"]
            call = self.client.create(made, namespace=namespace)
        elif isinstance(write, plan_.Delete):
            verb, past, name = "Delete", "Deleted", write.name
            call = self.client.delete(
                write.resource, write.namespace, write.name, propagation_policy="Background"
            )
        else:
            verb, past, name = "Update", "Updated", write.obj["metadata"]["name"]
            call = self.client.update(write.obj)
        what = f"{write.what} {namespace}/{name}"
        try:
            await call
        except (errors.AlreadyExists, errors.NotFound):
            if verb == "Update":
                raise
            return  # made meanwhile / gone already: what the write was for
        except errors.ApiError as exc:
            message = f"Failed to {verb.lower()} {what}: {exc.message or exc}"
            self._event(owner, "Warning", f"FailedTo{verb}{write.what}", verb, message)
            raise
        self._event(owner, "Normal", f"{past}{write.what}", verb, f"{past} {what}")

    def _event(self, obj: Obj, kind: str, reason: str, action: str, message: str) -> None:
        self.recorder.event(obj, kind, reason, message, action=action)  # type: ignore[arg-type]


def _key(obj: Mapping[str, Any]) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
