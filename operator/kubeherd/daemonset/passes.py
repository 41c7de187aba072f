"""One pass of the CustomDaemonSet controller as a pure function: everything it looks at comes
in as data, one plan comes out, and the controller carries the plan out.

In: the spec, the revision to run, the dirty nodes (their Node and daemon pods), the ledger
(every node's last record), what is in flight (creates the watch has not shown yet, deletes of
the rollout), the failed-pod backoffs and the time. Out: the creates (each with the revision
its pod runs), the deletes, the ledger's changes, the expectations that ended, and what the
rollout has in flight now.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from kubeherd.daemonset.eligibility import NodeInfo
from kubeherd.daemonset.planning import (
    DeletePod,
    NodeRecord,
    PodInfo,
    SurgeRule,
    nodes_kept_back,
    plan_nodes,
    plan_rolling_update,
)
from kubeherd.daemonset.spec import DaemonSetSpec

# How long a create the watch has not shown yet holds its node back, as the native
# controller's expectations do; a watch event or a later listing normally ends it in seconds.
EXPECTATION_TIMEOUT = 300.0


@dataclass(frozen=True)
class ExpectedPod:
    """A pod this controller created (or adopted) that the watch has not shown yet."""

    name: str
    revision: str
    sent_at: float


@dataclass(frozen=True)
class NodeView:
    """A dirty node as the watches show it now: None when the Node is gone."""

    node: NodeInfo | None
    pods: tuple[PodInfo, ...]


@dataclass(frozen=True)
class PassInput:
    spec: DaemonSetSpec
    revision: str
    # The revision a partition keeps nodes on, when there is one other than `revision`.
    previous_revision: str | None
    dirty: Mapping[str, NodeView]
    ledger: Mapping[str, NodeRecord]
    expected: Mapping[str, ExpectedPod]
    # Per node: when its failed pod may go (its failed-pod backoff).
    failed_pod_not_before: Mapping[str, float]
    # Old pods the rollout deleted that the watch still shows as active (uids).
    rollout_deleted: frozenset[str]
    # A rolling update may have old pods left: look at every node's pods.
    rolling: bool
    now: float


@dataclass(frozen=True)
class PlannedCreate:
    node: str
    revision: str


@dataclass
class PassPlan:
    creates: list[PlannedCreate] = field(default_factory=list)
    deletes: list[DeletePod] = field(default_factory=list)
    # The ledger's new entries; None: the node is gone, and its entry and expectation go too.
    records: dict[str, NodeRecord | None] = field(default_factory=dict)
    # Expectations ended: the pod showed up, or never will (timed out: also in `lost`).
    seen: set[str] = field(default_factory=set)
    lost: list[tuple[str, ExpectedPod]] = field(default_factory=list)
    backing_off: list[str] = field(default_factory=list)
    kept_back: frozenset[str] = frozenset()
    rollout_deleted: frozenset[str] = frozenset()
    rolling: bool = False


class _Overlay(Mapping[str, NodeRecord]):
    """The ledger with this pass's changes on top, without copying thousands of entries."""

    def __init__(
        self, base: Mapping[str, NodeRecord], changes: Mapping[str, NodeRecord | None]
    ) -> None:
        self._base = base
        self._changes = changes

    def __getitem__(self, name: str) -> NodeRecord:
        if name in self._changes:
            record = self._changes[name]
            if record is None:
                raise KeyError(name)
            return record
        return self._base[name]

    def __iter__(self) -> Iterator[str]:
        yield from (name for name, record in self._changes.items() if record is not None)
        yield from (name for name in self._base if name not in self._changes)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def plan_pass(given: PassInput) -> PassPlan:
    spec, now = given.spec, given.now
    plan = PassPlan()
    expected = _open_expectations(given, plan)
    surge = SurgeRule(given.revision, spec.min_ready_seconds, now) if spec.surge else None
    nodes = plan_nodes(
        spec.pod_spec,
        sorted(given.dirty),
        lambda name: given.dirty[name].node,
        lambda name: given.dirty[name].pods,
        may_delete_failed=lambda name: given.failed_pod_not_before.get(name, now) <= now,
        surge=surge,
        pending={node: pod.revision for node, pod in expected.items()},
    )
    plan.records = nodes.records
    plan.deletes = nodes.deletes
    plan.backing_off = nodes.backing_off
    plan.seen |= {name for name, record in nodes.records.items() if record is None}
    ledger = _Overlay(given.ledger, nodes.records)
    if spec.rolling_update and spec.partition > 0:
        plan.kept_back = nodes_kept_back(ledger, given.revision, spec.partition)
    creates = [create.node for create in nodes.creates]
    plan.rolling = given.rolling
    plan.rollout_deleted = given.rollout_deleted
    if given.rolling and spec.rolling_update and not spec.paused:
        # A delete is done once the ledger shows the pod Terminating or gone.
        in_flight = given.rollout_deleted & {
            pod.uid for record in ledger.values() for pod in record.active_pods
        }
        step = plan_rolling_update(
            ledger,
            given.revision,
            {
                "maxSurge": spec.max_surge if spec.surge else None,
                "maxUnavailable": spec.max_unavailable,
            },
            spec.min_ready_seconds,
            now,
            set(in_flight),
            frozenset(node for node, pod in expected.items() if pod.revision == given.revision),
            plan.kept_back,
        )
        planned = {delete.pod.uid for delete in plan.deletes}
        step_deletes = [delete for delete in step.deletes if delete.pod.uid not in planned]
        plan.deletes += step_deletes
        creates += [create.node for create in step.creates]
        plan.rolling = step.outdated
        plan.rollout_deleted = frozenset(in_flight | {d.pod.uid for d in step_deletes})
    kept_back_revision = given.previous_revision or given.revision
    plan.creates = [
        PlannedCreate(node, kept_back_revision if node in plan.kept_back else given.revision)
        for node in creates
    ]
    return plan


def _open_expectations(given: PassInput, plan: PassPlan) -> dict[str, ExpectedPod]:
    """The expectations still open after this look at the dirty nodes: the ones whose pod the
    watch now shows end, and so do the ones too old to wait for (a create whose answer was lost
    and which never took effect)."""
    expected = dict(given.expected)
    for name, view in given.dirty.items():
        pod = expected.get(name)
        if pod is None:
            continue
        if any(present.name == pod.name for present in view.pods):
            plan.seen.add(name)
        elif given.now - pod.sent_at > EXPECTATION_TIMEOUT:
            plan.seen.add(name)
            plan.lost.append((name, pod))
        else:
            continue
        del expected[name]
    return expected
