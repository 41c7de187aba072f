"""The CustomDaemonSet status: the native DaemonSet's counters, plus why nodes have no pod and
conditions a user can act on. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubeherd.daemonset.core.canary_state import nodes_text
from kubeherd.daemonset.core.summary import Summary
from kubeherd.meta import condition, conditions_by_type

# The condition types this controller sets; it leaves every other type alone.
OWN_CONDITION_TYPES = frozenset(
    {"Available", "Progressing", "ReplicaFailure", "TemplateValid", "SelectorValid"}
)


@dataclass(frozen=True)
class WaveView:
    """Where rollingUpdate.selector and topologyKey hold a rollout."""

    # Eligible nodes the selector keeps on an older revision.
    outside_wave: int = 0
    # The failure domain being updated, as the message names it ("" when none).
    domain: str = ""


@dataclass(frozen=True)
class RolloutView:
    """Where the rollout of the current template stands, beyond the counters."""

    update_revision: str = ""
    # The revision number users see in `kubeherd rollout history`; 0 while unknown.
    number: int = 0
    current_revision: str = ""
    collision_count: int = 0
    on_delete: bool = False
    paused: bool = False
    # Eligible nodes a partition keeps on the previous revision.
    kept_back: int = 0
    waves: WaveView = field(default_factory=WaveView)
    # Why the rollout counts as stuck (no progress within progressDeadlineSeconds), or "".
    stuck: str = ""
    # When the rollout last made progress (RFC 3339), or "".
    progress_time: str = ""
    # status.canary of the current template's canary (`canary.CanaryState.to_status`).
    canary: Mapping[str, Any] | None = None

    @property
    def name(self) -> str:
        return f"revision {self.number}" if self.number else "the current template"


def progressing(summary: Summary, rollout: RolloutView) -> tuple[str, str, str]:
    """The Progressing condition: (status, reason, message)."""
    desired, updated, available = summary.desired, summary.updated, summary.available
    running = f"{updated} of {desired} eligible nodes run {rollout.name}"
    if updated >= desired and available >= desired:
        return (
            "True",
            "RolloutComplete",
            f"{rollout.name} runs on all {desired} eligible nodes and is available",
        )
    canary = rollout.canary
    if canary is not None and canary.get("phase") != "Passed":
        return _canary_progressing(canary, running)
    outside_wave = rollout.waves.outside_wave
    held = rollout.kept_back + outside_wave
    if held and updated + held >= desired and available >= desired:
        kept = [running]
        if outside_wave:
            kept.append(f"rollingUpdate.selector keeps {outside_wave} on their revision")
        if rollout.kept_back:
            kept.append(f"the partition keeps {rollout.kept_back} on the previous revision")
        # A wave done is its own milestone: the user moves the selector on to the next one.
        reason = "WaveRolledOut" if outside_wave else "PartitionRolledOut"
        return ("True", reason, "; ".join(kept))
    if rollout.paused:
        return ("False", "Paused", f"the rollout is paused: {running}")
    if rollout.on_delete:
        return (
            "False",
            "OnDelete",
            f"{running}; with OnDelete the others change when their pod is deleted",
        )
    if rollout.stuck:
        return ("False", "ProgressDeadlineExceeded", rollout.stuck)
    domain = f"; updating {rollout.waves.domain}" if rollout.waves.domain else ""
    return (
        "True",
        "RollingUpdate",
        f"{running}; {available} of {desired} are available{domain}",
    )


def _canary_progressing(canary: Mapping[str, Any], running: str) -> tuple[str, str, str]:
    phase = canary.get("phase")
    if phase == "Paused":
        return ("False", "CanaryPaused", str(canary.get("message")))
    if phase == "Failed":
        return ("False", "CanaryFailed", str(canary.get("message")))
    nodes = nodes_text(list(canary.get("nodes") or ()))
    since = canary.get("availableSince")
    watching = f"available since {since}, watched" if since else "waiting for its pods"
    return ("True", "CanaryRunning", f"{nodes}: {watching}; {running}")


def build_status(
    summary: Summary,
    *,
    generation: int,
    node_selector: str,
    previous: Mapping[str, Any],
    create_failure: str | None,
    now: str,
    rollout: RolloutView,
    template_problem: str | None = None,
) -> dict[str, Any]:
    conditions_before = conditions_by_type(previous)
    if summary.available == summary.desired:
        available = (
            "True",
            "AllNodesAvailable",
            f"{summary.available} of {summary.desired} eligible nodes run an available daemon pod",
        )
    else:
        available = (
            "False",
            "NodesUnavailable",
            f"{summary.unavailable} of {summary.desired} "
            "eligible nodes have no available daemon pod yet",
        )
    progressing_condition = condition(
        conditions_before, "Progressing", *progressing(summary, rollout), generation, now
    )
    if rollout.progress_time:
        progressing_condition["lastUpdateTime"] = rollout.progress_time
    conditions = [
        condition(conditions_before, "Available", *available, generation, now),
        progressing_condition,
    ]
    if create_failure:
        conditions.append(
            condition(
                conditions_before,
                "ReplicaFailure",
                "True",
                "FailedCreate",
                create_failure,
                generation,
                now,
            )
        )
    if template_problem:
        conditions.append(
            condition(
                conditions_before,
                "TemplateValid",
                "False",
                "InvalidTemplate",
                template_problem,
                generation,
                now,
            )
        )
    # Conditions someone else set (a policy engine, a user's tooling) stay as they are.
    conditions += [
        dict(c) for type_, c in conditions_before.items() if type_ not in OWN_CONDITION_TYPES
    ]
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "desiredNumberScheduled": summary.desired,
        "currentNumberScheduled": summary.current,
        "numberMisscheduled": summary.misscheduled,
        "numberReady": summary.ready,
        "numberAvailable": summary.available,
        "numberUnavailable": summary.unavailable,
        "updatedNumberScheduled": summary.updated,
        "nodeSelector": node_selector,
        "ineligibleNodes": [group.to_dict() for group in summary.ineligible],
        "conditions": conditions,
    }
    if rollout.update_revision:
        status["updateRevision"] = rollout.update_revision
    if rollout.current_revision:
        status["currentRevision"] = rollout.current_revision
    if rollout.collision_count:
        status["collisionCount"] = rollout.collision_count
    if rollout.canary is not None:
        status["canary"] = dict(rollout.canary)
    elif previous.get("canary") is not None:
        status["canary"] = None
    if summary.overrides or "resourceOverrides" in previous:
        # A merge patch: an empty list, not an absent key, clears what an earlier write said.
        status["resourceOverrides"] = [
            {"name": name, "nodes": nodes} for name, nodes in summary.overrides
        ]
    return status


def refused_selector_status(
    previous: Mapping[str, Any], *, generation: int, problem: str, now: str
) -> dict[str, Any]:
    """The status while the selector is refused: no pass looks at the nodes then, so the
    counters stay as last written (after a restart nothing would be known to count), and the
    SelectorValid condition says why."""
    conditions_before = conditions_by_type(previous)
    refused = condition(
        conditions_before, "SelectorValid", "False", "InvalidSelector", problem, generation, now
    )
    kept = [dict(c) for type_, c in conditions_before.items() if type_ != "SelectorValid"]
    return {"observedGeneration": generation, "conditions": [refused, *kept]}
