"""Golden test: the objects of an incremental upgrade we build equal what KubeRay v1.7.0 itself
created for its sample ``ray-service.incremental-upgrade.yaml``, field by field.

Data: ``tests/unit/testdata/kuberay-v1.7.0/ray-service.incremental-upgrade.json``, recorded by
``hack/golden/kuberay_objects.py`` from the real KubeRay v1.7.0 binary with the Ray simulator
answering at the head, so KubeRay deployed Serve, promoted the cluster and went on to the
HTTPRoute: the RayCluster as stored and the request objects of every Service, Gateway and
HTTPRoute it created (kube-apiserver's audit log). The sample asks for
``NewClusterWithIncrementalUpgrade`` with ``gatewayClassName: istio``; its head lists the
port ``serve: 8000``.

Our side, built from the recorded RayCluster and the sample's RayService (its name and
namespace, ``rayClusterConfig`` the cluster's spec, uid ``<uid>`` as the recorder wrote it):

- :func:`controllers.rayservice.gateway.gateway` with class ``istio``;
- :func:`controllers.rayservice.gateway.route` with the backends KubeRay wrote: the one
  (active) cluster on its serve port with weight 100;
- :func:`controllers.rayservice.services.cluster_serve_service` for the cluster;
- :func:`controllers.rayservice.services.head_service` (the RayService's head Service,
  which KubeRay creates in this mode too).

Compared whole - names, namespace, labels, selector, ports, listeners, parentRefs, matches,
backendRefs, ownerReferences - under :func:`runtime.equality.normalize` (Kubernetes'
semantic equality: empty values are absent). Every remaining difference is one of
:data:`DIFFERENCES`, each applied by name in code below and justified there; anything else
fails with a readable field-by-field diff.
"""

from __future__ import annotations

import copy
import json
import pathlib
from typing import Any

import pytest

from controllers.raycluster import interface as raycluster
from controllers.rayservice import gateway, services
from runtime import equality
from tests.unit import helpers

Obj = dict[str, Any]

GOLDEN = helpers.TESTDATA / "kuberay-v1.7.0" / "ray-service.incremental-upgrade.json"
CLASS_NAME = "istio"
"""The sample's ``clusterUpgradeOptions.gatewayClassName``."""
MIGRATED_AT = "2026-01-01T00:00:00Z"

DIFFERENCES = {
    "api-defaults": (
        "The recorded objects are the audit log's requestObject: KubeRay's body after "
        "kube-apiserver decoded it and applied the defaults - the Service API's (type, "
        "sessionAffinity, internalTrafficPolicy, a port's protocol and targetPort) and the "
        "Gateway API v1.4.1 CRDs' (a listener's allowedRoutes, a parentRef's group and kind, "
        "a backendRef's group and kind, the Gateway's 'Waiting for controller' status). We "
        "POST the body without them and the server applies the same, so our side gets them "
        "here (only where unset) before comparing; KubeRay's Gateway status must be exactly "
        "that default (KubeRay writes none)."
    ),
    "migrated-at": (
        "Our HTTPRoute carries the annotation ray.io/traffic-migrated-at (when its weights "
        "last changed, written with them: the interval between traffic steps survives an "
        "operator restart); KubeRay keeps that time in the RayService status "
        "(lastTrafficMigratedTime) and writes no annotation on its route."
    ),
    "placeholders": (
        "The recorder replaced the uids by '<uid>' and the cluster name's random suffix by "
        "'xxxxx'; our side is built from a RayService with uid '<uid>' and the recorded "
        "RayCluster (name and uid placeholders in)."
    ),
}
"""Every difference this test tolerates, by name, with its reason."""


def load() -> tuple[Obj, Obj, dict[str, list[Obj]]]:
    """The sample's RayService as our builders read it, the RayCluster, KubeRay's objects."""
    document = json.loads(GOLDEN.read_text())
    assert document["kuberay_version"] == "v1.7.0"
    assert document["source"] == "config/samples/ray-service.incremental-upgrade.yaml"
    cluster = document["raycluster"]
    cluster["metadata"]["uid"] = "<uid>"  # DIFFERENCES["placeholders"]
    [owner] = cluster["metadata"]["ownerReferences"]
    service = {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {
            "name": owner["name"],
            "namespace": cluster["metadata"]["namespace"],
            "uid": owner["uid"],  # DIFFERENCES["placeholders"]
        },
        "spec": {
            "upgradeStrategy": {
                "type": "NewClusterWithIncrementalUpgrade",
                "clusterUpgradeOptions": {"gatewayClassName": CLASS_NAME},
            },
            "rayClusterConfig": copy.deepcopy(cluster["spec"]),
        },
    }
    return service, cluster, document["created"]


# --- what the API server adds while decoding (DIFFERENCES["api-defaults"]) -------------------

GATEWAY_STATUS_DEFAULT = {
    "conditions": [
        {
            "lastTransitionTime": "1970-01-01T00:00:00Z",
            "message": "Waiting for controller",
            "reason": "Pending",
            "status": "Unknown",
            "type": condition,
        }
        for condition in ("Accepted", "Programmed")
    ]
}
"""The Gateway CRD's default ``status`` (Gateway API v1.4.1)."""


def _set(obj: Obj, key: str, value: Any) -> None:
    if obj.get(key) is None:
        obj[key] = value


def api_defaults(obj: Obj) -> Obj:
    """A copy of ``obj`` with the defaults kube-apiserver applies when decoding it."""
    obj = copy.deepcopy(obj)
    spec = obj.setdefault("spec", {})
    if obj["kind"] == "Service":
        _set(spec, "type", "ClusterIP")
        _set(spec, "sessionAffinity", "None")
        _set(spec, "internalTrafficPolicy", "Cluster")
        for port in spec.get("ports") or []:
            _set(port, "protocol", "TCP")
            _set(port, "targetPort", port.get("port"))
    elif obj["kind"] == "Gateway":
        for listener in spec.get("listeners") or []:
            _set(listener, "allowedRoutes", {"namespaces": {"from": "Same"}})
        _set(obj, "status", GATEWAY_STATUS_DEFAULT)
    elif obj["kind"] == "HTTPRoute":
        for parent in spec.get("parentRefs") or []:
            _set(parent, "group", gateway.GROUP)
            _set(parent, "kind", "Gateway")
        for rule in spec.get("rules") or []:
            for backend in rule.get("backendRefs") or []:
                _set(backend, "group", "")
                _set(backend, "kind", "Service")
    return obj


# --- comparison ------------------------------------------------------------------------------


def assert_same(kuberay: Obj, ours: Obj) -> None:
    want = equality.normalize(kuberay)
    have = equality.normalize(api_defaults(ours))
    differences = list(helpers.kuberay_diff(want, have))
    what = f"{ours['kind']} {ours['metadata']['name']}"
    assert not differences, f"{what} differs from KubeRay's:\n  " + "\n  ".join(differences)


def recorded(created: dict[str, list[Obj]], kind: str, name: str) -> Obj:
    [found] = [o for o in created[kind] if o["metadata"]["name"] == name]
    return copy.deepcopy(found)


def active_backend(cluster: Obj) -> gateway.Backend:
    """The one cluster on its serve port with all the traffic, as KubeRay routed it."""
    [port] = raycluster.serve_ports(cluster)
    assert port["name"] == "serve"
    return gateway.Backend(cluster["metadata"]["name"], int(port["port"]), 100)


# --- the tests -------------------------------------------------------------------------------


def test_kuberay_created_what_we_create_for_an_incremental_rayservice() -> None:
    """The same objects by kind and name: the RayService's head Service, the cluster's own
    serve Service, the Gateway, the HTTPRoute - and no ``<rayservice>-serve-svc`` (KubeRay
    names the RayService's serve Service after the cluster in this mode: the per-cluster one).
    The cluster's own head Service is the RayCluster controller's (test_pods_match_kuberay)."""
    service, cluster, created = load()
    ours = [
        services.head_service(service, cluster),
        services.cluster_serve_service(service, cluster),
        gateway.gateway(service, CLASS_NAME),
        gateway.route(service, [active_backend(cluster)], migrated_at=MIGRATED_AT),
    ]
    clusters_own = f"{cluster['metadata']['name']}{services.HEAD_SUFFIX}"
    theirs = [
        (o["kind"], o["metadata"]["name"])
        for kind in ("services", "gateways", "httproutes")
        for o in created[kind]
        if o["metadata"]["name"] != clusters_own
    ]
    assert sorted(theirs) == sorted((o["kind"], o["metadata"]["name"]) for o in ours)
    assert services.serve_service_name(service) not in {name for _, name in theirs}


def test_gateway_equals_kuberays() -> None:
    service, _, created = load()
    ours = gateway.gateway(service, CLASS_NAME)
    theirs = recorded(created, "gateways", gateway.gateway_name(service["metadata"]["name"]))
    assert theirs["status"] == GATEWAY_STATUS_DEFAULT  # DIFFERENCES["api-defaults"]
    assert_same(theirs, ours)


def test_route_equals_kuberays() -> None:
    service, cluster, created = load()
    backend = active_backend(cluster)
    ours = gateway.route(service, [backend], migrated_at=MIGRATED_AT)
    theirs = recorded(created, "httproutes", gateway.route_name(service["metadata"]["name"]))
    # DIFFERENCES["migrated-at"]
    assert ours["metadata"].pop("annotations") == {gateway.MIGRATED_ANNOTATION: MIGRATED_AT}
    assert "annotations" not in theirs["metadata"]
    assert gateway.weights(theirs) == {backend.cluster: 100} == gateway.weights(ours)
    assert_same(theirs, ours)


def test_cluster_serve_service_equals_kuberays() -> None:
    service, cluster, created = load()
    ours = services.cluster_serve_service(service, cluster)
    name = services.cluster_serve_service_name(cluster["metadata"]["name"])
    assert_same(recorded(created, "services", name), ours)


def test_rayservice_head_service_equals_kuberays() -> None:
    service, cluster, created = load()
    ours = services.head_service(service, cluster, created_by="kuberay-operator")
    name = services.head_service_name(service["metadata"]["name"])
    assert_same(recorded(created, "services", name), ours)


@pytest.mark.parametrize("kind", ["Service", "Gateway", "HTTPRoute"])
def test_api_defaults_fill_only_what_is_unset(kind: str) -> None:
    obj: Obj = {"kind": kind, "spec": {"type": "NodePort", "ports": [{"port": 1, "targetPort": 2}]}}
    obj["spec"]["listeners"] = [{"allowedRoutes": {"namespaces": {"from": "All"}}}]
    obj["spec"]["parentRefs"] = [{"group": "g", "kind": "k"}]
    obj["spec"]["rules"] = [{"backendRefs": [{"group": "g", "kind": "k"}]}]
    before = copy.deepcopy(obj)
    out = api_defaults(obj)
    assert obj == before
    assert out["spec"]["type"] == "NodePort"
    assert out["spec"]["ports"][0]["targetPort"] == 2
    assert out["spec"]["listeners"] == before["spec"]["listeners"]
    assert out["spec"]["parentRefs"] == before["spec"]["parentRefs"]
    assert out["spec"]["rules"] == before["spec"]["rules"]


def test_every_difference_is_used_and_explained() -> None:
    source = pathlib.Path(__file__).read_text()
    for name, reason in DIFFERENCES.items():
        assert source.count(f'DIFFERENCES["{name}"]') >= 1, f"difference {name} is never applied"
        assert len(reason) > 40
