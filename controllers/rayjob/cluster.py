"""The RayCluster and the head Service a RayJob makes, as KubeRay v1.7.0 builds them.

- :func:`ray_cluster` (``constructRayClusterForRayJob``): the RayCluster ``name`` (the
  attempt's, :func:`controllers.rayjob.names.cluster_name`) in the RayJob's namespace,
  its spec a copy of ``rayClusterSpec`` (later edits of it are not followed: the caller
  builds it once per attempt), the RayJob's labels and annotations copied, plus
  ``ray.io/originated-from-cr-name``, ``ray.io/originated-from-crd: RayJob`` and
  ``ray.io/job-submission-mode``, controlled by the RayJob. In ``SidecarMode`` the
  submitter (:func:`controllers.rayjob.submitter.sidecar_container`) is appended to the
  head pod's containers, the head pod's ``restartPolicy`` is ``Never`` and the cluster is
  annotated ``ray.io/disable-provisioned-head-restart: "true"`` (a deleted head is not
  recreated: the job would be submitted again). The sidecar's ``RAY_DASHBOARD_ADDRESS``
  is empty, as in KubeRay: the cluster is made before its dashboard URL is known.
- :func:`head_service` (``BuildHeadServiceForRayJob``): the RayCluster's head Service as
  the RayCluster controller builds it
  (:func:`controllers.raycluster.interface.head_service_of_model`: ports, selector of
  the cluster's head pod, type), renamed ``<rayjob>-head-svc`` in the RayJob's
  namespace, its labels replaced by ``ray.io/originated-from-cr-name``,
  ``ray.io/originated-from-crd: RayJob``, ``ray.io/node-type: head`` and
  ``ray.io/identifier: <rayjob>-head``, controlled by the RayJob. It follows the cluster
  of the current attempt (the selector's ``ray.io/cluster``), so users keep one address.
- :func:`dashboard_url`: ``status.dashboardURL``, ``<head service>.<namespace>.svc.<cluster
  domain>:<port named dashboard>``, no scheme (KubeRay's ``FetchHeadServiceURL``).

>>> job = v1.RayJob.model_validate({"metadata": {"name": "pi", "namespace": "ml", "uid": "u"},
...     "spec": {"rayClusterSpec": {"headGroupSpec": {"template": {"spec": {"containers": [
...         {"name": "ray-head", "image": "rayproject/ray:2.60.0"}]}}}}}})
>>> rc = ray_cluster(job, "pi-b4c5d")
>>> rc["metadata"]["labels"]
{'ray.io/originated-from-cr-name': 'pi', 'ray.io/originated-from-crd': 'RayJob', \
'ray.io/job-submission-mode': 'K8sJobMode'}
>>> cluster = v1.RayCluster.model_validate(rc)
>>> svc = head_service(job, cluster)
>>> svc["metadata"]["name"], svc["spec"]["selector"]["ray.io/cluster"]
('pi-head-svc', 'pi-b4c5d')
>>> dashboard_url(cluster, {"metadata": {"name": "pi-b4c5d-head-svc", "namespace": "ml"},
...     "spec": {"ports": [{"name": "dashboard", "port": 8265}]}}, "cluster.local")
'pi-b4c5d-head-svc.ml.svc.cluster.local:8265'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from api import v1
from api.v1 import rayjob as api
from controllers.raycluster import interface as raycluster
from controllers.rayjob import names, submitter

__all__ = ["dashboard_url", "head_service", "ray_cluster"]


def ray_cluster(
    job: v1.RayJob, name: str, *, sidecar_restart: bool = False, login_shell: bool = False
) -> dict[str, Any]:
    """The RayCluster ``name`` for ``job`` (module docstring); ``sidecar_restart``: the
    ``SidecarSubmitterRestart`` gate, ``login_shell``: ``ENABLE_LOGIN_SHELL`` (both only
    matter in ``SidecarMode``). :class:`ValueError` without ``rayClusterSpec``."""
    if job.spec.ray_cluster_spec is None:
        raise ValueError("spec.rayClusterSpec is required to make a RayCluster")
    mode = job.spec.submission_mode or api.SubmissionMode.K8S_JOB.value
    labels = dict(job.metadata.get("labels") or {})
    labels[names.ORIGINATED_FROM_NAME_LABEL] = names.name_of(job)
    labels[names.ORIGINATED_FROM_CRD_LABEL] = names.CRD
    labels[names.SUBMISSION_MODE_LABEL] = str(mode)
    annotations = dict(job.metadata.get("annotations") or {})
    sidecar = mode == api.SubmissionMode.SIDECAR
    if sidecar:
        annotations[names.DISABLE_PROVISIONED_HEAD_RESTART_ANNOTATION] = "true"
    metadata: dict[str, Any] = {"name": name, "namespace": names.namespace_of(job)}
    metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    metadata["ownerReferences"] = [names.owner_reference(job)]
    spec = job.spec.ray_cluster_spec.model_dump(by_alias=True, exclude_unset=True, mode="json")
    manifest: dict[str, Any] = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": metadata,
        "spec": spec,
    }
    if sidecar:
        container = submitter.sidecar_container(
            job,
            v1.RayCluster.model_validate(manifest),
            restart=sidecar_restart,
            login_shell=login_shell,
        )
        pod = spec["headGroupSpec"]["template"].setdefault("spec", {})
        pod.setdefault("containers", []).append(container)
        pod["restartPolicy"] = "Never"
    return manifest


def head_service(job: v1.RayJob, cluster: v1.RayCluster) -> dict[str, Any]:
    """``<rayjob>-head-svc`` for ``cluster`` (module docstring; :class:`ValueError`: the
    cluster's head template has no container)."""
    service = raycluster.head_service_of_model(cluster)
    metadata = service["metadata"]
    metadata["name"] = names.head_service_name(job)
    metadata["namespace"] = names.namespace_of(job)
    metadata["labels"] = {
        names.ORIGINATED_FROM_NAME_LABEL: names.name_of(job),
        names.ORIGINATED_FROM_CRD_LABEL: names.CRD,
        raycluster.NODE_TYPE_LABEL: "head",
        raycluster.IDENTIFIER_LABEL: raycluster.identifier(names.name_of(job), "head"),
    }
    metadata["ownerReferences"] = [names.owner_reference(job)]
    return service


def dashboard_url(
    cluster: v1.RayCluster, head_service_obj: Mapping[str, Any], cluster_domain: str
) -> str:
    """``host:port`` of the dashboard behind the cluster's head Service ``head_service_obj``
    (as read from the API); :class:`ValueError` when it has no port named ``dashboard``."""
    meta = head_service_obj.get("metadata") or {}
    name = meta.get("name") or raycluster.head_service_name_of_model(cluster)
    namespace = meta.get("namespace") or raycluster.namespace_of_model(cluster)
    for port in (head_service_obj.get("spec") or {}).get("ports") or ():
        if isinstance(port, Mapping) and port.get("name") == "dashboard":
            return f"{name}.{namespace}.svc.{cluster_domain}:{port.get('port')}"
    raise ValueError(f"the head Service {name!r} has no port named 'dashboard'")
