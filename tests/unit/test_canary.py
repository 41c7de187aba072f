"""A rollout's canary, with plain data: which nodes go first, what pauses or fails it, the
rollback, and the rollout going on once it passed."""

from __future__ import annotations

from typing import Any

import pytest

from kubeherd.daemonset.core.canary import choose_nodes
from kubeherd.daemonset.core.canary_state import CanaryPhase, CanaryRule, CanaryState
from kubeherd.daemonset.core.model import NodeRecord, PodInfo
from kubeherd.daemonset.core.nodes import NO_WAVES, WaveRule
from kubeherd.daemonset.core.plan import NodeView, PassPlan, plan_pass
from kubeherd.daemonset.core.status import RolloutView, progressing
from kubeherd.daemonset.core.summary import summarize
from tests.unit.test_passes import given, report_of, rolling, spec_of
from tests.unit.test_planning import NOW, node, pod
from tests.unit.test_waves import ZONE, ZONES, record

NAMES = sorted(ZONES)
RULE = CanaryRule()


def ledger_of(
    revisions: dict[str, str] | None = None, waves: WaveRule = NO_WAVES, **pods: Any
) -> dict[str, NodeRecord]:
    """Every node of ZONES with one available pod of r1, unless `revisions` or `pods` say
    otherwise."""
    revisions = revisions or {}
    return {
        name: record(
            node(name, **{ZONE: zone}, pool="big" if name in ("d1", "e1") else "small"),
            pods.get(name, [pod(f"p{name}", name, revision=revisions.get(name, "r1"))]),
            waves,
        )
        for name, zone in ZONES.items()
    }


def running(nodes: tuple[str, ...], **fields: Any) -> CanaryState:
    return CanaryState("r2", "r1", nodes, **{"since": NOW - 100, **fields})


def canary_spec(**canary: Any) -> Any:
    return spec_of(**rolling(maxUnavailable=6, canary=canary))


def pass_with(
    spec: Any, ledger: dict[str, NodeRecord], canary: CanaryState | None = None
) -> PassPlan:
    return plan_pass(
        given(spec, ledger=ledger, rolling=True, previous_revision="r1", canary=canary)
    )


def changed(plan: PassPlan) -> list[str]:
    return sorted({d.node for d in plan.deletes} | {c.node for c in plan.creates})


def test_the_canary_nodes_are_the_first_by_name_and_stay_chosen() -> None:
    ledger = ledger_of()

    assert choose_nodes(ledger, 2, "r2") == ("a1", "b1")
    assert choose_nodes(ledger, 2, "r2", kept=("f1",)) == ("a1", "f1")


def test_nodes_already_running_the_new_revision_are_chosen_first() -> None:
    assert choose_nodes(ledger_of({"e1": "r2"}), 1, "r2") == ("e1",)


def test_the_canary_spreads_over_the_anti_affinity_keys_while_it_can() -> None:
    spread = WaveRule(canary_keys=(ZONE,))

    # a1 and c1 share zone z-a: the second canary node is b1, of z-b.
    assert choose_nodes(ledger_of(waves=spread), 2, "r2") == ("a1", "b1")
    # Four nodes over three zones: one zone gets two.
    assert choose_nodes(ledger_of(waves=spread), 4, "r2") == ("a1", "b1", "c1", "e1")


def test_the_canary_is_chosen_among_the_node_selectors_nodes_only() -> None:
    pool = WaveRule(canary_selector={"matchLabels": {"pool": "big"}})

    assert choose_nodes(ledger_of(waves=pool), 3, "r2") == ("d1", "e1")


def test_a_rollout_starts_with_its_canary_and_the_others_keep_the_previous_revision() -> None:
    plan = pass_with(canary_spec(replicas=2), ledger_of())

    assert plan.canary is not None
    assert (plan.canary.nodes, plan.canary.phase) == (("a1", "b1"), CanaryPhase.RUNNING)
    assert changed(plan) == ["a1", "b1"]
    assert [(e.type, e.reason) for e in plan.events] == [("Normal", "CanaryStarted")]
    assert "canary nodes a1, b1" in plan.events[0].message
    assert plan.rolling


def test_a_percentage_of_replicas_rounds_up() -> None:
    plan = pass_with(canary_spec(replicas="20%"), ledger_of())

    assert plan.canary is not None
    assert plan.canary.nodes == ("a1", "b1")


def test_a_node_joining_during_the_canary_gets_the_previous_revision() -> None:
    ledger = ledger_of({"a1": "r2"})
    dirty = {"g1": NodeView(node("g1"), ())}

    plan = plan_pass(
        given(
            canary_spec(),
            ledger=ledger,
            dirty=dirty,
            rolling=True,
            previous_revision="r1",
            canary=running(("a1",)),
        )
    )

    assert [(c.node, c.revision) for c in plan.creates] == [("g1", "r1")]


@pytest.mark.parametrize(
    ("trouble", "reason"),
    [
        ({"waiting_reason": "CrashLoopBackOff"}, "CrashLoopBackOff"),
        ({"waiting_reason": "ImagePullBackOff", "ready": False}, "ImagePullBackOff"),
        ({"terminated_reason": "OOMKilled"}, "OOMKilled"),
        ({"restarts": 3}, "Restarts"),
    ],
)
def test_trouble_in_a_canary_pod_pauses_the_rollout_naming_the_pod_and_node(
    trouble: dict[str, Any], reason: str
) -> None:
    sick = pod("pb1", "b1", revision="r2", **trouble)
    ledger = ledger_of({"a1": "r2"}, b1=[sick])

    plan = pass_with(canary_spec(replicas=2), ledger, running(("a1", "b1")))

    assert plan.canary is not None
    assert (plan.canary.phase, plan.canary.reason) == (CanaryPhase.PAUSED, reason)
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "CanaryPaused")]
    assert "pod pb1 on node b1" in plan.events[0].message
    assert changed(plan) == []


def test_restarts_up_to_the_limit_do_not_pause() -> None:
    ledger = ledger_of(b1=[pod("pb1", "b1", revision="r2", restarts=2)])

    plan = pass_with(canary_spec(), ledger, running(("b1",)))

    assert plan.canary is not None
    assert plan.canary.phase is CanaryPhase.RUNNING


def test_a_paused_canary_changes_no_pod_and_posts_no_second_event() -> None:
    sick = pod("pb1", "b1", revision="r2", waiting_reason="CrashLoopBackOff")
    paused = running(("b1",), phase=CanaryPhase.PAUSED, reason="CrashLoopBackOff")

    plan = pass_with(canary_spec(), ledger_of(b1=[sick]), paused)

    assert plan.canary == paused
    assert (plan.events, changed(plan)) == ([], [])


def test_restarts_beyond_auto_fail_fail_the_canary_and_stop_the_rollout() -> None:
    sick = pod(
        "pb1", "b1", revision="r2", ready=False, waiting_reason="CrashLoopBackOff", restarts=6
    )

    plan = pass_with(canary_spec(), ledger_of(b1=[sick]), running(("b1",)))

    assert plan.canary is not None
    assert (plan.canary.phase, plan.canary.reason) == (CanaryPhase.FAILED, "CrashLoopBackOff")
    assert not plan.canary.rolled_back
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "CanaryFailed")]
    assert "restarted 6 times, more than autoFail.maxRestarts 5" in plan.events[0].message
    assert changed(plan) == []


def test_a_failed_canary_with_rollback_gets_the_previous_revision_back() -> None:
    spec = canary_spec(autoFail={"maxRestarts": 1, "rollback": True})
    sick = pod("pb1", "b1", revision="r2", ready=False, restarts=2)

    failing = pass_with(spec, ledger_of(b1=[sick]), running(("b1",)))
    assert failing.canary is not None
    assert failing.canary.rolled_back
    assert [d.pod.name for d in failing.deletes] == ["pb1"]

    # The next pass, the old pod gone: b1 gets a pod of r1 again, and nothing else changes.
    gone = {"b1": NodeView(node("b1", **{ZONE: ZONES["b1"]}), ())}
    after = plan_pass(
        given(
            spec,
            ledger=ledger_of(),
            dirty=gone,
            rolling=True,
            previous_revision="r1",
            canary=failing.canary,
        )
    )
    assert [(c.node, c.revision) for c in after.creates] == [("b1", "r1")]
    assert after.events == []


def test_a_healthy_canary_passes_after_its_duration_and_the_rollout_goes_on() -> None:
    spec = canary_spec(durationSeconds=300)
    healthy = pod("pb1", "b1", revision="r2", ready_since=NOW - 200)

    watched = pass_with(spec, ledger_of(b1=[healthy]), running(("b1",)))
    assert watched.canary is not None
    assert (watched.canary.phase, watched.canary.available_since) == (
        CanaryPhase.RUNNING,
        NOW - 200,
    )
    assert changed(watched) == []

    later = pod("pb1", "b1", revision="r2", ready_since=NOW - 301)
    passed = pass_with(spec, ledger_of(b1=[later]), watched.canary)
    assert passed.canary is not None
    assert passed.canary.phase is CanaryPhase.PASSED
    assert [(e.type, e.reason) for e in passed.events] == [("Normal", "CanaryPassed")]
    assert changed(passed) == ["a1", "c1", "d1", "e1", "f1"]


def test_the_report_wakes_the_pass_when_the_canarys_duration_ends() -> None:
    spec = canary_spec(durationSeconds=300)
    canary = running(("b1",), available_since=NOW - 200)

    result = report_of(spec, ledger=ledger_of({"b1": "r2"}), canary=canary)

    assert result.canary_check_at == pytest.approx(NOW + 100.5)
    assert result.status["canary"]["phase"] == "Running"
    progressing_condition = next(
        c for c in result.status["conditions"] if c["type"] == "Progressing"
    )
    assert progressing_condition["reason"] == "CanaryRunning"


@pytest.mark.parametrize(
    ("phase", "status", "reason"),
    [
        (CanaryPhase.PAUSED, "False", "CanaryPaused"),
        (CanaryPhase.FAILED, "False", "CanaryFailed"),
    ],
)
def test_progressing_says_the_canary_stopped_the_rollout(
    phase: CanaryPhase, status: str, reason: str
) -> None:
    canary = running(("b1",), phase=phase, reason="CrashLoopBackOff", message="pod pb1 on node b1")
    ledger = ledger_of({"b1": "r2"})
    view = RolloutView(number=2, canary=canary.to_status("agent"))

    assert progressing(summarize(ledger, "r2", 0, NOW), view) == (
        status,
        reason,
        "pod pb1 on node b1",
    )


def test_the_status_records_the_canary_and_a_restart_reads_it_back() -> None:
    canary = running(
        ("b1", "d1"),
        phase=CanaryPhase.FAILED,
        reason="OOMKilled",
        message="m",
        rolled_back=True,
    )

    status = canary.to_status("agent")

    assert (status["revision"], status["stableRevision"]) == ("agent-r2", "agent-r1")
    assert status["availableSince"] is None  # a merge patch removes what was recorded
    assert CanaryState.from_status({"canary": status}, "agent") == canary


def test_pod_restarts_count_since_the_revision_started_in_the_pod() -> None:
    body = {
        "metadata": {
            "name": "p",
            "labels": {"controller-revision-hash": "r2"},
            "annotations": {
                "kubeherd.io/in-place-update": '{"revision": "r2", "restartCounts": {"a": 4}}'
            },
        },
        "status": {
            "containerStatuses": [
                # Updated in place from 4 restarts: the update's own restart is not counted.
                {"name": "a", "restartCount": 7, "state": {"running": {}}},
                {
                    "name": "b",
                    "restartCount": 1,
                    "lastState": {"terminated": {"reason": "OOMKilled"}},
                },
            ]
        },
    }

    info = PodInfo.from_body(body)

    assert (info.restarts, info.terminated_reason) == (2 + 1, "OOMKilled")


def test_the_canary_rule_reads_the_apis_defaults_and_switches() -> None:
    assert CanaryRule.of({}) == CanaryRule(1, 600, 2, 5, False, 600)
    off = CanaryRule.of({"autoPause": {"enabled": False}, "autoFail": {"enabled": False}})
    assert (off.pause_restarts, off.fail_restarts, off.slow_start) == (None, None, None)


def test_a_rollout_without_a_previous_revision_has_no_canary() -> None:
    updated = ledger_of(dict.fromkeys(NAMES, "r2"))

    plan = plan_pass(given(canary_spec(), ledger=updated, rolling=True))

    assert plan.canary is None


def test_a_canary_pod_not_available_within_the_slow_start_pauses_the_rollout() -> None:
    spec = canary_spec(autoPause={"maxSlowStartSeconds": 120})
    # Created 100 s before NOW, then 200 s before; the canary started 300 s before.
    young = pod("pb1", "b1", revision="r2", ready=False, created="1970-01-12T13:45:00Z")
    old = pod("pb1", "b1", revision="r2", ready=False, created="1970-01-12T13:43:20Z")
    started = running(("b1",), since=NOW - 300)

    waiting = pass_with(spec, ledger_of(b1=[young]), started)
    assert waiting.canary is not None
    assert waiting.canary.phase is CanaryPhase.RUNNING
    result = report_of(spec, ledger=ledger_of(b1=[young]), canary=started)
    assert result.canary_check_at == pytest.approx(NOW + 20.5)

    later = pass_with(spec, ledger_of(b1=[old]), started)
    assert later.canary is not None
    assert (later.canary.phase, later.canary.reason) == (CanaryPhase.PAUSED, "SlowStart")
    assert "node b1 has no available pod of the new revision 120s after" in later.canary.message


def test_a_canary_node_that_leaves_is_replaced() -> None:
    ledger = ledger_of()
    del ledger["b1"]

    plan = pass_with(canary_spec(), ledger, running(("b1",)))

    assert plan.canary is not None
    assert plan.canary.nodes == ("a1",)
    assert changed(plan) == ["a1"]
