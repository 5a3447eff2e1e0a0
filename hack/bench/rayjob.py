"""Benchmark: N RayJobs (``K8sJobMode``) run to ``Complete`` by ours and by KubeRay, side by side.

Issue 38, item 7. One invocation runs the scenario once with our operator and (unless
``--no-kuberay``) once with KubeRay, in that order, each on a **fresh** control plane and
Ray simulator (``compare.py``'s arrangement: the two never run at the same time and
neither sees the other's objects; only the operator process differs):

- ``ours``: ``rayservice-manager --use-kubernetes-proxy --leader-elect=false`` (our
  RayCluster, RayService and RayJob controllers in one process);
- ``kuberay``: KubeRay's operator at ``--kuberay-version``, as ``compare.py`` runs it
  (:func:`compare.kuberay`). The default is **v1.5.0**, the newest the Go module proxy
  serves here (``make peers``); v1.7.0 needs a KubeRay checkout (``$KUBERAY_SOURCE``,
  ``hack/peers/kuberay.sh``). The report's ``kuberay_version`` says which ran.

Both get the same CRDs (``config/crd/bases``: our RayJob schema is a superset of
v1.5.0's) and talk to the simulated heads through the API server's proxy subresources.

**The scenario.** ``--jobs`` RayJobs ``bench-<i>`` are created at once over a few
namespaces: ``submissionMode: K8sJobMode``, a head-only RayCluster,
``shutdownAfterJobFinishes: true`` with ``ttlSecondsAfterFinished: 0`` (the cluster is
deleted as soon as the job ends). The simulator's jobs stay ``PENDING`` ``--job-pending-s``
and ``RUNNING`` ``--job-run-s``, then ``SUCCEEDED``. kube-controller-manager runs with
``--kube-api-qps`` ``--kcm-qps`` (200) and ``--concurrent-job-syncs`` ``--kcm-job-syncs``
(50): with its defaults (20, 5) its Job controller marked about 5.6 submitter Jobs a
second ``Complete`` here, which decided the time to ``Complete`` at N = 200 for both
operators (``--reconcile-concurrency=4`` or ``--qps=0`` for ours changed nothing).

**The submitter is played by this script**, the same way for both operators: kwok keeps
every pod ``Running`` and runs no container. This script watches the pods of the
submitter Jobs (label ``batch.kubernetes.io/job-name``); for each one that is
``Running`` it reads ``RAY_JOB_SUBMISSION_ID`` from the pod's env (the last definition,
as Kubernetes uses), finds the head pod of the RayJob's ``status.rayClusterName``,
``POST``s ``/api/jobs/`` to the simulator at the head pod's IP with that submission id
(the real submitter's ``ray job submit --no-wait``; "already exists" is fine), polls
``GET /api/jobs/<id>`` every ``--submitter-poll`` s to its end (``ray job logs --follow``),
then sets the pod's status to ``Succeeded`` with its container terminated, exit code 0
(``Failed``, 1, if Ray's job did not succeed), so kube-controller-manager's Job
controller completes the Job. Its own requests to the heads are counted and left out of
the data-plane figures.

Then: all ``Complete`` (bounded by ``--timeout``) -> no RayCluster left ->
``--settle-seconds`` -> **at rest**: ``--rest-seconds`` of nothing happening.

**Figures per operator** (API traffic from kube-apiserver's own ``/metrics``,
``apiserver_request_total``; whose writes they were from its audit log, by User-Agent,
as ``compare.py``):

- ``status_writes_per_job``: PUT/PATCH of ``rayjobs/status`` from the first create to the
  start of the rest window / N (only the operator writes it);
  ``raycluster_status_writes_per_job`` the same for ``rayclusters/status``;
- ``writes_per_job``: every write (create, update, patch, delete) **by the operator**
  from the first create to the end of the rest window / N (``detail.operator_writes_by_kind``);
- ``time_to_complete_p50_s``, ``time_to_complete_p90_s``, ``time_to_complete_max_s``: per
  RayJob, from its create's answer to the watch event that shows
  ``jobDeploymentStatus: Complete``; ``time_to_all_complete_s``;
  ``time_to_clusters_deleted_s``: from the first create until no RayCluster is left;
- ``data_plane_requests_per_job``: requests the simulated heads got (every port and path)
  over the run, the submitter's left out, / N; ``job_api_requests_per_job``: the Jobs API
  requests about the benchmark's jobs (:meth:`raysim.Simulator.job_requests`), the
  submitter's left out, / N;
- ``rest_status_writes``: ``rayjobs/status`` + ``rayclusters/status`` writes in the rest
  window (all N jobs; KubeRay v1.7.0 polls a finished RayJob every 3 s, so does v1.5.0);
  ``rest_operator_writes``: every operator write in it (audit);
- ``conflicts``: the operator's writes answered 409; ``peak_rss_mib`` (``VmHWM``) and
  ``cpu_s`` (user + system, its waited-for children included:
  :meth:`runtime.testing.process.ChildProcess.cpu_seconds`) of the operator process.

One JSON line per operator (``"bench": "rayjob-run"``), then the last line
``{"bench": "rayjob", "jobs", "kuberay_version", "ours": {...}, "kuberay": {...},
"ratios": {ours / kuberay}}`` (``error`` and exit status 1 if a run failed). Progress goes
to stderr. ``--quick`` shortens the jobs and the windows (the integration test's size).
Usage (root: the pod network): ``.venv/bin/python hack/bench/rayjob.py --jobs 200``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import logging
import os
import pathlib
import re
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import _common  # noqa: E402  # hack/bench/_common.py (this script's directory)
import aiohttp  # noqa: E402
import compare  # noqa: E402  # hack/bench/compare.py: KubeRay's process, the audit log
import raycluster as raycluster_bench  # noqa: E402
import rayservice as rayservice_bench  # noqa: E402  # api_counts, minus, workdir
import structlog  # noqa: E402

import api.v1 as v1  # noqa: E402
from runtime.client import client as client_  # noqa: E402
from runtime.client import errors  # noqa: E402
from runtime.testing import controlplane  # noqa: E402
from tests.support import raysim  # noqa: E402

__all__ = ["main"]

DEFAULT_KUBERAY = "v1.5.0"
"""The peer the Go module proxy serves here (v1.7.0 is not on it)."""
CRD_DIR = ROOT / "config/crd/bases"
PODS = rayservice_bench.PODS
MAX_NAMESPACES = 4
BENCH_USER_AGENT = "bench-rayjob/1"
SELECTOR = "bench=rayjob"
JOB_POD_SELECTOR = "batch.kubernetes.io/job-name"
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")

FIGURES = (
    "status_writes_per_job", "raycluster_status_writes_per_job", "writes_per_job",
    "time_to_complete_p50_s", "time_to_complete_p90_s", "data_plane_requests_per_job",
    "job_api_requests_per_job", "peak_rss_mib", "cpu_s", "rest_status_writes",
)  # fmt: skip
"""The issue's per-operator figures, first, in order."""
MORE_FIGURES = (
    "time_to_complete_max_s", "time_to_all_complete_s", "time_to_clusters_deleted_s",
    "rest_operator_writes", "conflicts", "writes_all", "status_writes",
)  # fmt: skip

log = _common.logger("bench rayjob")
BenchError = _common.BenchError


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def rayjob(name: str, namespace: str) -> dict[str, Any]:
    """The benchmark's RayJob: K8sJobMode, a head-only cluster deleted when the job ends."""
    head = {"spec": {"containers": [{
        "name": "ray-head", "image": "rayproject/ray:2.60.0",
        "ports": [{"name": n, "containerPort": p}
                  for n, p in (("gcs", 6379), ("dashboard", 8265), ("client", 10001))],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                      "limits": {"cpu": "1", "memory": "1Gi"}},
    }]}}  # fmt: skip
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "namespace": namespace, "labels": {"bench": "rayjob"}},
        "spec": {
            "entrypoint": "python -c 'print(1)'",
            "submissionMode": "K8sJobMode",
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": 0,
            "rayClusterSpec": {
                "rayVersion": "2.60.0",
                "headGroupSpec": {"rayStartParams": {"dashboard-host": "0.0.0.0"},
                                  "template": head},
            },
        },
    }  # fmt: skip


def status_writes(delta: Mapping[Any, float], resource: str) -> int:
    return int(sum(
        n for (verb, res, sub, _), n in delta.items()
        if res == resource and sub == "status" and verb in ("PUT", "PATCH")
    ))  # fmt: skip


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- the submitter, played -----------------------------------------------------------------


class Submitter:
    """Plays every submitter pod: submits its job to the head, follows it, ends the pod."""

    def __init__(self, client: client_.Client, poll: float) -> None:
        self.client = client
        self.poll = poll
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        self.handled: set[str] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.requests = 0
        """Requests this script sent to the heads (left out of the data-plane figures)."""
        self.finished = 0
        self.errors: list[str] = []

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in list(self.tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.session.close()

    async def run(self) -> None:
        version: str | None = None
        while True:
            try:
                if version is None:
                    listed = await self.client.list(PODS, None, label_selector=JOB_POD_SELECTOR)
                    version = listed.resource_version
                    for pod in listed.items:
                        self.consider(pod)
                async for event in self.client.watch(
                    PODS, None, resource_version=version, timeout_seconds=300,
                    label_selector=JOB_POD_SELECTOR,
                ):  # fmt: skip
                    obj = event["object"]
                    version = obj["metadata"].get("resourceVersion", version)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self.consider(obj)
            except errors.Gone:
                version = None
            except (OSError, TimeoutError, aiohttp.ClientError, errors.ApiError) as exc:
                log(f"submitter: pod watch ended ({type(exc).__name__}: {exc}); again")
                version = None
                await asyncio.sleep(0.5)

    def consider(self, pod: Mapping[str, Any]) -> None:
        meta, status = pod["metadata"], pod.get("status") or {}
        uid = meta.get("uid", "")
        if uid in self.handled or meta.get("deletionTimestamp"):
            return
        if status.get("phase") != "Running" or not status.get("podIP"):
            return
        self.handled.add(uid)
        task = asyncio.create_task(self.play(pod))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def play(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        try:
            container = pod["spec"]["containers"][0]
            env = {e["name"]: e.get("value", "") for e in container.get("env") or ()}
            job_id = env.get("RAY_JOB_SUBMISSION_ID", "")
            rayjob_name = meta["labels"][JOB_POD_SELECTOR]
            owner = await self.client.get(v1.RAYJOBS, namespace, rayjob_name)
            cluster = (owner.get("status") or {}).get("rayClusterName") or ""
            heads = await self.client.list(
                PODS, namespace, label_selector=f"ray.io/cluster={cluster},ray.io/node-type=head"
            )
            ips = [p["status"]["podIP"] for p in heads.items
                   if (p.get("status") or {}).get("podIP")]  # fmt: skip
            if not job_id or not ips:
                raise BenchError(f"submitter {namespace}/{name}: id {job_id!r}, heads {ips}")
            base = f"http://{ips[0]}:8265"
            body = {"entrypoint": owner["spec"]["entrypoint"], "submission_id": job_id}
            self.requests += 1
            async with self.session.post(f"{base}/api/jobs/", json=body) as answer:
                text = await answer.text()
                if answer.status != 200 and "already exists" not in text:
                    raise BenchError(f"submit {job_id}: {answer.status} {text[:200]}")
            outcome = ""
            while outcome not in TERMINAL:
                await asyncio.sleep(self.poll)
                self.requests += 1
                async with self.session.get(f"{base}/api/jobs/{job_id}") as answer:
                    if answer.status == 200:
                        outcome = str((await answer.json()).get("status") or "")
            await self.end(pod, container, outcome == "SUCCEEDED")
            self.finished += 1
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # reported at the end; the run then fails on its timeout
            self.errors.append(f"{namespace}/{name}: {type(exc).__name__}: {exc}")

    async def end(self, pod: Mapping[str, Any], container: Mapping[str, Any], ok: bool) -> None:
        """The pod's container terminated (exit 0, or 1): ``Succeeded`` (or ``Failed``)."""
        started = ((pod["status"].get("containerStatuses") or [{}])[0].get("state") or {}).get(
            "running", {}
        ).get("startedAt") or pod["status"].get("startTime")
        stamp = now().strftime("%Y-%m-%dT%H:%M:%SZ")
        reason = "PodCompleted"
        conditions = [
            {"type": t, "status": s, "lastTransitionTime": stamp, **extra}
            for t, s, extra in (
                ("Initialized", "True", {"reason": reason}), ("PodScheduled", "True", {}),
                ("Ready", "False", {"reason": reason}),
                ("ContainersReady", "False", {"reason": reason}),
            )
        ]  # fmt: skip
        patch = {"status": {
            "phase": "Succeeded" if ok else "Failed",
            "conditions": conditions,
            "containerStatuses": [{
                "name": container["name"], "image": container.get("image", ""), "imageID": "",
                "ready": False, "started": False, "restartCount": 0,
                "state": {"terminated": {
                    "exitCode": 0 if ok else 1, "reason": "Completed" if ok else "Error",
                    "startedAt": started or stamp, "finishedAt": stamp,
                }},
            }],
        }}  # fmt: skip
        await self.client.patch(
            PODS, pod["metadata"]["namespace"], pod["metadata"]["name"], patch,
            subresource="status",
        )  # fmt: skip


# -- waiting -------------------------------------------------------------------------------


async def watch_complete(
    client: client_.Client,
    process: _common.Manager,
    created: Mapping[tuple[str, str], float],
    count: int,
    within: float,
    started: float,
    submitter: Submitter,
) -> dict[tuple[str, str], float]:
    """Per RayJob the monotonic time of the first event that showed it ``Complete``."""
    done: dict[tuple[str, str], float] = {}
    state: dict[tuple[str, str], str] = {}
    version: str | None = None

    def see(obj: Mapping[str, Any]) -> None:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        status = obj.get("status") or {}
        state[key] = f"{status.get('jobDeploymentStatus')}/{status.get('jobStatus')}"
        if status.get("jobDeploymentStatus") == "Complete":
            done.setdefault(key, time.monotonic())
        elif status.get("jobDeploymentStatus") in ("Failed", "ValidationFailed"):
            raise BenchError(f"RayJob {key} {state[key]}: {status.get('message') or status}")

    async def follow() -> None:
        nonlocal version
        while len(done) < count:
            try:
                if version is None:
                    listed = await client.list(v1.RAYJOBS, None, label_selector=SELECTOR)
                    version = listed.resource_version
                    for obj in listed.items:
                        see(obj)
                async for event in client.watch(
                    v1.RAYJOBS, None, resource_version=version, timeout_seconds=300,
                    label_selector=SELECTOR,
                ):  # fmt: skip
                    obj = event["object"]
                    version = obj["metadata"].get("resourceVersion", version)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        see(obj)
                        if len(done) >= count:
                            return
            except errors.Gone:
                version = None
            except (OSError, TimeoutError, aiohttp.ClientError) as exc:
                log(f"RayJob watch ended ({type(exc).__name__}); again")
                version = None
                await asyncio.sleep(0.5)

    following = asyncio.create_task(follow())
    last = 0.0
    try:
        while not following.done():
            process.check_alive()
            elapsed = time.monotonic() - started
            if elapsed > within:
                states: dict[str, int] = {}
                for key, s in state.items():
                    if key not in done:
                        states[s] = states.get(s, 0) + 1
                raise BenchError(
                    f"{len(done)} of {count} RayJobs Complete after {within:.0f} s; the others: "
                    f"{states}; submitter errors: {submitter.errors[:3]}\n"
                    f"last lines of the operator's log:\n{process.tail(10)}"
                )
            if elapsed - last >= 10:
                last = elapsed
                log(f"{elapsed:.0f} s: {len(done)} of {count} Complete "
                    f"({submitter.finished} submitters done)")  # fmt: skip
            await asyncio.wait({following}, timeout=0.5)
        following.result()
    finally:
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError, BenchError):
            await following
    return done


async def clusters_gone(
    client: client_.Client, process: _common.Manager, within: float, started: float
) -> float:
    deadline = time.monotonic() + within
    while True:
        process.check_alive()
        left = len((await client.list(v1.RAYCLUSTERS, None)).items)
        heads = len((await client.list(PODS, None, label_selector="ray.io/node-type=head")).items)
        if not left and not heads:
            return time.monotonic() - started
        if time.monotonic() > deadline:
            raise BenchError(f"{left} RayClusters ({heads} head pods) left {within:.0f} s "
                             "after all RayJobs were Complete")  # fmt: skip
        await asyncio.sleep(0.5)


# -- one run -------------------------------------------------------------------------------


def start_operator(
    operator: str, kubeconfig: pathlib.Path, work: pathlib.Path, args: argparse.Namespace
) -> _common.Manager:
    if operator == "kuberay":
        return compare.kuberay(args.kuberay_bin, kubeconfig, work)
    return _common.Manager.ours(kubeconfig, work, [
        "--use-kubernetes-proxy", "--log-level", "info", "--log-format", "json",
        "--leader-elect=false", *args.ours_flag,
    ])  # fmt: skip


async def run_one(args: argparse.Namespace, operator: str, result: dict[str, Any]) -> None:
    count = args.jobs
    namespaces = [f"bench-rj-{j}" for j in range(min(MAX_NAMESPACES, count))]
    nodes = max(2, (count * 2) // raycluster_bench.PODS_PER_NODE + 1)
    t0 = time.monotonic()
    with rayservice_bench.workdir() as work:
        audit_log = work / "audit.log"
        (work / "audit-policy.json").write_text(json.dumps(compare.AUDIT_POLICY))
        flags = [f"--audit-policy-file={work / 'audit-policy.json'}",
                 f"--audit-log-path={audit_log}", "--audit-log-mode=blocking"]  # fmt: skip
        options = controlplane.Options(
            bin_dir=args.bin_dir, controller_manager=True, scheduler=True, kwok=True,
            nodes=nodes, pod_network=True, start_timeout=120, extra_apiserver_flags=flags,
            extra_controller_manager_flags=[
                f"--kube-api-qps={args.kcm_qps}", f"--kube-api-burst={2 * args.kcm_qps}",
                f"--concurrent-job-syncs={args.kcm_job_syncs}",
            ],
        )  # fmt: skip
        windows: dict[str, tuple[datetime.datetime, datetime.datetime]] = {}
        with (
            controlplane.running(options) as cp,
            raysim.running(
                cp, job_pending_s=args.job_pending_s, job_run_s=args.job_run_s,
                job_outcome="succeed", log_path=work / "raysim.log",
            ) as sim,
        ):  # fmt: skip
            assert cp.kubeconfig is not None
            cp.install_crds(CRD_DIR)
            await _common.make_namespaces(cp, namespaces)
            log(f"{operator}: control plane and simulator up in {time.monotonic() - t0:.1f} s")
            process = start_operator(operator, cp.kubeconfig, work, args)
            try:
                result["operator_ready_s"] = round(await process.wait_ready(60), 2)
                log(f"{operator}: ready in {result['operator_ready_s']} s")
                await scenario(args, operator, cp, sim, process, namespaces, result, windows)
                result["peak_rss_mib"] = round(process.memory_mib(), 1)
                result["cpu_s"] = round(process.cpu_seconds(), 2)
            except BaseException:
                log(f"{operator}: last lines of its log:\n{process.tail(20)}")
                raise
            finally:
                process.stop()
        # The control plane has stopped: the audit log is complete.
        events = compare.audit_events(audit_log)
        who = compare.OPERATOR_USER_AGENTS[operator]
        run_from, run_to = windows["run"]
        rest_from, rest_to = windows["rest"]

        def writes(start: datetime.datetime, end: datetime.datetime) -> dict[str, int]:
            return compare.tally(events, lambda t, w, p, _c: (
                start <= t < end and not p and w.split(" ")[0] in compare.AUDIT_WRITE_VERBS
            )).get(who, {})  # fmt: skip

        mine = writes(run_from, run_to)
        conflicts = compare.tally(events, lambda t, w, _p, c: (
            run_from <= t < run_to and c == 409 and w.split(" ")[0] in compare.AUDIT_WRITE_VERBS
        )).get(who, {})  # fmt: skip
        rest = writes(rest_from, rest_to)
        result["writes_all"] = sum(mine.values())
        result["writes_per_job"] = round(sum(mine.values()) / count, 2)
        result["rest_operator_writes"] = sum(rest.values())
        result["conflicts"] = sum(conflicts.values())
        result["detail"]["operator_writes_by_kind"] = mine
        result["detail"]["rest_operator_writes_by_kind"] = rest
        result["detail"]["conflicts_by_kind"] = conflicts
    result["total_s"] = round(time.monotonic() - t0, 1)


async def scenario(
    args: argparse.Namespace,
    operator: str,
    cp: controlplane.ControlPlane,
    sim: raysim.Simulator,
    process: _common.Manager,
    namespaces: list[str],
    result: dict[str, Any],
    windows: dict[str, tuple[datetime.datetime, datetime.datetime]],
) -> None:
    count = args.jobs
    detail: dict[str, Any] = {}
    result["detail"] = detail
    client = await client_.Client.from_kubeconfig(
        cp.kubeconfig, options=client_.Options(user_agent=BENCH_USER_AGENT)
    )
    v1.add_to_registry(client.registry)
    async with client:
        submitter = Submitter(client, args.submitter_poll)
        playing = asyncio.create_task(submitter.run())
        try:
            await asyncio.sleep(0.5)  # the pod watch is open
            before = rayservice_bench.api_counts(cp)
            plane_before = sum(sim.requests().values())
            run_from = now()
            started = time.monotonic()
            created: dict[tuple[str, str], float] = {}

            async def create(i: int) -> None:
                namespace = namespaces[i % len(namespaces)]
                await client.create(rayjob(f"bench-{i}", namespace))
                created[(namespace, f"bench-{i}")] = time.monotonic()

            await asyncio.gather(*(create(i) for i in range(count)))
            done = await watch_complete(
                client, process, created, count, args.timeout, started, submitter
            )
            times = [done[key] - created[key] for key in done]
            result["time_to_all_complete_s"] = round(max(done.values()) - started, 2)
            result["time_to_complete_p50_s"] = round(statistics.median(times), 2)
            result["time_to_complete_p90_s"] = round(percentile(times, 0.9), 2)
            result["time_to_complete_max_s"] = round(max(times), 2)
            log(f"{operator}: all {count} Complete in {result['time_to_all_complete_s']} s "
                f"(median {result['time_to_complete_p50_s']} s)")  # fmt: skip
            result["time_to_clusters_deleted_s"] = round(
                await clusters_gone(client, process, 60 + count * 0.5, started), 2
            )
            await asyncio.sleep(args.settle_seconds)
            at_rest = rayservice_bench.api_counts(cp)
            rest_from = now()
            log(f"{operator}: clusters deleted in {result['time_to_clusters_deleted_s']} s; "
                f"at rest for {args.rest_seconds} s")  # fmt: skip
            await asyncio.sleep(args.rest_seconds)
            process.check_alive()
            after = rayservice_bench.api_counts(cp)
            rest_to = now()
            windows["run"] = (run_from, rest_to)
            windows["rest"] = (rest_from, rest_to)
            detail["reconciles"] = compare.reconciles(process)
        finally:
            playing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await playing
            await submitter.close()
        if submitter.errors:
            detail["submitter_errors"] = submitter.errors[:5]

    life = rayservice_bench.minus(at_rest, before)
    rest = rayservice_bench.minus(after, at_rest)
    result["status_writes"] = status_writes(life, "rayjobs")
    result["status_writes_per_job"] = round(status_writes(life, "rayjobs") / count, 3)
    clusters = status_writes(life, "rayclusters")
    result["raycluster_status_writes_per_job"] = round(clusters / count, 3)
    result["rest_status_writes"] = status_writes(rest, "rayjobs") + status_writes(
        rest, "rayclusters"
    )
    plane = sum(sim.requests().values()) - plane_before - submitter.requests
    result["data_plane_requests_per_job"] = round(plane / count, 2)
    job_requests = sim.job_requests()
    by_route: dict[str, int] = {}
    about_jobs = 0
    for (_, job, method, route), n in job_requests.items():
        by_route[f"{method} {route}"] = by_route.get(f"{method} {route}", 0) + n
        if job.startswith("bench-"):
            about_jobs += n
    result["job_api_requests_per_job"] = round((about_jobs - submitter.requests) / count, 2)
    result["submitter_requests"] = submitter.requests
    detail["job_api_by_route"] = dict(sorted(by_route.items()))
    plane_by_kind: dict[str, int] = {}
    for key, n in rayservice_bench.data_plane(sim).items():  # one job's id is "{id}"
        key = re.sub(r"/api/jobs/[^/]+", "/api/jobs/{id}", key.rstrip("/")) + (
            "/" if key.endswith("/") else ""
        )
        plane_by_kind[key] = plane_by_kind.get(key, 0) + n
    detail["data_plane_by_kind"] = dict(sorted(plane_by_kind.items()))
    detail["writes_by_kind_lifecycle"] = rayservice_bench.writes_by_kind(life)
    detail["writes_by_kind_rest"] = rayservice_bench.writes_by_kind(rest)


# -- both, and the summary -----------------------------------------------------------------


def medians(run: Mapping[str, Any]) -> dict[str, float]:
    return {k: run[k] for k in (*FIGURES, *MORE_FIGURES, "operator_ready_s", "total_s")
            if k in run}  # fmt: skip


def ratios(ours: Mapping[str, float], kuberay: Mapping[str, float]) -> dict[str, float | None]:
    return {
        k: (round(ours[k] / kuberay[k], 3) if kuberay[k] else None)
        for k in (*FIGURES, *MORE_FIGURES)
        if k in ours and k in kuberay
    }


async def run_all(args: argparse.Namespace, summary: dict[str, Any]) -> None:
    operators = ("ours", "kuberay") if args.kuberay else ("ours",)
    for operator in operators:
        result: dict[str, Any] = {
            "bench": "rayjob-run", "operator": operator, "jobs": args.jobs,
            "load_avg_1m": round(os.getloadavg()[0], 2),
        }  # fmt: skip
        log(f"{operator}: {args.jobs} RayJobs")
        try:
            await run_one(args, operator, result)
        except BaseException as exc:
            result["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
            print(json.dumps(result), flush=True)
            raise
        first = {k: result.pop(k) for k in ("bench", "operator", "jobs", *FIGURES) if k in result}
        detail = result.pop("detail", {})
        print(json.dumps({**first, **result, "detail": detail}), flush=True)
        summary[operator] = medians({**first, **result})
    if len(operators) == 2:
        summary["ratios"] = ratios(summary["ours"], summary["kuberay"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200, help="RayJobs (default 200)")
    parser.add_argument("--kuberay", action=argparse.BooleanOptionalAction, default=True,
                        help="also run KubeRay (default yes)")  # fmt: skip
    parser.add_argument(
        "--quick",
        action="store_true",
        help="short jobs and windows: pending 0.5 s, run 1 s, rest 10 s",
    )
    parser.add_argument("--job-pending-s", type=float, default=None, help="default 1 (quick 0.5)")
    parser.add_argument("--job-run-s", type=float, default=None, help="default 3 (quick 1)")
    parser.add_argument("--rest-seconds", type=float, default=None, help="default 30 (quick 10)")
    parser.add_argument("--settle-seconds", type=float, default=None, help="default 5 (quick 2)")
    parser.add_argument("--submitter-poll", type=float, default=1.0,
                        help="the played submitter's seconds between job status reads")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds to all Complete; default 120 + 1.5 s per job")  # fmt: skip
    parser.add_argument("--kuberay-version", default=DEFAULT_KUBERAY,
                        help=f"the KubeRay peer (default {DEFAULT_KUBERAY}, from the Go module "
                        "proxy; v1.7.0 with --kuberay-bin, built from its source by "
                        "hack/peers/kuberay.sh)")  # fmt: skip
    parser.add_argument(
        "--kuberay-bin",
        type=pathlib.Path,
        default=None,
        help="default: hack/peers/kuberay.sh's cached binary",
    )
    parser.add_argument(
        "--kcm-qps", type=int, default=200,
        help="kube-controller-manager's --kube-api-qps (burst twice that); default 200: at "
        "its own default, 20, its Job controller completes ~5.6 Jobs a second here and "
        "decides the time to Complete at N=200 for both operators",
    )  # fmt: skip
    parser.add_argument("--kcm-job-syncs", type=int, default=50,
                        help="its --concurrent-job-syncs; default 50")  # fmt: skip
    parser.add_argument(
        "--ours-flag",
        action="append",
        default=[],
        help="one more flag for rayservice-manager (repeatable; e.g. --ours-flag=--qps=0)",
    )
    parser.add_argument(
        "--bin-dir",
        type=pathlib.Path,
        default=None,
        help="control-plane binaries; default $CONTROLPLANE_BIN_DIR",
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs >= 1")
    quick = args.quick
    sizes = (("job_pending_s", 1.0, 0.5), ("job_run_s", 3.0, 1.0),
             ("rest_seconds", 30.0, 10.0), ("settle_seconds", 5.0, 2.0))  # fmt: skip
    for name, normal, short in sizes:
        if getattr(args, name) is None:
            setattr(args, name, short if quick else normal)
    if args.timeout is None:
        args.timeout = 120.0 + 1.5 * args.jobs
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    summary: dict[str, Any] = {
        "bench": "rayjob", "jobs": args.jobs,
        "kuberay_version": args.kuberay_version if args.kuberay else None,
        "kuberay_version_note": "v1.7.0 is not on the Go module proxy here: "
        f"{args.kuberay_version} ran" if args.kuberay else None,
        "job_pending_s": args.job_pending_s, "job_run_s": args.job_run_s,
        "rest_seconds": args.rest_seconds, "quick": quick,
    }  # fmt: skip
    status = 0
    try:
        args.bin_dir = _common.bin_dir(args.bin_dir)
        if args.kuberay:
            args.kuberay_bin = args.kuberay_bin or compare.kuberay_binary(args.kuberay_version)
        asyncio.run(run_all(args, summary))
    except (BenchError, controlplane.ControlPlaneError, raysim.SimulatorError,
            subprocess.CalledProcessError) as exc:  # fmt: skip
        log(f"error: {exc}")
        summary["error"] = str(exc).splitlines()[0]
        status = 1
    except Exception as exc:  # still one JSON line last, with the traceback above
        traceback.print_exc()
        summary["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
        status = 1
    print(json.dumps(summary), flush=True)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
