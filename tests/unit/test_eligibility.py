"""Node eligibility, with plain data: which nodes the native DaemonSet controller would pick."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from kubeherd.api.customdaemonset_reasons import IneligibleReason
from kubeherd.daemonset.core.eligibility import (
    NodeInfo,
    Taint,
    Toleration,
    Verdict,
    compile_pod_requirements,
    default_daemon_tolerations,
    matches_node_selector_terms,
    node_should_run,
    with_daemon_tolerations,
)

SPEC: dict[str, Any] = {"containers": [{"name": "agent", "image": "agent:1"}]}
CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
EFFECTS = ("NoSchedule", "NoExecute", "PreferNoSchedule")


def node(name: str = "n1", *taints: Taint, **labels: str) -> NodeInfo:
    return NodeInfo(name=name, labels=labels, taints=taints)


def spec(**fields: Any) -> dict[str, Any]:
    return {**SPEC, **fields}


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    node_selector = {"nodeSelectorTerms": list(terms)}
    return spec(
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": node_selector}}
    )


def expression(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


def labels_term(*expressions: dict[str, Any]) -> dict[str, Any]:
    return {"matchExpressions": list(expressions)}


def fields_term(*requirements: dict[str, Any]) -> dict[str, Any]:
    return {"matchFields": list(requirements)}


def outcome(verdict: Verdict) -> tuple[bool, bool]:
    return verdict.should_run, verdict.should_continue_running


ELIGIBLE = (True, True)
KEEP_BUT_NO_NEW_POD = (False, True)
NOT_ELIGIBLE = (False, False)


# nodeName


def test_an_untainted_node_without_requirements_runs_the_daemon_pod() -> None:
    assert node_should_run(SPEC, node()) == Verdict(True, True, None, "")


def test_a_template_node_name_admits_that_node() -> None:
    assert outcome(node_should_run(spec(nodeName="n1"), node("n1"))) == ELIGIBLE


def test_a_template_node_name_excludes_every_other_node() -> None:
    verdict = node_should_run(spec(nodeName="n1"), node("n2"))

    assert outcome(verdict) == NOT_ELIGIBLE
    assert verdict.reason is IneligibleReason.NODE_NAME


# nodeSelector


def test_a_node_with_every_selected_label_is_eligible() -> None:
    selecting = spec(nodeSelector={"disk": "ssd", "zone": "a"})

    assert outcome(node_should_run(selecting, node(disk="ssd", zone="a", extra="x"))) == ELIGIBLE


@pytest.mark.parametrize("labels", [{"zone": "a"}, {"disk": "hdd", "zone": "a"}])
def test_a_node_missing_or_differing_on_a_selected_label_is_not_eligible(
    labels: dict[str, str],
) -> None:
    verdict = node_should_run(spec(nodeSelector={"disk": "ssd", "zone": "a"}), node(**labels))

    assert outcome(verdict) == NOT_ELIGIBLE
    assert verdict.reason is IneligibleReason.NODE_SELECTOR
    assert verdict.detail == "node labels do not match nodeSelector disk=ssd,zone=a"


# required node affinity: operators


@pytest.mark.parametrize(
    ("requirement", "labels", "matches"),
    [
        (expression("disk", "In", "ssd", "nvme"), {"disk": "nvme"}, True),
        (expression("disk", "In", "ssd", "nvme"), {"disk": "hdd"}, False),
        (expression("disk", "In", "ssd"), {}, False),
        (expression("disk", "NotIn", "hdd"), {"disk": "ssd"}, True),
        (expression("disk", "NotIn", "hdd"), {"disk": "hdd"}, False),
        (expression("disk", "NotIn", "hdd"), {}, True),
        (expression("disk", "Exists"), {"disk": ""}, True),
        (expression("disk", "Exists"), {}, False),
        (expression("disk", "DoesNotExist"), {}, True),
        (expression("disk", "DoesNotExist"), {"disk": "ssd"}, False),
        (expression("cpus", "Gt", "8"), {"cpus": "16"}, True),
        (expression("cpus", "Gt", "8"), {"cpus": "8"}, False),
        (expression("cpus", "Gt", "-1"), {"cpus": "+0"}, True),
        (expression("cpus", "Lt", "8"), {"cpus": "4"}, True),
        (expression("cpus", "Lt", "8"), {"cpus": "8"}, False),
        (expression("cpus", "Lt", "8"), {}, False),
    ],
)
def test_each_match_expression_operator_reads_node_labels_like_kubernetes(
    requirement: dict[str, Any], labels: dict[str, str], matches: bool
) -> None:
    verdict = node_should_run(required(labels_term(requirement)), node(**labels))

    assert verdict.should_run is matches


@pytest.mark.parametrize("label", ["many", "1.5", " 4", "4_0", "0x4", "99999999999999999999"])
def test_gt_and_lt_never_match_a_label_that_is_not_a_64_bit_integer(label: str) -> None:
    for operator in ("Gt", "Lt"):
        terms = [labels_term(expression("cpus", operator, "8"))]
        assert not matches_node_selector_terms(terms, node(cpus=label))


@pytest.mark.parametrize(
    "invalid",
    [
        expression("disk", "In"),
        expression("disk", "NotIn"),
        expression("disk", "Exists", "ssd"),
        expression("disk", "DoesNotExist", "ssd"),
        expression("cpus", "Gt", "eight"),
        expression("cpus", "Lt", "1", "2"),
        expression("disk", "Equals", "ssd"),
    ],
)
def test_a_term_with_an_invalid_expression_matches_no_node(invalid: dict[str, Any]) -> None:
    labels = {"disk": "ssd", "cpus": "4"}

    assert not matches_node_selector_terms([labels_term(invalid)], node(**labels))
    assert not matches_node_selector_terms([labels_term(invalid)], node())


def test_an_invalid_term_does_not_stop_another_term_from_matching() -> None:
    terms = [labels_term(expression("disk", "In")), labels_term(expression("disk", "Exists"))]

    assert matches_node_selector_terms(terms, node(disk="ssd"))


@pytest.mark.parametrize(
    ("requirement", "node_name", "matches"),
    [
        (expression("metadata.name", "In", "n1"), "n1", True),
        (expression("metadata.name", "In", "n1"), "n2", False),
        (expression("metadata.name", "NotIn", "n1"), "n1", False),
        (expression("metadata.name", "NotIn", "n1"), "n2", True),
    ],
)
def test_match_fields_compare_the_node_name(
    requirement: dict[str, Any], node_name: str, matches: bool
) -> None:
    assert matches_node_selector_terms([fields_term(requirement)], node(node_name)) is matches


def test_match_fields_do_not_read_node_labels() -> None:
    terms = [fields_term(expression("metadata.name", "In", "n1"))]

    assert not matches_node_selector_terms(terms, node("n2", **{"metadata.name": "n1"}))


@pytest.mark.parametrize(
    "invalid",
    [
        expression("metadata.name", "In", "n1", "n2"),
        expression("metadata.name", "In"),
        expression("metadata.name", "Exists"),
    ],
)
def test_match_fields_take_in_or_not_in_with_exactly_one_value(invalid: dict[str, Any]) -> None:
    assert not matches_node_selector_terms([fields_term(invalid)], node("n1"))


# required node affinity: terms


def test_expressions_and_fields_of_one_term_must_all_match() -> None:
    term = {
        "matchExpressions": [expression("disk", "In", "ssd"), expression("zone", "Exists")],
        "matchFields": [expression("metadata.name", "In", "n1")],
    }

    assert matches_node_selector_terms([term], node("n1", disk="ssd", zone="a"))
    assert not matches_node_selector_terms([term], node("n1", disk="ssd"))
    assert not matches_node_selector_terms([term], node("n2", disk="ssd", zone="a"))


def test_any_one_matching_term_is_enough() -> None:
    terms = [
        labels_term(expression("disk", "In", "ssd")),
        fields_term(expression("metadata.name", "In", "n1")),
    ]

    assert matches_node_selector_terms(terms, node("n1", disk="hdd"))
    assert matches_node_selector_terms(terms, node("n2", disk="ssd"))
    assert not matches_node_selector_terms(terms, node("n2", disk="hdd"))


def test_an_empty_term_matches_no_node() -> None:
    empty: dict[str, Any] = {"matchExpressions": [], "matchFields": []}

    assert not matches_node_selector_terms([{}], node())
    assert not matches_node_selector_terms([empty], node())


def test_required_affinity_with_no_terms_excludes_every_node() -> None:
    verdict = node_should_run(required(), node())

    assert outcome(verdict) == NOT_ELIGIBLE
    assert verdict.reason is IneligibleReason.NODE_AFFINITY


def test_without_required_affinity_every_node_matches() -> None:
    preferred_only = spec(
        affinity={
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": labels_term(expression("disk", "In", "ssd"))}
                ]
            }
        }
    )

    assert outcome(node_should_run(preferred_only, node(disk="hdd"))) == ELIGIBLE
    assert outcome(node_should_run(spec(affinity={"podAffinity": {}}), node())) == ELIGIBLE


def test_a_node_affinity_mismatch_removes_running_pods() -> None:
    verdict = node_should_run(required(labels_term(expression("disk", "In", "ssd"))), node())

    assert outcome(verdict) == NOT_ELIGIBLE
    assert verdict.reason is IneligibleReason.NODE_AFFINITY


def test_node_selector_and_required_affinity_must_both_match() -> None:
    both = required(labels_term(expression("zone", "In", "a")))
    both["nodeSelector"] = {"disk": "ssd"}

    assert outcome(node_should_run(both, node(disk="ssd", zone="a"))) == ELIGIBLE
    assert (
        node_should_run(both, node(disk="ssd", zone="b")).reason is IneligibleReason.NODE_AFFINITY
    )
    assert (
        node_should_run(both, node(disk="hdd", zone="a")).reason is IneligibleReason.NODE_SELECTOR
    )


# taints


def test_an_untolerated_no_schedule_taint_keeps_a_running_pod_but_starts_none() -> None:
    verdict = node_should_run(SPEC, node("n1", Taint("maintenance", "NoSchedule")))

    assert verdict == Verdict(
        False, True, IneligibleReason.UNTOLERATED_TAINT, "maintenance:NoSchedule"
    )


def test_an_untolerated_no_execute_taint_evicts_the_daemon_pod() -> None:
    verdict = node_should_run(SPEC, node("n1", Taint("maintenance", "NoExecute", "now")))

    assert verdict == Verdict(
        False, False, IneligibleReason.UNTOLERATED_TAINT, "maintenance=now:NoExecute"
    )


def test_a_prefer_no_schedule_taint_is_ignored() -> None:
    assert outcome(node_should_run(SPEC, node("n1", Taint("busy", "PreferNoSchedule")))) == ELIGIBLE


def test_an_untolerated_no_execute_taint_wins_over_a_no_schedule_one() -> None:
    tainted = node("n1", Taint("a", "NoSchedule"), Taint("b", "NoExecute"))

    verdict = node_should_run(SPEC, tainted)

    assert outcome(verdict) == NOT_ELIGIBLE
    assert verdict.detail == "b:NoExecute"


def test_the_control_plane_taint_keeps_daemon_pods_off_the_control_plane() -> None:
    verdict = node_should_run(SPEC, node("cp", Taint(CONTROL_PLANE, "NoSchedule")))

    assert outcome(verdict) == KEEP_BUT_NO_NEW_POD
    assert verdict.detail == f"{CONTROL_PLANE}:NoSchedule"


@pytest.mark.parametrize(
    "toleration",
    [
        {"key": CONTROL_PLANE, "operator": "Exists", "effect": "NoSchedule"},
        {"key": CONTROL_PLANE, "operator": "Exists"},
        {"key": CONTROL_PLANE, "effect": "NoSchedule"},
        {"operator": "Exists"},
    ],
)
def test_a_control_plane_toleration_admits_the_control_plane(toleration: dict[str, str]) -> None:
    tolerating = spec(tolerations=[toleration])

    assert (
        outcome(node_should_run(tolerating, node("cp", Taint(CONTROL_PLANE, "NoSchedule"))))
        == ELIGIBLE
    )


def test_a_toleration_for_another_effect_does_not_help() -> None:
    tolerating = spec(
        tolerations=[{"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}]
    )

    verdict = node_should_run(tolerating, node("n1", Taint("maintenance", "NoExecute")))

    assert outcome(verdict) == NOT_ELIGIBLE


def test_an_equal_toleration_needs_the_same_value() -> None:
    tolerating = spec(tolerations=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])

    gpu = node("n1", Taint("dedicated", "NoSchedule", "gpu"))
    db = node("n2", Taint("dedicated", "NoSchedule", "db"))

    assert outcome(node_should_run(tolerating, gpu)) == ELIGIBLE
    assert outcome(node_should_run(tolerating, db)) == KEEP_BUT_NO_NEW_POD


@pytest.mark.parametrize("operator", ["Gt", "Lt"])
def test_comparison_tolerations_tolerate_nothing_while_their_feature_gate_is_off(
    operator: str,
) -> None:
    toleration = Toleration(key="level", operator=operator, value="5", effect="NoSchedule")

    assert not toleration.tolerates(Taint("level", "NoSchedule", "3"))
    assert not toleration.tolerates(Taint("level", "NoSchedule", "7"))


# default daemon tolerations


@pytest.mark.parametrize(
    "taint",
    [
        Taint("node.kubernetes.io/not-ready", "NoExecute"),
        Taint("node.kubernetes.io/unreachable", "NoExecute"),
        Taint("node.kubernetes.io/disk-pressure", "NoSchedule"),
        Taint("node.kubernetes.io/memory-pressure", "NoSchedule"),
        Taint("node.kubernetes.io/pid-pressure", "NoSchedule"),
        Taint("node.kubernetes.io/unschedulable", "NoSchedule"),
    ],
)
def test_daemon_pods_tolerate_node_problem_taints_by_default(taint: Taint) -> None:
    assert outcome(node_should_run(SPEC, node("n1", taint))) == ELIGIBLE


def test_a_not_ready_node_refuses_new_daemon_pods_through_its_no_schedule_taint() -> None:
    # Only not-ready:NoExecute is tolerated by default, as upstream; its NoSchedule twin is not.
    not_ready = node("n1", Taint("node.kubernetes.io/not-ready", "NoSchedule"))

    assert outcome(node_should_run(SPEC, not_ready)) == KEEP_BUT_NO_NEW_POD


def test_network_unavailable_is_tolerated_only_with_host_network() -> None:
    no_network = node("n1", Taint("node.kubernetes.io/network-unavailable", "NoSchedule"))

    assert outcome(node_should_run(SPEC, no_network)) == KEEP_BUT_NO_NEW_POD
    assert outcome(node_should_run(spec(hostNetwork=True), no_network)) == ELIGIBLE


def test_host_network_adds_exactly_the_network_unavailable_toleration() -> None:
    (extra,) = set(default_daemon_tolerations(True)) - set(default_daemon_tolerations(False))

    assert extra == Toleration("node.kubernetes.io/network-unavailable", "Exists", "", "NoSchedule")
    assert len(default_daemon_tolerations(False)) == 6


def test_defaults_follow_the_templates_own_tolerations() -> None:
    own = {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}

    tolerations = with_daemon_tolerations(spec(tolerations=[own]))

    assert tolerations[0] == own
    assert tolerations[1:] == [t.to_dict() for t in default_daemon_tolerations(False)]


def test_a_default_toleration_already_in_the_template_is_not_added_twice() -> None:
    own = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}

    tolerations = with_daemon_tolerations(spec(tolerations=[own]))

    assert tolerations.count(own) == 1
    assert len(tolerations) == 6


def test_a_default_toleration_replaces_the_templates_time_limited_one_in_place() -> None:
    limited = {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    }
    own = {"key": "a", "operator": "Exists"}

    tolerations = with_daemon_tolerations(spec(tolerations=[limited, own]))

    assert tolerations[:2] == [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
        own,
    ]
    assert len(tolerations) == 7


def test_a_broader_template_toleration_does_not_replace_a_default() -> None:
    tolerations = with_daemon_tolerations(spec(tolerations=[{"operator": "Exists"}]))

    assert len(tolerations) == 7


def test_adding_default_tolerations_twice_changes_nothing() -> None:
    once = with_daemon_tolerations(spec(hostNetwork=True))

    assert with_daemon_tolerations(spec(hostNetwork=True, tolerations=once)) == once


def test_adding_default_tolerations_leaves_the_spec_alone() -> None:
    own = {"key": "a", "operator": "Exists"}
    original = spec(tolerations=[own])

    with_daemon_tolerations(original)

    assert original == spec(tolerations=[{"key": "a", "operator": "Exists"}])


# plain data


def test_a_node_is_read_from_its_api_object() -> None:
    body = {
        "metadata": {"name": "n1", "labels": {"disk": "ssd"}},
        "spec": {
            "taints": [
                {"key": "a", "effect": "NoSchedule"},
                {"key": "b", "value": "1", "effect": "NoExecute"},
            ]
        },
    }

    assert NodeInfo.from_body(body) == node(
        "n1", Taint("a", "NoSchedule"), Taint("b", "NoExecute", "1"), disk="ssd"
    )
    assert NodeInfo.from_body({"metadata": {"name": "bare"}}) == node("bare")


def test_a_toleration_without_operator_means_equal() -> None:
    assert Toleration.from_dict({"key": "a", "value": "1"}).operator == "Equal"


def test_a_toleration_dict_omits_empty_fields_but_not_the_operator() -> None:
    assert Toleration(operator="Exists").to_dict() == {"operator": "Exists"}
    assert Toleration("a", "Equal", "1", "NoExecute", 0).to_dict() == {
        "key": "a",
        "operator": "Equal",
        "value": "1",
        "effect": "NoExecute",
        "tolerationSeconds": 0,
    }


def test_compiled_requirements_give_the_same_verdicts_as_node_should_run() -> None:
    template = spec(nodeSelector={"disk": "ssd"}, tolerations=[{"key": "a", "operator": "Exists"}])
    nodes = [node("n1", disk="ssd"), node("n2"), node("n3", Taint("b", "NoExecute"), disk="ssd")]

    requirements = compile_pod_requirements(template)

    assert [requirements.verdict(n) for n in nodes] == [node_should_run(template, n) for n in nodes]


# properties of taints and tolerations

keys = st.sampled_from(["a", "b", CONTROL_PLANE, "node.kubernetes.io/not-ready"])
values = st.sampled_from(["", "1", "x"])
effects = st.sampled_from(EFFECTS)
taints = st.builds(Taint, key=keys, effect=effects, value=values)
tolerations = st.builds(
    Toleration,
    key=st.just("") | keys,
    operator=st.sampled_from(["Equal", "Exists"]),
    value=values,
    effect=st.just("") | effects,
    toleration_seconds=st.none() | st.integers(0, 3600),
)
nodes = st.builds(
    NodeInfo,
    name=st.sampled_from(["n1", "n2"]),
    labels=st.dictionaries(keys, values, max_size=3),
    taints=st.lists(taints, max_size=4).map(tuple),
)
templates = st.fixed_dictionaries(
    {
        "tolerations": st.lists(tolerations.map(Toleration.to_dict), max_size=3),
        "hostNetwork": st.booleans(),
    },
    optional={
        "nodeSelector": st.dictionaries(keys, values, max_size=2),
        "affinity": st.builds(
            lambda key, value: {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [labels_term(expression(key, "In", value))]
                    }
                }
            },
            keys,
            values,
        ),
    },
)


@given(taints)
def test_an_exists_toleration_without_key_or_effect_tolerates_every_taint(taint: Taint) -> None:
    assert Toleration(operator="Exists").tolerates(taint)


@given(taints)
def test_a_toleration_made_from_a_taint_tolerates_it(taint: Taint) -> None:
    assert Toleration(taint.key, "Equal", taint.value, taint.effect).tolerates(taint)


@given(taints, keys)
def test_a_toleration_for_another_key_does_not_tolerate_the_taint(taint: Taint, key: str) -> None:
    assume(key != taint.key)

    assert not Toleration(key, "Exists", "", taint.effect).tolerates(taint)
    assert not Toleration(key, "Equal", taint.value, taint.effect).tolerates(taint)


@given(tolerations, taints, effects)
def test_a_toleration_without_effect_ignores_the_taint_effect(
    toleration: Toleration, taint: Taint, effect: str
) -> None:
    any_effect = dataclasses.replace(toleration, effect="")

    assert any_effect.tolerates(taint) == any_effect.tolerates(
        dataclasses.replace(taint, effect=effect)
    )


@given(tolerations, taints, st.none() | st.integers(0, 3600))
def test_toleration_seconds_do_not_change_what_is_tolerated(
    toleration: Toleration, taint: Taint, seconds: int | None
) -> None:
    timed = dataclasses.replace(toleration, toleration_seconds=seconds)

    assert timed.tolerates(taint) == toleration.tolerates(taint)


@given(tolerations)
def test_a_toleration_survives_a_round_trip_through_its_dict(toleration: Toleration) -> None:
    assert Toleration.from_dict(toleration.to_dict()) == toleration


@given(templates, nodes)
def test_a_node_that_should_run_a_pod_also_keeps_it(
    template: dict[str, Any], info: NodeInfo
) -> None:
    verdict = node_should_run(template, info)

    assert verdict.should_continue_running or not verdict.should_run
    assert (verdict.reason is None) == verdict.should_run


@given(templates, nodes, tolerations)
def test_adding_a_toleration_never_makes_a_node_less_eligible(
    template: dict[str, Any], info: NodeInfo, toleration: Toleration
) -> None:
    before = node_should_run(template, info)
    more = {**template, "tolerations": [*template["tolerations"], toleration.to_dict()]}
    after = node_should_run(more, info)

    assert after.should_run >= before.should_run
    assert after.should_continue_running >= before.should_continue_running
