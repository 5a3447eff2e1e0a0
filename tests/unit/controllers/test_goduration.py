"""``controllers/goduration.py``: Go's ``time.ParseDuration``, exactly (seconds as a
``Fraction``, None where Go returns an error)."""

from __future__ import annotations

import doctest
import fractions

import pytest

from controllers import goduration

F = fractions.Fraction


def test_the_modules_doctests_pass() -> None:
    result = doctest.testmod(goduration)
    assert result.attempted > 0, "goduration.py lost its examples"
    assert result.failed == 0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", F(0)),
        ("-0", F(0)),
        ("+0", F(0)),
        ("0s", F(0)),
        ("5s", F(5)),
        ("+5s", F(5)),
        ("-1.5h", F(-5400)),
        ("1h30m", F(5400)),
        ("1m1s1ms1us1ns", F(61) + F(1, 10**3) + F(1, 10**6) + F(1, 10**9)),
        ("1\u00b5s", F(1, 10**6)),  # the micro sign
        ("1\u03bcs", F(1, 10**6)),  # the Greek mu
        ("300ms", F(3, 10)),
        ("1.1s", F(11, 10)),  # exact, not 1.1000000000000000888
        (".5s", F(1, 2)),  # Go takes a fraction without a whole part...
        ("1.s", F(1)),  # ...and a point without digits after it
        ("2562047h47m16.854775807s", F(2**63 - 1, 10**9)),  # int64's largest nanoseconds
    ],
)
def test_what_go_accepts_is_its_exact_seconds(text: str, seconds: fractions.Fraction) -> None:
    got = goduration.parse(text)
    assert isinstance(got, fractions.Fraction)
    assert got == seconds


@pytest.mark.parametrize(
    "text",
    [
        "",
        "+",
        "-",
        "90",  # a unit is required except for "0"
        "00",
        "1.5",
        "s",  # a unit without a number
        ".",
        ".s",
        "1d",  # no days, weeks or capitals in Go
        "1w",
        "1H",
        "1S",
        "1e3s",
        "1h 30m",
        " 1s",
        "1s ",
        "1,5s",
        "--1s",
        "1s-1s",  # a sign leads the whole duration only
        "2562047h47m16.854775808s",  # one nanosecond past int64
        "9999999999h",
    ],
)
def test_what_go_refuses_is_none(text: str) -> None:
    assert goduration.parse(text) is None
