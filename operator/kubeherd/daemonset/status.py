"""The CustomDaemonSet status: the native DaemonSet's counters, plus why nodes have no pod and
conditions a user can act on. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubeherd.daemonset.planning import Summary


def _condition(
    previous: Mapping[str, Mapping[str, Any]],
    type_: str,
    status: str,
    reason: str,
    message: str,
    generation: int,
    now: str,
) -> dict[str, Any]:
    before = previous.get(type_, {})
    # The transition time moves only when the status flips, so a user can tell since when.
    since = before.get("lastTransitionTime") if before.get("status") == status else None
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since or now,
        "observedGeneration": generation,
    }


def build_status(
    summary: Summary,
    *,
    generation: int,
    node_selector: str,
    previous: Mapping[str, Any],
    create_failure: str | None,
    now: str,
    paused: bool = False,
) -> dict[str, Any]:
    conditions_before = {c.get("type", ""): c for c in previous.get("conditions") or []}
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
    updated = f"{summary.updated} of {summary.desired} eligible nodes run the current template"
    if summary.updated >= summary.desired:
        progressing = ("True", "RolloutComplete", updated)
    elif paused:
        progressing = ("False", "Paused", f"the rollout is paused: {updated}")
    else:
        progressing = ("True", "RollingUpdate", updated)
    conditions = [
        _condition(conditions_before, "Available", *available, generation, now),
        _condition(conditions_before, "Progressing", *progressing, generation, now),
    ]
    if create_failure:
        conditions.append(
            _condition(
                conditions_before,
                "ReplicaFailure",
                "True",
                "FailedCreate",
                create_failure,
                generation,
                now,
            )
        )
    return {
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


def status_changed(previous: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether writing `new` would change anything a user sees (no write when nothing did)."""
    return any(previous.get(key) != value for key, value in new.items())
