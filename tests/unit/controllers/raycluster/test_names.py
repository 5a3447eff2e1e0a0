"""Names, their limits, and the problems that stop a cluster's objects from being created."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from api import v1
from controllers.raycluster import names
from controllers.raycluster import validation as raycluster_validation


def make(
    name: str = "demo", *, annotations: dict[str, str] | None = None, **spec: Any
) -> v1.RayCluster:
    head = spec.pop("head", {})
    head_container = spec.pop("head_container", {"name": "ray-head", "image": "ray"})
    data: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns", "annotations": annotations or {}},
        "spec": {
            "headGroupSpec": {
                "template": {"spec": {"containers": [head_container] if head_container else []}},
                **head,
            },
            **spec,
        },
    }
    return v1.RayCluster.model_validate(data)


def group(name: str = "g", **extra: Any) -> dict[str, Any]:
    return {"groupName": name, "template": {"spec": {"containers": [{"name": "w"}]}}, **extra}


def test_service_names() -> None:
    assert names.head_service_name("c") == "c-head-svc"
    assert names.serve_service_name("c") == "c-serve-svc"
    assert names.headless_service_name("c") == "c-headless"
    custom = make(head={"headService": {"metadata": {"name": "mine"}}})
    assert names.head_service_name_for(custom) == "mine"
    assert names.head_service_name_for(make()) == "demo-head-svc"
    assert names.head_fqdn(make(), "k8s.local") == "demo-head-svc.ns.svc.k8s.local"


def test_pod_prefixes_are_cut_to_50_and_lower_cased() -> None:
    assert names.head_pod_prefix("Demo") == "demo-head-"
    long_cluster = "c" * 53
    assert names.head_pod_prefix(long_cluster) == "c" * 50 + "-head-"
    assert names.worker_pod_prefix(long_cluster, "g") == "c" * 50 + "-worker-"
    assert names.worker_pod_prefix("ab", "x" * 60) == ("ab-" + "x" * 60)[:50] + "-worker-"
    # KubeRay's arithmetic: a generated name (prefix + 5 characters) fits in 63
    assert len(names.worker_pod_prefix(long_cluster, "g" * 63)) + 5 == 63


def test_identifier_and_clipping() -> None:
    assert names.identifier("demo", "head") == "demo-head"
    assert names.identifier("x" * 62, "worker") == "x" * 56 + "-worker"
    assert names.clip("1abc") == "rabc"
    assert names.clip("_abc") == "rabc"
    assert names.clip("$abc") == "$abc"  # a symbol, not punctuation, in Go
    assert names.clip("y" * 51 + "z") == "y" * 49 + "z"
    assert names.clip_label(".x") == "rx"


def test_valid_cluster_has_no_problems() -> None:
    cluster = make(
        workerGroupSpecs=[group("a"), group("b", labels={"ray.io/zone": "z1"})],
        enableInTreeAutoscaling=True,
        autoscalerOptions={"version": "v2"},
        annotations={"ray.io/enable-serve-service": "true"},
    )
    assert raycluster_validation.problems(cluster) == []


@pytest.mark.parametrize(
    ("cluster", "fragment"),
    [
        (lambda: make("a" * 54), "no more than 53 characters"),
        (lambda: make("9lives"), "DNS-1035"),
        (lambda: make("has.dot"), "DNS-1035"),
        (lambda: make(head_container=None), "at least one container"),
        (
            lambda: make(workerGroupSpecs=[{"groupName": "g", "template": {}}]),
            "'g': template should have at least one container",
        ),
        (lambda: make(workerGroupSpecs=[group("a"), group("a")]), "must be unique"),
        (lambda: make(workerGroupSpecs=[group("bad/name")]), "not a valid label value"),
        (lambda: make(workerGroupSpecs=[group("x" * 64)]), "not a valid label value"),
        (
            lambda: make(
                workerGroupSpecs=[group(rayStartParams={"num-cpus": "1"}, resources={"cpu": "1"})]
            ),
            "both rayStartParams and resources of the g group",
        ),
        (lambda: make(head={"rayStartParams": {"labels": "a=b"}}), "rayStartParams['labels']"),
        (lambda: make(workerGroupSpecs=[group(labels={"-bad": "x"})]), "invalid label key"),
        (lambda: make(workerGroupSpecs=[group(labels={"ok": "bad value"})]), "invalid label value"),
        (
            lambda: make(
                annotations={"ray.io/ft-enabled": "true"},
                gcsFaultToleranceOptions={"redisAddress": "r"},
            ),
            "both set",
        ),
        (
            lambda: make(
                head_container={"name": "h", "env": [{"name": "RAY_REDIS_ADDRESS", "value": "r"}]}
            ),
            "implicitly enables GCS fault tolerance",
        ),
        (
            lambda: make(
                head={"rayStartParams": {"redis-password": "p"}},
                gcsFaultToleranceOptions={"redisAddress": "r"},
            ),
            "redis-password in rayStartParams",
        ),
        (
            lambda: make(
                annotations={"ray.io/external-storage-namespace": "n"},
                gcsFaultToleranceOptions={"redisAddress": "r"},
            ),
            "external-storage-namespace annotation",
        ),
        (
            lambda: make(
                head_container={"name": "h", "env": [{"name": "REDIS_PASSWORD", "value": "p"}]},
                gcsFaultToleranceOptions={"redisAddress": "r"},
            ),
            "REDIS_PASSWORD env var",
        ),
        (
            lambda: make(
                head_container={"name": "h", "env": [{"name": "RAY_REDIS_ADDRESS", "value": "r"}]},
                gcsFaultToleranceOptions={"redisAddress": "r"},
            ),
            "RAY_REDIS_ADDRESS env var",
        ),
        (
            lambda: make(gcsFaultToleranceOptions={"backend": "rocksdb"}),
            "backend 'rocksdb'",
        ),
        (
            lambda: make(gcsFaultToleranceOptions={"backend": "etcd", "redisAddress": "r"}),
            "backend 'etcd' is not one of",
        ),
        (
            lambda: make(gcsFaultToleranceOptions={"redisAddress": "r", "storage": {}}),
            "storage when the backend is 'redis'",
        ),
        (
            lambda: make(
                enableInTreeAutoscaling=True,
                autoscalerOptions={"version": "v2"},
                head={"template": {"spec": {"restartPolicy": "OnFailure", "containers": [{}]}}},
            ),
            "head pod should be Never or unset",
        ),
        (lambda: make(workerGroupSpecs=[group(labels={"a/b/c": "x"})]), "invalid label key"),
        (lambda: make(head={"rayStartParams": {"redis-username": "u"}}), "redis username"),
        (
            lambda: make(
                head_container={
                    "name": "h",
                    "env": [{"name": "RAY_enable_autoscaler_v2", "value": "1"}],
                }
            ),
            "enableInTreeAutoscaling is false",
        ),
        (
            lambda: make(enableInTreeAutoscaling=True, workerGroupSpecs=[group(suspend=True)]),
            "cannot be suspended with the autoscaler",
        ),
        (
            lambda: make(
                enableInTreeAutoscaling=True,
                autoscalerOptions={"version": "v1"},
                head_container={
                    "name": "h",
                    "env": [{"name": "RAY_enable_autoscaler_v2", "value": "0"}],
                },
            ),
            "use only the former",
        ),
        (
            lambda: make(
                enableInTreeAutoscaling=True,
                autoscalerOptions={"version": "v2"},
                workerGroupSpecs=[
                    group(template={"spec": {"restartPolicy": "Always", "containers": [{}]}})
                ],
            ),
            "should be Never or unset",
        ),
        (
            lambda: make(
                annotations={"ray.io/enable-serve-service": "true"},
                head_container={"name": "h", "ports": [{"name": "gcs", "containerPort": 6379}]},
            ),
            "none is named 'serve'",
        ),
    ],
)
def test_problems(cluster: Any, fragment: str) -> None:
    found = raycluster_validation.problems(cluster())
    assert any(fragment in problem for problem in found), found


def test_suspended_group_without_autoscaler_is_accepted() -> None:
    # KubeRay v1.5.0 refuses this unless its RayJobDeletionPolicy gate is on; we always allow it.
    assert raycluster_validation.problems(make(workerGroupSpecs=[group(suspend=True)])) == []


def test_all_problems_are_reported_not_only_the_first() -> None:
    cluster = make("Bad", workerGroupSpecs=[group("a"), group("a")])
    assert len(raycluster_validation.problems(cluster)) == 2


BUILDERS = [f"controllers.raycluster.{m}" for m in ("names", "pods", "services", "autoscaler")]


@pytest.mark.parametrize("name", BUILDERS)
def test_builder_modules_export_what_exists(name: str) -> None:
    module = importlib.import_module(name)
    # Sorted as ruff's RUF022 sorts: CONSTANTS, then Classes, then functions.
    assert module.__all__ == sorted(
        module.__all__, key=lambda n: (0 if n.isupper() else 1 if n[:1].isupper() else 2, n)
    )
    for attr in module.__all__:
        assert hasattr(module, attr), f"{name}.{attr}"
