"""Observe: what one RayCluster pass decides from, read into a
:class:`~controllers.raycluster.snapshot.Snapshot` that nothing changes afterwards.

It writes nothing and reads the cache, never the API server - but for the autoscaler's
ServiceAccount, Role and RoleBinding and the token Secret, read by GET (the operator has
no business caching every Role of the cluster, and may not list or watch Secrets). What
it finds:

- the RayCluster validated once (``api.v1.RayCluster``, then
  :func:`controllers.raycluster.validation.problems`); nothing else is read for one
  whose objects cannot exist (their labels or names would be invalid);
- its head and worker pods (``ray.io/cluster=<name>``, not its clean-up Job's), from the
  store's label index, terminating ones included;
- not being deleted: which of the owned objects it wants
  (:func:`controllers.raycluster.plan.owned`) exist, and whether it controls them;
- being deleted: the Redis clean-up Jobs it controls.

:func:`after` reads again what the status is computed from once the pass has written
(:class:`~controllers.raycluster.snapshot.After`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pydantic

import api.v1 as v1
from controllers.raycluster import names, pods, redis_cleanup, services, validation
from controllers.raycluster import plan as plan_
from controllers.raycluster import snapshot as snapshot_
from runtime import objects
from runtime.cache import cache as cache_
from runtime.client import errors

__all__ = ["after", "deleting", "observe"]

Obj = Mapping[str, Any]


async def observe(
    obj: Obj, *, cache: cache_.Cache, client: Any, options: plan_.Options
) -> snapshot_.Snapshot:
    """A RayCluster not being deleted, and what it owns (see the module docstring)."""
    cluster, invalid = _validate(obj)
    if cluster is None:
        return snapshot_.Snapshot(obj=obj, cluster=None, invalid=invalid)
    problems = tuple(validation.problems(cluster))
    if problems:
        return snapshot_.Snapshot(obj=obj, cluster=cluster, problems=problems)
    wanted, _ = plan_.owned(cluster, obj["metadata"].get("annotations") or {}, options)
    owned: dict[tuple[str, str], bool] = {}
    for create in wanted:
        meta = create.obj["metadata"]
        try:
            current = (
                await cache.get(create.resource, meta["namespace"], meta["name"])
                if create.cached
                else await client.get(create.resource, meta["namespace"], meta["name"])
            )
        except errors.NotFound:
            continue
        owned[plan_.key(create.obj)] = objects.is_controlled_by(current, obj)
    return snapshot_.Snapshot(
        obj=obj, cluster=cluster, pods=await _cluster_pods(cache, obj), owned=owned
    )


async def deleting(obj: Obj, *, cache: cache_.Cache) -> snapshot_.Snapshot:
    """A RayCluster being deleted: its pods and its Redis clean-up Jobs."""
    cluster, invalid = _validate(obj)
    if cluster is None:
        return snapshot_.Snapshot(obj=obj, cluster=None, invalid=invalid)
    namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    jobs = await cache.list(
        redis_cleanup.JOBS, namespace, label_selector=redis_cleanup.job_selector(name)
    )
    return snapshot_.Snapshot(
        obj=obj,
        cluster=cluster,
        pods=await _cluster_pods(cache, obj),
        jobs=tuple(j for j in jobs if objects.is_controlled_by(j, obj)),
    )


async def after(obj: Obj, cluster: v1.RayCluster, *, cache: cache_.Cache) -> snapshot_.After:
    """The cluster's pods and head service, read again after the pass's writes."""
    try:
        head_service: Obj | None = await cache.get(
            services.SERVICES, obj["metadata"]["namespace"], names.head_service_name_for(cluster)
        )
    except errors.NotFound:
        head_service = None
    return snapshot_.After(pods=await _cluster_pods(cache, obj), head_service=head_service)


def _validate(obj: Obj) -> tuple[v1.RayCluster | None, pydantic.ValidationError | None]:
    try:
        return v1.RayCluster.model_validate(obj), None
    except pydantic.ValidationError as exc:
        return None, exc


async def _cluster_pods(cache: cache_.Cache, obj: Obj) -> tuple[Obj, ...]:
    """The cluster's head and worker pods (not its clean-up Job's)."""
    meta = obj["metadata"]
    found = await cache.list(
        pods.PODS, meta["namespace"], label_selector=pods.selector(meta["name"])
    )
    return tuple(p for p in found if pods.node_type_of(p) != pods.REDIS_CLEANUP)
