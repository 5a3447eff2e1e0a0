"""KubeRay's ``kuberay_*`` metrics for RayClusters, RayServices and RayJobs, on the manager's
``/metrics``.

The same families as KubeRay v1.7.0 (``ray-operator/controllers/ray/metrics``): names,
types, label names and lifecycles, so that its operator dashboard
(``config/grafana/KubeRay-Operator.json``) works unchanged. All are gauges.

Computed at scrape time, value ``1``, one series per object the manager's cache holds
(including objects being deleted):

- ``kuberay_cluster_info{name,namespace,uid,owner_kind}``: ``owner_kind`` is the
  RayCluster's ``ray.io/originated-from-crd`` label (``RayService`` on the clusters
  a RayService makes), ``"None"`` (the string) without one;
- ``kuberay_cluster_condition_provisioned{name,namespace,uid,condition}``;
- ``kuberay_service_info{name,namespace,uid}``;
- ``kuberay_service_condition_ready{name,namespace,uid,condition}``;
- ``kuberay_service_condition_upgrade_in_progress{name,namespace,uid,condition}``;
- ``kuberay_job_info{name,namespace,uid}``;
- ``kuberay_job_deployment_status{name,namespace,uid,deployment_status}``: the RayJob's
  ``status.jobDeploymentStatus`` (the empty string before its first pass).

``condition`` is ``"true"`` when the object's condition (``RayClusterProvisioned``,
``Ready``, ``UpgradeInProgress``) has status ``True``, else ``"false"`` (also when the
condition is missing). A deleted object's series are gone from the next scrape: there
is no state to clean up. Nothing is reported for a kind until its informer has synced
(a half-listed cache would undercount), nor from a cache that was stopped.

Event-driven:

- ``kuberay_cluster_provisioned_duration_seconds{name,namespace,uid}``: set by
  :meth:`ProvisionedDurations.status_written` when the RayCluster reconciler has just
  written a status whose ``RayClusterProvisioned`` is ``True`` over one where it was
  not (seconds from ``metadata.creationTimestamp`` to then); removed, for every uid of
  that name, by :meth:`ProvisionedDurations.forget` when a reconcile finds the
  RayCluster gone. As in KubeRay, the value lives in memory: a restarted operator
  reports only the clusters provisioned since.
- ``kuberay_job_execution_duration_seconds{name,namespace,uid,job_deployment_status,
  retry_count}``: set by :meth:`JobDurations.job_passed` when a RayJob pass moved the job
  from a running state to ``Complete``, ``Failed`` or ``Retrying`` (seconds from the
  attempt's ``status.startTime``; ``retry_count`` is ``status.failed`` before that pass);
  removed, for every uid of that name, when a reconcile finds the RayJob gone.

**Registration.** :func:`enable` registers these families in
:data:`runtime.metrics.registry` - only then: without it no ``kuberay_*`` family
exists (``controllers.setup.setup(..., enable_metrics=True)`` calls it; KubeRay's
``--enable-metrics``). The registry is the process's, so the families are registered
once per process; a second :func:`enable` (a second manager in the same process,
tests) adds that manager's cache as another source and returns the same
:class:`Collector`. A scrape reports the union of the live caches, each object once
(by kind and uid); a cache whose informers were stopped, or that was garbage
collected, drops out. Every manager's RayCluster reconciler reports into the one
:class:`ProvisionedDurations`.

**Threads.** The manager serves ``/metrics`` on its event loop, so a scrape never
runs while a store changes. A scrape from another thread (``prometheus_client``'s
own server) is safe too: each store is read with one ``list()`` of its items
(atomic under the GIL) and cached objects are never changed in place (they are
read-only, :mod:`runtime.cache.cache`); the durations are copied the same way.
No scrape makes an API call.

>>> durations = ProvisionedDurations(now=lambda: 1767225610.5)  # 2026-01-01T00:00:10.5Z
>>> cluster = {"metadata": {"name": "demo", "namespace": "ns", "uid": "u1",
...            "creationTimestamp": "2026-01-01T00:00:00Z"}, "status": {}}
>>> provisioned = {"conditions": [{"type": "RayClusterProvisioned", "status": "True"}]}
>>> durations.status_written(cluster, provisioned)
True
>>> [(s.labels, s.value) for s in durations.family().samples]
[({'name': 'demo', 'namespace': 'ns', 'uid': 'u1'}, 10.5)]
>>> durations.forget("ns", "demo")
1
"""

from __future__ import annotations

import datetime
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import metrics_core as core
from prometheus_client import registry as registry_

import api.v1 as v1
from api.v1 import raycluster as raycluster_api
from api.v1 import rayservice as rayservice_api
from controllers.raycluster import interface as raycluster_interface
from runtime import clock, conditions, metrics
from runtime.cache import informer as informer_

__all__ = [
    "CLUSTER_CONDITION_PROVISIONED",
    "CLUSTER_INFO",
    "CLUSTER_PROVISIONED_DURATION",
    "JOB_DEPLOYMENT_STATUS",
    "JOB_EXECUTION_DURATION",
    "JOB_INFO",
    "NAMES",
    "SERVICE_CONDITION_READY",
    "SERVICE_CONDITION_UPGRADE_IN_PROGRESS",
    "SERVICE_INFO",
    "Collector",
    "JobDurations",
    "ProvisionedDurations",
    "enable",
]

Obj = Mapping[str, Any]

CLUSTER_INFO = "kuberay_cluster_info"
CLUSTER_CONDITION_PROVISIONED = "kuberay_cluster_condition_provisioned"
CLUSTER_PROVISIONED_DURATION = "kuberay_cluster_provisioned_duration_seconds"
SERVICE_INFO = "kuberay_service_info"
SERVICE_CONDITION_READY = "kuberay_service_condition_ready"
SERVICE_CONDITION_UPGRADE_IN_PROGRESS = "kuberay_service_condition_upgrade_in_progress"
JOB_INFO = "kuberay_job_info"
JOB_DEPLOYMENT_STATUS = "kuberay_job_deployment_status"
JOB_EXECUTION_DURATION = "kuberay_job_execution_duration_seconds"
NAMES = (
    CLUSTER_INFO,
    CLUSTER_CONDITION_PROVISIONED,
    CLUSTER_PROVISIONED_DURATION,
    SERVICE_INFO,
    SERVICE_CONDITION_READY,
    SERVICE_CONDITION_UPGRADE_IN_PROGRESS,
    JOB_INFO,
    JOB_DEPLOYMENT_STATUS,
    JOB_EXECUTION_DURATION,
)
"""Every family :func:`enable` registers."""

_NO_OWNER = "None"
"""``owner_kind`` of a RayCluster without the originated-from-crd label (KubeRay's value)."""

_IDENTITY = ("name", "namespace", "uid")
_HELP = {
    CLUSTER_INFO: "Metadata information about RayCluster custom resources",
    CLUSTER_CONDITION_PROVISIONED: "Whether the RayCluster's RayClusterProvisioned "
    "condition is True",
    CLUSTER_PROVISIONED_DURATION: "Seconds from a RayCluster's creation to its "
    "RayClusterProvisioned condition turning True",
    SERVICE_INFO: "Metadata information about RayService custom resources",
    SERVICE_CONDITION_READY: "Whether the RayService's Ready condition is True",
    SERVICE_CONDITION_UPGRADE_IN_PROGRESS: "Whether the RayService's UpgradeInProgress "
    "condition is True (a new cluster is being brought up to replace the serving one)",
    JOB_INFO: "Metadata information about RayJob custom resources",
    JOB_DEPLOYMENT_STATUS: "The RayJob's current deployment status",
    JOB_EXECUTION_DURATION: "Duration of a RayJob attempt from its start to Complete, "
    "Failed or Retrying",
}
_LABELS = {
    CLUSTER_INFO: (*_IDENTITY, "owner_kind"),
    CLUSTER_CONDITION_PROVISIONED: (*_IDENTITY, "condition"),
    CLUSTER_PROVISIONED_DURATION: _IDENTITY,
    SERVICE_INFO: _IDENTITY,
    SERVICE_CONDITION_READY: (*_IDENTITY, "condition"),
    SERVICE_CONDITION_UPGRADE_IN_PROGRESS: (*_IDENTITY, "condition"),
    JOB_INFO: _IDENTITY,
    JOB_DEPLOYMENT_STATUS: (*_IDENTITY, "deployment_status"),
    JOB_EXECUTION_DURATION: (*_IDENTITY, "job_deployment_status", "retry_count"),
}


def _gauge(name: str) -> core.GaugeMetricFamily:
    return core.GaugeMetricFamily(name, _HELP[name], labels=_LABELS[name])


def _identity(obj: Obj) -> list[str]:
    meta = obj["metadata"]
    return [str(meta.get("name", "")), str(meta.get("namespace", "")), str(meta.get("uid", ""))]


class ProvisionedDurations:
    """``kuberay_cluster_provisioned_duration_seconds`` (see the module docstring).

    ``now``: the wall clock in Unix seconds, default :func:`time.time`. Update from the
    event loop only; :meth:`family` may be called from any thread."""

    def __init__(self, *, now: Callable[[], float] = time.time) -> None:
        self._now = now
        self._values: dict[tuple[str, str, str], float] = {}

    def status_written(self, before: Obj, status: Obj) -> bool:
        """The reconciler wrote ``status`` over ``before`` (the RayCluster as the pass read
        it): set the series when ``RayClusterProvisioned`` turned ``True``. Returns whether
        it did."""
        provisioned = raycluster_api.ConditionType.PROVISIONED
        if conditions.is_true(before, provisioned) or not conditions.is_true(
            {"status": status}, provisioned
        ):
            return False
        created = clock.parse_rfc3339(before["metadata"].get("creationTimestamp"))
        if created is None:
            return False
        name, namespace, uid = _identity(before)
        self._values[(name, namespace, uid)] = self._now() - created.timestamp()
        return True

    def forget(self, namespace: str, name: str) -> int:
        """Drop the series of every uid of RayCluster ``namespace/name``; how many there were."""
        gone = [key for key in self._values if key[0] == name and key[1] == namespace]
        for key in gone:
            del self._values[key]
        return len(gone)

    def family(self) -> core.GaugeMetricFamily:
        family = _gauge(CLUSTER_PROVISIONED_DURATION)
        for labels, value in list(self._values.items()):
            family.add_metric(list(labels), value)
        return family


_ENDS = frozenset({"Complete", "Failed", "Retrying"})
"""States whose entry sets ``kuberay_job_execution_duration_seconds``."""


class JobDurations:
    """``kuberay_job_execution_duration_seconds`` (see the module docstring); the RayJob
    reconciler's :class:`controllers.rayjob.reconciler.MetricsObserver`. Update from the
    event loop only; :meth:`family` may be called from any thread."""

    def __init__(self) -> None:
        self._values: dict[tuple[str, str, str, str, str], float] = {}

    def job_passed(self, before: Obj, state: str, now: datetime.datetime) -> bool:
        """A pass over ``before`` (the RayJob as read) ended in ``state``: set the series
        when it moved a running job to an end. Returns whether it did."""
        status = before.get("status") or {}
        previous = str(status.get("jobDeploymentStatus") or "")
        if state not in _ENDS or previous in _ENDS:
            return False
        started = clock.parse_rfc3339(status.get("startTime"))
        if started is None:
            return False
        name, namespace, uid = _identity(before)
        retries = str(int(status.get("failed") or 0))
        self._values[(name, namespace, uid, state, retries)] = (now - started).total_seconds()
        return True

    def job_forgotten(self, namespace: str, name: str) -> int:
        """Drop the series of every uid of RayJob ``namespace/name``; how many there were."""
        gone = [key for key in self._values if key[0] == name and key[1] == namespace]
        for key in gone:
            del self._values[key]
        return len(gone)

    def family(self) -> core.GaugeMetricFamily:
        family = _gauge(JOB_EXECUTION_DURATION)
        for labels, value in list(self._values.items()):
            family.add_metric(list(labels), value)
        return family


class Collector(registry_.Collector):
    """Every ``kuberay_*`` family (see the module docstring); :func:`enable` registers one
    per process. Tests may build their own and call :meth:`collect`."""

    def __init__(
        self,
        durations: ProvisionedDurations | None = None,
        job_durations: JobDurations | None = None,
    ) -> None:
        self.durations = durations or ProvisionedDurations()
        self.job_durations = job_durations or JobDurations()
        self._sources: list[tuple[weakref.ref[informer_.SharedInformer], ...]] = []

    def add_source(
        self,
        clusters: informer_.SharedInformer,
        services: informer_.SharedInformer,
        jobs: informer_.SharedInformer | None = None,
    ) -> None:
        """Report the RayClusters of ``clusters``, the RayServices of ``services`` and the
        RayJobs of ``jobs`` (a cache's informers; held weakly). Call on the event loop,
        before scrapes need it."""
        refs: tuple[weakref.ref[informer_.SharedInformer], ...] = (
            weakref.ref(clusters),
            weakref.ref(services),
        )
        if jobs is not None:
            refs = (*refs, weakref.ref(jobs))
        self._sources = [
            *(s for s in self._sources if all(ref() is not None for ref in s)),
            refs,
        ]

    def _objects(self, position: int) -> Iterator[Obj]:
        """Each object once (by uid) across the live, synced informers at ``position``."""
        seen: set[str] = set()
        for refs in list(self._sources):
            if position >= len(refs):
                continue
            informer = refs[position]()
            if informer is None or not informer.started or not informer.has_synced():
                continue
            for obj in informer.store.list():
                uid = str(obj["metadata"].get("uid", ""))
                if uid not in seen:
                    seen.add(uid)
                    yield obj

    def describe(self) -> Iterable[core.Metric]:
        return [_gauge(name) for name in NAMES]

    def collect(self) -> Iterable[core.Metric]:
        info = _gauge(CLUSTER_INFO)
        provisioned = _gauge(CLUSTER_CONDITION_PROVISIONED)
        for cluster in self._objects(0):
            labels = cluster["metadata"].get("labels") or {}
            owner = labels.get(raycluster_interface.ORIGINATED_FROM_CRD_LABEL, _NO_OWNER)
            info.add_metric([*_identity(cluster), str(owner)], 1)
            condition = conditions.is_true(cluster, raycluster_api.ConditionType.PROVISIONED)
            provisioned.add_metric([*_identity(cluster), _bool(condition)], 1)
        service_info = _gauge(SERVICE_INFO)
        ready = _gauge(SERVICE_CONDITION_READY)
        upgrading = _gauge(SERVICE_CONDITION_UPGRADE_IN_PROGRESS)
        types = rayservice_api.ConditionType
        for service in self._objects(1):
            identity = _identity(service)
            service_info.add_metric(identity, 1)
            ready.add_metric([*identity, _bool(conditions.is_true(service, types.READY))], 1)
            in_progress = conditions.is_true(service, types.UPGRADE_IN_PROGRESS)
            upgrading.add_metric([*identity, _bool(in_progress)], 1)
        job_info = _gauge(JOB_INFO)
        deployment = _gauge(JOB_DEPLOYMENT_STATUS)
        for job in self._objects(2):
            identity = _identity(job)
            job_info.add_metric(identity, 1)
            state = str((job.get("status") or {}).get("jobDeploymentStatus") or "")
            deployment.add_metric([*identity, state], 1)
        families = [
            info,
            provisioned,
            self.durations.family(),
            service_info,
            ready,
            upgrading,
            job_info,
            deployment,
            self.job_durations.family(),
        ]
        return [f for f in families if f.samples]  # as client_golang: no series, no family


def _bool(value: bool) -> str:
    """Go's ``strconv.FormatBool``."""
    return "true" if value else "false"


_collector: Collector | None = None


def enable(manager: Any) -> Collector:
    """Register the ``kuberay_*`` families (once per process) and report ``manager``'s
    cached RayClusters, RayServices and RayJobs in them; returns the process's
    :class:`Collector`.
    Call on the manager's event loop thread (or before it runs)."""
    global _collector
    if _collector is None:
        _collector = Collector()
        metrics.registry.register(_collector)
    v1.add_to_registry(manager.client.registry)
    _collector.add_source(
        manager.cache.informer(v1.RAYCLUSTERS),
        manager.cache.informer(v1.RAYSERVICES),
        manager.cache.informer(v1.RAYJOBS),
    )
    return _collector
