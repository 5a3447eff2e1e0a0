"""Label selector parsing: exactly what apimachinery's ``labels.Parse`` accepts, nothing else."""

from __future__ import annotations

import pytest

from runtime.cache import selector as selector_
from tests.support import selectors


@pytest.mark.parametrize("text", selectors.REJECTED)
def test_what_apimachinery_rejects_is_rejected_with_a_clear_error(text: str) -> None:
    with pytest.raises(ValueError, match="invalid label selector") as caught:
        selector_.parse(text)
    assert repr(text) in str(caught.value), "the error names the selector"


@pytest.mark.parametrize(("text", "labels", "expected"), selectors.ACCEPTED)
def test_what_apimachinery_accepts_matches_as_it_does(
    text: str, labels: dict[str, str], expected: bool
) -> None:
    assert selector_.parse(text).matches(labels) is expected


def test_narrowest_uses_equality_and_in_requirements() -> None:
    assert selector_.parse("a in (x,y), b=z, c").narrowest() == ("b", ["z"])
    assert selector_.parse("a in ()").narrowest() == ("a", [""])
    assert selector_.parse("a!=x, b>1, !c").narrowest() is None
