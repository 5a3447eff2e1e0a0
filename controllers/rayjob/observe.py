"""Observe: what one RayJob pass decides from, read into a
:class:`~controllers.rayjob.snapshot.Snapshot` that nothing changes afterwards.

It writes nothing. It reads the cache - and, in ``Running`` only, asks the cluster's
dashboard about the job (one ``GET /api/jobs/<id>``; the token Secret, with token
authentication, by GET through :class:`controllers.ray.tokens.Tokens`' memory).
What it reads depends on the state:

- always: the RayJob validated (its model, then
  :func:`controllers.rayjob.validation.validate`); nothing more for an invalid one;
- the RayCluster named in ``status.rayClusterName`` (when one is);
- ``Initializing``: once that cluster is ``ready``, its head Service; in
  ``K8sJobMode`` the submitter Job;
- ``Running``: the submitter Job (``K8sJobMode``), the cluster's head pods
  (``SidecarMode``, ``pod-ip`` addresses), the RayJob's head Service, and - when a poll
  is due (:func:`controllers.rayjob.plan.poll_at`: never asked, the submitter finished,
  or the poll interval over) - the dashboard's answer; otherwise when it is due;
- ``Retrying`` / ``Suspending`` / ``ValidationFailed``: the submitter Job;
- being deleted (:func:`deleting`): the cluster, and a dashboard client to stop the job.

:class:`Seen` carries the snapshot and the dashboard client the act step uses (an
``HTTPMode`` submission, a stop).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

import pydantic

import api.v1 as v1
from api.v1 import rayjob as rayjob_
from controllers.ray import dashboard
from controllers.ray import tokens as tokens_
from controllers.raycluster import interface as raycluster
from controllers.rayjob import names, validation
from controllers.rayjob import plan as plan_
from controllers.rayjob import snapshot as snapshot_
from runtime.cache import cache as cache_
from runtime.client import errors

__all__ = ["Reach", "Seen", "deleting", "observe"]

Obj = Mapping[str, Any]
State = rayjob_.JobDeploymentStatus


@dataclasses.dataclass(frozen=True, kw_only=True)
class Reach:
    """How the cluster's dashboard is reached."""

    dashboards: dashboard.DashboardFactory
    tokens: tokens_.Tokens
    mode: dashboard.Mode = "service"
    cluster_domain: str = dashboard.DEFAULT_CLUSTER_DOMAIN


@dataclasses.dataclass(frozen=True, kw_only=True)
class Seen:
    """The snapshot, and the dashboard client of the job's cluster (None when the
    dashboard was not reached)."""

    snapshot: snapshot_.Snapshot
    client: dashboard.DashboardClient | None = None


async def observe(
    obj: Obj,
    *,
    cache: cache_.Cache,
    reach: Reach,
    options: plan_.Options,
    now: datetime.datetime,
    last_poll: datetime.datetime | None = None,
) -> Seen:
    """A RayJob not being deleted (see the module docstring). ``last_poll``: when the
    dashboard was last asked about this attempt's job (None: never)."""
    try:
        job = v1.RayJob.model_validate(obj)
    except pydantic.ValidationError as exc:
        message = "; ".join(v1.meta.error_messages(exc))
        return Seen(
            snapshot=snapshot_.Snapshot(obj=obj, job=None, invalid=("InvalidRayJobSpec", message))
        )
    invalid = validation.validate(job, deletion_policy_gate=options.deletion_policy)
    if invalid is not None:
        return Seen(
            snapshot=snapshot_.Snapshot(
                obj=obj, job=job, invalid=(invalid.event_reason, invalid.message)
            )
        )
    status = obj.get("status") or {}
    state = str(status.get("jobDeploymentStatus") or "")
    namespace = obj["metadata"]["namespace"]
    cluster_name = str(status.get("rayClusterName") or "")
    mode = job.spec.submission_mode or rayjob_.SubmissionMode.K8S_JOB.value
    found: dict[str, Any] = {}
    if cluster_name and state != State.NEW:
        found["cluster"] = await _get(cache, v1.RAYCLUSTERS, namespace, cluster_name)
    cluster = found.get("cluster")
    wants_submitter = mode == rayjob_.SubmissionMode.K8S_JOB and state in (
        State.INITIALIZING,
        State.RUNNING,
        State.RETRYING,
        State.SUSPENDING,
        State.VALIDATION_FAILED,
    )
    if wants_submitter:
        found["submitter"] = await _get(cache, plan_.JOBS, namespace, names.submitter_job_name(job))
    ready = cluster is not None and (cluster.get("status") or {}).get("state") == "ready"
    if state == State.INITIALIZING and cluster is not None and ready:
        found["head_service"] = await _get(
            cache, raycluster.SERVICES, namespace, _head_service_name(cluster)
        )
    client = None
    if state == State.RUNNING:
        found["job_service"] = await _get(
            cache, raycluster.SERVICES, namespace, names.head_service_name(job)
        )
        heads: tuple[Obj, ...] = ()
        if cluster is not None:
            heads = await _head_pods(cache, cluster)
        found["head_pods"] = heads
        job_id = status.get("jobId")
        if cluster is not None and job_id:
            unasked = snapshot_.Snapshot(obj=obj, job=job, **found)
            due = plan_.poll_at(unasked, last_poll=last_poll, now=now, options=options)
            if due is not None:
                return Seen(snapshot=dataclasses.replace(unasked, next_poll=due))
            view, client = await _ask(reach, cluster, heads, str(job_id))
            found["dashboard"] = view
    return Seen(snapshot=snapshot_.Snapshot(obj=obj, job=job, **found), client=client)


async def deleting(obj: Obj, *, cache: cache_.Cache, reach: Reach) -> Seen:
    """A RayJob being deleted: its cluster, and a client of its dashboard."""
    status = obj.get("status") or {}
    namespace = obj["metadata"]["namespace"]
    cluster_name = str(status.get("rayClusterName") or "")
    cluster = await _get(cache, v1.RAYCLUSTERS, namespace, cluster_name) if cluster_name else None
    client = None
    if cluster is not None:
        client, _ = await _client(reach, cluster, await _head_pods(cache, cluster))
    snapshot = snapshot_.Snapshot(obj=obj, job=None, cluster=cluster)
    return Seen(snapshot=snapshot, client=client)


async def _get(cache: cache_.Cache, resource: Any, namespace: str, name: str) -> Obj | None:
    try:
        found: Obj = await cache.get(resource, namespace, name)
    except errors.NotFound:
        return None
    return found


def _head_service_name(cluster: Obj) -> str:
    head = (cluster.get("status") or {}).get("head") or {}
    return str(head.get("serviceName") or raycluster.head_service_name(cluster["metadata"]["name"]))


async def _head_pods(cache: cache_.Cache, cluster: Obj) -> tuple[Obj, ...]:
    namespace, name = cluster["metadata"]["namespace"], cluster["metadata"]["name"]
    found = await cache.list(
        raycluster.PODS, namespace, label_selector=raycluster.pod_selector(name)
    )
    return tuple(
        p for p in found if raycluster.is_head(p) and not p["metadata"].get("deletionTimestamp")
    )


async def _client(
    reach: Reach, cluster: Obj, heads: tuple[Obj, ...]
) -> tuple[dashboard.DashboardClient | None, str | None]:
    """A client of ``cluster``'s dashboard, or why there is none."""
    namespace, name = cluster["metadata"]["namespace"], cluster["metadata"]["name"]
    head_ip = ((heads[0].get("status") or {}).get("podIP")) if len(heads) == 1 else None
    try:
        address = dashboard.address(
            reach.mode,
            cluster=name,
            namespace=namespace,
            head_service=_head_service_name(cluster),
            head_pod_ip=head_ip,
            cluster_domain=reach.cluster_domain,
        )
    except ValueError as exc:
        return None, str(exc)
    try:
        token = await reach.tokens.token_for(cluster)
    except tokens_.TokenUnavailable as exc:
        return None, str(exc)
    return reach.dashboards.client_for(address, auth_token=token), None


async def _ask(
    reach: Reach, cluster: Obj, heads: tuple[Obj, ...], job_id: str
) -> tuple[snapshot_.Dashboard, dashboard.DashboardClient | None]:
    client, why = await _client(reach, cluster, heads)
    if client is None:
        return snapshot_.Dashboard(error=f"cannot reach the dashboard: {why}"), None
    try:
        info = await client.get_job(job_id)
    except dashboard.DashboardError as exc:
        if isinstance(exc, dashboard.DashboardHTTPError) and exc.status in (401, 403):
            reach.tokens.forget(cluster)  # a rotated Secret: read it again next pass
        return snapshot_.Dashboard(error=f"cannot get job {job_id}: {exc}"), client
    return snapshot_.Dashboard(info=info), client
