"""Names, labels and annotations of a RayJob and of everything it makes (KubeRay v1.7.0's).

- **RayCluster** ``<rayjob>-<5 characters>`` (:func:`cluster_name`), chosen once per
  attempt and kept in ``status.rayClusterName``; with ``clusterSelector`` the selected
  cluster's name (:data:`CLUSTER_SELECTOR_KEY`);
- **Ray submission id** ``spec.jobId``, else ``<rayjob>-<5 characters>`` (:func:`job_id`);
- **head Service** ``<rayjob>-head-svc`` (:func:`head_service_name`), whatever the
  RayCluster's own head Service is called;
- **submitter Job** the RayJob's own name (:func:`submitter_job_name`);
- the 5 characters are drawn by the caller (:func:`random_suffix`, with its own
  :class:`random.Random`), from Kubernetes' ``rand.String`` alphabet
  (:data:`SUFFIX_ALPHABET`: no vowels, no ``0 1 3``), so a crash-safe reconciler can
  store a name before it creates anything and tests can fix the randomness.

A RayJob name is at most :data:`MAX_NAME_LENGTH` (47) characters, so that
``<name>-<5 characters>`` is a valid RayCluster name (53).
:func:`owner_reference` is the controller reference every child carries.

>>> job = v1.RayJob.model_validate({"metadata": {"name": "pi", "uid": "u1"}})
>>> cluster_name(job, "x7k2q"), job_id(job, "b4c5d"), head_service_name(job)
('pi-x7k2q', 'pi-b4c5d', 'pi-head-svc')
>>> random_suffix(random.Random(0)) == random_suffix(random.Random(0))
True
>>> owner_reference(job)["kind"], owner_reference(job)["controller"]
('RayJob', True)
"""

from __future__ import annotations

import random
from typing import Any

from api import v1
from controllers.raycluster import interface as raycluster

__all__ = [
    "CLUSTER_SELECTOR_KEY",
    "CRD",
    "CREATED_BY",
    "CREATED_BY_LABEL",
    "CRONJOB_NAME_LABEL",
    "CRONJOB_SCHEDULED_TIMESTAMP_ANNOTATION",
    "DISABLE_PROVISIONED_HEAD_RESTART_ANNOTATION",
    "FINALIZER",
    "MAX_CRONJOB_NAME_LENGTH",
    "MAX_NAME_LENGTH",
    "ORIGINATED_FROM_CRD_LABEL",
    "ORIGINATED_FROM_NAME_LABEL",
    "SUBMISSION_MODE_LABEL",
    "SUBMITTER_CONTAINER",
    "SUFFIX_ALPHABET",
    "SUFFIX_LENGTH",
    "cluster_name",
    "head_service_name",
    "job_id",
    "name_of",
    "namespace_of",
    "owner_reference",
    "random_suffix",
    "selected_cluster",
    "submitter_job_name",
]

FINALIZER = "ray.io/rayjob-finalizer"
"""Added on the first pass; the Ray job is stopped before it is removed."""
ORIGINATED_FROM_NAME_LABEL = raycluster.ORIGINATED_FROM_NAME_LABEL
"""``ray.io/originated-from-cr-name``: the RayJob's name, on its cluster, Job and Service."""
ORIGINATED_FROM_CRD_LABEL = raycluster.ORIGINATED_FROM_CRD_LABEL
"""``ray.io/originated-from-crd``: :data:`CRD`."""
CRD = "RayJob"
"""The value of :data:`ORIGINATED_FROM_CRD_LABEL`."""
SUBMISSION_MODE_LABEL = "ray.io/job-submission-mode"
"""On the RayCluster: the RayJob's ``submissionMode``."""
CREATED_BY_LABEL = raycluster.CREATED_BY_LABEL
"""``app.kubernetes.io/created-by``, on the submitter Job and its pods."""
CREATED_BY = raycluster.CREATED_BY
"""``kuberay-operator``, KubeRay's value, as the RayCluster side writes it (KubeRay's
cache only sees Jobs carrying it, so a Job made here is KubeRay's after a hand-over)."""
CRONJOB_NAME_LABEL = "ray.io/cronjob-name"
"""On a RayJob a RayCronJob made: the RayCronJob's name."""
CRONJOB_SCHEDULED_TIMESTAMP_ANNOTATION = "ray.io/cronjob-scheduled-timestamp"
"""On a RayJob a RayCronJob made: its scheduled tick, UTC RFC 3339."""
DISABLE_PROVISIONED_HEAD_RESTART_ANNOTATION = "ray.io/disable-provisioned-head-restart"
"""On a ``SidecarMode`` RayJob's cluster (``"true"``): a deleted head pod is not recreated."""
CLUSTER_SELECTOR_KEY = raycluster.CLUSTER_LABEL
"""``ray.io/cluster``: the only ``clusterSelector`` key read, the existing cluster's name."""
SUBMITTER_CONTAINER = "ray-job-submitter"
"""The submitter container's name (the Job's default one, the sidecar)."""
MAX_NAME_LENGTH = raycluster.MAX_CLUSTER_NAME_LENGTH - 6
"""47: ``<rayjob>-<5 characters>`` must be a RayCluster name (at most 53)."""
MAX_CRONJOB_NAME_LENGTH = MAX_NAME_LENGTH - 11
"""36: ``<raycronjob>-<unix minutes>`` (10 digits) must be a RayJob name."""
SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
"""Kubernetes' ``rand.String`` characters (KubeRay draws its suffixes from it)."""
SUFFIX_LENGTH = 5


def name_of(job: v1.RayJob) -> str:
    """The RayJob's ``metadata.name`` (empty when the object carries none)."""
    return str(job.metadata.get("name") or "")


def namespace_of(job: v1.RayJob) -> str:
    """The RayJob's namespace (``default`` when the object carries none, as in tests)."""
    return str(job.metadata.get("namespace") or raycluster.DEFAULT_NAMESPACE)


def random_suffix(rng: random.Random) -> str:
    """:data:`SUFFIX_LENGTH` characters of :data:`SUFFIX_ALPHABET`, drawn from ``rng``.

    >>> suffix = random_suffix(random.Random(7))
    >>> len(suffix), set(suffix) <= set(SUFFIX_ALPHABET)
    (5, True)
    """
    return "".join(rng.choice(SUFFIX_ALPHABET) for _ in range(SUFFIX_LENGTH))


def cluster_name(job: v1.RayJob, suffix: str) -> str:
    """The RayCluster of an attempt: the ``clusterSelector``'s cluster, else
    ``<rayjob>-<suffix>``.

    >>> cluster_name(v1.RayJob.model_validate({"metadata": {"name": "j"},
    ...     "spec": {"clusterSelector": {"ray.io/cluster": "shared"}}}), "abcde")
    'shared'
    """
    return selected_cluster(job) or f"{name_of(job)}-{suffix}"


def selected_cluster(job: v1.RayJob) -> str | None:
    """The existing cluster ``clusterSelector`` names, or None (no selector, or no name)."""
    return (job.spec.cluster_selector or {}).get(CLUSTER_SELECTOR_KEY) or None


def job_id(job: v1.RayJob, suffix: str) -> str:
    """The Ray submission id of an attempt: ``spec.jobId``, else ``<rayjob>-<suffix>``.
    (``InteractiveMode`` takes the user's ``spec.jobId`` later; the caller decides.)"""
    return job.spec.job_id or f"{name_of(job)}-{suffix}"


def head_service_name(job: v1.RayJob) -> str:
    """``<rayjob>-head-svc``: the RayJob's own head Service."""
    return raycluster.head_service_name(name_of(job))


def submitter_job_name(job: v1.RayJob) -> str:
    """The submitter Job's name: the RayJob's."""
    return name_of(job)


def owner_reference(job: v1.RayJob) -> dict[str, Any]:
    """The controller owner reference to ``job`` that its children carry."""
    return {
        "apiVersion": job.api_version,
        "kind": job.kind,
        "name": name_of(job),
        "uid": str(job.metadata.get("uid") or ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }
