"""`kubeherd rollout canary`'s decisions with plain data, and the pass carrying a command out."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from kubeherd.cli import build_parser
from kubeherd.daemonset.core.canary_commands import CANARY_COMMAND_ANNOTATION, CanaryVerb
from kubeherd.daemonset.core.canary_state import CanaryPhase, CanaryState
from kubeherd.daemonset.core.model import PodInfo
from kubeherd.daemonset.core.plan import plan_pass
from kubeherd.rollout_canary import annotation_patch, carried_out, command_value
from kubeherd.rollouts import RolloutError, status_verdict
from tests.unit.test_canary import canary_spec, ledger_of, running
from tests.unit.test_passes import given
from tests.unit.test_planning import NOW, pod
from tests.unit.test_rollouts_cli import cds


def with_canary(phase: str, revision: str = "agent-r2") -> dict[str, Any]:
    body = cds(updated=1, reason=f"Canary{phase}")
    body["status"]["updateRevision"] = "agent-r2"
    body["status"]["canary"] = {"revision": revision, "phase": phase}
    return body


def test_a_command_names_the_verb_the_canarys_revision_and_the_moment() -> None:
    value = command_value(with_canary("Running"), CanaryVerb.VALIDATE, 0.0)

    assert value == "validate r2 1970-01-01T00:00:00.000000+00:00"
    assert annotation_patch(value) == {
        "metadata": {"annotations": {CANARY_COMMAND_ANNOTATION: value}}
    }


@pytest.mark.parametrize(
    ("body", "verb", "complaint"),
    [
        (with_canary("Paused"), CanaryVerb.PAUSE, "the canary is Paused; cannot pause it"),
        (with_canary("Running"), CanaryVerb.UNPAUSE, "the canary is Running; cannot unpause"),
        (with_canary("Passed"), CanaryVerb.FAIL, "the canary is Passed; cannot fail it"),
        (with_canary("Running", "agent-r1"), CanaryVerb.PAUSE, "has no canary for its current"),
        (cds(), CanaryVerb.VALIDATE, "has no canary for its current template"),
    ],
)
def test_a_command_the_canary_cannot_take_is_refused_before_anything_is_written(
    body: dict[str, Any], verb: CanaryVerb, complaint: str
) -> None:
    with pytest.raises(RolloutError, match=complaint):
        command_value(body, verb, NOW)


def test_the_command_is_carried_out_once_the_status_records_it() -> None:
    body = with_canary("Paused")

    assert carried_out(body, "pause r2 t") is None
    body["status"]["canary"]["command"] = "pause r2 t"
    assert carried_out(body, "pause r2 t") == "Paused"


def test_the_cli_takes_the_verb_then_the_resource() -> None:
    options = build_parser().parse_args(["rollout", "canary", "unpause", "cds/agent", "-n", "x"])

    assert (options.action, options.verb, options.resource, options.namespace) == (
        "canary",
        "unpause",
        "cds/agent",
        "x",
    )


def test_rollout_status_fails_on_a_failed_canary_and_waits_on_a_paused_one() -> None:
    failed = status_verdict(cds(updated=1, reason="CanaryFailed", message="pod p on node n"))
    paused = status_verdict(cds(updated=1, reason="CanaryPaused"))

    assert failed.failed
    assert failed.message == 'customdaemonset "agent" canary failed: pod p on node n'
    assert paused.message.endswith("have been updated... (canary paused)")
    assert not paused.done
    assert not paused.failed


def told(verb: str, canary: CanaryState, **pods: Any) -> Any:
    body = {"metadata": {"name": "agent", "annotations": {CANARY_COMMAND_ANNOTATION: verb}}}
    spec = canary_spec(autoFail={"rollback": True})
    return plan_pass(
        given(
            spec,
            ledger=ledger_of(**pods),
            rolling=True,
            previous_revision="r1",
            canary=canary,
            body=body,
        )
    )


def test_validate_passes_the_canary_and_the_rollout_goes_on() -> None:
    plan = told("validate r2 t1", running(("b1",)), b1=[pod("pb1", "b1", revision="r2")])

    assert plan.canary.phase is CanaryPhase.PASSED
    assert plan.canary.command == "validate r2 t1"
    assert [(e.type, e.reason) for e in plan.events] == [("Normal", "CanaryPassed")]
    assert len(plan.deletes) == 5


def test_a_command_is_carried_out_once() -> None:
    paused = told("pause r2 t1", running(("b1",)))
    again = told("pause r2 t1", replace(paused.canary, phase=CanaryPhase.RUNNING))

    assert paused.canary.phase is CanaryPhase.PAUSED
    assert paused.canary.reason == "PausedByUser"
    assert again.canary.phase is CanaryPhase.RUNNING
    assert again.events == []


def test_a_command_for_another_revision_does_nothing() -> None:
    plan = told("fail r9 t1", running(("b1",)))

    assert plan.canary.phase is CanaryPhase.RUNNING
    assert plan.events == []


def crashing(restarts: int) -> PodInfo:
    return pod("pb1", "b1", revision="r2", waiting_reason="CrashLoopBackOff", restarts=restarts)


def test_unpause_acknowledges_the_restarts_so_far_and_a_new_one_pauses_again() -> None:
    paused = running(("b1",), phase=CanaryPhase.PAUSED, reason="CrashLoopBackOff")

    unpaused = told("unpause r2 t1", paused, b1=[crashing(restarts=1)])
    assert unpaused.canary.phase is CanaryPhase.RUNNING
    assert unpaused.canary.acknowledged_restarts == 1
    assert [e.reason for e in unpaused.events] == ["CanaryUnpaused"]

    restarted = told("unpause r2 t1", unpaused.canary, b1=[crashing(restarts=2)])
    assert restarted.canary.phase is CanaryPhase.PAUSED
    assert "restarted again after the unpause" in restarted.canary.message


def test_fail_with_rollback_puts_the_previous_revision_back() -> None:
    plan = told("fail r2 t1", running(("b1",)), b1=[pod("pb1", "b1", revision="r2")])

    assert plan.canary.phase is CanaryPhase.FAILED
    assert plan.canary.rolled_back
    assert [d.pod.name for d in plan.deletes] == ["pb1"]
