from __future__ import annotations

import pytest

from runtime.cache import fields

POD = {
    "metadata": {"name": "a,b", "namespace": "ns"},
    "spec": {"nodeName": "n1", "hostNetwork": True, "priority": 7},
    "status": {"phase": "Running"},
}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("", True),
        (",", True),
        ("spec.nodeName=n1", True),
        ("spec.nodeName==n1", True),
        ("spec.nodeName!=n1", False),
        ("spec.nodeName=n2", False),
        ("spec.nodeName=n1,status.phase!=Failed", True),
        ("spec.nodeName=n1,status.phase=Failed", False),
        ("spec.schedulerName=", True),  # missing reads as ""
        ("spec.schedulerName!=", False),
        ("spec.hostNetwork=true", True),
        ("spec.priority=7", True),
        (r"metadata.name=a\,b", True),
        ("spec.nodeName.deeper=", True),  # through a string: missing
    ],
)
def test_matches(selector: str, expected: bool) -> None:
    assert fields.parse(selector).matches(POD) is expected


def test_terms_and_round_trip() -> None:
    sel = fields.parse(r"metadata.name==x\=y\\z,status.phase!=Failed")
    assert sel.terms == (("metadata.name", "=", "x=y\\z"), ("status.phase", "!=", "Failed"))
    assert fields.parse(str(sel)) == sel
    assert fields.escape("a,b=c\\") == r"a\,b\=c\\"


@pytest.mark.parametrize(
    ("selector", "error"),
    [
        ("metadata.name", "no operator"),
        ("a=b=c", "unescaped '='"),
        (r"a=b\x", "invalid escape"),
        ("a=b\\", "invalid escape"),
    ],
)
def test_refuses_what_apimachinery_refuses(selector: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        fields.parse(selector)
