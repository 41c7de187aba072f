"""One pass of the CustomDaemonSet controller as a pure function: everything it looks at comes
in as data, one plan comes out, and the controller carries the plan out.

In: the spec, the template's verdict (when the API server was asked), the revisions listed
(when the template changed), the pods a claim may concern (when claims are due), the dirty
nodes (their Node and daemon pods), the ledger (every node's last record), what is in flight
(creates the watch has not shown yet, deletes of the rollout), the failed-pod backoffs and the
time. Out: whether the pass stops short (an invalid selector, a template refused or not judged
yet) and the events that says, the revision writes (adoptions, the template's revision made or
renumbered), the pod claims, the creates (each with the revision its pod runs), the deletes,
the ledger's changes, the expectations that ended, and what the rollout has in flight now.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from kubeherd.daemonset.core.canary import plan_canary
from kubeherd.daemonset.core.canary_commands import CANARY_COMMAND_ANNOTATION
from kubeherd.daemonset.core.canary_state import CanaryState, of_revision
from kubeherd.daemonset.core.claims import PodCandidates, PodClaims, plan_pod_claims
from kubeherd.daemonset.core.eligibility import NodeInfo
from kubeherd.daemonset.core.in_place import compatible_revisions
from kubeherd.daemonset.core.model import Event, ExpectedPod, NodeRecord, PodInfo
from kubeherd.daemonset.core.nodes import DeletePod, SurgeRule, plan_nodes
from kubeherd.daemonset.core.revisions import (
    FoundRevisions,
    RevisionPlan,
    RevisionRecord,
    plan_revisions,
    previous_revision,
)
from kubeherd.daemonset.core.rollout import (
    ActiveDomain,
    UpdatePod,
    active_domain,
    nodes_kept_back,
    nodes_outside_wave,
    plan_rolling_update,
)
from kubeherd.daemonset.core.spec import DaemonSetSpec
from kubeherd.daemonset.core.status import WaveView
from kubeherd.daemonset.core.template import TemplateVerdict
from kubeherd.meta import controller_reference
from kubeherd.names import CUSTOMDAEMONSET

# How long a create the watch has not shown yet holds its node back, as the native
# controller's expectations do; a watch event or a later listing normally ends it in seconds.
EXPECTATION_TIMEOUT = 300.0


@dataclass(frozen=True, slots=True)
class NodeView:
    """A dirty node as the watches show it now: None when the Node is gone."""

    node: NodeInfo | None
    pods: tuple[PodInfo, ...]


@dataclass(frozen=True)
class PassInput:
    spec: DaemonSetSpec
    # The revision the pods run, as the last pass left it.
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
    # The kept revisions' hashes and in-place keys (`in_place.in_place_key`), and the pods
    # updated in place that the watch still shows of their old revision (uids).
    revision_keys: tuple[tuple[str, str], ...] = ()
    rollout_updated: frozenset[str] = frozenset()
    # The CustomDaemonSet as kept (`spec.kept_body`): its name, uid and status; what claims
    # and revisions are made from.
    body: Mapping[str, Any] = field(default_factory=dict)
    # The InvalidSelector event already posted for the selector's problem, if any.
    selector_problem_announced: str | None = None
    # The API server's verdict on the template, when it was asked this pass; the verdict
    # last recorded; whether the last ask got no verdict either.
    template: TemplateVerdict | None = None
    template_problem: str | None = None
    template_unanswered: bool = False
    # The revisions listed: the template changed since the ledger's. With the collision count
    # to hash with, and the orphans whose adoption was refused this pass (by uid).
    found_revisions: FoundRevisions | None = None
    collision_count: int = 0
    refused_adoptions: frozenset[str] = frozenset()
    # The pods a claim may concern, read when claims are due.
    pod_candidates: PodCandidates | None = None
    # A new generation: the failed-pod backoffs start again.
    new_generation: bool = False
    # A new spec while a deferred status waits: that status is written first.
    flush_status: bool = False
    # The canary as the last pass left it (or a status recorded it).
    canary: CanaryState | None = None


@dataclass(frozen=True, slots=True)
class PlannedCreate:
    node: str
    revision: str


class Stop(StrEnum):
    """Why a pass changes no pod: what runs keeps running."""

    # The selector is one the API server would refuse: no query may be built from it.
    SELECTOR = "selector"
    # The API server gave no verdict on the template yet: ask again later.
    NO_VERDICT = "no-verdict"
    # The API server refuses the template: nothing of it can run, and its node affinity may
    # read as matching no node, so acting on it would only delete what runs now.
    TEMPLATE = "template"


@dataclass
class PassPlan:
    stop: Stop | None = None
    # Warnings about the spec: once per selector problem, template refusal or outage.
    events: list[Event] = field(default_factory=list)
    template: TemplateVerdict | None = None
    flush_status: bool = False
    revisions: RevisionPlan | None = None
    # The revision the pods of this spec run, and the kept revisions after the writes.
    revision: str = ""
    claims: PodClaims | None = None
    forget_failed_pods: bool = False
    creates: list[PlannedCreate] = field(default_factory=list)
    deletes: list[DeletePod] = field(default_factory=list)
    # The ledger's new entries; None: the node is gone, and its entry and expectation go too.
    records: dict[str, NodeRecord | None] = field(default_factory=dict)
    # Expectations ended: the pod showed up, or never will (timed out: also in `lost`).
    seen: set[str] = field(default_factory=set)
    lost: list[tuple[str, ExpectedPod]] = field(default_factory=list)
    backing_off: list[str] = field(default_factory=list)
    kept_back: frozenset[str] = frozenset()
    # Eligible nodes rollingUpdate.selector keeps on an older revision, and the failure domain
    # of topologyKey being updated (None: no key, or every domain done).
    outside_wave: int = 0
    active_domain: ActiveDomain | None = None
    rollout_deleted: frozenset[str] = frozenset()
    # Old pods to update in place; and the ones updated that the watch has not shown yet.
    updates: list[UpdatePod] = field(default_factory=list)
    rollout_updated: frozenset[str] = frozenset()
    rolling: bool = False
    # The moment the plan judged the pods at (None: a stopped pass judged none). A pod that
    # turns available after it needs a pass of its own, even when the status comes later.
    decided_at: float | None = None
    # The canary after this pass.
    canary: CanaryState | None = None

    @property
    def waves(self) -> WaveView:
        domain = self.active_domain.text if self.active_domain is not None else ""
        return WaveView(self.outside_wave, domain)


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
    spec = given.spec
    if spec.selector_problem is not None:
        return _stopped(Stop.SELECTOR, _selector_events(given, spec.selector_problem))
    verdict = given.template
    if verdict is not None and verdict.no_verdict is not None:
        events = [] if given.template_unanswered else [_no_verdict_event(verdict.no_verdict)]
        return _stopped(Stop.NO_VERDICT, events, verdict)
    problem = verdict.problem if verdict is not None else given.template_problem
    if problem is not None:
        events = [] if given.template_problem == problem else [_refused_event(problem)]
        return _stopped(Stop.TEMPLATE, events, verdict)
    plan = PassPlan(template=verdict, flush_status=given.flush_status, decided_at=given.now)
    plan.forget_failed_pods = given.new_generation
    plan.revision, previous = given.revision, given.previous_revision
    claims_due = given.found_revisions is not None or given.pod_candidates is not None
    reference = controller_reference(given.body, CUSTOMDAEMONSET) if claims_due else {}
    if given.found_revisions is not None:
        plan.revisions = plan_revisions(
            given.found_revisions,
            spec.template_json,
            given.collision_count,
            reference,
            given.body["metadata"]["name"],
            given.refused_adoptions,
        )
        plan.revision = plan.revisions.decision.hash
        previous = previous_revision_hash(given.body, plan.revisions.records, plan.revision)
    if given.pod_candidates is not None:
        plan.claims = plan_pod_claims(given.pod_candidates, given.body, reference)
    _plan_pods(given, plan, previous)
    return plan


def previous_revision_hash(
    body: Mapping[str, Any], revisions: Sequence[RevisionRecord], revision: str
) -> str | None:
    """The revision a partition keeps nodes on: the status's currentRevision, unless that is
    the template's own."""
    current = str((body.get("status") or {}).get("currentRevision") or "")
    previous = previous_revision(revisions, current, revision)
    return previous.hash if previous is not None else None


def _stopped(stop: Stop, events: list[Event], template: TemplateVerdict | None = None) -> PassPlan:
    return PassPlan(stop=stop, events=events, template=template)


def _selector_events(given: PassInput, problem: str) -> list[Event]:
    if problem == given.selector_problem_announced:
        return []
    message = f"spec.selector is invalid; no pod changes until it is fixed: {problem}"
    return [Event("Warning", "InvalidSelector", message)]


def _no_verdict_event(why: str) -> Event:
    message = (
        f"The API server gave no verdict on the pod template; no pod changes until it does: {why}"
    )
    return Event("Warning", "TemplateCheckFailed", message)


def _refused_event(problem: str) -> Event:
    message = f"The pod template is refused; no pod changes until it is fixed: {problem}"
    return Event("Warning", "InvalidTemplate", message)


def _plan_pods(given: PassInput, plan: PassPlan, previous_revision: str | None) -> None:
    """The pod writes: each dirty node's, then the rolling update's next step."""
    spec, now, revision = given.spec, given.now, plan.revision
    canary = of_revision(given.canary, revision)
    plan.canary = given.canary
    # The revision the pods are rolled to: the template's, or the previous one while a failed
    # canary is rolled back.
    target = canary.target(revision) if canary is not None else revision
    expected = _open_expectations(given, plan)
    failed_pod_not_before = {} if given.new_generation else given.failed_pod_not_before
    surge = SurgeRule(target, spec.min_ready_seconds, now) if spec.surge else None
    nodes = plan_nodes(
        spec.pod_spec,
        sorted(given.dirty),
        lambda name: given.dirty[name].node,
        lambda name: given.dirty[name].pods,
        may_delete_failed=lambda name: failed_pod_not_before.get(name, now) <= now,
        surge=surge,
        pending={node: pod.revision for node, pod in expected.items()},
        waves=spec.waves,
        overrides=spec.overrides,
    )
    plan.records, plan.deletes, plan.backing_off = nodes.records, nodes.deletes, nodes.backing_off
    plan.seen |= {name for name, record in nodes.records.items() if record is None}
    ledger = _Overlay(given.ledger, nodes.records)
    if spec.rolling_update and spec.partition > 0:
        plan.kept_back = nodes_kept_back(ledger, revision, spec.partition)
    held = plan.kept_back
    if (
        spec.rolling_update
        and spec.canary is not None
        and previous_revision is not None
        and (given.rolling or canary is not None)
    ):
        annotations = (given.body.get("metadata") or {}).get("annotations") or {}
        judged = plan_canary(
            ledger,
            spec.canary,
            canary,
            revision,
            previous_revision,
            plan.kept_back,
            spec.min_ready_seconds,
            now,
            str(annotations.get(CANARY_COMMAND_ANNOTATION) or ""),
        )
        plan.canary = judged.state
        plan.events += judged.events
        held = held | judged.hold
        target = judged.state.target(revision)
    if spec.rolling_update and spec.waves.selector is not None:
        plan.outside_wave = nodes_outside_wave(ledger, revision, plan.kept_back)
    if spec.rolling_update and spec.waves.topology_key:
        plan.active_domain = active_domain(
            ledger,
            revision,
            spec.waves.topology_key,
            held,
            spec.min_ready_seconds,
            now,
        )
    creates = [create.node for create in nodes.creates]
    plan.rolling = given.rolling
    plan.rollout_deleted = given.rollout_deleted
    plan.rollout_updated = given.rollout_updated
    if (given.rolling or nodes.stale_override) and spec.rolling_update and not spec.paused:
        # A delete is done once the ledger shows the pod Terminating or gone; an update in
        # place once it shows the pod of the new revision and its node's resource override.
        in_flight = given.rollout_deleted & {
            pod.uid for record in ledger.values() for pod in record.active_pods
        }
        updating = given.rollout_updated & {
            pod.uid
            for record in ledger.values()
            for pod in record.active_pods
            if pod.revision != target or pod.override != record.override
        }
        step = plan_rolling_update(
            ledger,
            target,
            {
                "maxSurge": spec.max_surge if spec.surge else None,
                "maxUnavailable": spec.max_unavailable,
            },
            spec.min_ready_seconds,
            now,
            set(in_flight | updating),
            frozenset(node for node, pod in expected.items() if pod.revision == target),
            held,
            _in_place_from(given) if target == revision else frozenset(),
            plan.active_domain,
        )
        planned = {delete.pod.uid for delete in plan.deletes}
        step_deletes = [delete for delete in step.deletes if delete.pod.uid not in planned]
        plan.deletes += step_deletes
        creates += [create.node for create in step.creates]
        # Nodes a canary holds back still wait for the rollout.
        plan.rolling = step.outdated or held != plan.kept_back
        plan.rollout_deleted = frozenset(in_flight | {d.pod.uid for d in step_deletes})
        plan.updates = step.updates
        plan.rollout_updated = frozenset(updating | {u.pod.uid for u in step.updates})
    kept_back_revision = previous_revision or revision
    plan.creates = [
        PlannedCreate(node, kept_back_revision if node in held else target) for node in creates
    ]


def _in_place_from(given: PassInput) -> frozenset[str]:
    """The revisions whose pods the template can update in place: of the revisions kept, and
    of the ones listed this pass (after a start, the kept ones are not known yet)."""
    if not given.spec.in_place:
        return frozenset()
    keys = list(given.revision_keys)
    if given.found_revisions is not None:
        keys += [(record.hash, record.in_place_key) for record in given.found_revisions.owned]
    return compatible_revisions(keys, given.spec.in_place_key)


def _open_expectations(given: PassInput, plan: PassPlan) -> dict[str, ExpectedPod]:
    """The expectations still open after this look at the dirty nodes: the ones whose pod the
    watch now shows end, and so do the ones too old to wait for (a create whose answer was lost
    and which never took effect). A pod this pass adopts is expected from now on too."""
    expected = dict(given.expected)
    for claim in plan.claims.adopt if plan.claims is not None else ():
        if claim.node and claim.node not in expected:
            expected[claim.node] = ExpectedPod(claim.name, claim.revision, given.now)
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
