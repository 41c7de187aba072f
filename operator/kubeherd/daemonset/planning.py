"""Desired versus actual, per node: which daemon pods to create and delete, and the status.

Pure: plain data in, plain data out. The controller feeds it only the nodes that changed, so the
work per event is proportional to what changed; the status is summed from a ledger with one small
record per node, kept up to date the same way.
"""

from __future__ import annotations

import datetime
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubeherd.daemonset.eligibility import NodeInfo, Verdict, compile_pod_requirements
from kubeherd.daemonset.pods import REVISION_LABEL, target_node
from kubeherd.daemonset.spec import resolve_budget
from kubeherd.defaults import DEFAULT_MAX_SURGE, DEFAULT_MAX_UNAVAILABLE

# How many example node names a status entry on ineligible nodes lists.
EXAMPLE_NODES = 3


def parse_time(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True, slots=True)
class PodInfo:
    """What the controller needs to know of one daemon pod: small, so thousands stay cheap.

    Slots, and the strings that repeat across pods (node, phase, revision) shared: a watched
    pod's memory is mostly this record (docs/benchmarks.md)."""

    name: str
    uid: str
    node: str | None
    phase: str
    ready: bool
    ready_since: float | None
    revision: str
    created: str
    deleting: bool
    # Why a container is not running yet (ImagePullBackOff, CrashLoopBackOff...), or "".
    waiting_reason: str = ""
    # No controller owns it (it carries the owner label but lost its owner reference).
    orphan: bool = False

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> PodInfo:
        metadata = body.get("metadata", {})
        status = body.get("status") or {}
        ready_condition: Mapping[str, Any] = next(
            (c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {}
        )
        ready = ready_condition.get("status") == "True"
        node = target_node(body)
        return cls(
            name=metadata.get("name", ""),
            uid=metadata.get("uid", ""),
            node=sys.intern(node) if node else None,
            phase=sys.intern(status.get("phase") or "Pending"),
            ready=ready,
            ready_since=parse_time(ready_condition.get("lastTransitionTime")) if ready else None,
            revision=sys.intern((metadata.get("labels") or {}).get(REVISION_LABEL, "")),
            created=sys.intern(metadata.get("creationTimestamp") or ""),
            deleting=bool(metadata.get("deletionTimestamp")),
            waiting_reason=_waiting_reason(status),
            orphan=not any(ref.get("controller") for ref in metadata.get("ownerReferences") or ()),
        )

    @property
    def finished(self) -> bool:
        return self.phase in ("Failed", "Succeeded")

    @property
    def forgotten(self) -> bool:
        """Finished and deleted: the kubelet or the pod garbage collector removes it, and the
        native controller no longer counts it for anything."""
        return self.finished and self.deleting


def _waiting_reason(status: Mapping[str, Any]) -> str:
    for container in status.get("containerStatuses") or ():
        reason = ((container.get("state") or {}).get("waiting") or {}).get("reason")
        if reason:
            return str(reason)
    return ""


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """One node's standing for one CustomDaemonSet: its verdict and its daemon pods."""

    verdict: Verdict
    # Terminating and failed pods included: the status counts them, as the native one does.
    pods: tuple[PodInfo, ...]

    @property
    def oldest_pod(self) -> PodInfo | None:
        # With several pods on a node, the oldest decides the status, as in the native controller.
        # One pod is by far the most common case, and the status sums up every node's.
        return self.pods[0] if len(self.pods) == 1 else _oldest(self.pods)

    @property
    def active_pods(self) -> tuple[PodInfo, ...]:
        """The pods neither being deleted nor finished: the ones a rollout counts on or replaces
        (plan_nodes deals with finished ones)."""
        if len(self.pods) == 1 and not self.pods[0].deleting and not self.pods[0].finished:
            return self.pods
        return tuple(pod for pod in self.pods if not pod.deleting and not pod.finished)

    @property
    def holds_finished_pod(self) -> bool:
        return any(pod.finished and not pod.deleting for pod in self.pods)


@dataclass(frozen=True)
class SurgeRule:
    """What decides, during a surge update, which of a node's pods stay."""

    revision: str
    min_ready_seconds: int
    now: float


def _oldest(pods: Iterable[PodInfo]) -> PodInfo | None:
    return min(pods, key=lambda pod: (pod.created, pod.name), default=None)


def pods_to_keep(running: Sequence[PodInfo], surge: SurgeRule | None) -> list[PodInfo]:
    """Of several pods on one node, which stay: the oldest one, or with surge the oldest pod of
    the current template, plus the oldest old one while that new pod is not yet available and
    the old one is still ready (an unready old pod serves nobody: native deletes it at once)."""
    oldest = _oldest(running)
    assert oldest is not None
    if surge is None:
        return [oldest]
    new = _oldest(pod for pod in running if pod.revision == surge.revision)
    if new is None:
        return [oldest]
    if pod_available(new, surge.min_ready_seconds, surge.now):
        return [new]
    old = _oldest(pod for pod in running if pod.revision != surge.revision)
    return [new] if old is None or not old.ready else [new, old]


@dataclass(frozen=True)
class CreatePod:
    node: str


@dataclass(frozen=True)
class DeletePod:
    node: str
    pod: PodInfo
    why: str


@dataclass
class NodePlan:
    creates: list[CreatePod] = field(default_factory=list)
    deletes: list[DeletePod] = field(default_factory=list)
    # The ledger's new entries; None means the node is gone and its entry must go too.
    records: dict[str, NodeRecord | None] = field(default_factory=dict)
    # Nodes whose failed pod stays until their failed-pod backoff passes.
    backing_off: list[str] = field(default_factory=list)


def plan_nodes(
    pod_spec: Mapping[str, Any],
    node_names: Iterable[str],
    node_lookup: Callable[[str], NodeInfo | None],
    pods_on_node: Callable[[str], Sequence[PodInfo]],
    may_delete_failed: Callable[[str], bool] = lambda _node: True,
    surge: SurgeRule | None = None,
    pending: Mapping[str, str] | None = None,
) -> NodePlan:
    """Plan the daemon pods of the given nodes only (the ones whose inputs changed).

    A node gets a pod only when it has none at all: a Terminating pod still holds its host
    ports, devices and sockets, so without surge its replacement waits until it is gone, as
    with the native controller. With `surge`, a node may hold an old pod beside a new one until
    the new one is available, and a new pod may start beside Terminating ones. `pending` names
    the nodes whose create was sent but is not in `pods_on_node` yet (node -> revision).
    A failed pod stays, visible, while its node's backoff runs (`may_delete_failed`)."""
    plan = NodePlan()
    requirements = compile_pod_requirements(pod_spec)
    pending = pending or {}
    for name in node_names:
        pods = [pod for pod in pods_on_node(name) if not pod.forgotten]
        active = [pod for pod in pods if not pod.deleting]
        node = node_lookup(name)
        if node is None:
            # Pods pinned to a node that no longer exists would stay Pending forever.
            plan.deletes += [DeletePod(name, pod, "its node is gone") for pod in active]
            plan.records[name] = None
            continue
        verdict = requirements.verdict(node)
        running = [pod for pod in active if not pod.finished]
        finished = [pod for pod in active if pod.finished]
        if verdict.should_continue_running:
            for pod in finished:
                if pod.phase == "Failed" and not may_delete_failed(name):
                    plan.backing_off.append(name)
                else:
                    plan.deletes.append(DeletePod(name, pod, f"it is {pod.phase}"))
        if verdict.should_run:
            present = active if surge is not None else pods
            if not present and name not in pending:
                plan.creates.append(CreatePod(name))
            elif len(running) > 1:
                keep_set = pods_to_keep(running, surge)
                plan.deletes += [
                    DeletePod(
                        name,
                        pod,
                        "its template is out of date"
                        if surge is not None and pod.revision != surge.revision
                        else "the node has more than one daemon pod",
                    )
                    for pod in running
                    if pod not in keep_set
                ]
        elif not verdict.should_continue_running:
            plan.deletes += [
                DeletePod(name, pod, verdict.detail or str(verdict.reason)) for pod in active
            ]
        plan.records[name] = NodeRecord(verdict, tuple(pods))
    return plan


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

    @property
    def unavailable(self) -> int:
        return self.desired - self.available


def summarize(
    ledger: Mapping[str, NodeRecord], revision: str, min_ready_seconds: int, now: float
) -> Summary:
    desired = current = misscheduled = ready = available = updated = 0
    next_available_at: float | None = None
    ineligible: Counter[tuple[str, str]] = Counter()
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
        if oldest is None:
            continue
        current += 1
        updated += oldest.revision == revision
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
                if now < available_at < (next_available_at or float("inf")):
                    next_available_at = available_at
    groups = tuple(
        IneligibleNodes(reason, detail, count, tuple(sorted(examples[(reason, detail)])))
        for (reason, detail), count in sorted(ineligible.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    return Summary(
        desired, current, misscheduled, ready, available, updated, groups, next_available_at
    )


def node_selector_text(pod_spec: Mapping[str, Any]) -> str:
    """The nodeSelector as `kubectl get daemonset` shows it: k=v,k2=v2, or <none>."""
    selector = pod_spec.get("nodeSelector") or {}
    return ",".join(f"{key}={value}" for key, value in sorted(selector.items())) or "<none>"


def pod_available(pod: PodInfo, min_ready_seconds: int, now: float) -> bool:
    return pod.ready and (pod.ready_since or now) + min_ready_seconds <= now


@dataclass
class RolloutStep:
    deletes: list[DeletePod] = field(default_factory=list)
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


def plan_rolling_update(
    ledger: Mapping[str, NodeRecord],
    revision: str,
    rolling_update: Mapping[str, Any],
    min_ready_seconds: int,
    now: float,
    already_deleted: set[str],
    already_created: frozenset[str] = frozenset(),
    kept_back: frozenset[str] = frozenset(),
) -> RolloutStep:
    """One step of a rolling update over all eligible nodes, the native way.

    Without surge: unavailable old pods go at once, outside the budget; available ones only while
    fewer than maxUnavailable eligible nodes lack an available pod; plan_nodes then creates the
    replacements. With maxSurge: a new pod starts beside an available old one on at most maxSurge
    nodes at a time (at once beside an unavailable one), and plan_nodes deletes the old pod when
    the new one is available.

    `already_deleted` (pod uids) and `already_created` (nodes) are what earlier passes did that the
    watch has not shown yet, so two quick passes never spend a budget twice. Nodes in `kept_back`
    (a partition) are left alone, though they still count for the budget."""
    eligible = {name: record for name, record in ledger.items() if record.verdict.should_run}
    max_surge = resolve_budget(rolling_update.get("maxSurge"), len(eligible), DEFAULT_MAX_SURGE)
    if max_surge > 0:
        return _surge_step(
            eligible, revision, max_surge, min_ready_seconds, now, already_created, kept_back
        )
    max_unavailable = resolve_budget(
        rolling_update.get("maxUnavailable"), len(eligible), DEFAULT_MAX_UNAVAILABLE
    )
    # Both zero is refused upstream at admission; at runtime it falls back to 1.
    max_unavailable = max_unavailable or 1
    step = RolloutStep()
    unavailable = 0
    candidates: list[DeletePod] = []
    for name in sorted(eligible):
        record = eligible[name]
        # Terminating pods serve nobody: a node with only those counts as unavailable.
        pods = [pod for pod in record.active_pods if pod.uid not in already_deleted]
        if not any(pod_available(pod, min_ready_seconds, now) for pod in pods):
            unavailable += 1
        if name in kept_back or record.holds_finished_pod:
            continue
        for pod in pods:
            if pod.revision == revision:
                continue
            step.outdated = True
            if pod_available(pod, min_ready_seconds, now):
                candidates.append(DeletePod(name, pod, "its template is out of date"))
            else:
                step.deletes.append(
                    DeletePod(name, pod, "its template is out of date (unavailable)")
                )
    budget = max(0, max_unavailable - unavailable)
    step.deletes += candidates[:budget]
    return step


def _surge_step(
    eligible: Mapping[str, NodeRecord],
    revision: str,
    max_surge: int,
    min_ready_seconds: int,
    now: float,
    already_created: frozenset[str],
    kept_back: frozenset[str],
) -> RolloutStep:
    step = RolloutStep()
    surging = 0
    candidates: list[CreatePod] = []
    for name in sorted(eligible):
        record = eligible[name]
        if name in kept_back:
            continue
        pods = record.active_pods
        old = [pod for pod in pods if pod.revision != revision]
        if not old:
            continue
        step.outdated = True
        if record.holds_finished_pod:
            continue
        new = [pod for pod in pods if pod.revision == revision]
        if new or name in already_created:
            if not any(pod_available(pod, min_ready_seconds, now) for pod in new):
                surging += 1
            continue
        if any(pod_available(pod, min_ready_seconds, now) for pod in old):
            candidates.append(CreatePod(name))
        else:
            step.creates.append(CreatePod(name))
    step.creates += candidates[: max(0, max_surge - surging)]
    return step


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
            if pod.revision == revision
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


# The largest first batch of creates a pass carries over from the passes before it: as many
# as go out at once by default (--max-concurrent-writes).
MAX_FIRST_BATCH = 16


def create_batches(count: int, first: int = 1) -> list[int]:
    """The sizes of the batches `count` creates go out in: `first`, then twice the one before.

    The native controller always starts at 1, so that a quota refusing the first pod spares the
    API server the next thousands. kubeherd starts where its last creates left off instead
    (`next_first_batch`): with 100 nodes joining at once, starting at 1 cost six round trips
    to the API server before the last of them got its pod."""
    sizes: list[int] = []
    size = max(1, first)
    while count > 0:
        sizes.append(min(size, count))
        count -= size
        size *= 2
    return sizes


def next_first_batch(first: int, sent: list[int], refused: bool) -> int:
    """The next pass's first batch: 1 after a refusal, as the native controller does; else the
    largest batch that went through so far, up to MAX_FIRST_BATCH."""
    if refused:
        return 1
    return min(max([first, *sent]), MAX_FIRST_BATCH)
