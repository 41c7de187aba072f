"""The act step of a pass: every write its plan calls for, in one order, and what they leave in
the object's state. The template's verdict and the spec's warnings first (a pass that stops
short writes nothing else), then the revision (a write that loses a race sends the pass round
again before any pod changes), the claims, the deletes and the creates; old revisions beyond the
history limit last.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from kubeherd.daemonset.core.model import NodeRecord
from kubeherd.daemonset.core.overrides import ResourceOverride
from kubeherd.daemonset.core.plan import PassPlan, Stop
from kubeherd.daemonset.shell.api import DaemonSetApi
from kubeherd.daemonset.shell.pod_writes import (
    create_pods,
    delete_pods,
    pod_builder,
    send_claims,
    update_pods_in_place,
)
from kubeherd.daemonset.shell.revision_writes import (
    kept_back_templates,
    prune_history,
    write_revisions,
)
from kubeherd.daemonset.shell.state import Attempt, DaemonSetState
from kubeherd.events import EventRecorder

logger = logging.getLogger(__name__)


@dataclass
class Acted:
    """What the writes leave for the controller's timers."""

    # No verdict on the template: how long until it is asked again.
    template_retry: float | None = None
    # The creates the API server refused: how long until they are sent again.
    create_retry: float | None = None
    # Nodes whose pod the plan counted on adopting, and whose adoption was refused.
    unadopted: list[str] = field(default_factory=list)


@dataclass
class Act:
    kube: DaemonSetApi
    events: EventRecorder
    clock: Callable[[], float]

    async def act(self, state: DaemonSetState, plan: PassPlan, attempt: Attempt) -> Acted | Attempt:
        """Send the plan's writes; an `Attempt` when a revision write lost a race."""
        body, spec = state.body, state.spec
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        for event in plan.events:
            self.events.record(body, event.type, event.reason, event.message)
        state.selector_problem_announced = spec.selector_problem
        verdict, check = plan.template, state.template
        if verdict is not None and verdict.no_verdict is not None:
            delay = check.backoff.next_delay()
            logger.warning(
                "%s/%s: cannot check the pod template (%s); again in %.0f s",
                namespace,
                name,
                verdict.no_verdict,
                delay,
            )
            return Acted(template_retry=delay)
        if verdict is not None:
            check.backoff.reset()
            check.checked, check.problem = verdict.template_hash, verdict.problem
        if plan.stop is not None:
            assert plan.stop is not Stop.NO_VERDICT
            return Acted()
        if plan.revisions is not None:
            history = await write_revisions(
                self.kube, self.events, body, spec.template_json, plan.revisions, attempt
            )
            if isinstance(history, Attempt):
                return history
            state.history = history
        rollout, pacing = state.rollout, state.pacing
        rollout.template_hash, rollout.generation = spec.template_hash, spec.generation
        if plan.forget_failed_pods:
            pacing.failed_pods.clear()
        unadopted = []
        if plan.claims is not None:
            state.claims_due = False
            unadopted = await send_claims(self.kube, body, pacing, plan.claims, self.clock)
        for node, record in plan.records.items():
            if record is None:
                state.ledger.pop(node, None)
            else:
                state.ledger[node] = record
        for node, pod in plan.lost:
            logger.warning(
                "%s/%s: pod %s for node %s never showed up; creating again",
                namespace,
                name,
                pod.name,
                node,
            )
        for node in plan.seen:
            pacing.expected.pop(node, None)
        rollout.rolling, rollout.deleted = plan.rolling, plan.rollout_deleted
        rollout.canary = plan.canary
        await delete_pods(self.kube, self.events, body, pacing, plan.deletes, self.clock())

        def override_of(node: str) -> ResourceOverride | None:
            return spec.overrides.by_key(_override_key(state.ledger.get(node)))

        rollout.updated = plan.rollout_updated - await update_pods_in_place(
            self.kube,
            self.events,
            body,
            pacing,
            plan.updates,
            spec,
            state.history.revision,
            self.clock(),
            override_of,
        )
        kept_back = {create.revision for create in plan.creates} - {state.history.revision}
        templates = (
            await kept_back_templates(self.kube, namespace, state.history, kept_back)
            if kept_back
            else {}
        )
        failure = await create_pods(
            self.kube,
            self.events,
            body,
            pacing,
            plan.creates,
            pod_builder(
                body,
                state.history,
                lambda: spec.template,
                templates,
                override_of,
            ),
            self.clock,
            self.kube.limits.max_concurrent,
            admitted_now=plan.template is not None and plan.template.admitted,
        )
        retry = None
        if failure is not None:
            retry = pacing.create_backoff.next_delay()
            pacing.create_failure = failure.message
            logger.info(
                "%s/%s: creates refused, retrying in %.0fs: %s",
                namespace,
                name,
                retry,
                failure.message,
            )
        elif plan.creates:
            pacing.create_backoff.reset()
            pacing.create_failure = None
        state.history = await prune_history(
            self.kube, (namespace, name), state.history, spec.history_limit, state.ledger
        )
        return Acted(create_retry=retry, unadopted=unadopted)


def _override_key(record: NodeRecord | None) -> str:
    return record.override if record is not None else ""
