"""What a SchedulerProfile pass hands from one step to the next: `Given` (what it read, and what
the controller kept), `PassPlan` (what it decided, the writes in order), `ActOutcome` (what the
writes came to) and `Changes` (what the controller keeps of it). Plain data. Pure."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubeherd.scheduler.core.claims import Claim
from kubeherd.scheduler.core.judge import Judgement
from kubeherd.scheduler.core.owner import Owner
from kubeherd.scheduler.core.problems import Verdict
from kubeherd.scheduler.core.status import Applied, Running, Validity


@dataclass(frozen=True)
class Listed:
    """An object found by kubeherd's owner label, with its kind (list items carry none)."""

    kind: str
    body: Mapping[str, Any]


@dataclass(frozen=True)
class Removal:
    """An object to delete, and only that one (its uid is a precondition)."""

    kind: str
    namespace: str | None
    name: str
    uid: str

    @classmethod
    def of(cls, kind: str, body: Mapping[str, Any]) -> Removal:
        metadata = body["metadata"]
        return cls(kind, metadata.get("namespace"), metadata["name"], metadata["uid"])


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str
    # A Warning posted once per generation and reason: a pass repeated every few seconds must
    # not post the same complaint again.
    once: bool = False


class JudgeBackoff(enum.Enum):
    RESET = "reset"
    NEXT = "next"


@dataclass
class Changes:
    """What the controller keeps of a pass; None (or False) leaves a part as it was."""

    validity: Validity | None = None
    applied: Applied | None = None
    rendered_hash: str | None = None
    pruned_shape: tuple[Any, ...] | None = None
    pruned: bool = False
    judge_verdict: tuple[str, Judgement] | None = None
    judging_hash: str | None = None
    judge_pods_may_exist: bool | None = None
    judge_backoff: JudgeBackoff | None = None
    # The generation converged (refused, or applied), as the plan read it; or none: the spec
    # must be converged again.
    handled_generation: int | None = None
    reconverge: bool = False
    retry_in: float | None = None
    retry_with_backoff: bool = False
    reset_backoff: bool = False


@dataclass(frozen=True)
class Given:
    """What a pass decides from: what the controller kept, and what the pass read."""

    body: Mapping[str, Any]
    now: float
    converging: bool
    applied: Applied
    running: Running
    rendered_hash: str = ""
    verdicts: Mapping[str, Judgement] = field(default_factory=dict)
    judging_hash: str = ""
    judge_pods_may_exist: bool = False
    # How long a judge that fails now waits before the next one.
    judge_retry_in: float = 1.0
    pruned_shape: tuple[Any, ...] = ()
    pruned_at: float = 0.0
    # Read by the pass.
    claims: Sequence[Claim] = ()
    # The image to run, or None and why not.
    image: str | None = None
    image_problem: str = ""
    deployment: Mapping[str, Any] | None = None
    # The judge pod of the configuration (None: none, or none needed), and every pod with
    # kubeherd's owner label in the namespace: the scheduler pods carry the Deployment's only.
    judge_pod: Mapping[str, Any] | None = None
    judge_pods: Sequence[Mapping[str, Any]] = ()
    # Objects kubeherd made where an earlier spec may have left some it no longer needs.
    placed: Sequence[Listed] = ()
    # The Deployment's ReplicaSets and kubeherd's ConfigMaps; None when not read.
    replica_sets: Sequence[Mapping[str, Any]] = ()
    config_maps: Sequence[Mapping[str, Any]] | None = None

    @property
    def spec(self) -> Mapping[str, Any]:
        return self.body.get("spec") or {}

    @property
    def owner(self) -> Owner:
        return Owner.of(self.body)


@dataclass(frozen=True)
class JudgeStart:
    """A judge to start: its configuration's ConfigMap, then (the resource's other judge pods
    dismissed) the pod reading it."""

    config_map: Mapping[str, Any]
    dismissed: list[Removal]
    pod: Mapping[str, Any]
    # Announced once the pod is there.
    announcement: str
    # What its failure would say, before the failure's own words.
    failure: JudgeFailure


@dataclass(frozen=True)
class JudgeFailure:
    """How a failed judge is reported: `what` could not judge ...; `keeps` what still runs."""

    what: str
    config_hash: str
    name: str
    keeps: str
    retry_in: float


@dataclass
class PassPlan:
    verdict: Verdict | None = None
    # The writes, in the order the act sends them: kubeherd's finalizer first (None: it is on).
    finalizers: list[str] | None = None
    judge_start: JudgeStart | None = None
    removals: list[Removal] = field(default_factory=list)
    # Judge pods whose deletion decides whether judge pods may still exist.
    dismissed: list[Removal] | None = None
    apply: list[dict[str, Any]] = field(default_factory=list)
    config_hash: str = ""
    # Sent only once every object of `apply` went through.
    stale: list[Removal] = field(default_factory=list)
    unused_config_maps: list[Removal] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    changes: Changes = field(default_factory=Changes)

    @property
    def writes(self) -> bool:
        """Whether the act may write anything (then the Deployment is read again)."""
        return self.finalizers is not None or any(
            (self.judge_start, self.removals, self.apply, self.stale, self.unused_config_maps)
        )


@dataclass(frozen=True)
class ActOutcome:
    """What the act's writes came to."""

    # The judge start's failure ("" when it started), None when none was started; and whether
    # its ConfigMap was refused (then nothing else of it was sent).
    judge_start_failure: str | None = None
    judge_config_map_refused: bool = False
    # Whether every dismissed judge pod is gone.
    dismissed_all: bool = True
    # The first apply the API server refused or that met another's object: (reason, message).
    apply_failure: tuple[str, str] | None = None
