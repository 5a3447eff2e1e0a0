"""Head, serve and headless Services: KubeRay v1.5.0's semantics."""

from __future__ import annotations

from typing import Any

import pytest

from api import v1
from controllers.raycluster import services


def make(
    *,
    ports: list[dict[str, Any]] | None = None,
    head: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    template_labels: dict[str, str] | None = None,
    **spec: Any,
) -> v1.RayCluster:
    container: dict[str, Any] = {"name": "ray-head", "image": "ray"}
    if ports is not None:
        container["ports"] = ports
    template: dict[str, Any] = {"spec": {"containers": [container]}}
    if template_labels:
        template["metadata"] = {"labels": template_labels}
    return v1.RayCluster.model_validate(
        {
            "metadata": {"name": "demo", "namespace": "ns", **(metadata or {})},
            "spec": {"headGroupSpec": {"template": template, **(head or {})}, **spec},
        }
    )


SAMPLE_PORTS = [
    {"name": "gcs-server", "containerPort": 6379},
    {"name": "dashboard", "containerPort": 8265},
    {"name": "client", "containerPort": 10001},
]


def test_head_service_is_headless_with_sorted_ports_and_kuberay_selector() -> None:
    svc = services.head_service(make(ports=SAMPLE_PORTS), created_by="op")
    labels = {
        "ray.io/cluster": "demo",
        "ray.io/node-type": "head",
        "ray.io/identifier": "demo-head",
        "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": "op",
    }
    assert svc == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "demo-head-svc", "namespace": "ns", "labels": labels},
        "spec": {
            "selector": labels,
            "ports": [
                {"name": "client", "port": 10001, "appProtocol": "tcp"},
                {"name": "dashboard", "port": 8265, "appProtocol": "tcp"},
                {"name": "gcs-server", "port": 6379, "appProtocol": "tcp"},
                {"name": "metrics", "port": 8080, "appProtocol": "tcp"},
            ],
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
        },
    }


def test_port_order_in_the_template_does_not_matter() -> None:
    forward = services.head_service(make(ports=SAMPLE_PORTS))
    backward = services.head_service(make(ports=list(reversed(SAMPLE_PORTS))))
    assert forward == backward


def test_default_ports_when_the_container_has_none_and_unnamed_ports() -> None:
    svc = services.head_service(make())
    assert [(p["name"], p["port"]) for p in svc["spec"]["ports"]] == [
        ("client", 10001),
        ("dashboard", 8265),
        ("gcs-server", 6379),
        ("metrics", 8080),
        ("serve", 8000),
    ]
    svc = services.head_service(make(ports=[{"containerPort": 7000}]))
    assert [p["name"] for p in svc["spec"]["ports"]] == ["7000-port", "metrics"]


def test_service_type_annotations_and_template_app_name() -> None:
    cluster = make(
        ports=SAMPLE_PORTS,
        head={"serviceType": "NodePort"},
        headServiceAnnotations={"a": "b"},
        template_labels={"app.kubernetes.io/name": "mine", "other": "x"},
    )
    svc = services.head_service(cluster)
    assert svc["spec"]["type"] == "NodePort"
    assert "clusterIP" not in svc["spec"]
    assert "publishNotReadyAddresses" not in svc["spec"]
    assert svc["metadata"]["annotations"] == {"a": "b"}
    assert svc["spec"]["selector"]["app.kubernetes.io/name"] == "mine"
    assert "other" not in svc["spec"]["selector"]
    explicit = services.head_service(make(ports=SAMPLE_PORTS, head={"serviceType": "ClusterIP"}))
    assert explicit["spec"]["type"] == "ClusterIP"
    assert explicit["spec"]["clusterIP"] == "None"


def test_custom_head_service_template() -> None:
    cluster = make(
        ports=[{"name": "dashboard", "containerPort": 8265}, {"name": "b", "containerPort": 1}],
        head={
            "serviceType": "LoadBalancer",
            "headService": {
                "metadata": {
                    "name": "custom",
                    "namespace": "elsewhere",
                    "labels": {"mine": "1", "ray.io/cluster": "evil"},
                    "annotations": {"x": "template", "y": "kept"},
                },
                "spec": {
                    "selector": {"evil": "yes"},
                    "ports": [{"name": "extra", "port": 1234}],
                },
            },
        },
        headServiceAnnotations={"x": "cluster"},
    )
    svc = services.head_service(cluster)
    assert svc["metadata"]["name"] == "custom"
    assert svc["metadata"]["namespace"] == "ns"
    assert svc["metadata"]["labels"]["mine"] == "1"
    assert svc["metadata"]["labels"]["ray.io/cluster"] == "demo"
    assert svc["metadata"]["annotations"] == {"x": "cluster", "y": "kept"}
    assert "evil" not in svc["spec"]["selector"]
    assert svc["spec"]["type"] == "LoadBalancer"
    assert "clusterIP" not in svc["spec"]
    assert [p["name"] for p in svc["spec"]["ports"]] == ["extra", "b", "dashboard", "metrics"]
    # the template is not modified
    assert cluster.spec.head_group_spec.head_service is not None
    assert cluster.spec.head_group_spec.head_service["spec"]["ports"] == [
        {"name": "extra", "port": 1234}
    ]


def test_custom_head_service_without_name_or_type_gets_the_defaults() -> None:
    cluster = make(ports=SAMPLE_PORTS, head={"headService": {"spec": {"type": ""}}})
    svc = services.head_service(cluster)
    assert svc["metadata"]["name"] == "demo-head-svc"
    assert not svc["spec"].get("type")


def test_serve_service() -> None:
    cluster = make(
        ports=[*SAMPLE_PORTS, {"name": "serve", "containerPort": 9000}],
        metadata={"annotations": {"ray.io/enable-serve-service": "true"}},
    )
    assert services.serve_service(cluster) == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "demo-serve-svc",
            "namespace": "ns",
            "labels": {
                "ray.io/originated-from-cr-name": "demo",
                "ray.io/originated-from-crd": "RayCluster",
                "ray.io/serve": "demo-serve",
            },
        },
        "spec": {
            "selector": {"ray.io/cluster": "demo"},
            "ports": [{"name": "serve", "port": 9000}],
        },
    }
    assert services.serve_service(make())["spec"]["ports"] == [{"name": "serve", "port": 8000}]
    with pytest.raises(ValueError, match="serve"):
        services.serve_service(make(ports=SAMPLE_PORTS))


def test_serve_service_takes_serve_prefixed_ports_too() -> None:
    """KubeRay v1.7.0: ``serve-<protocol>`` ports (gRPC) join ``serve``; sorted by name here
    (Go map order there)."""
    ports = [
        {"name": "serve-grpc", "containerPort": 9000},
        {"name": "serve", "containerPort": 8000},
    ]
    assert services.serve_service(make(ports=[*SAMPLE_PORTS, *ports]))["spec"]["ports"] == [
        {"name": "serve", "port": 8000},
        {"name": "serve-grpc", "port": 9000},
    ]


def test_headless_worker_service_for_multi_host_groups() -> None:
    template = {"spec": {"containers": [{"name": "w"}]}}
    single = make(workerGroupSpecs=[{"groupName": "a", "template": template}])
    multi = make(workerGroupSpecs=[{"groupName": "a", "template": template, "numOfHosts": 2}])
    assert not services.needs_headless_worker_service(single)
    assert services.needs_headless_worker_service(multi)
    assert services.headless_worker_service(multi) == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "demo-headless",
            "namespace": "ns",
            "labels": {"ray.io/headless-worker-svc": "demo"},
        },
        "spec": {
            "clusterIP": "None",
            "selector": {"ray.io/cluster": "demo", "ray.io/node-type": "worker"},
            "type": "ClusterIP",
            "publishNotReadyAddresses": True,
        },
    }


def test_endpoints_from_a_stored_service() -> None:
    stored = {
        "spec": {
            "ports": [
                {"name": "dashboard", "port": 8265, "targetPort": 8265},
                {"name": "client", "port": 10001, "targetPort": 10001, "nodePort": 31000},
                {"name": "named", "port": 1, "targetPort": "http"},
                {"port": 2, "targetPort": 2},
            ]
        }
    }
    assert services.endpoints(stored) == {"dashboard": "8265", "client": "31000", "named": "http"}
    assert services.endpoints({}) == {}


def test_no_head_container_is_a_value_error() -> None:
    cluster = v1.RayCluster.model_validate(
        {"metadata": {"name": "x"}, "spec": {"headGroupSpec": {"template": {}}}}
    )
    with pytest.raises(ValueError, match="container"):
        services.head_service(cluster)
