"""What each reconciler may do in the API server; ``config/rbac/role.yaml`` is generated from it.

The counterpart of kubebuilder's ``+kubebuilder:rbac`` markers, as data: each
reconciler declares the :class:`Rule` s it needs (:data:`RAYCLUSTER`,
:data:`RAYSERVICE`, :data:`RAYJOB`, :data:`RAYCRONJOB`; a reconciler module may re-export
its own), and
``hack/gen_manifests.py`` writes their union as the ClusterRole
``rayservice-operator-manager-role``. Adding a call to the API without adding its
rule here fails with 403 against a real cluster; ``make manifests`` plus the
drift check keep the role and the declarations in step.

Least privilege, verb by verb, for what the framework does on the reconcilers'
behalf:

- ``list`` + ``watch``: every kind a controller caches (its own kind, owned kinds);
  ``get`` only where something GETs: the status writer's re-read of its own kind after
  a 409, the RBAC objects and the token Secrets read without the cache, and what the
  autoscaler's Role grants (escalation prevention); a cached kind needs no ``get``.
- **Secrets are never listed or watched**: ``get`` (a Secret whose name the operator
  knows, ``<cluster>`` or ``authOptions.secretName``) and ``create``. A label-filtered
  cache would bound the operator's memory, not what its token may read: with
  ``list``/``watch`` the token could enumerate every credential of every namespace.
  RBAC cannot grant by label, nor by a name decided at run time, so by-name reads are
  ``get`` on all Secrets, never a listing of them.
- ``create`` / ``update`` / ``delete``: :func:`runtime.objects.create_or_update`
  writes with ``update`` (PUT), never ``patch``; pods and RayClusters the
  reconcilers remove are deleted.
- ``<kind>/status`` ``update``: the status writer (PUT on the subresource; its re-read
  is a GET of the object itself).
- ``<kind>/finalizers`` ``update``: setting an owner reference with
  ``blockOwnerDeletion`` on a child requires it where the
  ``OwnerReferencesPermissionEnforcement`` admission plugin is on.
- ``events.k8s.io`` ``events`` ``create`` + ``patch``: the event recorders (``patch`` when they
  fold a repeated event into its series; KubeRay v1.7.0 writes that API too).

:func:`merge` folds the declarations into ClusterRole rules deterministically:
verbs are united per (API group, resource), then resources that share an API
group and the same verbs become one rule; everything is sorted.

>>> merge([Rule("", "pods", "get list"), Rule("", "pods", "watch"),
...        Rule("", "services", "get list watch")])
[{'apiGroups': [''], 'resources': ['pods', 'services'], 'verbs': ['get', 'list', 'watch']}]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

__all__ = [
    "DECLARATIONS",
    "KUBERNETES_PROXY",
    "METRICS_AUTH",
    "METRICS_AUTH_ROLE_NAME",
    "PROXY_ROLE_NAME",
    "RAYCLUSTER",
    "RAYCRONJOB",
    "RAYJOB",
    "RAYSERVICE",
    "ROLE_NAME",
    "Rule",
    "merge",
]

ROLE_NAME = "rayservice-operator-manager-role"

_VERBS = frozenset(
    {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
)


@dataclasses.dataclass(frozen=True, slots=True)
class Rule:
    """Permission for ``verbs`` (space-separated) on one ``resource`` of API ``group``.

    ``group`` is ``""`` for the core API; ``resource`` is a plural, optionally
    with a subresource (``rayservices/status``).
    """

    group: str
    resource: str
    verbs: str

    def __post_init__(self) -> None:
        unknown = set(self.verbs.split()) - _VERBS
        if unknown or not self.verbs.split():
            raise ValueError(f"bad verbs for {self.resource}: {self.verbs!r}")


_READ = "get list watch"

RAYCLUSTER: tuple[Rule, ...] = (
    Rule("ray.io", "rayclusters", f"{_READ} update patch"),
    Rule("ray.io", "rayclusters/status", "update"),
    Rule("ray.io", "rayclusters/finalizers", "update"),
    Rule("", "pods", f"{_READ} create delete patch"),
    Rule("", "pods/resize", "patch"),
    Rule("", "services", "list watch create"),
    Rule("", "serviceaccounts", "get create"),
    Rule("rbac.authorization.k8s.io", "roles", "get create"),
    Rule("rbac.authorization.k8s.io", "rolebindings", "get create"),
    Rule("", "secrets", "get create"),
    Rule("batch", "jobs", "list watch create"),
    Rule("events.k8s.io", "events", "create patch"),
)
"""The RayCluster reconciler: owns head and worker pods, the head (and serve) service,
for token authentication the Secret holding the token (``<cluster>``: read by ``get``
to know whether it exists, created when not; never cached), and, for in-tree
autoscaling, the autoscaler's ServiceAccount, Role and RoleBinding.
Creating a Role requires holding what it grants (RBAC escalation prevention):
the autoscaler's Role grants ``get list watch patch`` on the namespace's pods, ``patch``
on ``pods/resize`` and ``get patch`` on its own RayCluster (by name), so this
reconciler, which never patches, declares them for that reason only. Of those,
``pods`` ``get`` and ``pods/resize`` ``patch`` are held for nothing else: the RayService
reconciler patches pods (the head's ``ray.io/serve`` label) and RayClusters (annotations)
itself. ``escalate`` cannot replace them: limited to one Role name it does not cover a
create (the request carries no name), and unlimited it lets the holder write any Role.
The autoscaler's
ServiceAccount, Role and RoleBinding are read by ``get`` (never list/watched: the
operator has no business caching every Role of the cluster). GCS fault tolerance: the
Redis clean-up finalizer is added and removed with ``update`` on the RayCluster, and the
clean-up Job is created and watched (``jobs``). Pods are deleted one by one (no
``deletecollection``, which KubeRay uses)."""

RAYSERVICE: tuple[Rule, ...] = (
    Rule("ray.io", "rayservices", f"{_READ} update"),
    Rule("ray.io", "rayservices/status", "update"),
    Rule("ray.io", "rayservices/finalizers", "update"),
    Rule("ray.io", "rayclusters", f"{_READ} create update patch delete"),
    Rule("", "services", "list watch create update"),
    Rule("", "pods", f"{_READ} patch"),
    Rule("discovery.k8s.io", "endpointslices", "list watch"),
    Rule("", "secrets", "get"),
    Rule("events.k8s.io", "events", "create patch"),
    # NewClusterWithIncrementalUpgrade: its Gateway and HTTPRoute (KubeRay v1.7.0's verbs
    # but delete: they go with the RayService, by garbage collection)
    Rule("gateway.networking.k8s.io", "gateways", "list watch create update"),
    Rule("gateway.networking.k8s.io", "httproutes", "list watch create update"),
)
"""The RayService reconciler: owns RayClusters (created, updated in place, annotated
with merge patches, deleted) and the head and serve services, labels the head pod
(``ray.io/serve``, a merge patch), counts serve endpoints from EndpointSlices, and
keeps a finalizer on the RayService (``update`` on it). With token authentication it
reads the cluster's token Secret (``<cluster>``, or the user's ``authOptions.secretName``)
by ``get`` (:mod:`controllers.ray.tokens`)."""

RAYJOB: tuple[Rule, ...] = (
    Rule("ray.io", "rayjobs", f"{_READ} update delete"),
    Rule("ray.io", "rayjobs/status", "update"),
    Rule("ray.io", "rayjobs/finalizers", "update"),
    Rule("ray.io", "rayclusters", f"{_READ} create update delete"),
    Rule("", "services", "list watch create update"),
    Rule("", "pods", "list watch"),
    Rule("batch", "jobs", "list watch create delete"),
    Rule("", "secrets", "get"),
    Rule("events.k8s.io", "events", "create patch"),
)
"""The RayJob reconciler: keeps a finalizer on the RayJob (``update``) and deletes it
when a policy says so (``DeleteSelf``); owns the RayCluster it makes (created, its
workers suspended by ``update`` for ``DeleteWorkers``, deleted), the RayJob's head
Service (created, repointed by ``update``) and the submitter Job (created, deleted on a
retry or a suspend); reads the cluster's head pods (``SidecarMode``) and, with token
authentication, the token Secret by ``get``."""

RAYCRONJOB: tuple[Rule, ...] = (
    Rule("ray.io", "raycronjobs", _READ),
    Rule("ray.io", "raycronjobs/status", "update"),
    Rule("ray.io", "rayjobs", "create"),
    Rule("events.k8s.io", "events", "create patch"),
)
"""The RayCronJob reconciler (gate ``RayCronJob``): creates the RayJobs of its ticks (they
are never read back: the name says whether a tick's RayJob exists, AlreadyExists) and
records ``lastScheduleTime``."""

KUBERNETES_PROXY: tuple[Rule, ...] = (
    Rule("", "services/proxy", "get update"),
    Rule("", "pods/proxy", "get"),
)
"""Only with ``--use-kubernetes-proxy`` (``--dashboard-address-mode kubernetes-proxy``):
the dashboard through the head service's ``proxy`` subresource (GET the Serve status,
PUT the config: ``get`` and ``update``, nothing else; KubeRay also grants
``create``/``patch``, which no request here needs) and each pod's Serve proxy health
through ``pods/proxy`` (``get``). Granted by its own ClusterRole
(:data:`PROXY_ROLE_NAME`, ``config/overlays/kubernetes-proxy``; the Helm chart's
``useKubernetesProxy``), so an operator in the default mode cannot reach into pods
through the API server at all; the e2e suite runs that mode under it."""

METRICS_AUTH: tuple[Rule, ...] = (
    Rule("authentication.k8s.io", "tokenreviews", "create"),
    Rule("authorization.k8s.io", "subjectaccessreviews", "create"),
)
"""Only with ``--metrics-secure``: each scrape's bearer token is checked with a
TokenReview and its user's access to ``/metrics`` with a SubjectAccessReview
(:mod:`runtime.delegatedauth`). Granted by its own ClusterRole
(:data:`METRICS_AUTH_ROLE_NAME`, ``config/overlays/metrics-secure``; the Helm chart's
``metrics.secure.enabled``), also when the operator watches only some namespaces: both
kinds are cluster-scoped. Creating a SubjectAccessReview tells whether any user may do
anything, so the default deployment, serving plain HTTP, is not given it."""

METRICS_AUTH_ROLE_NAME = "rayservice-operator-metrics-auth-role"
"""The ClusterRole of :data:`METRICS_AUTH`."""

DECLARATIONS: dict[str, tuple[Rule, ...]] = {
    "raycluster": RAYCLUSTER,
    "rayservice": RAYSERVICE,
    "rayjob": RAYJOB,
    "raycronjob": RAYCRONJOB,
}
"""Every reconciler's rules, by reconciler name: what the manager's role must grant."""

PROXY_ROLE_NAME = "rayservice-operator-proxy-role"
"""The ClusterRole of :data:`KUBERNETES_PROXY`."""


def merge(rules: Iterable[Rule]) -> list[dict[str, Any]]:
    """ClusterRole ``rules`` granting exactly the union of ``rules``, in a stable order."""
    verbs: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        verbs.setdefault((rule.group, rule.resource), set()).update(rule.verbs.split())
    grouped: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for (group, resource), names in verbs.items():
        grouped.setdefault((group, tuple(sorted(names))), []).append(resource)
    return [
        {"apiGroups": [group], "resources": sorted(resources), "verbs": list(names)}
        for (group, names), resources in sorted(grouped.items(), key=_rule_order)
    ]


def _rule_order(item: tuple[tuple[str, tuple[str, ...]], list[str]]) -> tuple[str, str]:
    (group, _), resources = item
    return (group, min(resources))
