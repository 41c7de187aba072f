"""Which nodes should run a daemon pod, decided as the native DaemonSet controller decides it.

Pure: plain data in, plain data out. Only what the native controller checks is checked: the
template's nodeName, nodeSelector and required node affinity, and the node's NoSchedule and
NoExecute taints against the template's tolerations plus the default daemon tolerations. Resource
fit, host ports and node readiness are the scheduler's and the kubelet's business, and a cordoned
node only carries a taint that daemon pods tolerate.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubeherd.api.customdaemonset_reasons import IneligibleReason

NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"
NODE_NAME_FIELD = "metadata.name"


@dataclass(frozen=True)
class Taint:
    key: str
    effect: str
    value: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Taint:
        return cls(
            key=data.get("key") or "",
            effect=data.get("effect") or "",
            value=data.get("value") or "",
        )

    def __str__(self) -> str:
        if self.value:
            return f"{self.key}={self.value}:{self.effect}"
        return f"{self.key}:{self.effect}"


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Toleration:
        seconds = data.get("tolerationSeconds")
        return cls(
            key=data.get("key") or "",
            # The API server does not default the operator; an empty one means Equal.
            operator=data.get("operator") or "Equal",
            value=data.get("value") or "",
            effect=data.get("effect") or "",
            toleration_seconds=None if seconds is None else int(seconds),
        )

    def to_dict(self) -> dict[str, Any]:
        fields = {
            "key": self.key,
            "operator": self.operator,
            "value": self.value,
            "effect": self.effect,
            "tolerationSeconds": self.toleration_seconds,
        }
        return {
            name: value
            for name, value in fields.items()
            if name == "operator" or value not in ("", None)
        }

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        if self.operator == "Equal":
            return self.value == taint.value
        # Lt and Gt sit behind the alpha TaintTolerationComparisonOperators gate, off by default:
        # like an unknown operator, they tolerate nothing.
        return False

    def same_identity(self, other: Toleration) -> bool:
        """Whether both are the same toleration but for tolerationSeconds (upstream's rule)."""
        return (self.key, self.operator, self.value, self.effect) == (
            other.key,
            other.operator,
            other.value,
            other.effect,
        )


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> NodeInfo:
        metadata = body.get("metadata") or {}
        spec = body.get("spec") or {}
        # Most label keys and values repeat from node to node (os, zone, instance type...).
        labels = metadata.get("labels") or {}
        return cls(
            name=metadata.get("name") or "",
            labels={sys.intern(str(k)): sys.intern(str(v)) for k, v in labels.items()},
            taints=tuple(Taint.from_dict(taint) for taint in spec.get("taints") or ()),
        )


@dataclass(frozen=True)
class Verdict:
    should_run: bool
    should_continue_running: bool
    reason: IneligibleReason | None = None
    # Depends on the template (and the taint) only, never on the node, so that the status can
    # group ineligible nodes by (reason, detail).
    detail: str = ""


ELIGIBLE = Verdict(should_run=True, should_continue_running=True)

# Daemon pods must survive node problems (no taint-based eviction) and run on nodes under
# pressure or cordoned, as with the native controller.
_DAEMON_TOLERATIONS = tuple(
    Toleration(key=f"node.kubernetes.io/{key}", operator="Exists", effect=effect)
    for key, effect in [
        ("not-ready", NO_EXECUTE),
        ("unreachable", NO_EXECUTE),
        ("disk-pressure", NO_SCHEDULE),
        ("memory-pressure", NO_SCHEDULE),
        ("pid-pressure", NO_SCHEDULE),
        ("unschedulable", NO_SCHEDULE),
    ]
)
# Only host-network pods can start before the node's network is set up.
_NETWORK_UNAVAILABLE = Toleration(
    key="node.kubernetes.io/network-unavailable", operator="Exists", effect=NO_SCHEDULE
)


def default_daemon_tolerations(host_network: bool) -> tuple[Toleration, ...]:
    return (*_DAEMON_TOLERATIONS, _NETWORK_UNAVAILABLE) if host_network else _DAEMON_TOLERATIONS


def with_daemon_tolerations(pod_spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The spec's tolerations with the defaults added or, where one has the same identity, put in
    its place (so a template's tolerationSeconds on one of them is dropped, as upstream does)."""
    result = [dict(toleration) for toleration in pod_spec.get("tolerations") or ()]
    for default in default_daemon_tolerations(bool(pod_spec.get("hostNetwork"))):
        same = [i for i, t in enumerate(result) if Toleration.from_dict(t).same_identity(default)]
        for i in same:
            result[i] = default.to_dict()
        if not same:
            result.append(default.to_dict())
    return result


NodeMatcher = Callable[[NodeInfo], bool]
_INTEGER = re.compile(r"[+-]?[0-9]+")


def _int64(text: str) -> int | None:
    """Go's strconv.ParseInt(text, 10, 64): stricter than int() (no spaces, no underscores)."""
    if not _INTEGER.fullmatch(text):
        return None
    number = int(text)
    return number if -(2**63) <= number < 2**63 else None


def _label_matcher(expression: Mapping[str, Any]) -> NodeMatcher | None:
    """One matchExpressions entry, or None when it is invalid (its term then matches nothing)."""
    key: str = expression.get("key") or ""
    operator: str = expression.get("operator") or ""
    values: list[str] = list(expression.get("values") or ())
    if operator in ("In", "NotIn") and values:
        allowed = frozenset(values)
        if operator == "In":
            return lambda node: node.labels.get(key) in allowed
        return lambda node: node.labels.get(key) not in allowed
    if operator == "Exists" and not values:
        return lambda node: key in node.labels
    if operator == "DoesNotExist" and not values:
        return lambda node: key not in node.labels
    if operator in ("Gt", "Lt") and len(values) == 1:
        bound = _int64(values[0])
        if bound is None:
            return None
        greater = operator == "Gt"

        def compare(node: NodeInfo) -> bool:
            number = _int64(node.labels.get(key, ""))
            if number is None:
                return False
            return number > bound if greater else number < bound

        return compare
    return None


def _field_matcher(requirement: Mapping[str, Any]) -> NodeMatcher | None:
    """One matchFields entry: In or NotIn with exactly one value, else None (invalid)."""
    key: str = requirement.get("key") or ""
    operator: str = requirement.get("operator") or ""
    values: list[str] = list(requirement.get("values") or ())
    if operator not in ("In", "NotIn") or len(values) != 1:
        return None
    wanted = values[0]
    expect_equal = operator == "In"

    def match(node: NodeInfo) -> bool:
        # A node has one field, its name; any other field reads as the empty string.
        actual = node.name if key == NODE_NAME_FIELD else ""
        return (actual == wanted) == expect_equal

    return match


def _compile_term(term: Mapping[str, Any]) -> tuple[NodeMatcher, ...] | None:
    """A term's requirements (ANDed), or None when the term matches nothing: empty or invalid."""
    matchers = [_label_matcher(e) for e in term.get("matchExpressions") or ()]
    matchers += [_field_matcher(f) for f in term.get("matchFields") or ()]
    valid = tuple(m for m in matchers if m is not None)
    return valid if valid and len(valid) == len(matchers) else None


@dataclass(frozen=True)
class NodeSelectorTerms:
    """Compiled nodeSelectorTerms: ORed terms of ANDed requirements. No terms matches nothing."""

    terms: tuple[tuple[NodeMatcher, ...], ...]

    @classmethod
    def compile(cls, terms: Sequence[Mapping[str, Any]]) -> NodeSelectorTerms:
        compiled = (_compile_term(term) for term in terms)
        return cls(tuple(term for term in compiled if term is not None))

    def matches(self, node: NodeInfo) -> bool:
        return any(all(matcher(node) for matcher in term) for term in self.terms)


def matches_node_selector_terms(terms: Sequence[Mapping[str, Any]], node: NodeInfo) -> bool:
    return NodeSelectorTerms.compile(terms).matches(node)


@dataclass(frozen=True)
class PodRequirements:
    """What a pod template asks of a node, parsed once to check many nodes cheaply."""

    node_name: str
    node_selector: Mapping[str, str]
    # None when the template has no required node affinity: every node matches.
    required_affinity: NodeSelectorTerms | None
    tolerations: tuple[Toleration, ...]

    def verdict(self, node: NodeInfo) -> Verdict:
        if self.node_name and self.node_name != node.name:
            return Verdict(
                False,
                False,
                IneligibleReason.NODE_NAME,
                f"the template's nodeName is {self.node_name}",
            )
        if any(node.labels.get(key) != value for key, value in self.node_selector.items()):
            selector = ",".join(f"{k}={v}" for k, v in sorted(self.node_selector.items()))
            return Verdict(
                False,
                False,
                IneligibleReason.NODE_SELECTOR,
                f"node labels do not match nodeSelector {selector}",
            )
        if self.required_affinity is not None and not self.required_affinity.matches(node):
            return Verdict(
                False,
                False,
                IneligibleReason.NODE_AFFINITY,
                "node does not match the required node affinity",
            )
        untolerated = [
            taint
            for taint in node.taints
            if taint.effect in (NO_SCHEDULE, NO_EXECUTE)
            and not any(toleration.tolerates(taint) for toleration in self.tolerations)
        ]
        if not untolerated:
            return ELIGIBLE
        evicting = next((taint for taint in untolerated if taint.effect == NO_EXECUTE), None)
        # Only an untolerated NoExecute taint evicts; a running pod is kept (as misscheduled)
        # on a node that merely refuses new pods.
        shown = evicting or untolerated[0]
        return Verdict(False, evicting is None, IneligibleReason.UNTOLERATED_TAINT, str(shown))


def compile_pod_requirements(pod_spec: Mapping[str, Any]) -> PodRequirements:
    node_affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    return PodRequirements(
        node_name=pod_spec.get("nodeName") or "",
        node_selector=dict(pod_spec.get("nodeSelector") or {}),
        required_affinity=(
            None
            if required is None
            else NodeSelectorTerms.compile(required.get("nodeSelectorTerms") or ())
        ),
        tolerations=tuple(Toleration.from_dict(t) for t in with_daemon_tolerations(pod_spec)),
    )


def node_should_run(pod_spec: Mapping[str, Any], node: NodeInfo) -> Verdict:
    """One node's verdict; for many nodes, compile_pod_requirements once and call .verdict."""
    return compile_pod_requirements(pod_spec).verdict(node)
