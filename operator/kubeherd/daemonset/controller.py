"""The CustomDaemonSet controller: level-based, one reconciliation at a time per object.

Watch events only mark what changed (a CustomDaemonSet, or some nodes of it) and wake the
object's runner. A runner takes everything marked so far, plans just those nodes, carries out the
plan through the rate-limited client and writes the status if it changed; events that arrive
meanwhile are folded into its next pass. So a burst of events costs one pass, a missed or
repeated event changes nothing, and two passes never race on one object.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from kubeherd.admission.review import checked_pod, no_verdict, pod_template_review
from kubeherd.daemonset.claims import (
    adoption_patch,
    controller_uid,
    outside_selector_texts,
    release_patch,
    revision_adoptable,
    selector_text,
)
from kubeherd.daemonset.eligibility import NodeInfo
from kubeherd.daemonset.planning import (
    CreatePod,
    DeletePod,
    NodeRecord,
    PodInfo,
    RolloutStep,
    Summary,
    SurgeRule,
    create_batches,
    next_first_batch,
    node_selector_text,
    nodes_kept_back,
    parse_time,
    plan_nodes,
    plan_rolling_update,
    pods_holding_up,
    summarize,
)
from kubeherd.daemonset.pods import (
    KIND,
    OWNER_LABEL,
    REVISION_LABEL,
    DaemonPodMaker,
    target_node,
    template_hash,
)
from kubeherd.daemonset.revisions import (
    Revision,
    build_revision,
    decide_revision,
    owned_revisions,
    revision_name,
    revisions_to_prune,
)
from kubeherd.daemonset.status import RolloutView, build_status, progressing
from kubeherd.kube.client import KINDS, Kube, KubeError, Outcome
from kubeherd.kube.ratelimit import Backoff
from kubeherd.meta import (
    controller_reference,
    involved_object,
    iso_time,
    now_iso,
    status_changed,
)

logger = logging.getLogger(__name__)

PLURAL = "customdaemonsets"
# The status is computed at most this often per object (seconds): summing up every node's pod
# after each of thousands of pod events took an eighth of the operator's CPU in a rollout.
STATUS_INTERVAL = 1.0
COALESCE_SECONDS = 0.05
# How long a create the watch has not shown yet holds its node back, as the native
# controller's expectations do; a watch event or a later listing normally ends it in seconds.
EXPECTATION_TIMEOUT = 300.0
# How many of our latest status writes are recognised when their watch events come back.
OWN_VERSIONS_KEPT = 8
# The longest wait between dry-runs of a template the API server gave no verdict on.
TEMPLATE_CHECK_LIMIT = 30.0
Key = tuple[str, str]  # (namespace, name)
POD_KIND = KINDS[("v1", "Pod")]
REVISION_KIND = KINDS[("apps/v1", "ControllerRevision")]


class NodeSource(Protocol):
    def get(self, name: str) -> NodeInfo | None: ...
    def names(self) -> Iterable[str]: ...


class PodSource(Protocol):
    def on_node(self, key: Key, node: str) -> list[PodInfo]: ...
    def nodes_with_pods(self, key: Key) -> set[str]: ...


@dataclass
class Progress:
    """When the rollout last moved: a new revision, or more nodes updated or available."""

    revision: str = ""
    updated: int = -1
    available: int = -1
    since: float = 0.0

    def observe(self, revision: str, updated: int, available: int, now: float) -> None:
        if revision != self.revision or updated > self.updated or available > self.available:
            self.since = now
        self.revision, self.updated, self.available = revision, updated, available


@dataclass(frozen=True)
class ExpectedPod:
    """A pod this controller created that the watch has not shown yet."""

    name: str
    revision: str
    sent_at: float


@dataclass
class DaemonSetState:
    """What the controller remembers of one CustomDaemonSet between passes."""

    body: Mapping[str, Any]
    ledger: dict[str, NodeRecord] = field(default_factory=dict)
    # The template and generation the ledger was computed for; a change means all nodes.
    template_hash: str = ""
    generation: int = -1
    # The current template's revision hash (the pods' controller-revision-hash) and all revisions.
    revision: str = ""
    revisions: list[Revision] = field(default_factory=list)
    collision_count: int = 0
    progress: Progress | None = None
    deadline_check: asyncio.TimerHandle | None = None
    dirty_nodes: set[str] = field(default_factory=set)
    everything_dirty: bool = True
    running: bool = False
    create_failure: str | None = None
    create_backoff: Backoff = field(default_factory=lambda: Backoff(60.0))
    first_create_batch: int = 1
    # Per node: (not before, backoff) after a failed pod, as the native controller does.
    failed_pod_backoff: dict[str, tuple[float, Backoff]] = field(default_factory=dict)
    availability_check: asyncio.TimerHandle | None = None
    status_computed_at: float = float("-inf")
    # A pass that only writes the status is due (set by the timer that defers it).
    status_due: bool = False
    status_timer: asyncio.TimerHandle | None = None
    # What the last pass's status would be written for: (spec, pod spec, generation, kept back).
    last_pass: tuple[Mapping[str, Any], Mapping[str, Any], int, int] | None = None
    # A rolling update may have old pods left: every pass then looks at all nodes' pods.
    rolling: bool = False
    rollout_deleted: set[str] = field(default_factory=set)
    # Per node: the pod created there that the watch has not shown yet. Pod names are
    # generated, so this, not the name, keeps a second pass from creating a second pod.
    expected: dict[str, ExpectedPod] = field(default_factory=dict)
    # The resourceVersions of our own status writes: their watch events need no pass.
    own_versions: list[str] = field(default_factory=list)
    # The status as our last write leaves it: its watch event may come before the write's
    # answer (and its resourceVersion) does.
    written_status: Mapping[str, Any] | None = None
    # The template the API server last judged (its hash), and why it refused it, if it did.
    checked_template: str = ""
    template_problem: str | None = None
    template_check_backoff: Backoff = field(default_factory=lambda: Backoff(TEMPLATE_CHECK_LIMIT))
    # Pods may need adopting or releasing: after a start, an update of the CustomDaemonSet
    # or a daemon pod's labels changing.
    claims_due: bool = True


def _progressing_condition(status: Mapping[str, Any]) -> Mapping[str, Any]:
    conditions = status.get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Progressing"), {})


class EventBudget:
    """Like the native event recorder's spam filter: a burst of events per object and reason,
    then a slow trickle, so a rollout to 5,000 nodes does not post 5,000 events."""

    def __init__(self, burst: int = 25, refill_seconds: float = 10.0) -> None:
        self.burst = burst
        self.refill_seconds = refill_seconds
        self._tokens: dict[tuple[Key, str], tuple[float, float]] = {}

    def allow(self, key: Key, reason: str, now: float) -> bool:
        tokens, updated = self._tokens.get((key, reason), (float(self.burst), now))
        tokens = min(self.burst, tokens + (now - updated) / self.refill_seconds)
        allowed = tokens >= 1
        self._tokens[(key, reason)] = (tokens - 1 if allowed else tokens, now)
        return allowed

    def forget(self, key: Key) -> None:
        for entry in [entry for entry in self._tokens if entry[0] == key]:
            del self._tokens[entry]


class DaemonSetController:
    def __init__(
        self,
        kube: Kube,
        nodes: NodeSource,
        pods: PodSource,
        *,
        max_create_backoff: float = 60.0,
        max_failed_pod_backoff: float = 900.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.nodes = nodes
        self.pods = pods
        self.max_create_backoff = max_create_backoff
        self.max_failed_pod_backoff = max_failed_pod_backoff
        self.clock = clock
        self.events = EventBudget()
        self._states: dict[Key, DaemonSetState] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    # Inputs: called from the watch handlers -----------------------------------------------

    def daemonset_changed(self, body: Mapping[str, Any]) -> None:
        key = (body["metadata"]["namespace"], body["metadata"]["name"])
        if body["metadata"].get("deletionTimestamp"):
            # Being deleted, in the foreground or orphaning its pods: the garbage collector now
            # owns the pods' fate, and a pod made now would fight it. The native controller
            # also stops at a deletion timestamp.
            self.daemonset_deleted(key)
            return
        state = self._states.get(key)
        if state is None:
            state = DaemonSetState(body=body, create_backoff=Backoff(self.max_create_backoff))
            self._states[key] = state
        own_write = body["metadata"].get("resourceVersion") in state.own_versions or (
            state.written_status is not None
            and body.get("status") == state.written_status
            and body["metadata"].get("generation") == state.body["metadata"].get("generation")
        )
        state.body = body
        # Our own status writes come back as events too and change nothing. Anything else (a
        # new spec, a status someone else wrote, labels) gets a full pass, as the native
        # controller re-syncs on every update: what it owns is written again if it differs.
        if not own_write:
            state.claims_due = True
            self._wake(key, everything=True)

    def daemonset_deleted(self, key: Key) -> None:
        state = self._states.pop(key, None)
        if state is not None:
            for timer in (state.availability_check, state.deadline_check, state.status_timer):
                if timer is not None:
                    timer.cancel()
        self.events.forget(key)

    def node_changed(self, name: str) -> None:
        for key in self._states:
            self._wake(key, nodes=(name,))

    def pod_relabelled(self, key: Key) -> None:
        """A daemon pod's labels changed: it may have left the selector (to be released)."""
        state = self._states.get(key)
        if state is not None:
            state.claims_due = True
            self._wake(key, everything=True)

    def pod_changed(self, key: Key, node: str | None, name: str | None = None) -> None:
        state = self._states.get(key)
        if state is None:
            return
        if node and name:
            expected = state.expected.get(node)
            if expected is not None and expected.name == name:
                # Seen (created, or already deleted again): the pod sources show the truth.
                del state.expected[node]
        self._wake(key, nodes=(node,) if node else None, everything=node is None)

    # The runner --------------------------------------------------------------------------

    def _wake(self, key: Key, nodes: Iterable[str] | None = None, everything: bool = False) -> None:
        state = self._states.get(key)
        if state is None:
            return
        if everything:
            state.everything_dirty = True
        if nodes:
            state.dirty_nodes.update(nodes)
        if not state.running:
            state.running = True
            task = asyncio.get_running_loop().create_task(self._run(key, state))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _wake_later(self, key: Key, delay: float, nodes: Iterable[str]) -> None:
        # Timers are not cancelled or merged: each is tiny, and one firing for an object that is
        # gone (or already fine) only wakes a pass that finds nothing to do.
        retry_nodes = tuple(nodes)
        asyncio.get_running_loop().call_later(
            delay, lambda: self._wake(key, nodes=retry_nodes, everything=not retry_nodes)
        )

    async def _run(self, key: Key, state: DaemonSetState) -> None:
        # Watch events come in bursts: let a burst gather so that one pass covers it.
        await asyncio.sleep(COALESCE_SECONDS)
        try:
            while self._states.get(key) is state and (
                state.everything_dirty or state.dirty_nodes or state.status_due
            ):
                everything, nodes = state.everything_dirty, state.dirty_nodes
                state.everything_dirty, state.dirty_nodes, state.status_due = False, set(), False
                try:
                    await self._reconcile(key, state, None if everything else nodes)
                except Exception:
                    # Never let one object's failure stop the others: retry it later.
                    logger.exception("reconciling %s/%s failed; retrying", *key)
                    self._wake_later(key, state.create_backoff.next_delay(), ())
        finally:
            state.running = False

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # One pass ----------------------------------------------------------------------------

    async def _reconcile(self, key: Key, state: DaemonSetState, dirty: set[str] | None) -> None:
        body = state.body
        spec = body.get("spec") or {}
        template = spec.get("template") or {}
        pod_spec = template.get("spec") or {}
        generation = int(body["metadata"].get("generation", 0))
        if template_hash(template) != state.checked_template:
            await self._check_template(key, state, template)
            if template_hash(template) != state.checked_template:
                return  # no verdict yet: nothing acts on a template that may be invalid
        if state.template_problem is not None:
            # Nothing of a template the API server refuses can run, and its node affinity may
            # read as matching no node: acting on it would only delete what runs now.
            await self._write_status(key, state, spec, pod_spec, generation, 0)
            return
        new_template = template_hash(template) != state.template_hash
        if (
            state.status_timer is not None
            and state.last_pass is not None
            and (new_template or generation != state.generation)
        ):
            # A deferred status goes out first, for the spec it describes: the next rollout
            # starts from it (its currentRevision above all).
            state.status_timer.cancel()
            state.status_timer = None
            await self._write_status(key, state, *state.last_pass)
        if new_template:
            await self._record_revision(key, state, template)
        revision = state.revision
        if dirty is None or new_template or generation != state.generation:
            # A new template or generation can change every node's verdict.
            dirty = set(self.nodes.names()) | set(state.ledger) | self.pods.nodes_with_pods(key)
            if generation != state.generation:
                state.failed_pod_backoff.clear()
            state.rolling = True
            state.template_hash, state.generation = template_hash(template), generation

        if state.claims_due:
            state.claims_due = False
            await self._claim_pods(key, state)
        now = self.clock()
        logger.debug("%s/%s: pass over %d nodes", *key, len(dirty))
        self._forget_expectations(key, state, dirty, now)
        plan = plan_nodes(
            pod_spec,
            sorted(dirty),
            self.nodes.get,
            lambda node: self.pods.on_node(key, node),
            may_delete_failed=lambda node: self._may_delete_failed(state, node, now),
            surge=self._surge_rule(spec, revision, now),
            pending={node: expected.revision for node, expected in state.expected.items()},
        )
        for name, record in plan.records.items():
            if record is None:
                state.ledger.pop(name, None)
                state.expected.pop(name, None)
            else:
                state.ledger[name] = record

        strategy = spec.get("updateStrategy") or {}
        rolling_update = strategy.get("type", "RollingUpdate") == "RollingUpdate"
        partition = int((strategy.get("rollingUpdate") or {}).get("partition") or 0)
        kept_back = (
            nodes_kept_back(state.ledger, revision, partition) if rolling_update else frozenset()
        )
        if state.rolling and rolling_update and not spec.get("paused"):
            step = self._rollout_step(state, plan.deletes, strategy, spec, revision, now, kept_back)
            plan.deletes += step.deletes
            plan.creates += step.creates
        await self._delete_pods(key, state, plan.deletes)
        failure = await self._create_pods(key, state, plan.creates, kept_back)
        self._schedule_retries(key, state, plan.creates, plan.backing_off, failure)
        await self._prune_history(key, state, int(spec.get("revisionHistoryLimit", 10)))
        state.last_pass = (spec, pod_spec, generation, len(kept_back))
        since = self.clock() - state.status_computed_at
        if since < STATUS_INTERVAL:
            # While pods start by the thousand, each pass would otherwise sum up every node
            # again. One status pass when the interval is over shows what changed meanwhile.
            self._status_later(key, state, STATUS_INTERVAL - since)
            return
        await self._write_status(key, state, spec, pod_spec, generation, len(kept_back))

    async def _check_template(
        self, key: Key, state: DaemonSetState, template: Mapping[str, Any]
    ) -> None:
        """Ask the API server whether the template's pods can exist at all (a dry-run create),
        once per template: the admission webhook refuses such a template at `kubectl apply`,
        but it may have been down, or the object older than it."""
        pod = checked_pod(state.body)
        answer = await self.kube.dry_run_pod(key[0], pod)
        if no_verdict(answer.status):
            # Not knowing is no yes: an invalid node affinity would read as "no node matches"
            # and delete every pod. What runs keeps running until the API server answers.
            first_failure = state.template_check_backoff.delay == 0
            delay = state.template_check_backoff.next_delay()
            message = str(answer.body.get("message") or f"HTTP {answer.status}")
            logger.warning(
                "%s/%s: cannot check the pod template (%s); again in %.0f s", *key, message, delay
            )
            if first_failure:
                self._event(
                    key,
                    state,
                    "Warning",
                    "TemplateCheckFailed",
                    f"The API server gave no verdict on the pod template; no pod changes until "
                    f"it does: {message}",
                )
            self._wake_later(key, delay, ())
            return
        state.template_check_backoff.reset()
        refusal = pod_template_review(answer.status, answer.body).refusal or None
        state.checked_template = template_hash(template)
        if refusal is not None and refusal != state.template_problem:
            self._event(
                key,
                state,
                "Warning",
                "InvalidTemplate",
                f"The API server refuses the pod template; no pod changes until it is fixed: "
                f"{refusal}",
            )
        state.template_problem = refusal

    def _forget_expectations(
        self, key: Key, state: DaemonSetState, nodes: Iterable[str], now: float
    ) -> None:
        """End the expectations the pod sources now answer: the pod is there, or it is too old
        to wait for (a create whose answer was lost and never took effect)."""
        for node in nodes:
            expected = state.expected.get(node)
            if expected is None:
                continue
            if any(pod.name == expected.name for pod in self.pods.on_node(key, node)):
                del state.expected[node]
            elif now - expected.sent_at > EXPECTATION_TIMEOUT:
                logger.warning(
                    "%s/%s: pod %s for node %s never showed up; creating again",
                    *key,
                    expected.name,
                    node,
                )
                del state.expected[node]

    def _status_later(self, key: Key, state: DaemonSetState, delay: float) -> None:
        if state.status_timer is not None:
            return

        def due() -> None:
            state.status_timer = None
            state.status_due = True
            self._wake(key)

        state.status_timer = asyncio.get_running_loop().call_later(delay, due)

    # Revisions ---------------------------------------------------------------------------

    async def _record_revision(
        self, key: Key, state: DaemonSetState, template: Mapping[str, Any]
    ) -> None:
        """Make sure the template has a ControllerRevision, and the newest revision number."""
        namespace = key[0]
        uid = state.body["metadata"]["uid"]
        collision_count = int((state.body.get("status") or {}).get("collisionCount") or 0)
        for _attempt in range(5):
            bodies = await self._claimed_revisions(key, state)
            decision = decide_revision(owned_revisions(bodies, uid), template, collision_count)
            collision_count = decision.collision_count
            outcome = Outcome(200)
            if decision.create is not None:
                revision = build_revision(state.body, template, decision.hash, decision.create)
                outcome = await self.kube.create_controller_revision(namespace, revision)
                if outcome.already_exists:
                    # Either another pass made it meanwhile (then the next listing shows it), or
                    # an object we do not own took the name: a collision, so hash again.
                    name = revision_name(key[1], decision.hash)
                    existing = await self.kube.get_controller_revision(namespace, name)
                    if existing is not None and not owned_revisions([existing], uid):
                        collision_count += 1
                    continue
            elif decision.renumber is not None:
                # An undo: the old template's revision becomes the newest, in place, as the
                # native controller does (same object, same UID).
                old, number = decision.renumber
                outcome = await self.kube.patch_controller_revision(
                    namespace, old.name, {"revision": number}
                )
                if outcome.status == 422 and "immutable" in outcome.message:
                    # Stored by an earlier kubeherd with non-canonical data, which any patch
                    # is refused for: made again with its new number instead.
                    outcome = await self._recreate_revision(key, state, template, old, number)
                    if outcome.already_exists:
                        continue
            if not outcome.ok:
                self._event(
                    key,
                    state,
                    "Warning",
                    "FailedRevision",
                    f"Error recording the template's ControllerRevision: {outcome.message}",
                )
                raise KubeError(outcome)
            if decision.create is not None or decision.renumber is not None:
                bodies = await self._claimed_revisions(key, state)
            state.revisions = owned_revisions(bodies, uid)
            state.revision = decision.hash
            state.collision_count = collision_count
            return
        raise RuntimeError(f"no free ControllerRevision name for {key[0]}/{key[1]}")

    async def _claimed_revisions(self, key: Key, state: DaemonSetState) -> list[dict[str, Any]]:
        """This CustomDaemonSet's revisions: the ones it controls, found by its own label or by
        its selector (a revision labelled the native way), and orphans matching its selector,
        which it adopts as the native controller does."""
        namespace, name = key
        uid = state.body["metadata"]["uid"]
        selector = selector_text((state.body.get("spec") or {}).get("selector") or {})
        by_uid: dict[str, dict[str, Any]] = {}
        orphans: list[dict[str, Any]] = []
        for query in (f"{OWNER_LABEL}={name}", selector):
            for body in await self.kube.list_controller_revisions(namespace, query):
                owner = controller_uid(body)
                if owner == uid:
                    by_uid[body["metadata"]["uid"]] = body
                elif owner is None and query == selector and revision_adoptable(body):
                    orphans.append(body)
        reference = controller_reference(state.body, KIND)
        for body in orphans:
            outcome = await self.kube.patch_object(
                REVISION_KIND,
                namespace,
                body["metadata"]["name"],
                adoption_patch(body, reference, name),
            )
            if outcome.ok:
                logger.info("%s/%s: adopted %s", *key, body["metadata"]["name"])
                metadata = body["metadata"]
                by_uid[metadata["uid"]] = {
                    **body,
                    "metadata": {
                        **metadata,
                        "ownerReferences": [*(metadata.get("ownerReferences") or []), reference],
                    },
                }
        return list(by_uid.values())

    async def _claim_pods(self, key: Key, state: DaemonSetState) -> None:
        """Adopt the orphan pods the selector matches, and release the pods this CustomDaemonSet
        controls that it no longer matches (their labels were changed), as the native
        controller does; the watch then shows them joining or leaving."""
        namespace, name = key
        uid = state.body["metadata"]["uid"]
        selector = (state.body.get("spec") or {}).get("selector") or {}
        if not selector_text(selector):
            return
        reference = controller_reference(state.body, KIND)
        orphans = await self.kube.list_objects(
            POD_KIND, f"{selector_text(selector)},!{OWNER_LABEL}", namespace
        )
        labelled = [
            pod.name
            for node in self.pods.nodes_with_pods(key)
            for pod in self.pods.on_node(key, node)
            if pod.orphan and not pod.deleting
        ]
        for pod_name in labelled:
            found = await self.kube.get_object(POD_KIND, namespace, pod_name)
            if found is not None:
                orphans.append(found)
        for body in orphans:
            metadata = body.get("metadata") or {}
            if controller_uid(body) is not None or metadata.get("deletionTimestamp"):
                continue
            outcome = await self.kube.patch_object(
                POD_KIND, namespace, metadata["name"], adoption_patch(body, reference, name)
            )
            if outcome.ok:
                logger.info("%s/%s: adopted pod %s", *key, metadata["name"])
                node = target_node(body)
                if node and node not in state.expected:
                    # Until the watch shows it as ours, its node must not get a second pod.
                    revision = str((metadata.get("labels") or {}).get(REVISION_LABEL, ""))
                    state.expected[node] = ExpectedPod(metadata["name"], revision, self.clock())
        for query in outside_selector_texts(selector):
            for body in await self.kube.list_objects(
                POD_KIND, f"{OWNER_LABEL}={name},{query}", namespace
            ):
                if controller_uid(body) != uid:
                    continue
                outcome = await self.kube.patch_object(
                    POD_KIND, namespace, body["metadata"]["name"], release_patch(body, uid)
                )
                if outcome.ok:
                    logger.info("%s/%s: released pod %s", *key, body["metadata"]["name"])

    async def _recreate_revision(
        self,
        key: Key,
        state: DaemonSetState,
        template: Mapping[str, Any],
        old: Revision,
        number: int,
    ) -> Outcome:
        outcome = await self.kube.delete_controller_revision(key[0], old.name, old.uid)
        if not (outcome.ok or outcome.not_found):
            return outcome
        revision = build_revision(state.body, template, old.hash, number)
        return await self.kube.create_controller_revision(key[0], revision)

    async def _prune_history(self, key: Key, state: DaemonSetState, limit: int) -> None:
        if len(state.revisions) - 1 <= limit:
            return
        live = {pod.revision for record in state.ledger.values() for pod in record.pods}
        for revision in revisions_to_prune(state.revisions, state.revision, limit, live):
            outcome = await self.kube.delete_controller_revision(
                key[0], revision.name, revision.uid
            )
            if outcome.ok or outcome.not_found:
                state.revisions.remove(revision)
                logger.info("%s/%s: pruned %s", *key, revision.name)
            else:
                logger.warning("%s/%s: %s not pruned: %s", *key, revision.name, outcome.message)

    def _previous_revision(self, state: DaemonSetState) -> Revision | None:
        """The revision a partition keeps nodes on: the last one every node ran."""
        current = (state.body.get("status") or {}).get("currentRevision")
        for revision in state.revisions:
            if revision.name == current and revision.hash != state.revision:
                return revision
        return None

    def _surge_rule(self, spec: Mapping[str, Any], revision: str, now: float) -> SurgeRule | None:
        strategy = spec.get("updateStrategy") or {}
        surge = (strategy.get("rollingUpdate") or {}).get("maxSurge")
        if strategy.get("type", "RollingUpdate") != "RollingUpdate" or surge in (None, 0, "0%"):
            return None
        return SurgeRule(revision, int(spec.get("minReadySeconds") or 0), now)

    def _rollout_step(
        self,
        state: DaemonSetState,
        planned: list[DeletePod],
        strategy: Mapping[str, Any],
        spec: Mapping[str, Any],
        revision: str,
        now: float,
        kept_back: frozenset[str],
    ) -> RolloutStep:
        # A delete is done once the ledger shows the pod Terminating or gone.
        state.rollout_deleted &= {
            pod.uid for record in state.ledger.values() for pod in record.active_pods
        }
        step = plan_rolling_update(
            state.ledger,
            revision,
            strategy.get("rollingUpdate") or {},
            int(spec.get("minReadySeconds") or 0),
            now,
            state.rollout_deleted,
            frozenset(node for node, pod in state.expected.items() if pod.revision == revision),
            kept_back,
        )
        state.rolling = step.outdated
        already = {delete.pod.uid for delete in planned}
        step.deletes = [delete for delete in step.deletes if delete.pod.uid not in already]
        state.rollout_deleted |= {delete.pod.uid for delete in step.deletes}
        return step

    def _may_delete_failed(self, state: DaemonSetState, node: str, now: float) -> bool:
        entry = state.failed_pod_backoff.get(node)
        return entry is None or entry[0] <= now

    async def _delete_pods(self, key: Key, state: DaemonSetState, deletes: list[DeletePod]) -> None:
        namespace = key[0]
        now = self.clock()
        for delete in deletes:
            if delete.pod.phase == "Failed":
                # The next failed pod on this node stays for a growing delay before it is
                # replaced, so a crashing daemon does not hammer the API server (and the node)
                # with pods, and users can see why it failed.
                _, backoff = state.failed_pod_backoff.get(
                    delete.node, (0.0, Backoff(self.max_failed_pod_backoff))
                )
                state.failed_pod_backoff[delete.node] = (now + backoff.next_delay(), backoff)
                self._event(
                    key,
                    state,
                    "Warning",
                    "FailedDaemonPod",
                    f"Found failed daemon pod {namespace}/{delete.pod.name} "
                    f"on node {delete.node}, will try to kill it",
                )
        outcomes = await asyncio.gather(
            *(self.kube.delete_pod(namespace, d.pod.name, d.pod.uid) for d in deletes)
        )
        for delete, outcome in zip(deletes, outcomes, strict=True):
            if outcome.ok:
                self._event(
                    key,
                    state,
                    "Normal",
                    "SuccessfulDelete",
                    f"Deleted pod: {delete.pod.name} on node {delete.node} because {delete.why}",
                )
            elif not outcome.not_found:
                self._event(
                    key,
                    state,
                    "Warning",
                    "FailedDelete",
                    f"Error deleting pod {delete.pod.name} on node "
                    f"{delete.node}: {outcome.message}",
                )

    async def _create_pods(
        self, key: Key, state: DaemonSetState, creates: list[CreatePod], kept_back: frozenset[str]
    ) -> Outcome | None:
        """Create in doubling batches and stop at the first batch with a failure, as the native
        controller does: a quota that refuses one pod refuses the next 5,000 too. The first batch
        is 1 after a refusal, else as large as the last creates went (`create_batches`)."""
        if not creates:
            return None
        previous = self._previous_revision(state) if kept_back else None
        current_pods = DaemonPodMaker.of(state.body, state.revision)
        kept_back_pods = (
            DaemonPodMaker.of(state.body, previous.hash, previous.template)
            if previous is not None
            else None
        )

        def build(node: str) -> dict[str, Any]:
            if kept_back_pods is not None and node in kept_back:
                return kept_back_pods.pod(node)
            return current_pods.pod(node)

        remaining = list(creates)
        sent: list[int] = []
        for batch_size in create_batches(len(creates), state.first_create_batch):
            batch, remaining = remaining[:batch_size], remaining[batch_size:]
            pods = [build(create.node) for create in batch]
            sent_at = self.clock()
            for pod, create in zip(pods, batch, strict=True):
                state.expected[create.node] = ExpectedPod(
                    pod["metadata"]["name"], pod["metadata"]["labels"][REVISION_LABEL], sent_at
                )
            outcomes = await asyncio.gather(*(self._create_pod(key[0], pod) for pod in pods))
            failure: Outcome | None = None
            for pod, create, outcome in zip(pods, batch, outcomes, strict=True):
                name = pod["metadata"]["name"]
                if not outcome.ok:
                    # Refused: nothing to wait for (a pod the watch showed meanwhile is seen).
                    expected = state.expected.get(create.node)
                    if expected is not None and expected.name == name:
                        del state.expected[create.node]
                if outcome.ok:
                    self._event(
                        key,
                        state,
                        "Normal",
                        "SuccessfulCreate",
                        f"Created pod: {name} on node {create.node}",
                    )
                elif outcome.namespace_terminating:
                    # As the native controller: nothing to create in a namespace on its way out.
                    return None
                else:
                    failure = outcome
                    self._event(
                        key,
                        state,
                        "Warning",
                        "FailedCreate",
                        f"Error creating pod for node {create.node}: {outcome.message}",
                    )
            if failure is not None:
                state.first_create_batch = next_first_batch(1, [], refused=True)
                return failure
            sent.append(batch_size)
        state.first_create_batch = next_first_batch(state.first_create_batch, sent, refused=False)
        return None

    async def _create_pod(self, namespace: str, pod: dict[str, Any]) -> Outcome:
        """Create, and if the answer was lost on the way, send the same pod again: its name
        makes the second request find the first one's pod (AlreadyExists) instead of making
        a second pod, so a retried create is created once."""
        outcome = await self.kube.create_pod(namespace, pod)
        if outcome.status != 0:
            return outcome
        retried = await self.kube.create_pod(namespace, pod)
        return Outcome(201) if retried.already_exists else retried

    def _schedule_retries(
        self,
        key: Key,
        state: DaemonSetState,
        creates: list[CreatePod],
        backing_off: list[str],
        failure: Outcome | None,
    ) -> None:
        if failure is not None:
            delay = state.create_backoff.next_delay()
            state.create_failure = failure.message
            logger.info(
                "%s/%s: creates refused, retrying in %.0fs: %s", *key, delay, failure.message
            )
            self._wake_later(key, delay, [create.node for create in creates])
            return
        if creates:
            state.create_backoff.reset()
            state.create_failure = None
        if backing_off:
            now = self.clock()
            soonest = min(state.failed_pod_backoff[node][0] for node in backing_off)
            self._wake_later(key, max(0.0, soonest - now), backing_off)

    async def _write_status(
        self,
        key: Key,
        state: DaemonSetState,
        spec: Mapping[str, Any],
        pod_spec: Mapping[str, Any],
        generation: int,
        kept_back: int,
    ) -> None:
        now = self.clock()
        state.status_computed_at = now
        min_ready_seconds = int(spec.get("minReadySeconds") or 0)
        summary = summarize(state.ledger, state.revision, min_ready_seconds, now)
        previous = state.body.get("status") or {}
        rollout = self._rollout_view(key, state, spec, summary, kept_back, now)
        status = build_status(
            summary,
            generation=generation,
            node_selector=node_selector_text(pod_spec),
            previous=previous,
            create_failure=state.create_failure,
            now=now_iso(),
            rollout=rollout,
            template_problem=state.template_problem,
        )
        if state.availability_check is not None:
            state.availability_check.cancel()
            state.availability_check = None
        if summary.next_available_at is not None:
            # No watch event marks the moment minReadySeconds have passed: wake up for it.
            state.availability_check = asyncio.get_running_loop().call_later(
                summary.next_available_at - now + 0.5, lambda: self._wake(key, everything=True)
            )
        if not status_changed(previous, status):
            return
        self._report_rollout(key, state, previous, status)
        state.written_status = {**previous, **status}
        outcome = await self.kube.patch_status(PLURAL, key[0], key[1], status)
        if outcome.ok:
            # Remember what we wrote: the watch event with it may come after our next pass.
            state.body = {**state.body, "status": state.written_status}
            state.own_versions = [*state.own_versions[-(OWN_VERSIONS_KEPT - 1) :]]
            state.own_versions.append(outcome.resource_version)
        elif not outcome.not_found:
            logger.warning("%s/%s: status not written: %s", *key, outcome.message)

    def _rollout_view(
        self,
        key: Key,
        state: DaemonSetState,
        spec: Mapping[str, Any],
        summary: Summary,
        kept_back: int,
        now: float,
    ) -> RolloutView:
        previous = state.body.get("status") or {}
        strategy = spec.get("updateStrategy") or {}
        update_revision = revision_name(key[1], state.revision)
        number = next((r.number for r in state.revisions if r.hash == state.revision), 0)
        # The previous revision stays current until every eligible node runs the new one.
        current = (
            update_revision
            if summary.updated >= summary.desired
            else str(previous.get("currentRevision") or "")
        )
        view = RolloutView(
            update_revision=update_revision,
            number=number,
            current_revision=current,
            collision_count=state.collision_count,
            on_delete=strategy.get("type") == "OnDelete",
            paused=bool(spec.get("paused")),
            kept_back=kept_back,
        )
        if state.progress is None:
            # After a restart the deadline runs from the last progress the status recorded.
            state.progress = Progress(since=now)
            recorded = _progressing_condition(previous)
            if recorded.get("observedGeneration") == state.generation:
                state.progress = Progress(
                    state.revision,
                    int(previous.get("updatedNumberScheduled") or 0),
                    int(previous.get("numberAvailable") or 0),
                    parse_time(recorded.get("lastUpdateTime")) or now,
                )
        progress = state.progress
        progress.observe(state.revision, summary.updated, summary.available, now)
        view = replace(view, progress_time=iso_time(progress.since))
        if state.deadline_check is not None:
            state.deadline_check.cancel()
            state.deadline_check = None
        if progressing(summary, view)[1] != "RollingUpdate":
            return view
        deadline = int(spec.get("progressDeadlineSeconds") or 600)
        if now - progress.since < deadline:
            state.deadline_check = asyncio.get_running_loop().call_later(
                progress.since + deadline - now + 0.5, lambda: self._wake(key, everything=True)
            )
            return view
        count, examples = pods_holding_up(
            state.ledger, state.revision, int(spec.get("minReadySeconds") or 0), now
        )
        rolling_update = strategy.get("rollingUpdate") or {}
        limit = (
            f"maxSurge {rolling_update['maxSurge']}"
            if rolling_update.get("maxSurge") not in (None, 0, "0%")
            else f"maxUnavailable {rolling_update.get('maxUnavailable', 1)}"
        )
        stuck = (
            f"{view.name} made no progress for {deadline}s: {summary.updated} of "
            f"{summary.desired} eligible nodes run it, {summary.available} are available; "
            f"the update halts at {limit}"
        )
        if count:
            stuck += f"; {count} new pods are not available: {', '.join(examples)}"
        return replace(view, stuck=stuck)

    def _report_rollout(
        self,
        key: Key,
        state: DaemonSetState,
        previous: Mapping[str, Any],
        status: Mapping[str, Any],
    ) -> None:
        """Events for a rollout's milestones: once each, when the Progressing reason turns or
        the revision changes (a quick rollout may go from complete to complete between two
        status writes)."""
        before = (_progressing_condition(previous).get("reason"), previous.get("updateRevision"))
        after = _progressing_condition(status)
        if (after.get("reason"), status.get("updateRevision")) == before:
            return
        if after.get("reason") == "RolloutComplete":
            self._event(key, state, "Normal", "RolloutComplete", str(after.get("message")))
        elif after.get("reason") == "PartitionRolledOut":
            self._event(key, state, "Normal", "PartitionRolledOut", str(after.get("message")))
        elif after.get("reason") == "ProgressDeadlineExceeded":
            self._event(key, state, "Warning", "RolloutStuck", str(after.get("message")))

    def _event(
        self, key: Key, state: DaemonSetState, type_: str, reason: str, message: str
    ) -> None:
        logger.info("%s/%s: %s: %s", *key, reason, message)
        if not self.events.allow(key, reason, self.clock()):
            return
        self.kube.post_event_soon(
            involved_object(state.body, KIND), type_=type_, reason=reason, message=message
        )
