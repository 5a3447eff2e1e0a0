#!/usr/bin/env python3
"""Record the objects KubeRay (v1.7.0 by default) itself creates for a set of samples (golden
test data).

Run ``.venv/bin/python hack/golden/kuberay_objects.py`` (as root, like the integration tests).
It builds or reuses the control-plane binaries (``hack/controlplane/build.sh``); KubeRay's
operator binary, CRD directory and samples directory are ``--kuberay-bin``,
``--kuberay-crds`` and ``--kuberay-samples`` (or ``$KUBERAY_BIN``, ``$KUBERAY_CRDS``,
``$KUBERAY_SAMPLES``); each one not given comes from ``hack/peers/kuberay.sh`` for
``--kuberay-version`` (``$KUBERAY_VERSION``, default :data:`KUBERAY_VERSION`), which builds the
operator from its Go module (the CRDs and samples are the module's). For v1.7.0 from a
KubeRay checkout, e.g.::

    git -C KUBERAY archive v1.7.0 ray-operator/config | tar x -C /tmp/kr
    hack/golden/kuberay_objects.py --kuberay-bin .../v1.7.0/bin/kuberay-operator \
        --kuberay-crds /tmp/kr/ray-operator/config/crd/bases \
        --kuberay-samples /tmp/kr/ray-operator/config/samples

Then:

1. starts a control plane with :mod:`runtime.testing.controlplane` (kube-controller-manager,
   kube-scheduler, kwok, two fake nodes) with kube-apiserver's **audit log** on: level
   ``Request`` for ``create`` of pods, services, serviceaccounts, secrets, roles,
   rolebindings, rayclusters, batch jobs, and the Gateway API's gateways and httproutes,
   nothing else;
2. installs every CRD of KubeRay's CRD directory (RayCluster, RayJob, RayService, and
   RayCronJob from v1.6), then the Gateway API's (standard channel, from
   ``hack/gatewayapi/install.sh``; KubeRay reads Gateways and HTTPRoutes through its cache,
   so they must be served before it starts; no gateway controller runs: KubeRay creates
   them all the same);
3. runs the KubeRay binary as a subprocess (admin kubeconfig, no leader election, metrics and
   health probes on loopback, ``--use-kubernetes-proxy``, ``CLUSTER_DOMAIN=cluster.local``, a
   minimal environment);
4. creates every sample of :data:`SAMPLES` (for that version) and :data:`OWN_SAMPLES` at once,
   each in a namespace named after its file (``ray-cluster.sample.yaml`` ->
   ``ray-cluster-sample``), its ConfigMaps and Secrets before the Ray object (a Redis
   server's Deployment and Service are left out: :data:`SKIPPED_KINDS`);
   then for each sample waits - bounded - until KubeRay
   has created the head pod and every worker pod it will create (its reconcile creates the
   autoscaler's ServiceAccount/Role/RoleBinding and the services before any pod, so the pods
   come last); for a RayJob it then waits - bounded - for what KubeRay makes once that
   cluster is ready (kwok runs the pods Running and Ready): the RayJob's head Service
   ``<rayjob>-head-svc`` (created in ``Running``) and, in ``K8sJobMode``, the submitter Job
   (created in ``Initializing``, just before), and reads the RayJob back
   (``InteractiveMode`` is not recorded: it waits in ``Waiting`` for a ``spec.jobId``);
   then it reads the RayCluster back as stored (for a RayService or a RayJob: the
   RayCluster KubeRay made for it) and takes from the audit log the ``requestObject`` of
   every successful create KubeRay made in that namespace;
5. checks, once every sample is done, that KubeRay created nothing more in any of the
   namespaces meanwhile, stops KubeRay and the control plane, and writes one file per sample.

The samples of :data:`SERVED_SAMPLES` get steps 1-5 in a second, separate control plane
with the pod network and the Ray simulator (:mod:`tests.support.raysim`), so that their
head answers like a Ray head and KubeRay goes on after the pods: it deploys Serve through
the API server's service proxy, promotes the cluster once Serve is running and creates
what a serving RayService has (for ``NewClusterWithIncrementalUpgrade``: the per-cluster
serve Service, the Gateway and, once the cluster is active, the HTTPRoute). For such a
sample step 4 also waits - bounded - until the RayService is ``Ready`` and (incremental
upgrade) its HTTPRoute is created, and step 5 waits :data:`SETTLE_SECONDS` first. The
other samples never serve (nothing answers at their heads), which is what their
recordings show.

Output: ``tests/unit/testdata/kuberay-<version>/<sample file name without .yaml>.json`` (or
``--out DIR``), JSON with ``indent=1``, sorted keys and a trailing newline::

    {"source": "config/samples/<file>",      # path in KubeRay's module (or in this repo)
     "kuberay_version": "v1.7.0",
     "raycluster": {...},                     # as stored, without managedFields, uid,
                                              # resourceVersion, creationTimestamp,
                                              # generation and status
     "created": {"pods": [...], "services": [...], "serviceaccounts": [...],
                 "roles": [...], "rolebindings": [...], "secrets": [...]}}
                                              # and, for a RayService upgraded with
                                              # NewClusterWithIncrementalUpgrade,
                                              # "gateways": [...], "httproutes": [...]

A RayJob sample's file is ``kuberay-<version>/rayjob/<name>.json`` (:data:`RAYJOB_SUBDIR`); its
``created`` holds the RayCluster's objects only (those it controls), and two more keys hold
the RayJob's own (:data:`RAYJOB_KINDS`)::

     "rayjob": {...},                         # as stored, without the same bookkeeping;
                                              # of its status only what KubeRay chose:
                                              # jobId, rayClusterName, dashboardURL
     "rayjob_created": {"jobs": [...], "services": [...]}
                                              # the submitter Job (K8sJobMode) and
                                              # <rayjob>-head-svc: the creates of what the
                                              # RayJob controls, but its RayCluster

Each created object is the audit log's ``requestObject``: what the API server decoded from
KubeRay's request - its body with the API's *scheme defaults* applied (the apiserver defaults
while decoding, before audit logging; e.g. ``terminationMessagePath``, ``imagePullPolicy``,
``restartPolicy``, ``dnsPolicy``, port ``protocol``), but before admission. Values that change
from run to run are made stable and nothing else is changed: every ``ownerReferences[].uid``,
and the RayCluster's (and a RayService's) uid wherever it appears (GCS fault tolerance's
default external storage namespace), is ``"<uid>"``; the random five-character suffix KubeRay
gives a RayService's RayCluster name is ``xxxxx`` everywhere it appears; a multi-host replica's
random name (``<group>-<5 characters>``) is ``<group>-xxxx<replica index>``; a RayJob's uid is
``"<uid>"``, the random suffix of its RayCluster's name ``xxxxx`` and that of its generated
submission id (``status.jobId``, without ``spec.jobId``) ``yyyyy``, everywhere (and in
``SidecarMode``, where that id is in the head's spec, the head pod's
``ray.io/upgrade-strategy-recreate-hash`` is ``"<hash>"``); every value of a created Secret's
data (the auth token) is ``"<random>"``; and the default ports KubeRay appends to a *custom*
head service (``headGroupSpec.headService``, and to a RayJob's head Service, built from it),
in Go map order that changes from run to run, are sorted by name after the user's own
ports. Pods are sorted head first, then
workers by group, then by name or generateName; other lists by name (with the placeholders
in). Two runs give identical bytes. ``--only GLOB`` (repeatable) records only the samples whose
file name (without ``.yaml``) matches, and writes only their files.

Network safety: everything listens on and connects to ``127.0.0.1``. In the first control
plane there is no pod network and this machine routes the pod CIDR (``198.18.0.0/16``) to its
default gateway, so the API server's ``cluster`` egress (its pod, service and node proxy
connections - what KubeRay's ``--use-kubernetes-proxy`` mode uses to reach the Ray dashboard of
a RayService or of a running RayJob) goes through an HTTP CONNECT "proxy" of ours on a Unix
socket that refuses every request and counts them. The second one (:data:`SERVED_SAMPLES`)
has the harness's pod network: the pod CIDR routes into its network namespace, where the
simulator answers at the head pods' IPs, and the API server's proxy connections go there
directly (the simulator refuses to start unless the route is in place); nothing else is
dialled.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import fnmatch
import http.client
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from runtime.testing import controlplane  # noqa: E402
from tests.support import raysim  # noqa: E402

__all__ = [
    "CREATED_KINDS",
    "GATEWAY_KINDS",
    "KUBERAY_VERSION",
    "RAYJOB_KINDS",
    "RAYJOB_SUBDIR",
    "SAMPLES",
    "SERVED_SAMPLES",
    "Sample",
    "expected_worker_pods",
    "main",
    "normalise",
    "render",
    "sort_appended_ports",
]

KUBERAY_VERSION = "v1.7.0"
"""The KubeRay release recorded by default (``--kuberay-version``)."""

CREATED_KINDS = ("pods", "services", "serviceaccounts", "roles", "rolebindings", "secrets")
"""The keys of ``created``: the resources whose creates are recorded."""

GATEWAY_KINDS = ("gateways", "httproutes")
"""The Gateway API's resources (``gateway.networking.k8s.io``) whose creates are recorded:
more keys of ``created`` for a RayService upgraded with ``NewClusterWithIncrementalUpgrade``
(:attr:`Sample.incremental`), and only for it, so the other files keep their keys."""

RAYJOB_KINDS = ("jobs", "services")
"""The keys of a RayJob sample's ``rayjob_created``: the submitter Job (``batch/v1``, in
``K8sJobMode``) and the RayJob's head Service ``<rayjob>-head-svc``."""

RAYJOB_SUBDIR = "rayjob"
"""The folder of the output directory that holds the RayJob samples' files (their documents
have two more keys; the top level is one shape, read by the RayCluster golden tests)."""

RAYJOB_STATUS_FIELDS = ("jobId", "rayClusterName", "dashboardURL")
"""The fields of a RayJob's status that are recorded: the names KubeRay chose."""

INCREMENTAL_UPGRADE = "NewClusterWithIncrementalUpgrade"

TESTDATA = ROOT / "tests" / "unit" / "testdata"
"""Where ``kuberay-<version>/`` goes by default (``--out``)."""

SECRET_PLACEHOLDER = "<random>"
"""Every value of a created Secret's ``data`` (KubeRay's generated auth token)."""

UID_PLACEHOLDER = "<uid>"
RANDOM_SUFFIX_PLACEHOLDER = "xxxxx"
JOB_ID_SUFFIX_PLACEHOLDER = "yyyyy"
"""The random suffix of a RayJob's generated submission id (``<rayjob>-<5 characters>``)."""
USER_AGENT_PREFIX = "kuberay-operator/"
"""KubeRay sets its client's user agent to ``kuberay-operator/<version>``."""

WAIT_SECONDS = 90.0
"""Bound on waiting for KubeRay to create a sample's pods (all samples run at once), and
for a served sample on waiting until it is Ready with its HTTPRoute."""

SETTLE_SECONDS = 10.0
"""How long a served sample's KubeRay goes on reconciling before the check that it created
nothing more (its RayService controller requeues every 2 s)."""

SIMULATOR_DEPLOY_DELAY = 1.0
"""The Ray simulator's seconds from a Serve PUT to ``RUNNING`` (served samples)."""

T = TypeVar("T")


class Sample:
    """One sample: where it comes from and what it contains."""

    def __init__(self, source: str, path: pathlib.Path, *, served: bool = False) -> None:
        self.source = source
        """The path recorded in the output (relative to KubeRay's module or to this repo)."""
        self.path = path
        self.served = served
        """Recorded with the Ray simulator answering at its head (:data:`SERVED_SAMPLES`)."""
        self.stem = path.name.removesuffix(".yaml")
        self.namespace = "".join(c if c.isalnum() else "-" for c in self.stem.lower())
        self.docs: list[dict[str, Any]] = [
            d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)
        ]
        (self.ray_object,) = [d for d in self.docs if d.get("apiVersion") == "ray.io/v1"]
        self.kind = str(self.ray_object["kind"])
        self.name = str(self.ray_object["metadata"]["name"])

    @property
    def incremental(self) -> bool:
        """A RayService upgraded with ``NewClusterWithIncrementalUpgrade``: KubeRay creates a
        Gateway and an HTTPRoute for it (``created`` has :data:`GATEWAY_KINDS`)."""
        strategy = (self.ray_object.get("spec") or {}).get("upgradeStrategy") or {}
        return self.kind == "RayService" and strategy.get("type") == INCREMENTAL_UPGRADE

    @property
    def submission_mode(self) -> str | None:
        """A RayJob's ``submissionMode`` (KubeRay's default ``K8sJobMode``); None for the
        other kinds."""
        if self.kind != "RayJob":
            return None
        return str((self.ray_object.get("spec") or {}).get("submissionMode") or "K8sJobMode")

    @property
    def kinds(self) -> tuple[str, ...]:
        """The keys of this sample's ``created``."""
        return CREATED_KINDS + GATEWAY_KINDS if self.incremental else CREATED_KINDS


_SAMPLES_V1_5 = (
    "ray-cluster.sample.yaml",
    "ray-cluster.complete.yaml",
    "ray-cluster.autoscaler.yaml",
    "ray-cluster.autoscaler-v2.yaml",
    "ray-cluster.head-command.yaml",
    "ray-cluster.overwrite-command.yaml",
    "ray-cluster.tpu-v4-multihost.yaml",
    "ray-cluster.custom-head-service.yaml",
    "ray-service.sample.yaml",
)

SAMPLES: dict[str, tuple[str, ...]] = {
    "v1.5.0": _SAMPLES_V1_5,
    "v1.7.0": (
        *_SAMPLES_V1_5,
        # GCS fault tolerance, both ways of asking for it (KubeRay creates the pods without
        # a Redis server: the sample's Redis Deployment and Service are not created here).
        "ray-cluster.external-redis.yaml",  # spec.gcsFaultToleranceOptions
        "ray-cluster.deprecate-gcs-ft.yaml",  # the ray.io/ft-enabled annotation
        "ray-cluster.auth.yaml",  # authOptions.mode: token (KubeRay creates a Secret)
        # RayJobs: the RayCluster, the submitter Job and <rayjob>-head-svc.
        "ray-job.sample.yaml",  # K8sJobMode by default, runtimeEnvYAML
        "ray-job.shutdown.yaml",  # shutdownAfterJobFinishes with a TTL
        "ray-job.resources.yaml",  # entrypointNumCpus / NumGpus / Resources
        "ray-job.custom-head-svc.yaml",  # the cluster's head Service has a custom name
        "ray-job.light-weight-submitter.yaml",  # submitterPodTemplate with its own command
        "ray-job.deletion-rules.yaml",  # a multi-line entrypoint, deletionRules
        "ray-job.sidecar-mode.yaml",  # SidecarMode: the submitter in the head pod, no Job
    ),
}
"""Per KubeRay version, the file names under ``config/samples/`` of its module (its
samples at that tag) that are recorded; an unknown version gets the newest list."""

SERVED_SAMPLES: dict[str, tuple[str, ...]] = {
    "v1.5.0": (),
    "v1.7.0": (
        # NewClusterWithIncrementalUpgrade: the per-cluster serve Service and the Gateway
        # come with the cluster, the HTTPRoute once it serves and is promoted.
        "ray-service.incremental-upgrade.yaml",
    ),
}
"""Per KubeRay version, more of its samples, recorded in a second control plane where the
Ray simulator answers at their heads (an unknown version gets the newest list)."""

OWN_SAMPLES: dict[str, tuple[str, ...]] = {
    "v1.5.0": ("config/samples/ray_v1_raycluster.yaml",),
    "v1.7.0": (
        "config/samples/ray_v1_raycluster.yaml",
        "config/samples/ray_v1_rayservice.yaml",
        "config/samples/ray_v1_rayjob.yaml",
    ),
}
"""Per KubeRay version, this repository's own samples recorded with it."""

SKIPPED_KINDS = {("apps/v1", "Deployment"), ("v1", "Service")}
"""Objects of a sample not created (with a log line): a Redis server's Deployment and
Service, which KubeRay needs neither to accept a GCS FT cluster nor to create its pods."""


def log(message: str) -> None:
    print(f"[golden] {message}", file=sys.stderr, flush=True)


def wait_for(what: str, check: Callable[[], T | None], timeout: float) -> T:
    """Poll ``check`` until it returns something truthy; ``TimeoutError`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


# -- pure helpers (unit-testable) -------------------------------------------------------------


def expected_worker_pods(spec: Mapping[str, Any]) -> int:
    """Worker pods KubeRay creates for a RayCluster spec: per group, ``replicas`` held within
    ``[minReplicas, maxReplicas]`` (0 if the group is suspended), times ``numOfHosts``.

    >>> expected_worker_pods({"workerGroupSpecs": [
    ...     {"replicas": 1, "minReplicas": 1, "maxReplicas": 1, "numOfHosts": 2},
    ...     {"replicas": 9, "minReplicas": 0, "maxReplicas": 4},
    ...     {"replicas": 3, "minReplicas": 0, "maxReplicas": 5, "suspend": True}]})
    6
    """
    total = 0
    for group in spec.get("workerGroupSpecs") or []:
        if group.get("suspend"):
            continue
        low, high = int(group.get("minReplicas", 0)), int(group.get("maxReplicas", 2**31 - 1))
        replicas = int(group.get("replicas", low))
        desired = high if low > high else min(max(replicas, low), high)
        total += desired * max(int(group.get("numOfHosts", 1)), 1)
    return total


def normalise(obj: Any, renames: Mapping[str, str] | None = None) -> Any:
    """A copy of ``obj`` with every ``ownerReferences[].uid`` set to ``"<uid>"`` and each
    ``renames`` key replaced by its value inside every string (keys included).

    >>> normalise({"metadata": {"name": "a-q7x2b-head-", "ownerReferences": [{"uid": "1"}]}},
    ...           {"a-q7x2b": "a-xxxxx"})
    {'metadata': {'name': 'a-xxxxx-head-', 'ownerReferences': [{'uid': '<uid>'}]}}
    """

    def text(value: str) -> str:
        for old, new in (renames or {}).items():
            value = value.replace(old, new)
        return value

    def walk(value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {text(k): walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            items = [walk(v) for v in value]
            if key == "ownerReferences":
                items = [dict(ref, uid=UID_PLACEHOLDER) if "uid" in ref else ref for ref in items]
            return items
        if isinstance(value, str):
            return text(value)
        return copy.deepcopy(value)

    return walk(obj)


def pod_sort_key(pod: Mapping[str, Any]) -> tuple[int, str, str, str]:
    """Head first, then workers by group, then by name or generateName (then the whole body)."""
    meta = pod.get("metadata", {})
    labels = meta.get("labels", {})
    head = 0 if labels.get("ray.io/node-type") == "head" else 1
    name = meta.get("name") or meta.get("generateName") or ""
    return head, labels.get("ray.io/group", ""), name, json.dumps(pod, sort_keys=True)


def name_sort_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata", {})
    return meta.get("name") or meta.get("generateName") or "", json.dumps(obj, sort_keys=True)


def sort_appended_ports(service: dict[str, Any], given: int) -> None:
    """Sort by name the ports after the first ``given`` of a service (in place).

    KubeRay appends its default ports to a custom head service in Go map order, which
    changes from run to run; the user's own ports stay first, as given.

    >>> svc = {"spec": {"ports": [{"name": "mine"}, {"name": "gcs"}, {"name": "client"}]}}
    >>> sort_appended_ports(svc, 1)
    >>> [p["name"] for p in svc["spec"]["ports"]]
    ['mine', 'client', 'gcs']
    """
    ports = service.get("spec", {}).get("ports") or []
    ports[given:] = sorted(ports[given:], key=lambda port: str(port.get("name", "")))


def stored_raycluster(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The RayCluster as stored, without the server's volatile bookkeeping and the status."""
    out = copy.deepcopy(dict(obj))
    out.pop("status", None)
    meta = out.get("metadata", {})
    for key in ("managedFields", "uid", "resourceVersion", "creationTimestamp", "generation"):
        meta.pop(key, None)
    return out


def stored_rayjob(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A RayJob as stored, without the server's bookkeeping, and of its status only the names
    KubeRay chose (:data:`RAYJOB_STATUS_FIELDS`).

    >>> stored_rayjob({"metadata": {"name": "j", "uid": "u", "generation": 1},
    ...     "status": {"jobId": "j-b4c5d", "startTime": "2026-01-01T00:00:00Z"}})
    {'metadata': {'name': 'j'}, 'status': {'jobId': 'j-b4c5d'}}
    """
    status = obj.get("status") or {}
    out = stored_raycluster(obj)
    out["status"] = {k: copy.deepcopy(status[k]) for k in RAYJOB_STATUS_FIELDS if k in status}
    return out


def rayjob_renames(rayjob: Mapping[str, Any]) -> dict[str, str]:
    """The RayJob's uid -> ``"<uid>"``, and its generated submission id (``status.jobId``
    without ``spec.jobId``) -> ``<rayjob>-yyyyy``.

    >>> rayjob_renames({"metadata": {"name": "pi", "uid": "u1"}, "spec": {},
    ...                 "status": {"jobId": "pi-q7x2b"}})
    {'u1': '<uid>', 'pi-q7x2b': 'pi-yyyyy'}
    >>> rayjob_renames({"metadata": {"name": "pi", "uid": "u1"}, "spec": {"jobId": "mine"},
    ...                 "status": {"jobId": "mine"}})
    {'u1': '<uid>'}
    """
    renames = {str(rayjob["metadata"]["uid"]): UID_PLACEHOLDER}
    job_id = (rayjob.get("status") or {}).get("jobId")
    if job_id and not (rayjob.get("spec") or {}).get("jobId"):
        renames[job_id] = f"{rayjob['metadata']['name']}-{JOB_ID_SUFFIX_PLACEHOLDER}"
    return renames


def controlled_by_kind(obj: Mapping[str, Any]) -> str | None:
    """The kind of an object's controller owner (None without one).

    >>> controlled_by_kind({"metadata": {"ownerReferences": [
    ...     {"kind": "RayJob", "controller": True}]}})
    'RayJob'
    """
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("kind"))
    return None


def render(document: Mapping[str, Any]) -> str:
    """The file's exact text: ``indent=1``, sorted keys, a trailing newline."""
    return json.dumps(document, indent=1, sort_keys=True) + "\n"


# -- building and starting things -------------------------------------------------------------


def last_line(args: Sequence[str]) -> str:
    done = subprocess.run(args, check=True, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    lines = done.stdout.strip().splitlines()
    if not lines:
        raise RuntimeError(f"{args[0]} printed nothing")
    return lines[-1]


class RefusingConnectProxy:
    """An HTTP CONNECT endpoint on a Unix socket that answers 403 to everything, counting
    the targets asked for.

    The API server's ``cluster`` egress goes here, so nothing it proxies to a pod, service or
    node ever leaves the machine.
    """

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        self.targets: collections.Counter[str] = collections.Counter()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(path))
        self._sock.listen(16)
        self._thread = threading.Thread(target=self._serve, name="refusing-proxy", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                with contextlib.suppress(OSError):
                    head = conn.recv(4096).decode(errors="replace")
                    parts = head.split(" ", 2)
                    self.targets[parts[1] if len(parts) > 1 else "?"] += 1
                    conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")

    def close(self) -> None:
        self._sock.close()


AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {
            "level": "Request",
            "verbs": ["create"],
            "resources": [
                {"group": "", "resources": ["pods", "services", "serviceaccounts", "secrets"]},
                {"group": "rbac.authorization.k8s.io", "resources": ["roles", "rolebindings"]},
                {"group": "ray.io", "resources": ["rayclusters"]},
                {"group": "batch", "resources": ["jobs"]},
                {"group": "gateway.networking.k8s.io", "resources": list(GATEWAY_KINDS)},
            ],
        },
        {"level": "None"},
    ],
}


def egress_config(uds: pathlib.Path) -> dict[str, Any]:
    return {
        "apiVersion": "apiserver.k8s.io/v1beta1",
        "kind": "EgressSelectorConfiguration",
        "egressSelections": [
            {
                "name": "cluster",
                "connection": {
                    "proxyProtocol": "HTTPConnect",
                    "transport": {"uds": {"udsName": str(uds)}},
                },
            }
        ],
    }


@contextlib.contextmanager
def kuberay_running(
    binary: str, kubeconfig: pathlib.Path, log_path: pathlib.Path
) -> Iterator[subprocess.Popen[bytes]]:
    """Run the KubeRay operator until the block ends; it is killed (its whole group) on exit."""
    metrics, health = controlplane.free_ports(2)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/root"),
        "CLUSTER_DOMAIN": "cluster.local",
    }
    args = [
        binary,
        "--kubeconfig", str(kubeconfig),
        "--enable-leader-election=false",
        "--metrics-addr", f"127.0.0.1:{metrics}",
        "--health-probe-bind-address", f"127.0.0.1:{health}",
        "--use-kubernetes-proxy",
    ]  # fmt: skip
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )  # fmt: skip
    try:

        def healthy() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"KubeRay exited with {proc.returncode}; see {log_path}")
            conn = http.client.HTTPConnection("127.0.0.1", health, timeout=2)
            try:
                conn.request("GET", "/readyz")
                return conn.getresponse().status == 200
            except OSError:
                return False
            finally:
                conn.close()

        wait_for("KubeRay /readyz", healthy, 60)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait(5)


# -- the audit log ----------------------------------------------------------------------------


def kuberay_creates(audit_log: pathlib.Path) -> list[dict[str, Any]]:
    """Every completed ``create`` event KubeRay's client sent, in log order."""
    events = []
    with contextlib.suppress(FileNotFoundError), open(audit_log) as f:
        for line in f:
            if not line.endswith("\n"):
                break  # a line still being written
            event = json.loads(line)
            if event.get("stage") != "ResponseComplete" or event.get("verb") != "create":
                continue
            if not str(event.get("userAgent", "")).startswith(USER_AGENT_PREFIX):
                continue
            events.append(event)
    return events


def succeeded(event: Mapping[str, Any]) -> bool:
    return 200 <= int(event.get("responseStatus", {}).get("code", 0)) < 300


def in_namespace(events: Sequence[Mapping[str, Any]], namespace: str) -> list[Mapping[str, Any]]:
    return [e for e in events if e.get("objectRef", {}).get("namespace") == namespace]


# -- one run ----------------------------------------------------------------------------------


class Peer:
    """The KubeRay recorded: its version, binary, CRD directory and samples directory.

    Each path not given comes from ``hack/peers/kuberay.sh`` run with ``KUBERAY_VERSION``
    set to the version: it builds the binary from the Go module, and the CRDs
    (``config/crd/bases``) and samples (``config/samples``) are the module's.
    """

    def __init__(
        self,
        version: str,
        binary: pathlib.Path | None = None,
        crds: pathlib.Path | None = None,
        samples: pathlib.Path | None = None,
    ) -> None:
        self.version = version
        self._binary, self._crds, self._samples = binary, crds, samples

    def _script(self, *args: str) -> str:
        env = dict(os.environ, KUBERAY_VERSION=self.version)
        done = subprocess.run([str(ROOT / "hack/peers/kuberay.sh"), *args], check=True,
                              stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)  # fmt: skip
        return done.stdout.strip().splitlines()[-1]

    @property
    def binary(self) -> pathlib.Path:
        if self._binary is None:
            self._binary = pathlib.Path(self._script())
        return self._binary

    @property
    def crds(self) -> pathlib.Path:
        if self._crds is None:
            self._crds = pathlib.Path(self._script("--crds"))
        return self._crds

    @property
    def samples(self) -> pathlib.Path:
        if self._samples is None:
            self._samples = self.crds.parents[1] / "samples"
        return self._samples


def load_samples(peer: Peer) -> list[Sample]:
    names = SAMPLES.get(peer.version) or SAMPLES[max(SAMPLES, key=version_key)]
    own = OWN_SAMPLES.get(peer.version) or OWN_SAMPLES[max(OWN_SAMPLES, key=version_key)]
    served = SERVED_SAMPLES.get(peer.version)
    if served is None:
        served = SERVED_SAMPLES[max(SERVED_SAMPLES, key=version_key)]
    samples = [Sample(f"config/samples/{n}", peer.samples / n) for n in names]
    samples += [Sample(path, ROOT / path) for path in own]
    samples += [Sample(f"config/samples/{n}", peer.samples / n, served=True) for n in served]
    return samples


def version_key(version: str) -> tuple[int, ...]:
    """``"v1.10.0"`` -> ``(1, 10, 0)``: release tags in release order.

    >>> sorted(["v1.10.0", "v1.7.0", "v1.5.0"], key=version_key)
    ['v1.5.0', 'v1.7.0', 'v1.10.0']
    """
    return tuple(int(part) for part in version.lstrip("v").split(".") if part.isdigit())


def apply(cp: controlplane.ControlPlane, sample: Sample) -> None:
    ns = sample.namespace
    cp.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": {"name": ns}})  # fmt: skip
    for doc in sample.docs:
        if doc is sample.ray_object:
            continue
        kind = (doc.get("apiVersion"), doc.get("kind"))
        if kind in SKIPPED_KINDS:
            log(f"{sample.source}: not creating {kind[1]} {doc['metadata']['name']} "
                "(not needed for KubeRay to create the pods)")  # fmt: skip
            continue
        plural = {("v1", "ConfigMap"): "configmaps", ("v1", "Secret"): "secrets"}.get(kind)
        if plural is None:
            raise RuntimeError(f"{sample.source}: cannot create a {kind[1]} yet")
        cp.request("POST", f"/api/v1/namespaces/{ns}/{plural}", doc)
    plural = {"RayCluster": "rayclusters", "RayService": "rayservices", "RayJob": "rayjobs"}[
        sample.kind
    ]
    cp.request("POST", f"/apis/ray.io/v1/namespaces/{ns}/{plural}", sample.ray_object)


def the_raycluster(cp: controlplane.ControlPlane, sample: Sample) -> dict[str, Any] | None:
    """The RayCluster whose pods are recorded: the sample's, or the one KubeRay made for it."""
    base = f"/apis/ray.io/v1/namespaces/{sample.namespace}/rayclusters"
    if sample.kind == "RayCluster":
        return dict(cp.request("GET", f"{base}/{sample.name}"))
    items = cp.request("GET", base)["items"]
    if len(items) > 1:
        raise RuntimeError(f"{sample.source}: KubeRay made {len(items)} RayClusters")
    return dict(items[0]) if items else None


RECREATE_HASH_ANNOTATION = "ray.io/upgrade-strategy-recreate-hash"
HASH_PLACEHOLDER = "<hash>"
"""A ``SidecarMode`` RayJob's head pod's recreate hash: KubeRay hashes the head's spec, which
there holds the sidecar's random submission id."""

REPLICA_NAME_LABEL = "ray.io/worker-group-replica-name"
REPLICA_INDEX_LABEL = "ray.io/worker-group-replica-index"


def replica_renames(pods: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Each multi-host replica name KubeRay made up (``<group>-<5 random characters>``,
    label ``ray.io/worker-group-replica-name``) -> ``<group>-xxxx<replica index>``.

    >>> replica_renames([{"metadata": {"labels": {"ray.io/group": "tpu",
    ...     "ray.io/worker-group-replica-name": "tpu-5v64k",
    ...     "ray.io/worker-group-replica-index": "0"}}}])
    {'tpu-5v64k': 'tpu-xxxx0'}
    """
    renames = {}
    for pod in pods:
        labels = pod.get("metadata", {}).get("labels") or {}
        name = labels.get(REPLICA_NAME_LABEL)
        if name:
            group = labels.get("ray.io/group", "")
            renames[name] = f"{group}-xxxx{labels.get(REPLICA_INDEX_LABEL, '')}"
    return renames


def redact_secret(secret: dict[str, Any]) -> None:
    """Replace every value of a Secret's ``data`` and ``stringData`` by ``"<random>"``
    (in place): KubeRay's auth token is random.

    >>> secret = {"data": {"auth_token": "c2VjcmV0"}}
    >>> redact_secret(secret)
    >>> secret
    {'data': {'auth_token': '<random>'}}
    """
    for key in ("data", "stringData"):
        if secret.get(key):
            secret[key] = dict.fromkeys(secret[key], SECRET_PLACEHOLDER)


def served(cp: controlplane.ControlPlane, audit_log: pathlib.Path, sample: Sample) -> bool:
    """The RayService is ``Ready`` and, with an incremental upgrade, KubeRay has created its
    HTTPRoute (it does once the cluster is active: the pass after the promotion)."""
    base = f"/apis/ray.io/v1/namespaces/{sample.namespace}/rayservices/{sample.name}"
    conditions = (cp.request("GET", base).get("status") or {}).get("conditions") or []
    if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
        return False
    if not sample.incremental:
        return True
    return any(
        e["objectRef"]["resource"] == "httproutes" and succeeded(e)
        for e in in_namespace(kuberay_creates(audit_log), sample.namespace)
    )


def collect(
    cp: controlplane.ControlPlane, audit_log: pathlib.Path, sample: Sample, version: str
) -> tuple[dict[str, Any], int]:
    """Wait for a sample's pods (and a served one's Ready), then its output document and how
    many creates KubeRay made."""
    cluster = wait_for(
        f"the RayCluster of {sample.source}", lambda: the_raycluster(cp, sample), WAIT_SECONDS
    )
    want = 1 + expected_worker_pods(cluster["spec"])

    def pods_created() -> list[Mapping[str, Any]] | None:
        events = [e for e in in_namespace(kuberay_creates(audit_log), sample.namespace)
                  if succeeded(e)]  # fmt: skip
        pods = [e for e in events if e["objectRef"]["resource"] == "pods"]
        if len(pods) > want:
            raise RuntimeError(f"{sample.source}: KubeRay created {len(pods)} pods, not {want}")
        return events if len(pods) == want else None

    events = wait_for(f"{want} pods of {sample.source}", pods_created, WAIT_SECONDS)
    if sample.kind == "RayJob":
        what = "Job and head Service" if sample.submission_mode == "K8sJobMode" else "head Service"
        wait_for(f"the {what} of {sample.source}", lambda: rayjob_made(audit_log, sample),
                 WAIT_SECONDS)  # fmt: skip
        events = pods_created() or []
        if not events:
            raise RuntimeError(f"{sample.source}: KubeRay created fewer than {want} pods")
    if sample.served:
        what = "Ready with its HTTPRoute" if sample.incremental else "Ready"
        wait_for(f"{sample.source} {what}", lambda: served(cp, audit_log, sample), WAIT_SECONDS)
        events = pods_created() or []
        if not events:
            raise RuntimeError(f"{sample.source}: KubeRay created fewer than {want} pods")
    failed = [e for e in in_namespace(kuberay_creates(audit_log), sample.namespace)
              if not succeeded(e)]  # fmt: skip
    for event in failed:
        ref = event["objectRef"]
        log(f"{sample.source}: a create of {ref['resource']} {ref.get('name', '')} failed: "
            f"{event.get('responseStatus')}")  # fmt: skip
    cluster = the_raycluster(cp, sample) or cluster  # re-read: what the pods were built from
    created: dict[str, list[Any]] = {kind: [] for kind in sample.kinds}
    rayjob_objects: dict[str, list[Any]] = {kind: [] for kind in RAYJOB_KINDS}
    unexpected: collections.Counter[str] = collections.Counter()
    for event in events:
        resource, body = event["objectRef"]["resource"], event["requestObject"]
        if resource in rayjob_objects and controlled_by_kind(body) == "RayJob":
            rayjob_objects[resource].append(body)
        elif resource in created:
            created[resource].append(body)
        elif resource != "rayclusters":
            unexpected[resource] += 1
    if unexpected:
        raise RuntimeError(f"{sample.source}: unexpected creates {dict(unexpected)}")
    renames: dict[str, str] = {cluster["metadata"]["uid"]: UID_PLACEHOLDER}
    if sample.kind == "RayService":
        name = cluster["metadata"]["name"]
        renames[name] = f"{name[: -len(RANDOM_SUFFIX_PLACEHOLDER)]}{RANDOM_SUFFIX_PLACEHOLDER}"
        path = f"/apis/ray.io/v1/namespaces/{sample.namespace}/rayservices/{sample.name}"
        renames[cp.request("GET", path)["metadata"]["uid"]] = UID_PLACEHOLDER
    rayjob: dict[str, Any] = {}
    if sample.kind == "RayJob":
        name = cluster["metadata"]["name"]
        renames[name] = f"{name[: -len(RANDOM_SUFFIX_PLACEHOLDER)]}{RANDOM_SUFFIX_PLACEHOLDER}"
        path = f"/apis/ray.io/v1/namespaces/{sample.namespace}/rayjobs/{sample.name}"
        rayjob = dict(cp.request("GET", path))
        renames.update(rayjob_renames(rayjob))
    renames.update(replica_renames(created["pods"]))
    custom = cluster["spec"]["headGroupSpec"].get("headService")
    if custom:
        # a RayJob's head Service is built as its cluster's, in the same random order
        for service in created["services"] + rayjob_objects["services"]:
            sort_appended_ports(service, len(custom.get("spec", {}).get("ports") or []))
    for secret in created["secrets"]:
        redact_secret(secret)
    created = normalise(created, renames)
    if sample.submission_mode == "SidecarMode":
        for pod in created["pods"]:
            annotations = pod["metadata"].get("annotations") or {}
            if RECREATE_HASH_ANNOTATION in annotations:
                annotations[RECREATE_HASH_ANNOTATION] = HASH_PLACEHOLDER
    # Sorted once the random names are placeholders: their order is then the same every run.
    created["pods"].sort(key=pod_sort_key)
    for kind in sample.kinds[1:]:
        created[kind].sort(key=name_sort_key)
    document = {
        "source": sample.source,
        "kuberay_version": version,
        "raycluster": normalise(stored_raycluster(cluster), renames),
        "created": created,
    }
    if sample.kind == "RayJob":
        document["rayjob"] = normalise(stored_rayjob(rayjob), renames)
        document["rayjob_created"] = {
            kind: sorted(normalise(objects, renames), key=name_sort_key)
            for kind, objects in rayjob_objects.items()
        }
    return document, len(events)


def rayjob_made(audit_log: pathlib.Path, sample: Sample) -> bool:
    """KubeRay has created the RayJob's head Service and, in ``K8sJobMode``, its submitter
    Job (named as the RayJob)."""
    made = {
        (
            e["objectRef"]["resource"],
            e["objectRef"].get("name") or e["requestObject"]["metadata"].get("name"),
        )
        for e in in_namespace(kuberay_creates(audit_log), sample.namespace)
        if succeeded(e)
    }
    wanted = {("services", f"{sample.name}-head-svc")}
    if sample.submission_mode == "K8sJobMode":
        wanted.add(("jobs", sample.name))
    return wanted <= made


def creates_in(audit_log: pathlib.Path, namespace: str) -> int:
    """How many successful creates KubeRay has made in ``namespace`` so far."""
    return sum(1 for e in in_namespace(kuberay_creates(audit_log), namespace) if succeeded(e))


def record(
    peer: Peer,
    bin_dir: pathlib.Path,
    gateway_crds: pathlib.Path,
    samples: Sequence[Sample],
    *,
    served: bool,
) -> list[dict[str, Any]]:
    """One control plane and KubeRay for ``samples``: their documents, in order.

    ``served``: with the pod network and the Ray simulator (no egress guard: the pod CIDR
    routes into the pod network); else with the refusing egress proxy and no pod network.
    """
    started = time.monotonic()
    which = "served samples" if served else "samples"
    with tempfile.TemporaryDirectory(prefix="kuberay-golden-") as tmp:
        work = pathlib.Path(tmp)
        audit_log = work / "audit.log"
        (work / "audit-policy.json").write_text(json.dumps(AUDIT_POLICY))
        flags = [
            f"--audit-policy-file={work / 'audit-policy.json'}",
            f"--audit-log-path={audit_log}",
            "--audit-log-mode=blocking",
        ]
        guard = None
        if not served:
            guard = RefusingConnectProxy(work / "egress.sock")
            (work / "egress.json").write_text(json.dumps(egress_config(guard.path)))
            flags.append(f"--egress-selector-config-file={work / 'egress.json'}")
        options = controlplane.Options(
            bin_dir=bin_dir, controller_manager=True, scheduler=True, kwok=True, nodes=2,
            pod_network=served, extra_apiserver_flags=flags,
        )  # fmt: skip
        results: list[tuple[dict[str, Any], int]] = []
        sim: raysim.Simulator | None = None
        try:
            with contextlib.ExitStack() as stack:
                cp = stack.enter_context(controlplane.running(options))
                assert cp.kubeconfig is not None
                if served:
                    simulator = raysim.running(
                        cp, deploy_delay=SIMULATOR_DEPLOY_DELAY, log_path=work / "raysim.log"
                    )
                    sim = stack.enter_context(simulator)
                cp.install_crds(peer.crds)
                cp.install_crds(gateway_crds)
                log(f"{which}: control plane up, KubeRay and Gateway API CRDs installed "
                    f"({time.monotonic() - started:.0f}s)")  # fmt: skip
                with kuberay_running(str(peer.binary), cp.kubeconfig, work / "kuberay.log"):
                    log(f"{which}: KubeRay {peer.version} running "
                        f"({time.monotonic() - started:.0f}s)")  # fmt: skip
                    for sample in samples:
                        apply(cp, sample)
                    for sample in samples:
                        results.append(collect(cp, audit_log, sample, peer.version))
                        log(f"{sample.source}: {results[-1][1]} creates")
                    if served:
                        time.sleep(SETTLE_SECONDS)
                    # Whatever KubeRay did since, it must not have created anything more.
                    for sample, (_, count) in zip(samples, results, strict=True):
                        later = creates_in(audit_log, sample.namespace)
                        if later != count:
                            raise RuntimeError(
                                f"{sample.source}: KubeRay went on creating "
                                f"({count} -> {later} creates)"
                            )
                if sim is not None:
                    asked: collections.Counter[str] = collections.Counter()
                    for (_, port, method, url), n in sim.requests().items():
                        asked[f"{port} {method} {url}"] += n
                    log(f"the simulated heads were asked: {dict(sorted(asked.items()))}")
        except BaseException:
            for name in ("kuberay.log", "raysim.log"):
                path = work / name
                if path.exists():
                    tail = path.read_text(errors="replace").splitlines()[-30:]
                    log(f"last lines of {name}:\n" + "\n".join(tail))
            raise
        finally:
            if guard is not None:
                guard.close()
        if guard is not None:
            log(f"API server egress attempts refused: {sum(guard.targets.values())} "
                f"{dict(sorted(guard.targets.items()))}")  # fmt: skip
    return [document for document, _ in results]


def selected(samples: Sequence[Sample], only: Sequence[str]) -> list[Sample]:
    """The samples whose file name without ``.yaml`` matches one of the ``only`` globs (all of
    them without any); :class:`ValueError` when a glob matches none.

    >>> class S:
    ...     def __init__(self, stem): self.stem = stem
    >>> [s.stem for s in selected([S("ray-job.sample"), S("ray-cluster.sample")], ["ray-job.*"])]
    ['ray-job.sample']
    """
    if not only:
        return list(samples)
    for pattern in only:
        if not any(fnmatch.fnmatchcase(s.stem, pattern) for s in samples):
            raise ValueError(f"--only {pattern!r} matches no sample")
    return [s for s in samples if any(fnmatch.fnmatchcase(s.stem, p) for p in only)]


def output_path(out_dir: pathlib.Path, sample: Sample) -> pathlib.Path:
    """Where a sample's document goes: ``<out>/<stem>.json``, a RayJob's in
    ``<out>/rayjob/`` (:data:`RAYJOB_SUBDIR`)."""
    folder = out_dir / RAYJOB_SUBDIR if sample.kind == "RayJob" else out_dir
    return folder / f"{sample.stem}.json"


def run(peer: Peer, out_dir: pathlib.Path, only: Sequence[str] = ()) -> None:
    bin_dir = pathlib.Path(last_line([str(ROOT / "hack/controlplane/build.sh")]))
    gateway_crds = pathlib.Path(last_line([str(ROOT / "hack/gatewayapi/install.sh")]))
    samples = selected(load_samples(peer), only)
    started = time.monotonic()
    documents: dict[str, dict[str, Any]] = {}
    for served in (False, True):
        batch = [s for s in samples if s.served is served]
        if batch:
            done = record(peer, bin_dir, gateway_crds, batch, served=served)
            documents.update(zip((s.stem for s in batch), done, strict=True))
    for sample in samples:
        path = output_path(out_dir, sample)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(documents[sample.stem]))
    log(f"wrote {len(documents)} files to {out_dir} in {time.monotonic() - started:.0f}s")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    env = os.environ.get

    def path(value: str | None) -> pathlib.Path | None:
        return pathlib.Path(value) if value else None

    parser.add_argument("--kuberay-version", default=env("KUBERAY_VERSION") or KUBERAY_VERSION,
                        help="the KubeRay release recorded: picks the sample list, the output "
                             f"directory and what kuberay.sh builds ($KUBERAY_VERSION, "
                             f"default {KUBERAY_VERSION})")  # fmt: skip
    parser.add_argument("--kuberay-bin", type=path, default=path(env("KUBERAY_BIN")),
                        help="the operator binary ($KUBERAY_BIN; default: built by "
                             "hack/peers/kuberay.sh)")  # fmt: skip
    parser.add_argument("--kuberay-crds", type=path, default=path(env("KUBERAY_CRDS")),
                        help="directory of KubeRay's CRDs ($KUBERAY_CRDS; default: the Go "
                             "module's config/crd/bases)")  # fmt: skip
    parser.add_argument("--kuberay-samples", type=path, default=path(env("KUBERAY_SAMPLES")),
                        help="directory of KubeRay's samples at that version "
                             "($KUBERAY_SAMPLES; default: the module's samples)")  # fmt: skip
    parser.add_argument("--out", type=pathlib.Path,
                        help="output directory (default testdata/kuberay-<version>)")  # fmt: skip
    parser.add_argument("--only", action="append", default=[], metavar="GLOB",
                        help="record only the samples whose file name without .yaml matches "
                             "(repeatable; default: all)")  # fmt: skip
    args = parser.parse_args(argv)
    peer = Peer(args.kuberay_version, args.kuberay_bin, args.kuberay_crds, args.kuberay_samples)
    out = args.out or TESTDATA / f"kuberay-{peer.version}"
    run(peer, out, args.only)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
