"""Claims by selector and controller reference, with plain data."""

from __future__ import annotations

from kubeherd.daemonset.claims import (
    adoption_patch,
    controller_uid,
    outside_selector_texts,
    release_patch,
    revision_adoptable,
    selector_text,
)

SELECTOR = {
    "matchLabels": {"app": "agent"},
    "matchExpressions": [
        {"key": "tier", "operator": "NotIn", "values": ["x", "y"]},
        {"key": "gpu", "operator": "Exists"},
    ],
}
REFERENCE = {"kind": "CustomDaemonSet", "name": "agent", "uid": "u1", "controller": True}


def test_a_selector_reads_as_the_api_servers_label_selector() -> None:
    assert selector_text(SELECTOR) == "app in (agent),tier notin (x,y),gpu"


def test_each_requirement_negated_finds_what_the_selector_does_not_match() -> None:
    assert outside_selector_texts(SELECTOR) == ["app notin (agent)", "tier in (x,y)", "!gpu"]


def test_only_a_controller_reference_makes_an_object_owned() -> None:
    owned = {"metadata": {"ownerReferences": [{"uid": "a"}, {"uid": "b", "controller": True}]}}

    assert controller_uid(owned) == "b"
    assert controller_uid({"metadata": {"ownerReferences": [{"uid": "a"}]}}) is None
    assert controller_uid({"metadata": {}}) is None


def test_adopting_tests_the_object_then_adds_the_reference_and_the_owner_label() -> None:
    orphan = {"metadata": {"uid": "p1", "resourceVersion": "7", "labels": {"app": "agent"}}}

    patch = adoption_patch(orphan, REFERENCE, "agent")

    assert patch == [
        {"op": "test", "path": "/metadata/uid", "value": "p1"},
        {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
        {"op": "add", "path": "/metadata/ownerReferences", "value": [REFERENCE]},
        {"op": "add", "path": "/metadata/labels/kubeherd.io~1customdaemonset", "value": "agent"},
    ]


def test_adopting_keeps_other_owner_references() -> None:
    orphan = {"metadata": {"uid": "p1", "resourceVersion": "7", "ownerReferences": [{"uid": "x"}]}}

    patch = adoption_patch(orphan, REFERENCE, "agent")

    assert {"op": "add", "path": "/metadata/ownerReferences/-", "value": REFERENCE} in patch
    assert {"op": "add", "path": "/metadata/labels", "value": {}} in patch


def test_releasing_removes_only_our_reference_and_the_owner_label() -> None:
    pod = {
        "metadata": {
            "uid": "p1",
            "resourceVersion": "7",
            "labels": {"kubeherd.io/customdaemonset": "agent"},
            "ownerReferences": [{"uid": "x"}, {"uid": "u1", "controller": True}],
        }
    }

    patch = release_patch(pod, "u1")

    assert patch[2:] == [
        {"op": "remove", "path": "/metadata/ownerReferences/1"},
        {"op": "remove", "path": "/metadata/labels/kubeherd.io~1customdaemonset"},
    ]


def test_a_revision_is_adoptable_without_a_controller_and_with_a_hash() -> None:
    labelled = {"metadata": {"labels": {"controller-revision-hash": "h"}}}

    assert revision_adoptable(labelled)
    assert not revision_adoptable({"metadata": {"labels": {}}})
    owned = {**labelled, "metadata": {**labelled["metadata"], "ownerReferences": [REFERENCE]}}
    assert not revision_adoptable(owned)
