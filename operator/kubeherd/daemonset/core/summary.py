"""The status counters, summed from the ledger (one small record per node, kept up to date
pass by pass) without looking at every pod again; and what holds a rollout up.

Pure: plain data in, plain data out.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubeherd.daemonset.core.model import NodeRecord, pod_available
from kubeherd.daemonset.core.overrides import NO_OVERRIDES, OverrideRule

# How many example node names a status entry on ineligible nodes lists.
EXAMPLE_NODES = 3


@dataclass(frozen=True)
class IneligibleNodes:
    reason: str
    detail: str
    count: int
    nodes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "detail": self.detail,
            "count": self.count,
            "nodes": list(self.nodes),
        }


@dataclass(frozen=True)
class Summary:
    desired: int
    current: int
    misscheduled: int
    ready: int
    available: int
    updated: int
    ineligible: tuple[IneligibleNodes, ...]
    # When the next pod turns Available by minReadySeconds alone (no event will say so).
    next_available_at: float | None
    # Per resource override, in spec order: its name and the eligible nodes it applies to.
    overrides: tuple[tuple[str, int], ...] = ()

    @property
    def unavailable(self) -> int:
        return self.desired - self.available


def summarize(
    ledger: Mapping[str, NodeRecord],
    revision: str,
    min_ready_seconds: int,
    now: float,
    decided_at: float | None = None,
    overrides: OverrideRule = NO_OVERRIDES,
) -> Summary:
    """`decided_at`: when the last plan judged these pods (default `now`). A pod that turned
    available since then is still due a wake-up: no plan has let its old pod go yet."""
    judged = now if decided_at is None else min(decided_at, now)
    desired = current = misscheduled = ready = available = updated = 0
    next_available_at: float | None = None
    ineligible: Counter[tuple[str, str]] = Counter()
    overridden: Counter[str] = Counter()
    examples: defaultdict[tuple[str, str], list[str]] = defaultdict(list)
    for name, record in ledger.items():
        verdict = record.verdict
        oldest = record.oldest_pod
        if not verdict.should_run:
            key = (str(verdict.reason), verdict.detail)
            ineligible[key] += 1
            if len(examples[key]) < EXAMPLE_NODES:
                examples[key].append(name)
            misscheduled += oldest is not None
            continue
        desired += 1
        if record.override:
            overridden[record.override] += 1
        if oldest is None:
            continue
        current += 1
        # Inline NodeRecord.up_to_date: this loop runs over every node at each status.
        updated += oldest.revision == revision and oldest.override == record.override
        if oldest.ready:
            ready += 1
            available += (oldest.ready_since or now) + min_ready_seconds <= now
        if min_ready_seconds:
            # Any pod, not only the oldest: during a surge the new pod turning available is
            # what lets the old one go, and no watch event marks that moment.
            for pod in record.pods:
                if not pod.ready or pod.deleting:
                    continue
                available_at = (pod.ready_since or now) + min_ready_seconds
                if judged < available_at < (next_available_at or float("inf")):
                    next_available_at = available_at
    groups = tuple(
        IneligibleNodes(reason, detail, count, tuple(sorted(examples[(reason, detail)])))
        for (reason, detail), count in sorted(ineligible.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    per_override = tuple((o.name, overridden[o.key]) for o in overrides.overrides)
    return Summary(
        desired,
        current,
        misscheduled,
        ready,
        available,
        updated,
        groups,
        next_available_at,
        per_override,
    )


def node_selector_text(pod_spec: Mapping[str, Any]) -> str:
    """The nodeSelector as `kubectl get daemonset` shows it: k=v,k2=v2, or <none>."""
    selector = pod_spec.get("nodeSelector") or {}
    return ",".join(f"{key}={value}" for key, value in sorted(selector.items())) or "<none>"


def pods_holding_up(
    ledger: Mapping[str, NodeRecord],
    revision: str,
    min_ready_seconds: int,
    now: float,
    examples: int = EXAMPLE_NODES,
) -> tuple[int, list[str]]:
    """Eligible nodes whose pod of `revision` is not available: how many, and a few described
    as `pod on node (reason)` for a status message."""
    count = 0
    described: list[str] = []
    for name in sorted(ledger):
        record = ledger[name]
        if not record.verdict.should_run:
            continue
        waiting = [
            pod
            for pod in record.pods
            if record.up_to_date(pod, revision)
            and not pod.deleting
            and not pod_available(pod, min_ready_seconds, now)
        ]
        if not waiting:
            continue
        count += 1
        if len(described) < examples:
            pod = waiting[0]
            why = pod.waiting_reason or ("not ready" if pod.phase == "Running" else pod.phase)
            described.append(f"{pod.name} on {name} ({why})")
    return count, described
