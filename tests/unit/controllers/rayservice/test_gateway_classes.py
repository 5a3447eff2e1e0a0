"""controllers.rayservice.gateway.GatewayClasses: the operator's allow-list of the
GatewayClasses it creates a RayService's Gateway of (``--gateway-classes``), parsed from
the flag's values, and the refusal that tells the platform admin what to set."""

from __future__ import annotations

import re

import pytest

from controllers.rayservice import gateway


def test_nothing_given_allows_no_class() -> None:
    for values in ([], [""], [" , "]):
        classes = gateway.GatewayClasses.parse(values)
        assert classes == gateway.GatewayClasses()
        assert not classes.allows("traefik")
        assert str(classes) == "none"


def test_names_comma_separated_or_repeated() -> None:
    classes = gateway.GatewayClasses.parse(["traefik, istio", "envoy.example.com", "istio"])
    assert classes.names == ("envoy.example.com", "istio", "traefik")
    assert classes.allows("istio")
    assert classes.allows("envoy.example.com")
    assert not classes.allows("public-lb")
    assert not classes.allows("")
    assert str(classes) == "'envoy.example.com', 'istio', 'traefik'"
    assert classes.flag_value() == "envoy.example.com,istio,traefik"


def test_a_star_allows_every_class_as_kuberay_does() -> None:
    classes = gateway.GatewayClasses.parse(["*"])
    assert classes.every
    assert classes.allows("public-lb")
    assert classes.refusal("anything") is None
    assert str(classes) == "any"


@pytest.mark.parametrize(
    ("values", "says"),
    [
        (["Traefik"], "'Traefik' is not a GatewayClass name"),
        (["a_b"], "'a_b' is not a GatewayClass name"),
        (["-lb"], "'-lb' is not a GatewayClass name"),
        (["x" * 254], "is not a GatewayClass name"),
        (["*,traefik"], "'*' allows every GatewayClass: give it alone"),
        (["traefik", "*"], "'*' allows every GatewayClass: give it alone"),
    ],
)
def test_bad_values_are_refused_naming_them(values: list[str], says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        gateway.GatewayClasses.parse(values)


def test_the_refusal_names_the_field_the_class_and_what_the_admin_sets() -> None:
    none = gateway.GatewayClasses()
    message = none.refusal("public-lb")
    assert message is not None
    assert message.startswith(
        "spec.upgradeStrategy.clusterUpgradeOptions.gatewayClassName 'public-lb' is not "
        "allowed by the operator (allowed: none)"
    ), message
    assert "--gateway-classes=public-lb" in message
    assert "Helm value gatewayClasses" in message
    assert "Configuration field gatewayClasses" in message
    some = gateway.GatewayClasses.parse(["traefik"])
    assert some.refusal("traefik") is None
    widened = some.refusal("istio")
    assert widened is not None
    assert "(allowed: 'traefik')" in widened
    assert "--gateway-classes=istio,traefik" in widened, "the flag keeps the classes it had"
