"""Desired versus actual, per node: which daemon pods to create and delete on the nodes whose
inputs changed, so the work per event is proportional to what changed.

Pure: plain data in, plain data out.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubeherd.daemonset.core.claims import selector_matches
from kubeherd.daemonset.core.eligibility import NodeInfo, compile_pod_requirements
from kubeherd.daemonset.core.model import (
    NodeRecord,
    PodInfo,
    oldest_of,
    placement,
    pod_available,
)
from kubeherd.daemonset.core.overrides import NO_OVERRIDES, OverrideRule


@dataclass(frozen=True)
class SurgeRule:
    """What decides, during a surge update, which of a node's pods stay."""

    revision: str
    min_ready_seconds: int
    now: float


def _current(pod: PodInfo, surge: SurgeRule, override: str) -> bool:
    return pod.revision == surge.revision and pod.override == override


def pods_to_keep(
    running: Sequence[PodInfo], surge: SurgeRule | None, override: str = ""
) -> list[PodInfo]:
    """Of several pods on one node, which stay: the oldest one, or with surge the oldest pod of
    the current template and the node's resource `override`, plus the oldest old one while that
    new pod is not yet available and the old one is still ready (an unready old pod serves
    nobody: native deletes it at once)."""
    oldest = oldest_of(running)
    assert oldest is not None
    if surge is None:
        return [oldest]
    new = oldest_of(pod for pod in running if _current(pod, surge, override))
    if new is None:
        return [oldest]
    if pod_available(new, surge.min_ready_seconds, surge.now):
        return [new]
    old = oldest_of(pod for pod in running if not _current(pod, surge, override))
    return [new] if old is None or not old.ready else [new, old]


@dataclass(frozen=True)
class WaveRule:
    """rollingUpdate.selector and topologyKey, and the canary's nodeSelector and
    nodeAntiAffinityKeys: what a rollout's waves read of a node."""

    selector: Mapping[str, Any] | None = None
    topology_key: str = ""
    canary_selector: Mapping[str, Any] | None = None
    canary_keys: tuple[str, ...] = ()

    def in_wave(self, node: NodeInfo) -> bool:
        return self.selector is None or selector_matches(self.selector, node.labels)

    def domain(self, node: NodeInfo) -> str:
        # Interned: a few zone names shared by thousands of records.
        return sys.intern(node.labels.get(self.topology_key, "")) if self.topology_key else ""

    def canary_pool(self, node: NodeInfo) -> bool:
        """Whether the canary may be chosen on the node."""
        return self.canary_selector is None or selector_matches(self.canary_selector, node.labels)

    def canary_spread(self, node: NodeInfo) -> str:
        """The node's values of nodeAntiAffinityKeys: two canary nodes differ in them while
        the nodes allow."""
        if not self.canary_keys:
            return ""
        return sys.intern("\n".join(node.labels.get(key, "") for key in self.canary_keys))


NO_WAVES = WaveRule()


@dataclass(frozen=True, slots=True)
class CreatePod:
    node: str


@dataclass(frozen=True, slots=True)
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
    # A node runs a pod made with another resource override than the node's now (relabelled
    # into or out of a pool): a rolling update has work, though no spec changed.
    stale_override: bool = False


def plan_nodes(
    pod_spec: Mapping[str, Any],
    node_names: Iterable[str],
    node_lookup: Callable[[str], NodeInfo | None],
    pods_on_node: Callable[[str], Sequence[PodInfo]],
    may_delete_failed: Callable[[str], bool] = lambda _node: True,
    surge: SurgeRule | None = None,
    pending: Mapping[str, str] | None = None,
    waves: WaveRule = NO_WAVES,
    overrides: OverrideRule = NO_OVERRIDES,
) -> NodePlan:
    """Plan the daemon pods of the given nodes only (the ones whose inputs changed).

    A node gets a pod only when it has none at all: a Terminating pod still holds its host
    ports, devices and sockets, so without surge its replacement waits until it is gone, as
    with the native controller. With `surge`, a node may hold an old pod beside a new one until
    the new one is available, and a new pod may start beside Terminating ones. `pending` names
    the nodes whose create was sent but is not in `pods_on_node` yet (node -> revision).
    A failed pod stays, visible, while its node's backoff runs (`may_delete_failed`).
    Each record notes where `waves` puts its node, and which of `overrides` applies to it."""
    plan = NodePlan()
    requirements = compile_pod_requirements(pod_spec)
    pending = pending or {}
    for name in node_names:
        seen = pods_on_node(name)
        # The watch's own tuple when nothing is left out: the record then shares it.
        pods = (
            tuple(seen)
            if not any(pod.forgotten for pod in seen)
            else tuple(pod for pod in seen if not pod.forgotten)
        )
        active = [pod for pod in pods if not pod.deleting]
        node = node_lookup(name)
        if node is None:
            # Pods pinned to a node that no longer exists would stay Pending forever.
            plan.deletes += [DeletePod(name, pod, "its node is gone") for pod in active]
            plan.records[name] = None
            continue
        verdict = requirements.verdict(node)
        # Most CustomDaemonSets have no overrides: their nodes skip the selectors altogether.
        override = overrides.key_for(node.labels) if overrides.overrides else ""
        running = [pod for pod in active if not pod.finished]
        if verdict.should_run and not plan.stale_override:
            for pod in running:
                plan.stale_override |= pod.override != override
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
                keep_set = pods_to_keep(running, surge, override)
                plan.deletes += [
                    DeletePod(
                        name,
                        pod,
                        "its template is out of date"
                        if surge is not None and pod.revision != surge.revision
                        else "its resource override is out of date"
                        if surge is not None and pod.override != override
                        else "the node has more than one daemon pod",
                    )
                    for pod in running
                    if pod not in keep_set
                ]
        elif not verdict.should_continue_running:
            plan.deletes += [
                DeletePod(name, pod, verdict.detail or str(verdict.reason)) for pod in active
            ]
        plan.records[name] = NodeRecord(
            verdict,
            pods,
            placement(
                waves.in_wave(node),
                waves.domain(node),
                waves.canary_pool(node),
                waves.canary_spread(node),
                override,
            ),
        )
    return plan
