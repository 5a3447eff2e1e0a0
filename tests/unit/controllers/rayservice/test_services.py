"""controllers.rayservice.services: the RayService's head and serve Services, and retargeting."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controllers.rayservice import services
from runtime import objects
from tests.unit import helpers

Obj = dict[str, Any]
GOLDEN = helpers.TESTDATA / "kuberay-v1.7.0" / "ray-service.sample.json"


def service(**spec: Any) -> Obj:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "demo", "namespace": "ns", "uid": "svc-uid"},
        "spec": {"rayClusterConfig": {"headGroupSpec": {"template": {}}}, **spec},
    }


def cluster(name: str = "demo-abcde", ports: list[Obj] | None = None, **spec: Any) -> Obj:
    container: Obj = {"name": "ray-head", "image": "rayproject/ray"}
    if ports is not None:
        container["ports"] = ports
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "namespace": "ns", "uid": f"{name}-uid"},
        "spec": {"headGroupSpec": {"template": {"spec": {"containers": [container]}}}, **spec},
    }


OWNER = {
    "apiVersion": "ray.io/v1",
    "kind": "RayService",
    "name": "demo",
    "uid": "svc-uid",
    "controller": True,
    "blockOwnerDeletion": True,
}


def frozen(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True)


# --- names ---------------------------------------------------------------------------------------


def test_names() -> None:
    assert services.head_service_name("demo") == "demo-head-svc"
    assert services.serve_service_name(service()) == "demo-serve-svc"
    assert services.serve_service_name(service(serveService={"metadata": {"name": "x"}})) == "x"
    assert services.serve_service_name(service(serveService={"metadata": {}})) == "demo-serve-svc"
    assert (services.HEAD_SUFFIX, services.SERVE_SUFFIX) == ("-head-svc", "-serve-svc")


def test_selected_cluster() -> None:
    assert services.selected_cluster({"spec": {"selector": {"ray.io/cluster": "c"}}}) == "c"
    assert services.selected_cluster({"spec": {"selector": {"app": "c"}}}) is None
    assert services.selected_cluster({"spec": {}}) is None
    assert services.selected_cluster({}) is None


def test_the_services_are_controlled_by_the_rayservice() -> None:
    svc = service()
    owned = services.head_service(svc, cluster())
    assert objects.is_controlled_by(owned, svc)
    other = service()
    other["metadata"]["uid"] = "other"
    assert not objects.is_controlled_by(owned, other)
    owned["metadata"]["ownerReferences"][0]["controller"] = False
    assert not objects.is_controlled_by(owned, svc)
    assert not objects.is_controlled_by({"metadata": {}}, svc)


# --- head service --------------------------------------------------------------------------------


def test_head_service_points_at_the_clusters_head_with_the_services_labels() -> None:
    svc = services.head_service(service(), cluster(), created_by="kuberay-operator")
    assert svc["metadata"]["name"] == "demo-head-svc"
    assert svc["metadata"]["namespace"] == "ns"
    assert svc["metadata"]["labels"] == {
        "ray.io/originated-from-cr-name": "demo",
        "ray.io/originated-from-crd": "RayService",
        "ray.io/node-type": "head",
        "ray.io/identifier": "demo-head",
    }
    assert svc["spec"]["selector"] == {
        "app.kubernetes.io/created-by": "kuberay-operator",
        "app.kubernetes.io/name": "kuberay",
        "ray.io/cluster": "demo-abcde",
        "ray.io/identifier": "demo-abcde-head",
        "ray.io/node-type": "head",
    }
    assert svc["metadata"]["ownerReferences"] == [OWNER]
    assert services.selected_cluster(svc) == "demo-abcde"


def test_head_service_spec_is_the_clusters_head_service_spec() -> None:
    # KubeRay builds it from the cluster's own head service: compare with what KubeRay created
    # for its sample cluster (ports, headless-ness, selector), server defaults left aside.
    golden = json.loads(GOLDEN.read_text())
    recorded = golden["created"]["services"][0]
    rc = golden["raycluster"]
    rs = service()
    rs["metadata"].update(name="rayservice-sample", namespace="ray-service-sample")
    svc = services.head_service(rs, rc, created_by="kuberay-operator")
    assert svc["metadata"]["name"] == "rayservice-sample-head-svc"
    assert svc["metadata"]["namespace"] == "ray-service-sample"
    assert svc["spec"]["selector"] == recorded["spec"]["selector"]
    assert [(p["name"], p["port"], p["appProtocol"]) for p in svc["spec"]["ports"]] == [
        (p["name"], p["port"], p["appProtocol"]) for p in recorded["spec"]["ports"]
    ]
    assert svc["spec"]["clusterIP"] == recorded["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True


def test_head_service_takes_no_head_service_annotations() -> None:
    c = cluster(headServiceAnnotations={"a": "b"})
    svc = services.head_service(service(), c)
    assert "annotations" not in svc["metadata"]


def test_head_service_from_a_head_service_template() -> None:
    template = {
        "metadata": {"labels": {"mine": "x"}, "annotations": {"note": "y"}},
        "spec": {"type": "NodePort", "ports": [{"name": "extra", "port": 1234}]},
    }
    c = cluster()
    c["spec"]["headGroupSpec"]["headService"] = template
    svc = services.head_service(service(), c)
    assert svc["metadata"]["name"] == "demo-head-svc"
    assert svc["metadata"]["annotations"] == {"note": "y"}
    assert svc["metadata"]["labels"]["ray.io/originated-from-cr-name"] == "demo"
    assert "mine" not in svc["metadata"]["labels"]  # KubeRay replaces the labels of a RayService's
    assert svc["spec"]["type"] == "NodePort"
    assert "clusterIP" not in svc["spec"]
    assert svc["spec"]["ports"][0] == {"name": "extra", "port": 1234}
    assert services.selected_cluster(svc) == "demo-abcde"


def test_head_service_does_not_modify_its_arguments() -> None:
    s, c = service(), cluster(headServiceAnnotations={"a": "b"})
    before = frozen([s, c])
    out = services.head_service(s, c)
    out["spec"]["selector"]["ray.io/cluster"] = "changed"
    assert frozen([s, c]) == before


# --- serve service -------------------------------------------------------------------------------


def test_serve_service_default_shape() -> None:
    svc = services.serve_service(service(), cluster())
    assert svc == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "demo-serve-svc",
            "namespace": "ns",
            "labels": {
                "ray.io/originated-from-cr-name": "demo",
                "ray.io/originated-from-crd": "RayService",
                "ray.io/serve": "demo-serve",
            },
            "ownerReferences": [OWNER],
        },
        "spec": {
            "selector": {"ray.io/cluster": "demo-abcde", "ray.io/serve": "true"},
            "ports": [{"name": "serve", "port": 8000}],
        },
    }


def test_serve_service_port_and_type() -> None:
    ports = [{"name": "dashboard", "containerPort": 8265}, {"name": "serve", "containerPort": 9000}]
    rs = service()
    rs["spec"]["rayClusterConfig"]["headGroupSpec"]["serviceType"] = "LoadBalancer"
    svc = services.serve_service(rs, cluster(ports=ports))
    assert svc["spec"]["ports"] == [{"name": "serve", "port": 9000}]
    # The type is the RayService's (KubeRay reads it from rayClusterConfig, not the cluster).
    assert svc["spec"]["type"] == "LoadBalancer"


def test_serve_service_without_a_serve_port_is_refused() -> None:
    with pytest.raises(ValueError, match="none named 'serve'"):
        services.serve_service(service(), cluster(ports=[{"name": "gcs", "containerPort": 6379}]))


def test_serve_service_from_a_template() -> None:
    template = {
        "metadata": {
            "name": "custom-serve",
            "namespace": "elsewhere",
            "labels": {"team": "a", "ray.io/serve": "mine"},
            "annotations": {"lb": "internal"},
        },
        "spec": {
            "type": "NodePort",
            "selector": {"app": "ignored"},
            "ports": [{"name": "http", "port": 80}],
        },
    }
    rs = service(serveService=template)
    before = frozen(rs)
    svc = services.serve_service(rs, cluster())
    assert frozen(rs) == before
    assert svc["metadata"]["name"] == "custom-serve" == services.serve_service_name(rs)
    assert svc["metadata"]["namespace"] == "ns"
    assert svc["metadata"]["labels"] == {
        "team": "a",
        "ray.io/originated-from-cr-name": "demo",
        "ray.io/originated-from-crd": "RayService",
        "ray.io/serve": "demo-serve",
    }
    assert svc["metadata"]["annotations"] == {"lb": "internal"}
    assert svc["spec"]["selector"] == {"ray.io/cluster": "demo-abcde", "ray.io/serve": "true"}
    # The cluster has a serve port (KubeRay's defaults): the template's ports are replaced.
    assert svc["spec"]["ports"] == [{"name": "serve", "port": 8000}]
    assert svc["spec"]["type"] == "NodePort"
    assert svc["metadata"]["ownerReferences"] == [OWNER]
    assert (svc["apiVersion"], svc["kind"]) == ("v1", "Service")


def test_serve_service_template_supplies_the_port_when_the_head_has_none() -> None:
    template = {
        "spec": {
            "ports": [
                {"name": "http", "port": 80},
                {"name": "serve", "port": 8443, "targetPort": 8000, "nodePort": 30001},
            ]
        }
    }
    rs = service(serveService=template)
    rs["spec"]["rayClusterConfig"]["headGroupSpec"]["serviceType"] = "ClusterIP"
    svc = services.serve_service(rs, cluster(ports=[{"name": "gcs", "containerPort": 6379}]))
    # KubeRay v1.7.0 keeps the template's ports as given when the head has no serving one
    assert svc["spec"]["ports"] == template["spec"]["ports"]
    assert svc["metadata"]["name"] == "demo-serve-svc"
    assert svc["spec"]["type"] == "ClusterIP"


def test_serve_service_has_every_serving_port_sorted() -> None:
    """``serve`` and ``serve-<protocol>`` (KubeRay v1.7.0), by name; no other port."""
    ports = [
        {"name": "serve-grpc", "containerPort": 9000},
        {"name": "gcs", "containerPort": 6379},
        {"name": "serve", "containerPort": 8000},
        {"name": "server", "containerPort": 7000},
    ]
    svc = services.serve_service(service(), cluster(ports=ports))
    assert svc["spec"]["ports"] == [
        {"name": "serve", "port": 8000},
        {"name": "serve-grpc", "port": 9000},
    ]
    only_grpc = cluster(ports=[{"name": "serve-grpc", "containerPort": 9000}])
    assert services.serve_service(service(), only_grpc)["spec"]["ports"] == [
        {"name": "serve-grpc", "port": 9000}
    ]


def test_serve_service_template_ports_of_the_same_name_win() -> None:
    """KubeRay v1.7.0 merges by name, keeping e.g. the template's appProtocol for gRPC."""
    grpc = {"name": "serve-grpc", "port": 9000, "appProtocol": "kubernetes.io/h2c"}
    template = {"spec": {"ports": [grpc, {"name": "other", "port": 1}]}}
    ports = [
        {"name": "serve", "containerPort": 8000},
        {"name": "serve-grpc", "containerPort": 9000},
    ]
    svc = services.serve_service(service(serveService=template), cluster(ports=ports))
    assert svc["spec"]["ports"] == [{"name": "serve", "port": 8000}, grpc]


# --- retargeted ----------------------------------------------------------------------------------


def live(desired: Obj) -> Obj:
    """``desired`` as the API server would hold it."""
    out: Obj = json.loads(json.dumps(desired))
    out["metadata"].update(resourceVersion="7", uid="svc-obj-uid")
    out["spec"].update(
        clusterIP="198.19.0.12",
        clusterIPs=["198.19.0.12"],
        ipFamilies=["IPv4"],
        ipFamilyPolicy="SingleStack",
        sessionAffinity="None",
    )
    return out


def test_retargeted_is_none_for_the_same_cluster_whatever_else_differs() -> None:
    current = live(services.serve_service(service(), cluster("demo-abcde")))
    current["spec"]["ports"] = [{"name": "serve", "port": 1}]
    current["metadata"]["labels"] = {}
    desired = services.serve_service(service(), cluster("demo-abcde"))
    assert services.retargeted(current, desired) is None


def test_retargeted_switches_the_selector_and_keeps_the_cluster_ip() -> None:
    current = live(services.serve_service(service(), cluster("demo-old")))
    before = frozen(current)
    desired = services.serve_service(service(), cluster("demo-new"))
    updated = services.retargeted(current, desired)
    assert updated is not None
    assert frozen(current) == before
    assert updated["spec"]["selector"] == {"ray.io/cluster": "demo-new", "ray.io/serve": "true"}
    assert updated["spec"]["clusterIP"] == "198.19.0.12"
    assert updated["spec"]["clusterIPs"] == ["198.19.0.12"]
    assert updated["spec"]["ipFamilies"] == ["IPv4"]
    assert updated["metadata"] == current["metadata"]  # resourceVersion kept for the update
    assert services.selected_cluster(updated) == "demo-new"
    # Everything else in the spec is the desired one (KubeRay replaces the spec).
    assert "sessionAffinity" not in updated["spec"]
    updated["spec"]["selector"]["x"] = "y"
    assert "x" not in desired["spec"]["selector"]


def test_retargeted_takes_the_new_clusters_ports() -> None:
    current = live(services.head_service(service(), cluster("demo-old")))
    new = cluster("demo-new", ports=[{"name": "serve", "containerPort": 8000}])
    updated = services.retargeted(current, services.head_service(service(), new))
    assert updated is not None
    assert [p["name"] for p in updated["spec"]["ports"]] == ["metrics", "serve"]
    assert updated["spec"]["clusterIP"] == "198.19.0.12"


def test_retargeted_keeps_node_ports_of_the_same_type() -> None:
    rs = service()
    rs["spec"]["rayClusterConfig"]["headGroupSpec"]["serviceType"] = "NodePort"
    current = live(services.serve_service(rs, cluster("demo-old")))
    current["spec"]["ports"][0]["nodePort"] = 30080
    updated = services.retargeted(current, services.serve_service(rs, cluster("demo-new")))
    assert updated is not None
    assert updated["spec"]["ports"] == [{"name": "serve", "port": 8000, "nodePort": 30080}]


def test_retargeted_drops_node_ports_when_the_type_changes() -> None:
    node_port = service()
    node_port["spec"]["rayClusterConfig"]["headGroupSpec"]["serviceType"] = "NodePort"
    current = live(services.serve_service(node_port, cluster("demo-old")))
    current["spec"]["ports"][0]["nodePort"] = 30080
    updated = services.retargeted(current, services.serve_service(service(), cluster("demo-new")))
    assert updated is not None
    assert updated["spec"]["ports"] == [{"name": "serve", "port": 8000}]
    assert updated["spec"]["clusterIP"] == "198.19.0.12"


def test_retargeted_from_a_foreign_selector() -> None:
    current = {"metadata": {"name": "demo-serve-svc"}, "spec": {"selector": {"app": "x"}}}
    desired = services.serve_service(service(), cluster())
    updated = services.retargeted(current, desired)
    assert updated is not None
    assert services.selected_cluster(updated) == "demo-abcde"
