from __future__ import annotations

from typing import Any

import pytest

from runtime.cache import store as store_


def obj(name: str, ns: str = "ns", rv: str = "1", **meta: object) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": rv, **meta}}


def test_reads_hand_out_the_stored_object_itself() -> None:
    store = store_.Store()
    stored, previous = store.upsert(obj("a"))
    assert previous is None
    assert store.get("ns/a") is stored
    assert store.list()[0] is stored


def test_indexes_follow_updates_and_deletes() -> None:
    owner = {"uid": "u1", "controller": True, "kind": "X", "name": "x", "apiVersion": "v1"}
    store = store_.Store({"by-app": lambda o: [o["metadata"].get("labels", {}).get("app", "")]})
    store.upsert(obj("a", labels={"app": "web"}, ownerReferences=[owner]))
    store.upsert(obj("b", ns="other", labels={"app": "web"}))
    assert {o["metadata"]["name"] for o in store.by_index("by-app", "web")} == {"a", "b"}
    assert [o["metadata"]["name"] for o in store.by_index("owner", "u1")] == ["a"]
    store.upsert(obj("a", rv="2", labels={"app": "db"}))
    assert [o["metadata"]["name"] for o in store.by_index("by-app", "web")] == ["b"]
    assert store.by_index("owner", "u1") == []
    store.delete("other/b")
    assert store.by_index("by-app", "web") == []
    assert store.by_index("namespace", "other") == []
    with pytest.raises(KeyError, match="no index named"):
        store.by_index("nope", "x")


def test_replace_reports_what_vanished() -> None:
    store = store_.Store()
    store.upsert(obj("a"))
    store.upsert(obj("b"))
    upserted, deleted = store.replace([obj("b", rv="2"), obj("c")])
    assert [o["metadata"]["name"] for o in deleted] == ["a"]
    assert sorted((o["metadata"]["name"], old is None) for o, old in upserted) == [
        ("b", False),
        ("c", True),
    ]
    assert sorted(store.keys()) == ["ns/b", "ns/c"]


def test_write_through_only_moves_forward() -> None:
    store = store_.Store()
    store.upsert(obj("a", rv="10"))
    assert not store.upsert_if_newer(obj("a", rv="9"))
    assert not store.upsert_if_newer(obj("a", rv="10"))
    assert store.upsert_if_newer(obj("a", rv="11"))
    assert store.get("ns/a")["metadata"]["resourceVersion"] == "11"  # type: ignore[index]


def test_default_transform_drops_managed_fields_and_interns() -> None:
    store = store_.Store()
    a, _ = store.upsert(obj("a", managedFields=[{"manager": "x"}], labels={"tier": "frontend"}))
    b, _ = store.upsert(obj("b", labels={"tier": "".join(["front", "end"])}))
    assert "managedFields" not in a["metadata"]
    assert a["metadata"]["labels"]["tier"] is b["metadata"]["labels"]["tier"]


def test_intern_strings_keeps_values_and_shares_only_short_repeated_ones() -> None:
    def fresh(text: str) -> str:
        return "".join(list(text))  # an equal string that is not the interned one

    long = "x" * (store_._INTERN_MAX + 1)
    spec = [fresh("web"), 1, 2.5, True, None, [fresh("web")], {fresh("k"): fresh("web")}]
    value = {
        fresh("spec"): spec,
        "uid": fresh("web"), "name": {"nested": fresh("web")}, "long": fresh(long),
    }  # fmt: skip
    copied = store_.intern_strings(value)
    assert copied == value
    assert copied is not value
    web = copied["spec"][0]
    assert web is copied["spec"][5][0] is copied["spec"][6]["k"]  # shared
    assert copied["uid"] is value["uid"], "unique-valued keys are left alone"
    assert copied["name"] is value["name"], "...whatever their value"
    assert copied["long"] is value["long"], "long strings are not interned"
    assert [type(v) for v in copied["spec"][1:5]] == [int, float, bool, type(None)]


def test_intern_strings_copies_subclasses_of_json_types_too() -> None:
    class Sub(dict[str, Any]):
        pass

    value = {"a": Sub(x="web"), "l": [Sub(z=[1, "q"])], "uid": Sub(n="m")}
    copied = store_.intern_strings(value)
    assert copied == value
    assert copied["a"] is not value["a"], "a nested subclass is copied, not shared"
    assert copied["l"][0] is not value["l"][0]
    assert copied["uid"] is value["uid"], "unique-valued keys are left alone"


def test_debug_mode_detects_in_place_mutation() -> None:
    store = store_.Store(debug=True)
    cached, _ = store.upsert(obj("a", labels={"x": "1"}))
    cached["metadata"]["labels"]["x"] = "2"  # the bug: mutating a cached object
    with pytest.raises(store_.CacheMutationError, match="ns/a was mutated"):
        store.get("ns/a")
    with pytest.raises(store_.CacheMutationError):
        store.verify()


def test_without_debug_mode_reads_do_not_check() -> None:
    store = store_.Store()
    cached, _ = store.upsert(obj("a"))
    cached["metadata"]["name"] = "a"  # unchanged value; no fingerprint kept anyway
    assert store.get("ns/a") is cached


def test_label_index_is_built_on_first_use_and_maintained() -> None:
    store = store_.Store()
    store.upsert(obj("a", labels={"app": "web"}))
    store.upsert(obj("b", labels={"app": "db"}))
    assert store._indices == {}, "nothing is indexed until a selector asks"
    assert [o["metadata"]["name"] for o in store.by_label("app", "web")] == ["a"]
    store.upsert(obj("b", rv="2", labels={"app": "web"}))
    store.upsert(obj("c", labels={"other": "x"}))
    assert sorted(o["metadata"]["name"] for o in store.by_label("app", "web")) == ["a", "b"]
    store.upsert(obj("a", rv="3"))  # label removed
    store.delete("ns/b")
    assert store.by_label("app", "web") == []
    assert store.by_label("app", "db") == []
    assert list(store._indices) == ["label:app"], "only the label keys asked for"


def test_tombstones_refuse_older_copies_of_deleted_objects() -> None:
    store = store_.Store()
    store.upsert(obj("a", rv="5"))
    assert store.delete("ns/a", resource_version="7") is not None
    assert store.tombstone("ns/a") == "7"
    assert store.upsert_if_newer(obj("a", rv="6")) is None
    assert store.upsert_if_newer(obj("a", rv="7")) is None
    assert "ns/a" not in store
    assert store.delete("ns/gone", resource_version="9") is None  # remembered even if absent
    assert store.upsert_if_newer(obj("gone", rv="8")) is None
    assert store.upsert_if_newer(obj("a", rv="8")) is not None, "a re-creation is newer"
    assert store.tombstone("ns/a") is None, "and clears the tombstone"


def test_a_late_delete_does_not_remove_a_newer_re_creation() -> None:
    store = store_.Store()
    store.upsert(obj("a", rv="12"))  # our create's write-through, before the old DELETED event
    assert store.delete("ns/a", resource_version="11") is None
    assert store.get("ns/a")["metadata"]["resourceVersion"] == "12"  # type: ignore[index]


def test_tombstones_are_bounded_in_time_and_number() -> None:
    from runtime.testing import clock as fake_clock

    clock = fake_clock.FakeClock()
    store = store_.Store(clock=clock, tombstone_ttl=60, max_tombstones=3)
    store.delete("ns/a", resource_version="1")
    clock.advance(61)
    assert store.tombstone("ns/a") is None, "expired"
    assert store.upsert_if_newer(obj("a", rv="1")) is not None
    for i, name in enumerate("bcde"):
        store.delete(f"ns/{name}", resource_version=str(10 + i))
    assert [store.tombstone(f"ns/{n}") for n in "bcde"] == [None, "11", "12", "13"]
    assert len(store._tombstones) == 3


def test_replace_with_a_resource_version_keeps_what_is_newer_than_the_list() -> None:
    store = store_.Store()
    store.upsert(obj("a", rv="9"))  # written through after the list's snapshot (RV 8)
    store.upsert(obj("b", rv="10"))  # created by us after the snapshot
    store.upsert(obj("c", rv="3"))  # deleted before the snapshot
    store.delete("ns/d", resource_version="12")  # deleted after the snapshot
    upserted, deleted = store.replace([obj("a", rv="8"), obj("d", rv="4"), obj("e", rv="6")], "8")
    assert [o["metadata"]["name"] for o, _ in upserted] == ["e"]
    assert [o["metadata"]["name"] for o in deleted] == ["c"]
    versions = {store_.key_for(o): o["metadata"]["resourceVersion"] for o in store.list()}
    assert versions == {"ns/a": "9", "ns/b": "10", "ns/e": "6"}
    assert store.tombstone("ns/c") == "8"


def test_replace_never_keeps_a_stored_copy_over_opaque_resource_versions() -> None:
    store = store_.Store()
    store.upsert(obj("a", rv="zz"))
    store.upsert(obj("b", rv="yy"))
    _, deleted = store.replace([obj("a", rv="xx")], "ww")
    assert store.get("ns/a")["metadata"]["resourceVersion"] == "xx"  # type: ignore[index]
    assert [o["metadata"]["name"] for o in deleted] == ["b"]
