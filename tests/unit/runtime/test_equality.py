"""``runtime/equality.py``: semantic equality of JSON values, as apimachinery's
``equality.Semantic.DeepEqual`` (empty values dropped, volatile keys ignored, quantities
by value where Kubernetes types them so), and :func:`normalize` / :func:`normalize_top`
that it is made of."""

from __future__ import annotations

import copy
import doctest
from typing import Any

import pytest

from runtime import equality, quantity


def test_the_modules_doctests_pass() -> None:
    result = doctest.testmod(equality)
    assert result.attempted > 0, "equality.py lost its examples"
    assert result.failed == 0


@pytest.mark.parametrize(
    ("old", "new", "same"),
    [
        ({"a": 1}, {"a": 1.0}, True),
        ({"a": 1, "b": None}, {"a": 1}, True),
        ({"x": {"p": 1, "q": 2}}, {"x": {"q": 2, "p": 1}}, True),
        ({"a": 1, "lastUpdateTime": "t1"}, {"a": 1, "lastUpdateTime": "t2"}, True),
        (
            {"apps": [{"healthLastUpdateTime": "t1", "s": "OK"}]},
            {"apps": [{"healthLastUpdateTime": "t2", "s": "OK"}]},
            True,
        ),
        ({"a": 1}, {"a": 2}, False),
        ({"l": [1, 2]}, {"l": [2, 1]}, False),
        ({}, {"a": 0}, False),
    ],
)
def test_semantic_equality(old: dict[str, Any], new: dict[str, Any], same: bool) -> None:
    assert equality.equal(old, new, volatile={"lastUpdateTime", "healthLastUpdateTime"}) is same


def resources_of(limits: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"containers": [{"name": "c", "resources": {"limits": limits, **more}}]}


@pytest.mark.parametrize(
    ("old", "new", "same"),
    [
        # what the API server makes of quantities: compared by value where Kubernetes has them
        (resources_of({"cpu": "1", "memory": "1Gi"}),
         resources_of({"cpu": "1000m", "memory": "1024Mi"}), True),
        (resources_of({"cpu": "2"}), resources_of({"cpu": 2}), True),
        (resources_of({"cpu": "500m"}), resources_of({"cpu": 0.5}), True),
        (resources_of({"cpu": "1"}, requests={"cpu": "1"}),
         resources_of({"cpu": "1"}, requests={"cpu": "1000m"}), True),
        (resources_of({"cpu": "1"}), resources_of({"cpu": "2"}), False),
        (resources_of({"cpu": "1"}), resources_of({"cpu": "1001m"}), False),
        (resources_of({"cpu": "1"}), resources_of({"cpu": "1"}, requests={}), True),
        (resources_of({"gpu": "lots"}), resources_of({"gpu": "lots"}), True),
        (resources_of({"gpu": "lots"}), resources_of({"gpu": "1"}), False),
        ({"spec": {"overhead": {"cpu": "250m"}}}, {"spec": {"overhead": {"cpu": "0.25"}}}, True),
        ({"status": {"capacity": {"storage": "1Gi"}, "allocatable": {"pods": "110"}}},
         {"status": {"capacity": {"storage": "1024Mi"}, "allocatable": {"pods": 110}}}, True),
        ({"spec": {"hard": {"pods": "10"}}, "status": {"used": {"cpu": "1"}}},
         {"spec": {"hard": {"pods": 10}}, "status": {"used": {"cpu": "1000m"}}}, True),
        ({"emptyDir": {"sizeLimit": "1Gi"}}, {"emptyDir": {"sizeLimit": "1024Mi"}}, True),
        ({"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}},
         {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "0.001"}}, True),
        # ... and nowhere else: an env var, a label or a ConfigMap key is a string
        ({"env": [{"name": "N", "value": "1"}]}, {"env": [{"name": "N", "value": "1000m"}]},
         False),
        ({"data": {"sizeLimit": "1"}}, {"data": {"sizeLimit": "1000m"}}, False),
        ({"data": {"limits": "1"}}, {"data": {"limits": "1000m"}}, False),
        ({"labels": {"cpu": "2"}}, {"labels": {"cpu": 2}}, False),
        ({"replicas": 2}, {"replicas": "2"}, False),
        # empty maps and lists mean the same as absent ones (and as null), at any depth
        ({"metadata": {"name": "a", "labels": {}}}, {"metadata": {"name": "a"}}, True),
        ({"metadata": {"finalizers": []}}, {"metadata": {}}, True),
        ({"spec": {"template": {"metadata": {"annotations": {}}}}}, {}, True),
        ({"a": {"b": None, "c": []}}, {}, True),
        (None, {}, True),
        ({"l": [{}]}, {"l": []}, False),  # an item is not nothing
        # ... except where Kubernetes gives an empty object a meaning
        ({"volumes": [{"name": "v", "emptyDir": {}}]}, {"volumes": [{"name": "v"}]}, False),
        ({"from": [{"namespaceSelector": {}}]}, {"from": [{}]}, False),
        ({"from": [{"namespaceSelector": None}]}, {"from": [{}]}, True),
        ({"spec": {"selector": {}}}, {"spec": {}}, True),  # a Service's: a map
        ({"s": ""}, {}, False),  # an empty string is a value
        ({"b": False}, {}, False),
    ],
)  # fmt: skip
def test_semantic_equality_of_objects(old: Any, new: Any, same: bool) -> None:
    assert equality.equal(old, new) is same
    assert equality.equal(new, old) is same


def test_normalize_builds_a_new_value_and_leaves_its_argument_alone() -> None:
    value = {"spec": {"labels": {}, "limits": {"cpu": "1000m"}, "t": "x", "l": [{"a": None}]}}
    before = copy.deepcopy(value)
    normal = equality.normalize(value, volatile={"t"})
    assert value == before
    assert normal == {"spec": {"limits": {"cpu": quantity.parse("1")}, "l": [{}]}}


def test_normalize_top_makes_every_kind_of_nothing_an_empty_map() -> None:
    nothings: list[Any] = [None, {}, [], {"a": None}, {"a": {"b": []}}, {"t": 1}]
    for nothing in nothings:
        assert equality.normalize_top(nothing, volatile={"t"}) == {}, nothing
    assert equality.normalize(None) is None  # normalize itself keeps the value as it is
    assert equality.normalize_top({"a": 0}) == {"a": 0}


def test_volatile_keys_are_dropped_at_every_depth_but_only_those() -> None:
    old = {"a": {"b": [{"stamp": 1, "v": 1}]}, "stamp": 1}
    new = {"a": {"b": [{"stamp": 2, "v": 1}]}, "stamp": 2}
    assert equality.equal(old, new, volatile={"stamp"})
    assert not equality.equal(old, new)
    assert not equality.equal(old, {**new, "a": {"b": [{"stamp": 2, "v": 2}]}}, volatile={"stamp"})


@pytest.mark.parametrize("key", sorted(equality.MEANINGFUL_EMPTY))
def test_an_empty_map_is_a_value_under_the_meaningful_keys(key: str) -> None:
    assert not equality.equal({"x": {key: {}}}, {"x": {}})
    assert equality.equal({"x": {key: None}}, {"x": {}})


@pytest.mark.parametrize("key", sorted(equality.QUANTITY_MAPS))
def test_every_quantity_map_compares_its_values_by_value(key: str) -> None:
    assert equality.equal({key: {"cpu": "1000m"}}, {key: {"cpu": "1"}})
    assert not equality.equal({key: {"cpu": "1001m"}}, {key: {"cpu": "1"}})
    assert not equality.equal({f"{key}X": {"cpu": "1000m"}}, {f"{key}X": {"cpu": "1"}})
