"""The SchedulerProfile controller: validate, roll out, report, and clean up on delete.

Events only mark a resource on the shared runner, which runs one pass at a time per resource, so
two passes never race to write its status. A pass is a straight line:
- on deletion, everything kubeherd made for the resource is deleted (the cluster-scoped objects
  and those in other namespaces have no owner reference the garbage collector could follow),
  then its finalizer, which a pass puts on first;
- gather (shell/gather.py): the Deployment; for a converge (a new generation, once at start, a
  retry), the image, the judge pods and what an earlier spec left; for a pruning, the ConfigMaps;
- plan (core/converge.py, pure): the verdict, the judge, the objects to apply and to delete, the
  conditions; see there for what a converge decides;
- act (shell/act.py): every write, then `settle` (pure) reads their answers into the state;
- report (core/report.py, pure): the status from the Deployment and the Lease, written only when
  it changed, with an event when the leader changes.

A spec is applied once: kubeherd does not undo a `kubectl rollout undo` of the scheduler
Deployment (the old template brings back the old configuration's ConfigMap, which is kept for
it); the status says so, and the next change of the SchedulerProfile's spec rolls forward.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from kubeherd.defaults import SCHEDULER_STATUS_INTERVAL
from kubeherd.events import EventRecorder
from kubeherd.kube.client import Kube
from kubeherd.names import SCHEDULERPROFILE
from kubeherd.runner import KeyedRunner, Marks
from kubeherd.scheduler.core import claims
from kubeherd.scheduler.core.converge import plan_pass, settle
from kubeherd.scheduler.core.owner import FINALIZER
from kubeherd.scheduler.core.report import report
from kubeherd.scheduler.core.status import Running
from kubeherd.scheduler.shell.act import Act
from kubeherd.scheduler.shell.gather import ClaimSource, gather, observe, own_deployment
from kubeherd.scheduler.shell.kinds import every_place
from kubeherd.scheduler.state import Key, ProfileState

# The runner's timer of the regular look at the Deployment and the Lease.
LOOK_AGAIN_TIMER = "look-again"


class SchedulerProfileController:
    def __init__(
        self,
        kube: Kube,
        claims: ClaimSource,
        *,
        status_interval: float = SCHEDULER_STATUS_INTERVAL,
        clock: Callable[[], float] = time.time,
        cluster_wide: bool = True,
    ) -> None:
        self.kube = kube
        self.claims = claims
        # An operator of some namespaces only holds its rights on Roles and RoleBindings there
        # (and in kube-system): it looks for its own where it may make them, not cluster-wide.
        self.cluster_wide = cluster_wide
        self.status_interval = status_interval
        self.clock = clock
        self.events = EventRecorder(kube, SCHEDULERPROFILE, clock=clock)
        self.runner: KeyedRunner[Key] = KeyedRunner(self._run_pass, what=SCHEDULERPROFILE)
        self._states: dict[Key, ProfileState] = {}

    def profile_changed(self, body: Mapping[str, Any]) -> None:
        metadata = body["metadata"]
        key = (metadata["namespace"], metadata["name"])
        state = self._states.get(key)
        if state is None:
            # What was applied before a restart is known again once the spec is converged
            # (at the first pass); what runs, the status says.
            state = ProfileState(body=body, running=_running_from(body.get("status") or {}))
            self._states[key] = state
            self.runner.mark(key)
            return
        before = state.body
        state.body = body
        # Our own status writes come back as events too: only a new spec or a deletion matters,
        # and to the others, a change of the names this one runs.
        new_spec = metadata.get("generation") != before["metadata"].get("generation")
        # A new spec may free a Lease another one was refused for.
        if new_spec or claims.running_names(body) != claims.running_names(before):
            self._recheck_refused(key)
        if new_spec:
            # A new spec is tried at once, not after the last one's retry delay (a judge that
            # could not pull its image waits minutes; the edit may fix the image's name).
            state.retry_at = 0.0
        if new_spec or (
            metadata.get("deletionTimestamp") and not before["metadata"].get("deletionTimestamp")
        ):
            self.runner.mark(key)

    def bodies(self) -> list[Mapping[str, Any]]:
        """Each SchedulerProfile as last seen (for metrics)."""
        return [state.body for state in self._states.values()]

    def profile_deleted(self, key: Key) -> None:
        self._states.pop(key, None)
        self.runner.forget(key)
        self.events.forget(key)
        self._recheck_refused(key)

    def _recheck_refused(self, changed: Key) -> None:
        """A resource that gave up or changed its scheduler names may free a name another one
        was refused for."""
        for key, state in self._states.items():
            if key != changed and state.validity.status == "False":
                state.handled_generation = None
                self.runner.mark(key)

    async def stop(self) -> None:
        await self.runner.stop()

    async def _run_pass(self, key: Key, marks: Marks) -> None:
        state = self._states.get(key)
        if state is None:
            return
        if await self._pass(key, state):
            return  # deleted and cleaned up: nothing to look at again
        # Nothing marks the moments a Deployment rolls or a Lease changes hands: look again.
        delay = self.status_interval
        if state.handled_generation != state.generation:
            delay = min(delay, max(0.0, state.retry_at - self.clock()))
        self.runner.wake_later(key, LOOK_AGAIN_TIMER, delay)

    async def _pass(self, key: Key, state: ProfileState) -> bool:
        """One look at the resource; True when it is gone and the task can end."""
        act = Act(self.kube, self.events, state.body)
        if state.body["metadata"].get("deletionTimestamp"):
            return await self._delete(state, act)
        now = self.clock()
        given = await gather(self.kube, state, self.claims, now=now, cluster_wide=self.cluster_wide)
        plan = plan_pass(given)
        outcome = await act.send(plan)
        changes, events = settle(given, plan, outcome)
        state.take(changes, now)
        act.post(events)
        deployment = given.deployment
        if plan.writes:
            deployment = await own_deployment(self.kube, state.owner)
        await self._report(state, act, deployment)
        return False

    async def _delete(self, state: ProfileState, act: Act) -> bool:
        """Everything kubeherd made for the resource goes, then its finalizer; True once."""
        finalizers = list(state.body["metadata"].get("finalizers") or [])
        if FINALIZER not in finalizers:
            return True
        places = every_place(state.owner, cluster_wide=self.cluster_wide)
        if await act.clean_up(places, [f for f in finalizers if f != FINALIZER]):
            return True
        state.retry_at = self.clock() + state.backoff.next_delay()
        return False

    async def _report(
        self, state: ProfileState, act: Act, deployment: Mapping[str, Any] | None
    ) -> None:
        result = report(await observe(self.kube, state, deployment, now=self.clock()))
        if result.running is not None:
            state.running = result.running
        if result.reconverge:
            # Not converged: the look again after this pass comes at once (or when the retry
            # of a failed rollout is due) and rolls it out again.
            state.handled_generation = None
        if result.status is None:
            return
        act.post(result.events)
        previous = state.body.get("status") or {}
        if await act.write_status(result.status):
            # Remember what we wrote: the watch event with it may come after our next pass.
            state.body = {**state.body, "status": {**previous, **result.status}}


def _running_from(status: Mapping[str, Any]) -> Running:
    """What runs, as the status written before a restart says."""
    return Running(str(status.get("configHash") or ""), str(status.get("schedulerNames") or ""))
