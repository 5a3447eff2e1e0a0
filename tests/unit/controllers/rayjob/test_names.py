"""controllers/rayjob/names.py: KubeRay v1.7.0's names, labels and suffixes."""

from __future__ import annotations

import random

import pytest

from api import v1
from controllers.rayjob import names


def _job(**spec: object) -> v1.RayJob:
    return v1.RayJob.model_validate(
        {"metadata": {"name": "train", "namespace": "ml", "uid": "u-1"}, "spec": spec}
    )


def test_kuberay_keys() -> None:
    assert (
        names.FINALIZER,
        names.ORIGINATED_FROM_NAME_LABEL,
        names.ORIGINATED_FROM_CRD_LABEL,
        names.SUBMISSION_MODE_LABEL,
        names.CREATED_BY_LABEL,
        names.CREATED_BY,
        names.CRONJOB_NAME_LABEL,
        names.CRONJOB_SCHEDULED_TIMESTAMP_ANNOTATION,
        names.DISABLE_PROVISIONED_HEAD_RESTART_ANNOTATION,
        names.CLUSTER_SELECTOR_KEY,
        names.MAX_NAME_LENGTH,
        names.MAX_CRONJOB_NAME_LENGTH,
        names.SUBMITTER_CONTAINER,
    ) == (
        "ray.io/rayjob-finalizer",
        "ray.io/originated-from-cr-name",
        "ray.io/originated-from-crd",
        "ray.io/job-submission-mode",
        "app.kubernetes.io/created-by",
        "kuberay-operator",
        "ray.io/cronjob-name",
        "ray.io/cronjob-scheduled-timestamp",
        "ray.io/disable-provisioned-head-restart",
        "ray.io/cluster",
        47,
        36,
        "ray-job-submitter",
    )


def test_names() -> None:
    job = _job()
    assert names.cluster_name(job, "abcde") == "train-abcde"
    assert names.job_id(job, "fghjk") == "train-fghjk"
    assert names.head_service_name(job) == "train-head-svc"
    assert names.submitter_job_name(job) == "train"
    assert names.namespace_of(job) == "ml"
    assert names.selected_cluster(job) is None


def test_selector_and_spec_job_id_win() -> None:
    job = _job(clusterSelector={"ray.io/cluster": "shared", "other": "x"}, jobId="mine")
    assert names.cluster_name(job, "abcde") == "shared"
    assert names.job_id(job, "abcde") == "mine"
    assert names.cluster_name(_job(clusterSelector={"ray.io/cluster": ""}), "x2") == "train-x2"


@pytest.mark.parametrize("seed", range(20))
def test_random_suffix(seed: int) -> None:
    suffix = names.random_suffix(random.Random(seed))
    assert len(suffix) == 5
    assert set(suffix) <= set("bcdfghjklmnpqrstvwxz2456789")
    assert suffix == names.random_suffix(random.Random(seed))


def test_longest_name_makes_a_valid_cluster_name() -> None:
    job = v1.RayJob.model_validate({"metadata": {"name": "j" * names.MAX_NAME_LENGTH}})
    assert len(names.cluster_name(job, "abcde")) == 53


def test_owner_reference() -> None:
    assert names.owner_reference(_job()) == {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "name": "train",
        "uid": "u-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }
