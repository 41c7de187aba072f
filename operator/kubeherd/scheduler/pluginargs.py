"""Plugin args, read the way kube-scheduler of one minor reads them. Pure.

kube-scheduler decodes each `pluginConfig[].args` into its `kubescheduler.config.k8s.io/v1`
`<Plugin>Args` type (the catalog of the minor holds their fields) with Go's JSON decoder in
strict mode: a field it does not know, a field of another case, a string where it
wants a number, a bool where it wants an int, a number that is not a whole one or does not fit
in int32/int64 all stop it at start. Only then does it default the args (`v1/defaults.go`) and
check them (`validation/validation_pluginargs.go`; NodeResourcesFit's args are checked only
when the plugin is built, so only where it runs). Both steps are made here, in that order: a
decoding error is reported alone, as kube-scheduler stops there too. How Go decodes (whole
floats, nulls, int widths) is in godecoding.py.

The checks are code, the same for every minor but where a minor's catalog says otherwise: a
field some minors check only behind a feature gate reads that gate from the catalog.
NodeResourcesFit's requestedToCapacityRatio is the one check a minor made stricter with no gate
or type to show it: STRICTER_SINCE names the first minor that makes it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubeherd.scheduler.catalog import Catalog, minor_key
from kubeherd.scheduler.godecoding import (
    FieldHelp,
    GoDecoder,
    json_kind,
    label_key_problems,
    label_value_problems,
)
from kubeherd.scheduler.godecoding import go_duration_seconds as go_duration_seconds
from kubeherd.scheduler.problems import Problem

ARGS_API_VERSION = "kubescheduler.config.k8s.io/v1"
SCORING_STRATEGIES = ("LeastAllocated", "MostAllocated", "RequestedToCapacityRatio")
SPREAD_ACTIONS = ("DoNotSchedule", "ScheduleAnyway")
SPREAD_DEFAULTING = ("System", "List")
NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
FIELD_SELECTOR_OPERATORS = ("In", "NotIn")
MAX_SHAPE_SCORE = 10  # config.MaxCustomPriorityScore
# What v1 defaulting gives NodeResourcesFit and NodeResourcesBalancedAllocation without resources.
DEFAULT_RESOURCES = ({"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1})


# Checks kube-scheduler made stricter in some minor without a feature gate or a type change
# that its catalog would show: the first minor that makes the stricter check.
STRICTER_SINCE: Mapping[str, str] = {
    # requestedToCapacityRatio only with type RequestedToCapacityRatio (before: any type, the
    # shape checked whenever given).
    "fit-ratio-only-with-its-type": "1.36",
}


def stricter(catalog: Catalog, check: str) -> bool:
    return minor_key(catalog.minor) >= minor_key(STRICTER_SINCE[check])


Check = Callable[[str, Mapping[str, Any], list[Problem], Catalog], None]


def _range(
    problems: list[Problem], where: str, value: int, low: int, high: int | None, what: str
) -> None:
    if value < low or (high is not None and value > high):
        upper = f"to {high}" if high is not None else "or more"
        problems.append(Problem(where, f"{value}: {what} must be from {low} {upper}"))


def _preemption(where: str, args: Mapping[str, Any], problems: list[Problem]) -> None:
    percentage = args.get("minCandidateNodesPercentage", 10)
    absolute = args.get("minCandidateNodesAbsolute", 100)
    _range(problems, f"{where}.minCandidateNodesPercentage", percentage, 0, 100, "a percentage")
    _range(problems, f"{where}.minCandidateNodesAbsolute", absolute, 0, None, "a node count")
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
    _range(problems, f"{where}.hardPodAffinityWeight", weight, 0, 100, "a weight")


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


def _defaulted_resources(resources: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """v1 defaulting: no resources means cpu and memory; a weight of 0 (or none) means 1."""
    if not resources:
        return [dict(resource) for resource in DEFAULT_RESOURCES]
    return [
        {"name": resource.get("name", ""), "weight": resource.get("weight") or 1}
        for resource in resources
    ]


def _balanced_allocation(where: str, args: Mapping[str, Any], problems: list[Problem]) -> None:
    seen: set[str] = set()
    for index, resource in enumerate(_defaulted_resources(args.get("resources") or [])):
        at = f"{where}.resources[{index}]"
        if resource["name"] in seen:
            problems.append(
                Problem(f"{at}.name", f"{resource['name']!r} is listed twice: keep one entry")
            )
        seen.add(resource["name"])
        if resource["weight"] != 1:
            problems.append(
                Problem(
                    f"{at}.weight",
                    f"{resource['weight']}: NodeResourcesBalancedAllocation weighs every resource "
                    "equally; use 1 (or leave it out)",
                )
            )


def _shape(problems: list[Problem], where: str, shape: Sequence[Mapping[str, Any]]) -> None:
    if not shape:
        problems.append(
            Problem(where, "at least one point is needed: utilization (0-100) and score (0-10)")
        )
        return
    utilizations = [point.get("utilization", 0) for point in shape]
    for index in range(1, len(shape)):
        if utilizations[index - 1] >= utilizations[index]:
            problems.append(
                Problem(
                    f"{where}[{index}].utilization",
                    f"{utilizations[index]}: the points must be sorted by strictly increasing "
                    "utilization",
                )
            )
            break
    for index, point in enumerate(shape):
        _range(
            problems, f"{where}[{index}].utilization", utilizations[index], 0, 100, "a utilization"
        )
        _range(
            problems,
            f"{where}[{index}].score",
            point.get("score", 0),
            0,
            MAX_SHAPE_SCORE,
            "a score",
        )


def _fit(where: str, args: Mapping[str, Any], problems: list[Problem], catalog: Catalog) -> None:
    for index, resource in enumerate(args.get("ignoredResources") or []):
        for message in label_key_problems(resource):
            problems.append(
                Problem(
                    f"{where}.ignoredResources[{index}]",
                    f"{resource!r} is not a resource name: {message}",
                )
            )
    for index, group in enumerate(args.get("ignoredResourceGroups") or []):
        at = f"{where}.ignoredResourceGroups[{index}]"
        if "/" in group:
            problems.append(
                Problem(at, f"{group!r}: a resource group is the prefix alone, without '/'")
            )
        for message in label_key_problems(group):
            problems.append(Problem(at, f"{group!r} is not a resource group: {message}"))
    strategy = args.get("scoringStrategy")
    if strategy is None:  # defaulted to LeastAllocated on cpu and memory
        return
    at = f"{where}.scoringStrategy"
    kind = strategy.get("type", "")
    if kind not in SCORING_STRATEGIES:
        problems.append(
            Problem(
                f"{at}.type",
                f"{kind!r} is not a scoring strategy: set type to one of "
                f"{', '.join(SCORING_STRATEGIES)} (an empty scoringStrategy has none)",
            )
        )
    for index, resource in enumerate(_defaulted_resources(strategy.get("resources") or [])):
        if not 0 < resource["weight"] <= 100:
            problems.append(
                Problem(
                    f"{at}.resources[{index}].weight",
                    f"{resource['weight']}: a resource weight must be from 1 to 100",
                )
            )
    ratio = strategy.get("requestedToCapacityRatio")
    _ratio(f"{at}.requestedToCapacityRatio", kind, ratio, problems, catalog)


def _ratio(
    at: str, kind: str, ratio: Mapping[str, Any] | None, problems: list[Problem], catalog: Catalog
) -> None:
    if kind == "RequestedToCapacityRatio" and ratio is None:
        # Before the stricter check, kube-scheduler crashes building the plugin without it.
        problems.append(
            Problem(
                at,
                "RequestedToCapacityRatio needs requestedToCapacityRatio.shape: points of "
                "utilization (0-100) and score (0-10)",
            )
        )
    elif kind != "RequestedToCapacityRatio" and ratio is not None:
        if stricter(catalog, "fit-ratio-only-with-its-type"):
            problems.append(
                Problem(
                    at,
                    "is used only with type RequestedToCapacityRatio (since kube-scheduler "
                    f"{STRICTER_SINCE['fit-ratio-only-with-its-type']}): remove it or change "
                    "the type",
                )
            )
        else:  # checked, then unused
            _shape(problems, f"{at}.shape", ratio.get("shape") or [])
    elif ratio is not None:
        _shape(problems, f"{at}.shape", ratio.get("shape") or [])


def _gate_off(catalog: Catalog, gate: str) -> str:
    return f"the {gate} feature gate is off by default in {catalog.name}"


def _volume_binding(
    where: str, args: Mapping[str, Any], problems: list[Problem], catalog: Catalog
) -> None:
    timeout = args.get("bindTimeoutSeconds", 600)
    _range(problems, f"{where}.bindTimeoutSeconds", timeout, 0, None, "a timeout in seconds")
    shape = args.get("shape")
    if not catalog.gate("StorageCapacityScoring"):
        if shape is not None:  # even an empty list: only a null is no shape
            problems.append(
                Problem(
                    f"{where}.shape",
                    "shape scores storage capacity, and "
                    f"{_gate_off(catalog, 'StorageCapacityScoring')}: remove it",
                )
            )
    elif shape:  # an empty shape is defaulted
        _shape(problems, f"{where}.shape", shape)


def _dynamic_resources(
    where: str, args: Mapping[str, Any], problems: list[Problem], catalog: Catalog
) -> None:
    filter_timeout = args.get("filterTimeout")
    if filter_timeout is not None:
        if not catalog.feature("EnableDRASchedulerFilterTimeout"):
            problems.append(
                Problem(
                    f"{where}.filterTimeout",
                    f"{_gate_off(catalog, 'DRASchedulerFilterTimeout')}: remove it",
                )
            )
        elif filter_timeout < 0:
            problems.append(Problem(f"{where}.filterTimeout", "must be 0s or more"))
    binding_timeout = args.get("bindingTimeout")
    if binding_timeout is not None:
        gates = ("EnableDRADeviceBindingConditions", "EnableDRAResourceClaimDeviceStatus")
        if not all(catalog.feature(gate) for gate in gates):
            problems.append(
                Problem(
                    f"{where}.bindingTimeout",
                    "is used only with the DRADeviceBindingConditions and "
                    "DRAResourceClaimDeviceStatus feature gates, not both on by default in "
                    f"{catalog.name}: remove it",
                )
            )
        elif binding_timeout < 1.0:
            problems.append(Problem(f"{where}.bindingTimeout", "must be at least 1s"))


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


_CHECKS: Mapping[str, Callable[[str, Mapping[str, Any], list[Problem]], None]] = {
    "DefaultPreemption": _preemption,
    "InterPodAffinity": _inter_pod_affinity,
    "NodeAffinity": _node_affinity,
    "NodeResourcesBalancedAllocation": _balanced_allocation,
    "PodTopologySpread": _spread,
}
# The checks that read the minor's catalog (its feature gates, a stricter check).
_CATALOG_CHECKS: Mapping[str, Check] = {
    "DynamicResources": _dynamic_resources,
    "NodeResourcesFit": _fit,
    "VolumeBinding": _volume_binding,
}
# Checked only when kube-scheduler builds the plugin (validatePluginConfig misses it).
CHECKED_WHEN_BUILT = frozenset({"NodeResourcesFit"})


def plugin_args_problems(
    where: str, plugin: str, args: Any, *, built: bool, catalog: Catalog, elsewhere: FieldHelp
) -> list[Problem]:
    """kube-scheduler's verdict on `args` for `plugin` (`where` is the args' field path; `built`:
    whether the plugin runs at some extension point of the profile; `elsewhere`: which other
    minors have an args field this one lacks)."""
    args_type = catalog.args_types.get(plugin)
    if args_type is None or args is None:
        return []  # no args kind: kube-scheduler does not read them; none: all defaults
    if not isinstance(args, Mapping):
        return [
            Problem(
                where,
                f"{json_kind(args)} cannot be decoded here: kube-scheduler wants an object "
                f"({args_type.name})",
            )
        ]
    decoder = GoDecoder(decoder=catalog.name, elsewhere=elsewhere)
    decoded = decoder.decode(where, args, args_type)
    problems = decoder.problems + _type_meta_problems(where, plugin, decoded or {})
    if problems:
        return problems
    if plugin not in CHECKED_WHEN_BUILT or built:
        if plugin in _CHECKS:
            _CHECKS[plugin](where, decoded or {}, problems)
        elif plugin in _CATALOG_CHECKS:
            _CATALOG_CHECKS[plugin](where, decoded or {}, problems, catalog)
    return problems


def _type_meta_problems(where: str, plugin: str, decoded: Mapping[str, Any]) -> list[Problem]:
    problems = []
    api_version = decoded.get("apiVersion") or ""
    if api_version and api_version != ARGS_API_VERSION:
        problems.append(
            Problem(
                f"{where}.apiVersion",
                f"{api_version!r}: plugin args are {ARGS_API_VERSION} (or leave apiVersion out)",
            )
        )
    kind = decoded.get("kind") or ""
    if kind and kind != f"{plugin}Args":
        problems.append(
            Problem(
                f"{where}.kind",
                f"{kind!r}: the args of {plugin} are {plugin}Args (or leave kind out)",
            )
        )
    return problems
