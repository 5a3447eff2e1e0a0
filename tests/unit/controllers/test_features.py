"""controllers.features: KubeRay v1.7.0's --feature-gates, parsed as component-base does."""

from __future__ import annotations

import pytest

from controllers import features


def test_the_empty_flag_keeps_kuberays_v1_7_defaults() -> None:
    gates = features.parse("")
    assert gates.values == {n: g.default for n, g in features.DEFAULTS.items()}
    assert gates.enabled("RayServiceIncrementalUpgrade") is True
    assert gates.enabled("RayCronJob") is False


def test_go_booleans_spaces_and_empty_entries() -> None:
    gates = features.parse(" RayCronJob=T , ,RayMultiHostIndexing=0,KubernetesWAS=TRUE,")
    assert gates.enabled("RayCronJob")
    assert gates.enabled("KubernetesWAS")
    assert not gates.enabled("RayMultiHostIndexing")


def test_all_alpha_and_all_beta_and_explicit_gates_win_in_any_order() -> None:
    security = ",RayClusterMTLS=false,RayClusterNetworkPolicy=false"  # refused on
    gates = features.parse("RayCronJob=false,AllAlpha=true,AllBeta=false" + security)
    alpha = {n for n, g in features.DEFAULTS.items() if g.stage == "Alpha"}
    assert {n for n in alpha if gates.enabled(n)} == alpha - {"RayCronJob", *features.FAIL_CLOSED}
    assert not any(gates.enabled(n) for n, g in features.DEFAULTS.items() if g.stage == "Beta")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("RayServiceIncrementalUpgrades=true",
         "unrecognized feature gate: RayServiceIncrementalUpgrades"),
        ("AsyncJobInfoQuery=true", "unrecognized feature gate: AsyncJobInfoQuery"),  # v1.6 only
        ("RayCronJob=on", "invalid value of RayCronJob=on"),
        ("RayCronJob", "missing bool value for RayCronJob"),
    ],
)  # fmt: skip
def test_what_kuberay_refuses_is_an_error(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        features.parse(spec)


def test_a_gate_kuberay_lacks_is_a_key_error_not_false() -> None:
    with pytest.raises(KeyError):
        features.parse("").enabled("RayServiceIncrementalUpgrades")


def test_gates_not_followed_are_those_differing_from_what_the_operator_does() -> None:
    assert features.parse("").without_effect() == []
    # the RayJob gates are followed, either way
    followed = ("RayJobDeletionPolicy", "SidecarSubmitterRestart", "RayCronJob",
                "RayServiceIncrementalUpgrade")  # fmt: skip
    for gate in followed:
        for value in ("true", "false"):
            assert features.parse(f"{gate}={value}").without_effect() == []
    # replica labels are always written, as with KubeRay v1.7.0's default
    assert features.parse("RayMultiHostIndexing=false").without_effect() == [
        "RayMultiHostIndexing=false"
    ]
    assert features.parse("GCSFaultToleranceEmbeddedStorage=true").without_effect() == [
        "GCSFaultToleranceEmbeddedStorage=true"
    ]


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("RayClusterMTLS=true", "RayClusterMTLS=true"),
        ("RayClusterNetworkPolicy=1", "RayClusterNetworkPolicy=true"),
        ("AllAlpha=true,RayClusterMTLS=false",
         "RayClusterNetworkPolicy=true (set by AllAlpha=true)"),
    ],
)  # fmt: skip
def test_a_security_gate_this_operator_lacks_is_refused_not_ignored(spec: str, named: str) -> None:
    """Turned on, these gates ask for a protection (mTLS between Ray nodes, NetworkPolicies
    around the clusters); running the clusters without it would fail open."""
    with pytest.raises(ValueError, match="is not implemented by this operator") as raised:
        features.parse(spec)
    assert str(raised.value).startswith(f"feature gate {named}:")


def test_security_gates_turned_off_are_accepted() -> None:
    gates = features.parse("RayClusterMTLS=false,RayClusterNetworkPolicy=false")
    assert not gates.enabled("RayClusterMTLS")
    assert set(features.FAIL_CLOSED) == {"RayClusterMTLS", "RayClusterNetworkPolicy"}
