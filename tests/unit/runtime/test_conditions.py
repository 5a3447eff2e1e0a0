"""runtime.conditions: lookup and the ``lastTransitionTime`` rule."""

from __future__ import annotations

import dataclasses

from runtime import conditions


@dataclasses.dataclass
class Typed:
    type: str
    status: str


def test_find_takes_mappings_and_typed_models() -> None:
    raw = [{"type": "A", "status": "True"}, {"type": "B", "status": "False"}]
    assert conditions.find(raw, "B") is raw[1]
    typed = [Typed("A", "True"), Typed("B", "False")]
    assert conditions.find(typed, "B") is typed[1]
    assert conditions.find(raw, "C") is None
    assert conditions.find(None, "A") is None


def test_is_true_needs_the_string_true() -> None:
    def obj(status: object) -> dict[str, object]:
        return {"status": {"conditions": [{"type": "Ready", "status": status}]}}

    assert conditions.is_true(obj("True"), "Ready")
    assert not conditions.is_true(obj("False"), "Ready")
    assert not conditions.is_true(obj(True), "Ready")  # not the wire form
    assert not conditions.is_true(obj("True"), "Other")
    assert not conditions.is_true({"status": None}, "Ready")
    assert not conditions.is_true(None, "Ready")


def test_transition_time_moves_only_with_the_status() -> None:
    before = conditions.make("Ready", "False", "Starting", "a", generation=1, now="t0")
    same = conditions.make("Ready", "False", "Other", "b", generation=2, now="t1", previous=before)
    assert same["lastTransitionTime"] == "t0"
    assert (same["reason"], same["message"], same["observedGeneration"]) == ("Other", "b", 2)
    flipped = conditions.make("Ready", "True", "Ready", "", generation=2, now="t2", previous=same)
    assert flipped["lastTransitionTime"] == "t2"
    # A condition that lost its time (hand-edited) gets one.
    blank = {**before, "lastTransitionTime": ""}
    assert conditions.transition_time(blank, "False", "t3") == "t3"


def test_put_replaces_in_place_and_reports_change() -> None:
    listed = [
        conditions.make("A", "True", "R", "", generation=1, now="t0"),
        conditions.make("B", "True", "R", "", generation=1, now="t0"),
    ]
    assert not conditions.put(listed, dict(listed[0]))
    changed = conditions.make("A", "False", "R", "", generation=1, now="t1", previous=listed[0])
    assert conditions.put(listed, changed)
    assert [c["type"] for c in listed] == ["A", "B"]
    assert listed[0]["status"] == "False"
    assert conditions.put(listed, conditions.make("C", "True", "R", "", generation=1, now="t1"))
    assert [c["type"] for c in listed] == ["A", "B", "C"]


def test_make_writes_plain_strings() -> None:
    class Reason(str):
        """A str subclass, as enum members are."""

    made = conditions.make("Ready", "True", Reason("Ready"), "", generation=1, now="t")
    assert type(made["reason"]) is str


def test_set_condition_is_make_then_put_and_says_whether_the_list_changed() -> None:
    listed = [{"type": "A", "status": "True", "reason": "x", "message": "",
               "lastTransitionTime": "t0", "observedGeneration": 1}]  # fmt: skip
    set_b = conditions.set_condition(listed, "B", "False", "Wait", "m", generation=1, now="t1")
    assert set_b
    assert [c["type"] for c in listed] == ["A", "B"]  # appended, order kept
    # a new reason with the same status keeps the time; a status flip moves it
    assert conditions.set_condition(listed, "A", "True", "y", "", generation=2, now="t2")
    assert listed[0]["lastTransitionTime"] == "t0"
    assert listed[0]["observedGeneration"] == 2
    assert conditions.set_condition(listed, "A", "False", "y", "", generation=2, now="t3")
    assert listed[0]["lastTransitionTime"] == "t3"
    assert not conditions.set_condition(listed, "A", "False", "y", "", generation=2, now="t4")
    assert listed[0]["lastTransitionTime"] == "t3"


def test_remove_and_is_false() -> None:
    listed = [{"type": "A", "status": "False"}, {"type": "B", "status": "Unknown"}]
    obj = {"status": {"conditions": listed}}
    assert conditions.is_false(obj, "A")
    assert not conditions.is_false(obj, "B")
    assert not conditions.is_false(obj, "C")
    assert not conditions.is_true(obj, "C")
    assert conditions.remove(listed, "A")
    assert not conditions.remove(listed, "A")
    assert listed == [{"type": "B", "status": "Unknown"}]


def test_has_status_is_present_and_equal() -> None:
    obj = {"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}
    assert conditions.has_status(obj, "Ready", "Unknown")
    assert not conditions.has_status(obj, "Ready", "True")
    assert not conditions.has_status(obj, "Synced", "Unknown")
    assert not conditions.has_status(None, "Ready", "Unknown")
