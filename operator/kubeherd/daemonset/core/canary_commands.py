"""A person's word on a canary: `kubeherd rollout canary validate|pause|unpause|fail` writes
the command annotation, and the pass carries out each value once.

Pure: plain data in, plain data out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from enum import StrEnum

from kubeherd.daemonset.core.canary_state import CanaryPhase, CanaryRule, CanaryState, nodes_text
from kubeherd.daemonset.core.model import Event, NodeRecord

# `kubeherd rollout canary VERB` writes "VERB REVISION-HASH STAMP" here; the pass carries out
# each value once (the canary records the last one it carried out).
CANARY_COMMAND_ANNOTATION = "kubeherd.io/canary-command"


class CanaryVerb(StrEnum):
    VALIDATE = "validate"
    PAUSE = "pause"
    UNPAUSE = "unpause"
    FAIL = "fail"


def parse_command(text: str) -> tuple[CanaryVerb, str] | None:
    """(verb, revision hash) of a canary command annotation; None when it is not one."""
    parts = text.split()
    if len(parts) != 3 or parts[0] not in CanaryVerb.__members__.values():
        return None
    return CanaryVerb(parts[0]), parts[1]


def carry_out(
    command: str,
    state: CanaryState,
    rule: CanaryRule,
    ledger: Mapping[str, NodeRecord],
    now: float,
) -> tuple[CanaryState, list[Event]]:
    """A person's canary command: once per annotation value, for this canary's revision, from
    a phase it applies to; anything else is recorded as seen and does nothing."""
    state = replace(state, command=command)
    parsed = parse_command(command)
    if parsed is None or parsed[1] != state.revision:
        return state, []
    verb, _revision = parsed
    open_ = state.phase in (CanaryPhase.RUNNING, CanaryPhase.PAUSED)
    if verb is CanaryVerb.VALIDATE and open_:
        message = f"{nodes_text(state.nodes)} validated by a person; the rollout goes on"
        passed = replace(state, phase=CanaryPhase.PASSED, reason="Validated", message=message)
        return replace(passed, since=now), [Event("Normal", "CanaryPassed", message)]
    if verb is CanaryVerb.PAUSE and state.phase is CanaryPhase.RUNNING:
        message = "the rollout is paused by a person (kubeherd rollout canary pause)"
        paused = replace(state, phase=CanaryPhase.PAUSED, reason="PausedByUser", message=message)
        return replace(paused, since=now, available_since=None), [
            Event("Normal", "CanaryPaused", message)
        ]
    if verb is CanaryVerb.UNPAUSE and state.phase is CanaryPhase.PAUSED:
        restarts = max(
            (
                pod.restarts
                for name in state.nodes
                if name in ledger
                for pod in ledger[name].active_pods
                if pod.revision == state.revision
            ),
            default=0,
        )
        message = (
            f"the canary is watched again, unpaused by a person; {restarts} restarts so far are "
            "acknowledged"
        )
        running = replace(state, phase=CanaryPhase.RUNNING, reason="", message=message, since=now)
        return replace(running, acknowledged_restarts=restarts), [
            Event("Normal", "CanaryUnpaused", message)
        ]
    if verb is CanaryVerb.FAIL and open_:
        undo = "; the canary nodes get the previous revision back" if rule.rollback else ""
        message = f"the canary is failed by a person{undo}"
        failed = replace(state, phase=CanaryPhase.FAILED, reason="FailedByUser", message=message)
        return replace(failed, since=now, available_since=None, rolled_back=rule.rollback), [
            Event("Warning", "CanaryFailed", message)
        ]
    return state, []
