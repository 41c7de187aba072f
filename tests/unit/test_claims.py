"""Claims by selector and controller reference, with plain data."""

from __future__ import annotations

import pytest

from kubeherd.daemonset.core.claims import (
    InvalidSelectorError,
    adoption_patch,
    controller_uid,
    outside_selector_texts,
    release_patch,
    revision_adoptable,
    selector_matches,
    selector_problems,
    selector_text,
)
from kubeherd.daemonset.shell.watches import DaemonPod

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


def test_labels_match_a_selector_as_the_api_server_matches_them() -> None:
    assert selector_matches(SELECTOR, {"app": "agent", "gpu": "a100", "tier": "z"})
    assert selector_matches(SELECTOR, {"app": "agent", "gpu": ""})
    assert not selector_matches(SELECTOR, {"app": "other", "gpu": "a100"})
    assert not selector_matches(SELECTOR, {"app": "agent", "gpu": "a100", "tier": "x"})
    assert not selector_matches(SELECTOR, {"app": "agent"})
    assert not selector_matches(
        {"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": "1"}
    )
    assert selector_matches({}, {"anything": "1"})


def test_a_key_with_a_comma_is_refused_not_read_as_two_requirements() -> None:
    # Demonstrated in the security review: released every daemon pod once the release query
    # became `kubeherd.io/customdaemonset=NAME,zz,team`.
    selector = {
        "matchLabels": {"app": "agent"},
        "matchExpressions": [{"key": "zz,team", "operator": "DoesNotExist"}],
    }

    with pytest.raises(InvalidSelectorError, match="'zz,team' is not a label key"):
        outside_selector_texts(selector)
    with pytest.raises(InvalidSelectorError, match="'zz,team' is not a label key"):
        selector_text(selector)


@pytest.mark.parametrize(
    ("selector", "complaint"),
    [
        ({"matchLabels": {"app,tier": "agent"}}, "matchLabels: 'app,tier' is not a label key"),
        ({"matchLabels": {"app": "a,b"}}, r"matchLabels\['app'\]: 'a,b' is not a label value"),
        ({"matchLabels": {"app": "agent\n"}}, "is not a label value"),
        ({"matchLabels": {"!app": "agent"}}, "'!app' is not a label key"),
        ({"matchLabels": {"app": 5}}, "5 is not a label value"),
        (
            {"matchExpressions": [{"key": "t", "operator": "NotIn", "values": ["x),!app,(y"]}]},
            r"matchExpressions\[0\]\.values\[0\]: 'x\),!app,\(y' is not a label value",
        ),
        ({"matchExpressions": [{"key": "a b", "operator": "Exists"}]}, "'a b' is not a label key"),
        ({"matchExpressions": [{"key": "a/b/c", "operator": "Exists"}]}, "not a label key"),
        ({"matchExpressions": [{"key": "x" * 64, "operator": "Exists"}]}, "not a label key"),
        (
            {"matchExpressions": [{"key": "a" * 254 + "/b", "operator": "Exists"}]},
            "not a label key",
        ),
        ({"matchExpressions": [{"operator": "Exists"}]}, "None is not a label key"),
        ({"matchExpressions": [{"key": "a", "operator": "In"}]}, "must be given for In"),
        (
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["1"]}]},
            "must be empty for Exists",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
            "'Gt' is not In, NotIn, Exists or DoesNotExist",
        ),
    ],
)
def test_no_query_is_built_from_a_selector_the_api_server_would_refuse(
    selector: dict[str, object], complaint: str
) -> None:
    with pytest.raises(InvalidSelectorError, match=complaint):
        selector_text(selector)
    with pytest.raises(InvalidSelectorError, match=complaint):
        outside_selector_texts(selector)


def test_label_keys_and_values_at_their_limits_are_queried_as_written() -> None:
    prefix = ".".join(["a" * 63] * 4)[:253]
    key = f"{prefix}/{'N' * 63}"
    selector = {
        "matchLabels": {"example.com/team": "Team_1.x-y", "empty": ""},
        "matchExpressions": [{"key": key, "operator": "NotIn", "values": ["v" * 63, ""]}],
    }

    assert selector_problems(selector) == []
    assert selector_text(selector) == (
        f"example.com/team in (Team_1.x-y),empty in (),{key} notin ({'v' * 63},)"
    )


def watched_pod(labels: dict[str, str], *, owned: bool = True) -> DaemonPod:
    body = {
        "metadata": {
            "name": "agent-x1",
            "namespace": "default",
            "labels": {"kubeherd.io/customdaemonset": "agent", **labels},
            "ownerReferences": [REFERENCE] if owned else [],
        },
        "spec": {"nodeName": "n1"},
    }
    return DaemonPod.watched(body, lambda key: SELECTOR if key == ("default", "agent") else None)


MATCHING = {"app": "agent", "gpu": "a100"}


def test_a_label_the_selector_ignores_calls_for_no_claims() -> None:
    # As the API server's binding adds the node's topology labels to every pod.
    bound = watched_pod({**MATCHING, "topology.kubernetes.io/zone": "zone-a"})
    assert not bound.claims_may_change(watched_pod(MATCHING))


def test_a_pod_leaving_the_selector_or_an_orphan_matching_it_calls_for_claims() -> None:
    left = watched_pod({**MATCHING, "tier": "x"})
    assert left.in_selector is False
    assert left.claims_may_change(watched_pod(MATCHING))
    assert not left.claims_may_change(left)  # once is enough
    orphan = watched_pod(MATCHING, owned=False)
    assert orphan.claims_may_change(None)
    assert orphan.claims_may_change(watched_pod({"app": "other"}, owned=False))
    assert not orphan.claims_may_change(orphan)


def test_a_pod_of_an_object_not_seen_yet_is_judged_by_its_first_claims() -> None:
    unknown = DaemonPod.watched(
        {"metadata": {"name": "p", "labels": {}, "ownerReferences": [REFERENCE]}},
        lambda key: None,
    )
    assert unknown.in_selector is None
    assert not watched_pod(MATCHING).claims_may_change(unknown)


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
