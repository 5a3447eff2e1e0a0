"""Leader election on a ``coordination.k8s.io/v1`` Lease: one active replica at a time.

The algorithm is client-go's, written on our own client (kubernetes-asyncio's
leaderelection package has its own client and no timeouts, so it is not used):

- **Acquire**: every ``retry_period`` (jittered up to x1.2) read the Lease. If it
  does not exist, create it naming us. If another identity holds it and the
  record has changed within the last ``lease_duration`` **as observed by our
  own clock** (never by comparing the holder's timestamps with ours, so clock
  skew cannot split the brain), wait. Otherwise take it over with an update
  carrying the Lease's resourceVersion - of several candidates exactly one wins.
- **Renew**: while leading, renew every ``retry_period``; if no renewal succeeds
  for ``renew_deadline``, leadership is **lost**: :meth:`LeaderElector.run`
  returns with :attr:`LeaderElector.lost` set, and the manager cancels its
  leader runnables at once and exits with an error (the pod restarts and
  competes again). Nothing is done as leader after the deadline passed.
- **Failed attempts**: *any* exception from a Lease call (an API error such as
  403 Forbidden, a dropped connection, a timeout, or anything else) makes that
  attempt fail; the elector logs it at ``error`` level with the server's
  ``reason`` (or the exception type), counts it, and tries again after
  ``retry_period``. Only a lost race (409 ``Conflict`` / ``AlreadyExists``: another
  candidate wrote first) is ordinary and logged at ``info`` without counting.
  An elector never dies of a Lease call; should it die anyway (a bug), it does
  **not** release the Lease - the manager's controllers may still be running.
- **Release** only on a clean stop (``stop`` set, ``release_on_cancel``): the
  holder is cleared and ``leaseDurationSeconds`` set to 1, so a successor takes
  over at once instead of waiting out the lease. The release call is bounded by
  ``renew_deadline``. Cancelling :meth:`LeaderElector.run` never releases.

The Lease's namespace defaults to the pod's own (:func:`default_namespace`:
``$POD_NAMESPACE``, else the service account's namespace file, else
``"default"`` out of a cluster), where the operator's RBAC grants leases.

Defaults (controller-runtime's): lease 15 s, renew deadline 10 s, retry 2 s;
they must satisfy ``lease_duration > renew_deadline > 1.2 * retry_period``, and
``lease_duration`` must be a whole number of seconds (the API's
``leaseDurationSeconds`` is an integer; other values are rejected, not rounded).

Metrics:

- ``leader_election_master_status{name}``: 1 while leading, else 0 (exported as
  soon as an elector exists, so a standby reports 0);
- ``leader_election_errors_total{name,operation,reason}``: failed Lease calls;
  ``operation`` is ``get``, ``create``, ``update``, ``renew`` (a renewal that ran into
  the renew deadline) or ``release``, ``reason`` the API
  server's reason (``Forbidden``, ``ServiceUnavailable``...) or the exception's type
  (``ServerDisconnectedError``, ``TimeoutError``...).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import pathlib
import random
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import structlog

from runtime import clock, metrics
from runtime.client import errors, resources

__all__ = [
    "SERVICE_ACCOUNT_NAMESPACE_FILE",
    "LeaderElector",
    "Options",
    "default_identity",
    "default_namespace",
]

LEASES = resources.Resource("coordination.k8s.io", "v1", "Lease", "leases")

SERVICE_ACCOUNT_NAMESPACE_FILE = pathlib.Path(
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
)
"""Where a pod's service account namespace is mounted."""

_status = metrics.Family(
    "leader_election_master_status",
    "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, "
    "1 indicates master. 'name' is the string used to identify the lease.",
    "gauge",
    ("name",),
)

_errors = metrics.Family(
    "leader_election_errors_total",
    "Failed calls on the leader election Lease, by lease name, operation (get, create, "
    "update, renew, release) and reason (the API server's reason, or the exception type).",
    "counter",
    ("name", "operation", "reason"),
)

_LOST_RACE = (errors.Conflict, errors.AlreadyExists)


class LeaseClient(Protocol):
    async def get(
        self, resource: resources.Resource, namespace: str | None, name: str
    ) -> dict[str, Any]: ...

    async def create(
        self, obj: dict[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]: ...

    async def update(
        self, obj: dict[str, Any], *, subresource: str | None = None
    ) -> dict[str, Any]: ...


def default_identity() -> str:
    """``<hostname>_<uuid>``, unique per process."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def default_namespace(
    environ: Mapping[str, str] = os.environ,
    namespace_file: pathlib.Path = SERVICE_ACCOUNT_NAMESPACE_FILE,
) -> str:
    """The pod's namespace: ``$POD_NAMESPACE`` (set from the downward API), else the
    service account's ``namespace_file``, else ``"default"`` (out of a cluster)."""
    if environ.get("POD_NAMESPACE"):
        return environ["POD_NAMESPACE"]
    try:
        namespace = namespace_file.read_text().strip()
    except OSError:
        namespace = ""
    return namespace or "default"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    """Leader election settings. Every field states its default."""

    name: str
    """The Lease's name (required)."""

    namespace: str = dataclasses.field(default_factory=default_namespace)
    """The Lease's namespace. Default: the pod's (:func:`default_namespace`)."""

    identity: str = dataclasses.field(default_factory=default_identity)
    """Who we are. Default ``hostname_uuid``."""

    lease_duration: float = 15.0
    """Seconds a non-leader waits after the last observed change before taking over; a
    whole number (``leaseDurationSeconds`` is an integer). Default 15."""

    renew_deadline: float = 10.0
    """Seconds the leader keeps trying to renew before giving up. Default 10."""

    retry_period: float = 2.0
    """Seconds between attempts. Default 2."""

    release_on_cancel: bool = True
    """Clear the Lease when stopping cleanly. Default on."""

    def __post_init__(self) -> None:
        if not math.isfinite(self.lease_duration) or self.lease_duration != int(
            self.lease_duration
        ):
            raise ValueError(
                "lease_duration must be a whole number of seconds (the Lease's "
                f"leaseDurationSeconds is an integer), got {self.lease_duration}"
            )
        if not self.lease_duration > self.renew_deadline > 1.2 * self.retry_period > 0:
            raise ValueError(
                "need lease_duration > renew_deadline > 1.2 * retry_period > 0, got "
                f"{self.lease_duration}, {self.renew_deadline}, {self.retry_period}"
            )


class LeaderElector:
    """Runs the election for one Lease (see the module docstring)."""

    def __init__(
        self,
        client: LeaseClient,
        options: Options,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.options = options
        self._now = monotonic
        self.elected = asyncio.Event()
        self.lost = False
        self._observed_spec: dict[str, Any] | None = None
        self._observed_at = 0.0
        self._lease: dict[str, Any] | None = None
        self._gauge = _status.gauge(options.name)
        self.log = structlog.get_logger("runtime.leaderelection").bind(
            lease=f"{options.namespace}/{options.name}", identity=options.identity
        )

    @property
    def is_leader(self) -> bool:
        return self.elected.is_set() and not self.lost

    async def run(self, stop: asyncio.Event) -> None:
        """Acquire, then renew until ``stop`` is set (release) or renewal fails (lost).

        Returns only when ``stop`` is set or leadership is lost (:attr:`lost`).
        """
        try:
            if not await self._acquire(stop):
                return
            self.elected.set()
            self._gauge.set(1)
            self.log.info("became leader")
            await self._renew(stop)
        finally:
            self._gauge.set(0)
        # Only a clean stop gets here with the lease still ours: never on an exception or
        # a cancellation, when whoever runs us may still be acting as leader.
        if stop.is_set() and not self.lost and self.options.release_on_cancel:
            await self._release()

    async def _sleep(self, stop: asyncio.Event, seconds: float) -> bool:
        """Sleep, or return True early if ``stop`` is set."""
        try:
            await asyncio.wait_for(stop.wait(), seconds)
            return True
        except TimeoutError:
            return False

    async def _acquire(self, stop: asyncio.Event) -> bool:
        self.log.info("waiting to become leader")
        while not stop.is_set():
            if await self._try_acquire_or_renew():
                return True
            jitter = self.options.retry_period * random.uniform(1.0, 1.2)
            if await self._sleep(stop, jitter):
                break
        return False

    async def _renew(self, stop: asyncio.Event) -> None:
        opts = self.options
        last_renewed = self._now()
        while not stop.is_set():
            if await self._sleep(stop, opts.retry_period):
                return
            try:
                async with asyncio.timeout(
                    max(opts.renew_deadline - (self._now() - last_renewed), 0.01)
                ):
                    renewed = await self._try_acquire_or_renew()
            except TimeoutError as exc:
                self._failed("renew", exc)  # the calls ran into the renew deadline
                renewed = False
            if renewed:
                last_renewed = self._now()
            elif self._now() - last_renewed >= opts.renew_deadline:
                self.lost = True
                self.log.error("lost leadership: could not renew the lease in time")
                return

    async def _try_acquire_or_renew(self) -> bool:
        """One attempt; False if the lease is someone else's or a call failed."""
        opts = self.options
        now_text = clock.micro_time()
        try:
            lease = await self.client.get(LEASES, opts.namespace, opts.name)
        except errors.NotFound:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": opts.name, "namespace": opts.namespace},
                "spec": self._spec(None, now_text),
            }
            try:
                self._lease = await self.client.create(body, namespace=opts.namespace)
            except Exception as exc:
                self._failed("create", exc)
                return False
            self._observe(self._lease)
            return True
        except Exception as exc:
            self._failed("get", exc)
            return False

        spec = lease.get("spec") or {}
        if spec != self._observed_spec:
            self._observe(lease)
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or opts.lease_duration)
        if holder and holder != opts.identity and self._observed_at + duration > self._now():
            return False  # held by someone else, and not expired by our clock
        updated = dict(lease)
        updated["spec"] = self._spec(spec, now_text)
        try:
            self._lease = await self.client.update(updated)
        except Exception as exc:
            self._failed("update", exc)
            return False
        self._observe(self._lease)
        return True

    def _failed(self, operation: str, exc: Exception) -> None:
        """Log and count a failed Lease call (a lost race is only logged)."""
        if isinstance(exc, _LOST_RACE):
            self.log.info("another candidate wrote the lease first", operation=operation)
            return
        if isinstance(exc, errors.ApiError):
            reason = exc.reason or str(exc.status)
            self.log.error(
                "lease call failed",
                operation=operation,
                reason=reason,
                status=exc.status,
                error=str(exc),
            )
        else:
            reason = type(exc).__name__
            self.log.error("lease call failed", operation=operation, reason=reason, error=repr(exc))
        _errors.counter(self.options.name, operation, reason).inc()

    def _spec(self, current: dict[str, Any] | None, now_text: str) -> dict[str, Any]:
        current = current or {}
        ours = current.get("holderIdentity") == self.options.identity
        transitions = int(current.get("leaseTransitions") or 0)
        return {
            "holderIdentity": self.options.identity,
            "leaseDurationSeconds": int(self.options.lease_duration),
            "acquireTime": current.get("acquireTime") if ours else now_text,
            "renewTime": now_text,
            "leaseTransitions": transitions if ours or not current else transitions + 1,
        }

    def _observe(self, lease: dict[str, Any]) -> None:
        self._observed_spec = lease.get("spec") or {}
        self._observed_at = self._now()

    async def _release(self) -> None:
        if self._lease is None:
            return
        released = dict(self._lease)
        spec = dict(released.get("spec") or {})
        if spec.get("holderIdentity") != self.options.identity:
            return
        spec.update(holderIdentity=None, leaseDurationSeconds=1, renewTime=clock.micro_time())
        released["spec"] = spec
        try:
            async with asyncio.timeout(self.options.renew_deadline):
                await self.client.update(released)
        except Exception as exc:
            self._failed("release", exc)
        else:
            self.log.info("released the lease")
