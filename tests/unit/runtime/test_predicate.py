"""``runtime/predicate.py``: which events are worth a reconcile. The ``*_changed``
predicates pass every add and delete and judge updates by one metadata field; the
combinators compose them."""

from __future__ import annotations

import doctest
from typing import Any

import pytest
import structlog

from runtime import predicate
from runtime.cache.informer import Event


def meta(generation: int = 1, rv: str = "5", **more: Any) -> dict[str, Any]:
    return {"metadata": {"generation": generation, "resourceVersion": rv, **more},
            "spec": {"size": generation}, "status": {"phase": f"p{rv}"}}  # fmt: skip


def update(old: dict[str, Any], new: dict[str, Any]) -> Event:
    return Event("update", new, old)


CHANGED = [
    predicate.generation_changed,
    predicate.resource_version_changed,
    predicate.label_changed,
    predicate.annotation_changed,
    predicate.spec_or_metadata_changed,
]


def test_the_modules_doctests_pass() -> None:
    result = doctest.testmod(predicate)
    assert result.attempted > 0, "predicate.py lost its examples"
    assert result.failed == 0


@pytest.mark.parametrize("changed", CHANGED, ids=lambda p: getattr(p, "__name__", "combined"))
@pytest.mark.parametrize("kind", ["add", "delete"])
def test_adds_and_deletes_always_pass(changed: predicate.Predicate, kind: str) -> None:
    assert changed(Event(kind, meta()))  # type: ignore[arg-type]
    assert changed(Event(kind, meta(), meta()))  # type: ignore[arg-type]


@pytest.mark.parametrize("changed", CHANGED, ids=lambda p: getattr(p, "__name__", "combined"))
def test_an_update_without_its_old_object_passes(changed: predicate.Predicate) -> None:
    assert changed(Event("update", meta()))


def test_each_update_predicate_judges_its_own_field() -> None:
    base = meta(labels={"a": "1"}, annotations={"n": "x"})
    cases = {
        "spec (generation)": meta(2, "6", labels={"a": "1"}, annotations={"n": "x"}),
        "status only": meta(1, "6", labels={"a": "1"}, annotations={"n": "x"}),
        "labels": meta(1, "6", labels={"a": "2"}, annotations={"n": "x"}),
        "annotations": meta(1, "6", labels={"a": "1"}, annotations={"n": "y"}),
        "a resync (nothing)": meta(1, "5", labels={"a": "1"}, annotations={"n": "x"}),
    }
    got = {
        what: [p(update(base, new)) for p in CHANGED] for what, new in cases.items()
    }  # generation, resourceVersion, labels, annotations, spec_or_metadata
    assert got == {
        "spec (generation)": [True, True, False, False, True],
        "status only": [False, True, False, False, False],
        "labels": [False, True, True, False, True],
        "annotations": [False, True, False, True, True],
        "a resync (nothing)": [False, False, False, False, False],
    }


def test_labels_added_or_removed_are_a_change_and_order_is_not() -> None:
    unlabelled = meta()
    labelled = meta(labels={"a": "1", "b": "2"})
    assert predicate.label_changed(update(unlabelled, labelled))
    assert predicate.label_changed(update(labelled, unlabelled))
    reordered = meta(labels={"b": "2", "a": "1"})
    assert not predicate.label_changed(update(labelled, reordered))
    assert not predicate.label_changed(update(unlabelled, meta()))


def test_and_or_not_combine_as_logic_does() -> None:
    yes: predicate.Predicate = lambda _e: True  # noqa: E731
    no: predicate.Predicate = lambda _e: False  # noqa: E731
    event = update(meta(), meta())
    assert [predicate.and_(yes, yes)(event), predicate.and_(yes, no)(event)] == [True, False]
    assert [predicate.or_(no, yes)(event), predicate.or_(no, no)(event)] == [True, False]
    assert [predicate.not_(yes)(event), predicate.not_(no)(event)] == [False, True]
    # empty combinations are the identities: all() of nothing passes, any() of nothing not
    assert (predicate.and_()(event), predicate.or_()(event)) == (True, False)


def test_combinators_stop_at_the_first_deciding_predicate() -> None:
    asked: list[str] = []

    def noted(name: str, answer: bool) -> predicate.Predicate:
        def p(_event: Event) -> bool:
            asked.append(name)
            return answer

        return p

    event = update(meta(), meta())
    assert not predicate.and_(noted("a", False), noted("b", True))(event)
    assert predicate.or_(noted("c", True), noted("d", False))(event)
    assert asked == ["a", "c"]


def test_field_changed_judges_updates_by_the_value_at_its_path() -> None:
    finished = predicate.field_changed("status", "conditions")
    running = {**meta(), "status": {"active": 1}}
    progressed = {**meta(), "status": {"active": 1, "ready": 1}}
    done = {**meta(), "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    assert not finished(update(running, progressed)), "another field moved: dropped"
    assert finished(update(progressed, done))
    assert not finished(update(done, {**done, "metadata": {"resourceVersion": "9"}}))
    assert not finished(update(meta(), {**meta(), "status": "not a mapping"})), "None == None"
    assert finished(Event("add", done, None))
    assert finished(Event("delete", done, None))
    assert finished.__name__ == "status.conditions_changed"
    with pytest.raises(ValueError, match="needs a path"):
        predicate.field_changed()


def configmap(rv: str, **labels: str) -> dict[str, Any]:
    """A kind without a spec: no metadata.generation."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "resourceVersion": rv, "labels": labels}}  # fmt: skip


def test_generation_changed_warns_once_per_kind_that_has_no_generation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(predicate, "_WARNED", set())
    with structlog.testing.capture_logs() as logs:
        for rv in ("2", "3", "4"):
            assert not predicate.generation_changed(update(configmap("1"), configmap(rv)))
        assert not predicate.generation_changed(update(meta(1, "5"), meta(1, "6")))  # has one
        assert predicate.generation_changed(Event("add", configmap("1")))
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert len(warnings) == 1, "once per kind, not per event"
    assert warnings[0]["kind"] == "ConfigMap"
    assert warnings[0]["api_version"] == "v1"
    assert "drops every update" in warnings[0]["event"]


def test_label_selector_passes_objects_entering_matching_and_leaving_the_selector() -> None:
    mirrored = predicate.label_selector("mirror in (true,yes),!paused")
    assert mirrored(Event("add", configmap("1", mirror="true")))
    assert not mirrored(Event("add", configmap("1", mirror="no")))
    assert mirrored(Event("delete", configmap("1", mirror="yes")))
    entering = update(configmap("1"), configmap("2", mirror="true"))
    leaving = update(configmap("1", mirror="true"), configmap("2", mirror="true", paused="1"))
    outside = update(configmap("1", mirror="no"), configmap("2", mirror="no"))
    assert mirrored(entering)
    assert mirrored(leaving), "leaving is seen, so the reconciler can undo"
    assert not mirrored(outside)
    assert not mirrored(Event("add", {"metadata": {}}))  # no labels at all
    with pytest.raises(ValueError, match="invalid label selector 'a,,b'"):
        predicate.label_selector("a,,b")
