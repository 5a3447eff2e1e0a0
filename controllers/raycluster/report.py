"""A RayCluster's status, computed in one pure function from what the cache shows.

:func:`compute` takes the cluster (its spec and its previous status), the
cluster's pods and head service as the cache has them, the failure of this
reconcile if any, and the time; it returns the whole new ``status`` in wire
form. It reads nothing else and remembers nothing, so the same inputs give the
same status, and the status writer (``runtime.status``) sends it only when it
means something new. What each field means, as KubeRay v1.5.0 defines it:

- ``desiredWorkerReplicas``: the sum of
  :func:`controllers.raycluster.pods.desired_workers` over the groups; ``min``/``maxWorkerReplicas``
  sum the bounds of the groups that are not suspended.
- ``readyWorkerReplicas``: worker pods Running with ``Ready=True``;
  ``availableWorkerReplicas``: worker pods Running. Pods being deleted count
  for neither.
- ``desiredCPU``/``Memory``/``GPU``/``TPU``: the head's and each replica's
  container resources (requests, else limits) summed, ``replicas`` as written
  (not clamped, as KubeRay); GPU sums every resource whose name ends in ``gpu``.
  Always present (``"0"`` when nothing asks for any).
- ``state``: ``ready`` when the head and every desired worker are Running and
  Ready and nothing failed in this reconcile; ``suspended`` once a suspended
  cluster has no pods; unset otherwise. Unlike KubeRay (whose ``ready`` never
  goes away) the state says what is true now; ``stateTransitionTimes`` records
  when each state was last entered.
- Conditions (``metav1.Condition`` rules: ``lastTransitionTime`` moves only when
  ``status`` does):

  - ``HeadPodReady``: the head pod's ``Ready`` condition (reason
    ``HeadPodRunningAndReady`` when ready without one), ``False``/``HeadPodNotFound``
    without a head pod;
  - ``RayClusterProvisioned``: ``False``/``RayClusterPodsProvisioning`` until every
    pod was Running and Ready once, then ``True``/``AllPodRunningAndReadyFirstTime``
    for good - except that suspending makes it ``False`` again;
  - ``ReplicaFailure``: ``True`` with the failure's reason (``FailedCreateHeadPod``,
    ``FailedCreateWorkerPod``, ``FailedDeleteHeadPod``, ``FailedDeleteWorkerPod``,
    ``FailedDeleteAllPods``, or a validation reason) and the server's message
    while pods cannot be created or deleted; absent otherwise;
  - ``RayClusterSuspending`` / ``RayClusterSuspended``: never both ``True``; a
    suspend runs to its end once started (``Suspending`` until the last pod is
    gone, then ``Suspended``), and ``Suspended`` turns ``False`` when
    ``spec.suspend`` does.

- ``head``: the head pod's name and IP, the head service's name and its
  ClusterIP (the head pod's IP when the service is headless); ``endpoints``:
  the head service's ports by name (target port, or node port when it has one).
- ``observedGeneration``: the generation this status was computed for.
  ``lastUpdateTime`` is stamped by the status writer on each real write.

>>> import api.v1 as v1
>>> cluster = v1.RayCluster.model_validate({
...     "metadata": {"name": "demo", "generation": 1},
...     "spec": {"headGroupSpec": {"template": {"spec": {"containers": [
...         {"name": "ray-head", "resources": {"limits": {"cpu": "1", "memory": "2Gi"}}}]}}}},
... })
>>> s = compute(cluster, [], None, now="2026-01-01T00:00:00Z")
>>> s["desiredCPU"], s["desiredMemory"], s.get("state"), s["observedGeneration"]
('1', '2Gi', None, 1)
>>> [(c["type"], c["reason"]) for c in s["conditions"]][:2]
[('HeadPodReady', 'HeadPodNotFound'), ('RayClusterProvisioned', 'RayClusterPodsProvisioning')]
"""

from __future__ import annotations

import dataclasses
import fractions
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from api.v1 import meta
from api.v1 import raycluster as raycluster_
from controllers.raycluster import pods as pods_
from runtime import conditions, quantity

__all__ = [
    "Failure",
    "compute",
    "format_quantity",
    "is_running_and_ready",
    "suspend_phase",
]

Obj = dict[str, Any]
_TYPES = raycluster_.ConditionType


@dataclasses.dataclass(frozen=True, slots=True)
class Failure:
    """Why this reconcile could not create or delete the pods it had to."""

    reason: str
    """CamelCase, e.g. ``FailedCreateWorkerPod``."""
    message: str


def is_running_and_ready(pod: Mapping[str, Any]) -> bool:
    """Whether ``pod`` is Running with a ``Ready=True`` condition."""
    pod_status = pod.get("status") or {}
    if pod_status.get("phase") != "Running":
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in pod_status.get("conditions") or ()
    )


def _all_running(pods: Sequence[Mapping[str, Any]]) -> bool:
    """KubeRay's check: some pods, every one Running and none with ``Ready`` not True."""
    if not pods:
        return False
    for pod in pods:
        pod_status = pod.get("status") or {}
        if pod_status.get("phase") != "Running":
            return False
        for c in pod_status.get("conditions") or ():
            if c.get("type") == "Ready" and c.get("status") != "True":
                return False
    return True


def suspend_phase(cluster: raycluster_.RayCluster) -> str | None:
    """``RayClusterSuspending`` or ``RayClusterSuspended`` if that condition is True, else None."""
    for c in cluster.status.conditions:
        if c.type in (_TYPES.SUSPENDING, _TYPES.SUSPENDED) and c.status == "True":
            return c.type
    return None


def format_quantity(value: fractions.Fraction, *, binary: bool) -> str:
    """A quantity in Kubernetes' canonical spelling.

    Binary-SI amounts (``binary=True``) that are whole multiples of 1024 take the
    largest suffix that divides them; everything else takes the largest decimal
    SI suffix (``m``, ``k``, ``M``...) that leaves a whole number.

    >>> format_quantity(fractions.Fraction(3 * 2**30), binary=True)
    '3Gi'
    >>> [format_quantity(fractions.Fraction(v), binary=False) for v in (0, 2, 1500, 2000)]
    ['0', '2', '1500', '2k']
    >>> format_quantity(fractions.Fraction(3, 2), binary=False)
    '1500m'
    """
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    if binary and magnitude.denominator == 1:
        for power, suffix in (
            (60, "Ei"),
            (50, "Pi"),
            (40, "Ti"),
            (30, "Gi"),
            (20, "Mi"),
            (10, "Ki"),
        ):
            if magnitude.numerator % (1 << power) == 0:
                return f"{sign}{magnitude.numerator >> power}{suffix}"
    for exponent, suffix in ((18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k"),
                             (0, ""), (-3, "m"), (-6, "u"), (-9, "n")):  # fmt: skip
        scaled = magnitude / fractions.Fraction(10) ** exponent
        if scaled.denominator == 1:
            return f"{sign}{scaled.numerator}{suffix}"
    return f"{sign}{magnitude.numerator * 10**9 // magnitude.denominator}n"  # below 1n: rounded


_BINARY_SUFFIXES = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


class _Sum:
    """Quantities summed per resource name, spelt in the format of the first one added."""

    def __init__(self) -> None:
        self.values: dict[str, fractions.Fraction] = {}
        self.binary: dict[str, bool] = {}

    def add(self, resources: Mapping[str, Any], times: int = 1) -> None:
        for name, raw in resources.items():
            parsed = quantity.parse_or_none(raw)
            if parsed is None:
                continue
            if name not in self.values:
                self.values[name] = fractions.Fraction(0)
                self.binary[name] = isinstance(raw, str) and raw.endswith(_BINARY_SUFFIXES)
            self.values[name] += parsed.value * times

    def text(self, names: Iterable[str]) -> str:
        total = fractions.Fraction(0)
        binary = False
        first = True
        for name in names:
            if name in self.values:
                total += self.values[name]
                if first:
                    binary, first = self.binary[name], False
        return format_quantity(total, binary=binary)


def _desired_resources(cluster: raycluster_.RayCluster) -> dict[str, str]:
    total = _Sum()

    def add(template: Mapping[str, Any], times: int) -> None:
        """Each container's requests, with limits where no request is set, ``times`` over."""
        for container in (template.get("spec") or {}).get("containers") or ():
            resources = container.get("resources") or {}
            total.add(
                {**(resources.get("limits") or {}), **(resources.get("requests") or {})}, times
            )

    add(cluster.spec.head_group_spec.template, 1)
    for group in cluster.spec.worker_group_specs or ():
        if not group.suspend:
            add(group.template, group.replicas * group.num_of_hosts)
    gpus = sorted(name for name in total.values if name.endswith("gpu"))
    return {
        "desiredCPU": total.text(["cpu"]),
        "desiredMemory": total.text(["memory"]),
        "desiredGPU": total.text(gpus),
        "desiredTPU": total.text(["google.com/tpu"]),
    }


def _head_ready_condition(head: Mapping[str, Any] | None) -> tuple[meta.ConditionStatus, str, str]:
    if head is None:
        return "False", "HeadPodNotFound", "Head Pod not found"
    for c in (head.get("status") or {}).get("conditions") or ():
        if c.get("type") != "Ready":
            continue
        status: meta.ConditionStatus = (
            c.get("status") if c.get("status") in ("True", "False") else "Unknown"
        )
        reason = c.get("reason") or ("HeadPodRunningAndReady" if status == "True" else "Unknown")
        return status, reason, c.get("message") or ""
    return "False", "Unknown", ""


def _endpoints(service: Mapping[str, Any] | None) -> dict[str, str] | None:
    if service is None:
        return None
    found: dict[str, str] = {}
    for port in (service.get("spec") or {}).get("ports") or ():
        name = port.get("name")
        if not name:
            continue
        target = port.get("targetPort")
        if port.get("nodePort"):
            found[name] = str(port["nodePort"])
        elif target not in (None, 0, ""):
            found[name] = str(target)
        elif port.get("port"):
            found[name] = str(port["port"])  # the server defaults targetPort to port
    return found


def compute(
    cluster: raycluster_.RayCluster,
    pods: Sequence[Mapping[str, Any]],
    head_service: Mapping[str, Any] | None,
    *,
    failure: Failure | None = None,
    now: str,
) -> Obj:
    """The cluster's new status (see the module docstring).

    ``pods``: every pod of the cluster in the cache, terminating ones included
    (they count for nothing, but a suspend is complete only when none is left).
    """
    remaining = len(pods)
    pods = [p for p in pods if not p.get("metadata", {}).get("deletionTimestamp")]
    heads = [p for p in pods if _node_type(p) == "head"]
    head = heads[0] if len(heads) == 1 else None
    new = _counts(cluster, pods)
    conditions, suspended = _conditions(cluster, pods, head, remaining, failure, now)
    new["conditions"] = conditions
    all_running = (
        failure is None and len(pods) == new["desiredWorkerReplicas"] + 1 and _all_running(pods)
    )
    new.update(_state(cluster, suspended=suspended, all_running=all_running, now=now))
    endpoints = _endpoints(head_service)
    if endpoints:
        new["endpoints"] = endpoints
    head_info = _head_info(head, head_service)
    if head_info:
        new["head"] = head_info
    return new


def _node_type(pod: Mapping[str, Any]) -> object:
    return (pod.get("metadata", {}).get("labels") or {}).get("ray.io/node-type")


def _counts(cluster: raycluster_.RayCluster, pods: Sequence[Mapping[str, Any]]) -> Obj:
    """The worker counts, the desired resources and ``observedGeneration``."""
    groups = cluster.spec.worker_group_specs or []
    workers = [p for p in pods if _node_type(p) == "worker"]
    return {
        "readyWorkerReplicas": sum(1 for p in workers if is_running_and_ready(p)),
        "availableWorkerReplicas": sum(
            1 for p in workers if (p.get("status") or {}).get("phase") == "Running"
        ),
        "desiredWorkerReplicas": sum(pods_.desired_workers(g) for g in groups),
        "minWorkerReplicas": sum(g.min_replicas * g.num_of_hosts for g in groups if not g.suspend),
        "maxWorkerReplicas": sum(g.max_replicas * g.num_of_hosts for g in groups if not g.suspend),
        **_desired_resources(cluster),
        "observedGeneration": _generation(cluster),
    }


def _generation(cluster: raycluster_.RayCluster) -> int:
    return int(cluster.metadata.get("generation") or 0)


_ORDER = (_TYPES.HEAD_POD_READY, _TYPES.PROVISIONED, _TYPES.REPLICA_FAILURE,
          _TYPES.SUSPENDING, _TYPES.SUSPENDED)  # fmt: skip
"""The order of the conditions in the status."""


def _conditions(
    cluster: raycluster_.RayCluster,
    pods: Sequence[Mapping[str, Any]],
    head: Mapping[str, Any] | None,
    remaining: int,
    failure: Failure | None,
    now: str,
) -> tuple[list[Obj], bool]:
    """The conditions (by :mod:`runtime.conditions`' ``lastTransitionTime`` rule), and
    whether the cluster is suspended (it has no pod left, terminating ones included)."""
    previous = {c.type: c.to_api() for c in cluster.status.conditions}
    made: dict[str, Obj] = {}

    def set_(type_: str, status: str, reason: str, message: str = "") -> None:
        made[type_] = conditions.make(
            type_, status, reason, message,
            generation=_generation(cluster), now=now, previous=previous.get(type_),
        )  # fmt: skip

    set_(_TYPES.HEAD_POD_READY, *_head_ready_condition(head))
    phase = suspend_phase(cluster)
    provisioned = previous.get(_TYPES.PROVISIONED)
    if phase == _TYPES.SUSPENDED or (provisioned is not None and provisioned["status"] == "True"):
        if provisioned is not None:
            made[_TYPES.PROVISIONED] = provisioned  # kept as it is
    elif _all_running(pods):
        set_(_TYPES.PROVISIONED, "True", "AllPodRunningAndReadyFirstTime",
             "All Ray Pods are ready for the first time")  # fmt: skip
    else:
        set_(_TYPES.PROVISIONED, "False", "RayClusterPodsProvisioning",
             "RayCluster Pods are being provisioned for first time")  # fmt: skip
    if failure is not None:
        set_(_TYPES.REPLICA_FAILURE, "True", failure.reason, failure.message)
    suspended = _suspend_conditions(cluster, phase, remaining, set_)
    return [made[t] for t in _ORDER if t in made], suspended


def _suspend_conditions(
    cluster: raycluster_.RayCluster,
    phase: str | None,
    remaining: int,
    set_: Callable[..., None],
) -> bool:
    """``RayClusterSuspending`` and ``RayClusterSuspended`` (and ``RayClusterProvisioned``
    when a suspend completes) through ``set_``; whether the cluster is suspended."""
    suspend = cluster.spec.suspend
    if phase == _TYPES.SUSPENDING or (phase is None and suspend):
        if not remaining:
            set_(_TYPES.PROVISIONED, "False", "RayClusterPodsProvisioning",
                 "RayCluster has been suspended")  # fmt: skip
            set_(_TYPES.SUSPENDING, "False", _TYPES.SUSPENDING)
            set_(_TYPES.SUSPENDED, "True", _TYPES.SUSPENDED)
            return True
        set_(_TYPES.SUSPENDING, "True", _TYPES.SUSPENDING)
        set_(_TYPES.SUSPENDED, "False", _TYPES.SUSPENDED)
        return False
    set_(_TYPES.SUSPENDING, "False", _TYPES.SUSPENDING)
    if phase == _TYPES.SUSPENDED and suspend:
        set_(_TYPES.SUSPENDED, "True", _TYPES.SUSPENDED)
        return not remaining
    set_(_TYPES.SUSPENDED, "False", _TYPES.SUSPENDED)
    return False


def _state(cluster: raycluster_.RayCluster, *, suspended: bool, all_running: bool, now: str) -> Obj:
    """``state`` and ``stateTransitionTimes``."""
    old = cluster.status
    found: Obj = {}
    if suspended:
        found["state"] = raycluster_.ClusterState.SUSPENDED.value
    elif all_running:
        found["state"] = raycluster_.ClusterState.READY.value
    times = dict(old.state_transition_times or {})
    if found.get("state") and found["state"] != old.state:
        times[found["state"]] = now
    if times:
        found["stateTransitionTimes"] = times
    return found


def _head_info(head: Mapping[str, Any] | None, head_service: Mapping[str, Any] | None) -> Obj:
    """``head``: the head pod's name and IP, the head service's name and IP."""
    head_info: dict[str, str] = {}
    if head is not None:
        head_info["podName"] = head["metadata"]["name"]
        if (head.get("status") or {}).get("podIP"):
            head_info["podIP"] = head["status"]["podIP"]
    if head_service is not None:
        head_info["serviceName"] = head_service["metadata"]["name"]
        cluster_ip = (head_service.get("spec") or {}).get("clusterIP")
        if cluster_ip == "None":
            if head_info.get("podIP"):
                head_info["serviceIP"] = head_info["podIP"]
        elif cluster_ip:
            head_info["serviceIP"] = cluster_ip
    return head_info
