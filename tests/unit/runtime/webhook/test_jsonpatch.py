"""``runtime/webhook/jsonpatch.py``: the RFC 6902 diff a defaulting webhook answers
(checked by applying it, as the API server does)."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.webhook import jsonpatch


def _unescape(segment: str) -> str:
    return segment.replace("~1", "/").replace("~0", "~")


def apply(doc: Any, ops: Sequence[dict[str, Any]]) -> Any:
    """A strict RFC 6902 applier for add/remove/replace (what the API server does)."""
    doc = copy.deepcopy(doc)
    for op in ops:
        assert op["path"].startswith("/"), op
        *parents, last = [_unescape(s) for s in op["path"][1:].split("/")]
        target = doc
        for segment in parents:
            target = target[int(segment)] if isinstance(target, list) else target[segment]
        if isinstance(target, list):
            index = int(last)
            if op["op"] == "add":
                assert 0 <= index <= len(target), op
                target.insert(index, op["value"])
            elif op["op"] == "remove":
                del target[index]
            else:
                assert 0 <= index < len(target), op
                target[index] = op["value"]
        else:
            if op["op"] == "add":
                target[last] = op["value"]
            elif op["op"] == "remove":
                del target[last]  # KeyError: removing what is not there is an error
            else:
                assert last in target, op  # replace needs an existing member
                target[last] = op["value"]
    return doc


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text("ab~/", max_size=3),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text("ab~/", max_size=3), children, max_size=4)
    ),
    max_leaves=20,
)
json_objects = st.dictionaries(st.text("ab~/", max_size=3), json_values, max_size=5)


@settings(max_examples=300, deadline=None)
@given(json_objects, json_objects)
def test_diff_applied_turns_old_into_new(old: dict[str, Any], new: dict[str, Any]) -> None:
    ops = jsonpatch.diff(old, new)
    assert apply(old, ops) == new
    assert all(op["path"] != "" for op in ops)  # never the root
    assert (ops == []) == (json.dumps(old, sort_keys=True) == json.dumps(new, sort_keys=True))


def test_diff_escapes_and_is_minimal() -> None:
    old = {"metadata": {"labels": {"a/b": "1", "c~d": "2"}}, "spec": {"items": [1, 2, 3]}}
    new = {"metadata": {"labels": {"a/b": "9", "c~d": "2"}}, "spec": {"items": [1]}}
    assert jsonpatch.diff(old, new) == [
        {"op": "replace", "path": "/metadata/labels/a~1b", "value": "9"},
        {"op": "remove", "path": "/spec/items/2"},
        {"op": "remove", "path": "/spec/items/1"},
    ]


def test_diff_tells_json_types_apart() -> None:
    assert jsonpatch.diff({"a": 1}, {"a": True}) == [{"op": "replace", "path": "/a", "value": True}]
    assert jsonpatch.diff({"a": 1}, {"a": 1.0}) == [{"op": "replace", "path": "/a", "value": 1.0}]


def test_diff_refuses_to_replace_the_root() -> None:
    with pytest.raises(ValueError, match="root"):
        jsonpatch.diff({"a": 1}, [1])
