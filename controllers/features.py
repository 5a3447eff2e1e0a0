"""KubeRay v1.7.0's feature gates, parsed as its ``--feature-gates`` flag parses them.

The flag is a comma-separated list of ``Name=true|false``; an unknown name, a
value that is not a boolean, or an entry without ``=`` is an error (KubeRay exits
on all three), and an empty string keeps every default. ``AllAlpha`` and
``AllBeta`` set every gate of that stage at once; a gate named explicitly wins
over them, whatever the order.

The gates and their defaults are v1.7.0's (``pkg/features/features.go``).
:data:`FOLLOWED` are the gates this operator acts on as KubeRay does
(``RayServiceIncrementalUpgrade``, ``RayJobDeletionPolicy``, ``SidecarSubmitterRestart``,
``RayCronJob``); :data:`BEHAVES_AS` says what it does whatever the
other gates say (their features are missing here, or always on); every such gate whose
value differs is accepted and reported by :meth:`Gates.without_effect`, so the
caller can say so in one line at start-up, except the gates of :data:`FAIL_CLOSED`: they
ask for a protection (mTLS between Ray nodes, NetworkPolicies around the clusters) that
this operator lacks, so turning one on is refused (a ``ValueError`` naming the gate, the
flag's exit 2) rather than running the clusters unprotected. ``AllAlpha=true`` turns
them on too: name them ``=false`` beside it.

>>> gates = parse("RayClusterStatusConditions=false,RayCronJob=true")
>>> gates.enabled("RayClusterStatusConditions"), gates.enabled("RayServiceIncrementalUpgrade")
(False, True)
>>> gates.without_effect()  # doctest: +NORMALIZE_WHITESPACE
['RayClusterStatusConditions=false']
>>> parse("NoSuchGate=true")
Traceback (most recent call last):
...
ValueError: unrecognized feature gate: NoSuchGate
>>> parse("RayClusterMTLS=true")
Traceback (most recent call last):
...
ValueError: feature gate RayClusterMTLS=true: mTLS between Ray nodes is not implemented ...
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Literal

__all__ = ["BEHAVES_AS", "DEFAULTS", "FAIL_CLOSED", "FOLLOWED", "Gate", "Gates", "parse"]


@dataclasses.dataclass(frozen=True)
class Gate:
    """One feature gate: its default and its stage."""

    default: bool
    stage: Literal["Alpha", "Beta", "GA"]


DEFAULTS: Mapping[str, Gate] = {
    "RayClusterStatusConditions": Gate(True, "Beta"),
    "RayJobDeletionPolicy": Gate(True, "Beta"),
    "RayMultiHostIndexing": Gate(True, "Beta"),
    "RayServiceIncrementalUpgrade": Gate(True, "Beta"),
    "RayCronJob": Gate(False, "Alpha"),
    "SidecarSubmitterRestart": Gate(False, "Alpha"),
    "RayClusterNetworkPolicy": Gate(False, "Alpha"),
    "GCSFaultToleranceEmbeddedStorage": Gate(False, "Alpha"),
    "RayClusterMTLS": Gate(False, "Alpha"),
    "RayClusterHistoryServer": Gate(False, "Alpha"),
    "KubernetesWAS": Gate(False, "Alpha"),
}
"""KubeRay v1.7.0's gates: name -> default and stage."""

FOLLOWED = frozenset(
    {
        "RayServiceIncrementalUpgrade",
        "RayJobDeletionPolicy",
        "SidecarSubmitterRestart",
        "RayCronJob",
    }
)
"""Gates whose value this operator follows: ``RayServiceIncrementalUpgrade`` (on:
``NewClusterWithIncrementalUpgrade`` upgrades through a Gateway; off: that strategy
behaves as ``None``, as in KubeRay v1.7.0), ``RayJobDeletionPolicy`` (a RayJob's
``deletionStrategy``; off: a RayJob that sets one is ``ValidationFailed``),
``SidecarSubmitterRestart`` (a ``SidecarMode`` submitter restarted on failure, up to
twice) and ``RayCronJob`` (the RayCronJob controller runs only when on)."""

BEHAVES_AS: Mapping[str, bool] = {
    **{name: False for name in DEFAULTS},
    "RayClusterStatusConditions": True,
    "RayMultiHostIndexing": True,
}
"""What this operator does, as a gate value, whatever the gate says: RayCluster status
conditions are always written and worker pods always carry the replica labels (whole
multi-host replicas are created and deleted together); network policies, mTLS, the
history server, embedded GCS storage and the Kubernetes WAS scheduler are not
implemented."""

FAIL_CLOSED: Mapping[str, str] = {
    "RayClusterMTLS": "mTLS between Ray nodes",
    "RayClusterNetworkPolicy": "a NetworkPolicy around each RayCluster",
}
"""Security gates this operator does not implement -> what they ask for: on, they are
refused (KubeRay would protect the clusters; running them without would fail open)."""

_ALL = {"AllAlpha": "Alpha", "AllBeta": "Beta"}


@dataclasses.dataclass(frozen=True)
class Gates:
    """The gates' values after ``--feature-gates``."""

    values: Mapping[str, bool] = dataclasses.field(
        default_factory=lambda: {name: gate.default for name, gate in DEFAULTS.items()}
    )

    def enabled(self, name: str) -> bool:
        """Whether gate ``name`` is on (a ``KeyError`` for a gate KubeRay lacks: a typo)."""
        if name not in DEFAULTS:
            raise KeyError(name)
        return self.values[name]

    def without_effect(self) -> list[str]:
        """The gates whose value this operator does not follow (not in :data:`FOLLOWED`,
        and unlike :data:`BEHAVES_AS`), as ``Name=value``, sorted."""
        return [
            f"{name}={str(value).lower()}"
            for name, value in sorted(self.values.items())
            if name not in FOLLOWED and value != BEHAVES_AS[name]
        ]


def parse(spec: str) -> Gates:
    """``--feature-gates``'s value as :class:`Gates` (see the module docstring);
    ``ValueError`` with KubeRay's wording for what it refuses."""
    given: dict[str, bool] = {}
    for entry in spec.split(","):
        entry = entry.strip()
        if not entry:
            continue
        name, eq, raw = entry.partition("=")
        name, raw = name.strip(), raw.strip()
        if not eq:
            raise ValueError(f"missing bool value for {name}")
        if name not in DEFAULTS and name not in _ALL:
            raise ValueError(f"unrecognized feature gate: {name}")
        value = _go_bool(raw)
        if value is None:
            raise ValueError(f"invalid value of {name}={raw}, err: not a boolean")
        given[name] = value
    values = {name: gate.default for name, gate in DEFAULTS.items()}
    for group, stage in _ALL.items():
        if group in given:
            values.update({n: given[group] for n, g in DEFAULTS.items() if g.stage == stage})
    values.update({n: v for n, v in given.items() if n in DEFAULTS})
    for name, protection in FAIL_CLOSED.items():
        if values[name] and not BEHAVES_AS[name]:
            groups = [
                group
                for group, stage in _ALL.items()
                if given.get(group) and stage == DEFAULTS[name].stage and name not in given
            ]
            by = f" (set by {groups[0]}=true)" if groups else ""
            raise ValueError(
                f"feature gate {name}=true{by}: {protection} is not implemented by this "
                f"operator, and its clusters would run without it; set {name}=false"
            )
    return Gates(values)


def _go_bool(raw: str) -> bool | None:
    """Go's ``strconv.ParseBool``: 1 t T TRUE true True / 0 f F FALSE false False."""
    if raw in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if raw in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    return None
