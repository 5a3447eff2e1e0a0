"""``controllers.setup.cache_by_resource``: the manager's cache holds Ray pods and KubeRay's
Jobs only, and every pod and Redis clean-up Job the RayCluster builders make is one of them
(else the operator would not see its own); no Secret at all (they are read by name)."""

from __future__ import annotations

import controllers.setup
from api import v1
from controllers.raycluster import pods, redis_cleanup
from runtime.cache import selector
from runtime.client import resources

POD = resources.default_registry.for_kind("v1", "Pod")
JOB = resources.default_registry.for_kind("batch/v1", "Job")


def cluster(labels: dict[str, str]) -> v1.RayCluster:
    container = {"name": "ray", "image": "rayproject/ray:2.46.0"}
    template = {"metadata": {"labels": labels}, "spec": {"containers": [container]}}
    return v1.RayCluster.model_validate({
        "metadata": {"name": "demo", "namespace": "ns"},
        "spec": {"headGroupSpec": {"rayStartParams": {}, "template": template},
                 "workerGroupSpecs": [{"groupName": "g", "replicas": 1, "template": template}]},
    })  # fmt: skip


def test_pods_are_filtered_as_kuberay_v1_7_does_and_secrets_are_not_cached() -> None:
    by = controllers.setup.cache_by_resource()
    assert list(by) == [POD, JOB], "no Secrets: the operator may not list or watch them"
    assert by[POD].label_selector == "ray.io/node-type in (head,worker,redis-cleanup)"
    assert by[JOB].label_selector == "app.kubernetes.io/created-by=kuberay-operator"
    for resource in (POD, JOB):
        assert by[resource].field_selector is None
        assert by[resource].transform is None, "the default transform (managedFields dropped)"


def test_every_redis_cleanup_job_we_build_and_its_pods_are_in_the_cache() -> None:
    by = controllers.setup.cache_by_resource()
    jobs = selector.parse(by[JOB].label_selector or "")
    pod_sel = selector.parse(by[POD].label_selector or "")
    for labels in ({}, {"app.kubernetes.io/created-by": "someone-else", "ray.io/node-type": "x"}):
        c = cluster(labels)
        c.spec.gcs_fault_tolerance_options = {"redisAddress": "redis:6379"}
        job = redis_cleanup.job(c)
        assert jobs.matches(job["metadata"]["labels"])
        assert pod_sel.matches(job["spec"]["template"]["metadata"]["labels"])
    assert not jobs.matches({"app": "batch"})


def test_every_pod_we_build_is_in_the_cache_and_other_pods_are_not() -> None:
    sel = selector.parse(controllers.setup.cache_by_resource()[POD].label_selector or "")
    # A template that tries to set the node type (or drop it) cannot take a pod out.
    for labels in ({}, {"ray.io/node-type": "other", "app": "x"}):
        c = cluster(labels)
        head = pods.head_pod(c)
        worker = pods.worker_pod(c, c.spec.worker_group_specs[0])
        assert sel.matches(head["metadata"]["labels"])
        assert sel.matches(worker["metadata"]["labels"])
    assert not sel.matches({"app": "web"})
    assert not sel.matches({"ray.io/cluster": "demo"}), "a cluster label alone is not enough"
    assert not sel.matches({"ray.io/node-type": "other"})
