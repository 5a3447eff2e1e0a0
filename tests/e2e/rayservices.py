"""Reading and changing a RayService the way the e2e scenarios check one (shared by
``test_rayservice.py`` and ``test_realray.py``): its conditions, applications and active
cluster from the status; waiting until it is Ready; a spec change retried on conflicts;
the RayClusters of a namespace, and :class:`ClusterCount`, the most that existed at once
while a scenario ran."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from runtime.client import client as client_
from runtime.client import errors
from tests.e2e import harness, realpods

__all__ = [
    "ClusterCount",
    "active_cluster",
    "apps",
    "bump_ray_version",
    "cluster_names",
    "condition",
    "get",
    "update_spec",
    "wait_ready",
]

Obj = dict[str, Any]


def condition(obj: Obj, type_: str) -> Obj:
    """The condition of that type, or ``{}``."""
    found = [c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_]
    return found[0] if found else {}


def apps(obj: Obj, which: str = "activeServiceStatus") -> dict[str, str]:
    """``{application: status}`` of the active (or ``which``) cluster."""
    statuses = ((obj.get("status") or {}).get(which) or {}).get("applicationStatuses") or {}
    return {name: s.get("status", "") for name, s in statuses.items()}


def active_cluster(obj: Obj) -> str | None:
    name: str | None = ((obj.get("status") or {}).get("activeServiceStatus") or {}).get(
        "rayClusterName"
    )
    return name


async def get(api: client_.Client, namespace: str, name: str) -> Obj:
    return await api.get(harness.RAYSERVICES, namespace, name)


async def wait_ready(
    api: client_.Client,
    namespace: str,
    name: str,
    *,
    within: float = 120,
    cluster_not: str | None = None,
) -> Obj:
    """Until Ready with every application (at least one) ``RUNNING`` on the active
    cluster, no upgrade in progress, and that cluster not ``cluster_not``."""

    async def ready() -> Obj | None:
        obj = await get(api, namespace, name)
        running = apps(obj)
        ok = (
            condition(obj, "Ready").get("status") == "True"
            and bool(running)
            and all(s == "RUNNING" for s in running.values())
            and condition(obj, "UpgradeInProgress").get("status", "False") == "False"
            and active_cluster(obj) not in (None, cluster_not)
        )
        return obj if ok else None

    result: Obj = await harness.until(ready, within, f"RayService {namespace}/{name} Ready")
    return result


async def update_spec(
    api: client_.Client, namespace: str, name: str, change: Callable[[Obj], object]
) -> Obj:
    """Apply ``change(obj)`` to the latest RayService and write it (retrying conflicts)."""
    while True:
        obj = await get(api, namespace, name)
        change(obj)
        try:
            return await api.update(obj)
        except errors.Conflict:
            continue


def bump_ray_version(obj: Obj) -> None:
    """A ``rayVersion`` (and image) change: a new RayCluster, a zero-downtime upgrade.
    Where a real kubelet runs the pods (:mod:`tests.e2e.realpods`) only the Ray image the
    cluster has can run: there the change is :func:`tests.e2e.realpods.new_revision`, as
    much a new RayCluster."""
    if realpods.enabled():
        realpods.new_revision(obj)
        return
    config = obj["spec"]["rayClusterConfig"]
    config["rayVersion"] = "2.61.0"
    for template in [config["headGroupSpec"]["template"]] + [
        g["template"] for g in config.get("workerGroupSpecs") or []
    ]:
        for container in template["spec"]["containers"]:
            container["image"] = "rayproject/ray:2.61.0"


async def cluster_names(api: client_.Client, namespace: str) -> set[str]:
    listed = await api.list(harness.RAYCLUSTERS, namespace)
    return {c["metadata"]["name"] for c in listed.items}


class ClusterCount:
    """The most RayClusters that existed at once in a namespace while it ran (polled)."""

    def __init__(self, api: client_.Client, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.most = 0
        self.seen: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    async def _poll(self) -> None:
        while True:
            names = await cluster_names(self.api, self.namespace)
            self.seen |= names
            self.most = max(self.most, len(names))
            await asyncio.sleep(0.2)

    async def __aenter__(self) -> ClusterCount:
        self._task = asyncio.create_task(self._poll())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
