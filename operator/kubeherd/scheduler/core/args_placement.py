"""Plugin args that decide where pods go, checked as kube-scheduler checks them after its
defaults (`validation_pluginargs.go`): DefaultPreemption, InterPodAffinity, PodTopologySpread
and NodeAffinity. The decoding before them is pluginargs.py's. Pure."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubeherd.scheduler.core.godecoding import label_key_problems, label_value_problems
from kubeherd.scheduler.core.problems import Problem, out_of_range

SPREAD_ACTIONS = ("DoNotSchedule", "ScheduleAnyway")
SPREAD_DEFAULTING = ("System", "List")
NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
FIELD_SELECTOR_OPERATORS = ("In", "NotIn")


def _preemption(where: str, args: Mapping[str, Any], problems: list[Problem]) -> None:
    percentage = args.get("minCandidateNodesPercentage", 10)
    absolute = args.get("minCandidateNodesAbsolute", 100)
    out_of_range(
        problems, f"{where}.minCandidateNodesPercentage", percentage, 0, 100, "a percentage"
    )
    out_of_range(problems, f"{where}.minCandidateNodesAbsolute", absolute, 0, None, "a node count")
    if percentage == 0 and absolute == 0:
        problems.append(
            Problem(
                where,
                "minCandidateNodesPercentage and minCandidateNodesAbsolute cannot both be 0: "
                "preemption would find no candidate node; raise one of them",
            )
        )


def _inter_pod_affinity(where: str, args: Mapping[str, Any], problems: list[Problem]) -> None:
    weight = args.get("hardPodAffinityWeight", 1)
    out_of_range(problems, f"{where}.hardPodAffinityWeight", weight, 0, 100, "a weight")


def _topology_key(problems: list[Problem], where: str, key: str) -> None:
    if not key:
        problems.append(
            Problem(where, "a node label key is required (e.g. topology.kubernetes.io/zone)")
        )
    for message in label_key_problems(key) if key else []:
        problems.append(Problem(where, f"{key!r} is not a label key: {message}"))


def _spread(where: str, args: Mapping[str, Any], problems: list[Problem]) -> None:
    defaulting = args.get("defaultingType") or "System"
    constraints: Sequence[Mapping[str, Any]] = args.get("defaultConstraints") or []
    if defaulting not in SPREAD_DEFAULTING:
        problems.append(Problem(f"{where}.defaultingType", f"{defaulting!r}: use System or List"))
    elif defaulting == "System" and constraints:
        problems.append(
            Problem(
                f"{where}.defaultingType",
                "defaultConstraints are used only with defaultingType: List (System means "
                "kube-scheduler's own): set defaultingType: List",
            )
        )
    seen: set[tuple[str, str]] = set()
    for index, constraint in enumerate(constraints):
        at = f"{where}.defaultConstraints[{index}]"
        skew = constraint.get("maxSkew", 0)
        if skew <= 0:
            problems.append(Problem(f"{at}.maxSkew", f"{skew}: must be 1 or more"))
        key = constraint.get("topologyKey", "")
        _topology_key(problems, f"{at}.topologyKey", key)
        action = constraint.get("whenUnsatisfiable", "")
        if action not in SPREAD_ACTIONS:
            problems.append(
                Problem(f"{at}.whenUnsatisfiable", f"{action!r}: use {' or '.join(SPREAD_ACTIONS)}")
            )
        if "labelSelector" in constraint:
            problems.append(
                Problem(
                    f"{at}.labelSelector",
                    "default constraints take no selector: kube-scheduler derives it from each "
                    "pod's owner; remove it",
                )
            )
        if (key, action) in seen:
            problems.append(Problem(at, f"a second constraint on {key} with {action}: merge them"))
        seen.add((key, action))


def _node_requirements(
    problems: list[Problem], where: str, requirements: Sequence[Mapping[str, Any]], fields: bool
) -> None:
    for index, requirement in enumerate(requirements):
        at = f"{where}[{index}]"
        operator = requirement.get("operator", "")
        values: Sequence[str] = requirement.get("values") or []
        allowed = FIELD_SELECTOR_OPERATORS if fields else NODE_SELECTOR_OPERATORS
        if operator not in allowed:
            problems.append(
                Problem(f"{at}.operator", f"{operator!r}: use one of {', '.join(allowed)}")
            )
            continue
        if fields:
            if len(values) != 1:
                problems.append(
                    Problem(f"{at}.values", "a matchFields requirement takes exactly one value")
                )
            continue
        key = requirement.get("key", "")
        for message in label_key_problems(key):
            problems.append(Problem(f"{at}.key", f"{key!r} is not a label key: {message}"))
        if operator in ("In", "NotIn") and not values:
            problems.append(Problem(f"{at}.values", f"{operator} needs at least one value"))
        if operator in ("Exists", "DoesNotExist") and values:
            problems.append(Problem(f"{at}.values", f"{operator} takes no values: remove them"))
        if operator in ("Gt", "Lt"):
            if len(values) != 1:
                problems.append(Problem(f"{at}.values", f"{operator} takes exactly one value"))
            for value_index, value in enumerate(values):
                if not re.fullmatch(r"[+-]?[0-9]+", value) or not -(2**63) <= int(value) < 2**63:
                    problems.append(
                        Problem(
                            f"{at}.values[{value_index}]",
                            f"{value!r}: {operator} compares with a whole number",
                        )
                    )
        for value_index, value in enumerate(values):
            for message in label_value_problems(value):
                problems.append(Problem(f"{at}.values[{value_index}]", f"{value!r}: {message}"))


def _node_term(problems: list[Problem], where: str, term: Mapping[str, Any]) -> None:
    _node_requirements(
        problems, f"{where}.matchExpressions", term.get("matchExpressions") or [], False
    )
    _node_requirements(problems, f"{where}.matchFields", term.get("matchFields") or [], True)


def _node_affinity(where: str, args: Mapping[str, Any], problems: list[Problem]) -> None:
    affinity = args.get("addedAffinity") or {}
    at = f"{where}.addedAffinity"
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    for index, term in enumerate(required.get("nodeSelectorTerms") or []):
        _node_term(
            problems,
            f"{at}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{index}]",
            term,
        )
    preferred = affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    for index, term in enumerate(preferred):
        # kube-scheduler skips a term of weight 0: it can never count.
        if term.get("weight", 0) != 0:
            _node_term(
                problems,
                f"{at}.preferredDuringSchedulingIgnoredDuringExecution[{index}].preference",
                term.get("preference") or {},
            )


PLACEMENT_CHECKS: Mapping[str, Callable[[str, Mapping[str, Any], list[Problem]], None]] = {
    "DefaultPreemption": _preemption,
    "InterPodAffinity": _inter_pod_affinity,
    "NodeAffinity": _node_affinity,
    "PodTopologySpread": _spread,
}
