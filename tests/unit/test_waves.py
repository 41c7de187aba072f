"""Rollout waves, with plain data: rollingUpdate.selector holds nodes on their revision, and
topologyKey takes one failure domain at a time."""

from __future__ import annotations

from typing import Any

from kubeherd.daemonset.core.eligibility import NodeInfo
from kubeherd.daemonset.core.model import NodeRecord, PodInfo
from kubeherd.daemonset.core.nodes import WaveRule, plan_nodes
from kubeherd.daemonset.core.plan import NodeView, plan_pass
from kubeherd.daemonset.core.report import Progress
from kubeherd.daemonset.core.rollout import (
    RolloutStep,
    active_domain,
    nodes_kept_back,
    nodes_outside_wave,
    plan_rolling_update,
)
from kubeherd.daemonset.core.status import RolloutView, WaveView, progressing
from kubeherd.daemonset.core.summary import summarize
from tests.unit.test_passes import given, report_of, rolling, spec_of, stuck_ledger
from tests.unit.test_planning import NOW, SPEC, node, pod

ZONE = "topology.kubernetes.io/zone"
# Two nodes in each of three zones, named so that name order and zone order differ.
ZONES = {"a1": "z-a", "c1": "z-a", "b1": "z-b", "d1": "z-b", "e1": "z-c", "f1": "z-c"}
BY_ZONE = WaveRule(topology_key=ZONE)


def record(info: NodeInfo, pods: list[PodInfo], waves: WaveRule = BY_ZONE) -> NodeRecord:
    result = plan_nodes(SPEC, [info.name], lambda _name: info, lambda _name: pods, waves=waves)
    entry = result.records[info.name]
    assert entry is not None
    return entry


def zoned_ledger(revisions: dict[str, str] | None = None, **pods: list[PodInfo]) -> dict[str, Any]:
    """Every node of ZONES with one available pod of r1, unless `revisions` or `pods` say
    otherwise."""
    revisions = revisions or {}
    return {
        name: record(
            node(name, **{ZONE: zone}),
            pods.get(name, [pod(f"p{name}", name, revision=revisions.get(name, "r1"))]),
        )
        for name, zone in ZONES.items()
    }


def step(
    ledger: dict[str, NodeRecord], rolling_update: dict[str, Any], **options: Any
) -> RolloutStep:
    """The step as plan_pass takes it: the active domain first."""
    domain = active_domain(ledger, "r2", ZONE, frozenset(), 0, NOW)
    return plan_rolling_update(
        ledger, "r2", rolling_update, 0, NOW, set(), domain=domain, **options
    )


def domain_of(
    ledger: dict[str, NodeRecord], kept_back: frozenset[str] = frozenset(), min_ready: int = 0
) -> str | None:
    domain = active_domain(ledger, "r2", ZONE, kept_back, min_ready, NOW)
    return domain.value if domain is not None else None


def changed(result: RolloutStep) -> list[str]:
    return sorted(
        [d.node for d in result.deletes]
        + [u.node for u in result.updates]
        + [c.node for c in result.creates]
    )


def test_a_record_notes_whether_the_selector_matches_and_the_nodes_domain() -> None:
    waves = WaveRule({"matchLabels": {"wave": "1"}}, ZONE)

    inside = record(node("a", wave="1", **{ZONE: "z-a"}), [], waves)
    outside = record(node("b", wave="2"), [], waves)

    assert (inside.in_wave, inside.domain) == (True, "z-a")
    assert (outside.in_wave, outside.domain) == (False, "")
    assert record(node("c"), [], WaveRule()).in_wave


def test_the_selector_holds_the_nodes_it_does_not_match_on_their_revision() -> None:
    waves = WaveRule({"matchExpressions": [{"key": "wave", "operator": "In", "values": ["1"]}]})
    ledger = {
        name: record(node(name, wave=wave), [pod(f"p{name}", name)], waves)
        for name, wave in (("a", "1"), ("b", "2"), ("c", "1"), ("d", "2"))
    }

    result = plan_rolling_update(ledger, "r2", {"maxUnavailable": 4}, 0, NOW, set())

    assert changed(result) == ["a", "c"]
    # The held nodes' old pods keep the update going: a node relabelled into the wave needs a
    # step too.
    assert result.outdated
    assert nodes_outside_wave(ledger, "r2", frozenset()) == 2


def test_held_nodes_still_count_for_max_unavailable() -> None:
    waves = WaveRule({"matchLabels": {"wave": "1"}})
    ledger = {
        "a": record(node("a", wave="1"), [pod("pa", "a")], waves),
        "b": record(node("b"), [pod("pb", "b", ready=False)], waves),
    }

    result = plan_rolling_update(ledger, "r2", {"maxUnavailable": 1}, 0, NOW, set())

    assert result.deletes == []


def test_only_the_first_zone_changes_while_it_has_old_pods() -> None:
    result = step(zoned_ledger(), {"maxUnavailable": 6})

    assert changed(result) == ["a1", "c1"]


def test_the_next_zone_waits_for_a_new_pod_that_is_not_available_yet() -> None:
    ledger = zoned_ledger(
        {"a1": "r2"}, c1=[pod("pc1", "c1", revision="r2", ready=False, phase="Pending")]
    )

    result = step(ledger, {"maxUnavailable": 6})

    assert changed(result) == []
    assert result.outdated


def test_the_next_zone_starts_once_the_first_runs_only_available_new_pods() -> None:
    ledger = zoned_ledger({"a1": "r2", "c1": "r2"})

    result = step(ledger, {"maxUnavailable": 6})

    assert changed(result) == ["b1", "d1"]
    domain = active_domain(ledger, "r2", ZONE, frozenset(), 0, NOW)
    assert domain is not None
    assert domain.text == f"{ZONE}=z-b (2 of 3)"


def test_min_ready_seconds_hold_the_next_zone() -> None:
    ledger = zoned_ledger({"a1": "r2"}, c1=[pod("pc1", "c1", revision="r2", ready_since=NOW - 5)])

    assert domain_of(ledger, min_ready=30) == "z-a"
    assert domain_of(ledger, min_ready=0) == "z-b"


def test_nodes_without_the_label_go_last() -> None:
    ledger = zoned_ledger(dict.fromkeys(ZONES, "r2"))
    ledger["0-bare"] = record(node("0-bare"), [pod("pbare", "0-bare")])
    ledger["z-zone"] = record(node("z-zone", **{ZONE: "z-z"}), [pod("pz", "z-zone")])

    assert changed(step(ledger, {"maxUnavailable": 6})) == ["z-zone"]
    ledger["z-zone"] = record(
        node("z-zone", **{ZONE: "z-z"}), [pod("pz2", "z-zone", revision="r2")]
    )
    assert changed(step(ledger, {"maxUnavailable": 6})) == ["0-bare"]
    domain = active_domain(ledger, "r2", ZONE, frozenset(), 0, NOW)
    assert domain is not None
    assert domain.text == f"nodes without {ZONE} (5 of 5)"


def test_a_zone_whose_nodes_the_partition_keeps_back_is_done() -> None:
    ledger = zoned_ledger()
    kept = nodes_kept_back(ledger, "r2", 4)

    # The partition keeps c1 of zone z-a back: a1 alone makes z-a done.
    assert kept == {"c1", "d1", "e1", "f1"}
    assert domain_of(ledger, kept) == "z-a"
    done = zoned_ledger({"a1": "r2"})
    assert domain_of(done, nodes_kept_back(done, "r2", 4)) == "z-b"
    assert domain_of(done) == "z-a"


def test_a_surge_update_starts_new_pods_in_the_first_zone_only() -> None:
    result = step(zoned_ledger(), {"maxSurge": 6, "maxUnavailable": 0})

    assert changed(result) == ["a1", "c1"]


def test_a_surging_node_of_the_zone_holds_the_next_one() -> None:
    ledger = zoned_ledger(
        {"a1": "r2"},
        c1=[pod("pc1", "c1"), pod("pc1-new", "c1", revision="r2", ready=False)],
    )

    assert changed(step(ledger, {"maxSurge": 6, "maxUnavailable": 0})) == []


def test_an_in_place_update_goes_zone_by_zone_too() -> None:
    ledger = zoned_ledger({"a1": "r2", "c1": "r2"})

    result = step(ledger, {"maxUnavailable": 6}, in_place_from=frozenset({"r1"}))

    assert [u.node for u in result.updates] == ["b1", "d1"]
    assert result.deletes == []


def test_the_pass_reads_the_waves_from_the_spec_and_names_the_zone() -> None:
    spec = spec_of(**rolling(maxUnavailable=6, topologyKey=ZONE))
    dirty = {
        name: NodeView(node(name, **{ZONE: zone}), (pod(f"p{name}", name),))
        for name, zone in ZONES.items()
    }

    plan = plan_pass(given(spec, dirty=dirty, rolling=True))

    assert sorted(delete.node for delete in plan.deletes) == ["a1", "c1"]
    assert plan.waves == WaveView(domain=f"{ZONE}=z-a (1 of 3)")


def test_progressing_names_the_zone_being_updated() -> None:
    ledger = zoned_ledger({"a1": "r2"})
    view = RolloutView(number=2, waves=WaveView(domain=f"{ZONE}=z-a (1 of 3)"))

    status, reason, message = progressing(summarize(ledger, "r2", 0, NOW), view)

    assert (status, reason) == ("True", "RollingUpdate")
    assert message.endswith(f"; updating {ZONE}=z-a (1 of 3)")


def test_a_wave_the_selector_holds_ends_as_wave_rolled_out_not_stuck() -> None:
    waves = WaveRule({"matchLabels": {"wave": "1"}})
    ledger = {
        "a": record(node("a", wave="1"), [pod("pa", "a", revision="r2")], waves),
        "b": record(node("b"), [pod("pb", "b")], waves),
    }
    view = RolloutView(number=2, waves=WaveView(nodes_outside_wave(ledger, "r2", frozenset())))

    status, reason, message = progressing(summarize(ledger, "r2", 0, NOW), view)

    assert (status, reason) == ("True", "WaveRolledOut")
    assert (
        message
        == "1 of 2 eligible nodes run revision 2; rollingUpdate.selector keeps 1 on their revision"
    )


def test_a_stuck_rollout_by_zone_says_which_zone_it_halts_in() -> None:
    spec = spec_of(progressDeadlineSeconds=60, **rolling(topologyKey=ZONE))
    waves = WaveView(domain=f"{ZONE}=z-a (1 of 3)")

    result = report_of(
        spec, ledger=stuck_ledger(), progress=Progress("r2", 1, 1, NOW - 100), waves=waves
    )

    progressing = next(c for c in result.status["conditions"] if c["type"] == "Progressing")
    assert progressing["reason"] == "ProgressDeadlineExceeded"
    assert f"halts at maxUnavailable 1 in {ZONE}=z-a (1 of 3); " in progressing["message"]
