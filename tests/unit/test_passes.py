"""The pure pass and report of the CustomDaemonSet controller: plain data in, one plan out."""

from __future__ import annotations

from typing import Any

import pytest

from kubeherd.daemonset.core.eligibility import ELIGIBLE
from kubeherd.daemonset.core.model import ExpectedPod, NodeRecord
from kubeherd.daemonset.core.plan import (
    EXPECTATION_TIMEOUT,
    NodeView,
    PassInput,
    PlannedCreate,
    plan_pass,
)
from kubeherd.daemonset.core.report import Progress, ReportInput, report
from kubeherd.daemonset.core.revisions import Revision
from kubeherd.daemonset.core.spec import DaemonSetSpec, parse_spec
from kubeherd.meta import iso_time
from tests.unit.test_planning import NOW, node, pod

TEMPLATE: dict[str, Any] = {"spec": {"containers": [{"name": "agent", "image": "agent:2"}]}}


def spec_of(**fields: Any) -> DaemonSetSpec:
    return parse_spec({"metadata": {"generation": 2}, "spec": {"template": TEMPLATE, **fields}})


def rolling(**rolling_update: Any) -> dict[str, Any]:
    return {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": rolling_update}}


@pytest.mark.parametrize(
    ("strategy", "surge"),
    [
        ({}, False),
        (rolling(maxSurge=1), True),
        (rolling(maxSurge="10%"), True),
        (rolling(maxSurge=0), False),
        (rolling(maxSurge="0%"), False),
        (rolling(maxSurge="0"), False),
        ({"updateStrategy": {"type": "OnDelete", "rollingUpdate": {"maxSurge": 1}}}, False),
    ],
)
def test_surge_is_on_as_the_native_controller_decides(
    strategy: dict[str, Any], surge: bool
) -> None:
    assert spec_of(**strategy).surge is surge


def test_the_spec_reads_the_apis_defaults() -> None:
    spec = spec_of()
    assert (spec.rolling_update, spec.partition, spec.paused) == (True, 0, False)
    assert (spec.min_ready_seconds, spec.history_limit, spec.progress_deadline) == (0, 10, 600)
    assert spec.max_unavailable_for(10) == 1
    assert spec.budget_text == "maxUnavailable 1"
    assert spec_of(**rolling(maxSurge="50%")).budget_text == "maxSurge 50%"


def given(spec: DaemonSetSpec, **fields: Any) -> PassInput:
    defaults: dict[str, Any] = {
        "spec": spec,
        "revision": "r2",
        "previous_revision": None,
        "dirty": {},
        "ledger": {},
        "expected": {},
        "failed_pod_not_before": {},
        "rollout_deleted": frozenset(),
        "rolling": False,
        "now": NOW,
    }
    return PassInput(**{**defaults, **fields})


def test_a_pod_the_watch_shows_ends_its_expectation_and_a_lost_one_times_out() -> None:
    expected = {
        "a": ExpectedPod("agent-aaaaa", "r2", NOW - 1),
        "b": ExpectedPod("agent-bbbbb", "r2", NOW - EXPECTATION_TIMEOUT - 1),
        "c": ExpectedPod("agent-ccccc", "r2", NOW - 1),
    }
    dirty = {
        "a": NodeView(node("a"), (pod("agent-aaaaa", "a", revision="r2"),)),
        "b": NodeView(node("b"), ()),
        "c": NodeView(node("c"), ()),
    }

    plan = plan_pass(given(spec_of(), dirty=dirty, expected=expected))

    assert plan.seen == {"a", "b"}
    assert [(name, pod.name) for name, pod in plan.lost] == [("b", "agent-bbbbb")]
    # b's create never took effect: it gets one again; c's is still on its way.
    assert plan.creates == [PlannedCreate("b", "r2")]


def test_a_node_a_partition_keeps_back_gets_the_previous_revision() -> None:
    ledger = {
        name: NodeRecord(ELIGIBLE, (pod(f"p-{name}", name, revision="r2"),))
        for name in ("n1", "n2")
    }
    dirty = {"n3": NodeView(node("n3"), ())}
    spec = spec_of(**rolling(partition=1))

    plan = plan_pass(given(spec, dirty=dirty, ledger=ledger, previous_revision="r1"))

    assert plan.kept_back == {"n3"}
    assert plan.creates == [PlannedCreate("n3", "r1")]


def test_a_rollout_spends_its_budget_once_while_its_delete_is_in_flight() -> None:
    ledger = {
        name: NodeRecord(ELIGIBLE, (pod(f"p-{name}", name, revision="r1"),))
        for name in ("n1", "n2", "n3")
    }
    spec = spec_of(**rolling(maxUnavailable=1))

    first = plan_pass(given(spec, ledger=ledger, rolling=True))
    second = plan_pass(
        given(spec, ledger=ledger, rolling=True, rollout_deleted=first.rollout_deleted)
    )

    assert [delete.node for delete in first.deletes] == ["n1"]
    assert first.rollout_deleted == {"uid-p-n1"}
    assert second.deletes == []
    assert second.rolling


def test_a_paused_rollout_deletes_nothing() -> None:
    ledger = {"n1": NodeRecord(ELIGIBLE, (pod("p-n1", "n1", revision="r1"),))}

    plan = plan_pass(given(spec_of(paused=True), ledger=ledger, rolling=True))

    assert plan.deletes == []


def report_of(spec: DaemonSetSpec, **fields: Any) -> Any:
    defaults: dict[str, Any] = {
        "name": "agent",
        "spec": spec,
        "ledger": {},
        "revision": "r2",
        "revisions": (Revision(name="agent-r2", uid="uid-r2", hash="r2", number=2, template={}),),
        "collision_count": 0,
        "kept_back": 0,
        "previous": {},
        "progress": None,
        "create_failure": None,
        "template_problem": None,
        "now": NOW,
    }
    return report(ReportInput(**{**defaults, **fields}))


def stuck_ledger() -> dict[str, NodeRecord]:
    return {
        "n1": NodeRecord(ELIGIBLE, (pod("p-n1", "n1", revision="r1"),)),
        "n2": NodeRecord(ELIGIBLE, (pod("new", "n2", revision="r2", ready=False),)),
    }


def test_after_a_restart_the_deadline_runs_from_the_recorded_progress() -> None:
    spec = spec_of(progressDeadlineSeconds=60)
    recorded = {
        "updatedNumberScheduled": 1,
        "numberAvailable": 1,
        "conditions": [
            {
                "type": "Progressing",
                "status": "True",
                "reason": "RollingUpdate",
                "observedGeneration": 2,
                "lastUpdateTime": iso_time(NOW - 100),
            }
        ],
    }

    result = report_of(spec, ledger=stuck_ledger(), previous=recorded)

    assert result.progress == Progress("r2", 1, 1, NOW - 100)
    progressing = next(c for c in result.status["conditions"] if c["type"] == "Progressing")
    assert progressing["reason"] == "ProgressDeadlineExceeded"
    assert progressing["message"].startswith("revision 2 made no progress for 60s")
    assert "the update halts at maxUnavailable 1" in progressing["message"]
    assert "new on n2 (not ready)" in progressing["message"]
    assert [(e.type, e.reason) for e in result.events] == [("Warning", "RolloutStuck")]


def test_a_rollout_in_time_asks_to_be_woken_at_its_deadline() -> None:
    result = report_of(spec_of(progressDeadlineSeconds=60), ledger=stuck_ledger())

    assert result.deadline_check_at == pytest.approx(NOW + 60.5)
    assert result.events == []


def test_nothing_to_write_when_the_status_already_says_it() -> None:
    first = report_of(spec_of(), ledger=stuck_ledger())
    again = report_of(
        spec_of(), ledger=stuck_ledger(), previous=first.status, progress=first.progress
    )

    assert first.status is not None
    assert again.status is None
