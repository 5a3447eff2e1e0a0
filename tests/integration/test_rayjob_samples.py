"""KubeRay's RayJob samples, created unchanged, reach the state KubeRay v1.7.0 reaches for them.

**The samples** are ``config/samples/ray-job.*.yaml`` of KubeRay's Go module that ``make
peers`` downloads (v1.5.0, found as ``test_api_crds.py`` finds them:
``hack/peers/kuberay.sh --crds``), or those of the directory ``$KUBERAY_RAYJOB_SAMPLES``
names (e.g. ``~/.cache/rayservice-operator/peers/kuberay/v1.7.0/config/samples``). Each
sample file gets its own namespace and every object in it is created there in file order,
as ``kubectl create -f`` would (``kubectl apply`` refuses the ``generateName`` of the Kueue
toy sample), except the kinds below. The samples' images, commands and resource amounts
are what the simulation ignores: kwok runs no containers, and the Ray simulator
(:mod:`tests.support.raysim`) answers at every head pod's IP; a sample's entrypoint is a
real Python command it does not run, so its defaults apply (:mod:`tests.support.raysim.jobs`:
``PENDING`` 0.3 s, ``RUNNING`` 1 s, then ``SUCCEEDED``).

=====================================  =======================================================
kind left out                          why
=====================================  =======================================================
``scheduling.volcano.sh/v1beta1``      Volcano's CRD is not installed (no Volcano on the control
``Queue`` (volcano-scheduler-queue)    plane, and ours has no batch-scheduler integration:
                                       ``--batch-scheduler`` is refused); ``kubectl create -f``
                                       fails on that document with ``no matches for kind`` and
                                       creates the others, as here. KubeRay v1.7.0 without
                                       ``--batch-scheduler`` ignores the Volcano labels too.
=====================================  =======================================================

**The state each reaches** (:func:`scenario`; every wait bounded, all samples at once, in
parallel, under one manager - the RayCluster and RayJob controllers in this process,
watching the samples' namespaces, with the short polls of
:data:`~tests.integration.rayjob_harness.PLAN`):

=========================  ===================================================================
sample                     what KubeRay v1.7.0 reaches, asserted
=========================  ===================================================================
most (sample, resources,   ``Complete`` / ``SUCCEEDED``, ``succeeded: 1``: the submitter Job's
custom-head-svc, modin     pod is played by :class:`Submitters` (``ray job submit --no-wait``
(v1.5.0 only),             and ``ray job logs --follow`` at the head's IP, then the pod
yunikorn-scheduler,        ``Succeeded``), which submitted once; the Job ``Complete``; the
volcano-scheduler-queue,   cluster kept. platform-events' ServiceAccount, Role and RoleBinding
platform-events (v1.7.0))  are created with it (the RoleBinding's subject names ``default``,
                           as in the file).
light-weight-submitter     the same, its pod running KubeRay's ``/submitter`` (``quay.io/
                           kuberay/submitter``; the RayJob has no ``entrypoint``): played as
                           that binary does (submit with ``--runtime-env-json``, tail the logs
                           until the job ends, exit 0).
shutdown, kueue-toy-sample ``Complete``, then the RayCluster deleted ``ttlSecondsAfterFinished``
                           (10 s) after ``status.endTime`` (within :data:`SLACK_S`), the RayJob
                           and the submitter Job kept. The Kueue toy sample is *not* suspended
                           by itself: ``suspend`` is commented out and it has no
                           ``kueue.x-k8s.io/queue-name`` label, so without Kueue's webhook
                           KubeRay v1.7.0 runs it like any other.
sandbox (v1.7.0)           ``Complete``; its cluster's TTL (600 s) is longer than this test
                           waits (:data:`LONGEST_TTL_S`): the cluster is still there.
deletion-rules             ``Complete``, then the ``SUCCEEDED`` rules in TTL order, each no
                           earlier than ``endTime`` + its TTL and within :data:`SLACK_S` after:
                           ``DeleteWorkers`` (30 s: every worker group ``suspend: true`` and
                           its pods going),
                           ``DeleteCluster`` (60 s), ``DeleteSelf`` (90 s: the RayJob gone).
interactive-mode           ``Waiting`` (no ``jobId``, the ``dashboardURL`` set), still after
                           :data:`STABLE_S`; then the test submits a job at the head's IP as
                           ``ray job submit`` would (Ray names it ``raysubmit_...``) and sets
                           ``spec.jobId`` to it, as a user would: ``Complete`` / ``SUCCEEDED``
                           with that ``jobId``.
sidecar-mode               the head pod's ``ray-job-submitter`` container is played
                           (:func:`tests.integration.test_rayjob_sidecar.play_sidecar`: submit
                           at the head's IP, follow the job, then the container marked
                           terminated with exit code 0); the RayJob does not watch head pods,
                           so ``Complete`` is seen at its next poll: within
                           :data:`~tests.integration.test_rayjob_sidecar.SEEN_WITHIN` s.
                           The container ends only once the RayJob is ``Running``: the
                           sample's job (a runtime env with pip installs) outlasts the
                           operator seeing its cluster ready, the simulated 1.3 s one may
                           not - and a sidecar that ends first leaves the head pod not
                           ``Ready``, so the cluster never becomes ready and the RayJob stays
                           ``Initializing`` (KubeRay v1.7.0's ``CheckAllPodsRunning`` too
                           needs every pod ``Ready``).
use-existing-raycluster    ``Initializing`` with a Warning ``RayClusterNotFound``, still after
                           :data:`STABLE_S`: the file holds no RayCluster
                           ``ray-cluster-kuberay`` (KubeRay's docs create one first), and
                           no RayCluster is made.
batch-inference,           ``Initializing``: a pod of its cluster fits no fake node
tpu-v6e-singlehost,        (:func:`unschedulable`: ``nvidia.com/gpu`` / ``google.com/tpu``
tpu-v6e-16-multihost,      requests, GKE ``nodeSelector`` labels), so kube-scheduler reports
tpu-v6e-256-multihost,     it ``Unschedulable``, the cluster never becomes ready, no
tpu-jax (v1.7.0)           submitter Job and no submission, still after :data:`STABLE_S`;
                           every pod is made all the same (head, and ``replicas`` x
                           ``numOfHosts`` per worker group: 64 for ``tpu-v6e-256``).
                           The samples are not edited to fit (they would need GPU/TPU nodes).
=========================  ===================================================================

The classification is read from each sample's spec (its mode, ``clusterSelector``, its
pods against the fake nodes, its deletion policy), so a sample of another KubeRay version
is checked by the same rules. A failure names the sample and carries what the namespace
held (RayJob status, RayClusters, pods, submitter Jobs, Events); the module's last
teardown prints one line per sample (run with ``-s`` or ``-rA`` to see them). The
deletion rules' 90 s TTL sets the duration: about 110 s for the whole module.

Against the v1.7.0 samples (on a machine that has them)::

    export KUBERAY_RAYJOB_SAMPLES=~/.cache/rayservice-operator/peers/kuberay/v1.7.0/config/samples
    .venv/bin/python -m pytest tests/integration/test_rayjob_samples.py -q -rA
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import json
import os
import pathlib
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import yaml

import api.v1 as v1
import controllers.setup
from controllers.ray import dashboard
from controllers.raycluster import setup as raycluster_setup
from controllers.rayjob import reconciler as reconciler_
from controllers.rayjob import setup as rayjob_setup
from runtime import manager as manager_
from runtime.client import client as client_
from runtime.client import errors, resources
from runtime.testing import controlplane
from tests.integration import helpers
from tests.integration import rayjob_harness as j
from tests.integration import rayservice_harness as h
from tests.integration import test_api_crds as crds_test
from tests.integration import test_rayjob_sidecar as sidecar_test
from tests.support import raysim

pytestmark = pytest.mark.asyncio(loop_scope="module")

Obj = dict[str, Any]

SAMPLES_ENV = "KUBERAY_RAYJOB_SAMPLES"
"""A directory of ``ray-job.*.yaml`` to run instead of KubeRay v1.5.0's module's."""
NODES = resources.Resource("", "v1", "Node", "nodes", namespaced=False)
SKIPPED = {
    ("scheduling.volcano.sh/v1beta1", "Queue"): "Volcano's CRD is not installed (see the "
    "module docstring)",
}
"""Kinds left out, and why (the module docstring's table)."""

UP_S = 90.0
"""Seconds from creation to the first state a sample's RayJob settles in (``Complete``,
``Waiting``, a pod ``Unschedulable``), with all samples started at once on 2 cores."""
STABLE_S = 3.0
"""Seconds a waiting state must hold (longer than a poll of the harness's PLAN)."""
SLACK_S = 10.0
"""Seconds after ``endTime`` + a TTL by which its deletion must be seen."""
LONGEST_TTL_S = 120
"""TTLs above this are not waited for (the sandbox sample's 600 s)."""
SCENARIO_S = 200.0
"""The bound on one sample's whole scenario (the deletion rules' 90 s TTL is the longest)."""


# -- the samples -----------------------------------------------------------------------------


def sample_paths() -> tuple[pathlib.Path, ...] | str:
    """The samples to run, or why there are none."""
    override = os.environ.get(SAMPLES_ENV)
    if not override:
        return crds_test.kuberay_samples()
    found = tuple(sorted(pathlib.Path(override).expanduser().glob("ray-job.*.yaml")))
    return found or f"${SAMPLES_ENV}: no ray-job.*.yaml in {override}"


def _sample_params() -> list[Any]:
    found = sample_paths()
    if isinstance(found, str):
        return [pytest.param(None, id="kuberay-samples-missing")]
    return [pytest.param(path.name, id=path.name) for path in found]


@dataclasses.dataclass
class Sample:
    """One sample file and what was made of it."""

    path: pathlib.Path
    namespace: str
    docs: list[Obj]
    skipped: list[str] = dataclasses.field(default_factory=list)
    rayjob: str = ""
    """The RayJob's name (the API server's, for a ``generateName``)."""
    created_at: float = 0.0

    @property
    def spec(self) -> Obj:
        [job] = [d for d in self.docs if d.get("kind") == "RayJob"]
        spec: Obj = job["spec"]
        return spec

    @property
    def mode(self) -> str:
        return str(self.spec.get("submissionMode") or "K8sJobMode")


def load(path: pathlib.Path) -> Sample:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    jobs = [d for d in docs if d.get("kind") == "RayJob"]
    assert len(jobs) == 1, f"{path.name}: {len(jobs)} RayJobs (this test plays one a sample)"
    stem = path.name.removeprefix("ray-job.").removesuffix(".yaml")
    stem = re.sub(r"[^a-z0-9-]+", "-", stem.lower()).strip("-")[:40]
    return Sample(path, f"rjs-{stem}-{secrets.token_hex(3)}", docs)


async def create_objects(client: client_.Client, sample: Sample) -> None:
    """Every document of the file, in order, as ``kubectl create -f`` would."""
    for doc in sample.docs:
        key = (str(doc.get("apiVersion")), str(doc.get("kind")))
        meta = doc.get("metadata") or {}
        what = f"{key[1]}/{meta.get('name') or meta.get('generateName')}"
        if key in SKIPPED:
            sample.skipped.append(f"{what}: {SKIPPED[key]}")
            continue
        if key not in client.registry:
            raise AssertionError(f"{sample.path.name}: {what}: a kind this test does not know")
        created = await client.create(doc, namespace=sample.namespace)
        if key[1] == "RayJob":
            sample.rayjob = created["metadata"]["name"]
            sample.created_at = time.monotonic()


def unschedulable(spec: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]) -> str | None:
    """Why a pod of the sample's own cluster fits no fake node (``None``: each one fits):
    a ``nodeSelector`` no node's labels match, or a resource (by name) no node has.

    >>> node = {"metadata": {"labels": {"type": "kwok"}},
    ...         "status": {"allocatable": {"cpu": "1k", "memory": "1Ti", "pods": "1M"}}}
    >>> gpu = {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    >>> unschedulable({"rayClusterSpec": {"headGroupSpec": {"template": {"spec": gpu}}}}, [node])
    'head asks for nvidia.com/gpu, which no node has'
    """
    cluster = spec.get("rayClusterSpec") or {}
    groups = [("head", cluster.get("headGroupSpec") or {})]
    groups += [(str(g.get("groupName")), g) for g in cluster.get("workerGroupSpecs") or ()]
    for name, group in groups:
        pod = (group.get("template") or {}).get("spec") or {}
        selector = pod.get("nodeSelector") or {}
        fits = [
            n
            for n in nodes
            if all(((n.get("metadata") or {}).get("labels") or {}).get(k) == v
                   for k, v in selector.items())
        ]  # fmt: skip
        if not fits:
            return f"{name}: nodeSelector {selector} matches no node"
        for container in pod.get("containers") or ():
            amounts = container.get("resources") or {}
            for resource in {**(amounts.get("limits") or {}), **(amounts.get("requests") or {})}:
                if not any(
                    resource in ((n.get("status") or {}).get("allocatable") or {}) for n in fits
                ):
                    return f"{name} asks for {resource}, which no node has"
    return None


# -- the submitters --------------------------------------------------------------------------


def lightweight_request(args: Sequence[str], submission_id: str) -> Obj:
    """The Jobs API request KubeRay's light-weight submitter (``/submitter``) makes from its
    arguments (pflag's flags, then ``--`` and the entrypoint's words)."""
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    for flag in ("--runtime-env-json", "--metadata-json", "--entrypoint-resources"):
        parser.add_argument(flag, default="")
    for flag in ("--entrypoint-num-cpus", "--entrypoint-num-gpus"):
        parser.add_argument(flag, type=float, default=0.0)
    parser.add_argument("entrypoint", nargs="*")
    parsed = parser.parse_args(list(args))
    body: Obj = {"entrypoint": " ".join(parsed.entrypoint), "submission_id": submission_id}
    for key, text in (
        ("runtime_env", parsed.runtime_env_json),
        ("metadata", parsed.metadata_json),
        ("entrypoint_resources", parsed.entrypoint_resources),
    ):
        if text:
            body[key] = json.loads(text)
    if parsed.entrypoint_num_cpus:
        body["entrypoint_num_cpus"] = parsed.entrypoint_num_cpus
    if parsed.entrypoint_num_gpus:
        body["entrypoint_num_gpus"] = parsed.entrypoint_num_gpus
    return body


class Submitters(j.Submitter):
    """:class:`~tests.integration.rayjob_harness.Submitter` (the default submitter's
    script), and KubeRay's light-weight submitter for a pod whose first container runs
    ``/submitter``: submit (Ray's "already exists" tolerated), tail the logs until the job
    ends, exit 0 (the log stream closed normally, whatever Ray's status)."""

    async def _play(self, name: str, pod: Obj) -> None:
        container = pod["spec"]["containers"][0]
        if container.get("command") != ["/submitter"]:
            await super()._play(name, pod)
            return
        job_id = j._env(pod, "RAY_JOB_SUBMISSION_ID")
        address = j._env(pod, "RAY_DASHBOARD_ADDRESS")
        played = j.Played(name, job_id, submitted=False)
        self.played[name] = played
        body = lightweight_request(container.get("args") or (), job_id)
        while True:
            ip = await self._head_ip(address)
            if ip:
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    code, answer = await self._call("POST", ip, "/api/jobs/", body)
                    if code == 200 or "already exists" in str(answer):
                        played.submitted = code == 200
                        break
                    raise AssertionError(f"/submitter: {code} {answer}")
            await asyncio.sleep(0.3)
        while True:  # the websocket of /api/jobs/<id>/logs/tail, until Ray closes it
            await asyncio.sleep(0.3)
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                code, answer = await self._call("GET", ip, f"/api/jobs/{job_id}")
                if code == 200 and answer.get("status") in j.TERMINAL:
                    played.ray_status = str(answer["status"])
                    break
        played.exit_code = 0
        await self._finish(name, 0)


# -- the world: the manager, the samples, their scenarios ------------------------------------


@dataclasses.dataclass
class World:
    cp: controlplane.ControlPlane
    client: client_.Client
    sim: raysim.Simulator
    nodes: list[Obj]
    samples: dict[str, Sample]
    submitters: dict[str, Submitters] = dataclasses.field(default_factory=dict)
    tasks: dict[str, asyncio.Task[str]] = dataclasses.field(default_factory=dict)


# The shared RayJob fixtures (tests/integration/rayjob_harness.py).
crds, sim = j.crds, j.sim


async def start_manager(cp: controlplane.ControlPlane, namespaces: Sequence[str]) -> h.Running:
    """:func:`tests.integration.rayjob_harness.start_manager`'s manager, watching every
    sample's namespace."""
    client = await client_.Client.from_kubeconfig(cp.kubeconfig)
    mgr = manager_.Manager(client, manager_.Options(
        name="rayjob-operator",
        namespaces=list(namespaces), metrics_bind_address="0", health_probe_bind_address="0",
        graceful_shutdown_timeout=5.0, cache_by_resource=controllers.setup.cache_by_resource(),
        events=controllers.setup.EVENT_OPTIONS,
    ))  # fmt: skip
    dashboards = dashboard.Dashboards(api=client)
    raycluster_setup.setup(mgr, skip_name_validation=True)
    rayjob_setup.setup(
        mgr,
        dashboards=dashboards,
        options=reconciler_.Options(address_mode="pod-ip", plan=j.PLAN),
        skip_name_validation=True,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(mgr.start(stop))
    return h.Running(mgr, client, dashboards, task, stop)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(
    control_plane: controlplane.ControlPlane, sim: raysim.Simulator
) -> AsyncIterator[World]:
    found = sample_paths()
    paths = () if isinstance(found, str) else found
    client = await client_.Client.from_kubeconfig(control_plane.kubeconfig)
    v1.add_to_registry(client.registry)
    nodes = (await client.list(NODES)).items
    w = World(control_plane, client, sim, nodes, {p.name: load(p) for p in paths})
    if not w.samples:  # the test says why; no manager for all namespaces
        yield w
        await client.close()
        return
    for sample in w.samples.values():
        control_plane.request(
            "POST", "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": sample.namespace}},
        )  # fmt: skip
    running = await start_manager(control_plane, [s.namespace for s in w.samples.values()])
    try:
        async with contextlib.AsyncExitStack() as stack:
            for sample in w.samples.values():
                w.submitters[sample.namespace] = await stack.enter_async_context(
                    Submitters(control_plane, client, sample.namespace)
                )
            for sample in w.samples.values():
                await create_objects(client, sample)
            for name, sample in w.samples.items():
                w.tasks[name] = asyncio.create_task(scenario(w, sample), name=name)
            try:
                yield w
            finally:
                print(report(w))
                for task in w.tasks.values():
                    task.cancel()
                for task in w.tasks.values():
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
    finally:
        await running.stop()
        for sample in w.samples.values():
            h.release_finalizers(control_plane, sample.namespace, "rayjobs")
            with contextlib.suppress(controlplane.ApiError):
                control_plane.request("DELETE", f"/api/v1/namespaces/{sample.namespace}")
        await client.close()


@pytest.mark.parametrize("name", _sample_params())
async def test_sample_reaches_the_state_kuberay_reaches(world: World, name: str | None) -> None:
    if name is None:
        pytest.fail(str(sample_paths()))
    outcome = await asyncio.wait_for(asyncio.shield(world.tasks[name]), SCENARIO_S + 10)
    print(f"{name}: {outcome}")


# -- the scenarios ---------------------------------------------------------------------------


async def scenario(w: World, sample: Sample) -> str:
    """What the sample reached (one line), or an AssertionError naming what went wrong and
    what its namespace held."""
    try:
        return await asyncio.wait_for(_scenario(w, sample), SCENARIO_S)
    except (AssertionError, TimeoutError) as exc:
        took = time.monotonic() - sample.created_at
        held = await describe(w.client, sample.namespace)
        raise AssertionError(
            f"{sample.path.name} ({sample.namespace}, {took:.0f} s): {exc or type(exc).__name__}"
            f"\n{held}"
        ) from None


async def _scenario(w: World, sample: Sample) -> str:
    client, ns, name = w.client, sample.namespace, sample.rayjob
    spec = sample.spec
    why = unschedulable(spec, w.nodes)
    if why:
        return await stays_initializing(w, sample, why)
    if spec.get("clusterSelector"):
        return await cluster_not_found(w, sample)
    steps = [f"skipped {'; '.join(sample.skipped)}"] if sample.skipped else []
    user_job = None
    if sample.mode == "InteractiveMode":
        user_job = await interactive(w, sample, steps)
    elif sample.mode == "SidecarMode":
        steps.append(await sidecar(w, sample))
    done = await j.wait_state(client, ns, "Complete", within=UP_S, name=name)
    status = done["status"]
    steps.append(f"Complete {time.monotonic() - sample.created_at:.1f} s after creation")
    assert (status.get("jobStatus"), status.get("succeeded"), status.get("failed")) == (
        "SUCCEEDED", 1, 0,
    ), status  # fmt: skip
    job_id = status["jobId"]
    if user_job is not None:
        assert job_id == user_job, status
    if sample.mode == "K8sJobMode":
        played = list(w.submitters[ns].played.values())
        assert [p.submission_id for p in played] == [job_id], played
        submitter = await client.get(j.JOBS, ns, name)
        conditions = (submitter.get("status") or {}).get("conditions") or ()
        assert any(c["type"] == "Complete" and c["status"] == "True" for c in conditions), (
            submitter.get("status")
        )
    assert j.submissions(w.sim, job_id) == 1, w.sim.job_requests()
    steps += await after_the_end(w, sample, done)
    return "; ".join(steps)


async def interactive(w: World, sample: Sample, steps: list[str]) -> str:
    """``Waiting`` until ``spec.jobId`` is set; then a job submitted as a user would, and
    its id set: the job id the RayJob must then follow."""
    client, ns, name = w.client, sample.namespace, sample.rayjob
    waiting = await j.wait_state(client, ns, "Waiting", within=UP_S, name=name)
    assert not waiting["status"].get("jobId"), waiting["status"]
    assert waiting["status"].get("dashboardURL"), waiting["status"]
    await asyncio.sleep(STABLE_S)
    still = await j.get_job(client, ns, name)
    assert j.state(still) == "Waiting", still.get("status")
    steps.append(f"Waiting {time.monotonic() - sample.created_at:.1f} s after creation")
    ip = await h.head_ip(client, ns, still["status"]["rayClusterName"])
    async with aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=5, connect=2),
        connector=aiohttp.TCPConnector(force_close=True),
    ) as http:
        body = {"entrypoint": "python -c 'import ray; ray.init()'"}  # ray job submit --no-wait
        async with http.post(h.pod_url(w.cp, ip, 8265, "/api/jobs/"), json=body) as response:
            answer = await response.json(content_type=None)
            assert response.status == 200, answer
    job_id = str(answer["submission_id"])
    await client.patch(v1.RAYJOBS, ns, name, {"spec": {"jobId": job_id}})
    steps.append(f"spec.jobId set to {job_id}")
    return job_id


async def sidecar(w: World, sample: Sample) -> str:
    """The head pod's submitter container played; the RayJob ``Complete`` by its next poll."""
    client, ns, name = w.client, sample.namespace, sample.rayjob

    def named(obj: Obj) -> bool:
        return bool((obj.get("status") or {}).get("rayClusterName"))

    obj = await j.wait_job(client, ns, named, UP_S, "a rayClusterName", name=name)
    cluster = obj["status"]["rayClusterName"]
    await h.head_ip(client, ns, cluster, within=UP_S)

    async def running(ray_status: str) -> None:
        """The sample's job outlasts the operator seeing its cluster ready (see the module
        docstring): the sidecar exits once the RayJob is ``Running``."""
        await j.wait_state(client, ns, "Running", within=UP_S, name=name)

    ended = await sidecar_test.play_sidecar(w.cp, client, ns, cluster, before_exit=running)
    assert (ended.submitted, ended.ray_status, ended.exit_code) == (True, "SUCCEEDED", 0), ended
    await j.wait_state(client, ns, "Complete", within=sidecar_test.SEEN_WITHIN + 5, name=name)
    took = time.monotonic() - ended.at
    assert took <= sidecar_test.SEEN_WITHIN, f"Complete {took:.1f} s after the sidecar ended"
    return f"sidecar exited 0, Complete {took:.1f} s later"


async def stays_initializing(w: World, sample: Sample, why: str) -> str:
    client, ns, name = w.client, sample.namespace, sample.rayjob

    async def stuck() -> list[str]:
        pods = await client.list(h.PODS, ns, label_selector="ray.io/is-ray-node=yes")
        return [
            p["metadata"]["name"]
            for p in pods.items
            if any(
                c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                for c in (p.get("status") or {}).get("conditions") or ()
            )
        ]

    pending = await helpers.eventually(stuck, UP_S, "a pod of the cluster Unschedulable")
    groups = (sample.spec.get("rayClusterSpec") or {}).get("workerGroupSpecs") or ()
    wanted = 1 + sum(int(g.get("replicas") or 0) * int(g.get("numOfHosts") or 1) for g in groups)

    async def made() -> int | None:
        pods = await client.list(h.PODS, ns, label_selector="ray.io/is-ray-node=yes")
        return len(pods.items) if len(pods.items) == wanted else None

    await helpers.eventually(made, UP_S, f"the {wanted} pods (replicas x numOfHosts) made")
    await asyncio.sleep(STABLE_S)
    obj = await j.get_job(client, ns, name)
    status = obj.get("status") or {}
    assert j.state(obj) == "Initializing", status
    assert not (await client.list(j.JOBS, ns)).items, "a submitter Job before the cluster is ready"
    assert j.submissions(w.sim, str(status.get("jobId"))) == 0
    return f"Initializing ({why}; {wanted} pods made, {len(pending)}+ Unschedulable)"


async def cluster_not_found(w: World, sample: Sample) -> str:
    client, ns, name = w.client, sample.namespace, sample.rayjob
    selected = sample.spec["clusterSelector"].get("ray.io/cluster")

    async def warned() -> list[Obj]:
        return await j.events_of(client, ns, name, "RayClusterNotFound")

    found = await helpers.eventually(warned, UP_S, "a RayClusterNotFound Event")
    assert found[0]["type"] == "Warning", found[0]
    await asyncio.sleep(STABLE_S)
    obj = await j.get_job(client, ns, name)
    status = obj.get("status") or {}
    assert j.state(obj) == "Initializing", status
    assert status.get("rayClusterName") == selected, status
    assert await h.all_clusters(client, ns) == []
    return f"Initializing (RayCluster {selected} not found: Warning RayClusterNotFound)"


# -- after the end: the deletion policies ----------------------------------------------------


def _policies(spec: Mapping[str, Any]) -> list[tuple[str, int]]:
    """What a ``SUCCEEDED`` job's end triggers: (policy, TTL s), in TTL order."""
    strategy = spec.get("deletionStrategy") or {}
    ttl = int(spec.get("ttlSecondsAfterFinished") or 0)
    if strategy.get("deletionRules"):
        rules = [
            (str(r["policy"]), int((r.get("condition") or {}).get("ttlSeconds") or 0))
            for r in strategy["deletionRules"]
            if (r.get("condition") or {}).get("jobStatus") == "SUCCEEDED"
        ]
    elif strategy.get("onSuccess"):
        rules = [(str(strategy["onSuccess"].get("policy")), ttl)]
    elif spec.get("shutdownAfterJobFinishes"):
        rules = [("DeleteCluster", ttl)]
    else:
        rules = []
    return sorted((r for r in rules if r[0] != "DeleteNone"), key=lambda r: r[1])


async def after_the_end(w: World, sample: Sample, done: Obj) -> list[str]:
    client, ns, name = w.client, sample.namespace, sample.rayjob
    status = done["status"]
    cluster = status["rayClusterName"]
    end = datetime.datetime.fromisoformat(status["endTime"].replace("Z", "+00:00")).timestamp()

    async def rayjob_gone() -> bool:
        with contextlib.suppress(errors.NotFound):
            return bool((await j.get_job(client, ns, name))["metadata"].get("deletionTimestamp"))
        return True

    async def cluster_gone() -> bool:
        with contextlib.suppress(errors.NotFound):
            obj = await client.get(v1.RAYCLUSTERS, ns, cluster)
            return bool(obj["metadata"].get("deletionTimestamp"))
        return True

    async def workers_suspended() -> bool:
        """Every worker group ``suspend: true`` and its pods gone (or the cluster going)."""
        with contextlib.suppress(errors.NotFound):
            obj = await client.get(v1.RAYCLUSTERS, ns, cluster)
            if obj["metadata"].get("deletionTimestamp"):
                return True
            groups = obj["spec"].get("workerGroupSpecs") or []
            if not all(g.get("suspend") for g in groups):
                return False
            selector = f"ray.io/cluster={cluster},ray.io/node-type=worker"
            pods = await client.list(h.PODS, ns, label_selector=selector)
            return all(p["metadata"].get("deletionTimestamp") for p in pods.items)
        return True

    effects: dict[str, Callable[[], Awaitable[bool]]] = {
        "DeleteWorkers": workers_suspended,
        "DeleteCluster": cluster_gone,
        "DeleteSelf": rayjob_gone,
    }
    notes: list[str] = []
    policies = _policies(sample.spec)
    for policy, ttl in policies:
        if ttl > LONGEST_TTL_S:
            assert not await effects[policy](), f"{policy} before its TTL of {ttl} s"
            notes.append(f"{policy} after {ttl} s not awaited (not done yet)")
            continue
        at = await _seen(effects[policy], end + ttl, f"{policy} (TTL {ttl} s)")
        notes.append(f"{policy} {at - end:.1f} s after endTime (TTL {ttl} s)")
    kinds = {p for p, ttl in policies if ttl <= LONGEST_TTL_S}
    if "DeleteSelf" not in kinds:
        kept = await j.get_job(client, ns, name)
        assert j.state(kept) == "Complete", kept.get("status")
        if sample.mode == "K8sJobMode":  # KubeRay keeps the submitter Job (its logs)
            await client.get(j.JOBS, ns, name)
    if not kinds & {"DeleteCluster", "DeleteSelf"}:
        assert not await cluster_gone(), f"RayCluster {cluster} deleted"
        notes.append("cluster kept")
    return notes


async def _seen(check: Callable[[], Awaitable[bool]], due: float, what: str) -> float:
    """When ``check()`` first held: no earlier than ``due`` (``endTime`` has whole seconds:
    1 s of leeway) and within :data:`SLACK_S` after it."""
    while True:
        if await check():
            at = time.time()
            assert at >= due - 1, f"{what} {due - at:.1f} s before its time"
            return at
        if time.time() > due + SLACK_S:
            raise AssertionError(f"{what} not done {SLACK_S} s after its time")
        await asyncio.sleep(0.25)


# -- reading ---------------------------------------------------------------------------------


def report(w: World) -> str:
    """One line per sample: what it reached, how it failed, or that it was still running."""
    lines = [f"KubeRay RayJob samples ({len(w.tasks)}):"]
    for name, task in w.tasks.items():
        if not task.done():
            outcome = "(still running)"
        elif task.cancelled():
            outcome = "(cancelled)"
        elif task.exception() is not None:
            outcome = "FAILED: " + str(task.exception()).splitlines()[0]
        else:
            outcome = task.result()
        lines.append(f"  {name}: {outcome}")
    return "\n".join(lines)


async def describe(client: client_.Client, namespace: str) -> str:
    """What the namespace holds, for a failure's message."""
    lines: list[str] = []
    try:
        for job in (await client.list(v1.RAYJOBS, namespace)).items:
            status = json.dumps(job.get("status") or {}, sort_keys=True)
            lines.append(f"RayJob {job['metadata']['name']}: {status}")
        for rc in (await client.list(v1.RAYCLUSTERS, namespace)).items:
            st = rc.get("status") or {}
            deleting = " (deleting)" if rc["metadata"].get("deletionTimestamp") else ""
            lines.append(
                f"RayCluster {rc['metadata']['name']}{deleting}: state={st.get('state')} "
                f"reason={st.get('reason')} ready={st.get('readyWorkerReplicas')}"
            )
        for pod in (await client.list(h.PODS, namespace)).items:
            st = pod.get("status") or {}
            scheduled = [
                f"{c.get('status')}/{c.get('reason')}"
                for c in st.get("conditions") or ()
                if c.get("type") == "PodScheduled"
            ]
            lines.append(f"Pod {pod['metadata']['name']}: {st.get('phase')} scheduled={scheduled}")
        for job in (await client.list(j.JOBS, namespace)).items:
            conditions = [
                (c.get("type"), c.get("status"))
                for c in (job.get("status") or {}).get("conditions") or ()
            ]
            lines.append(f"Job {job['metadata']['name']}: {conditions}")
        events = (await client.list(h.EVENTS, namespace)).items
        events.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
        for event in events[-20:]:
            about = event.get("involvedObject") or {}
            lines.append(
                f"Event {event.get('type')} {event.get('reason')} {about.get('kind')}/"
                f"{about.get('name')} x{event.get('count') or 1}: {event.get('message')}"
            )
    except (errors.ApiError, aiohttp.ClientError, TimeoutError) as exc:
        lines.append(f"(reading the namespace failed: {exc!r})")
    return "\n".join(lines)
