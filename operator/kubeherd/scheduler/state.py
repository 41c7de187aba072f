"""What the SchedulerProfile controller remembers of one resource between passes, in parts: the
verdict on its spec, what it applied and what runs, the image's judges, the ConfigMaps' pruning,
and when a failed rollout is tried again. The pass reads it into the plan's `Given` and takes the
plan's `Changes` back (core/converge.py); nothing else writes it but the controller's inputs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubeherd.kube.ratelimit import Backoff
from kubeherd.scheduler.core.config import Lock, lease_lock
from kubeherd.scheduler.core.judge import Judgement
from kubeherd.scheduler.core.model import Changes, JudgeBackoff
from kubeherd.scheduler.core.owner import Owner
from kubeherd.scheduler.core.status import Applied, Running, Validity

Key = tuple[str, str]  # (namespace, name)
# Failed rollouts (an apply refused, an unknown server version, a cleanup left undone) are tried
# again after a doubling delay, up to this.
ROLLOUT_RETRY_LIMIT = 60.0
# A judge that could not run is tried again after a doubling delay, up to this.
JUDGE_RETRY_LIMIT = 300.0
# The images' verdicts kept per resource: enough for edits back and forth.
JUDGE_VERDICTS_KEPT = 16


@dataclass
class Judging:
    """A SchedulerProfile's judges: the verdicts given while the operator runs (by judge key, so
    that a configuration is judged once), and the judge under way."""

    verdicts: dict[str, Judgement] = field(default_factory=dict)
    # The configuration a judge pod judges ("" for none): its ConfigMap stays while it does.
    config_hash: str = ""
    # Whether judge pods may exist; at start, an earlier run of the operator may have left some.
    pods_may_exist: bool = True
    backoff: Backoff = field(default_factory=lambda: Backoff(limit=JUDGE_RETRY_LIMIT))

    def remember(self, key: str, judgement: Judgement) -> None:
        self.verdicts.pop(key, None)
        self.verdicts[key] = judgement
        while len(self.verdicts) > JUDGE_VERDICTS_KEPT:
            del self.verdicts[next(iter(self.verdicts))]

    def next_delay(self) -> float:
        """The delay a judge that fails now waits, without taking it yet."""
        return Backoff(self.backoff.limit, self.backoff.delay).next_delay()


@dataclass
class Pruning:
    """When, and for which state of the Deployment, unused ConfigMaps were last removed."""

    shape: tuple[Any, ...] = ()
    at: float = 0.0


@dataclass
class ProfileState:
    body: Mapping[str, Any]
    # The generation last validated (and, if valid, rolled out); None: not yet since start.
    handled_generation: int | None = None
    validity: Validity = field(
        default_factory=lambda: Validity("Unknown", "Validating", "not checked yet")
    )
    applied: Applied = field(default_factory=Applied)
    # The configuration the spec renders to, once rendered (its ConfigMap is kept).
    rendered_hash: str = ""
    # What every scheduler pod runs (the status's configHash and schedulerNames).
    running: Running = field(default_factory=Running)
    # The Lease holder last looked up, and whether it is one of this resource's pods.
    holder_checked: tuple[str, bool] = ("", True)
    pruning: Pruning = field(default_factory=Pruning)
    # When a failed rollout is tried again; a pass that raises is, after the runner's own delay.
    retry_at: float = 0.0
    backoff: Backoff = field(default_factory=lambda: Backoff(limit=ROLLOUT_RETRY_LIMIT))
    judging: Judging = field(default_factory=Judging)

    @property
    def generation(self) -> int:
        return int(self.body["metadata"].get("generation", 0))

    @property
    def owner(self) -> Owner:
        return Owner.of(self.body)

    @property
    def key(self) -> Key:
        owner = self.owner
        return (owner.namespace, owner.name)

    @property
    def lock(self) -> Lock:
        owner = self.owner
        return lease_lock(self.body.get("spec") or {}, owner.name, owner.namespace)

    @property
    def config_maps_pruned_at(self) -> float:
        return self.pruning.at

    @config_maps_pruned_at.setter
    def config_maps_pruned_at(self, at: float) -> None:
        self.pruning.at = at

    def converge_due(self, now: float) -> bool:
        """A spec not yet converged whose retry (if any) is due."""
        return self.handled_generation != self.generation and now >= self.retry_at

    def take(self, changes: Changes, now: float) -> None:
        """What a pass decided, kept for the next one."""
        if changes.validity is not None:
            self.validity = changes.validity
        if changes.applied is not None:
            self.applied = changes.applied
        if changes.rendered_hash is not None:
            self.rendered_hash = changes.rendered_hash
        if changes.pruned_shape is not None:
            self.pruning.shape = changes.pruned_shape
        if changes.pruned:
            self.pruning.at = now
        self._take_judging(changes)
        if changes.handled_generation is not None:
            self.handled_generation = changes.handled_generation
        if changes.reconverge:
            self.handled_generation = None
        if changes.retry_in is not None:
            self.retry_at = now + changes.retry_in
        if changes.retry_with_backoff:
            self.retry_at = now + self.backoff.next_delay()
        if changes.reset_backoff:
            self.backoff.reset()

    def _take_judging(self, changes: Changes) -> None:
        judging = self.judging
        if changes.judge_verdict is not None:
            judging.remember(*changes.judge_verdict)
        if changes.judging_hash is not None:
            judging.config_hash = changes.judging_hash
        if changes.judge_pods_may_exist is not None:
            judging.pods_may_exist = changes.judge_pods_may_exist
        if changes.judge_backoff is JudgeBackoff.RESET:
            judging.backoff.reset()
        elif changes.judge_backoff is JudgeBackoff.NEXT:
            judging.backoff.next_delay()
