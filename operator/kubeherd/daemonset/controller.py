"""The CustomDaemonSet controller: gather, plan, act, report.

Watch events only mark what changed (a CustomDaemonSet, or some nodes of it) on the shared
keyed runner (`kubeherd.runner`), which runs one pass at a time per object over everything
marked so far. A pass is one straight line: it gathers what the decision needs (`reads`: the
marked nodes' Nodes and pods from the watches, the template's verdict, the revisions, the pods
a claim may concern), has the pure pass (`core.plan.plan_pass`) decide everything, sends every
write of the plan (`act`), and has the pure report (`report.report`) say what the status is
and when to look again. Only a revision write that loses a race sends it round again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kubeherd.daemonset.core.plan import PassPlan, Stop, plan_pass
from kubeherd.daemonset.core.report import ReportInput, report
from kubeherd.daemonset.core.spec import DaemonSetSpec, kept_body, parse_spec
from kubeherd.daemonset.core.status import WaveView, refused_selector_status
from kubeherd.daemonset.shell.act import Act, Acted
from kubeherd.daemonset.shell.api import DaemonSetApi
from kubeherd.daemonset.shell.reads import IdentityLookup, Reads, no_identity
from kubeherd.daemonset.shell.state import Attempt, DaemonSetState, Key, NodeSource, PodSource
from kubeherd.defaults import MAX_CREATE_BACKOFF, MAX_FAILED_POD_BACKOFF
from kubeherd.events import EventRecorder
from kubeherd.meta import iso_time, status_changed
from kubeherd.names import CUSTOMDAEMONSET, CUSTOMDAEMONSETS
from kubeherd.runner import KeyedRunner, Marks

logger = logging.getLogger(__name__)

# The status is computed at most this often per object (seconds): summing up every node's pod
# after each of thousands of pod events took an eighth of the operator's CPU in a rollout.
STATUS_INTERVAL = 1.0
COALESCE_SECONDS = 0.05
# How many of our latest status writes are recognised when their watch events come back.
OWN_VERSIONS_KEPT = 8
# Attempts of one pass whose revision write loses a race (a name an object we do not own took
# makes the next attempt hash with a higher count).
MAX_ATTEMPTS = 5
# The runner's timers, per CustomDaemonSet.
# (The report names its own: `Report.wake_ups`.)
STATUS_TIMER, CREATE_RETRY_TIMER = "status", "create-retry"
FAILED_POD_TIMER, TEMPLATE_TIMER = "failed-pod", "template"


class DaemonSetController:
    def __init__(
        self,
        kube: DaemonSetApi,
        nodes: NodeSource,
        pods: PodSource,
        *,
        max_create_backoff: float = MAX_CREATE_BACKOFF,
        max_failed_pod_backoff: float = MAX_FAILED_POD_BACKOFF,
        clock: Callable[[], float] = time.time,
        operator: IdentityLookup = no_identity,
    ) -> None:
        self.kube = kube
        self.nodes = nodes
        self.pods = pods
        self.max_create_backoff = max_create_backoff
        self.max_failed_pod_backoff = max_failed_pod_backoff
        self.clock = clock
        self.events = EventRecorder(kube, CUSTOMDAEMONSET, clock=clock)
        self.reads = Reads(kube, nodes, pods, operator, clock)
        self.act = Act(kube, self.events, clock)
        self.runner: KeyedRunner[Key] = KeyedRunner(
            self._pass,
            what=CUSTOMDAEMONSET,
            coalesce_seconds=COALESCE_SECONDS,
            max_retry_delay=max_create_backoff,
        )
        self._states: dict[Key, DaemonSetState] = {}
        self._started = clock()

    # Inputs: called from the watch handlers -----------------------------------------------

    def daemonset_changed(
        self, body: Mapping[str, Any], ready: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """A CustomDaemonSet as its watch shows it. Its first pass awaits `ready` (the
        watches' first listing, and its own pods'): what is kept of the body is taken now, so
        the watch's copy of it need not wait for that."""
        key = (body["metadata"]["namespace"], body["metadata"]["name"])
        if body["metadata"].get("deletionTimestamp"):
            # Being deleted, in the foreground or orphaning its pods: the garbage collector now
            # owns the pods' fate, and a pod made now would fight it. The native controller
            # also stops at a deletion timestamp.
            self.daemonset_deleted(key)
            return
        state = self._states.get(key)
        if state is None:
            backoffs = (self.max_create_backoff, self.max_failed_pod_backoff)
            state = self._states[key] = DaemonSetState.of(
                kept_body(body), parse_spec(body), *backoffs
            )
            state.ready = ready
        own_write = state.status.own(body, state.body)
        if body["metadata"].get("generation") != state.body["metadata"].get("generation"):
            state.spec = parse_spec(body)
        # Not the body itself: its template is in the spec, compactly, and the rest of it
        # (managed fields, kubectl's last-applied annotation) is read by nothing.
        state.body = kept_body(body)
        # Our own status writes come back as events too and change nothing. Anything else (a
        # new spec, a status someone else wrote, labels) gets a full pass, as the native
        # controller re-syncs on every update: what it owns is written again if it differs.
        if not own_write:
            state.claims_due = True
            self.runner.mark(key, everything=True)

    def bodies(self) -> list[Mapping[str, Any]]:
        """Each CustomDaemonSet as last seen, with the status last written (for metrics)."""
        return [state.body for state in self._states.values()]

    def daemonset_deleted(self, key: Key) -> None:
        self._states.pop(key, None)
        self.runner.forget(key)
        self.events.forget(key)

    def node_changed(self, name: str) -> None:
        for key in self._states:
            self.runner.mark(key, nodes=(name,))

    def selector_of(self, key: Key) -> Mapping[str, Any] | None:
        state = self._states.get(key)
        return state.spec.selector if state is not None else None

    def pod_relabelled(self, key: Key) -> None:
        """A daemon pod left the selector (to be released), or an orphan matches it (to be
        adopted)."""
        state = self._states.get(key)
        if state is not None:
            state.claims_due = True
            self.runner.mark(key, everything=True)

    def pod_changed(self, key: Key, node: str | None, name: str | None = None) -> None:
        state = self._states.get(key)
        if state is None:
            return
        expected = state.pacing.expected.get(node) if node else None
        if node and expected is not None and expected.name == name:
            # Seen (created, or already deleted again): the pod sources show the truth.
            del state.pacing.expected[node]
        self.runner.mark(key, nodes=(node,) if node else (), everything=node is None)

    async def stop(self) -> None:
        await self.runner.stop()

    # One pass: gather, plan, act, report -------------------------------------------------

    async def _pass(self, key: Key, marks: Marks) -> None:
        state = self._states.get(key)
        if state is None:
            return
        if state.ready is not None:
            # Never on a half-known cluster, nor before this object's pods are known.
            await state.ready()
            state.ready = None
        attempt = Attempt()
        for _ in range(MAX_ATTEMPTS):
            deferred = self.runner.pending(key, STATUS_TIMER)
            given = await self.reads.gather(key, state, marks, attempt, deferred)
            plan = plan_pass(given)
            # What the pass read (a view of every dirty node) is not needed while it acts,
            # which in a rollout's first pass lasts as long as its thousands of creates.
            del given
            if plan.flush_status and state.status.last_pass is not None:
                # A deferred status goes out first, for the spec it describes: the next
                # rollout starts from it (its currentRevision above all).
                self.runner.cancel(key, STATUS_TIMER)
                await self._write_status(key, state, *state.status.last_pass, plan.decided_at)
            acted = await self.act.act(state, plan, attempt)
            if isinstance(acted, Acted):
                break
            attempt = acted  # a revision write lost a race: gather and decide again
        else:
            raise RuntimeError(f"no free ControllerRevision name for {key[0]}/{key[1]}")
        if plan.stop is Stop.SELECTOR:
            await self._refuse_selector(key, state)
        elif plan.stop is Stop.TEMPLATE:
            await self._write_status(key, state, state.spec, 0, WaveView(), plan.decided_at)
        elif plan.stop is None:
            self._first_pass_logged(key, state, plan)
            await self._report(key, state, plan)
        self._look_again(key, state, plan, acted)

    def _first_pass_logged(self, key: Key, state: DaemonSetState, plan: PassPlan) -> None:
        """After a start, a user (and make bench) can see when each object was looked at
        against the whole cluster, and whether anything had to change."""
        if state.caught_up:
            return
        state.caught_up = True
        todo = (
            f"creating {len(plan.creates)} pods, deleting {len(plan.deletes)}"
            if plan.creates or plan.deletes
            else "nothing to do"
        )
        elapsed = self.clock() - self._started
        logger.info("%s/%s: first pass %.1fs after start: %s", *key, elapsed, todo)

    async def _report(self, key: Key, state: DaemonSetState, plan: PassPlan) -> None:
        state.status.last_pass = (state.spec, len(plan.kept_back), plan.waves)
        since = self.clock() - state.status.computed_at
        if since < STATUS_INTERVAL:
            # While pods start by the thousand, each pass would otherwise sum up every node
            # again. One status pass when the interval is over shows what changed meanwhile.
            if not self.runner.pending(key, STATUS_TIMER):
                self.runner.wake_later(key, STATUS_TIMER, STATUS_INTERVAL - since)
            return
        await self._write_status(key, state, *state.status.last_pass, plan.decided_at)

    async def _refuse_selector(self, key: Key, state: DaemonSetState) -> None:
        """A selector the API server would refuse (stored before the CRD refused it): no query
        may be built from it, so no pod is claimed, created or deleted. Raising instead would
        retry a pass that cannot succeed, forever; the spec's next change brings a new pass."""
        spec, previous = state.spec, state.body.get("status") or {}
        status = refused_selector_status(
            previous,
            generation=spec.generation,
            problem=str(spec.selector_problem),
            now=iso_time(self.clock()),
        )
        if status_changed(previous, status):
            await self._patch_status(key, state, previous, status)

    def _look_again(self, key: Key, state: DaemonSetState, plan: PassPlan, acted: Acted) -> None:
        """The timers of what this pass could not do yet."""
        if acted.template_retry is not None:
            # No verdict yet: nothing acts on a template that may be invalid.
            self.runner.wake_later(key, TEMPLATE_TIMER, acted.template_retry, everything=True)
        if acted.unadopted:
            self.runner.mark(key, nodes=acted.unadopted)
        if acted.create_retry is not None:
            nodes = [create.node for create in plan.creates]
            self.runner.wake_later(
                key, CREATE_RETRY_TIMER, acted.create_retry, nodes=nodes, merge=True
            )
        elif plan.backing_off:
            soonest = min(state.pacing.failed_pods[node][0] for node in plan.backing_off)
            self.runner.wake_later(
                key, FAILED_POD_TIMER, soonest - self.clock(), nodes=plan.backing_off, merge=True
            )

    async def _write_status(
        self,
        key: Key,
        state: DaemonSetState,
        spec: DaemonSetSpec,
        kept_back: int,
        waves: WaveView,
        decided_at: float | None,
    ) -> None:
        now = self.clock()
        state.status.computed_at = now
        previous = state.body.get("status") or {}
        result = report(
            ReportInput(
                name=key[1],
                spec=spec,
                ledger=state.ledger,
                revision=state.history.revision,
                revisions=state.history.revisions,
                collision_count=state.history.collision_count,
                kept_back=kept_back,
                previous=previous,
                progress=state.rollout.progress,
                create_failure=state.pacing.create_failure,
                template_problem=state.template.problem,
                now=now,
                decided_at=decided_at,
                waves=waves,
                canary=state.rollout.canary,
            )
        )
        state.rollout.progress = result.progress
        for timer, at in result.wake_ups.items():
            self.runner.cancel(key, timer)
            if at is not None:
                self.runner.wake_later(key, timer, at - now, everything=True)
        if result.status is None:
            return
        for event in result.events:
            self.events.record(state.body, event.type, event.reason, event.message)
        await self._patch_status(key, state, previous, result.status)

    async def _patch_status(
        self, key: Key, state: DaemonSetState, previous: Mapping[str, Any], status: dict[str, Any]
    ) -> None:
        written = state.status.written = {**previous, **status}
        outcome = await self.kube.patch_status(CUSTOMDAEMONSETS, key[0], key[1], status)
        if outcome.ok:
            # Remember what we wrote: the watch event with it may come after our next pass.
            state.body = {**state.body, "status": written}
            versions = state.status.own_versions[-(OWN_VERSIONS_KEPT - 1) :]
            state.status.own_versions = [*versions, outcome.resource_version]
        elif not outcome.not_found:
            logger.warning("%s/%s: status not written: %s", *key, outcome.message)
