"""What a pass reports of a SchedulerProfile: the configuration every scheduler pod runs, its
status (status.py) when it changed, the events a change brings (a new leader, none, a rollout
undone), and whether what runs the scheduler must be rolled out again because someone deleted
it. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubeherd.meta import conditions_by_type, iso_time, status_changed
from kubeherd.scheduler.core.config import Lock
from kubeherd.scheduler.core.model import Event
from kubeherd.scheduler.core.owner import Owner, selector_labels
from kubeherd.scheduler.core.status import (
    Applied,
    Running,
    Validity,
    build_status,
    running_config_hash,
)


@dataclass(frozen=True)
class Seen:
    """What the pass saw of a SchedulerProfile, and what the controller keeps of it."""

    body: Mapping[str, Any]
    validity: Validity
    applied: Applied
    running: Running
    # Whether the current generation was converged since the operator started.
    converged: bool
    deployment: Mapping[str, Any] | None
    # The scheduler names of the configuration every pod of the Deployment runs, when it is
    # neither the one reported nor the one applied (its ConfigMap says them).
    running_names: str
    lock: Lock
    # The Lease's holder while its lease runs ("" for none), and whether it is one of ours.
    leader: str
    leader_is_ours: bool
    now: float


@dataclass
class Report:
    # What every scheduler pod runs now, None when that did not change.
    running: Running | None = None
    # The status to write, None when it did not change.
    status: dict[str, Any] | None = None
    events: list[Event] = field(default_factory=list)
    reconverge: bool = False


def is_scheduler_pod(pod: Mapping[str, Any] | None, owner: Owner) -> bool:
    """Whether a pod is one of the resource's scheduler pods: another program on the same Lease
    would otherwise be reported as this scheduler leading."""
    labels = ((pod or {}).get("metadata") or {}).get("labels") or {}
    return pod is not None and all(
        labels.get(key) == value for key, value in selector_labels(owner).items()
    )


def report(seen: Seen) -> Report:
    result = Report()
    rolled_out = bool(seen.applied.config_hash) and seen.converged
    if seen.deployment is None and rolled_out and seen.validity.status == "True":
        # Someone deleted what runs the scheduler: roll it out again on the next pass.
        result.reconverge = True
    running = seen.running
    running_hash = running_config_hash(seen.deployment)
    if running_hash is not None and running_hash != running.config_hash:
        # Every pod runs it now: the spec's, or an older one a rollout undo brought back.
        applied = seen.applied
        names = (
            applied.scheduler_names if running_hash == applied.config_hash else seen.running_names
        )
        result.running = running = Running(running_hash, names)
    spec: Mapping[str, Any] = seen.body.get("spec") or {}
    lock = seen.lock
    previous = seen.body.get("status") or {}
    status = build_status(
        previous,
        generation=int(seen.body["metadata"].get("generation", 0)),
        validity=seen.validity,
        applied=seen.applied,
        running=running,
        deployment=seen.deployment,
        leader=seen.leader,
        lock=f"{lock.namespace}/{lock.name}",
        now=iso_time(seen.now),
        leader_is_ours=seen.leader_is_ours,
        elects=bool((spec.get("leaderElection") or {}).get("leaderElect", True)),
    )
    if not status_changed(previous, status):
        return result
    result.status = status
    result.events += _leader_events(seen, previous.get("leader") or "")
    result.events += _rollback_events(previous, status)
    return result


def _rollback_events(previous: Mapping[str, Any], status: Mapping[str, Any]) -> list[Event]:
    """One event when the Deployment stops running the spec's template (rollout undo)."""
    before = conditions_by_type(previous).get("Progressing", {}).get("reason")
    after = conditions_by_type(status).get("Progressing", {})
    if after.get("reason") == "RolledBack" and before != "RolledBack":
        return [Event("Normal", "RolledBack", str(after.get("message") or ""))]
    return []


def _leader_events(seen: Seen, before: str) -> list[Event]:
    after = seen.leader
    if before == after:
        return []
    lease = f"Lease {seen.lock.namespace}/{seen.lock.name}"
    if after:
        return [Event("Normal", "LeaderElected", f"{after} leads: it holds {lease}")]
    return [
        Event(
            "Warning",
            "NoLeader",
            f"no scheduler holds {lease} any more (last: {before}): pods of "
            f"{seen.applied.scheduler_names or 'its profiles'} wait until one takes it",
        )
    ]
