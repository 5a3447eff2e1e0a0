"""Act: carry out a :class:`~controllers.rayservice.plan.Plan`, the only part of a
RayService pass that talks to the API server, the dashboard and the Event recorder.

The order is fixed, and it is what keeps a crash at any point safe (the next pass
reads the cluster's annotations and the Services again and carries on):

1. the plan's Warnings;
2. cluster writes in the plan's order (the active cluster's, the pending one's,
   then the dangling ones': their ``delete-after``, or their deletion), each with its
   Event once it succeeded (a cluster already gone, or replaced, is skipped quietly;
   a create that finds the name taken leaves it to the watch); then, in a suspend,
   the RayService's Services;
3. the per-cluster serve Services of an incremental upgrade (created, never updated);
   the Serve config PUT, then, when it replaced applications Serve was running (a
   config changed in place), at once a read of Serve's applications (the status reports
   what Serve runs after the PUT, not the replaced config's: one write, not a second one
   the next poll makes to correct it; a first config, on a new cluster, reports nothing
   new before the next poll, which costs no write) and its hash annotation (a crash
   between the PUT and the annotation is caught by the next pass, which sees the
   dashboard runs that config),
   then an incremental upgrade's ``target_capacity`` PUT
   (``UpdatedServeTargetCapacity``), then the head pod's ``ray.io/serve`` label (after a
   PUT, from what the Serve proxy answers then), and during an upgrade the serving
   cluster's head pod's. A PUT that fails writes the status with Serve's answer and
   raises (a timed-out PUT quietly: Ray may still be deploying it);
4. an incremental upgrade's Gateway, then its HTTPRoute (created, or updated when a
   field the operator manages differs: the weights move traffic; the route is written
   before the status that reports them, so a crash between the two is reported by the
   next pass from the route itself); the old active cluster's ``delete-after``,
   **before** traffic leaves it; then the head Service and the serve Service, and
   ``SwitchedTraffic``;
5. the status, through the status writer (no write when nothing changed). A spec
   changed meanwhile ends the pass there, quietly and without a retry: the status was
   computed for the old spec, and the change's own watch event has queued (or will
   queue) the pass that computes it again - an error would add a second, backed-off
   pass and an error log per change to a RayService that is being edited;
6. the plan's error, if any (the work queue retries with backoff, or never for a
   :class:`~runtime.reconcile.TerminalError`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import Any

import api.v1 as v1
from controllers.ray import dashboard, serveconfig
from controllers.raycluster import interface as raycluster
from controllers.rayservice import clusters, report, services
from controllers.rayservice import plan as plan_
from runtime import clock, events, reconcile
from runtime import status as status_writer
from runtime.client import errors

__all__ = ["Executor", "ServeFailed"]

Obj = dict[str, Any]


class ServeFailed(Exception):
    """The dashboard could not be read, or refused the config (retried with backoff)."""

    def __init__(self, message: str, *, refusal: str | None = None) -> None:
        super().__init__(message)
        self.refusal = refusal
        """Serve's answer when it refused the config (worth showing in the status)."""


def raised(failure: plan_.Failure) -> Exception:
    """The exception a plan's :class:`~controllers.rayservice.plan.Failure` ends the pass
    with: a :class:`~runtime.reconcile.TerminalError` (never retried until the object
    changes), else a :class:`ServeFailed` (retried with backoff)."""
    if failure.terminal:
        return reconcile.TerminalError(failure.message)
    return ServeFailed(failure.message, refusal=failure.refusal)


class Executor:
    """Carries out plans with one client, recorder and status writer."""

    def __init__(
        self, client: Any, recorder: events.Recorder, writer: status_writer.StatusWriter
    ) -> None:
        self.client = client
        self.recorder = recorder
        self.writer = writer

    async def act(
        self,
        service: Obj,
        plan: plan_.Plan,
        *,
        spent: float,
        dashboards: Mapping[str, dashboard.DashboardClient] | None = None,
    ) -> float | None:
        """Make ``plan``'s writes for ``service`` (see the module docstring); returns
        when to look again (``spent``: seconds the dashboard took while observing).
        ``dashboards``: the client of each cluster whose dashboard observe read, by name
        (:class:`controllers.rayservice.observe.Observation`): the plan names clusters,
        these reach them."""
        reach = dashboards or {}
        for event in plan.events:
            self.recorder.event(
                service, event.type, event.reason, event.message, action=event.action
            )
        status = plan.status
        for op in plan.clusters:
            await self._cluster(service, op)
        for gone in plan.delete_services:
            await self._delete_service(service, gone)
        for svc in plan.cluster_services:
            await self._create_service(service, svc)
        if plan.submit is not None:
            started = time.monotonic()
            refused = await self._submit(service, plan.submit, reach)
            spent += time.monotonic() - started
            if refused is not None:
                after = _after_put(plan, None, refused.refusal)
                if after is not None:
                    await self.write(service, after)
                raise refused
        if plan.submit is not None and plan.reread:
            # Serve's applications after the PUT, and the hash annotation: both only
            # after the PUT, neither after the other, so at once (one round trip less in
            # a pass that a user's next change may race).
            started = time.monotonic()
            reread = asyncio.ensure_future(self._reread(reach[plan.submit.cluster], plan))
            try:
                if plan.serve_annotation is not None:
                    await self._annotate(plan.serve_annotation)
            except BaseException:
                reread.cancel()
                raise
            status = await reread
            spent += time.monotonic() - started
        elif plan.serve_annotation is not None:
            await self._annotate(plan.serve_annotation)
        if plan.capacity is not None:
            started = time.monotonic()
            refused = await self._submit(
                service,
                plan.capacity,
                reach,
                ok=("UpdatedServeTargetCapacity", plan.capacity_message),
            )
            spent += time.monotonic() - started
            if refused is not None:
                raise refused
        for relabel in (plan.relabel, plan.relabel_serving):
            if relabel is not None:
                await self._relabel(service, relabel, reach)
        for point in plan.gateway_points:
            await self._gateway(service, point)
        if plan.delete_after is not None:
            await self._annotate(plan.delete_after)
        for point in plan.points:
            await self._point(service, point)
        if plan.switched is not None:
            self.recorder.event(
                service, "Normal", "SwitchedTraffic", plan.switched, action="Update"
            )
        if status is not None and not await self.write(service, status):
            return None  # the spec changed meanwhile: its own watch event brings the next pass
        if plan.error is not None:
            raise raised(plan.error)
        return plan.requeue_after(spent)

    async def write(self, service: Obj, status: Mapping[str, Any]) -> bool:
        """Hand ``status`` to the status writer; False when the spec changed meanwhile
        (the status is stale and was not written)."""
        result = await self.writer.update(service, status)
        return result.outcome is not status_writer.Outcome.STALE

    async def delete(self, service: Obj, cluster: Obj, why: str) -> None:
        """Delete ``cluster`` (by uid) in the background; an Event when it was there."""
        await self._delete(service, v1.RAYCLUSTERS, "RayCluster", cluster, why)

    async def _delete_service(self, service: Obj, gone: plan_.Delete) -> None:
        await self._delete(service, services.SERVICES, "Service", gone.obj, gone.why)

    async def _delete(self, service: Obj, resource: Any, kind: str, obj: Obj, why: str) -> None:
        meta = obj["metadata"]
        try:
            await self.client.delete(
                resource, meta["namespace"], meta["name"], uid=meta.get("uid"),
                propagation_policy="Background",
            )  # fmt: skip
        except (errors.NotFound, errors.Conflict):
            return
        self.recorder.event(
            service, "Normal", f"Deleted{kind}", f"Deleted {kind} {meta['name']}: {why}",
            action="Delete",
        )  # fmt: skip

    async def _cluster(self, service: Obj, op: plan_.ClusterOp) -> None:
        if isinstance(op, plan_.Delete):
            await self.delete(service, op.obj, op.why)
        elif isinstance(op, plan_.Keep):
            await self._annotate(
                plan_.Annotate(op.cluster, {clusters.DELETE_AFTER_ANNOTATION: None})
            )
        elif isinstance(op, plan_.Annotate):
            with contextlib.suppress(errors.NotFound):  # gone since the cache looked
                await self._annotate(op)
        elif isinstance(op, plan_.UpdateInPlace):
            await self.client.update(op.desired)
            name = op.desired["metadata"]["name"]
            self.recorder.event(
                service, "Normal", "UpdatedRayCluster", f"Updated RayCluster {name} in place",
                action="Update",
            )  # fmt: skip
        else:
            name = op.desired["metadata"]["name"]
            try:
                await self.client.create(op.desired, namespace=op.desired["metadata"]["namespace"])
            except errors.AlreadyExists:
                return  # the cache had not seen it yet; the watch will bring it
            self.recorder.event(
                service, "Normal", "CreatedRayCluster", f"Created RayCluster {name}",
                action="Create",
            )  # fmt: skip

    async def _reread(self, client: dashboard.DashboardClient, plan: plan_.Plan) -> Obj | None:
        """The status to report after a successful PUT: from the applications Serve
        reports now (:func:`controllers.rayservice.report.after_put`); the plan's own when
        Serve cannot be read (the next poll will)."""
        try:
            details = await client.get_serve_applications()
        except dashboard.DashboardError:
            return plan.status
        return _after_put(plan, report.applications(details))

    async def _submit(
        self,
        service: Obj,
        submit: plan_.Submit,
        reach: Mapping[str, dashboard.DashboardClient],
        *,
        ok: tuple[str, str | None] | None = None,
    ) -> ServeFailed | None:
        """PUT the config; the failure to raise (after the status is written), if any.
        ``ok``: the Event's reason and message on success (default: the applications')."""
        try:
            await reach[submit.cluster].put_serve_applications(submit.config)
        except dashboard.DashboardError as exc:
            # Serve's refusal may echo values of the config (env_vars...): they reach
            # neither the status, nor Events, nor logs.
            said = serveconfig.redact(str(exc), submit.config)
            # A PUT that timed out may still deploy (Ray starts Serve on the first one,
            # which takes longer than the timeout): the next pass sees it in
            # deployed_app_config. Anything else is worth an Event.
            if not isinstance(exc, dashboard.DashboardTimeout):
                failed = (
                    "FailedToUpdateServeApplications"
                    if ok is None
                    else ("FailedToUpdateTargetCapacity")
                )
                self.recorder.event(
                    service, "Warning", failed,
                    f"RayCluster {submit.cluster}: {said}", action="Update",
                )  # fmt: skip
            refusal = (
                f"Serve refused the config: {said}"
                if isinstance(exc, dashboard.DashboardHTTPError)
                else None
            )
            return ServeFailed(
                f"cannot submit the Serve config to {submit.cluster}: {said}", refusal=refusal
            )
        reason, message = ok or (
            "UpdatedServeApplications",
            f"Submitted the Serve applications to RayCluster {submit.cluster}",
        )
        self.recorder.event(service, "Normal", reason, message or reason, action="Update")
        return None

    async def _create_service(self, service: Obj, svc: Obj) -> None:
        name = svc["metadata"]["name"]
        try:
            await self.client.create(svc)
        except errors.AlreadyExists:
            return  # the cache had not seen it yet
        self.recorder.event(
            service, "Normal", "CreatedService", f"Created Service {name}", action="Create"
        )

    async def _gateway(self, service: Obj, point: plan_.Point) -> None:
        """Create or update the Gateway or the HTTPRoute, with KubeRay's Events."""
        kind = str(point.desired.get("kind"))
        meta = point.desired["metadata"]
        where = f"{meta.get('namespace')}/{meta['name']}"
        creating = point.current is None
        try:
            if creating:
                await self.client.create(point.desired)
            else:
                await self.client.update(point.desired)
        except errors.AlreadyExists:
            return  # the cache had not seen it yet
        except errors.ApiError as exc:
            verb = "Create" if creating else "Update"
            self.recorder.event(
                service, "Warning", f"FailedTo{verb}{kind}",
                f"Failed to {verb.lower()} {kind} {where}: {exc.message or exc}", action=verb,
            )  # fmt: skip
            raise
        verb = "Created" if creating else "Updated"
        self.recorder.event(
            service, "Normal", f"{verb}{kind}", f"{verb} {kind} {where}",
            action="Create" if creating else "Update",
        )  # fmt: skip

    async def _annotate(self, annotate: plan_.Annotate) -> None:
        meta = annotate.cluster["metadata"]
        await self.client.patch(
            v1.RAYCLUSTERS, meta["namespace"], meta["name"],
            {"metadata": {"annotations": dict(annotate.annotations)}},
        )  # fmt: skip

    async def _relabel(
        self,
        service: Obj,
        relabel: plan_.Relabel,
        reach: Mapping[str, dashboard.DashboardClient],
    ) -> None:
        meta = relabel.pod["metadata"]
        value = relabel.value
        if value is None:  # from the proxy, now that the config is submitted
            assert relabel.cluster is not None
            healthy = await reach[relabel.cluster].serve_proxy_healthy(relabel.pod)
            value = "true" if healthy else "false"
            if (meta.get("labels") or {}).get(raycluster.SERVE_LABEL) == value:
                return
        try:
            await self.client.patch(
                raycluster.PODS, meta["namespace"], meta["name"],
                {"metadata": {"labels": {raycluster.SERVE_LABEL: value}}},
            )  # fmt: skip
        except errors.NotFound:  # gone since the cache looked
            return
        except errors.ApiError as exc:
            self.recorder.event(
                service, "Warning", "FailedToUpdateHeadPodServeLabel",
                f"Cannot set {raycluster.SERVE_LABEL}={value} on head pod {meta['name']}: "
                f"{exc.message or exc}", action="Update",
            )  # fmt: skip
            raise
        self.recorder.event(
            service, "Normal", "UpdatedHeadPodServeLabel",
            f"Set {raycluster.SERVE_LABEL}={value} on head pod {meta['name']}", action="Update",
        )  # fmt: skip

    async def _point(self, service: Obj, point: plan_.Point) -> None:
        name = point.desired["metadata"]["name"]
        if point.current is None:
            try:
                await self.client.create(point.desired)
            except errors.AlreadyExists:
                return  # the cache had not seen it yet
            self.recorder.event(
                service, "Normal", "CreatedService", f"Created Service {name}", action="Create"
            )
            return
        await self.client.update(point.desired)
        self.recorder.event(
            service, "Normal", "UpdatedService", f"Updated Service {name}", action="Update"
        )


def _after_put(
    plan: plan_.Plan, applications: Obj | None, refusal: str | None = None
) -> Obj | None:
    """The status once the PUT was made (or refused): the plan's, computed again from what
    it observed and what Serve said since (:func:`controllers.rayservice.report.after_put`)."""
    if plan.observed is None or plan.now is None or (refusal is None and plan.status is None):
        return plan.status
    return report.after_put(
        plan.service, plan.observed, target=plan.target, applications=applications,
        now=clock.rfc3339(plan.now), refusal=refusal,
    )  # fmt: skip
