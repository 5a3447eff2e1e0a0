"""Service templates hold only what users set on a head or serve Service in practice.

The operator creates these Services with its own rights: a template that makes the
head Service an ``ExternalName`` alias for another tenant's head (which the operator
then reaches as "the dashboard"), or that claims ``externalIPs``, is refused with the
field named, on the RayCluster and on the RayService.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from api import v1
from controllers.raycluster import validation as raycluster_validation
from controllers.rayservice import validation


def _config(**head: Any) -> dict[str, Any]:
    containers = [{"name": "ray-head", "image": "rayproject/ray"}]
    return {"headGroupSpec": {"template": {"spec": {"containers": containers}}, **head}}


def make(*, head: dict[str, Any]) -> v1.RayCluster:
    return v1.RayCluster.model_validate(
        {"metadata": {"name": "demo", "namespace": "ns"}, "spec": _config(**head)}
    )


def service(**spec: Any) -> dict[str, Any]:
    serve = "applications:\n- name: a\n  import_path: m.a\n"
    return {
        "metadata": {"name": "svc", "namespace": "ns", "uid": "u"},
        "spec": {"rayClusterConfig": _config(), "serveConfigV2": serve, **spec},
    }


VICTIM = "victim-raycluster-head-svc.tenant-b.svc.cluster.local"

REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"spec": {"type": "ExternalName", "externalName": VICTIM}}, "spec.type 'ExternalName'"),
    ({"spec": {"externalName": VICTIM}}, "spec.externalName is not allowed"),
    ({"spec": {"externalIPs": ["198.51.100.7"]}}, "spec.externalIPs is not allowed"),
    ({"spec": {"type": "LoadBalancer", "loadBalancerIP": "198.51.100.7"}}, "loadBalancerIP"),
    ({"spec": {"loadBalancerSourceRanges": ["0.0.0.0/0"]}}, "only with type 'LoadBalancer'"),
    ({"spec": {"selector": {"app": "other"}}}, "spec.selector is not allowed"),
    ({"spec": {"clusterIP": "198.19.0.9"}}, "spec.clusterIP '198.19.0.9'"),
    ({"spec": {"ports": [{"name": "x", "port": 1, "hostPort": 2}]}}, "ports[0].hostPort"),
    ({"metadata": {"ownerReferences": []}}, "metadata.ownerReferences is not allowed"),
    ({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}}, ".status is not allowed"),
]

ALLOWED: list[dict[str, Any]] = [
    # a zero status, as KubeRay's Go encoding writes it back into a RayJob or RayCluster
    {"spec": {"type": "ClusterIP"}, "status": {"loadBalancer": {}}},
    {"metadata": {"labels": {"a": "b"}, "annotations": {"c": "d"}}, "spec": {"type": "NodePort"}},
    {
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerSourceRanges": ["198.51.100.0/24"],
            "externalTrafficPolicy": "Local",
            "ports": [{"name": "serve", "port": 8000, "targetPort": 8000, "protocol": "TCP"}],
        }
    },
    {"spec": {"clusterIP": "None", "publishNotReadyAddresses": True}},
]


@pytest.mark.parametrize(("template", "fragment"), REFUSED)
def test_the_raycluster_head_service_template_is_refused(
    template: dict[str, Any], fragment: str
) -> None:
    found = raycluster_validation.problems(make(head={"headService": template}))
    assert any(fragment in p and "headGroupSpec.headService" in p for p in found), found


@pytest.mark.parametrize(("template", "fragment"), REFUSED)
def test_the_rayservice_templates_are_refused(template: dict[str, Any], fragment: str) -> None:
    serve = service(serveService=copy.deepcopy(template))
    assert any(fragment in p and p.startswith("spec.serveService") for p in
               validation.problems(serve)), validation.problems(serve)  # fmt: skip
    head = service()
    head["spec"]["rayClusterConfig"]["headGroupSpec"]["headService"] = copy.deepcopy(template)
    found = validation.problems(head)
    assert any(
        fragment in p and p.startswith("spec.rayClusterConfig: headGroupSpec.headService")
        for p in found
    ), found


@pytest.mark.parametrize("template", ALLOWED)
def test_templates_as_users_write_them_are_accepted(template: dict[str, Any]) -> None:
    assert raycluster_validation.problems(make(head={"headService": template})) == []
    assert validation.problems(service(serveService=copy.deepcopy(template))) == []


def test_service_type_externalname_is_refused_too() -> None:
    found = raycluster_validation.problems(make(head={"serviceType": "ExternalName"}))
    assert found == [
        "headGroupSpec.serviceType 'ExternalName' is not allowed "
        "(one of 'ClusterIP', 'NodePort', 'LoadBalancer')"
    ]
