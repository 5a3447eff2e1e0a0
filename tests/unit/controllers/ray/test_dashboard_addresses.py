"""controllers.ray.dashboard addresses: each mode's URLs, as KubeRay v1.5.0 builds them."""

from __future__ import annotations

from typing import Any

import pytest

from controllers.ray import dashboard

POD = dashboard.ServePod(namespace="ray", name="demo-head-x7k2p", ip="198.18.1.7")


def test_service_mode_is_the_default_and_uses_the_head_service_fqdn() -> None:
    a = dashboard.address(cluster="demo", namespace="ray")
    assert a.mode == "service"
    assert a.applications_url == (
        "http://demo-head-svc.ray.svc.cluster.local:8265/api/serve/applications/"
    )
    # KubeRay checks the Serve proxy at the pod's IP even in this mode
    assert a.healthz_url(POD) == "http://198.18.1.7:8000/-/healthz"
    assert not a.via_api_server


def test_service_mode_honours_domain_service_name_and_port() -> None:
    a = dashboard.address(
        "service", cluster="demo", namespace="ray", head_service="custom-svc",
        cluster_domain="corp.example", dashboard_port=18265,
    )  # fmt: skip
    assert a.dashboard == "http://custom-svc.ray.svc.corp.example:18265"


def test_pod_ip_mode_uses_the_head_pod_ip() -> None:
    a = dashboard.address("pod-ip", cluster="demo", namespace="ray", head_pod_ip="198.18.1.7")
    assert a.applications_url == "http://198.18.1.7:8265/api/serve/applications/"
    assert a.healthz_url(POD) == "http://198.18.1.7:8000/-/healthz"


def test_ipv6_addresses_are_bracketed() -> None:
    a = dashboard.address("pod-ip", cluster="demo", namespace="ray", head_pod_ip="fd00::7")
    assert a.dashboard == "http://[fd00::7]:8265"
    pod = dashboard.ServePod(namespace="ray", name="p", ip="fd00::7", port=9000)
    assert a.healthz_url(pod) == "http://[fd00::7]:9000/-/healthz"


def test_pod_ip_mode_without_an_ip_is_refused() -> None:
    with pytest.raises(ValueError, match="head pod's IP"):
        dashboard.address("pod-ip", cluster="demo", namespace="ray", head_pod_ip=None)


def test_kubernetes_proxy_mode_goes_through_the_api_servers_subresources() -> None:
    a = dashboard.address("kubernetes-proxy", cluster="demo", namespace="ray")
    assert a.via_api_server
    # the service's port by its name, "dashboard", as KubeRay's --use-kubernetes-proxy
    assert a.applications_url == (
        "/api/v1/namespaces/ray/services/demo-head-svc:dashboard/proxy/api/serve/applications/"
    )
    assert a.healthz_url(POD) == "/api/v1/namespaces/ray/pods/demo-head-x7k2p:8000/proxy/-/healthz"
    # a pod without an IP is still reachable by name through the API server
    no_ip = dashboard.ServePod(namespace="ray", name="demo-head-x7k2p", ip=None, port=8001)
    assert a.healthz_url(no_ip).endswith("/pods/demo-head-x7k2p:8001/proxy/-/healthz")


def test_kubernetes_proxy_mode_uses_a_custom_head_service_name() -> None:
    a = dashboard.address("kubernetes-proxy", cluster="d", namespace="n", head_service="mine")
    assert a.dashboard == "/api/v1/namespaces/n/services/mine:dashboard/proxy"


def test_an_unknown_mode_is_refused_naming_the_modes() -> None:
    with pytest.raises(ValueError, match="service, pod-ip, kubernetes-proxy"):
        dashboard.address("ingress", cluster="d", namespace="n")  # type: ignore[arg-type]


def test_direct_health_urls_need_an_ip() -> None:
    a = dashboard.address(cluster="demo", namespace="ray")
    with pytest.raises(ValueError, match="no IP yet"):
        a.healthz_url(dashboard.ServePod(namespace="ray", name="p", ip=None))


def _pod(ports: list[dict[str, Any]] | None, ip: str | None = "198.18.1.9") -> dict[str, Any]:
    container: dict[str, Any] = {"name": "ray-head"}
    if ports is not None:
        container["ports"] = ports
    status = {"podIP": ip} if ip else {}
    return {
        "metadata": {"name": "h", "namespace": "ns"},
        "spec": {"containers": [container, {"name": "sidecar", "ports": [
            {"name": "serve", "containerPort": 1}]}]},
        "status": status,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("ports", "expected"),
    [
        (None, 8000),
        ([{"name": "dashboard", "containerPort": 8265}], 8000),
        ([{"name": "dashboard", "containerPort": 8265}, {"name": "serve", "containerPort": 9}], 9),
    ],
)
def test_the_serve_port_is_the_ray_containers_port_named_serve(
    ports: list[dict[str, Any]] | None, expected: int
) -> None:
    # the first container is Ray's (a sidecar's "serve" port does not count)
    assert dashboard.serve_pod(_pod(ports)).port == expected


def test_a_pod_object_becomes_a_serve_pod() -> None:
    assert dashboard.serve_pod(_pod(None)) == dashboard.ServePod("ns", "h", "198.18.1.9", 8000)
    assert dashboard.serve_pod(_pod(None, ip=None)).ip is None
    assert dashboard.serve_pod(POD) is POD
