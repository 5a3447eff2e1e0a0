"""The manager's generated roles on the real API server, RBAC deciding: what they let the
operator's ServiceAccount do, and what they no longer let it do.

The account is bound to exactly ``config/rbac/role.yaml`` (a ClusterRole of its own here,
so no other test's binding counts) and, in its namespace, to
``config/rbac/leader_election_role.yaml``. Its requests carry a TokenRequest token, so
the API server's escalation checks run as in a cluster; what it may do is asked of the
API server with SubjectAccessReviews.

- It creates a RayCluster's autoscaler ServiceAccount, Role and RoleBinding
  (:func:`controllers.raycluster.autoscaler.rbac_objects`) in a tenant's namespace: RBAC
  lets a creator grant only what it holds, so this proves the ClusterRole still holds
  all the Role grants.
- That Role lets the head pod's account read and patch its own RayCluster only, by name,
  and still list, watch and patch the namespace's pods (the autoscaler's needs).
- Secrets: ``get`` and ``create`` only; no ``list`` or ``watch`` anywhere, so the
  account's token cannot enumerate the cluster's credentials.
- No core ``events`` in the leader-election namespace (nothing writes them).
"""

from __future__ import annotations

import pathlib
import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import yaml

import api.v1 as v1
from controllers.raycluster import autoscaler
from runtime.client import client as client_
from runtime.testing import controlplane

ROOT = pathlib.Path(__file__).parents[2]
RBAC = "/apis/rbac.authorization.k8s.io/v1"
ACCOUNT = "manager"


def _yaml(path: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / path).read_text())
    return doc


def user(namespace: str, name: str) -> dict[str, Any]:
    """A SubjectAccessReview's subject: the ServiceAccount as its token authenticates."""
    return {
        "user": f"system:serviceaccount:{namespace}:{name}",
        "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}",
                   "system:authenticated"],
    }  # fmt: skip


def allowed(
    cp: controlplane.ControlPlane, subject: dict[str, Any], verb: str, resource: str,
    *, group: str = "", namespace: str = "", name: str = "",
) -> bool:  # fmt: skip
    """Whether RBAC lets ``subject`` do ``verb`` on ``resource`` (``plural[/sub]``)."""
    plural, _, sub = resource.partition("/")
    attributes = {"verb": verb, "group": group, "resource": plural, "subresource": sub,
                  "namespace": namespace, "name": name}  # fmt: skip
    review = cp.request(
        "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
         "spec": {**subject, "resourceAttributes": attributes}},
    )  # fmt: skip
    return bool(review["status"].get("allowed"))


class Operator:
    """The ServiceAccount bound to the generated roles, and a tenant's namespace."""

    def __init__(self, namespace: str, tenant: str) -> None:
        self.namespace = namespace
        self.tenant = tenant
        self.subject = user(namespace, ACCOUNT)


@pytest.fixture
def tenant(control_plane: controlplane.ControlPlane) -> Iterator[str]:
    name = f"tenant-{secrets.token_hex(4)}"
    control_plane.request("POST", "/api/v1/namespaces", {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})  # fmt: skip
    yield name
    control_plane.request("DELETE", f"/api/v1/namespaces/{name}")


@pytest.fixture
def operator(
    control_plane: controlplane.ControlPlane, namespace: str, tenant: str
) -> Iterator[Operator]:
    """The account in ``namespace``, bound to config/rbac's ClusterRole rules (under a name
    of its own) and the leader-election Role."""
    cp = control_plane
    role = f"least-privilege-{secrets.token_hex(4)}"
    cp.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", {
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ACCOUNT}})  # fmt: skip
    subjects = [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}]
    cp.request("POST", f"{RBAC}/clusterroles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": role}, "rules": _yaml("config/rbac/role.yaml")["rules"]})  # fmt: skip
    cp.request("POST", f"{RBAC}/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": role}, "subjects": subjects,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": role}})  # fmt: skip
    election = _yaml("config/rbac/leader_election_role.yaml")
    cp.request("POST", f"{RBAC}/namespaces/{namespace}/roles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "election"}, "rules": election["rules"]})  # fmt: skip
    cp.request("POST", f"{RBAC}/namespaces/{namespace}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "election"}, "subjects": subjects,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "election"}})  # fmt: skip
    try:
        yield Operator(namespace, tenant)
    finally:
        cp.request("DELETE", f"{RBAC}/clusterrolebindings/{role}")
        cp.request("DELETE", f"{RBAC}/clusterroles/{role}")


@pytest.fixture
async def as_operator(
    control_plane: controlplane.ControlPlane, operator: Operator
) -> AsyncIterator[client_.Client]:
    """A client with the account's own token: exactly its RBAC."""
    path = control_plane.service_account_kubeconfig(operator.namespace, ACCOUNT)
    async with await client_.Client.from_kubeconfig(path) as c:
        yield c


def autoscaled(name: str, namespace: str) -> v1.RayCluster:
    return v1.RayCluster.model_validate({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"enableInTreeAutoscaling": True,
                 "headGroupSpec": {"template": {"spec": {"containers": [{"image": "ray"}]}}}},
    })  # fmt: skip


async def test_the_operator_makes_the_autoscalers_role_which_reaches_its_own_cluster_only(
    control_plane: controlplane.ControlPlane, operator: Operator, as_operator: client_.Client
) -> None:
    cp, tenant = control_plane, operator.tenant
    for obj in autoscaler.rbac_objects(autoscaled("alpha", tenant)):
        # 201 or 403: RBAC refuses a Role granting what its creator does not hold.
        await as_operator.create(obj, namespace=tenant)
    head = user(tenant, "alpha")  # the head pod's ServiceAccount, bound by the RoleBinding
    assert allowed(cp, head, "get", "rayclusters", group="ray.io", namespace=tenant, name="alpha")
    assert allowed(cp, head, "patch", "rayclusters", group="ray.io", namespace=tenant,
                   name="alpha")  # fmt: skip
    for verb in ("get", "patch", "update", "delete"):
        assert not allowed(cp, head, verb, "rayclusters", group="ray.io", namespace=tenant,
                           name="beta"), f"{verb} another cluster"  # fmt: skip
    assert not allowed(cp, head, "list", "rayclusters", group="ray.io", namespace=tenant)
    # What the autoscaler does with pods (it names them only once they exist).
    for verb in ("list", "watch", "get", "patch"):
        assert allowed(cp, head, verb, "pods", namespace=tenant), verb
    assert allowed(cp, head, "patch", "pods/resize", namespace=tenant)
    assert not allowed(cp, head, "delete", "pods", namespace=tenant)
    assert not allowed(cp, head, "get", "pods", namespace=operator.namespace), "another namespace"


def test_secrets_are_read_by_name_never_listed_or_watched(
    control_plane: controlplane.ControlPlane, operator: Operator
) -> None:
    cp, who = control_plane, operator.subject
    for namespace in ("", operator.tenant, "kube-system"):
        for verb in ("list", "watch"):
            assert not allowed(cp, who, verb, "secrets", namespace=namespace), (verb, namespace)
        for verb in ("update", "patch", "delete", "deletecollection"):
            assert not allowed(cp, who, verb, "secrets", namespace=namespace), (verb, namespace)
    assert allowed(cp, who, "get", "secrets", namespace=operator.tenant, name="alpha")
    assert allowed(cp, who, "create", "secrets", namespace=operator.tenant)


def test_the_leader_election_role_grants_the_lease_and_no_events(
    control_plane: controlplane.ControlPlane, operator: Operator
) -> None:
    cp, who, home = control_plane, operator.subject, operator.namespace
    for verb in ("get", "create", "update"):
        assert allowed(cp, who, verb, "leases", group="coordination.k8s.io", namespace=home)
    for verb in ("create", "patch"):
        assert not allowed(cp, who, verb, "events", namespace=home), f"core events {verb}"
    # The recorders' Events API (events.k8s.io) stays, from the ClusterRole.
    assert allowed(cp, who, "create", "events", group="events.k8s.io", namespace=operator.tenant)
