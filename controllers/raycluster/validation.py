"""What makes a RayCluster impossible: :func:`problems` and :func:`service_template_problems`.

:func:`problems` lists why a cluster's objects cannot be created, in plain words:
KubeRay's ``ValidateRayClusterMetadata`` and ``ValidateRayClusterSpec`` (all of
them, not only the first), its admission webhook's unique group names, and the
few checks KubeRay leaves to the API server that are certain to fail (a group name
that is no label value, a serve service without a ``serve`` port), and KubeRay v1.7.0's
``authOptions`` rules (:func:`controllers.raycluster.auth.problems`). A non-empty list
means "fix the spec": the reconciler reports it and does not retry.

**Service templates** (``headGroupSpec.headService``, a RayService's ``serveService``;
:func:`service_template_problems`) may set only what users set on these Services in
practice, because the operator creates them with its own rights and admission policies
see the operator, not the author: ``metadata`` ``name``, ``labels``, ``annotations``;
``spec`` ``type`` (``ClusterIP``, ``NodePort`` or ``LoadBalancer``), ``ports`` (``name``,
``port``, ``targetPort``, ``nodePort``, ``protocol``, ``appProtocol``),
``clusterIP: None`` (headless), ``publishNotReadyAddresses``, ``sessionAffinity`` (and
its config), ``externalTrafficPolicy``, ``internalTrafficPolicy``, ``ipFamilies``,
``ipFamilyPolicy``, ``trafficDistribution``, and with ``type: LoadBalancer``
``loadBalancerSourceRanges``, ``loadBalancerClass``, ``allocateLoadBalancerNodePorts``,
``healthCheckNodePort``. Everything else is refused, naming the field: above all
``type: ExternalName``/``externalName`` (the name the operator reaches the dashboard by
would resolve to whatever the author names, another tenant's head included),
``externalIPs`` and ``loadBalancerIP`` (traffic for addresses the author does not own:
CVE-2020-8554), ``selector`` (the operator sets it) and a fixed ``clusterIP``.
``headGroupSpec.serviceType`` is held to the same types.

KubeRay differences, on purpose: a worker group with ``suspend: true`` is accepted
(KubeRay v1.5.0 rejects it unless its ``RayJobDeletionPolicy`` feature gate is on;
this operator always supports per-group suspend), except with the autoscaler on,
as in KubeRay.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from api import v1
from controllers.raycluster import auth, names

__all__ = ["SERVICE_TYPES", "admission_problems", "problems", "service_template_problems"]

_LABEL_MAX = 63
_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def problems(cluster: v1.RayCluster) -> list[str]:
    """Why the objects of ``cluster`` cannot be created; empty when they can.

    >>> for problem in problems(v1.RayCluster.model_validate({"metadata": {"name": "Bad_Name"},
    ...     "spec": {"headGroupSpec": {"template": {"spec": {"containers": [{}]}}}}})):
    ...     print(problem)  # doctest: +NORMALIZE_WHITESPACE
    RayCluster name 'Bad_Name' is not a valid DNS-1035 label
      (lower-case letters, digits and '-', starting with a letter)
    """
    found = _metadata_problems(names.name_of(cluster))
    found += _spec_problems(cluster)
    return found


def admission_problems(cluster: Mapping[str, Any]) -> list[str]:
    """What KubeRay v1.7.0's RayCluster admission webhook refuses, of a RayCluster as the
    API server sends it: the name (:func:`problems`' name rules) and worker group names
    used twice. The webhook checks only these; the rest is :func:`problems`' at reconcile.

    >>> admission_problems({"metadata": {"name": "c"}, "spec": {"workerGroupSpecs": [
    ...     {"groupName": "g"}, {"groupName": "g"}]}})
    ["worker group names must be unique: 'g' appears more than once"]
    """
    meta = cluster.get("metadata") or {}
    found = _metadata_problems(str(meta.get("name") or ""))
    seen: set[str] = set()
    for group in (cluster.get("spec") or {}).get("workerGroupSpecs") or []:
        name = str((group or {}).get("groupName", ""))
        if name in seen:
            found.append(f"worker group names must be unique: {name!r} appears more than once")
            break  # KubeRay reports the first one
        seen.add(name)
    return found


SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer")
"""The Service types a template (or ``serviceType``) may ask for."""
_TEMPLATE_KEYS = frozenset({"apiVersion", "kind", "metadata", "spec"})
_TEMPLATE_METADATA = frozenset({"name", "labels", "annotations"})
_TEMPLATE_SPEC = frozenset(
    {"type", "ports", "clusterIP", "publishNotReadyAddresses", "sessionAffinity",
     "sessionAffinityConfig", "externalTrafficPolicy", "internalTrafficPolicy",
     "ipFamilies", "ipFamilyPolicy", "trafficDistribution"}
)  # fmt: skip
_TEMPLATE_LOAD_BALANCER = frozenset(
    {"loadBalancerSourceRanges", "loadBalancerClass", "allocateLoadBalancerNodePorts",
     "healthCheckNodePort"}
)  # fmt: skip
_TEMPLATE_PORT = frozenset({"name", "port", "targetPort", "nodePort", "protocol", "appProtocol"})
_REFUSED_WHY = {
    "externalName": "the Service would be a DNS alias for a name the author chooses",
    "externalIPs": "the Service would take traffic for addresses the author names (CVE-2020-8554)",
    "loadBalancerIP": "the Service would claim an address the author names",
    "selector": "the operator sets the selector",
    "clusterIPs": "the API server allocates cluster IPs",
}


def _empty(value: Any) -> bool:
    """Nothing but empty objects, lists and nulls: what Go's typed encoding writes for a
    zero ``status`` (``{loadBalancer: {}}``) when KubeRay writes a RayJob or RayCluster
    back. A template's status means nothing; an empty one is accepted, any other refused."""
    if isinstance(value, Mapping):
        return all(_empty(v) for v in value.values())
    if isinstance(value, list):
        return all(_empty(v) for v in value)
    return value is None


def service_template_problems(where: str, template: Any) -> list[str]:
    """Why a Service template at ``where`` (e.g. ``headGroupSpec.headService``) is refused.

    >>> service_template_problems("spec.serveService", {"spec": {"type": "ExternalName",
    ...     "externalName": "x.other.svc.cluster.local"}})  # doctest: +NORMALIZE_WHITESPACE
    ["spec.serveService.spec.type 'ExternalName' is not allowed (one of 'ClusterIP',
      'NodePort', 'LoadBalancer')", 'spec.serveService.spec.externalName is not allowed:
      the Service would be a DNS alias for a name the author chooses']
    """
    if not isinstance(template, Mapping):
        return [f"{where} must be a Service, got {type(template).__name__}"]
    found = [
        f"{where}.{key} is not allowed"
        for key in sorted(set(template) - _TEMPLATE_KEYS)
        if not (key == "status" and _empty(template[key]))
    ]
    metadata = template.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        found.append(f"{where}.metadata must be an object")
        metadata = {}
    found += [
        f"{where}.metadata.{key} is not allowed (only name, labels and annotations are)"
        for key in sorted(set(metadata) - _TEMPLATE_METADATA)
    ]
    spec = template.get("spec") or {}
    if not isinstance(spec, Mapping):
        return [*found, f"{where}.spec must be an object"]
    kind = spec.get("type")
    if kind is not None and kind not in SERVICE_TYPES:
        allowed = ", ".join(repr(t) for t in SERVICE_TYPES)
        found.append(f"{where}.spec.type {kind!r} is not allowed (one of {allowed})")
    allowed_keys = _TEMPLATE_SPEC | (_TEMPLATE_LOAD_BALANCER if kind == "LoadBalancer" else set())
    for key in sorted(set(spec) - allowed_keys):
        if key in _REFUSED_WHY:
            found.append(f"{where}.spec.{key} is not allowed: {_REFUSED_WHY[key]}")
        elif key in _TEMPLATE_LOAD_BALANCER:
            found.append(f"{where}.spec.{key} is allowed only with type 'LoadBalancer'")
        else:
            found.append(f"{where}.spec.{key} is not allowed")
    cluster_ip = spec.get("clusterIP")
    if cluster_ip not in (None, "", "None"):
        found.append(
            f"{where}.spec.clusterIP {cluster_ip!r} is not allowed (only 'None', for a headless "
            "Service; the API server allocates cluster IPs)"
        )
    ports = spec.get("ports") or []
    if not isinstance(ports, list):
        found.append(f"{where}.spec.ports must be a list")
        ports = []
    for index, port in enumerate(ports):
        if not isinstance(port, Mapping):
            found.append(f"{where}.spec.ports[{index}] must be an object")
            continue
        found += [
            f"{where}.spec.ports[{index}].{key} is not allowed"
            for key in sorted(set(port) - _TEMPLATE_PORT)
        ]
    return found


def _metadata_problems(name: str) -> list[str]:
    found = []
    if len(name) > names.MAX_CLUSTER_NAME_LENGTH:
        found.append(
            f"RayCluster name should be no more than {names.MAX_CLUSTER_NAME_LENGTH} characters "
            f"(it is {len(name)}): the serve service name <name>-serve-svc must fit in 63"
        )
    if not _DNS1035.fullmatch(name) or len(name) > _LABEL_MAX:
        found.append(
            f"RayCluster name {name!r} is not a valid DNS-1035 label "
            "(lower-case letters, digits and '-', starting with a letter)"
        )
    return found


def _containers(template: Mapping[str, Any]) -> list[Any]:
    spec = template.get("spec") or {}
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    return list(containers) if isinstance(containers, list) else []


def _pod_spec(template: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = template.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _env_of(container: Any) -> dict[str, Any]:
    """The container's env vars by name (first wins); ``{}`` for anything malformed."""
    out: dict[str, Any] = {}
    env = container.get("env") if isinstance(container, Mapping) else None
    for item in env if isinstance(env, list) else []:
        if isinstance(item, Mapping) and isinstance(item.get("name"), str):
            out.setdefault(item["name"], item)
    return out


def _spec_problems(cluster: v1.RayCluster) -> list[str]:
    spec = cluster.spec
    head = spec.head_group_spec
    annotations = cluster.metadata.get("annotations") or {}
    head_containers = _containers(head.template)
    found = _head_problems(head, head_containers)
    found += _worker_group_problems(spec.worker_group_specs or [])
    head_env = _env_of(head_containers[0]) if head_containers else {}
    found += _ft_problems(spec, annotations, head_env)
    if head.ray_start_params.get("redis-username") or "REDIS_USERNAME" in head_env:
        found.append(
            "cannot set a redis username in rayStartParams or environment variables; "
            "use gcsFaultToleranceOptions.redisUsername"
        )
    found += auth.problems(spec)
    found += _unsupported_problems(cluster)
    found += _autoscaler_problems(cluster, head_env)
    if str(
        annotations.get(names.ENABLE_SERVE_SERVICE_ANNOTATION)
    ) == "true" and not _has_serve_port(head_containers):
        found.append(
            f"the {names.ENABLE_SERVE_SERVICE_ANNOTATION} annotation asks for a serve service, "
            "but the head container has ports and none is named 'serve'"
        )
    return found


def _head_problems(head: v1.HeadGroupSpec, head_containers: list[Any]) -> list[str]:
    """The head group's containers, ``rayStartParams``, resources, labels, service."""
    found: list[str] = []
    if not head_containers:
        found.append("headGroupSpec.template should have at least one container")
    found += _group_problems("Head", head.ray_start_params, head.resources, head.labels)
    if head.service_type not in (None, "", *SERVICE_TYPES):
        allowed = ", ".join(repr(t) for t in SERVICE_TYPES)
        found.append(
            f"headGroupSpec.serviceType {head.service_type!r} is not allowed (one of {allowed})"
        )
    if head.head_service is not None:
        found += service_template_problems("headGroupSpec.headService", head.head_service)
    return found


def _worker_group_problems(groups: list[v1.WorkerGroupSpec]) -> list[str]:
    """Each worker group's name (unique, a label value), containers and parameters."""
    found: list[str] = []
    seen: set[str] = set()
    for group in groups:
        name = group.group_name
        if name in seen:
            found.append(f"worker group names must be unique: {name!r} appears more than once")
        seen.add(name)
        if len(name) > _LABEL_MAX or not _LABEL_NAME.fullmatch(name):
            found.append(
                f"worker group name {name!r} is not a valid label value (at most 63 letters, "
                "digits, '-', '_' or '.', starting and ending with a letter or digit): it is "
                f"the pods' {names.GROUP_LABEL} label"
            )
        if not _containers(group.template):
            found.append(f"workerGroupSpec {name!r}: template should have at least one container")
        found += _group_problems(name, group.ray_start_params, group.resources, group.labels)
    return found


def _ft_problems(
    spec: v1.RayClusterSpec, annotations: Mapping[str, Any], head_env: Mapping[str, Any]
) -> list[str]:
    """GCS fault tolerance: configured one way only, and Redis's settings in its options."""
    found: list[str] = []
    head = spec.head_group_spec
    ft_options = spec.gcs_fault_tolerance_options
    ft_annotation = str(annotations.get(names.FT_ENABLED_ANNOTATION, ""))
    ft_enabled = ft_annotation.lower() == "true" or ft_options is not None
    if ft_annotation and ft_options is not None:
        found.append(
            f"the {names.FT_ENABLED_ANNOTATION} annotation and gcsFaultToleranceOptions are "
            "both set; use only gcsFaultToleranceOptions to configure GCS fault tolerance"
        )
    if not ft_enabled and "RAY_REDIS_ADDRESS" in head_env:
        found.append(
            "RAY_REDIS_ADDRESS is set, which implicitly enables GCS fault tolerance, but "
            "gcsFaultToleranceOptions is not set; set gcsFaultToleranceOptions instead"
        )
    if ft_options is None:
        return found
    if head.ray_start_params.get("redis-password"):
        found.append(
            "cannot set redis-password in rayStartParams with gcsFaultToleranceOptions; "
            "use gcsFaultToleranceOptions.redisPassword"
        )
    if "REDIS_PASSWORD" in head_env:
        found.append(
            "cannot set the REDIS_PASSWORD env var in the head pod with "
            "gcsFaultToleranceOptions; use gcsFaultToleranceOptions.redisPassword"
        )
    if "RAY_REDIS_ADDRESS" in head_env:
        found.append(
            "cannot set the RAY_REDIS_ADDRESS env var in the head pod with "
            "gcsFaultToleranceOptions; use gcsFaultToleranceOptions.redisAddress"
        )
    if annotations.get(names.EXTERNAL_STORAGE_NS_ANNOTATION):
        found.append(
            f"cannot set the {names.EXTERNAL_STORAGE_NS_ANNOTATION} annotation with "
            "gcsFaultToleranceOptions; use gcsFaultToleranceOptions.externalStorageNamespace"
        )
    return found + _ft_backend_problems(ft_options)


def _unsupported_problems(cluster: v1.RayCluster) -> list[str]:
    """Fields this operator does not act on: refused, never stored and ignored (a
    security option silently dropped leaves a cluster open that its author thinks is
    closed)."""
    spec = cluster.spec
    head = spec.head_group_spec
    found = []
    unsupported = {
        "tlsOptions": spec.tls_options,
        "networkPolicy": spec.network_policy,
        "historyServerOptions": spec.history_server_options,
        "headGroupSpec.ingressOptions": head.ingress_options,
    }
    found += [
        f"{field} is not supported by this operator (it would be stored and ignored); remove it"
        for field, value in unsupported.items()
        if value
    ]
    if head.enable_ingress:
        found.append(
            "headGroupSpec.enableIngress is not supported by this operator (no Ingress would "
            "be created); remove it or set it to false"
        )
    if spec.upgrade_strategy is not None and spec.upgrade_strategy.type == "Recreate":
        found.append(
            "upgradeStrategy.type 'Recreate' is not supported by this operator (pods would "
            "not be recreated when the templates change); remove it or use 'None'"
        )
    return found


def _ft_backend_problems(options: Mapping[str, Any]) -> list[str]:
    """KubeRay v1.7.0's backend rules: the embedded ``rocksdb`` backend needs a feature gate
    (``GCSFaultToleranceEmbeddedStorage``) whose behaviour this operator does not have,
    and ``storage`` belongs to that backend only."""
    backend = options.get("backend") or "redis"
    if backend == "rocksdb":
        return [
            "gcsFaultToleranceOptions.backend 'rocksdb' (the embedded GCS store, KubeRay's "
            "GCSFaultToleranceEmbeddedStorage feature gate) is not supported by this operator"
        ]
    if backend != "redis":
        return [f"gcsFaultToleranceOptions.backend {backend!r} is not one of 'redis', 'rocksdb'"]
    if options.get("storage") is not None:
        return [
            "cannot set gcsFaultToleranceOptions.storage when the backend is 'redis': it only "
            "applies to the 'rocksdb' backend"
        ]
    return []


def _has_serve_port(head_containers: list[Any]) -> bool:
    """Whether the serve service gets a port (no ports at all: KubeRay's defaults, with serve)."""
    if not head_containers or not isinstance(head_containers[0], Mapping):
        return True
    ports = head_containers[0].get("ports") or []
    return not ports or names.has_serve_port(ports)


def _autoscaler_problems(cluster: v1.RayCluster, head_env: dict[str, Any]) -> list[str]:
    spec = cluster.spec
    found = []
    v2_env = head_env.get("RAY_enable_autoscaler_v2")
    if not spec.enable_in_tree_autoscaling:
        if v2_env is not None and v2_env.get("value") in ("1", "true"):
            found.append(
                f"the env var RAY_enable_autoscaler_v2 cannot be {v2_env.get('value')!r} when "
                "enableInTreeAutoscaling is false; set enableInTreeAutoscaling: true"
            )
        return found
    for group in spec.worker_group_specs or []:
        if group.suspend:
            found.append(
                f"worker group {group.group_name!r} cannot be suspended with the autoscaler enabled"
            )
    options = spec.autoscaler_options or {}
    if options.get("version") is not None and v2_env is not None:
        found.append(
            "both autoscalerOptions.version and the head env var RAY_enable_autoscaler_v2 are "
            "set; use only the former"
        )
    if options.get("version") == "v2":
        policy = _pod_spec(spec.head_group_spec.template).get("restartPolicy")
        if policy not in (None, "", "Never"):
            found.append(
                "restartPolicy of the head pod should be Never or unset with autoscaler v2"
            )
        for group in spec.worker_group_specs or []:
            policy = _pod_spec(group.template).get("restartPolicy")
            if policy not in (None, "", "Never"):
                found.append(
                    f"restartPolicy of worker group {group.group_name!r} should be Never or "
                    "unset with autoscaler v2"
                )
    return found


def _group_problems(
    group: str,
    params: Mapping[str, str],
    resources: Mapping[str, str] | None,
    labels: Mapping[str, str] | None,
) -> list[str]:
    found = []
    if resources and any(params.get(k) for k in ("num-cpus", "num-gpus", "memory", "resources")):
        found.append(
            f"resources are set in both rayStartParams and resources of the {group} group; "
            "use only one"
        )
    if "labels" in params:
        found.append(
            f"rayStartParams['labels'] is not supported for the {group} group; use the "
            "top-level labels field"
        )
    for key, value in (labels or {}).items():
        if not _qualified_name(key):
            found.append(f"invalid label key for the {group} group: {key!r}")
        if len(value) > _LABEL_MAX or (value and not _LABEL_NAME.fullmatch(value)):
            found.append(f"invalid label value for key {key!r} in the {group} group: {value!r}")
    return found


def _qualified_name(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix)):
        return False
    return 0 < len(name) <= _LABEL_MAX and bool(_LABEL_NAME.fullmatch(name))
