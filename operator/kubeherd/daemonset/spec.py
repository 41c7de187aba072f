"""A CustomDaemonSet's spec as the controller reads it: parsed once per generation, with the
defaults the API applies, so each question (is surge on? what is the budget?) has one answer.

Pure: a body in, a frozen value out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubeherd.daemonset.claims import selector_problems
from kubeherd.daemonset.pods import template_hash

DEFAULT_HISTORY_LIMIT = 10
DEFAULT_PROGRESS_DEADLINE = 600


def resolve_budget(value: int | str | None, desired: int, default: int) -> int:
    """An int-or-percent budget against `desired` nodes; percentages round up, as upstream."""
    if value is None:
        return default
    if isinstance(value, int):
        return max(0, value)
    text = str(value).strip()
    if text.endswith("%"):
        return max(0, math.ceil(int(text[:-1]) * desired / 100))
    return max(0, int(text))


@dataclass(frozen=True)
class DaemonSetSpec:
    generation: int
    template: Mapping[str, Any]
    template_hash: str
    pod_spec: Mapping[str, Any]
    selector: Mapping[str, Any]
    # Why the API server's ValidateLabelSelector would refuse the selector, or None. The CRD
    # refuses such selectors now; an object stored before it may still have one.
    selector_problem: str | None
    # RollingUpdate; False: OnDelete, where a pod changes only when someone deletes it.
    rolling_update: bool
    max_surge: int | str | None
    max_unavailable: int | str | None
    partition: int
    paused: bool
    min_ready_seconds: int
    history_limit: int
    progress_deadline: int

    @property
    def surge(self) -> bool:
        """Whether an update starts the new pod beside the old one, as the native controller
        decides it (AllowsSurge): a rolling update whose maxSurge is above zero."""
        return self.rolling_update and resolve_budget(self.max_surge, 1, 0) > 0

    def max_surge_for(self, eligible: int) -> int:
        return resolve_budget(self.max_surge, eligible, 0) if self.surge else 0

    def max_unavailable_for(self, eligible: int) -> int:
        # Both zero is refused at admission; should it get through, one node at a time.
        return resolve_budget(self.max_unavailable, eligible, 1) or 1

    @property
    def budget_text(self) -> str:
        """The limit a rolling update halts at, for messages."""
        if self.surge:
            return f"maxSurge {self.max_surge}"
        return f"maxUnavailable {1 if self.max_unavailable is None else self.max_unavailable}"


def parse_spec(body: Mapping[str, Any]) -> DaemonSetSpec:
    spec = body.get("spec") or {}
    template = spec.get("template") or {}
    strategy = spec.get("updateStrategy") or {}
    rolling = strategy.get("rollingUpdate") or {}
    selector = spec.get("selector") or {}
    return DaemonSetSpec(
        generation=int(body["metadata"].get("generation") or 0),
        template=template,
        template_hash=template_hash(template),
        pod_spec=template.get("spec") or {},
        selector=selector,
        selector_problem="; ".join(selector_problems(selector)) or None,
        rolling_update=strategy.get("type", "RollingUpdate") == "RollingUpdate",
        max_surge=rolling.get("maxSurge"),
        max_unavailable=rolling.get("maxUnavailable"),
        partition=int(rolling.get("partition") or 0),
        paused=bool(spec.get("paused")),
        min_ready_seconds=int(spec.get("minReadySeconds") or 0),
        history_limit=int(spec.get("revisionHistoryLimit", DEFAULT_HISTORY_LIMIT)),
        progress_deadline=int(spec.get("progressDeadlineSeconds") or DEFAULT_PROGRESS_DEADLINE),
    )
