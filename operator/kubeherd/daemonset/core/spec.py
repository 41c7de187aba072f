"""A CustomDaemonSet's spec as the controller reads it: parsed once per generation, with the
defaults the API applies, so each question (is surge on? what is the budget?) has one answer.

Pure: a body in, a frozen value out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubeherd.daemonset.core.budget import resolve_budget
from kubeherd.daemonset.core.canary_commands import CANARY_COMMAND_ANNOTATION
from kubeherd.daemonset.core.canary_state import CanaryRule
from kubeherd.daemonset.core.claims import selector_problems
from kubeherd.daemonset.core.in_place import in_place_key_of_json
from kubeherd.daemonset.core.nodes import WaveRule
from kubeherd.daemonset.core.overrides import OverrideRule
from kubeherd.daemonset.core.pods import canonical_hash, canonical_json
from kubeherd.daemonset.core.revisions import CHANGE_CAUSE_ANNOTATION
from kubeherd.defaults import (
    DEFAULT_HISTORY_LIMIT,
    DEFAULT_MAX_SURGE,
    DEFAULT_MAX_UNAVAILABLE,
    DEFAULT_PROGRESS_DEADLINE,
    MAX_HISTORY_LIMIT,
)

# What placement reads of the pod spec (eligibility, the status's nodeSelector); affinity is
# kept with its nodeAffinity only.
PLACEMENT_FIELDS = ("nodeName", "nodeSelector", "tolerations", "hostNetwork")
# What the controller keeps of a CustomDaemonSet's metadata: names, identity, the generation and
# version its status writes are checked against, and what metrics and revisions show.
KEPT_METADATA = ("name", "namespace", "uid", "generation", "resourceVersion", "creationTimestamp")


@dataclass(frozen=True)
class DaemonSetSpec:
    generation: int
    # The pod template as canonical JSON: a tenant's template can be large, and as Python
    # objects it takes several times its size. It is decoded only to build pods or a revision.
    template_json: bytes
    template_hash: str
    # The pod spec's placement fields (PLACEMENT_FIELDS), all that passes read of it.
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
    # rollingUpdateType InPlaceIfPossible, with the template's key (`in_place.in_place_key`).
    in_place: bool
    in_place_key: str
    # rollingUpdate.selector and topologyKey: which nodes' pods the update may change, and the
    # node label whose values it goes through one at a time.
    waves: WaveRule
    # rollingUpdate.canary (its node-facing parts are in `waves`); None: no canary.
    canary: CanaryRule | None
    # spec.resourceOverrides: which nodes' pods get other requests and limits.
    overrides: OverrideRule
    paused: bool
    min_ready_seconds: int
    history_limit: int
    progress_deadline: int

    @property
    def template(self) -> dict[str, Any]:
        """The pod template, decoded afresh: the caller may keep or change it."""
        decoded: dict[str, Any] = json.loads(self.template_json)
        return decoded

    @property
    def surge(self) -> bool:
        """Whether an update starts the new pod beside the old one, as the native controller
        decides it (AllowsSurge): a rolling update whose maxSurge is above zero."""
        return self.rolling_update and resolve_budget(self.max_surge, 1, DEFAULT_MAX_SURGE) > 0

    def max_unavailable_for(self, eligible: int) -> int:
        # Both zero is refused at admission; should it get through, one node at a time.
        return resolve_budget(self.max_unavailable, eligible, DEFAULT_MAX_UNAVAILABLE) or 1

    @property
    def budget_text(self) -> str:
        """The limit a rolling update halts at, for messages."""
        if self.surge:
            return f"maxSurge {self.max_surge}"
        budget = DEFAULT_MAX_UNAVAILABLE if self.max_unavailable is None else self.max_unavailable
        return f"maxUnavailable {budget}"


def placement(pod_spec: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a pod spec that say which nodes are eligible."""
    kept = {field: pod_spec[field] for field in PLACEMENT_FIELDS if field in pod_spec}
    node_affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity")
    if node_affinity is not None:
        kept["affinity"] = {"nodeAffinity": node_affinity}
    return kept


def kept_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the controller keeps of a CustomDaemonSet between passes: the body without its pod
    template (the spec keeps that, compactly), its managed fields, and annotations other than
    the change cause and a canary command (`kubectl apply` leaves the whole object in one)."""
    metadata = body["metadata"]
    kept_metadata = {key: metadata[key] for key in KEPT_METADATA if key in metadata}
    annotations = metadata.get("annotations") or {}
    kept_annotations = {
        key: annotations[key]
        for key in (CHANGE_CAUSE_ANNOTATION, CANARY_COMMAND_ANNOTATION)
        if annotations.get(key)
    }
    if kept_annotations:
        kept_metadata["annotations"] = kept_annotations
    kept = {key: body[key] for key in ("apiVersion", "kind", "status") if key in body}
    spec = body.get("spec") or {}
    return {
        **kept,
        "metadata": kept_metadata,
        "spec": {key: value for key, value in spec.items() if key != "template"},
    }


def parse_spec(body: Mapping[str, Any]) -> DaemonSetSpec:
    spec = body.get("spec") or {}
    template = spec.get("template") or {}
    strategy = spec.get("updateStrategy") or {}
    rolling = strategy.get("rollingUpdate") or {}
    selector = spec.get("selector") or {}
    template_json = canonical_json(template)
    in_place = rolling.get("rollingUpdateType") == "InPlaceIfPossible"
    rolling_update = strategy.get("type", "RollingUpdate") == "RollingUpdate"
    canary = rolling.get("canary") if rolling_update else None
    return DaemonSetSpec(
        generation=int(body["metadata"].get("generation") or 0),
        template_json=template_json,
        template_hash=canonical_hash(template_json),
        pod_spec=placement(template.get("spec") or {}),
        selector=selector,
        selector_problem="; ".join(selector_problems(selector)) or None,
        rolling_update=rolling_update,
        max_surge=rolling.get("maxSurge"),
        max_unavailable=rolling.get("maxUnavailable"),
        partition=int(rolling.get("partition") or 0),
        in_place=in_place,
        in_place_key=in_place_key_of_json(template_json) if in_place else "",
        waves=WaveRule(
            rolling.get("selector"),
            str(rolling.get("topologyKey") or ""),
            canary_selector=canary.get("nodeSelector") if canary is not None else None,
            canary_keys=tuple(canary.get("nodeAntiAffinityKeys") or ()) if canary else (),
        ),
        canary=CanaryRule.of(canary) if canary is not None else None,
        overrides=OverrideRule.of(spec.get("resourceOverrides")),
        paused=bool(spec.get("paused")),
        min_ready_seconds=int(spec.get("minReadySeconds") or 0),
        # An object stored before the CRD bounded the limit keeps its value: it gets the bound.
        history_limit=min(
            int(spec.get("revisionHistoryLimit", DEFAULT_HISTORY_LIMIT)), MAX_HISTORY_LIMIT
        ),
        progress_deadline=int(spec.get("progressDeadlineSeconds") or DEFAULT_PROGRESS_DEADLINE),
    )
