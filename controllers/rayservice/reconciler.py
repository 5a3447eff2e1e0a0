"""The RayService reconciler: Ray Serve applications on RayClusters, upgraded without
downtime, with nothing that matters kept in memory.

**Where the state lives.** Everything a pass decides from is read again from the
cache (never from the API server) or from the Ray dashboard:

- the **active** cluster is the one ``<svc>-head-svc`` selects (``ray.io/cluster``):
  traffic is the truth about what serves;
- the **pending** cluster is the owned cluster whose
  ``ray.io/hash-without-replicas-and-workers-to-delete`` annotation equals the hash
  of ``spec.rayClusterConfig`` (the autoscaler's and Kueue's fields, ``suspend`` and
  ``upgradeStrategy`` ignored: :func:`controllers.rayservice.clusters.spec_hash`), when that is not
  the active one. A new one is named after the hash
  (:func:`controllers.rayservice.clusters.cluster_name`), so a crash between
  creating it and writing the status finds it again instead of making a second;
- which Serve config a cluster runs is the ``ray.io/serve-config-hash`` annotation,
  written after a successful PUT; before a PUT the dashboard's own
  ``deployed_app_config`` is compared too, so a crash between the PUT and the
  annotation never submits the same config twice;
- when an old cluster goes is its ``ray.io/delete-after`` annotation, written on it
  **before** traffic leaves it; a cluster that no role claims and that has no such
  annotation gets one, ``rayClusterDeletionDelaySeconds`` away (KubeRay v1.7.0 keeps
  these deadlines in memory).

**One pass** (:meth:`Reconciler.reconcile`) is *observe -> plan -> act*: after the
lifecycle (a RayService being deleted loses its clusters, then the finalizer
``ray.io/rayservice-finalizer``; otherwise the finalizer is added, once; ``spec.managedBy``
naming another controller is skipped), :func:`controllers.rayservice.observe.observe`
reads a frozen snapshot, :func:`controllers.rayservice.plan.plan` (pure) decides every
write, the status and when to look again, and :class:`controllers.rayservice.act.Executor`
makes the writes in a fixed, crash-safe order. The decisions - validation, suspend, the
initializing timeout, foreign objects, clusters, Serve, traffic, status - are told once,
step by step, in docs/architecture.md (2.7b; 2.7c for incremental upgrades, 2.13 walks
one edit through them). ``ENABLE_ZERO_DOWNTIME=false`` is :attr:`Options.zero_downtime`.

**When it runs again.** Watches (see :func:`controllers.rayservice.setup.setup`) wake it on
spec changes, on any change to its clusters and services, and on the serve
service's EndpointSlices. The dashboard sends no events, so it is polled:
every ``serve_poll_interval`` (2 s) while converging, and once the service is
ready and nothing changed between two polls, at doubling intervals up to
``serve_poll_max`` (10 s); any change returns to 2 s. A slow dashboard is polled no
sooner than ``slow_dashboard_factor`` (4) times its pass took: fairness to the other
RayServices sharing the workers (a 1.9 s answer is asked for every 7.6 s, not 2 s).
A dashboard that cannot be reached, or refuses the config, raises: the work queue
retries with its growing backoff (never a 2 s loop). With a
:class:`controllers.rayservice.poller.Poller` (the operator's setup gives one), a
pending deploy is polled at the same cadence **off the worker**: no pass runs until
Serve's answer differs, so one RayService's readiness never waits behind the
unchanged polls of all the others.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime
from collections.abc import Callable
from typing import Any

import structlog

import api.v1 as v1
from controllers import statuswriter
from controllers.ray import dashboard, tokens
from controllers.raycluster import interface as raycluster
from controllers.rayservice import act, clusters, gateway, observe, report
from controllers.rayservice import plan as plan_
from controllers.rayservice import poller as poller_
from runtime import events, objects
from runtime import reconcile as reconcile_
from runtime.cache import cache as cache_
from runtime.client import errors

__all__ = ["FINALIZER", "Options", "Reconciler"]

FINALIZER = "ray.io/rayservice-finalizer"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    """How the reconciler reaches Ray and how often it looks. Every field states its default."""

    address_mode: dashboard.Mode = "service"
    """How dashboards are addressed (:func:`controllers.ray.dashboard.address`). Default
    ``service`` (in-cluster DNS)."""
    cluster_domain: str = dashboard.DEFAULT_CLUSTER_DOMAIN
    """DNS domain of ``service`` addresses. Default ``cluster.local`` (the operator's
    ``main`` passes ``$CLUSTER_DOMAIN``, :mod:`controllers.environment`)."""
    serve_poll_interval: float = 2.0
    """Seconds between dashboard polls while converging. Default 2 s (KubeRay's)."""
    serve_poll_max: float = 10.0
    """Longest interval between polls of a ready, unchanged service. Default 10 s."""
    slow_dashboard_factor: float = 4.0
    """A poll comes no sooner than this many times the last pass took (its dashboard
    calls, mostly), so one slow dashboard holds a worker at most 1/(1 + factor) of the
    time (20 % by default) and other RayServices' reconciles do not queue behind it.
    Default 4; a dashboard answering in milliseconds is polled as usual."""

    zero_downtime: bool = True
    """Roll a changed ``rayClusterConfig`` out on a new cluster when the RayService's
    ``upgradeStrategy.type`` is unset (a set type always decides: KubeRay v1.7.0's
    precedence, :func:`controllers.rayservice.roles.new_cluster_upgrades`); off, such a
    change is not applied, as with ``upgradeStrategy.type: None``. Default on (the
    operator's ``main`` passes ``$ENABLE_ZERO_DOWNTIME``, :mod:`controllers.environment`)."""

    incremental_upgrade: bool = True
    """The ``RayServiceIncrementalUpgrade`` feature gate (KubeRay v1.7.0's, default on):
    ``upgradeStrategy.type: NewClusterWithIncrementalUpgrade`` upgrades through a Gateway
    (:mod:`controllers.rayservice.incremental`); off, that type behaves as ``None``."""
    gateway_api: bool = False
    """The API server serves the Gateway API (``gateway.networking.k8s.io/v1`` Gateways and
    HTTPRoutes): they are then watched and cached. Default off;
    :func:`controllers.rayservice.setup.gateway_api_served` tells (the operator's ``main`` asks
    it at start-up). Off, an incremental RayService reports ``GatewayAPIUnavailable``."""
    gateway_classes: gateway.GatewayClasses = dataclasses.field(
        default_factory=gateway.GatewayClasses
    )
    """The GatewayClasses an incremental upgrade's Gateway may have (the operator's
    ``--gateway-classes``). Default none: a RayService asking for a Gateway of a class not
    listed reports ``GatewayClassNotAllowed`` and gets no Gateway."""

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
        poller: poller_.Poller | None = None,
    ) -> None:
        self.client = client
        self.poller = poller
        """Polls Serve off the worker while a deploy is pending; None: passes poll."""
        self.cache = cache
        self.recorder = recorder
        self.dashboards = dashboards
        self.options = options or Options()
        self.clock = clock
        self.writer = statuswriter.for_reconciler(
            client, cache, volatile=report.VOLATILE, clock=lambda: self.clock()
        )  # a spec update meanwhile: STALE at once, not a 409
        self.executor = act.Executor(client, recorder, self.writer)
        self.tokens = tokens.Tokens(client)
        self.log = structlog.get_logger("controllers.rayservice")
        self._memory: dict[reconcile_.Request, plan_.Memory] = {}
        """Hints per RayService (:class:`controllers.rayservice.plan.Memory`)."""

    async def reconcile(self, request: reconcile_.Request) -> reconcile_.Result:
        if self.poller is not None:
            self.poller.stop(request)  # this pass reads Serve itself and decides again
        try:
            service = await self.cache.get(v1.RAYSERVICES, request.namespace, request.name)
        except errors.NotFound:
            self._memory.pop(request, None)
            return reconcile_.Result()
        if service["metadata"].get("deletionTimestamp"):
            self._memory.pop(request, None)
            return await self._finalize(service)
        managed_by = (service.get("spec") or {}).get("managedBy")
        if managed_by not in (None, "", raycluster.MANAGED_BY):
            return reconcile_.Result()
        if not objects.has_finalizer(service, FINALIZER):
            service = await self._add_finalizer(service)

        now = self.clock()
        seen = await observe.observe(
            service,
            cache=self.cache,
            dashboards=self.dashboards,
            tokens=self.tokens,
            address_mode=self.options.address_mode,
            cluster_domain=self.options.cluster_domain,
            now=now,
            zero_downtime=self.options.zero_downtime,
            incremental_gate=self.options.incremental_upgrade,
            gateway_api=self.options.gateway_api,
        )
        decided = plan_.plan(
            seen.snapshot,
            now=now,
            memory=self._memory.get(request, plan_.Memory()),
            settings=plan_.Settings(
                serve_poll_interval=self.options.serve_poll_interval,
                serve_poll_max=self.options.serve_poll_max,
                slow_dashboard_factor=self.options.slow_dashboard_factor,
                zero_downtime=self.options.zero_downtime,
                incremental=self.options.incremental_upgrade,
                gateway_classes=self.options.gateway_classes,
            ),
        )
        if decided.memory == plan_.Memory():
            self._memory.pop(request, None)
        else:
            self._memory[request] = decided.memory
        view = seen.snapshot.serve
        spent = view.spent if view is not None else 0.0
        poller, watch = self.poller, None
        if poller is not None and decided.deploying and view is not None:
            client = seen.dashboards.get(view.cluster)
            interval = decided.poll_after(spent)
            if client is not None and view.details is not None and interval is not None:
                watch = (client, poller_.fingerprint(view.details), interval)
                decided = dataclasses.replace(decided, poll=None)  # the poller's, not a pass's
        after = await self.executor.act(service, decided, spent=spent, dashboards=seen.dashboards)
        if poller is not None and watch is not None:
            poller.watch(request, watch[0], watch[1], interval=watch[2])
        return reconcile_.Result(requeue_after=after) if after is not None else reconcile_.Result()

    # -- lifecycle --------------------------------------------------------------------------

    async def _add_finalizer(self, service: Any) -> Any:
        desired = copy.deepcopy(service)
        objects.add_finalizer(desired, FINALIZER)
        return await self.client.update(desired)  # conditional on resourceVersion

    async def _finalize(self, service: Any) -> reconcile_.Result:
        """A RayService being deleted: its clusters go first, then the finalizer."""
        if not objects.has_finalizer(service, FINALIZER):
            return reconcile_.Result()
        namespace, name = service["metadata"]["namespace"], service["metadata"]["name"]
        owned = [
            c
            for c in await self.cache.list(
                v1.RAYCLUSTERS, namespace, label_selector=clusters.owned_selector(name)
            )
            if objects.is_controlled_by(c, service)
        ]
        if owned:
            for cluster in owned:
                if not cluster["metadata"].get("deletionTimestamp"):
                    await self.executor.delete(service, cluster, "the RayService is being deleted")
            return reconcile_.Result()  # their deletion events bring us back
        desired = copy.deepcopy(service)
        objects.remove_finalizer(desired, FINALIZER)
        with contextlib.suppress(errors.NotFound):
            await self.client.update(desired)
        return reconcile_.Result()
