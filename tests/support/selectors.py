"""Label selectors with what apimachinery's ``labels.Parse`` makes of them: the cases
the cache's selector parser is held to (unit tier) and the real API server is checked
against (integration tier)."""

from __future__ import annotations

__all__ = ["ACCEPTED", "REJECTED"]

# Each rejected by apimachinery's labels.Parse (and so by the apiserver: 400 BadRequest).
REJECTED = [
    "a,,b",  # an empty requirement
    "a=b,",  # a trailing comma
    ",a",  # a leading comma
    "a, ",  # a trailing comma before blanks
    "a in (x y)",  # values must be separated by commas
    "a in x",  # values need parentheses
    "a in (x",  # unclosed
    "a in (x))",  # closed twice
    "a=b c",  # two values
    "!a=b",  # "!" takes a key only
    "a=b=c",
    "a>b",  # Gt/Lt take an integer
    "a=-b",  # not a label value: must start and end alphanumeric
    "a=" + "x" * 64,  # label values have at most 63 characters
    "-a",  # not a label key
    "a/b/c",  # at most one prefix
    "Example.com/a",  # a prefix is a lowercase DNS subdomain
    "/a",
    "a/",
    "(a)",
    "a notin",
    "a in ,",
]

# (selector, labels, matches), each as apimachinery's labels.Parse(...).Matches(labels).
ACCEPTED = [
    ("", {}, True),
    ("a", {"a": ""}, True),
    ("a", {}, False),
    ("!a", {}, True),
    ("! a", {"a": "x"}, False),
    ("a=", {"a": ""}, True),
    ("a==", {"a": "x"}, False),
    ("a ==", {"a": ""}, True),
    ("a!=x", {}, True),
    ("a != x", {"a": "x"}, False),
    ("a in (x, y)", {"a": "y"}, True),
    ("a in(x)", {"a": "x"}, True),
    ("a in ()", {"a": ""}, True),  # "()" is the empty value, not the empty set
    ("a in ()", {}, False),
    ("a in (x,)", {"a": ""}, True),  # an empty entry is the empty value
    ("a in (x,,y)", {"a": ""}, True),
    ("a notin (x)", {}, True),
    ("a notin (x)", {"a": "x"}, False),
    ("a notin ()", {"a": "x"}, True),
    ("in in (in, notin)", {"in": "notin"}, True),  # keywords are fine as keys and values
    ("a>5", {"a": "6"}, True),
    ("a > 5", {"a": "5"}, False),
    ("a<5", {"a": "x"}, False),
    ("a<5", {}, False),
    (
        "app.kubernetes.io/name=web, tier notin (db) ,!canary",
        {"app.kubernetes.io/name": "web"},
        True,
    ),
    ("a=x,b", {"a": "x"}, False),
    ("a_b.c-d=v_1.2-3", {"a_b.c-d": "v_1.2-3"}, True),
]
