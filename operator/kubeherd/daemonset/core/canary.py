"""A rollout's canary: which nodes run the new revision first, how their pods are judged, and
what the rest of the rollout may do meanwhile (rollingUpdate.canary).

The canary starts when a rolling update begins from a previous revision. Its nodes are chosen
once (and topped up should one leave), the others keep the previous revision. A canary pod in
trouble pauses the rollout (autoPause); beyond autoFail's restarts the canary fails, and with
rollback its nodes get the previous revision again. A canary whose pods have all been available
for durationSeconds passes, and the rollout goes on to every node.

Pure: plain data in, plain data out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from kubeherd.api.customdaemonset import CANARY_PAUSE_REASONS
from kubeherd.daemonset.core.budget import resolve_budget
from kubeherd.daemonset.core.model import Event, NodeRecord, PodInfo, parse_time, pod_available
from kubeherd.daemonset.core.revisions import revision_name
from kubeherd.defaults import (
    DEFAULT_CANARY_DURATION,
    DEFAULT_CANARY_FAIL_RESTARTS,
    DEFAULT_CANARY_PAUSE_RESTARTS,
    DEFAULT_CANARY_REPLICAS,
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

    def passes_at(self, rule: CanaryRule) -> float | None:
        """When time alone passes the canary: its pods available for the rule's duration."""
        if self.phase is not CanaryPhase.RUNNING or self.available_since is None:
            return None
        return self.available_since + rule.duration

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
        )


@dataclass
class CanaryPlan:
    state: CanaryState
    events: list[Event]
    # Eligible nodes the rollout leaves on the stable revision (the canary's own while it
    # is paused or failed).
    hold: frozenset[str]


def choose_nodes(
    ledger: Mapping[str, NodeRecord],
    count: int,
    revision: str,
    kept: Sequence[str] = (),
    excluded: frozenset[str] = frozenset(),
) -> tuple[str, ...]:
    """`count` canary nodes: the ones `kept` that still qualify, then nodes already running
    `revision` (so that a restart does not move the canary), then by name; spread so that no
    two share their nodeAntiAffinityKeys values while other values are left."""
    candidates = {
        name
        for name, record in ledger.items()
        if record.verdict.should_run and record.canary_pool and record.in_wave
    } - excluded
    chosen = [name for name in kept if name in candidates][:count]

    def runs_revision(name: str) -> bool:
        return any(pod.revision == revision for pod in ledger[name].active_pods)

    order = sorted(candidates - set(chosen), key=lambda name: (not runs_revision(name), name))
    spreads = {ledger[name].canary_spread for name in chosen}
    spare: list[str] = []
    for name in order:
        if len(chosen) >= count:
            break
        spread = ledger[name].canary_spread
        if spread in spreads and spread:
            spare.append(name)
            continue
        chosen.append(name)
        spreads.add(spread)
    chosen += spare[: max(0, count - len(chosen))]
    return tuple(sorted(chosen))


def canary_count(rule: CanaryRule, eligible: int) -> int:
    return max(1, resolve_budget(rule.replicas, eligible, DEFAULT_CANARY_REPLICAS))


@dataclass(frozen=True)
class Trouble:
    reason: str
    message: str
    restarts: int


def trouble_of(node: str, pod: PodInfo, pause_restarts: int | None) -> Trouble | None:
    """What pauses a canary in this pod, if anything (autoPause on)."""
    where = f"pod {pod.name} on node {node}"
    if pod.waiting_reason in CANARY_PAUSE_REASONS:
        return Trouble(
            pod.waiting_reason,
            f"{where}: a container is waiting with {pod.waiting_reason} ({pod.restarts} restarts)",
            pod.restarts,
        )
    if pod.terminated_reason == "OOMKilled":
        return Trouble("OOMKilled", f"{where}: a container was OOMKilled", pod.restarts)
    if pause_restarts is not None and pod.restarts > pause_restarts:
        return Trouble(
            "Restarts",
            f"{where}: its containers restarted {pod.restarts} times, more than "
            f"autoPause.maxRestarts {pause_restarts}",
            pod.restarts,
        )
    return None


def plan_canary(
    ledger: Mapping[str, NodeRecord],
    rule: CanaryRule,
    before: CanaryState | None,
    revision: str,
    stable: str,
    kept_back: frozenset[str],
    min_ready_seconds: int,
    now: float,
) -> CanaryPlan:
    """The canary of `revision` after this look at the ledger: started, judged, passed."""
    eligible = [name for name, record in ledger.items() if record.verdict.should_run]
    events: list[Event] = []
    state = before if before is not None and before.revision == revision else None
    if state is None:
        nodes = choose_nodes(ledger, canary_count(rule, len(eligible)), revision, (), kept_back)
        state = CanaryState(revision, stable, nodes, since=now)
        events.append(
            Event(
                "Normal",
                "CanaryStarted",
                f"the new template runs first on {_nodes_text(nodes)}; the other "
                f"{max(0, len(eligible) - len(nodes))} eligible nodes keep the previous "
                f"revision until the canary passes",
            )
        )
    elif state.phase is CanaryPhase.RUNNING:
        wanted = canary_count(rule, len(eligible))
        nodes = choose_nodes(ledger, wanted, revision, state.nodes, kept_back)
        if nodes != state.nodes:
            state = replace(state, nodes=nodes, available_since=None)
    if state.phase is CanaryPhase.PASSED:
        return CanaryPlan(state, events, frozenset())
    if state.phase is not CanaryPhase.FAILED:
        state, judged = _judge(ledger, rule, state, min_ready_seconds, now)
        events += judged
    canary = set(state.nodes)
    if state.phase is CanaryPhase.RUNNING:
        hold = frozenset(name for name in eligible if name not in canary)
    elif state.phase is CanaryPhase.PASSED or state.rolled_back:
        hold = frozenset()
    else:
        hold = frozenset(eligible)
    return CanaryPlan(state, events, hold)


def _judge(
    ledger: Mapping[str, NodeRecord],
    rule: CanaryRule,
    state: CanaryState,
    min_ready_seconds: int,
    now: float,
) -> tuple[CanaryState, list[Event]]:
    worst: tuple[str, PodInfo] | None = None
    all_available = bool(state.nodes)
    available_since = 0.0
    trouble: Trouble | None = None
    for name in state.nodes:
        record = ledger.get(name)
        pods = record.active_pods if record is not None else ()
        canary_pods = [pod for pod in pods if pod.revision == state.revision]
        if not canary_pods or len(canary_pods) != len(pods):
            all_available = False
        for pod in canary_pods:
            if worst is None or pod.restarts > worst[1].restarts:
                worst = (name, pod)
            if trouble is None and rule.pause_restarts is not None:
                trouble = trouble_of(name, pod, rule.pause_restarts)
            if pod_available(pod, min_ready_seconds, now):
                ready_since = pod.ready_since if pod.ready_since is not None else now
                available_since = max(available_since, ready_since + min_ready_seconds)
            else:
                all_available = False
    if worst is not None and rule.fail_restarts is not None:
        node, pod = worst
        if pod.restarts > rule.fail_restarts:
            why = pod.waiting_reason or pod.terminated_reason or "Restarts"
            undo = (
                "; the canary nodes get the previous revision back"
                if rule.rollback
                else "; the rollout stops until the template changes"
            )
            message = (
                f"pod {pod.name} on node {node}: its containers restarted {pod.restarts} "
                f"times, more than autoFail.maxRestarts {rule.fail_restarts} ({why}){undo}"
            )
            failed = replace(
                state,
                phase=CanaryPhase.FAILED,
                reason=why,
                message=message,
                since=now,
                available_since=None,
                rolled_back=rule.rollback,
            )
            return failed, [Event("Warning", "CanaryFailed", message)]
    if state.phase is CanaryPhase.PAUSED:
        return state, []
    if trouble is not None:
        message = f"the rollout is paused: {trouble.message}"
        paused = replace(
            state,
            phase=CanaryPhase.PAUSED,
            reason=trouble.reason,
            message=message,
            since=now,
            available_since=None,
        )
        return paused, [Event("Warning", "CanaryPaused", message)]
    if not all_available:
        return replace(state, available_since=None), []
    if now < available_since + rule.duration:
        return replace(state, available_since=available_since), []
    message = (
        f"{_nodes_text(state.nodes)} ran the new template available for "
        f"{rule.duration}s without trouble; the rollout goes on to every node"
    )
    passed = replace(
        state,
        phase=CanaryPhase.PASSED,
        reason="",
        message=message,
        since=now,
        available_since=available_since,
    )
    return passed, [Event("Normal", "CanaryPassed", message)]


def _nodes_text(nodes: Sequence[str]) -> str:
    if not nodes:
        return "no canary node (none qualifies)"
    named = ", ".join(nodes[:NAMED_NODES])
    more = f" and {len(nodes) - NAMED_NODES} more" if len(nodes) > NAMED_NODES else ""
    word = "node" if len(nodes) == 1 else "nodes"
    return f"canary {word} {named}{more}"
