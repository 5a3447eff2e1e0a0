"""Fail closed: a spec field this operator does not act on is refused, naming it.

A security option accepted and ignored (``tlsOptions``, ``networkPolicy``) would leave a
cluster open that its author thinks is closed; the same holds for every option not
implemented. (``authOptions`` is implemented: ``test_auth.py``.)
"""

from __future__ import annotations

from typing import Any

import pytest

from api import v1
from controllers.raycluster import validation as raycluster_validation
from controllers.rayservice import validation


def cluster_spec(**extra: Any) -> dict[str, Any]:
    head = {"template": {"spec": {"containers": [{"name": "ray-head", "image": "ray"}]}}}
    head.update(extra.pop("head", {}))
    return {"headGroupSpec": head, **extra}


UNSUPPORTED: list[tuple[dict[str, Any], str]] = [
    ({"tlsOptions": {"enabled": True}}, "tlsOptions is not supported"),
    ({"networkPolicy": {"enabled": True}}, "networkPolicy is not supported"),
    ({"historyServerOptions": {"image": "x"}}, "historyServerOptions is not supported"),
    ({"head": {"enableIngress": True}}, "headGroupSpec.enableIngress is not supported"),
    ({"head": {"ingressOptions": {"className": "x"}}}, "ingressOptions is not supported"),
    ({"upgradeStrategy": {"type": "Recreate"}}, "upgradeStrategy.type 'Recreate'"),
]


@pytest.mark.parametrize(("extra", "fragment"), UNSUPPORTED)
def test_an_unsupported_field_is_refused_on_a_raycluster(
    extra: dict[str, Any], fragment: str
) -> None:
    cluster = v1.RayCluster.model_validate(
        {"metadata": {"name": "demo", "namespace": "ns"}, "spec": cluster_spec(**dict(extra))}
    )
    found = raycluster_validation.problems(cluster)
    assert [p for p in found if fragment in p], found


@pytest.mark.parametrize(("extra", "fragment"), UNSUPPORTED)
def test_and_in_a_rayservice_cluster_config(extra: dict[str, Any], fragment: str) -> None:
    service = {"metadata": {"name": "svc", "namespace": "ns"},
               "spec": {"rayClusterConfig": cluster_spec(**dict(extra))}}  # fmt: skip
    found = validation.problems(service)
    assert [p for p in found if fragment in p and p.startswith("spec.rayClusterConfig")], found


@pytest.mark.parametrize(
    "extra",
    [{"authOptions": {"mode": "disabled"}}, {"upgradeStrategy": {"type": "None"}},
     {"head": {"enableIngress": False}}, {"tlsOptions": {}}],
)  # fmt: skip
def test_the_off_values_are_accepted(extra: dict[str, Any]) -> None:
    cluster = v1.RayCluster.model_validate(
        {"metadata": {"name": "demo", "namespace": "ns"}, "spec": cluster_spec(**dict(extra))}
    )
    assert raycluster_validation.problems(cluster) == []


def test_incremental_upgrade_options_are_typed_and_checked_only_for_that_strategy() -> None:
    strategy: dict[str, Any] = {
        "type": "NewCluster",
        "clusterUpgradeOptions": {"maxSurgePercent": 50},
    }
    spec = {"rayClusterConfig": cluster_spec(), "upgradeStrategy": strategy}
    service = {"metadata": {"name": "svc", "namespace": "ns"}, "spec": spec}
    # the CRD's required fields, named (the API server refuses the same)
    problems = validation.problems(service)
    for field in ("stepSizePercent", "intervalSeconds", "gatewayClassName"):
        assert any(field in p for p in problems), (field, problems)
    # complete options beside another strategy are kept, not acted on (KubeRay's rule)
    strategy["clusterUpgradeOptions"] = {
        "maxSurgePercent": 0, "stepSizePercent": 50, "intervalSeconds": 0, "gatewayClassName": "",
    }  # fmt: skip
    assert validation.problems(service) == []
