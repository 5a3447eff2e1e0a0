"""The RayService reconciler: Ray Serve applications on RayClusters, upgraded without
downtime, with nothing that matters kept in memory.

**Where the state lives.** Everything a pass decides from is read again from the
cache (never from the API server) or from the Ray dashboard:

- the **active** cluster is the one ``<svc>-head-svc`` selects (``ray.io/cluster``):
  traffic is the truth about what serves;
- the **pending** cluster is the owned cluster whose
  ``ray.io/hash-without-replicas-and-workers-to-delete`` annotation equals the hash
  of ``spec.rayClusterConfig`` (autoscaler-owned fields ignored), when that is not
  the active one. A new one is named after the hash
  (:func:`controllers.rayservice.clusters.cluster_name`), so a crash between
  creating it and writing the status finds it again instead of making a second;
- which Serve config a cluster runs is the ``ray.io/serve-config-hash`` annotation,
  written after a successful PUT; before a PUT the dashboard's own
  ``deployed_app_config`` is compared too, so a crash between the PUT and the
  annotation never submits the same config twice;
- when an old cluster goes is its ``ray.io/delete-after`` annotation, written on it
  **before** traffic leaves it; a cluster that no role claims and that has no such
  annotation never served traffic and is deleted at once.

**One pass** (:meth:`Reconciler.reconcile`):

1. a RayService being deleted: its clusters are deleted, then the finalizer
   ``ray.io/rayservice-finalizer`` is removed; otherwise the finalizer is added
   (one write, once). ``spec.managedBy`` naming another controller: skipped;
2. validation (:mod:`controllers.rayservice.validation`): a RayService that cannot
   be reconciled gets ``Ready=False``/``ValidationFailed`` with the reasons, one
   Warning Event, and a :class:`~runtime.reconcile.TerminalError` - no retry until
   it changes;
3. ``spec.suspend``: every cluster is deleted (``Suspending`` until they are gone,
   then ``Suspended``); resuming starts over. An ``ray.io/initializing-timeout``
   that passed before the service was ever ready: its clusters are deleted and
   ``Ready=False``/``InitializingTimeout`` stays until the spec changes;
4. clusters: the active one keeps serving when its hash matches, when worker groups
   were only appended (it is updated in place) or with ``upgradeStrategy.type:
   None``; otherwise the pending cluster is found (or updated in place, or created).
   Clusters no role claims are deleted (at once, or when their ``delete-after`` is
   due; a dropped pending cluster while the active one matches again is a
   rollback: ``RollbackInProgress``);
5. Serve, on the target (the pending cluster, else the active one), once its head
   pod is Running and Ready: read the applications; submit the config when the
   cluster's ``serve-config-hash`` differs or the dashboard has no applications (a
   restarted head); the head pod's ``ray.io/serve`` label follows its Serve proxy
   (Serve's own proxy report in the same answer, ``/-/healthz`` when that says
   nothing or disagrees with the label), written only on change;
6. traffic: when the target's applications are all ``RUNNING``, the services are
   created or pointed at it (a Service is rewritten only when the cluster it
   selects changes; an object of our name that we do not control is never
   touched: it is reported instead) - a pending target becomes active and the old
   active cluster gets its ``delete-after`` first;
7. the status (:func:`controllers.rayservice.status.compute`), handed to the
   status writer (at most one write per pass, none when nothing changed). A pass
   that has just created or re-pointed the services does not report, nor do the
   passes after it while the serve service has no endpoint, for up to
   :data:`ENDPOINTS_GRACE`: the endpoints follow within about a second (their
   EndpointSlice wakes us), and one write then reports the switch and the endpoints.

**When it runs again.** Watches (see :func:`controllers.rayservice.setup`) wake it on
spec changes, on any change to its clusters and services, and on the serve
service's EndpointSlices. The dashboard sends no events, so it is polled:
every ``serve_poll_interval`` (2 s) while converging, and once the service is
ready and nothing changed between two polls, at doubling intervals up to
``serve_poll_max`` (10 s); any change returns to 2 s. A slow dashboard is polled no
sooner than ``slow_dashboard_factor`` (4) times its pass took: fairness to the other
RayServices sharing the workers (a 1.9 s answer is asked for every 7.6 s, not 2 s).
A dashboard that cannot be reached, or refuses the config, raises: the work queue
retries with its growing backoff (never a 2 s loop).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

import api.v1 as v1
from controllers.ray import dashboard, serveconfig
from controllers.raycluster import names as raycluster_names
from controllers.raycluster import pods as pods_
from controllers.raycluster import reconciler as raycluster_reconciler
from controllers.raycluster import status as raycluster_status
from controllers.rayservice import clusters, services, validation
from controllers.rayservice import status as status_
from runtime import events, objects
from runtime import reconcile as reconcile_
from runtime import status as runtime_status
from runtime.cache import cache as cache_
from runtime.client import errors, resources

__all__ = ["ENDPOINT_SLICES", "FINALIZER", "Options", "Reconciler"]

Obj = dict[str, Any]

FINALIZER = "ray.io/rayservice-finalizer"
SERVICES = raycluster_reconciler.SERVICES
PODS = raycluster_reconciler.PODS
ENDPOINT_SLICES = resources.default_registry.for_kind("discovery.k8s.io/v1", "EndpointSlice")
SERVE_LABEL = "ray.io/serve"
ENDPOINTS_GRACE = 3.0
"""Seconds after traffic moved during which a report waits for the serve endpoints."""
_SERVICE_NAME_LABEL = "kubernetes.io/service-name"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    """How the reconciler reaches Ray and how often it looks. Every field states its default."""

    address_mode: dashboard.Mode = "service"
    """How dashboards are addressed (:func:`controllers.ray.dashboard.address`). Default
    ``service`` (in-cluster DNS)."""
    cluster_domain: str = dataclasses.field(
        default_factory=lambda: os.environ.get("CLUSTER_DOMAIN") or "cluster.local"
    )
    """DNS domain of ``service`` addresses. Default ``$CLUSTER_DOMAIN``, else ``cluster.local``."""
    serve_poll_interval: float = 2.0
    """Seconds between dashboard polls while converging. Default 2 s (KubeRay's)."""
    serve_poll_max: float = 10.0
    """Longest interval between polls of a ready, unchanged service. Default 10 s."""
    slow_dashboard_factor: float = 4.0
    """A poll comes no sooner than this many times the last pass took (its dashboard
    calls, mostly), so one slow dashboard holds a worker at most 1/(1 + factor) of the
    time (20 % by default) and other RayServices' reconciles do not queue behind it.
    Default 4; a dashboard answering in milliseconds is polled as usual."""

    def __post_init__(self) -> None:
        if not 0 < self.serve_poll_interval <= self.serve_poll_max:
            raise ValueError(
                "need 0 < serve_poll_interval <= serve_poll_max, got "
                f"{self.serve_poll_interval} and {self.serve_poll_max}"
            )
        if self.slow_dashboard_factor < 0:
            raise ValueError(
                f"slow_dashboard_factor must be >= 0, got {self.slow_dashboard_factor}"
            )


class _ServeFailed(Exception):
    """The dashboard could not be read or refused the config (retried with backoff)."""

    def __init__(self, message: str, *, refusal: str | None = None) -> None:
        super().__init__(message)
        self.refusal = refusal
        """Serve's answer when it refused the config (worth showing in the status)."""


@dataclasses.dataclass
class _Poll:
    fingerprint: Any
    interval: float


def _time(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _rfc3339(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Reconciler:
    """See the module docstring."""

    def __init__(
        self,
        client: Any,
        cache: cache_.Cache,
        recorder: events.Recorder,
        dashboards: dashboard.DashboardFactory,
        options: Options | None = None,
        *,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self.client = client
        self.cache = cache
        self.recorder = recorder
        self.dashboards = dashboards
        self.options = options or Options()
        self.clock = clock
        self.writer = runtime_status.StatusWriter(
            client,
            volatile=status_.VOLATILE,
            stamps={"lastUpdateTime": self._now_text},
            latest=cache,  # a spec update meanwhile: STALE at once, not a 409
        )
        self.log = structlog.get_logger("controllers.rayservice")
        self._polls: dict[reconcile_.Request, _Poll] = {}
        self._moved: dict[reconcile_.Request, datetime.datetime] = {}
        """When traffic last moved, per RayService: a hint that holds the report back
        until the serve endpoints show (losing it costs at most one status write)."""

    def _now_text(self) -> str:
        return _rfc3339(self.clock())

    # -- the pass ---------------------------------------------------------------------------

    async def reconcile(self, request: reconcile_.Request) -> reconcile_.Result:
        try:
            obj = await self.cache.get(v1.RAYSERVICES, request.namespace, request.name)
        except errors.NotFound:
            self._polls.pop(request, None)
            self._moved.pop(request, None)
            return reconcile_.Result()
        if obj["metadata"].get("deletionTimestamp"):
            self._polls.pop(request, None)
            self._moved.pop(request, None)
            return await self._finalize(obj)
        managed_by = (obj.get("spec") or {}).get("managedBy")
        if managed_by not in (None, "", raycluster_reconciler.MANAGED_BY):
            return reconcile_.Result()
        if not objects.has_finalizer(obj, FINALIZER):
            obj = await self._add_finalizer(obj)

        text = (obj.get("spec") or {}).get("serveConfigV2")
        if isinstance(text, str):
            await serveconfig.parse_off_loop(text)  # once per text, never on the loop
        problems = validation.problems(obj)
        if problems:
            message = "; ".join(problems)
            self._warn_once(obj, "ValidationFailed", "InvalidRayServiceSpec", message)
            await self._write(obj, status_.Observed(
                num_serve_endpoints=await self._serve_endpoints(obj),
                problem=status_.Problem(reason="ValidationFailed", message=message),
            ))  # fmt: skip
            self._polls.pop(request, None)
            raise reconcile_.TerminalError(message)
        return await self._reconcile(request, obj)

    async def _reconcile(self, request: reconcile_.Request, obj: Obj) -> reconcile_.Result:
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        spec = obj.get("spec") or {}
        owned = [c for c in await self.cache.list(
            v1.RAYCLUSTERS, namespace, label_selector=clusters.owned_selector(name)
        ) if clusters.is_owned(c, obj)]  # fmt: skip
        live = [c for c in owned if not c["metadata"].get("deletionTimestamp")]
        endpoints = await self._serve_endpoints(obj)

        if spec.get("suspend"):
            await self._delete_clusters(obj, live, "the RayService is suspended")
            await self._write(obj, status_.Observed(
                num_serve_endpoints=endpoints, suspend="suspending" if owned else "suspended"
            ))  # fmt: skip
            self._polls.pop(request, None)
            return reconcile_.Result()

        timed_out = self._timed_out(obj, endpoints)
        if timed_out is not None:
            await self._delete_clusters(obj, live, "the RayService did not become ready in time")
            if timed_out:  # it passed in this pass
                self.recorder.event(obj, "Warning", "RayServiceInitializingTimeout", timed_out)
            await self._write(obj, status_.Observed(
                num_serve_endpoints=endpoints, timed_out=timed_out or None
            ))  # fmt: skip
            self._polls.pop(request, None)
            return reconcile_.Result()

        head_svc = await self._service(namespace, services.head_service_name(name))
        serve_svc = await self._service(namespace, services.serve_service_name(obj))
        foreign = [
            s
            for s in (head_svc, serve_svc)
            if s is not None and not objects.is_controlled_by(s, obj)
        ]
        if foreign:
            message = "; ".join(
                f"Service {s['metadata']['name']} exists and is not controlled by this RayService"
                for s in foreign
            )
            self._warn_once(obj, "ServiceNotOwned", "ServiceNotOwned", message)
            await self._write(obj, status_.Observed(
                num_serve_endpoints=endpoints,
                problem=status_.Problem(reason="ServiceNotOwned", message=message),
            ))  # fmt: skip
            return reconcile_.Result(requeue_after=self.options.serve_poll_max)

        config = spec.get("rayClusterConfig") or {}
        selected = services.selected_cluster(head_svc) if head_svc is not None else None
        active = next((c for c in live if c["metadata"]["name"] == selected), None)
        pending: Obj | None = None
        wake: list[float] = []

        need_new = True
        if active is not None:
            match = clusters.match(active, config)
            if match is clusters.Match.APPENDED:
                active = await self._update_in_place(obj, active)
                need_new = False
            elif match is clusters.Match.EXACT or _upgrade_type(spec) == "None":
                need_new = False
        if active is not None and not need_new:
            active = await self._keep(active)  # a delete-after left by an abandoned switch
        if need_new:
            pending = await self._pending(obj, active, live, config)
            if pending is None:  # its name is still held by a cluster being deleted
                wake.append(self.options.serve_poll_interval)
        claimed = {c["metadata"]["name"] for c in (active, pending) if c is not None}
        # Never delete what a service selects, even when the two disagree (a crash between
        # re-pointing one and the other): traffic may still go there.
        claimed.update(
            n for n in (services.selected_cluster(s) for s in (head_svc, serve_svc) if s) if n
        )
        dangling = [c for c in owned if c["metadata"]["name"] not in claimed]
        rolling_back = (
            active is not None
            and not need_new
            and any(
                clusters.DELETE_AFTER_ANNOTATION not in (c["metadata"].get("annotations") or {})
                for c in dangling
            )
        )
        wake.extend(await self._clean_up(obj, dangling))

        # A new cluster is needed but cannot be created yet: Serve waits for it (the
        # serving cluster keeps its config, which belongs with its own image).
        target = pending if need_new else active
        apps: dict[str, Any] | None = None
        ready = False
        failure: _ServeFailed | None = None
        serve_error: str | None = None
        polled = False
        started = time.monotonic()
        if target is not None:
            try:
                apps, ready, polled = await self._serve(obj, target)
            except _ServeFailed as exc:
                failure = exc
                serve_error = exc.refusal
        spent = time.monotonic() - started  # mostly the dashboard's answers
        if ready and target is not None and failure is None:
            routed = await self._route(obj, target, active, head_svc, serve_svc)
            if routed != (head_svc, serve_svc):
                # Traffic just moved: the serve service's endpoints follow within about a
                # second (an EndpointSlice event wakes us). Report the new state once,
                # with them, rather than now and again then.
                self._polls.pop(request, None)
                self._moved[request] = self.clock()
                return reconcile_.Result(requeue_after=ENDPOINTS_GRACE)
        moved = self._moved.get(request)
        if moved is not None:
            waited = (self.clock() - moved).total_seconds()
            if endpoints == 0 and waited < ENDPOINTS_GRACE and failure is None:
                # Woken by our own Service writes, before the EndpointSlice: not yet.
                return reconcile_.Result(requeue_after=ENDPOINTS_GRACE - waited)
            del self._moved[request]

        def report(cluster: Obj | None) -> status_.ClusterReport | None:
            if cluster is None:
                return None
            return status_.ClusterReport(
                name=cluster["metadata"]["name"],
                cluster_status=cluster.get("status"),
                applications=apps if cluster is target else None,
            )

        written = await self._write(obj, status_.Observed(
            active=report(active),
            pending=report(pending),
            num_serve_endpoints=endpoints,
            rolling_back=rolling_back,
            serve_error=serve_error,
        ))  # fmt: skip
        if failure is not None:
            raise failure
        if polled:
            poll = self._next_poll(request, written, steady=ready and pending is None)
            wake.append(max(poll, spent * self.options.slow_dashboard_factor))
        deadline = self._initializing_deadline({**obj, "status": written})
        if deadline is not None:
            wake.append(deadline)
        positive = [w for w in wake if w > 0]
        return reconcile_.Result(requeue_after=min(positive)) if positive else reconcile_.Result()

    # -- lifecycle --------------------------------------------------------------------------

    async def _add_finalizer(self, obj: Obj) -> Obj:
        desired = copy.deepcopy(obj)
        objects.add_finalizer(desired, FINALIZER)
        updated: Obj = await self.client.update(desired)  # conditional on resourceVersion
        return updated

    async def _finalize(self, obj: Obj) -> reconcile_.Result:
        if not objects.has_finalizer(obj, FINALIZER):
            return reconcile_.Result()
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        owned = [c for c in await self.cache.list(
            v1.RAYCLUSTERS, namespace, label_selector=clusters.owned_selector(name)
        ) if clusters.is_owned(c, obj)]  # fmt: skip
        if owned:
            live = [c for c in owned if not c["metadata"].get("deletionTimestamp")]
            await self._delete_clusters(obj, live, "the RayService is being deleted")
            return reconcile_.Result()  # their deletion events bring us back
        desired = copy.deepcopy(obj)
        objects.remove_finalizer(desired, FINALIZER)
        with contextlib.suppress(errors.NotFound):
            await self.client.update(desired)
        return reconcile_.Result()

    async def _delete_clusters(self, obj: Obj, victims: list[Obj], why: str) -> None:
        for cluster in victims:
            meta = cluster["metadata"]
            try:
                await self.client.delete(
                    v1.RAYCLUSTERS, meta["namespace"], meta["name"], uid=meta.get("uid"),
                    propagation_policy="Background",
                )  # fmt: skip
            except (errors.NotFound, errors.Conflict):
                continue
            self.recorder.event(obj, "Normal", "DeletedRayCluster",
                                f"Deleted RayCluster {meta['name']}: {why}")  # fmt: skip

    def _warn_once(self, obj: Obj, condition_reason: str, event_reason: str, message: str) -> None:
        """A Warning Event, unless the status already reports exactly this (each repeat
        would be a write: the recorder's count PATCH)."""
        ready = status_.condition(obj.get("status"), status_.READY)
        generation = int(obj["metadata"].get("generation") or 0)
        if (
            ready is not None
            and ready.get("reason") == condition_reason
            and ready.get("message") == message
            and int(ready.get("observedGeneration") or 0) == generation
        ):
            return
        self.recorder.event(obj, "Warning", event_reason, message)

    def _timed_out(self, obj: Obj, endpoints: int) -> str | None:
        """``None``: not timed out. ``""``: timed out in an earlier pass (same generation).
        Otherwise the message of a timeout that passed now."""
        ready = status_.condition(obj.get("status"), status_.READY)
        generation = int(obj["metadata"].get("generation") or 0)
        if (
            ready is not None
            and ready.get("reason") == "InitializingTimeout"
            and int(ready.get("observedGeneration") or 0) == generation
        ):
            return ""
        if endpoints > 0:
            return None
        timeout = validation.initializing_timeout(obj)
        since = _time(status_.initializing_since(obj))
        if timeout is None or since is None:
            return None
        spent = (self.clock() - since).total_seconds()
        if spent < timeout:
            return None
        return (
            f"RayService failed to become ready within the configured timeout of {timeout:g}s. "
            f"Time spent initializing: {spent:.0f}s"
        )

    def _initializing_deadline(self, obj: Mapping[str, Any]) -> float | None:
        timeout = validation.initializing_timeout(dict(obj))
        since = _time(status_.initializing_since(obj))
        if timeout is None or since is None:
            return None
        return max(0.05, timeout - (self.clock() - since).total_seconds())

    # -- clusters ---------------------------------------------------------------------------

    async def _pending(
        self, obj: Obj, active: Obj | None, live: list[Obj], config: Mapping[str, Any]
    ) -> Obj | None:
        candidates = sorted(
            (c for c in live if c is not active), key=lambda c: c["metadata"]["name"]
        )
        for cluster in candidates:
            if clusters.match(cluster, config) is clusters.Match.EXACT:
                return await self._keep(cluster)
        for cluster in candidates:
            if clusters.match(cluster, config) is clusters.Match.APPENDED:
                return await self._update_in_place(obj, cluster)
        namespace = obj["metadata"]["namespace"]
        # A cluster this RayService does not own holds its name whatever its annotations
        # say (a copied hash must not make us wait for it forever): "" is no hash.
        existing = {
            c["metadata"]["name"]: (
                (c["metadata"].get("annotations") or {}).get(clusters.HASH_ANNOTATION)
                if clusters.is_owned(c, obj)
                else ""
            )
            for c in await self.cache.list(v1.RAYCLUSTERS, namespace)
        }
        goal = clusters.spec_hash(config)
        name = clusters.cluster_name(obj["metadata"]["name"], goal, existing)
        if name in existing:
            return None  # ours, same hash, being deleted: wait until it is gone
        first = clusters.cluster_name(obj["metadata"]["name"], goal, {})
        if first != name and existing.get(first) == "":
            self.recorder.event(
                obj, "Warning", "RayClusterNameTaken",
                f"RayCluster {first} exists and is not owned by this RayService; "
                f"using the name {name} instead",
            )  # fmt: skip
        desired = clusters.desired_cluster(obj, name)
        try:
            created: Obj = await self.client.create(desired, namespace=namespace)
        except errors.AlreadyExists:
            return None  # the cache had not seen it yet; the watch will bring it
        self.recorder.event(obj, "Normal", "CreatedRayCluster", f"Created RayCluster {name}")
        return created

    async def _keep(self, cluster: Obj) -> Obj:
        """A cluster taken back into a role loses its ``delete-after`` (a rollback to a
        cluster that was on its way out)."""
        if clusters.DELETE_AFTER_ANNOTATION not in (cluster["metadata"].get("annotations") or {}):
            return cluster
        return await self._annotate(cluster, {clusters.DELETE_AFTER_ANNOTATION: None})

    async def _update_in_place(self, obj: Obj, cluster: Obj) -> Obj:
        desired = clusters.updated_in_place(cluster, obj)
        updated: Obj = await self.client.update(desired)
        message = f"Updated RayCluster {cluster['metadata']['name']} in place"
        self.recorder.event(obj, "Normal", "UpdatedRayCluster", message)
        return updated

    async def _annotate(self, cluster: Obj, annotations: Mapping[str, str | None]) -> Obj:
        meta = cluster["metadata"]
        patched: Obj = await self.client.patch(
            v1.RAYCLUSTERS, meta["namespace"], meta["name"],
            {"metadata": {"annotations": dict(annotations)}},
        )  # fmt: skip
        return patched

    async def _clean_up(self, obj: Obj, dangling: list[Obj]) -> list[float]:
        """Delete what is due; the seconds until the next one is."""
        now = self.clock()
        due: list[Obj] = []
        wake: list[float] = []
        for cluster in dangling:
            if cluster["metadata"].get("deletionTimestamp"):
                continue
            annotations = cluster["metadata"].get("annotations") or {}
            after = _time(annotations.get(clusters.DELETE_AFTER_ANNOTATION))
            if clusters.DELETE_AFTER_ANNOTATION in annotations and after is None:
                after = now  # garbled: treat as due
            if after is None or after <= now:
                due.append(cluster)
            else:
                wake.append((after - now).total_seconds())
        await self._delete_clusters(obj, due, "no longer serving or being prepared")
        return wake

    # -- Serve ------------------------------------------------------------------------------

    async def _head_pod(self, cluster: Obj) -> Obj | None:
        namespace, name = cluster["metadata"]["namespace"], cluster["metadata"]["name"]
        found = await self.cache.list(PODS, namespace, label_selector=pods_.selector(name))
        heads = [
            p
            for p in found
            if pods_.is_head(p)
            and not p["metadata"].get("deletionTimestamp")
            and objects.is_controlled_by(p, cluster)  # a look-alike pod is not the head
        ]
        return heads[0] if len(heads) == 1 else None

    async def _dashboard_service(self, cluster: Obj) -> str:
        """The head Service the dashboard is reached by in the ``service`` and
        ``kubernetes-proxy`` modes, once it is shown to lead to this cluster's head and
        nowhere else: controlled by the RayCluster, not an ``ExternalName`` alias, and
        selecting the cluster's head pod. :class:`_ServeFailed` otherwise (nothing is
        sent: the Serve config would go wherever the name leads)."""
        namespace, name = cluster["metadata"]["namespace"], cluster["metadata"]["name"]
        head = (cluster.get("status") or {}).get("head") or {}
        service_name = str(head.get("serviceName") or raycluster_names.head_service_name(name))
        why = _not_the_head_service(await self._service(namespace, service_name), cluster)
        if why is not None:
            raise _ServeFailed(
                f"the head Service {service_name} of RayCluster {name} {why}: its dashboard "
                "is not contacted through it"
            )
        return service_name

    async def _serve(self, obj: Obj, cluster: Obj) -> tuple[dict[str, Any] | None, bool, bool]:
        """Serve on ``cluster``: its applications, whether all are RUNNING, and whether
        the dashboard was polled. Without a ``serveConfigV2`` there is nothing to
        deploy or watch (KubeRay would PUT an empty config Serve refuses)."""
        config = validation.serve_config(obj)
        head = await self._head_pod(cluster)
        if not config or head is None or not raycluster_status.is_running_and_ready(head):
            return None, False, False
        namespace, cluster_name = cluster["metadata"]["namespace"], cluster["metadata"]["name"]
        head_service = (
            await self._dashboard_service(cluster)
            if self.options.address_mode != "pod-ip"
            else None
        )
        try:
            address = dashboard.address(
                self.options.address_mode,
                cluster=cluster_name,
                namespace=namespace,
                head_service=head_service,
                head_pod_ip=(head.get("status") or {}).get("podIP"),
                cluster_domain=self.options.cluster_domain,
            )
        except ValueError:
            return None, False, False  # no IP yet (pod-ip mode)
        client = self.dashboards.client_for(address)
        try:
            details = await client.get_serve_applications()
        except dashboard.DashboardError as exc:
            raise _ServeFailed(f"cannot read Serve applications of {cluster_name}: {exc}") from exc

        want = clusters.serve_config_hash(config)
        have = (cluster["metadata"].get("annotations") or {}).get(clusters.SERVE_CONFIG_ANNOTATION)
        submitted = False
        if have != want or not details.applications:
            if not _runs(details, config):
                try:
                    await client.put_serve_applications(config)
                except dashboard.DashboardError as exc:
                    # Serve's refusal may echo values of the config (env_vars...): they
                    # reach neither the status, nor Events, nor logs.
                    said = serveconfig.redact(str(exc), config)
                    # A PUT that timed out may still deploy (Ray starts Serve on the first
                    # one, which takes longer than the timeout): the next pass sees it in
                    # deployed_app_config. Anything else is worth an Event.
                    if not isinstance(exc, dashboard.DashboardTimeout):
                        self.recorder.event(obj, "Warning", "FailedToUpdateServeApplications",
                                            f"RayCluster {cluster_name}: {said}")  # fmt: skip
                    refusal = (
                        f"Serve refused the config: {said}"
                        if isinstance(exc, dashboard.DashboardHTTPError)
                        else None
                    )
                    raise _ServeFailed(
                        f"cannot submit the Serve config to {cluster_name}: {said}",
                        refusal=refusal,
                    ) from None
                submitted = True
            if have != want:
                await self._annotate(cluster, {clusters.SERVE_CONFIG_ANNOTATION: want})
        await self._serve_label(obj, client, head, details)
        apps = status_.applications(details)
        if submitted:
            return apps, False, True  # what was read predates the new config
        ready = bool(apps) and all(
            a.get("status") == dashboard.ApplicationStatus.RUNNING for a in apps.values()
        )
        return apps, ready, True

    async def _serve_label(
        self, obj: Obj, client: dashboard.DashboardClient, head: Obj, details: Any
    ) -> None:
        labels = head["metadata"].get("labels") or {}
        current = labels.get(SERVE_LABEL)
        if (obj.get("spec") or {}).get("excludeHeadPodFromServeSvc"):
            want = "false"
        else:
            reported = _proxy_status(details, (head.get("status") or {}).get("podIP"))
            if reported == "HEALTHY" and current == "true":
                return  # steady: no extra request
            healthy = await client.serve_proxy_healthy(head)
            want = "true" if healthy else "false"
        if current == want:
            return
        meta = head["metadata"]
        with contextlib.suppress(errors.NotFound):  # gone since the cache looked
            await self.client.patch(
                PODS, meta["namespace"], meta["name"], {"metadata": {"labels": {SERVE_LABEL: want}}}
            )

    # -- traffic ----------------------------------------------------------------------------

    async def _route(
        self,
        obj: Obj,
        target: Obj,
        active: Obj | None,
        head_svc: Obj | None,
        serve_svc: Obj | None,
    ) -> tuple[Obj | None, Obj | None]:
        """Point both services at ``target``; returns them, the same objects when
        nothing was written."""
        switching = active is not None and active is not target
        if switching and active is not None:
            given = (obj.get("spec") or {}).get("rayClusterDeletionDelaySeconds")
            delay = 60 if given is None else int(given)
            after = _rfc3339(self.clock() + datetime.timedelta(seconds=delay))
            annotations = active["metadata"].get("annotations") or {}
            stamped = _time(annotations.get(clusters.DELETE_AFTER_ANNOTATION))
            if stamped is None or stamped <= self.clock():
                # Absent, or left in the past by an abandoned switch: a fresh delay. One
                # still ahead was written by this switch before a crash: kept.
                await self._annotate(active, {clusters.DELETE_AFTER_ANNOTATION: after})
        head_svc = await self._point(obj, head_svc, services.head_service(obj, target))
        serve_svc = await self._point(obj, serve_svc, services.serve_service(obj, target))
        if switching and active is not None:
            self.recorder.event(
                obj, "Normal", "SwitchedTraffic",
                f"Traffic moved from RayCluster {active['metadata']['name']} "
                f"to {target['metadata']['name']}",
            )  # fmt: skip
        return head_svc, serve_svc

    async def _point(self, obj: Obj, current: Obj | None, desired: Obj) -> Obj:
        if current is None:
            try:
                created: Obj = await self.client.create(desired)
            except errors.AlreadyExists:
                return desired
            return created
        changed = services.retargeted(current, desired)
        if changed is None:
            return current
        updated: Obj = await self.client.update(changed)
        return updated

    async def _service(self, namespace: str, name: str) -> Obj | None:
        try:
            found: Obj = await self.cache.get(SERVICES, namespace, name)
        except errors.NotFound:
            return None
        return found

    async def _serve_endpoints(self, obj: Obj) -> int:
        namespace = obj["metadata"]["namespace"]
        name = services.serve_service_name(obj)
        slices = await self.cache.list(
            ENDPOINT_SLICES, namespace, label_selector=f"{_SERVICE_NAME_LABEL}={name}"
        )
        count = 0
        for piece in slices:
            for endpoint in piece.get("endpoints") or ():
                if (endpoint.get("conditions") or {}).get("ready") is not False:
                    count += 1
        return count

    # -- status and polling -----------------------------------------------------------------

    async def _write(self, obj: Obj, observed: status_.Observed) -> Mapping[str, Any]:
        new = status_.compute(obj, observed, now=self._now_text())
        result = await self.writer.update(obj, new)
        if result.outcome is runtime_status.Outcome.STALE:
            raise RuntimeError("the RayService changed while its status was computed; again")
        return new

    def _next_poll(
        self, request: reconcile_.Request, written: Mapping[str, Any], *, steady: bool
    ) -> float:
        base, ceiling = self.options.serve_poll_interval, self.options.serve_poll_max
        fingerprint = runtime_status.normalize(dict(written), status_.VOLATILE)
        previous = self._polls.get(request)
        if steady and previous is not None and previous.fingerprint == fingerprint:
            interval = min(previous.interval * 2, ceiling)
        else:
            interval = base
        self._polls[request] = _Poll(fingerprint, interval)
        return interval


def _not_the_head_service(found: Obj | None, cluster: Obj) -> str | None:
    """Why ``found`` cannot be trusted to lead to ``cluster``'s head; None when it can."""
    if found is None:
        return "does not exist"
    if not objects.is_controlled_by(found, cluster):
        return "is not controlled by the RayCluster"
    spec = found.get("spec") or {}
    if spec.get("type") == "ExternalName" or spec.get("externalName"):
        return "is an ExternalName alias"
    selector = spec.get("selector") or {}
    if (
        selector.get(raycluster_names.CLUSTER_LABEL) != cluster["metadata"]["name"]
        or selector.get(raycluster_names.NODE_TYPE_LABEL) != "head"
    ):
        return "does not select the cluster's head pod"
    return None


def _upgrade_type(spec: Mapping[str, Any]) -> str:
    return str((spec.get("upgradeStrategy") or {}).get("type") or "NewCluster")


def _runs(details: Any, config: Mapping[str, Any]) -> bool:
    """Whether Serve already runs exactly ``config``'s applications (a PUT made before a
    crash, whose annotation was never written): the same application names, and every
    field the config sets equal in what Serve reports as deployed (Serve may add its
    defaults, such as ``route_prefix: /``)."""
    wanted = {str(a.get("name") or "default"): a for a in config.get("applications") or ()}
    deployed: dict[str, Mapping[str, Any]] = {}
    for name, app in details.applications.items():
        reported = (app.model_extra or {}).get("deployed_app_config")
        deployed[name] = reported if isinstance(reported, Mapping) else {}
    if not wanted or set(wanted) != set(deployed):
        return False
    return all(
        all(deployed[name].get(key) == value for key, value in app.items())
        for name, app in wanted.items()
    )


def _proxy_status(details: Any, ip: str | None) -> str | None:
    proxies = (details.model_extra or {}).get("proxies") or {}
    for proxy in proxies.values():
        if isinstance(proxy, Mapping) and ip and proxy.get("node_ip") == ip:
            value = proxy.get("status")
            return str(value) if value is not None else None
    return None
