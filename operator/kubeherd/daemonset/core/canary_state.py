"""What a rollout's canary is: the rule read from rollingUpdate.canary, and where the canary
stands (`CanaryState`, written to status.canary and read back after a restart).

Pure: plain data in, plain data out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from kubeherd.daemonset.core.model import parse_time
from kubeherd.daemonset.core.revisions import revision_name
from kubeherd.defaults import (
    DEFAULT_CANARY_DURATION,
    DEFAULT_CANARY_FAIL_RESTARTS,
    DEFAULT_CANARY_PAUSE_RESTARTS,
    DEFAULT_CANARY_REPLICAS,
    DEFAULT_CANARY_SLOW_START,
)
from kubeherd.meta import iso_time

# How many canary nodes a message names before it only counts them.
NAMED_NODES = 5


class CanaryPhase(StrEnum):
    RUNNING = "Running"
    PAUSED = "Paused"
    FAILED = "Failed"
    PASSED = "Passed"


@dataclass(frozen=True)
class CanaryRule:
    """rollingUpdate.canary as the controller reads it (the node-facing parts, nodeSelector
    and nodeAntiAffinityKeys, are in `nodes.WaveRule`)."""

    replicas: int | str = DEFAULT_CANARY_REPLICAS
    duration: int = DEFAULT_CANARY_DURATION
    # None: autoPause or autoFail is off.
    pause_restarts: int | None = DEFAULT_CANARY_PAUSE_RESTARTS
    fail_restarts: int | None = DEFAULT_CANARY_FAIL_RESTARTS
    rollback: bool = False
    slow_start: int | None = DEFAULT_CANARY_SLOW_START

    @classmethod
    def of(cls, canary: Mapping[str, Any]) -> CanaryRule:
        pause = canary.get("autoPause") or {}
        fail = canary.get("autoFail") or {}
        return cls(
            replicas=canary.get("replicas", DEFAULT_CANARY_REPLICAS),
            duration=int(canary.get("durationSeconds", DEFAULT_CANARY_DURATION)),
            pause_restarts=(
                int(pause.get("maxRestarts", DEFAULT_CANARY_PAUSE_RESTARTS))
                if pause.get("enabled", True)
                else None
            ),
            fail_restarts=(
                int(fail.get("maxRestarts", DEFAULT_CANARY_FAIL_RESTARTS))
                if fail.get("enabled", True)
                else None
            ),
            rollback=bool(fail.get("rollback", False)),
            slow_start=(
                int(pause.get("maxSlowStartSeconds", DEFAULT_CANARY_SLOW_START))
                if pause.get("enabled", True)
                else None
            ),
        )


@dataclass(frozen=True)
class CanaryState:
    """Where a canary stands; written to status.canary, read back after a restart."""

    revision: str
    # The revision the other nodes keep, and a rollback restores.
    stable: str
    nodes: tuple[str, ...]
    phase: CanaryPhase = CanaryPhase.RUNNING
    reason: str = ""
    message: str = ""
    # When every canary pod had been available since (None: not all are), and when the
    # phase last changed.
    available_since: float | None = None
    since: float = 0.0
    rolled_back: bool = False
    # The last canary command carried out (the annotation's value), and the restarts an
    # unpause acknowledged: from then on only a new restart pauses the canary again.
    command: str = ""
    acknowledged_restarts: int | None = None

    def target(self, revision: str) -> str:
        """The revision the pods are rolled to: the previous one once a rollback started."""
        return self.stable if self.rolled_back else revision

    def to_status(self, cds_name: str) -> dict[str, Any]:
        """status.canary: the revisions by their ControllerRevision names."""
        status: dict[str, Any] = {
            "revision": revision_name(cds_name, self.revision),
            "stableRevision": revision_name(cds_name, self.stable),
            "nodes": list(self.nodes),
            "phase": str(self.phase),
            "lastTransitionTime": iso_time(self.since),
        }
        # Every field, null when unset: a merge patch keeps the fields it does not name.
        status["reason"] = self.reason or None
        status["message"] = self.message or None
        status["availableSince"] = (
            iso_time(self.available_since) if self.available_since is not None else None
        )
        status["rolledBack"] = self.rolled_back or None
        status["command"] = self.command or None
        status["acknowledgedRestarts"] = self.acknowledged_restarts
        return status

    @classmethod
    def from_status(cls, status: Mapping[str, Any], cds_name: str) -> CanaryState | None:
        """The canary a status recorded (after a restart); None when there is none."""
        recorded = status.get("canary") or {}
        prefix = revision_name(cds_name, "")
        revision = str(recorded.get("revision") or "").removeprefix(prefix)
        stable = str(recorded.get("stableRevision") or "").removeprefix(prefix)
        if not revision or not stable:
            return None
        try:
            phase = CanaryPhase(str(recorded.get("phase")))
        except ValueError:
            return None
        return cls(
            revision=revision,
            stable=stable,
            nodes=tuple(str(node) for node in recorded.get("nodes") or ()),
            phase=phase,
            reason=str(recorded.get("reason") or ""),
            message=str(recorded.get("message") or ""),
            available_since=parse_time(recorded.get("availableSince")),
            since=parse_time(recorded.get("lastTransitionTime")) or 0.0,
            rolled_back=bool(recorded.get("rolledBack")),
            command=str(recorded.get("command") or ""),
            acknowledged_restarts=(
                int(recorded["acknowledgedRestarts"])
                if recorded.get("acknowledgedRestarts") is not None
                else None
            ),
        )


def of_revision(canary: CanaryState | None, revision: str) -> CanaryState | None:
    """The canary if it is `revision`'s (a template's canary ends with the next template)."""
    return canary if canary is not None and canary.revision == revision else None


def nodes_text(nodes: Sequence[str]) -> str:
    if not nodes:
        return "no canary node (none qualifies)"
    named = ", ".join(nodes[:NAMED_NODES])
    more = f" and {len(nodes) - NAMED_NODES} more" if len(nodes) > NAMED_NODES else ""
    word = "node" if len(nodes) == 1 else "nodes"
    return f"canary {word} {named}{more}"
