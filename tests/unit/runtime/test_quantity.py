"""Kubernetes quantities: the grammar, exact values, the server's rounding and cap."""

from __future__ import annotations

import fractions

import pytest

from runtime import quantity


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("1000m", "1"),
        ("1Gi", "1024Mi"),
        ("1Ki", 1024),
        (2, "2"),
        ("2", 2.0),
        (0.5, "500m"),
        ("1e3", "1k"),
        ("1E3", "1000"),
        ("1e-3", "1m"),
        ("1e+3", "1k"),
        ("1.5Gi", "1536Mi"),
        ("100u", "100000n"),
        ("0.1m", "100u"),
        (".5", "0.5"),
        ("1.", "1"),
        ("+1", "1"),
        ("-1", "-1000m"),
        ("1M", "1000k"),
        ("1T", "1000G"),
        ("1P", "1000T"),
        ("1E", "1000P"),
        ("1Ei", "1024Pi"),
        ("1Pi", "1024Ti"),
        ("1Ti", "1024Gi"),
        ("0", "0m"),
        ("000123", "123"),
        (1e-05, "10u"),
        # the server rounds (away from zero) to nano units ...
        ("1.0000000001", "1000000001n"),
        ("-0.0000000001", "-1n"),
        ("0.0000000000001", "1n"),
        # ... and caps binary-SI amounts at 2^63-1 (decimal ones are not capped)
        ("8Ei", "9Ei"),
        ("8Ei", str(2**63 - 1)),
    ],
)
def test_equal_by_value(a: str | int | float, b: str | int | float) -> None:
    assert quantity.parse(a) == quantity.parse(b)
    assert hash(quantity.parse(a)) == hash(quantity.parse(b))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("1", "1001m"),
        ("1G", "1Gi"),
        ("1k", "1Ki"),
        ("10E", "100E"),  # no cap for decimal SI
        ("1", "-1"),
        ("1n", "0"),
    ],
)
def test_different_values(a: str, b: str) -> None:
    assert quantity.parse(a) != quantity.parse(b)


def test_exact_values() -> None:
    assert quantity.parse("1500m").value == fractions.Fraction(3, 2)
    assert quantity.parse("1Mi").value == 2**20
    assert quantity.parse("3e2").value == 300
    assert quantity.parse("123456789123456789123456789").value == 123456789123456789123456789
    assert quantity.parse("0.1").value == fractions.Fraction(1, 10)  # not 0.1000000000000000055...


@pytest.mark.parametrize(
    "text",
    ["", " ", ".", "-", "abc", "1.2.3", "1 Gi", " 1", "1Ki1", "1e", "1KiB", "Gi", "1ki",
     "1mi", "1K", "1e1.5", "0x10", "1_000", "--1", "1Gi ", "nan", "inf", "\u0661"],
)  # fmt: skip
def test_invalid_quantities(text: str) -> None:
    with pytest.raises(ValueError, match="quantity"):
        quantity.parse(text)
    assert quantity.parse_or_none(text) is None


@pytest.mark.parametrize("value", [True, None, float("nan"), float("inf"), [1], {"a": 1}])
def test_non_quantity_values(value: object) -> None:
    assert quantity.parse_or_none(value) is None


def test_a_quantity_is_not_equal_to_a_number() -> None:
    # compared with each other only: never with plain numbers or booleans by accident
    assert quantity.parse("1") != 1
    assert quantity.parse("1") != True  # noqa: E712
