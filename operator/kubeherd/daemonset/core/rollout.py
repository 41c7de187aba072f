"""The rolling update's next step within its budget (maxUnavailable, or maxSurge), the nodes a
partition keeps back, the wave the update may touch (rollingUpdate.selector, the failure
domain of topologyKey being updated), and the window creates go out in.

Pure: plain data in, plain data out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubeherd.daemonset.core.budget import resolve_budget
from kubeherd.daemonset.core.model import NodeRecord, PodInfo, pod_available
from kubeherd.daemonset.core.nodes import CreatePod, DeletePod
from kubeherd.defaults import DEFAULT_MAX_SURGE, DEFAULT_MAX_UNAVAILABLE


@dataclass(frozen=True, slots=True)
class UpdatePod:
    """An old pod the rolling update updates in place (its template differs in images only)."""

    node: str
    pod: PodInfo


@dataclass
class RolloutStep:
    deletes: list[DeletePod] = field(default_factory=list)
    # Old pods updated in place instead (rollingUpdateType InPlaceIfPossible).
    updates: list[UpdatePod] = field(default_factory=list)
    # Nodes that get a new pod beside their old one (surge).
    creates: list[CreatePod] = field(default_factory=list)
    # Whether any old-revision pod is left (False: the rollout is over).
    outdated: bool = False


def nodes_kept_back(
    ledger: Mapping[str, NodeRecord], revision: str, partition: int
) -> frozenset[str]:
    """The eligible nodes a partition keeps on the previous revision.

    Nodes update in name order and nodes already running `revision` count first, so the last
    `partition` nodes by name stay behind, and a node joining or leaving moves the line by one
    node at most (OpenKruise counts updated nodes first too)."""
    if partition <= 0:
        return frozenset()
    eligible = sorted(name for name, record in ledger.items() if record.verdict.should_run)
    allowance = max(0, len(eligible) - partition)
    updated = {
        name for name in eligible if any(p.revision == revision for p in ledger[name].active_pods)
    }
    behind = [name for name in eligible if name not in updated]
    return frozenset(behind[max(0, allowance - len(updated)) :])


@dataclass(frozen=True)
class ActiveDomain:
    """The failure domain a rollout by topologyKey updates now: the label's value ("" for the
    nodes without it), and its place among the domains."""

    key: str
    value: str
    position: int
    count: int

    @property
    def text(self) -> str:
        where = f"{self.key}={self.value}" if self.value else f"nodes without {self.key}"
        return f"{where} ({self.position} of {self.count})"


def active_domain(
    ledger: Mapping[str, NodeRecord],
    revision: str,
    topology_key: str,
    kept_back: frozenset[str],
    min_ready_seconds: int,
    now: float,
) -> ActiveDomain | None:
    """The first failure domain, in sorted order and the nodes without the label last, that is
    not done; None when all are. A domain is done when each of its eligible nodes that neither
    rollingUpdate.selector nor the partition holds back runs only available pods of
    `revision`."""
    domains: set[str] = set()
    unfinished: set[str] = set()
    for name, record in ledger.items():
        if not record.verdict.should_run:
            continue
        domains.add(record.domain)
        if record.domain in unfinished or not record.in_wave or name in kept_back:
            continue
        pods = record.active_pods
        if not pods or any(
            not record.up_to_date(pod, revision) or not pod_available(pod, min_ready_seconds, now)
            for pod in pods
        ):
            unfinished.add(record.domain)
    order = sorted(domains, key=lambda value: (value == "", value))
    for position, value in enumerate(order, start=1):
        if value in unfinished:
            return ActiveDomain(topology_key, value, position, len(order))
    return None


def nodes_outside_wave(
    ledger: Mapping[str, NodeRecord], revision: str, kept_back: frozenset[str]
) -> int:
    """Eligible nodes rollingUpdate.selector keeps on an older revision or resource override
    (the partition's own are counted apart), as the status counts nodes updated: by their
    oldest pod."""
    held = 0
    for name, record in ledger.items():
        if record.in_wave or not record.verdict.should_run or name in kept_back:
            continue
        oldest = record.oldest_pod
        held += oldest is not None and not record.up_to_date(oldest, revision)
    return held


def _held_by_wave(record: NodeRecord, domain: ActiveDomain | None) -> bool:
    """Whether the wave leaves the node's pods as they are: outside rollingUpdate.selector, or
    outside the failure domain being updated."""
    return not record.in_wave or (domain is not None and record.domain != domain.value)


def plan_rolling_update(
    ledger: Mapping[str, NodeRecord],
    revision: str,
    rolling_update: Mapping[str, Any],
    min_ready_seconds: int,
    now: float,
    already_deleted: set[str],
    already_created: frozenset[str] = frozenset(),
    kept_back: frozenset[str] = frozenset(),
    in_place_from: frozenset[str] = frozenset(),
    domain: ActiveDomain | None = None,
) -> RolloutStep:
    """One step of a rolling update over all eligible nodes, the native way.

    Without surge: unavailable old pods go at once, outside the budget; available ones only while
    fewer than maxUnavailable eligible nodes lack an available pod; plan_nodes then creates the
    replacements. With maxSurge: a new pod starts beside an available old one on at most maxSurge
    nodes at a time (at once beside an unavailable one), and plan_nodes deletes the old pod when
    the new one is available.

    `already_deleted` (pod uids) and `already_created` (nodes) are what earlier passes did that the
    watch has not shown yet, so two quick passes never spend a budget twice. Nodes in `kept_back`
    (a partition) are left alone, though they still count for the budget. Old pods of a revision
    in `in_place_from` are updated in place instead of deleted, within the same budget; an
    update sent that the watch does not show yet is in `already_deleted` too.

    A pod of `revision` whose resource override is not its node's (`NodeRecord.override`) is
    out of date too: it is replaced, or with `revision` in `in_place_from` updated in place.

    Nodes outside rollingUpdate.selector or outside `domain` (the failure domain being
    updated, None: every domain) are left alone as well and count for the budget, but their
    old pods keep the update going: a node relabelled into the wave, or the next domain,
    needs a step of its own."""
    eligible = {name: record for name, record in ledger.items() if record.verdict.should_run}
    max_surge = resolve_budget(rolling_update.get("maxSurge"), len(eligible), DEFAULT_MAX_SURGE)
    if max_surge > 0:
        return _surge_step(
            eligible,
            revision,
            max_surge,
            min_ready_seconds,
            now,
            already_created,
            kept_back,
            domain,
        )
    max_unavailable = resolve_budget(
        rolling_update.get("maxUnavailable"), len(eligible), DEFAULT_MAX_UNAVAILABLE
    )
    # Both zero is refused upstream at admission; at runtime it falls back to 1.
    max_unavailable = max_unavailable or 1
    step = RolloutStep()
    unavailable = 0
    candidates: list[DeletePod | UpdatePod] = []
    for name in sorted(eligible):
        record = eligible[name]
        # Terminating pods serve nobody: a node with only those counts as unavailable.
        pods = [pod for pod in record.active_pods if pod.uid not in already_deleted]
        if not any(pod_available(pod, min_ready_seconds, now) for pod in pods):
            unavailable += 1
        if name in kept_back or record.holds_finished_pod:
            continue
        held = _held_by_wave(record, domain)
        for pod in pods:
            # Inline NodeRecord.up_to_date: a rollout's hottest loop, over every node each pass.
            if pod.revision == revision and pod.override == record.override:
                continue
            step.outdated = True
            if held:
                break
            available = pod_available(pod, min_ready_seconds, now)
            why = (
                "its template is out of date"
                if pod.revision != revision
                else "its resource override is out of date"
            )
            change: DeletePod | UpdatePod
            if pod.revision in in_place_from:
                change = UpdatePod(name, pod)
            elif available:
                change = DeletePod(name, pod, why)
            else:
                change = DeletePod(name, pod, f"{why} (unavailable)")
            if available:
                candidates.append(change)
            else:
                _add(step, change)
    budget = max(0, max_unavailable - unavailable)
    for change in candidates[:budget]:
        _add(step, change)
    return step


def _add(step: RolloutStep, change: DeletePod | UpdatePod) -> None:
    if isinstance(change, UpdatePod):
        step.updates.append(change)
    else:
        step.deletes.append(change)


def _surge_step(
    eligible: Mapping[str, NodeRecord],
    revision: str,
    max_surge: int,
    min_ready_seconds: int,
    now: float,
    already_created: frozenset[str],
    kept_back: frozenset[str],
    domain: ActiveDomain | None,
) -> RolloutStep:
    step = RolloutStep()
    surging = 0
    candidates: list[CreatePod] = []
    for name in sorted(eligible):
        record = eligible[name]
        if name in kept_back:
            continue
        pods = record.active_pods
        old = [pod for pod in pods if not record.up_to_date(pod, revision)]
        if not old:
            continue
        step.outdated = True
        if record.holds_finished_pod:
            continue
        new = [pod for pod in pods if record.up_to_date(pod, revision)]
        if new or name in already_created:
            if not any(pod_available(pod, min_ready_seconds, now) for pod in new):
                surging += 1
            continue
        if _held_by_wave(record, domain):
            continue
        if any(pod_available(pod, min_ready_seconds, now) for pod in old):
            candidates.append(CreatePod(name))
        else:
            step.creates.append(CreatePod(name))
    step.creates += candidates[: max(0, max_surge - surging)]
    return step


# The widest a pass's window of creates opens, carried over from the passes before it: below
# the writes in flight at once by default (--max-concurrent-writes), so that a quota reached
# on the next pass's first creates costs a few refused creates, not a full window of them.
MAX_FIRST_WINDOW = 16


@dataclass
class CreateWindow:
    """How many creates may be in flight at once, as TCP's slow start paces its segments.

    The window opens at `width`; every create accepted widens it by one, up to `ceiling`, so
    it doubles per round trip to the API server, and a new create goes out as soon as one
    answers rather than when the slowest of a batch does. The first refused create closes it:
    nothing more is sent, as the native controller stops at a refused batch (a quota that
    refuses one pod refuses the next thousands too)."""

    width: int
    ceiling: int
    in_flight: int = 0
    # The most creates in flight at once, all accepted so far: where the next pass may open.
    widest: int = 0
    refused: bool = False

    @staticmethod
    def first_width(carried: int, admitted_now: bool) -> int:
        """Where a pass's creates open: MAX_FIRST_WINDOW when the API server admitted a dry
        run of this very pod in this pass (its quota and admission judged it as they judge
        the creates, so a first round trip at 1 would learn nothing new); else `carried`,
        what the passes before left (`next_first`)."""
        return max(carried, MAX_FIRST_WINDOW) if admitted_now else carried

    @classmethod
    def opening(cls, first: int, ceiling: int) -> CreateWindow:
        ceiling = max(1, ceiling)
        return cls(width=min(max(1, first), ceiling), ceiling=ceiling)

    def may_send(self) -> bool:
        return not self.refused and self.in_flight < self.width

    def sent(self) -> None:
        self.in_flight += 1
        self.widest = max(self.widest, self.in_flight)

    def answered(self, accepted: bool) -> None:
        self.in_flight -= 1
        if accepted:
            self.width = min(self.width + 1, self.ceiling)
        else:
            self.refused = True

    def next_first(self, previous_first: int) -> int:
        """The next pass's opening width: 1 after a refusal, as the native controller starts
        its batches; else where these creates left off (`previous_first` if they never
        filled it), up to MAX_FIRST_WINDOW. The native controller always starts at 1;
        kubeherd does not, because with a hundred nodes joining at once, starting at 1 costs
        round trips to the API server before the last of them gets its pod."""
        if self.refused:
            return 1
        return min(max(previous_first, self.widest), MAX_FIRST_WINDOW)
