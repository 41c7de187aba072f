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

from kubeherd.api.customdaemonset_reasons import CANARY_PAUSE_REASONS
from kubeherd.daemonset.core.budget import resolve_budget
from kubeherd.daemonset.core.canary_commands import carry_out
from kubeherd.daemonset.core.canary_state import (
    CanaryPhase,
    CanaryRule,
    CanaryState,
    nodes_text,
)
from kubeherd.daemonset.core.model import Event, NodeRecord, PodInfo, parse_time, pod_available
from kubeherd.defaults import DEFAULT_CANARY_REPLICAS


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
    candidates = {name for name, record in ledger.items() if _qualifies(record)} - excluded
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


def _qualifies(record: NodeRecord | None) -> bool:
    return (
        record is not None and record.verdict.should_run and record.canary_pool and record.in_wave
    )


def canary_count(rule: CanaryRule, eligible: int) -> int:
    return max(1, resolve_budget(rule.replicas, eligible, DEFAULT_CANARY_REPLICAS))


@dataclass(frozen=True)
class Trouble:
    reason: str
    message: str


def trouble_of(
    node: str, pod: PodInfo, pause_restarts: int | None, acknowledged: int | None = None
) -> Trouble | None:
    """What pauses a canary in this pod, if anything (autoPause on). After an unpause, only
    a restart beyond the `acknowledged` ones does."""
    where = f"pod {pod.name} on node {node}"
    if acknowledged is not None:
        if pod.restarts <= acknowledged:
            return None
        why = pod.waiting_reason or pod.terminated_reason or "Restarts"
        message = f"{where}: restarted again after the unpause ({pod.restarts} restarts, {why})"
        return Trouble(why, message)
    if pod.waiting_reason in CANARY_PAUSE_REASONS:
        return Trouble(
            pod.waiting_reason,
            f"{where}: a container is waiting with {pod.waiting_reason} ({pod.restarts} restarts)",
        )
    if pod.terminated_reason == "OOMKilled":
        return Trouble("OOMKilled", f"{where}: a container was OOMKilled")
    if pause_restarts is not None and pod.restarts > pause_restarts:
        return Trouble(
            "Restarts",
            f"{where}: its containers restarted {pod.restarts} times, more than "
            f"autoPause.maxRestarts {pause_restarts}",
        )
    return None


def slow_start(
    state: CanaryState,
    rule: CanaryRule,
    node: str,
    canary_pods: Sequence[PodInfo],
    min_ready_seconds: int,
    now: float,
) -> tuple[float, Trouble] | None:
    """When the canary node's lack of an available pod pauses the rollout (autoPause's
    maxSlowStartSeconds, from the pod's creation or the canary's start, whichever is later),
    and the trouble it is; None while its pod is available."""
    if rule.slow_start is None:
        return None
    if any(pod_available(pod, min_ready_seconds, now) for pod in canary_pods):
        return None
    created = max((parse_time(pod.created) or 0.0 for pod in canary_pods), default=0.0)
    deadline = max(created, state.since) + rule.slow_start
    pending = ", ".join(f"pod {pod.name}" for pod in canary_pods) or "no pod yet"
    why = next((pod.waiting_reason for pod in canary_pods if pod.waiting_reason), "")
    message = (
        f"node {node} has no available pod of the new revision {rule.slow_start}s after it "
        f"started (autoPause.maxSlowStartSeconds): {pending}{f', {why}' if why else ''}"
    )
    return deadline, Trouble("SlowStart", message)


def _pods_on(
    ledger: Mapping[str, NodeRecord], node: str, revision: str
) -> tuple[list[PodInfo], bool]:
    """A canary node's active pods of the canary's revision, and whether it has others."""
    record = ledger.get(node)
    pods = record.active_pods if record is not None else ()
    canary_pods = [pod for pod in pods if pod.revision == revision]
    return canary_pods, len(canary_pods) != len(pods)


def next_check(
    state: CanaryState | None,
    rule: CanaryRule | None,
    ledger: Mapping[str, NodeRecord],
    min_ready_seconds: int,
    now: float,
) -> float | None:
    """When time alone changes the canary: its duration ends, or a canary node's slow start
    runs out. No watch event marks either."""
    if state is None or rule is None or state.phase is not CanaryPhase.RUNNING:
        return None
    moments = [state.available_since + rule.duration] if state.available_since else []
    for name in state.nodes:
        canary_pods, _others = _pods_on(ledger, name, state.revision)
        slow = slow_start(state, rule, name, canary_pods, min_ready_seconds, now)
        if slow is not None:
            moments.append(slow[0])
    return min(moments, default=None)


def plan_canary(
    ledger: Mapping[str, NodeRecord],
    rule: CanaryRule,
    before: CanaryState | None,
    revision: str,
    stable: str,
    kept_back: frozenset[str],
    min_ready_seconds: int,
    now: float,
    command: str = "",
) -> CanaryPlan:
    """The canary of `revision` after this look at the ledger: started, told (`command`, the
    canary command annotation's value), judged, passed."""
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
                f"the new template runs first on {nodes_text(nodes)}; the other "
                f"{max(0, len(eligible) - len(nodes))} eligible nodes keep the previous "
                f"revision until the canary passes",
            )
        )
    elif state.phase is CanaryPhase.RUNNING:
        wanted = canary_count(rule, len(eligible))
        # Choosing looks at every node: only when a canary node left, or some are missing.
        if len(state.nodes) != wanted or not all(
            _qualifies(ledger.get(name)) and name not in kept_back for name in state.nodes
        ):
            nodes = choose_nodes(ledger, wanted, revision, state.nodes, kept_back)
            if nodes != state.nodes:
                state = replace(state, nodes=nodes, available_since=None)
    if command and command != state.command:
        state, told = carry_out(command, state, rule, ledger, now)
        events += told
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
        canary_pods, others = _pods_on(ledger, name, state.revision)
        if not canary_pods or others:
            all_available = False
        for pod in canary_pods:
            if worst is None or pod.restarts > worst[1].restarts:
                worst = (name, pod)
            if trouble is None and rule.pause_restarts is not None:
                trouble = trouble_of(name, pod, rule.pause_restarts, state.acknowledged_restarts)
            if pod_available(pod, min_ready_seconds, now):
                ready_since = pod.ready_since if pod.ready_since is not None else now
                available_since = max(available_since, ready_since + min_ready_seconds)
            else:
                all_available = False
        slow = slow_start(state, rule, name, canary_pods, min_ready_seconds, now)
        if trouble is None and slow is not None and slow[0] <= now:
            trouble = slow[1]
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
        f"{nodes_text(state.nodes)} ran the new template available for "
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
