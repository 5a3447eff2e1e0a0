"""The RayClusters a RayService owns: their names, their hashes, and what they should look like.

A RayService runs its Serve applications on a RayCluster built from
``spec.rayClusterConfig``; a change of that config is rolled out on a *new*
cluster (zero-downtime upgrade), except when worker groups were only appended
(then the cluster is updated in place, as KubeRay v1.5.0 does). Everything here is
pure: objects are raw API dicts (camelCase), arguments are never modified, and
what is returned is the caller's own copy.

- :func:`spec_hash` identifies a cluster config while ignoring what must not
  make a new cluster (KubeRay v1.7.0's ``rayClusterSpecForHashing`` and
  ``GenerateHashWithoutReplicasAndWorkersToDelete``): what the Ray autoscaler
  writes (every worker group's ``replicas``, ``minReplicas``, ``maxReplicas`` and
  ``scaleStrategy.workersToDelete``), what Kueue and other queueing controllers
  write (``tolerations`` and ``schedulingGates`` of the head's and every worker
  group's pod template, and ``suspend``: it is copied to a cluster when the cluster
  is created and never again, so Kueue suspending the config changes no cluster),
  and the RayCluster's own ``upgradeStrategy``. For a config that sets none of
  these the value is the one earlier versions of this operator wrote; a cluster
  carrying an earlier value for a config that does set them is still recognised
  (:func:`match`), so an operator upgrade starts no upgrade. It is compared under
  Kubernetes' semantic equality (:func:`runtime.equality.normalize`): ``null``,
  ``{}`` and ``[]`` count as absent and quantities compare by value (``cpu: 2``
  is ``cpu: "2"``), so the API server's rewrites of a spec never look like a
  change. The digest is KubeRay's shape (SHA-1, base32hex, 32 upper-case
  characters) but **not KubeRay's value**: KubeRay marshals its typed Go struct,
  whose field order and zero values no raw dict reproduces. :func:`match` therefore
  also compares the specs themselves, so a cluster KubeRay created (carrying
  KubeRay's hash) is recognised when its spec is the config.
- :func:`cluster_name`: ``<service>-<5 characters>`` derived from the hash, so the
  same config always gets the same name (a reconciler that crashed after creating
  the cluster finds it again instead of creating a second one).
- :func:`desired_cluster`: the RayCluster KubeRay v1.7.0 creates for a RayService
  (its labels and annotations plus the originated-from labels, the hash, the number
  of worker groups and the KubeRay version annotations; the RayService as
  controller owner).
- :func:`match` / :class:`Match`: does an existing cluster run this config
  (``EXACT``), an older one with worker groups appended since (``APPENDED``:
  update it in place with :func:`updated_in_place`), or something else (``NONE``).
- Our own bookkeeping, kept in annotations so that nothing lives only in memory:
  :data:`SERVE_CONFIG_ANNOTATION` (hash of the Serve config last PUT to the
  cluster, :func:`serve_config_hash`) and :data:`DELETE_AFTER_ANNOTATION` (RFC 3339
  UTC time after which an old cluster is deleted).

>>> config = {"rayVersion": "2.46.0", "headGroupSpec": {"template": {}},
...           "workerGroupSpecs": [{"groupName": "g", "replicas": 1, "template": {}}]}
>>> scaled = {**config, "workerGroupSpecs": [{"groupName": "g", "replicas": 7, "template": {}}]}
>>> spec_hash(config) == spec_hash(scaled), len(spec_hash(config))
(True, 32)
>>> service = {"apiVersion": "ray.io/v1", "kind": "RayService",
...            "metadata": {"name": "svc", "namespace": "ns", "uid": "u1"},
...            "spec": {"rayClusterConfig": config}}
>>> name = cluster_name("svc", spec_hash(config), {})
>>> cluster = desired_cluster(service, name)
>>> cluster["metadata"]["annotations"][NUM_WORKER_GROUPS_ANNOTATION], match(cluster, config)
('1', <Match.EXACT: 'exact'>)
>>> appended = {**config, "workerGroupSpecs": [*config["workerGroupSpecs"],
...                                            {"groupName": "h", "template": {}}]}
>>> match(cluster, appended), objects.is_controlled_by(cluster, service)
(<Match.APPENDED: 'appended'>, True)
"""

from __future__ import annotations

import base64
import collections
import copy
import enum
import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

from controllers.raycluster import interface as raycluster
from runtime import equality, objects, quantity

__all__ = [
    "DELETE_AFTER_ANNOTATION",
    "HASH_ANNOTATION",
    "KUBERAY_VERSION_ANNOTATION",
    "KUBERAY_VERSION_VALUE",
    "NUM_WORKER_GROUPS_ANNOTATION",
    "ORIGINATED_FROM_CRD",
    "ORIGINATED_FROM_CRD_LABEL",
    "ORIGINATED_FROM_NAME_LABEL",
    "SERVE_CONFIG_ANNOTATION",
    "Match",
    "cluster_name",
    "desired_cluster",
    "match",
    "owned_selector",
    "serve_config_hash",
    "spec_hash",
    "updated_in_place",
]

Obj = dict[str, Any]

HASH_ANNOTATION = "ray.io/hash-without-replicas-and-workers-to-delete"
"""On a RayService's cluster: :func:`spec_hash` of the config it was built from (KubeRay's key)."""
NUM_WORKER_GROUPS_ANNOTATION = "ray.io/num-worker-groups"
"""On a RayService's cluster: how many worker groups that config had (KubeRay's key)."""
KUBERAY_VERSION_ANNOTATION = "ray.io/kuberay-version"
"""On a RayService's cluster: the KubeRay release that made it (KubeRay's key); ours writes
:data:`KUBERAY_VERSION_VALUE`."""
KUBERAY_VERSION_VALUE = "rayservice-operator"
"""What this operator writes in :data:`KUBERAY_VERSION_ANNOTATION`: deliberately no KubeRay
release's version (KubeRay v1.7.0 writes ``v1.7.0``). A KubeRay taking a RayService back
(v1.5.0 and v1.7.0 alike) updates an active cluster whose annotation is not its own
version in place, stamping its own hash; with its own version there it compares hashes,
and ours is not KubeRay's (:func:`spec_hash`), so it would build a new cluster for
nothing (a zero-downtime upgrade of an unchanged spec)."""
SERVE_CONFIG_ANNOTATION = "ray.io/serve-config-hash"
"""Ours: :func:`serve_config_hash` of the Serve config last PUT to this cluster."""
DELETE_AFTER_ANNOTATION = "ray.io/delete-after"
"""Ours: RFC 3339 UTC time after which this (no longer serving) cluster is deleted."""
ORIGINATED_FROM_NAME_LABEL = raycluster.ORIGINATED_FROM_NAME_LABEL
"""``ray.io/originated-from-cr-name``: the RayService's name."""
ORIGINATED_FROM_CRD_LABEL = raycluster.ORIGINATED_FROM_CRD_LABEL
"""``ray.io/originated-from-crd``: :data:`ORIGINATED_FROM_CRD`."""
ORIGINATED_FROM_CRD = "RayService"

_AUTOSCALER_FIELDS = ("replicas", "minReplicas", "maxReplicas")
_SCHEDULING_FIELDS = ("tolerations", "schedulingGates")
"""Pod template fields a queueing controller (Kueue) may set: not part of the hash."""
_CLUSTER_FIELDS = ("suspend", "upgradeStrategy")
"""``rayClusterConfig`` fields not part of the hash (KubeRay v1.7.0)."""
_SUFFIX_LENGTH = 5
_MAX_ATTEMPTS = 10_000


# --- hashes -------------------------------------------------------------------------------------


def _json_default(value: object) -> object:
    if isinstance(value, quantity.Quantity):
        return {"$quantity": f"{value.value.numerator}/{value.value.denominator}"}
    raise TypeError(f"not JSON serialisable: {value!r}")


def _canonical_numbers(value: Any) -> Any:
    """Integral floats become ints (``1.0`` is ``1``, as :func:`runtime.equality.normalize`)."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _canonical_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical_numbers(v) for v in value]
    return value


def _digest(value: Any) -> str:
    """SHA-1 of the canonical JSON of ``value``, base32hex, upper case, no padding (32 chars)."""
    text = json.dumps(
        value,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=_json_default,
    )
    raw = hashlib.sha1(text.encode(), usedforsecurity=False).digest()
    return base64.b32hexencode(raw).decode().rstrip("=")


def _without_pod_scheduling(group: Any) -> None:
    """Drop ``tolerations`` and ``schedulingGates`` from a group's pod template, in place."""
    template = group.get("template") if isinstance(group, dict) else None
    pod = template.get("spec") if isinstance(template, dict) else None
    if isinstance(pod, dict):
        for key in _SCHEDULING_FIELDS:
            pod.pop(key, None)


def _for_hashing(
    cluster_config: Mapping[str, Any], worker_groups: int | None = None, *, legacy: bool = False
) -> Obj:
    """A copy of the config without what :func:`spec_hash` ignores (groups cut to
    ``worker_groups``); ``legacy``: without the autoscaler's fields only (the hash of
    earlier versions)."""
    config = copy.deepcopy(dict(cluster_config))
    if not legacy:
        for key in _CLUSTER_FIELDS:
            config.pop(key, None)
        _without_pod_scheduling(config.get("headGroupSpec"))
    groups = config.get("workerGroupSpecs")
    if not isinstance(groups, list):
        return config
    if worker_groups is not None:
        groups = groups[:worker_groups]
    stripped = []
    for group in groups:
        if isinstance(group, dict):
            for key in _AUTOSCALER_FIELDS:
                group.pop(key, None)
            strategy = group.get("scaleStrategy")
            if isinstance(strategy, dict):
                strategy.pop("workersToDelete", None)
            if not legacy:
                _without_pod_scheduling(group)
        stripped.append(group)
    config["workerGroupSpecs"] = stripped
    return config


_MEMO_SIZE = 8192
_memo: collections.OrderedDict[tuple[bytes, int | None, bool], str] = collections.OrderedDict()
""":func:`spec_hash`'s answers by (SHA-1 of the config's exact JSON, worker_groups, legacy),
least recently used first: a RayService pass asks for the same few hashes every time
(its config's, each owned cluster's), and computing one (copy, semantic normalisation,
canonical JSON) costs about a millisecond; the key costs a JSON dump."""


def _exact_key(value: Any) -> bytes | None:
    """SHA-1 of ``value``'s exact JSON (keys sorted), or None if it is not plain JSON."""
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return None
    return hashlib.sha1(text.encode(), usedforsecurity=False).digest()


def spec_hash(
    cluster_config: Mapping[str, Any], *, worker_groups: int | None = None, legacy: bool = False
) -> str:
    """The hash of ``spec.rayClusterConfig`` without the fields that must not make a new
    cluster (see the module docstring).

    ``worker_groups=n`` hashes only the first ``n`` worker groups (the config a
    cluster with ``n`` groups would have if groups were only appended since).
    Deterministic, insensitive to key order and to semantically empty values,
    sensitive to everything else. Not KubeRay's value (see the module docstring).
    ``legacy``: the value earlier versions of this operator wrote (only the
    autoscaler's fields ignored), for recognising their clusters.

    >>> spec_hash({"rayVersion": "2.46.0"}) != spec_hash({"rayVersion": "2.47.0"})
    True
    >>> spec_hash({"rayVersion": "2.46.0", "suspend": True}) == spec_hash({"rayVersion": "2.46.0"})
    True

    Answers are remembered by the config's exact content (:data:`_memo`), so asking
    again for an unchanged config costs a JSON dump, not a recomputation.
    """
    exact = _exact_key(cluster_config)
    key = (exact, worker_groups, legacy) if exact is not None else None
    if key is not None and (known := _memo.get(key)) is not None:
        _memo.move_to_end(key)
        return known
    value = _digest(
        _canonical_numbers(
            equality.normalize(_for_hashing(cluster_config, worker_groups, legacy=legacy))
        )
    )
    if key is not None:
        _memo[key] = value
        if len(_memo) > _MEMO_SIZE:
            _memo.popitem(last=False)
    return value


def serve_config_hash(config: Mapping[str, Any]) -> str:
    """The hash of a parsed Serve config (what is PUT): SHA-1 of its canonical JSON, as above.

    Only key order is ignored. Unlike :func:`spec_hash` nothing is normalised: for
    Serve an absent ``route_prefix`` (``"/"``) is not a ``null`` one (no route), and a
    ``user_config`` is the application's own data.

    >>> serve_config_hash({"a": 1, "b": 2}) == serve_config_hash({"b": 2, "a": 1})
    True
    >>> serve_config_hash({"applications": []}) == serve_config_hash({})
    False
    """
    return _digest(config)


# --- names --------------------------------------------------------------------------------------


def _suffix(config_hash: str, attempt: int) -> str:
    """5 lower-case base32hex characters (``0-9a-v``: DNS-label safe) for the attempt."""
    if attempt == 0:
        source = config_hash
    else:
        raw = hashlib.sha1(f"{config_hash}/{attempt}".encode(), usedforsecurity=False).digest()
        source = base64.b32hexencode(raw).decode()
    return source[:_SUFFIX_LENGTH].lower()


def cluster_name(service_name: str, config_hash: str, existing: Mapping[str, str | None]) -> str:
    """The name of the cluster for ``config_hash``: ``<service_name>-<5 characters>``.

    ``existing`` maps the names of the RayClusters in the namespace to their
    :data:`HASH_ANNOTATION` (``None`` when absent). The first candidate comes from
    the hash itself; while a candidate is taken by a cluster with another hash the
    next one is derived from ``(config_hash, attempt)``. A candidate held by a
    cluster with the *same* hash is returned (that cluster is the one to use). The
    same inputs always give the same name. A RayService name has at most 47
    characters, so the result fits the 53 of a RayCluster.

    >>> cluster_name("svc", "F972O7RD56SG6VHROS09GUJCU2EGGCSE", {})
    'svc-f972o'
    >>> cluster_name("svc", "F972O7RD56SG6VHROS09GUJCU2EGGCSE", {"svc-f972o": "OTHER"})
    'svc-d2mq2'
    """
    for attempt in range(_MAX_ATTEMPTS):
        candidate = f"{service_name}-{_suffix(config_hash, attempt)}"
        if candidate not in existing or existing[candidate] == config_hash:
            return candidate
    raise RuntimeError(f"no free RayCluster name for {service_name!r} after {_MAX_ATTEMPTS} tries")


# --- the cluster --------------------------------------------------------------------------------


def _cluster_config(service: Mapping[str, Any]) -> Mapping[str, Any]:
    config = (service.get("spec") or {}).get("rayClusterConfig")
    if not isinstance(config, Mapping):
        raise ValueError("spec.rayClusterConfig is required")
    return config


def desired_cluster(service: Mapping[str, Any], name: str) -> Obj:
    """The RayCluster ``name`` that KubeRay v1.7.0 would create for ``service`` (but for the
    value of :data:`KUBERAY_VERSION_ANNOTATION`, :data:`KUBERAY_VERSION_VALUE`).

    Labels: the RayService's, plus :data:`ORIGINATED_FROM_NAME_LABEL` and
    :data:`ORIGINATED_FROM_CRD_LABEL`. Annotations: the RayService's, plus
    :data:`HASH_ANNOTATION`, :data:`NUM_WORKER_GROUPS_ANNOTATION` and
    :data:`KUBERAY_VERSION_ANNOTATION`. Spec: a copy of ``spec.rayClusterConfig``.
    The RayService is its controller owner. :class:`ValueError` without a config.
    """
    config = _cluster_config(service)
    meta = service.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    labels[ORIGINATED_FROM_NAME_LABEL] = meta.get("name")
    labels[ORIGINATED_FROM_CRD_LABEL] = ORIGINATED_FROM_CRD
    annotations = dict(meta.get("annotations") or {})
    groups = config.get("workerGroupSpecs")
    annotations[HASH_ANNOTATION] = spec_hash(config)
    annotations[NUM_WORKER_GROUPS_ANNOTATION] = str(len(groups) if isinstance(groups, list) else 0)
    annotations[KUBERAY_VERSION_ANNOTATION] = KUBERAY_VERSION_VALUE
    cluster: Obj = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": name,
            "namespace": meta.get("namespace"),
            "labels": labels,
            "annotations": annotations,
        },
        "spec": copy.deepcopy(dict(config)),
    }
    objects.set_controller_reference(service, cluster, api_version="ray.io/v1", kind="RayService")
    return cluster


class Match(enum.Enum):
    """How an existing cluster relates to a cluster config."""

    EXACT = "exact"
    """The cluster runs this config (up to the autoscaler-owned fields)."""
    APPENDED = "appended"
    """The config is the cluster's with worker groups appended: update the cluster in place."""
    NONE = "none"
    """Anything else: the config needs a new cluster."""


def _same_spec(cluster: Mapping[str, Any], config: Mapping[str, Any], groups: int | None) -> bool:
    spec = cluster.get("spec")
    if not isinstance(spec, Mapping):
        return False
    # Equal digests of the normalised, hashing-relevant parts: equal parts (the digest
    # is of their canonical JSON); memoised like every other spec hash.
    return spec_hash(spec) == spec_hash(config, worker_groups=groups)


def match(cluster: Mapping[str, Any], cluster_config: Mapping[str, Any]) -> Match:
    """Whether ``cluster`` runs ``cluster_config`` (see :class:`Match`).

    ``EXACT`` when the cluster's :data:`HASH_ANNOTATION` is :func:`spec_hash` of the
    config (or its ``legacy`` value: a cluster made by an earlier version of this
    operator); ``APPENDED`` when its :data:`NUM_WORKER_GROUPS_ANNOTATION` is an integer
    ``n``, the config has more than ``n`` worker groups, and the hash (or its legacy
    value) of its first ``n`` groups is the cluster's. A missing or garbled annotation
    is no match.

    As a fallback for clusters whose hash is not ours (a cluster KubeRay created,
    before the switch to this operator), the cluster's own ``spec`` is compared with
    the config the same way (without the fields the hash ignores, semantically): equal is
    ``EXACT``, equal to the config's first ``len(cluster groups)`` groups while the
    config has more is ``APPENDED``.
    """
    annotations = (cluster.get("metadata") or {}).get("annotations") or {}
    current = annotations.get(HASH_ANNOTATION)
    groups = cluster_config.get("workerGroupSpecs")
    wanted_groups = len(groups) if isinstance(groups, list) else 0
    if current is not None and current in (
        spec_hash(cluster_config),
        spec_hash(cluster_config, legacy=True),
    ):
        return Match.EXACT
    try:
        had = int(str(annotations.get(NUM_WORKER_GROUPS_ANNOTATION)))
    except ValueError:
        had = -1
    if (
        current is not None
        and 0 <= had < wanted_groups
        and current
        in (
            spec_hash(cluster_config, worker_groups=had),
            spec_hash(cluster_config, worker_groups=had, legacy=True),
        )
    ):
        return Match.APPENDED
    # Fallback: the specs themselves.
    if _same_spec(cluster, cluster_config, None):
        return Match.EXACT
    spec_groups = (cluster.get("spec") or {}).get("workerGroupSpecs")
    running = len(spec_groups) if isinstance(spec_groups, list) else 0
    if running < wanted_groups and _same_spec(cluster, cluster_config, running):
        return Match.APPENDED
    return Match.NONE


def updated_in_place(cluster: Mapping[str, Any], service: Mapping[str, Any]) -> Obj:
    """A copy of ``cluster`` with the spec, labels and annotations :func:`desired_cluster` gives.

    KubeRay's in-place update (``modifyRayCluster``): spec, labels and annotations
    are replaced, except the cluster's own ``suspend`` (set when it was created, then
    Kueue's); our bookkeeping annotations (:data:`SERVE_CONFIG_ANNOTATION`,
    :data:`DELETE_AFTER_ANNOTATION`) are kept when the cluster has them, and the rest
    of the metadata (``resourceVersion``, ``uid``, ``ownerReferences``, ...) is kept.
    """
    updated = copy.deepcopy(dict(cluster))
    meta = updated.setdefault("metadata", {})
    desired = desired_cluster(service, str(meta.get("name") or ""))
    old_annotations = meta.get("annotations") or {}
    annotations = desired["metadata"]["annotations"]
    for key in (SERVE_CONFIG_ANNOTATION, DELETE_AFTER_ANNOTATION):
        if key in old_annotations:
            annotations[key] = old_annotations[key]
    meta["labels"] = desired["metadata"]["labels"]
    meta["annotations"] = annotations
    spec = desired["spec"]
    spec.pop("suspend", None)
    old_spec = cluster.get("spec")
    if isinstance(old_spec, Mapping) and "suspend" in old_spec:
        spec["suspend"] = old_spec["suspend"]
    updated["spec"] = spec
    return updated


# --- ownership ----------------------------------------------------------------------------------


def owned_selector(service_name: str) -> str:
    """The label selector of a RayService's clusters.

    >>> owned_selector("svc")
    'ray.io/originated-from-cr-name=svc,ray.io/originated-from-crd=RayService'
    """
    return (
        f"{ORIGINATED_FROM_NAME_LABEL}={service_name},"
        f"{ORIGINATED_FROM_CRD_LABEL}={ORIGINATED_FROM_CRD}"
    )
