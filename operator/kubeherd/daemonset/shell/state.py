"""What the CustomDaemonSet controller remembers of one object between passes, in parts: the
spec as read, the ledger of nodes, the revisions, the rollout in flight, the write pacing, the
template's verdict and the status writes. Data only: the passes read and change it, and the
I/O modules below the controller take the parts they write with."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubeherd.daemonset.core.canary_state import CanaryState
from kubeherd.daemonset.core.eligibility import NodeInfo
from kubeherd.daemonset.core.model import ExpectedPod, NodeRecord, PodInfo
from kubeherd.daemonset.core.report import Progress
from kubeherd.daemonset.core.revisions import RevisionRecord
from kubeherd.daemonset.core.spec import DaemonSetSpec
from kubeherd.daemonset.core.status import WaveView
from kubeherd.defaults import TEMPLATE_CHECK_LIMIT
from kubeherd.kube.ratelimit import Backoff

Key = tuple[str, str]  # (namespace, name)


class NodeSource(Protocol):
    def get(self, name: str) -> NodeInfo | None: ...
    def names(self) -> Iterable[str]: ...


class PodSource(Protocol):
    def on_node(self, key: Key, node: str) -> tuple[PodInfo, ...]: ...
    def nodes_with_pods(self, key: Key) -> set[str]: ...


@dataclass
class Rollout:
    # The template and generation the ledger was computed for; a change means all nodes.
    template_hash: str = ""
    generation: int = -1
    # A rolling update may have old pods left: every pass then looks at all nodes' pods.
    rolling: bool = False
    deleted: frozenset[str] = frozenset()
    # Pods updated in place that the watch still shows of their old revision (uids).
    updated: frozenset[str] = frozenset()
    progress: Progress | None = None
    # The current or last template's canary (None: none yet, or one only the status knows).
    canary: CanaryState | None = None


@dataclass
class StatusWrites:
    computed_at: float = float("-inf")
    # What a deferred status would be written for: (spec, nodes kept back, the waves).
    last_pass: tuple[DaemonSetSpec, int, WaveView] | None = None
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


@dataclass(frozen=True)
class History:
    """The CustomDaemonSet's revisions and which one its current template is."""

    revision: str = ""
    revisions: tuple[RevisionRecord, ...] = ()
    collision_count: int = 0


@dataclass(frozen=True)
class Attempt:
    """What an earlier attempt of the same pass learned from its revision writes: the
    collision count to hash with (None: the status's), and the orphans whose adoption was
    refused."""

    collision_count: int | None = None
    refused_adoptions: frozenset[str] = frozenset()


@dataclass
class Pacing:
    """How fast one CustomDaemonSet's pods are written, carried from pass to pass."""

    create_backoff: Backoff
    max_failed_pod_backoff: float
    # How many creates the next pass may send at once before any is answered
    # (`CreateWindow.next_first`).
    first_create_window: int = 1
    # Why the last creates were refused, for the ReplicaFailure condition; None: they were not.
    create_failure: str | None = None
    # Per node: (not before, backoff) after a failed pod, as the native controller does.
    failed_pods: dict[str, tuple[float, Backoff]] = field(default_factory=dict)
    # Per node: the pod created there that the watch has not shown yet. Pod names are
    # generated, so this, not the name, keeps a second pass from creating a second pod.
    expected: dict[str, ExpectedPod] = field(default_factory=dict)

    def failed_pod_not_before(self) -> dict[str, float]:
        return {node: entry[0] for node, entry in self.failed_pods.items()}


@dataclass
class TemplateCheck:
    """The API server's verdict on the template, and how long to wait for one."""

    backoff: Backoff = field(default_factory=lambda: Backoff(TEMPLATE_CHECK_LIMIT))
    # The hash of the template the API server judged, and why it refused it, if it did.
    checked: str = ""
    problem: str | None = None


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

    @classmethod
    def of(
        cls,
        body: Mapping[str, Any],
        spec: DaemonSetSpec,
        max_create_backoff: float,
        max_failed_pod_backoff: float,
    ) -> DaemonSetState:
        """A CustomDaemonSet first seen, with the longest waits of its write pacing."""
        return cls(body, spec, Pacing(Backoff(max_create_backoff), max_failed_pod_backoff))
