"""Plugin args about resources, checked as kube-scheduler checks them after its defaults:
NodeResourcesFit (only where the plugin runs: it is checked when built),
NodeResourcesBalancedAllocation, VolumeBinding and DynamicResources. Some of these checks depend
on the minor: a feature gate its catalog holds, or a check a minor made stricter with no gate or
type to show it (STRICTER_SINCE names the first minor that makes it). Pure."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubeherd.scheduler.core.catalog import Catalog, minor_key
from kubeherd.scheduler.core.godecoding import label_key_problems
from kubeherd.scheduler.core.problems import Problem, out_of_range

SCORING_STRATEGIES = ("LeastAllocated", "MostAllocated", "RequestedToCapacityRatio")
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


def _defaulted_resources(resources: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """v1 defaulting: no resources means cpu and memory; a weight of 0 (or none) means 1."""
    if not resources:
        return [dict(resource) for resource in DEFAULT_RESOURCES]
    return [
        {"name": resource.get("name", ""), "weight": resource.get("weight") or 1}
        for resource in resources
    ]


def _balanced_allocation(
    where: str, args: Mapping[str, Any], problems: list[Problem], _catalog: Catalog
) -> None:
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
        out_of_range(
            problems, f"{where}[{index}].utilization", utilizations[index], 0, 100, "a utilization"
        )
        out_of_range(
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
    out_of_range(problems, f"{where}.bindTimeoutSeconds", timeout, 0, None, "a timeout in seconds")
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


ResourceCheck = Callable[[str, Mapping[str, Any], list[Problem], Catalog], None]


RESOURCE_CHECKS: Mapping[str, ResourceCheck] = {
    "DynamicResources": _dynamic_resources,
    "NodeResourcesBalancedAllocation": _balanced_allocation,
    "NodeResourcesFit": _fit,
    "VolumeBinding": _volume_binding,
}
