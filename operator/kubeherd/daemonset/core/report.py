"""What a pass reports, as a pure function: the status to write (if it changed), the rollout's
progress and deadline, the events for its milestones, and when to look again because time
alone will change the picture (a pod turning available after minReadySeconds, a deadline).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kubeherd.daemonset.core.canary import next_check
from kubeherd.daemonset.core.canary_state import CanaryState, of_revision
from kubeherd.daemonset.core.model import Event, NodeRecord, parse_time
from kubeherd.daemonset.core.revisions import RevisionFacts, revision_name
from kubeherd.daemonset.core.spec import DaemonSetSpec
from kubeherd.daemonset.core.status import RolloutView, WaveView, build_status, progressing
from kubeherd.daemonset.core.summary import Summary, node_selector_text, pods_holding_up, summarize
from kubeherd.meta import iso_time, status_changed

# Looking again a little after the moment, so that it has surely passed.
WAKE_MARGIN = 0.5

# Progressing reasons that are announced with an event: (event type, reason).
MILESTONES = {
    "RolloutComplete": ("Normal", "RolloutComplete"),
    "PartitionRolledOut": ("Normal", "PartitionRolledOut"),
    "WaveRolledOut": ("Normal", "WaveRolledOut"),
    "ProgressDeadlineExceeded": ("Warning", "RolloutStuck"),
}


@dataclass(frozen=True)
class Progress:
    """When the rollout last moved: a new revision, or more nodes updated or available."""

    revision: str = ""
    updated: int = -1
    available: int = -1
    since: float = 0.0

    def observe(self, revision: str, updated: int, available: int, now: float) -> Progress:
        moved = revision != self.revision or updated > self.updated or available > self.available
        return Progress(revision, updated, available, now if moved else self.since)

    @classmethod
    def recorded(
        cls, status: Mapping[str, Any], generation: int, revision: str, now: float
    ) -> Progress:
        """After a restart the deadline runs from the last progress the status recorded."""
        condition = progressing_condition(status)
        if condition.get("observedGeneration") != generation:
            return cls(since=now)
        return cls(
            revision,
            int(status.get("updatedNumberScheduled") or 0),
            int(status.get("numberAvailable") or 0),
            parse_time(condition.get("lastUpdateTime")) or now,
        )


@dataclass(frozen=True)
class ReportInput:
    name: str
    spec: DaemonSetSpec
    ledger: Mapping[str, NodeRecord]
    revision: str
    revisions: Sequence[RevisionFacts]
    collision_count: int
    kept_back: int
    previous: Mapping[str, Any]
    progress: Progress | None
    create_failure: str | None
    template_problem: str | None
    now: float
    # When the plan this status follows judged the pods (see `summarize`); None: `now`.
    decided_at: float | None = None
    waves: WaveView = field(default_factory=WaveView)
    # The current template's canary, if it has one.
    canary: CanaryState | None = None


@dataclass
class Report:
    # The status to write; None when it would change nothing a user sees.
    status: dict[str, Any] | None
    progress: Progress
    events: list[Event] = field(default_factory=list)
    # When to look again: a pod turns available, or the progress deadline passes.
    available_check_at: float | None = None
    deadline_check_at: float | None = None
    # When time alone changes the canary (`canary.next_check`).
    canary_check_at: float | None = None

    @property
    def wake_ups(self) -> dict[str, float | None]:
        """The report's timers by name: None cancels one."""
        return {
            "available": self.available_check_at,
            "deadline": self.deadline_check_at,
            "canary": self.canary_check_at,
        }


def progressing_condition(status: Mapping[str, Any]) -> Mapping[str, Any]:
    conditions = status.get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Progressing"), {})


def report(given: ReportInput) -> Report:
    spec, now = given.spec, given.now
    summary = summarize(
        given.ledger,
        given.revision,
        spec.min_ready_seconds,
        now,
        given.decided_at,
        spec.overrides,
    )
    progress = given.progress or Progress.recorded(
        given.previous, spec.generation, given.revision, now
    )
    progress = progress.observe(given.revision, summary.updated, summary.available, now)
    view, deadline_at = _rollout_view(given, summary, progress)
    status = build_status(
        summary,
        generation=spec.generation,
        node_selector=node_selector_text(spec.pod_spec),
        previous=given.previous,
        create_failure=given.create_failure,
        now=iso_time(now),
        rollout=view,
        template_problem=given.template_problem,
    )
    result = Report(status=None, progress=progress, deadline_check_at=deadline_at)
    if summary.next_available_at is not None:
        # No watch event marks the moment minReadySeconds have passed.
        result.available_check_at = summary.next_available_at + WAKE_MARGIN
    canary = of_revision(given.canary, given.revision)
    check_at = next_check(canary, spec.canary, given.ledger, spec.min_ready_seconds, now)
    if check_at is not None:
        result.canary_check_at = check_at + WAKE_MARGIN
    if status_changed(given.previous, status):
        result.status = status
        result.events = milestones(given.previous, status)
    return result


def _rollout_view(
    given: ReportInput, summary: Summary, progress: Progress
) -> tuple[RolloutView, float | None]:
    spec, previous, now = given.spec, given.previous, given.now
    update_revision = revision_name(given.name, given.revision)
    canary = of_revision(given.canary, given.revision)
    # The previous revision stays current until every eligible node runs the new one.
    current = (
        update_revision
        if summary.updated >= summary.desired
        else str(previous.get("currentRevision") or "")
    )
    view = RolloutView(
        update_revision=update_revision,
        number=next((r.number for r in given.revisions if r.hash == given.revision), 0),
        current_revision=current,
        collision_count=given.collision_count,
        on_delete=not spec.rolling_update,
        paused=spec.paused,
        kept_back=given.kept_back,
        waves=given.waves,
        progress_time=iso_time(progress.since),
        canary=canary.to_status(given.name) if canary is not None else None,
    )
    if progressing(summary, view)[1] != "RollingUpdate":
        return view, None
    deadline = spec.progress_deadline
    if now - progress.since < deadline:
        return view, progress.since + deadline + WAKE_MARGIN
    count, examples = pods_holding_up(given.ledger, given.revision, spec.min_ready_seconds, now)
    stuck = (
        f"{view.name} made no progress for {deadline}s: {summary.updated} of "
        f"{summary.desired} eligible nodes run it, {summary.available} are available; "
        f"the update halts at {spec.budget_text}"
    )
    if view.waves.domain:
        stuck += f" in {view.waves.domain}"
    if count:
        stuck += f"; {count} new pods are not available: {', '.join(examples)}"
    return replace(view, stuck=stuck), None


def milestones(previous: Mapping[str, Any], status: Mapping[str, Any]) -> list[Event]:
    """Events for a rollout's milestones: once each, when the Progressing reason turns or the
    revision changes (a quick rollout may go from complete to complete between two writes)."""
    before = (progressing_condition(previous).get("reason"), previous.get("updateRevision"))
    after = progressing_condition(status)
    reason = after.get("reason")
    if (reason, status.get("updateRevision")) == before or reason not in MILESTONES:
        return []
    type_, event_reason = MILESTONES[str(reason)]
    return [Event(type_, event_reason, str(after.get("message")))]
