"""A reflector's store: a mapping by (namespace, name) that keeps one name string per object."""

from __future__ import annotations

from kubeherd.kube.store import Store


def test_the_store_reads_as_a_mapping_by_namespace_and_name() -> None:
    store: Store[str] = Store([(("ops", "a"), "1"), (("", "n1"), "2")])
    store[("ops", "b")] = "3"
    assert len(store) == 3
    assert store[("ops", "a")] == "1"
    assert store.get(("ops", "missing")) is None
    assert store.get(("elsewhere", "a"), "default") == "default"
    assert ("ops", "b") in store
    assert ("ops", "c") not in store
    assert store == {("ops", "a"): "1", ("ops", "b"): "3", ("", "n1"): "2"}
    assert sorted(store.names("ops")) == ["a", "b"]
    assert list(store.names("absent")) == []


def test_a_replaced_record_is_stored_under_the_name_string_that_came_with_it() -> None:
    store: Store[str] = Store()
    first, latest = "".join(["agent-", "x"]), "".join(["agent-", "x"])
    assert first == latest
    assert first is not latest
    store[("ops", first)] = "created"
    store[("ops", latest)] = "running"
    assert len(store) == 1
    [kept] = store.names("ops")
    # The first event's string is no longer held: only the record's own (the latest) is.
    assert kept is latest
    assert store[("ops", first)] == "running"


def test_deleting_the_last_object_of_a_namespace_forgets_the_namespace() -> None:
    store: Store[str] = Store([(("ops", "a"), "1"), (("ops", "b"), "2")])
    del store[("ops", "a")]
    assert store.pop(("ops", "b")) == "2"
    assert store.pop(("ops", "b"), None) is None
    assert len(store) == 0
    assert list(store) == []
    assert store == {}


def test_replace_takes_every_record_of_a_listing_in_place() -> None:
    store: Store[str] = Store([(("ops", "gone"), "1")])
    view = store
    store.replace(Store([(("ops", "a"), "2"), (("kube-system", "b"), "3")]))
    assert view == {("ops", "a"): "2", ("kube-system", "b"): "3"}
    store.clear()
    assert len(view) == 0
