"""Benchmark: one RayService on a real Ray 2.60 head, our operator and KubeRay v1.7.0, both
through the API server's proxy (issue 25, item 1: the real-Ray single-service comparison).

``compare.py`` measures many RayServices against the Ray simulator; this measures one
against real Ray, where the start-up of a real head, Serve's own deploy time and the real
readiness probe decide the timings. Each run gets a **fresh** control plane (etcd,
kube-apiserver with an audit log, kube-controller-manager, kube-scheduler, kwok, the pod
network) and runs one operator (``--operator both`` runs ours, then KubeRay, in every
round; never both at once):

- ``ours``: ``rayservice-manager --use-kubernetes-proxy --leader-elect=false``
  (:meth:`_common.Manager.ours`, the code of this checkout);
- ``kuberay``: KubeRay's operator (:func:`compare.kuberay`: ``--use-kubernetes-proxy``,
  no leader election), ``--kuberay-bin`` (default: ``hack/peers/kuberay.sh``'s cached
  v1.7.0 build); the CRDs are this repository's RayCluster and RayService plus KubeRay's
  RayJob from ``--kuberay-crds`` (its ``config/crd/bases``), for both operators.

The pods run for real as in ``tests/e2e/test_realray.py`` (its :class:`Kubelet` over
:mod:`tests.support.realray`): every Ray pod's own ``ray start`` line in a network
namespace of its own at its pod IP, ``Ready`` from its own readiness probe, stopped when
its pod object goes. Both operators reach the dashboard and the Serve proxy only through
the API server's ``services/proxy`` and ``pods/proxy``, which dial the pod IPs in the
harness's pod network; this script itself dials a head's pod IP once (its Serve routes,
to check real Ray answers them). Nothing leaves 127.0.0.0/8 and the pod network.

**The scenario**, per operator: one head-only RayService (``test_realray``'s, with two
Serve applications of ``rso_e2e_apps``: ``/greet`` and ``/hello``), created ->
Ready (``Ready=True``, both applications ``RUNNING``, ``numServeEndpoints > 0``;
``time_to_ready_s``) -> ``--settle-seconds`` -> ``--steady-seconds`` of nothing
changing -> an upgrade (``test_realray.new_revision``: a head template env var, so a new
cluster) -> Ready on the new cluster (``time_to_switched_s``) and the old cluster deleted
(``time_to_upgraded_s``; ``rayClusterDeletionDelaySeconds`` is ``--deletion-delay``) ->
``--settle-seconds`` -> the RayService deleted -> everything gone (``time_to_deleted_s``)
-> ``--settle-seconds``.

**Counting**: kube-apiserver writes an audit log (:data:`AUDIT_POLICY`: one event per
finished request, watches left out; request and response bodies of the writes the
timelines read) that names each request's client by its User-Agent product:
``rayservice-operator`` (ours), ``kuberay-operator`` (KubeRay), ``bench-realray`` (this
script, and the kubelet's pod watch), ``kwok``, ``kube-scheduler``,
``kube-controller-manager``, and ``-`` (no User-Agent: the real-Ray harness's readiness
patches of ``pods/status``). The phases are time windows: ``init`` (create ->
steady window), ``steady``, ``upgrade`` (the spec change -> the delete), ``delete``
(-> the end). Per operator (its own requests only):

- ``{phase}_rayservice_status_writes`` / ``{phase}_raycluster_status_writes``: PUT/PATCH
  of ``rayservices/status`` and ``rayclusters/status`` (409s included: a write is a write);
  ``status_writes_apiserver_metrics``: the same over the run from kube-apiserver's
  ``apiserver_request_total`` (every client; only operators write them), a cross-check;
- ``conflicts`` and ``{phase}_conflicts``: its writes answered 409; ``detail.conflicts``
  says for each which object, with which resourceVersion, and which earlier write (by
  whom, when) had already moved the object past it;
- ``steady_proxy_requests_per_min``: its ``services/proxy`` and ``pods/proxy`` requests
  in the steady window per minute (its data-plane traffic to Ray);
  ``steady_api_requests_per_min``: its other non-watch requests there;
- ``writes_all``: its writes (create, update, patch, delete; not the proxy's Serve PUTs)
  over the whole lifecycle (``detail.writes_by_kind``); ``serve_puts``: its Serve config
  PUTs through the proxy;
- ``peak_rss_mib`` (``VmHWM``) and ``cpu_s`` of the operator process, read before it stops;
- ``kubelet_errors``: pods the real-Ray kubelet could not run after the last wait (a
  failure before then fails the run);
- ``head_ready_s`` (``upgrade_head_ready_s``): from the create (the spec change) to the
  real probe's ``Ready=True`` on the (new) head pod, and ``ready_after_head_s``
  (``switched_after_head_s``) from there to Ready seen (on the new cluster): the
  operator's own part. The probe runs every 5 s from 10 s after the start, so
  ``time_to_ready_s`` moves in 5 s steps with whether the head answered the first one.

**Timelines** (``timeline_init``, ``timeline_upgrade``): seconds after the RayService's
create (after the spec change) at which the API server finished each request that tells
the start-up's story: the operator's writes and proxy requests (with what the write said:
a status's ``Ready`` condition, applications and endpoints; a pod's ``ray.io/serve``
label), the scheduler's binding, kwok's and the real-Ray harness's pod status patches
(``Ready`` from the real probe), kube-controller-manager's EndpointSlice writes (ready
endpoints), until the bench saw it Ready (``ready seen``). ``milestones_init`` and
``milestones_upgrade`` pick the first of each step out of them, and stderr gets both
operators' milestones side by side.

The last stdout line: ``{"bench": "realray", "steady_seconds", "rounds", "ours":
{medians}, "kuberay": {medians}, "ratios": {ours / kuberay}, "timelines": {operator:
{"init": ..., "upgrade": ...}} (round 1's milestones)}``, with an ``error`` key (exit
status 1) if a run failed; each run's full figures, details and timelines are one JSON
line before it. Needs root (network namespaces), the control-plane binaries and real Ray
(``make ray``). Usage: ``.venv/bin/python hack/bench/realray.py --rounds 2``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import ipaddress
import json
import logging
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import _common  # noqa: E402  # hack/bench/_common.py (this script's directory)
import aiohttp  # noqa: E402
import compare  # noqa: E402  # hack/bench/compare.py: KubeRay's process, audit helpers
import rayservice as rayservice_bench  # noqa: E402  # hack/bench/rayservice.py: counting
import structlog  # noqa: E402

import api.v1 as v1  # noqa: E402
from runtime.client import client as client_  # noqa: E402
from runtime.client import errors  # noqa: E402
from runtime.testing import controlplane  # noqa: E402
from tests.e2e import rayservices, test_realray  # noqa: E402
from tests.support import realray  # noqa: E402

__all__ = ["main"]

OPERATORS = compare.OPERATORS
NAMESPACE = "bench-realray"
NAME = test_realray.NAME
BENCH_USER_AGENT = "bench-realray/1"
HARNESS_CLIENT = "-"
"""The real-Ray harness's ``pods/status`` patches carry no User-Agent."""
KUBERAY_VERSION = os.environ.get("KUBERAY_VERSION", "v1.7.0")
_CACHE = pathlib.Path(
    os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
) / "rayservice-operator" / "peers" / "kuberay" / KUBERAY_VERSION  # fmt: skip
KUBERAY_BIN = _CACHE / "bin" / "kuberay-operator"
KUBERAY_CRDS = _CACHE / "src" / "ray-operator" / "config" / "crd" / "bases"
"""Where ``KUBERAY_VERSION=v1.7.0 KUBERAY_SOURCE=<kuberay git dir> hack/peers/kuberay.sh``
puts the binary and the tag's CRDs (``--crds`` prints the directory)."""

SERVE_CONFIG = """\
applications:
  - name: greet
    route_prefix: /greet
    import_path: rso_e2e_apps:greeter
    args: {greeting: hello}
  - name: hello
    route_prefix: /hello
    import_path: rso_e2e_apps:greeter
    args: {greeting: hi}
"""
"""Two applications of ``tests/e2e/testdata/realray_apps`` (one builder, two routes)."""
ANSWERS = {"/greet": test_realray.ANSWER, "/hello": "hi from Ray 2.60.0"}

PHASES = ("init", "steady", "upgrade", "delete")
STATUS_KINDS = {"rayservice": "rayservices", "raycluster": "rayclusters"}
FIGURES = (
    "time_to_ready_s", "time_to_switched_s", "time_to_upgraded_s", "time_to_deleted_s",
    "head_ready_s", "ready_after_head_s", "upgrade_head_ready_s", "switched_after_head_s",
    *(f"{p}_{k}_status_writes" for p in PHASES for k in STATUS_KINDS),
    "status_writes", "status_writes_apiserver_metrics", "conflicts",
    *(f"{p}_conflicts" for p in PHASES),
    "steady_proxy_requests_per_min", "steady_api_requests_per_min", "writes_all",
    "serve_puts", "peak_rss_mib", "cpu_s",
)  # fmt: skip
"""Every run's figures, in order (medians and ratios are over these)."""

_WRITES = {"resources": ["pods", "pods/status", "services", "rayclusters",
                         "rayclusters/status", "rayservices", "rayservices/status"]}  # fmt: skip
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [
        {"level": "None", "verbs": ["watch"]},
        {"level": "None", "resources": [{"group": "coordination.k8s.io"}]},
        {
            "level": "RequestResponse",
            "verbs": ["create", "update", "patch", "delete"],
            "resources": [
                {"group": "", **_WRITES},
                {"group": "ray.io", **_WRITES},
                {"group": "discovery.k8s.io", "resources": ["endpointslices"]},
            ],
        },
        {"level": "Metadata"},
    ],
}
"""One event per finished request but watches and Leases: who (User-Agent), what, when;
with the bodies of the writes the timelines and the conflict analysis read."""

Obj = dict[str, Any]
BenchError = _common.BenchError


log = _common.logger("bench realray")


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


# -- the RayService ------------------------------------------------------------------------


def rayservice(deletion_delay: int) -> Obj:
    """``test_realray``'s head-only RayService with :data:`SERVE_CONFIG`."""
    obj = test_realray.rayservice(NAMESPACE)
    obj["spec"]["serveConfigV2"] = SERVE_CONFIG
    obj["spec"]["rayClusterDeletionDelaySeconds"] = deletion_delay
    return obj


def ready(obj: Mapping[str, Any]) -> bool:
    """Ready with every application of :data:`SERVE_CONFIG` RUNNING and an endpoint."""
    running = rayservices.apps(dict(obj))
    return (
        rayservice_bench.ready(obj)
        and set(running) == {"greet", "hello"}
        and rayservices.condition(dict(obj), "UpgradeInProgress").get("status", "False") == "False"
    )


# -- reading the audit log -----------------------------------------------------------------


class Event:
    """One audited request (see :data:`AUDIT_POLICY`)."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = raw
        self.at = _common.moment(raw.get("stageTimestamp"))
        received = raw.get("requestReceivedTimestamp")
        self.took = (self.at - _common.moment(received)).total_seconds() if received else 0.0
        ref = raw.get("objectRef") or {}
        self.resource = str(ref.get("resource") or "")
        self.sub = str(ref.get("subresource") or "")
        self.namespace = str(ref.get("namespace") or "")
        self.verb = str(raw.get("verb") or "")
        self.client = str(raw.get("userAgent") or "-").split("/")[0].split(" ")[0] or "-"
        self.code = int((raw.get("responseStatus") or {}).get("code") or 0)
        self.uri = str(raw.get("requestURI") or "")
        self.request: Obj = raw.get("requestObject") or {}
        self.response: Obj = raw.get("responseObject") or {}
        meta = self.response.get("metadata") or self.request.get("metadata") or {}
        self.name = str(ref.get("name") or meta.get("name") or "")

    @property
    def what(self) -> str:
        return compare.kind(self.verb, self.resource, self.sub)

    @property
    def proxy(self) -> bool:
        return (self.resource, self.sub) in compare.PROXY_SUBRESOURCES

    @property
    def write(self) -> bool:
        return self.verb in compare.AUDIT_WRITE_VERBS and not self.proxy

    def rv(self, which: str) -> int | None:
        body = self.request if which == "request" else self.response
        text = (body.get("metadata") or {}).get("resourceVersion")
        return int(text) if text and str(text).isdigit() else None


def read_audit(path: pathlib.Path) -> list[Event]:
    events = []
    with open(path, errors="replace") as lines:
        for line in lines:
            try:
                event = Event(json.loads(line))
            except (ValueError, KeyError):
                continue
            if event.resource:
                events.append(event)
    return sorted(events, key=lambda e: e.at)


def _conditions(body: Mapping[str, Any]) -> dict[str, str]:
    found = (body.get("status") or {}).get("conditions") or []
    return {
        str(c.get("type")): str(c.get("status")) + (f"/{c['reason']}" if c.get("reason") else "")
        for c in found
        if isinstance(c, Mapping)
    }


def _apps(status: Mapping[str, Any], which: str) -> str:
    found = (status.get(which) or {}).get("applicationStatuses") or {}
    cluster = (status.get(which) or {}).get("rayClusterName") or "-"
    inner = ",".join(f"{k}={(v or {}).get('status', '?')}" for k, v in sorted(found.items()))
    return f"{cluster}{{{inner}}}"


def describe(event: Event, name: str) -> str:
    """What a timeline line says about ``event`` (``name``: the RayService's)."""
    body = event.request
    code = "" if event.code < 300 else f" -> {event.code}"
    short = event.name.replace(f"{name}-", "", 1) if event.name.startswith(name) else event.name
    if event.proxy:
        path = event.uri.split("/proxy", 1)[1] if "/proxy" in event.uri else event.uri
        target = short.replace(f"{name}-", "")
        method = {"get": "GET", "update": "PUT", "create": "POST", "delete": "DELETE"}.get(
            event.verb, event.verb.upper()
        )
        took = f" (took {event.took:.2f} s)" if event.took >= 0.1 else ""  # lines say when
        return f"proxy {method} {event.resource}/{target} {path.split('?')[0]}{code}{took}"
    status = body.get("status") or {}
    if event.resource == "rayservices" and event.sub == "status":
        cond = _conditions(body)
        return (
            f"{event.verb} rayservices/status Ready={cond.get('Ready', '-')} "
            f"Upgrade={cond.get('UpgradeInProgress', '-')} "
            f"active={_apps(status, 'activeServiceStatus')} "
            f"pending={_apps(status, 'pendingServiceStatus')} "
            f"endpoints={status.get('numServeEndpoints', '-')}{code}"
        )
    if event.resource == "rayclusters" and event.sub == "status":
        cond = _conditions(body)
        return (
            f"{event.verb} rayclusters/status {short} state={status.get('state', '-')} "
            f"HeadPodReady={cond.get('HeadPodReady', '-')} "
            f"Provisioned={cond.get('RayClusterProvisioned', '-')}{code}"
        )
    if event.resource == "pods" and event.sub == "status":
        conditions = status.get("conditions") or []
        ready_ = [c.get("status") for c in conditions if c.get("type") == "Ready"]
        phase = status.get("phase") or (event.response.get("status") or {}).get("phase", "")
        return (
            f"{event.verb} pods/status {short} phase={phase or '-'} "
            f"Ready={ready_[0] if ready_ else '-'}{code}"
        )
    if event.resource == "pods" and event.verb in ("update", "patch"):
        labels = (body.get("metadata") or {}).get("labels") or {}
        return f"{event.verb} pods {short} ray.io/serve={labels.get('ray.io/serve', '-')}{code}"
    if event.resource == "endpointslices":
        endpoints = body.get("endpoints") or []
        ready_n = sum(1 for e in endpoints if (e.get("conditions") or {}).get("ready"))
        service = ((body.get("metadata") or {}).get("labels") or {}).get(
            "kubernetes.io/service-name", short
        )
        return f"{event.verb} endpointslices of {service}: {ready_n} ready{code}"
    if event.resource == "rayclusters" and event.verb == "patch":
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        return f"patch rayclusters {short} annotations {sorted(annotations)}{code}"
    if event.resource == "rayservices" and event.verb == "update":
        finalizers = (body.get("metadata") or {}).get("finalizers")
        return f"update rayservices finalizers={finalizers}{code}"
    return f"{event.what} {short}{code}"


def _in_timeline(event: Event, name: str) -> bool:
    if event.resource in ("events", "leases", "nodes", "serviceaccounts", "namespaces"):
        return False
    if event.client in (
        compare.OPERATOR_USER_AGENTS["ours"],
        compare.OPERATOR_USER_AGENTS["kuberay"],
    ):
        return event.verb not in ("list", "watch") and (event.write or event.proxy)
    if event.client == "bench-realray":
        return event.resource == "rayservices" and event.write
    if event.client == "kube-scheduler":
        return event.sub == "binding"
    if event.client in ("kwok", HARNESS_CLIENT):
        return event.resource == "pods" and event.sub == "status"
    if event.client == "kube-controller-manager":
        return event.resource == "endpointslices" and event.write and name in event.name
    return False


def timeline(
    events: list[Event], start: datetime.datetime, end: datetime.datetime, seen: str
) -> list[list[Any]]:
    """``[seconds after start, client, what]`` of the story's requests in ``[start, end]``,
    then ``[.., "bench", seen]`` at ``end``."""
    out: list[list[Any]] = []
    for event in events:
        if (
            start <= event.at <= end
            and event.namespace in (NAMESPACE, "")
            and _in_timeline(event, NAME)
        ):
            seconds = round((event.at - start).total_seconds(), 2)
            out.append([seconds, event.client, describe(event, NAME)])
    out.append([round((end - start).total_seconds(), 2), "bench", seen])
    return out


HEAD_READY = "harness: Ready=True (probe)"
MILESTONES: tuple[tuple[str, Callable[[str, str], bool]], ...] = (
    ("raycluster created", lambda c, w: c == "op" and w.startswith("create rayclusters ")),
    ("head pod created", lambda c, w: c == "op" and w.startswith("create pods ")),
    ("head pod bound", lambda c, w: c == "kube-scheduler"),
    ("kwok: pod Running", lambda c, w: c == "kwok" and "phase=Running" in w),
    ("harness: Ready=False", lambda c, w: c == HARNESS_CLIENT and "Ready=False" in w),
    (HEAD_READY, lambda c, w: c == HARNESS_CLIENT and "Ready=True" in w),
    ("head svc created", lambda c, w: c == "op" and w.startswith("create services ")
     and w.endswith("head-svc")),
    ("raycluster status HeadPodReady=True", lambda c, w: c == "op"
     and "rayclusters/status" in w and "HeadPodReady=True" in w and "->" not in w),
    ("first proxy request", lambda c, w: c == "op" and w.startswith("proxy ")),
    ("first proxy GET applications answered 200", lambda c, w: c == "op"
     and w.startswith("proxy GET") and "applications" in w and "->" not in w),
    ("Serve PUT", lambda c, w: c == "op" and w.startswith("proxy PUT") and "applications" in w),
    ("head pod ray.io/serve=true", lambda c, w: c == "op" and "ray.io/serve=true" in w),
    ("serve svc created", lambda c, w: c == "op" and w.startswith("create services ")
     and w.endswith("serve-svc")),
    ("serve svc endpoint ready", lambda c, w: c == "kube-controller-manager"
     and "serve-svc" in w and not w.endswith(": 0 ready")),
    ("apps RUNNING in a status write", lambda c, w: c == "op" and "rayservices/status" in w
     and "active=" in w and "=RUNNING,hello=RUNNING" in w.split("pending=")[0]),
    ("status Ready=True written", lambda c, w: c == "op" and "rayservices/status Ready=True" in w
     and "->" not in w),
    ("ready seen by the bench", lambda c, w: c == "bench"),
)  # fmt: skip
"""The steps picked out of a timeline: (name, test of (client, what)), first match wins;
``op`` is the operator, whichever it is."""


def milestones(lines: list[list[Any]], operator: str) -> dict[str, float | None]:
    who = compare.OPERATOR_USER_AGENTS[operator]
    out: dict[str, float | None] = {}
    for label, test in MILESTONES:
        out[label] = next(
            (t for t, client, what in lines if test("op" if client == who else client, what)), None
        )
    return out


def conflicts_detail(events: list[Event], who: str) -> list[dict[str, Any]]:
    """Each of ``who``'s writes answered 409: the object, the resourceVersion it wrote
    with, and the write that had moved the object past it (the first successful write to
    the object, any client, whose new resourceVersion is newer)."""
    out = []
    for event in events:
        if event.client != who or event.code != 409 or not event.write:
            continue
        rv = event.rv("request")
        racer = None
        if rv is not None:
            moved = [
                e for e in events
                if e.resource == event.resource and e.name == event.name and e.code < 300
                and e.write and (e.rv("response") or 0) > rv and e.at <= event.at
            ]  # fmt: skip
            racer = min(moved, key=lambda e: e.rv("response") or 0, default=None)
        entry: dict[str, Any] = {
            "at": event.at.isoformat(),
            "write": f"{event.what} {event.name}",
            "with_resource_version": rv,
            "message": (event.raw.get("responseStatus") or {}).get("message", ""),
        }
        if racer is not None:
            entry["raced"] = {
                "by": racer.client,
                "write": f"{racer.what} {racer.name}",
                "seconds_before": round((event.at - racer.at).total_seconds(), 3),
                "new_resource_version": racer.rv("response"),
                "what": describe(racer, NAME),
            }
        out.append(entry)
    return out


def operator_figures(
    events: list[Event], operator: str, marks: Mapping[str, datetime.datetime]
) -> tuple[dict[str, float], dict[str, Any]]:
    who = compare.OPERATOR_USER_AGENTS[operator]
    windows = {
        "init": (marks["create"], marks["steady_from"]),
        "steady": (marks["steady_from"], marks["upgrade"]),
        "upgrade": (marks["upgrade"], marks["delete"]),
        "delete": (marks["delete"], marks["end"]),
    }
    mine = [e for e in events if e.client == who and marks["create"] <= e.at <= marks["end"]]

    def phase(event: Event) -> str:
        return next(p for p, (a, b) in windows.items() if a <= event.at <= b)

    figures: dict[str, float] = {}
    for p in PHASES:
        for short, resource in STATUS_KINDS.items():
            figures[f"{p}_{short}_status_writes"] = sum(
                1 for e in mine if phase(e) == p and e.resource == resource
                and e.sub == "status" and e.verb in ("update", "patch")
            )  # fmt: skip
        figures[f"{p}_conflicts"] = sum(1 for e in mine if phase(e) == p and e.code == 409
                                        and e.write)  # fmt: skip
    figures["status_writes"] = sum(
        1 for e in mine if e.resource in STATUS_KINDS.values() and e.sub == "status"
        and e.verb in ("update", "patch")
    )  # fmt: skip
    figures["conflicts"] = sum(figures[f"{p}_conflicts"] for p in PHASES)
    steady = [e for e in mine if phase(e) == "steady" and e.verb not in ("watch",)]
    minutes = (marks["upgrade"] - marks["steady_from"]).total_seconds() / 60
    figures["steady_proxy_requests_per_min"] = round(sum(e.proxy for e in steady) / minutes, 2)
    figures["steady_api_requests_per_min"] = round(sum(not e.proxy for e in steady) / minutes, 2)
    writes: dict[str, int] = {}
    for e in mine:
        if e.write:
            writes[e.what] = writes.get(e.what, 0) + 1
    figures["writes_all"] = sum(writes.values())
    figures["serve_puts"] = sum(
        1 for e in mine if e.proxy and e.verb == "update" and "serve/applications" in e.uri
    )
    steady_by_kind: dict[str, int] = {}
    for e in steady:
        key = e.what + (f" {e.uri.split('/proxy', 1)[1].split('?')[0]}" if e.proxy else "")
        steady_by_kind[key] = steady_by_kind.get(key, 0) + 1
    detail = {
        "writes_by_kind": dict(sorted(writes.items())),
        "steady_by_kind": dict(sorted(steady_by_kind.items())),
        "conflicts": conflicts_detail(events, who),
    }
    return figures, detail


# -- one run -------------------------------------------------------------------------------


async def wait_for(
    client: client_.Client,
    process: _common.Manager,
    kubelet: test_realray.Kubelet,
    check: Callable[[Obj | None], bool],
    within: float,
    what: str,
) -> tuple[float, Obj | None]:
    """Poll the RayService every 0.25 s until ``check(obj or None)``; (seconds, obj)."""
    started = time.monotonic()
    last_report = 0.0
    while True:
        process.check_alive()
        if kubelet.errors:
            raise BenchError(f"the real-Ray kubelet failed: {kubelet.errors}")
        try:
            obj: Obj | None = await client.get(v1.RAYSERVICES, NAMESPACE, NAME)
        except errors.NotFound:
            obj = None
        elapsed = time.monotonic() - started
        if check(obj):
            return elapsed, obj
        if elapsed > within:
            conditions = json.dumps(((obj or {}).get("status") or {}).get("conditions"))
            raise BenchError(
                f"not {what} within {within:.0f} s; conditions {conditions}\n"
                f"last lines of the operator's log:\n{process.tail(15)}"
            )
        if elapsed - last_report >= 10:
            last_report = elapsed
            log(f"{elapsed:.0f} s: waiting until {what}")
        await asyncio.sleep(0.25)


async def check_served(
    client: client_.Client, cp: controlplane.ControlPlane, kubelet: test_realray.Kubelet,
    cluster: str,
) -> None:  # fmt: skip
    """Both routes answered by the real head of ``cluster`` (its pod IP, route checked)."""
    pod = await test_realray.head_pod(client, NAMESPACE, cluster)
    real = kubelet.by_name(pod["metadata"]["name"])
    assert cp.pod_network is not None
    if ipaddress.ip_address(real.ip) not in ipaddress.ip_network(cp.pod_network.cidr):
        raise BenchError(f"head IP {real.ip} is outside the pod network")
    real.verify()
    timeout = aiohttp.ClientTimeout(total=10, connect=3)
    async with aiohttp.ClientSession(timeout=timeout, trust_env=False) as http:
        for path, want in ANSWERS.items():
            async with http.get(f"http://{real.ip}:8000{path}") as response:
                body = await response.text()
            if (response.status, body) != (200, want):
                raise BenchError(f"{path} on {real.ip}: {response.status} {body[:80]!r}")


async def scenario(
    args: argparse.Namespace,
    cp: controlplane.ControlPlane,
    real: realray.Harness,
    process: _common.Manager,
    result: dict[str, Any],
    marks: dict[str, datetime.datetime],
) -> None:
    assert cp.kubeconfig is not None
    client = await client_.Client.from_kubeconfig(
        cp.kubeconfig, options=client_.Options(user_agent=BENCH_USER_AGENT)
    )
    v1.add_to_registry(client.registry)
    async with client, test_realray.Kubelet(client, real, NAMESPACE) as kubelet:
        try:
            await _scenario(args, cp, client, kubelet, process, result, marks)
        except BaseException:
            log(f"real Ray pods:\n{kubelet.tails(20)}")
            raise


async def _scenario(
    args: argparse.Namespace,
    cp: controlplane.ControlPlane,
    client: client_.Client,
    kubelet: test_realray.Kubelet,
    process: _common.Manager,
    result: dict[str, Any],
    marks: dict[str, datetime.datetime],
) -> None:
    def wait(check: Callable[[Obj | None], bool], within: float, what: str) -> Any:
        return wait_for(client, process, kubelet, check, within, what)

    await client.list(v1.RAYSERVICES, NAMESPACE)  # the client's first request is slow
    marks["create"] = now()
    await client.create(rayservice(args.deletion_delay))
    seconds, obj = await wait(lambda o: o is not None and ready(o), args.ready_timeout, "Ready")
    marks["ready_seen"] = now()
    result["time_to_ready_s"] = round(seconds, 2)
    assert obj is not None
    first = rayservice_bench.active(obj)
    log(f"Ready in {seconds:.1f} s on {first}")
    await check_served(client, cp, kubelet, first)
    await asyncio.sleep(args.settle_seconds)

    marks["steady_from"] = now()
    log(f"steady for {args.steady_seconds} s")
    await asyncio.sleep(args.steady_seconds)
    process.check_alive()

    marks["upgrade"] = now()
    await rayservices.update_spec(client, NAMESPACE, NAME, test_realray.new_revision)
    seconds, obj = await wait(
        lambda o: o is not None and ready(o) and rayservice_bench.active(o) not in ("", first),
        args.upgrade_timeout, "Ready on a new cluster",
    )  # fmt: skip
    marks["switched_seen"] = now()
    result["time_to_switched_s"] = round(seconds, 2)
    assert obj is not None
    second = rayservice_bench.active(obj)
    await check_served(client, cp, kubelet, second)

    async def old_gone() -> bool:
        return await rayservices.cluster_names(client, NAMESPACE) == {second}

    deadline = time.monotonic() + args.upgrade_timeout + args.deletion_delay
    while not await old_gone():
        process.check_alive()
        if time.monotonic() > deadline:
            raise BenchError(f"the old cluster {first} was not deleted")
        await asyncio.sleep(0.25)
    marks["upgraded_seen"] = now()
    result["time_to_upgraded_s"] = round(
        (marks["upgraded_seen"] - marks["upgrade"]).total_seconds(), 2
    )
    log(f"switched in {result['time_to_switched_s']} s, old cluster gone after "
        f"{result['time_to_upgraded_s']} s")  # fmt: skip
    await asyncio.sleep(args.settle_seconds)

    marks["delete"] = now()
    await client.delete(v1.RAYSERVICES, NAMESPACE, NAME)
    deadline = time.monotonic() + args.upgrade_timeout
    while True:
        process.check_alive()
        try:
            await client.get(v1.RAYSERVICES, NAMESPACE, NAME)
            gone = False
        except errors.NotFound:
            gone = not await rayservices.cluster_names(client, NAMESPACE)
        if gone:
            listed = await client.list(
                test_realray.harness.PODS, NAMESPACE, label_selector=test_realray.RAY_NODES
            )
            gone = not listed.items and set(kubelet.pods) <= kubelet.stopped
        if gone:
            break
        if time.monotonic() > deadline:
            raise BenchError("the RayService and its clusters were not all deleted")
        await asyncio.sleep(0.25)
    marks["deleted_seen"] = now()
    result["time_to_deleted_s"] = round(
        (marks["deleted_seen"] - marks["delete"]).total_seconds(), 2
    )
    await asyncio.sleep(args.settle_seconds)
    marks["end"] = now()
    # After the waits (which fail on them): e.g. KubeRay v1.7.0 makes a new head pod for a
    # cluster it is deleting, kwok gives it the old head's IP at once, and the kubelet
    # refuses to run it while the old one's network is still being torn down.
    result["kubelet_errors"] = list(kubelet.errors)


def _bench_write(events: list[Event], verb: str, after: datetime.datetime) -> datetime.datetime:
    """When the API server finished the bench's first ``verb`` of the RayService after
    ``after`` (a timeline's zero); ``after`` itself if the audit log has none."""
    found = (
        e.at for e in events
        if e.client == "bench-realray" and e.resource == "rayservices" and not e.sub
        and e.verb == verb and e.at >= after
    )  # fmt: skip
    return next(found, after)


def _status_writes_counted(before: rayservice_bench.Counts, after: rayservice_bench.Counts) -> int:
    delta = rayservice_bench.minus(after, before)
    return int(sum(compare.status_writes(delta, r) for r in STATUS_KINDS.values()))


async def run_one(args: argparse.Namespace, operator: str, result: dict[str, Any]) -> None:
    """The scenario against ``operator`` on a fresh control plane; figures into ``result``."""
    t0 = time.monotonic()
    marks: dict[str, datetime.datetime] = {}
    with rayservice_bench.workdir() as work:
        audit_log = work / "audit.log"
        (work / "audit-policy.json").write_text(json.dumps(AUDIT_POLICY))
        flags = [f"--audit-policy-file={work / 'audit-policy.json'}",
                 f"--audit-log-path={audit_log}", "--audit-log-mode=blocking"]  # fmt: skip
        crd_dir = work / "crds"
        crd_dir.mkdir()
        for path in [
            *rayservice_bench.CRD_DIR.glob("*.yaml"),
            args.kuberay_crds / "ray.io_rayjobs.yaml",
        ]:
            shutil.copy(path, crd_dir / path.name)
        options = controlplane.Options(
            bin_dir=args.bin_dir, controller_manager=True, scheduler=True, kwok=True, nodes=2,
            pod_network=True, start_timeout=120, extra_apiserver_flags=flags,
        )  # fmt: skip
        with (
            controlplane.running(options) as cp,
            realray.running(cp, pythonpath=[test_realray.APPS]) as real,
        ):
            assert cp.kubeconfig is not None
            cp.install_crds(crd_dir)
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
            cp.request("POST", "/api/v1/namespaces", body)
            deadline = time.monotonic() + 60
            while True:  # kube-controller-manager makes the default ServiceAccount
                try:
                    cp.request("GET", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default")
                    break
                except controlplane.ApiError as exc:
                    if exc.status != 404 or time.monotonic() > deadline:
                        raise BenchError(f"no default ServiceAccount in {NAMESPACE}") from exc
                    await asyncio.sleep(0.1)
            log(f"{operator}: control plane up in {time.monotonic() - t0:.1f} s")
            before = rayservice_bench.api_counts(cp)
            process = compare.start_operator(operator, cp.kubeconfig, work, args)
            try:
                result["operator_ready_s"] = round(await process.wait_ready(60), 2)
                log(f"{operator}: ready in {result['operator_ready_s']} s")
                await scenario(args, cp, real, process, result, marks)
                result["peak_rss_mib"] = round(process.memory_mib(), 1)
                result["cpu_s"] = round(process.cpu_seconds(), 2)
                result["status_writes_apiserver_metrics"] = _status_writes_counted(
                    before, rayservice_bench.api_counts(cp)
                )
            except BaseException:
                log(f"{operator}: last lines of its log:\n{process.tail(20)}")
                raise
            finally:
                process.stop()
                if os.environ.get("BENCH_KEEP_DIR"):
                    log(f"{operator}: log {process.log_path}, audit log {audit_log}")
        # The control plane has stopped: the audit log is complete.
        events = read_audit(audit_log)
    figures, detail = operator_figures(events, operator, marks)
    result.update(figures)
    init = timeline(
        events, _bench_write(events, "create", marks["create"]), marks["ready_seen"], "ready seen"
    )
    upgrade = timeline(
        events, _bench_write(events, "update", marks["upgrade"]), marks["switched_seen"],
        "ready on the new cluster seen",
    )  # fmt: skip
    result["milestones_init"] = milestones(init, operator)
    result["milestones_upgrade"] = milestones(upgrade, operator)
    for phase, head, after in (
        ("init", "head_ready_s", "ready_after_head_s"),
        ("upgrade", "upgrade_head_ready_s", "switched_after_head_s"),
    ):
        steps = result[f"milestones_{phase}"]
        ready_at, seen_at = steps[HEAD_READY], steps["ready seen by the bench"]
        if ready_at is not None and seen_at is not None:
            result[head] = ready_at
            result[after] = round(seen_at - ready_at, 2)
    result["timeline_init"] = init
    result["timeline_upgrade"] = upgrade
    result["detail"] = detail
    result["total_s"] = round(time.monotonic() - t0, 1)


# -- rounds and the summary ----------------------------------------------------------------


def medians(runs: list[dict[str, Any]]) -> dict[str, float]:
    keys = [*FIGURES, "operator_ready_s", "total_s", "load_avg_1m"]
    return {
        k: round(statistics.median(r[k] for r in runs), 3)
        for k in keys
        if all(isinstance(r.get(k), (int, float)) for r in runs)
    }


def ratios(ours: Mapping[str, float], kuberay: Mapping[str, float]) -> dict[str, float | None]:
    return {
        k: (round(ours[k] / kuberay[k], 3) if kuberay[k] else None)
        for k in FIGURES
        if k in ours and k in kuberay
    }


def side_by_side(runs: Mapping[str, dict[str, Any]], which: str) -> str:
    """The operators' milestones of ``which`` phase as a text table (stderr)."""
    names = list(runs)
    labels = [label for label, _ in MILESTONES]
    width = max(len(label) for label in labels)
    lines = [f"{which} milestones (s after {'create' if which == 'init' else 'the spec change'})"]
    lines.append(" " * width + "".join(f"{n:>10}" for n in names))
    for label in labels:
        cells = []
        for n in names:
            value = runs[n].get(f"milestones_{which}", {}).get(label)
            cells.append(f"{'-' if value is None else value:>10}")
        lines.append(f"{label:<{width}}" + "".join(cells))
    return "\n".join(lines)


async def run_all(args: argparse.Namespace, summary: dict[str, Any]) -> None:
    operators = OPERATORS if args.operator == "both" else (args.operator,)
    runs: dict[str, list[dict[str, Any]]] = {op: [] for op in operators}
    for round_ in range(1, args.rounds + 1):
        for operator in operators:
            result: dict[str, Any] = {
                "bench": "realray-run", "operator": operator, "round": round_,
                "steady_seconds": args.steady_seconds, "deletion_delay": args.deletion_delay,
                "load_avg_1m": round(os.getloadavg()[0], 2),
            }  # fmt: skip
            log(f"round {round_}: {operator}")
            try:
                await run_one(args, operator, result)
            except BaseException as exc:
                result["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
                print(json.dumps(result, default=str), flush=True)
                raise
            print(json.dumps(result), flush=True)
            runs[operator].append(result)
        log(side_by_side({op: runs[op][-1] for op in operators}, "init"))
        log(side_by_side({op: runs[op][-1] for op in operators}, "upgrade"))
    for operator in operators:
        summary[operator] = medians(runs[operator])
    if len(operators) == 2:
        summary["ratios"] = ratios(summary["ours"], summary["kuberay"])
    summary["milestones"] = {
        op: {"init": runs[op][0]["milestones_init"], "upgrade": runs[op][0]["milestones_upgrade"]}
        for op in operators
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--operator",
        default="both",
        choices=["both", *OPERATORS],
        help="which operator to run (default both: ours, then KubeRay)",
    )
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--steady-seconds", type=float, default=60.0)
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=5.0,
        help="after Ready, after the upgrade, after the delete (default 5)",
    )
    parser.add_argument(
        "--deletion-delay",
        type=int,
        default=test_realray.DELETION_DELAY,
        help="rayClusterDeletionDelaySeconds (default test_realray's, 5)",
    )
    parser.add_argument("--ready-timeout", type=float, default=240.0)
    parser.add_argument("--upgrade-timeout", type=float, default=240.0)
    parser.add_argument(
        "--kuberay-bin",
        type=pathlib.Path,
        default=KUBERAY_BIN,
        help=f"KubeRay's operator binary (default {KUBERAY_BIN})",
    )
    parser.add_argument(
        "--kuberay-crds",
        type=pathlib.Path,
        default=KUBERAY_CRDS,
        help=f"KubeRay's config/crd/bases (its RayJob CRD is installed; default {KUBERAY_CRDS})",
    )
    parser.add_argument(
        "--manager-log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    parser.add_argument(
        "--bin-dir",
        type=pathlib.Path,
        default=None,
        help="control-plane binaries; default $CONTROLPLANE_BIN_DIR or build.sh",
    )
    args = parser.parse_args(argv)  # fmt: skip
    if args.rounds < 1 or args.steady_seconds <= 0:
        parser.error("--rounds >= 1, --steady-seconds > 0")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    summary: dict[str, Any] = {
        "bench": "realray", "steady_seconds": args.steady_seconds, "rounds": args.rounds,
        "kuberay_bin": str(args.kuberay_bin),
    }  # fmt: skip
    status = 0
    try:
        if args.operator != "ours" and not os.access(args.kuberay_bin, os.X_OK):
            raise BenchError(f"no KubeRay binary at {args.kuberay_bin} (hack/peers/kuberay.sh)")
        if not (args.kuberay_crds / "ray.io_rayjobs.yaml").exists():
            raise BenchError(f"no ray.io_rayjobs.yaml in {args.kuberay_crds} (kuberay.sh --crds)")
        realray.ray_venv()
        args.bin_dir = _common.bin_dir(args.bin_dir)
        asyncio.run(run_all(args, summary))
    except (
        BenchError, controlplane.ControlPlaneError, realray.RealRayError,
        subprocess.CalledProcessError,
    ) as exc:  # fmt: skip
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
