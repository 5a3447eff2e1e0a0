"""Golden test: what we build for a RayJob equals what KubeRay v1.7.0 itself created for it,
field by field.

Data: ``tests/unit/testdata/kuberay-v1.7.0/rayjob/<sample>.json``, recorded by
``hack/golden/kuberay_objects.py`` from the real KubeRay v1.7.0 binary (its feature gates at
their defaults) on our control plane, kwok running the pods Running and Ready: the RayJob as
stored (with the names KubeRay chose in its status: ``jobId``, ``rayClusterName``,
``dashboardURL``), the RayCluster KubeRay made for it as stored, and the request objects
(kube-apiserver's audit log) of the submitter Job (``K8sJobMode``) and of the RayJob's head
Service ``<rayjob>-head-svc``. The samples are KubeRay's ``ray-job.*.yaml`` at v1.7.0
(``K8sJobMode`` by default, ``shutdownAfterJobFinishes``, ``entrypointNumCpus`` / ``NumGpus``
/ ``Resources``, a custom head Service name, a ``submitterPodTemplate`` with its own
command, a multi-line entrypoint, ``SidecarMode``) and ours (``config/samples/ray_v1_rayjob.yaml``).

From the recorded RayJob we build, and compare whole (names, labels, ownerReferences,
the script, the environment, the ports, ...):

- the RayCluster: :func:`controllers.rayjob.cluster.ray_cluster` with the recorded name,
  from the RayJob as it was when KubeRay built it (``Initializing``: ``jobId`` and
  ``rayClusterName`` set, the dashboard URL not known yet);
- the submitter Job: :func:`controllers.rayjob.submitter.job` on the recorded RayCluster,
  the RayJob's ``dashboardURL`` the one :func:`controllers.rayjob.cluster.dashboard_url`
  finds on the cluster's recorded head Service (checked equal to KubeRay's);
- ``<rayjob>-head-svc``: :func:`controllers.rayjob.cluster.head_service`;
- the names (:mod:`controllers.rayjob.names`) from the recorder's placeholder suffixes.

The comparison is under :func:`runtime.equality.normalize` (Kubernetes' semantic equality:
empty values are absent, quantities compare by value). Every remaining difference is one of
:data:`DIFFERENCES`, each applied by name in code below and justified there; anything else
fails with a readable field-by-field diff. The objects the RayCluster controller made for
these clusters (pods, the cluster's head Service) get the RayCluster golden checks of
``tests/unit/controllers/raycluster/test_pods_match_kuberay.py``, run here on these files.
A RayJob or RayCluster KubeRay wrote back (Go's typed encoding adds ``status:
{loadBalancer: {}}`` to a custom ``headGroupSpec.headService``) is valid here: the
custom-head-Service sample's validation is asked like every other's.
"""

from __future__ import annotations

import copy
import json
import pathlib
from collections.abc import Callable
from typing import Any

import pytest

from api import v1
from controllers.rayjob import cluster as rayjob_cluster
from controllers.rayjob import names, submitter, validation
from runtime import equality
from tests.unit import helpers
from tests.unit.controllers.raycluster import test_pods_match_kuberay as raycluster_golden

Obj = dict[str, Any]

VERSION = "v1.7.0"
DATA = helpers.TESTDATA / f"kuberay-{VERSION}" / "rayjob"
FILES = sorted(DATA.glob("*.json"))
CLUSTER_DOMAIN = "cluster.local"
"""The recorder runs KubeRay with ``CLUSTER_DOMAIN=cluster.local``."""
CLUSTER_SUFFIX = "xxxxx"
JOB_ID_SUFFIX = "yyyyy"
CUSTOM_HEAD_SERVICE = "ray-job.custom-head-svc"

DIFFERENCES = {
    "api-defaults": (
        "The recorded Job and Service are the audit log's requestObject: KubeRay's body after "
        "kube-apiserver decoded it and applied the API's defaults (a Job's completions, "
        "parallelism, completionMode, suspend, manualSelector, podReplacementPolicy; its pod "
        "template's dnsPolicy, schedulerName, terminationGracePeriodSeconds and containers' "
        "terminationMessagePath/Policy and imagePullPolicy; a Service's type, sessionAffinity, "
        "internalTrafficPolicy, a port's protocol and targetPort). We POST the body without "
        "them and the server applies the same, so our side gets them here, only where unset."
    ),
    "placeholders": (
        "The recorder replaced what changes from run to run: the uids by '<uid>', the random "
        "suffix of the cluster's name by 'xxxxx' and of the generated submission id by "
        "'yyyyy'. Our side is built from the recorded RayJob (uid '<uid>', its status names "
        "with the placeholders in) and our names from those suffixes."
    ),
    "dashboard-url-not-known-at-initializing": (
        "The recorded RayJob was read after the submitter Job was made, so its status has "
        "the dashboardURL; KubeRay built the RayCluster before that (in Initializing, where "
        "the plan builds ours too), so the RayCluster is built from the RayJob without it "
        "(a SidecarMode sidecar's RAY_DASHBOARD_ADDRESS is empty, as KubeRay's)."
    ),
}
"""Every difference this test tolerates, by name, with its reason."""


# --- what the API server adds while decoding (DIFFERENCES["api-defaults"]) -------------------


def _set(obj: Obj, key: str, value: Any) -> None:
    if obj.get(key) in (None, ""):
        obj[key] = value


def _container_defaults(container: Obj) -> None:
    _set(container, "terminationMessagePath", "/dev/termination-log")
    _set(container, "terminationMessagePolicy", "File")
    image = str(container.get("image") or "")
    tag = image.rsplit("/", 1)[-1]
    latest = "@" not in image and (":" not in tag or tag.endswith(":latest"))
    _set(container, "imagePullPolicy", "Always" if latest else "IfNotPresent")
    for port in container.get("ports") or []:
        _set(port, "protocol", "TCP")


def _pod_spec_defaults(spec: Obj) -> None:
    """``SetDefaults_PodSpec`` (a template's: no ``enableServiceLinks``, which is the Pod's)."""
    for key, value in (
        ("restartPolicy", "Always"),
        ("terminationGracePeriodSeconds", 30),
        ("dnsPolicy", "ClusterFirst"),
        ("schedulerName", "default-scheduler"),
    ):
        _set(spec, key, value)
    for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
        _container_defaults(container)


def api_defaults(obj: Obj) -> Obj:
    """A copy of ``obj`` with the defaults kube-apiserver applies when decoding it."""
    obj = copy.deepcopy(obj)
    spec = obj.setdefault("spec", {})
    if obj["kind"] == "Job":
        if spec.get("completions") is None and spec.get("parallelism") is None:
            spec["completions"] = 1
        for key, value in (
            ("parallelism", 1),
            ("backoffLimit", 6),
            ("completionMode", "NonIndexed"),
            ("suspend", False),
            ("manualSelector", False),
        ):
            if spec.get(key) is None:
                spec[key] = value
        if spec.get("podFailurePolicy") is None:
            _set(spec, "podReplacementPolicy", "TerminatingOrFailed")
        _pod_spec_defaults(spec.setdefault("template", {}).setdefault("spec", {}))
    elif obj["kind"] == "Service":
        _set(spec, "type", "ClusterIP")
        _set(spec, "sessionAffinity", "None")
        _set(spec, "internalTrafficPolicy", "Cluster")
        for port in spec.get("ports") or []:
            _set(port, "protocol", "TCP")
            _set(port, "targetPort", port.get("port"))
    return obj


# --- loading and comparing -------------------------------------------------------------------


def load(path: pathlib.Path) -> Obj:
    document: Obj = json.loads(path.read_text())
    assert document["kuberay_version"] == VERSION
    # DIFFERENCES["placeholders"]: the uid the recorder wrote in every owner reference
    document["rayjob"]["metadata"]["uid"] = "<uid>"
    return document


def the_rayjob(document: Obj) -> v1.RayJob:
    """The RayJob as KubeRay stored it, with the names it chose in its status."""
    return v1.RayJob.model_validate(document["rayjob"])


def at_initializing(document: Obj) -> v1.RayJob:
    """The RayJob as it was when its RayCluster was built: the submission id and the
    cluster's name chosen, no dashboard URL yet."""
    obj = copy.deepcopy(document["rayjob"])
    # DIFFERENCES["dashboard-url-not-known-at-initializing"]
    obj["status"].pop("dashboardURL")
    return v1.RayJob.model_validate(obj)


def the_raycluster(document: Obj) -> v1.RayCluster:
    return v1.RayCluster.model_validate(document["raycluster"])


def assert_same(kuberay: Obj, ours: Obj) -> None:
    want = equality.normalize(kuberay)
    have = equality.normalize(api_defaults(ours))
    differences = list(helpers.kuberay_diff(want, have))
    what = f"{ours['kind']} {ours['metadata']['name']}"
    assert not differences, f"{what} differs from KubeRay's:\n  " + "\n  ".join(differences)


def mode_of(document: Obj) -> str:
    return str(document["rayjob"]["spec"]["submissionMode"])


def k8s_job_mode(path: pathlib.Path) -> bool:
    return mode_of(json.loads(path.read_text())) == "K8sJobMode"


def _ids(path: pathlib.Path) -> str:
    return path.stem


FILE_PARAMS = FILES or [DATA / "missing.json"]
K8S_JOB_FILES = [p for p in FILES if k8s_job_mode(p)] or [DATA / "missing.json"]


# --- the tests -------------------------------------------------------------------------------


def test_golden_data_is_present() -> None:
    """No vacuous pass: the recorded samples are there, both modes with a submitter."""
    assert FILES, f"no golden data in {DATA}: run hack/golden/kuberay_objects.py"
    stems = {f.stem for f in FILES}
    assert {"ray-job.sample", "ray-job.light-weight-submitter", "ray_v1_rayjob"} <= stems
    assert {"ray-job.sidecar-mode", CUSTOM_HEAD_SERVICE} <= stems


@pytest.mark.parametrize("path", FILE_PARAMS, ids=_ids)
def test_names_are_kuberays(path: pathlib.Path) -> None:
    """Given KubeRay's random suffixes (DIFFERENCES["placeholders"]), our names are its names:
    the cluster, the submission id, the head Service, the submitter Job, the dashboard URL."""
    document = load(path)
    job = the_rayjob(document)
    status = document["rayjob"]["status"]
    cluster_name = document["raycluster"]["metadata"]["name"]
    assert names.cluster_name(job, CLUSTER_SUFFIX) == status["rayClusterName"] == cluster_name
    assert names.job_id(job, JOB_ID_SUFFIX) == status["jobId"]
    [service] = document["rayjob_created"]["services"]
    assert names.head_service_name(job) == service["metadata"]["name"]
    for submitter_job in document["rayjob_created"]["jobs"]:
        assert names.submitter_job_name(job) == submitter_job["metadata"]["name"]
    [cluster_head] = document["created"]["services"]
    url = rayjob_cluster.dashboard_url(the_raycluster(document), cluster_head, CLUSTER_DOMAIN)
    assert url == status["dashboardURL"]


@pytest.mark.parametrize("path", FILE_PARAMS, ids=_ids)
def test_raycluster_equals_kuberays(path: pathlib.Path) -> None:
    """The RayCluster as KubeRay stored it (the RayJob's rayClusterSpec with the CRD's
    defaults, which the stored RayJob carries too; a SidecarMode head with the sidecar)."""
    document = load(path)
    theirs = document["raycluster"]
    ours = rayjob_cluster.ray_cluster(at_initializing(document), theirs["metadata"]["name"])
    differences = list(helpers.kuberay_diff(equality.normalize(theirs), equality.normalize(ours)))
    assert not differences, "the RayCluster differs from KubeRay's:\n  " + "\n  ".join(differences)


@pytest.mark.parametrize("path", K8S_JOB_FILES, ids=_ids)
def test_submitter_job_equals_kuberays(path: pathlib.Path) -> None:
    document = load(path)
    [theirs] = document["rayjob_created"]["jobs"]
    ours = submitter.job(the_rayjob(document), the_raycluster(document), login_shell=False)
    assert_same(theirs, ours)


def test_sidecar_mode_makes_no_submitter_job() -> None:
    """In SidecarMode the submitter is the head pod's sidecar (compared with the RayCluster),
    and KubeRay made no Job."""
    document = load(DATA / "ray-job.sidecar-mode.json")
    assert mode_of(document) == "SidecarMode"
    assert document["rayjob_created"]["jobs"] == []
    containers = document["raycluster"]["spec"]["headGroupSpec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers][-1] == names.SUBMITTER_CONTAINER


@pytest.mark.parametrize("path", FILE_PARAMS, ids=_ids)
def test_head_service_equals_kuberays(path: pathlib.Path) -> None:
    """``<rayjob>-head-svc``: the cluster's head Service (a custom one's ports too, which the
    recorder put in order after the user's own), renamed, relabelled, owned by the RayJob."""
    document = load(path)
    [theirs] = document["rayjob_created"]["services"]
    ours = rayjob_cluster.head_service(the_rayjob(document), the_raycluster(document))
    assert_same(theirs, ours)


@pytest.mark.parametrize("path", FILE_PARAMS, ids=_ids)
def test_kuberays_rayjobs_are_valid_here(path: pathlib.Path) -> None:
    """KubeRay ran each of these RayJobs as it stored them, so we must accept them too."""
    assert validation.problems(the_rayjob(load(path))) == []


RAYCLUSTER_CHECKS: dict[str, Callable[[pathlib.Path], None]] = {
    "pods": raycluster_golden.test_pods_equal_kuberays,
    "services": raycluster_golden.test_services_equal_kuberays,
    "rbac": raycluster_golden.test_rbac_equals_kuberays,
    "secrets": raycluster_golden.test_secrets_equal_kuberays,
}
"""The RayCluster golden checks (its pods, its own Services, autoscaler RBAC, token Secret),
each taking one recording's path. ``pods`` first asks our RayCluster validation."""


@pytest.mark.parametrize(
    ("check", "path"),
    [
        pytest.param(check, path, id=f"{check}-{path.stem}")
        for check in RAYCLUSTER_CHECKS
        for path in FILE_PARAMS
    ],
)
def test_the_rayjobs_clusters_get_kuberays_objects(check: str, path: pathlib.Path) -> None:
    """What the RayCluster controller made for a RayJob's cluster is what ours builds."""
    document = load(path)
    assert document["raycluster"]["metadata"]["labels"][names.ORIGINATED_FROM_CRD_LABEL] == "RayJob"
    RAYCLUSTER_CHECKS[check](path)


def test_api_defaults_fill_only_what_is_unset() -> None:
    job: Obj = {
        "kind": "Job",
        "spec": {
            "parallelism": 3,
            "backoffLimit": 2,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"image": "a:1"}]}},
        },
    }
    before = copy.deepcopy(job)
    out = api_defaults(job)
    assert job == before
    assert (out["spec"]["parallelism"], out["spec"]["backoffLimit"]) == (3, 2)
    assert "completions" not in out["spec"]  # only when neither is given
    pod = out["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert "enableServiceLinks" not in pod
    assert pod["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    service = api_defaults({"kind": "Service", "spec": {"type": "NodePort", "ports": [
        {"port": 1, "targetPort": 2}]}})  # fmt: skip
    assert service["spec"]["type"] == "NodePort"
    assert service["spec"]["ports"][0] == {"port": 1, "targetPort": 2, "protocol": "TCP"}


def test_every_difference_is_used_and_explained() -> None:
    source = pathlib.Path(__file__).read_text()
    for name, reason in DIFFERENCES.items():
        assert source.count(f'DIFFERENCES["{name}"]') >= 1, f"difference {name} is never applied"
        assert len(reason) > 40
