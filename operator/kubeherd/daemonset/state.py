"""What the CustomDaemonSet controller remembers of one object between passes, in parts: the
spec as read, the ledger of nodes, the revisions, the rollout in flight, the write pacing, the
template's verdict and the status writes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubeherd.daemonset.eligibility import NodeInfo
from kubeherd.daemonset.history import History
from kubeherd.daemonset.planning import NodeRecord, PodInfo
from kubeherd.daemonset.report import Progress
from kubeherd.daemonset.spec import DaemonSetSpec
from kubeherd.daemonset.template_check import TemplateCheck
from kubeherd.daemonset.writes import Pacing

Key = tuple[str, str]  # (namespace, name)


class NodeSource(Protocol):
    def get(self, name: str) -> NodeInfo | None: ...
    def names(self) -> Iterable[str]: ...


class PodSource(Protocol):
    def on_node(self, key: Key, node: str) -> list[PodInfo]: ...
    def nodes_with_pods(self, key: Key) -> set[str]: ...


@dataclass
class Rollout:
    # The template and generation the ledger was computed for; a change means all nodes.
    template_hash: str = ""
    generation: int = -1
    # A rolling update may have old pods left: every pass then looks at all nodes' pods.
    rolling: bool = False
    deleted: frozenset[str] = frozenset()
    progress: Progress | None = None


@dataclass
class StatusWrites:
    computed_at: float = float("-inf")
    # What a deferred status would be written for: (spec, nodes kept back).
    last_pass: tuple[DaemonSetSpec, int] | None = None
    # Our own writes, whose watch events need no pass: their resourceVersions, and the status
    # the last one leaves (its event may come before the write's answer does).
    own_versions: list[str] = field(default_factory=list)
    written: Mapping[str, Any] | None = None

    def own(self, body: Mapping[str, Any], before: Mapping[str, Any]) -> bool:
        metadata = body["metadata"]
        return metadata.get("resourceVersion") in self.own_versions or (
            self.written is not None
            and body.get("status") == self.written
            and metadata.get("generation") == before["metadata"].get("generation")
        )


@dataclass
class DaemonSetState:
    """What the controller remembers of one CustomDaemonSet between passes."""

    body: Mapping[str, Any]
    spec: DaemonSetSpec
    pacing: Pacing
    ledger: dict[str, NodeRecord] = field(default_factory=dict)
    history: History = field(default_factory=History)
    rollout: Rollout = field(default_factory=Rollout)
    template: TemplateCheck = field(default_factory=TemplateCheck)
    # The selector problem an InvalidSelector event was posted for: one event per problem.
    selector_problem_announced: str | None = None
    status: StatusWrites = field(default_factory=StatusWrites)
    # Pods may need adopting or releasing: after a start, an update of the CustomDaemonSet
    # or a daemon pod's labels changing.
    claims_due: bool = True
    # Whether a pass has looked at every node since this object was first seen.
    caught_up: bool = False
    # Awaited before the first pass: until the watches have listed the cluster and this
    # object's pods. None once done.
    ready: Callable[[], Awaitable[None]] | None = None
