"""The incremental upgrade's state machine (``NewClusterWithIncrementalUpgrade``), pure:
from the two clusters' Serve ``target_capacity`` and their shares of the HTTPRoute's
traffic to the one step to take next.

An upgrade moves capacity and traffic *to* one cluster *from* another: forward, to the
pending cluster from the active one; in a rollback (the spec went back, or on to a third
spec, mid-way) to the active cluster from the one being drained. Each pass takes at most
one step (KubeRay v1.7.0's rules, ``reconcileServeTargetCapacity`` and
``calculateTrafficRoutedPercent``, made symmetric and safe):

1. **done** when the *to* cluster has all the traffic and the *from* cluster no capacity
   (or cannot be asked while the *to* cluster has all of it: a dead cluster is not
   waited for);
2. nothing moves while the Gateway or the HTTPRoute is not ``Accepted``/``Programmed``
   (``ResolvedRefs`` for the route): traffic would go nowhere;
3. **capacity** once traffic caught up with the *to* cluster's capacity: while both
   capacities add up to more than 100, the *from* cluster's shrinks by ``maxSurgePercent``
   but never below its share of the traffic (KubeRay's floor is 0, which in a rollback
   with ``maxSurgePercent: 100`` takes every replica from a cluster that still has
   traffic); otherwise the *to* cluster's grows by ``maxSurgePercent`` (at most 100).
   The total never exceeds ``100 + maxSurgePercent``. The *from* cluster shrinks only once
   the weights have stood for ``intervalSeconds``: a gateway applies a route's change a
   moment after it is written (Traefik reports the new generation Accepted before it
   routes by it), and until then the *from* cluster still gets its former share;
4. **traffic** otherwise: ``stepSizePercent`` more to the *to* cluster, at most its
   capacity, once ``intervalSeconds`` have passed since the weights last changed, and
   only while the *to* cluster's applications are all ``RUNNING``.

>>> opts = Options(max_surge=50, step=25, interval=30)
>>> to, frm = Side("new", capacity=0, traffic=0, ready=True), Side("old", 100, 100, True)
>>> next_step(to, frm, opts, since=None, routable=True)
SetCapacity(cluster='new', value=50)
>>> next_step(Side("new", 50, 0, True), frm, opts, since=None, routable=True)
MoveTraffic(to=25)
>>> next_step(Side("new", 50, 25, True), Side("old", 100, 75, True), opts, since=10.0,
...           routable=True)
Wait(reason='the next traffic step is due in 20 s', after=20.0)
>>> next_step(Side("new", 100, 100, True), Side("old", 0, 0, True), opts, since=None,
...           routable=True)
Done()
"""

from __future__ import annotations

import dataclasses

__all__ = ["Done", "MoveTraffic", "Options", "SetCapacity", "Side", "Step", "Wait", "next_step"]


@dataclasses.dataclass(frozen=True)
class Side:
    """One cluster of an upgrade as the pass saw it."""

    cluster: str
    capacity: int | None
    """Serve's ``target_capacity`` (percent); None when its dashboard was not read."""
    traffic: int
    """Its weight in the HTTPRoute (percent)."""
    ready: bool
    """Its Serve applications are all ``RUNNING``."""


@dataclasses.dataclass(frozen=True)
class Options:
    """``clusterUpgradeOptions``."""

    max_surge: int
    step: int
    interval: float


@dataclasses.dataclass(frozen=True)
class SetCapacity:
    """PUT Serve's ``target_capacity`` ``value`` to ``cluster``."""

    cluster: str
    value: int


@dataclasses.dataclass(frozen=True)
class MoveTraffic:
    """Give the *to* cluster ``to`` percent of the traffic (the *from* cluster the rest)."""

    to: int


@dataclasses.dataclass(frozen=True)
class Done:
    """The *to* cluster has everything: promote it (forward) or drop the other (rollback)."""


@dataclasses.dataclass(frozen=True)
class Wait:
    """Nothing to do now: ``reason``; look again in ``after`` seconds (None: an event or
    the next dashboard poll will come)."""

    reason: str
    after: float | None = None


Step = SetCapacity | MoveTraffic | Done | Wait


def next_step(
    to: Side, frm: Side, options: Options, *, since: float | None, routable: bool
) -> Step:
    """The next step of an upgrade moving everything to ``to`` from ``frm`` (see the module
    docstring). ``since``: seconds since the weights last changed (None: never, or
    unknown); ``routable``: the Gateway and the HTTPRoute are ready."""
    if to.traffic >= 100 and (frm.capacity == 0 or (frm.capacity is None and to.capacity == 100)):
        return Done()
    if not routable:
        return Wait("the Gateway or the HTTPRoute is not Accepted and Programmed yet")
    if to.capacity is None or frm.capacity is None:
        unread = to.cluster if to.capacity is None else frm.cluster
        return Wait(f"Serve's target_capacity of RayCluster {unread} is not known yet")
    if to.traffic >= to.capacity:
        if to.capacity + frm.capacity > 100:
            if since is not None and since < options.interval:
                left = options.interval - since
                return Wait(
                    f"RayCluster {frm.cluster}'s capacity shrinks in {left:g} s, once the "
                    "gateway routes by the last weights",
                    after=left,
                )
            floor = 100 - to.traffic  # the from cluster's share of the traffic
            return SetCapacity(frm.cluster, max(floor, frm.capacity - options.max_surge, 0))
        return SetCapacity(to.cluster, min(100, to.capacity + options.max_surge))
    if not to.ready:
        return Wait(f"RayCluster {to.cluster}'s Serve applications are not all RUNNING")
    if since is not None and since < options.interval:
        left = options.interval - since
        return Wait(f"the next traffic step is due in {left:g} s", after=left)
    return MoveTraffic(min(100, to.traffic + options.step, to.capacity))
