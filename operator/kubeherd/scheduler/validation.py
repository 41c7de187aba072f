"""The checks kube-scheduler makes when it starts, made before kubeherd rolls anything out.

The API server already refused what the schema and CEL rules can see (see
api/schedulerprofile.py). What is left needs the plugin catalog or other objects: plugin names and
the extension points they implement, plugins kube-scheduler removed, exactly one queueSort and at
least one bind plugin once the profile is merged with the defaults, one queueSort for all
profiles, plugin args, and scheduler names across SchedulerProfiles. Each problem names the field
and says how to fix it.

Pure: plain data in, plain data out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubeherd.api.schedulerprofile import EXTENSION_POINTS
from kubeherd.scheduler.config import Lock
from kubeherd.scheduler.plugins import (
    DEFAULT_PLUGINS,
    IN_TREE_PLUGINS,
    KUBE_SCHEDULER_VERSION,
    REMOVED_PLUGINS,
)

ALL = "*"
SCORING_STRATEGIES = ("LeastAllocated", "MostAllocated", "RequestedToCapacityRatio")
# The args kinds of kubescheduler.config.k8s.io/v1 and their fields: kube-scheduler decodes
# them strictly, so any other field is refused. Plugins without an args kind ignore args.
ARG_FIELDS = {
    "DefaultPreemption": {"minCandidateNodesPercentage", "minCandidateNodesAbsolute"},
    "DynamicResources": {"filterTimeout", "bindingTimeout"},
    "InterPodAffinity": {"hardPodAffinityWeight", "ignorePreferredTermsOfExistingPods"},
    "NodeAffinity": {"addedAffinity"},
    "NodeResourcesBalancedAllocation": {"resources"},
    "NodeResourcesFit": {"ignoredResources", "ignoredResourceGroups", "scoringStrategy"},
    "PodTopologySpread": {"defaultConstraints", "defaultingType"},
    "VolumeBinding": {"bindTimeoutSeconds", "shape"},
}
_TYPE_FIELDS = {"apiVersion", "kind"}
SPREAD_ACTIONS = ("DoNotSchedule", "ScheduleAnyway")


@dataclass(frozen=True)
class Problem:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass
class Verdict:
    errors: list[Problem] = field(default_factory=list)
    # Accepted, but worth a Warning event (out-of-tree plugins in a custom image).
    warnings: list[Problem] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.errors

    def summary(self) -> str:
        return "; ".join(str(problem) for problem in self.errors)


# The Leases of the cluster's own control plane (kube-system, as kubeadm and the managed
# offerings name them). A SchedulerProfile's scheduler holds the RBAC to take its lock: on one of
# these it would contend with that component, which stands by while it holds it.
RESERVED_LOCKS = frozenset(
    Lock(component, "kube-system")
    for component in ("kube-scheduler", "kube-controller-manager", "cloud-controller-manager")
)


def lease_claim(lock: Lock) -> str:
    """A lock, as the claims index holds it beside scheduler names (which have no spaces)."""
    return f"Lease {lock.namespace}/{lock.name}"


def lock_problems(lock: Lock) -> list[Problem]:
    """Refusals of a leader-election lock kubeherd must never take."""
    if lock not in RESERVED_LOCKS:
        return []
    return [
        Problem(
            "spec.leaderElection.resourceName",
            f"Lease {lock.namespace}/{lock.name} belongs to the cluster's own {lock.name}, "
            "which would stand by while this scheduler held it: choose another resourceName "
            "(or resourceNamespace, or a SchedulerProfile of another name or namespace)",
        )
    ]


def _enabled(plugin_set: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    return list((plugin_set or {}).get("enabled") or [])


def _disabled(plugin_set: Mapping[str, Any] | None) -> set[str]:
    return {str(p["name"]) for p in (plugin_set or {}).get("disabled") or []}


def _merge(defaults: Sequence[str], plugin_set: Mapping[str, Any] | None) -> list[str]:
    """kube-scheduler's mergePluginSet: defaults not disabled (a same-named enabled plugin takes
    its place), then the other enabled plugins."""
    disabled = _disabled(plugin_set)
    enabled = [str(p["name"]) for p in _enabled(plugin_set)]
    merged = [] if ALL in disabled else [name for name in defaults if name not in disabled]
    return merged + [name for name in enabled if name not in merged]


def effective_plugins(plugins: Mapping[str, Any] | None) -> dict[str, list[str]]:
    """The plugins each extension point runs: the merged multiPoint set spread to the points
    each plugin implements (unless that point disables it or configures it itself), then the
    point's own plugins. Plugins the catalog does not know stay where they were written."""
    plugins = plugins or {}
    defaults = [name for name, _weight in DEFAULT_PLUGINS["multiPoint"]]
    multi_point = _merge(defaults, plugins.get("multiPoint"))
    effective: dict[str, list[str]] = {}
    for point in EXTENSION_POINTS:
        if point == "multiPoint":
            continue
        own = [str(p["name"]) for p in _enabled(plugins.get(point))]
        disabled = _disabled(plugins.get(point))
        spread = [
            name
            for name in multi_point
            if name in IN_TREE_PLUGINS
            and point in IN_TREE_PLUGINS[name].extension_points
            and name not in disabled
            and ALL not in disabled
            and name not in own
        ]
        effective[point] = spread + own
    return effective


def _plugin_names(
    profile_field: str, plugins: Mapping[str, Any], custom_image: bool, verdict: Verdict
) -> bool:
    """Check every enabled plugin; return whether all of them are in the catalog."""
    all_known = True
    for point in EXTENSION_POINTS:
        seen: set[str] = set()
        for index, plugin in enumerate(_enabled(plugins.get(point))):
            name = str(plugin["name"])
            where = f"{profile_field}.plugins.{point}.enabled[{index}]"
            if name in seen:
                verdict.errors.append(
                    Problem(where, f"{name} is enabled twice at {point}: keep one entry")
                )
            seen.add(name)
            if name in REMOVED_PLUGINS:
                verdict.errors.append(
                    Problem(
                        where,
                        f"{name} was removed from kube-scheduler ({REMOVED_PLUGINS[name]}): "
                        "remove it (NodeVolumeLimits covers CSI volume limits)",
                    )
                )
                continue
            info = IN_TREE_PLUGINS.get(name)
            if info is None:
                all_known = False
                message = f"{name} is not a plugin of kube-scheduler {KUBE_SCHEDULER_VERSION}"
                if custom_image:
                    verdict.warnings.append(
                        Problem(
                            where, f"{message}; accepted as an out-of-tree plugin of spec.image"
                        )
                    )
                else:
                    verdict.errors.append(
                        Problem(
                            where,
                            f"{message}: check the spelling, or set spec.image to a scheduler "
                            "build that has it",
                        )
                    )
                continue
            if point != "multiPoint" and point not in info.extension_points:
                points = ", ".join(sorted(info.extension_points)) or "none"
                verdict.errors.append(
                    Problem(
                        where,
                        f"{name} does not implement {point} (it implements {points}): enable "
                        "it at one of those, or under multiPoint",
                    )
                )
    return all_known


def _plugin_args(where: str, plugin: str, args: Mapping[str, Any], verdict: Verdict) -> None:
    """The checks kube-scheduler makes on the args of its in-tree plugins."""
    fields = ARG_FIELDS.get(plugin)
    if fields is None:
        return
    unknown = set(args) - fields - _TYPE_FIELDS
    if unknown:
        verdict.errors.append(
            Problem(
                where,
                f"{plugin} has no args {', '.join(sorted(unknown))} (it has "
                f"{', '.join(sorted(fields))}): kube-scheduler refuses unknown fields",
            )
        )
    check = _ARG_CHECKS.get(plugin)
    if check is not None:
        check(where, args, verdict)


def _in_range(
    verdict: Verdict, where: str, value: Any, low: int, high: int | None, what: str
) -> bool:
    if value is None:
        return True
    if isinstance(value, int) and low <= value and (high is None or value <= high):
        return True
    upper = f"to {high}" if high is not None else "or more"
    verdict.errors.append(Problem(where, f"{value!r}: {what} must be from {low} {upper}"))
    return False


def _preemption_args(where: str, args: Mapping[str, Any], verdict: Verdict) -> None:
    # Defaults: 10 % and 100 nodes.
    percentage = args.get("minCandidateNodesPercentage")
    absolute = args.get("minCandidateNodesAbsolute")
    fine = _in_range(
        verdict, f"{where}.minCandidateNodesPercentage", percentage, 0, 100, "a percentage"
    )
    fine &= _in_range(
        verdict, f"{where}.minCandidateNodesAbsolute", absolute, 0, None, "a node count"
    )
    if fine and percentage == 0 and absolute == 0:
        verdict.errors.append(
            Problem(
                where,
                "minCandidateNodesPercentage and minCandidateNodesAbsolute cannot both be 0: "
                "preemption would find no candidate node",
            )
        )


def _inter_pod_affinity_args(where: str, args: Mapping[str, Any], verdict: Verdict) -> None:
    _in_range(
        verdict,
        f"{where}.hardPodAffinityWeight",
        args.get("hardPodAffinityWeight"),
        0,
        100,
        "a weight",
    )


def _spread_args(where: str, args: Mapping[str, Any], verdict: Verdict) -> None:
    # kube-scheduler's v1 defaulting reads an empty defaultingType as System.
    defaulting = args.get("defaultingType") or "System"
    constraints = list(args.get("defaultConstraints") or [])
    if defaulting not in ("System", "List"):
        verdict.errors.append(
            Problem(f"{where}.defaultingType", f"{defaulting!r}: use System or List")
        )
    elif defaulting == "System" and constraints:
        verdict.errors.append(
            Problem(
                f"{where}.defaultingType",
                "defaultConstraints are used only with defaultingType: List (System means "
                "kube-scheduler's own): set defaultingType: List",
            )
        )
    seen: set[tuple[str, str]] = set()
    for index, constraint in enumerate(constraints):
        at = f"{where}.defaultConstraints[{index}]"
        skew = constraint.get("maxSkew")
        if not isinstance(skew, int) or skew < 1:
            verdict.errors.append(Problem(f"{at}.maxSkew", f"{skew!r}: must be 1 or more"))
        if not constraint.get("topologyKey"):
            verdict.errors.append(Problem(f"{at}.topologyKey", "a node label key is required"))
        action = constraint.get("whenUnsatisfiable")
        if action not in SPREAD_ACTIONS:
            verdict.errors.append(
                Problem(f"{at}.whenUnsatisfiable", f"{action!r}: use {' or '.join(SPREAD_ACTIONS)}")
            )
        if "labelSelector" in constraint:
            verdict.errors.append(
                Problem(
                    f"{at}.labelSelector",
                    "default constraints take no selector: kube-scheduler derives it from "
                    "each pod's owner",
                )
            )
        pair = (str(constraint.get("topologyKey")), str(action))
        if pair in seen:
            verdict.errors.append(
                Problem(at, f"a second constraint on {pair[0]} with {pair[1]}: merge them")
            )
        seen.add(pair)


def _balanced_allocation_args(where: str, args: Mapping[str, Any], verdict: Verdict) -> None:
    for index, resource in enumerate(args.get("resources") or []):
        weight = resource.get("weight")
        # Unset or 0 is defaulted to 1 before kube-scheduler checks it.
        if weight not in (None, 0, 1):
            verdict.errors.append(
                Problem(
                    f"{where}.resources[{index}].weight",
                    f"{weight!r}: NodeResourcesBalancedAllocation weighs every resource "
                    "equally; use 1 (or leave it out)",
                )
            )


def _volume_binding_args(where: str, args: Mapping[str, Any], verdict: Verdict) -> None:
    _in_range(
        verdict,
        f"{where}.bindTimeoutSeconds",
        args.get("bindTimeoutSeconds"),
        0,
        None,
        "a timeout in seconds",
    )


def _dynamic_resources_args(where: str, args: Mapping[str, Any], verdict: Verdict) -> None:
    for field_name, minimum in (("filterTimeout", 0.0), ("bindingTimeout", 1.0)):
        text = args.get(field_name)
        if text is None:
            continue
        try:
            seconds = go_duration_seconds(str(text))
        except ValueError:
            verdict.errors.append(
                Problem(f"{where}.{field_name}", f"{text!r} is not a duration such as 10s")
            )
            continue
        if seconds < minimum:
            least = "at least 1s" if minimum else "0s or more"
            verdict.errors.append(Problem(f"{where}.{field_name}", f"{text!r}: must be {least}"))


def _fit_args(where: str, args: Mapping[str, Any], verdict: Verdict) -> None:
    strategy = args.get("scoringStrategy")
    if strategy is None:
        return
    kind = strategy.get("type", "LeastAllocated")
    if kind not in SCORING_STRATEGIES:
        verdict.errors.append(
            Problem(
                f"{where}.scoringStrategy.type",
                f"{kind!r} is not a scoring strategy: use {', '.join(SCORING_STRATEGIES)}",
            )
        )
    for index, resource in enumerate(strategy.get("resources") or []):
        weight = resource.get("weight")
        # Unset or 0 is defaulted to 1 before kube-scheduler checks the range.
        if weight is not None and (not isinstance(weight, int) or not 0 <= weight <= 100):
            verdict.errors.append(
                Problem(
                    f"{where}.scoringStrategy.resources[{index}].weight",
                    f"{weight!r}: a resource weight must be from 1 to 100",
                )
            )
    shape = (strategy.get("requestedToCapacityRatio") or {}).get("shape")
    if kind == "RequestedToCapacityRatio" and not shape:
        verdict.errors.append(
            Problem(
                f"{where}.scoringStrategy.requestedToCapacityRatio.shape",
                "RequestedToCapacityRatio needs a shape: points of utilization (0-100) and "
                "score (0-10)",
            )
        )


_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


_ARG_CHECKS: dict[str, Callable[[str, Mapping[str, Any], Verdict], None]] = {
    "DefaultPreemption": _preemption_args,
    "DynamicResources": _dynamic_resources_args,
    "InterPodAffinity": _inter_pod_affinity_args,
    "NodeResourcesBalancedAllocation": _balanced_allocation_args,
    "NodeResourcesFit": _fit_args,
    "PodTopologySpread": _spread_args,
    "VolumeBinding": _volume_binding_args,
}


# As time.ParseDuration reads it: a number may start or end with its dot (".5s", "5.s"), and
# nothing around it is trimmed (" 2s" is refused).
_DURATION_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_GO_DURATION = re.compile(rf"([+-]?)((?:{_DURATION_NUMBER}(?:ns|us|µs|ms|s|m|h))+|0)")


def go_duration_seconds(text: str) -> float:
    """A Go duration (time.ParseDuration) in seconds; ValueError if it is not one."""
    match = _GO_DURATION.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration such as 15s or 1m30s")
    parts = re.findall(rf"({_DURATION_NUMBER})(ns|us|µs|ms|s|m|h)", match.group(2))
    seconds = sum(float(number) * _DURATION_UNITS[unit] for number, unit in parts)
    return -seconds if match.group(1) == "-" else seconds


def schema_problems(spec: Mapping[str, Any]) -> list[Problem]:
    """The CEL rules of the CRD, for files checked without an API server (`kubeherd render`):
    the same checks, the same words."""
    problems = []
    names = [str(p.get("schedulerName")) for p in spec.get("profiles") or []]
    for index, name in enumerate(names):
        if name == "default-scheduler":
            problems.append(
                Problem(
                    f"spec.profiles[{index}].schedulerName",
                    "default-scheduler is the cluster's own scheduler: give this profile "
                    "another schedulerName",
                )
            )
        if name in names[:index]:
            problems.append(
                Problem(f"spec.profiles[{index}].schedulerName", f"Duplicate value: {name!r}")
            )
    election = spec.get("leaderElection") or {}
    durations: dict[str, float] = {}
    for key, default in (("leaseDuration", "15s"), ("renewDeadline", "10s"), ("retryPeriod", "2s")):
        try:
            durations[key] = go_duration_seconds(str(election.get(key, default)))
        except ValueError as error:
            problems.append(Problem(f"spec.leaderElection.{key}", str(error)))
    for key in ("renewDeadline", "retryPeriod"):
        if durations.get(key, 1.0) <= 0:
            problems.append(Problem(f"spec.leaderElection.{key}", f"{key} must be more than 0"))
    lease, renew = durations.get("leaseDuration"), durations.get("renewDeadline")
    if lease is not None and renew is not None and lease <= renew:
        problems.append(
            Problem("spec.leaderElection", "leaseDuration must be longer than renewDeadline")
        )
    if int(spec.get("replicas", 1)) > 1 and not election.get("leaderElect", True):
        problems.append(
            Problem(
                "spec",
                "more than one replica needs leaderElection.leaderElect: true, or the replicas "
                "would all schedule at once",
            )
        )
    if int(spec.get("podMaxBackoffSeconds", 10)) < int(spec.get("podInitialBackoffSeconds", 1)):
        problems.append(
            Problem("spec", "podMaxBackoffSeconds must be at least podInitialBackoffSeconds")
        )
    return problems


def validate_spec(
    spec: Mapping[str, Any],
    *,
    custom_image: bool,
    taken_names: Mapping[str, str] | None = None,
) -> Verdict:
    """Check a SchedulerProfile's spec. `taken_names` maps the scheduler names of the other
    SchedulerProfiles to the resource using them (`namespace/name`).

    Never raises: plugin args pass the API server unchecked (preserve-unknown-fields), and a
    value of a shape the checks do not expect (a string where kube-scheduler decodes an
    object) is a refusal, not an exception. An exception left the previous verdict in the
    status: an edit to such args kept reporting Valid=True while nothing was applied."""
    try:
        return _check_spec(spec, custom_image=custom_image, taken_names=taken_names)
    except Exception as error:  # any shape the checks did not foresee is a refusal
        return Verdict(
            errors=[
                Problem(
                    "spec",
                    "a value has a shape kube-scheduler would not decode "
                    f"({type(error).__name__}: {error}); check the types of the plugin args",
                )
            ]
        )


def _check_spec(
    spec: Mapping[str, Any],
    *,
    custom_image: bool,
    taken_names: Mapping[str, str] | None,
) -> Verdict:
    verdict = Verdict(errors=schema_problems(spec))
    taken_names = taken_names or {}
    profiles: list[Mapping[str, Any]] = list(spec.get("profiles") or [])
    for index, profile in enumerate(profiles):
        where = f"spec.profiles[{index}]"
        name = str(profile.get("schedulerName"))
        if name in taken_names:
            verdict.errors.append(
                Problem(
                    f"{where}.schedulerName",
                    f"{name} is already the scheduler name of SchedulerProfile "
                    f"{taken_names[name]}: two schedulers with one name would both bind its "
                    "pods; pick another name",
                )
            )
        plugins = profile.get("plugins") or {}
        all_known = _plugin_names(where, plugins, custom_image, verdict)
        if all_known:
            effective = effective_plugins(plugins)
            sorters = effective["queueSort"]
            if len(sorters) != 1:
                verdict.errors.append(
                    Problem(
                        f"{where}.plugins.queueSort",
                        f"a profile needs exactly one queueSort plugin once merged with the "
                        f"defaults, this one has {len(sorters)} ({', '.join(sorters) or 'none'}): "
                        "disable PrioritySort when you enable another",
                    )
                )
            if not effective["bind"]:
                verdict.errors.append(
                    Problem(
                        f"{where}.plugins.bind",
                        "a profile needs at least one bind plugin: do not disable DefaultBinder "
                        "without enabling another",
                    )
                )
        for config_index, entry in enumerate(profile.get("pluginConfig") or []):
            _plugin_args(
                f"{where}.pluginConfig[{config_index}].args",
                str(entry.get("name")),
                entry.get("args") or {},
                verdict,
            )
    _common_queue_sort(profiles, verdict)
    return verdict


def _queue_sort_args(profile: Mapping[str, Any], names: Iterable[str]) -> list[Any]:
    wanted = set(names)
    return [
        entry.get("args")
        for entry in profile.get("pluginConfig") or []
        if entry.get("name") in wanted
    ]


def _common_queue_sort(profiles: Sequence[Mapping[str, Any]], verdict: Verdict) -> None:
    """One scheduler has one queue, so all its profiles must sort it alike (kube-scheduler's
    validateCommonQueueSort compares each profile's queueSort with the first one's)."""
    if not profiles:
        return
    first = (profiles[0].get("plugins") or {}).get("queueSort")
    sorters = [str(p["name"]) for p in _enabled(first)] or ["PrioritySort"]
    first_args = _queue_sort_args(profiles[0], sorters)
    for index, profile in enumerate(profiles[1:], start=1):
        if (profile.get("plugins") or {}).get("queueSort") != first:
            verdict.errors.append(
                Problem(
                    f"spec.profiles[{index}].plugins.queueSort",
                    "all profiles of one scheduler share its queue, so their queueSort must be "
                    "the first profile's: copy it, or put this profile in another "
                    "SchedulerProfile",
                )
            )
        elif _queue_sort_args(profile, sorters) != first_args:
            verdict.errors.append(
                Problem(
                    f"spec.profiles[{index}].pluginConfig",
                    "the queueSort plugin's args must be the same in every profile",
                )
            )


@dataclass(frozen=True)
class Claim:
    """A SchedulerProfile's claim on a scheduler name."""

    created: str
    owner: str  # namespace/name
    scheduler_name: str
    # Whether the name is in the resource's running configuration (status.schedulerNames).
    running: bool = False

    @property
    def rank(self) -> tuple[bool, str, str]:
        """Lower ranks keep the name: one that runs it, then the oldest (creation times have
        seconds only: ties go by namespace/name)."""
        return (not self.running, self.created, self.owner)


def names_taken_before(claims: Iterable[Claim], mine: Iterable[Claim]) -> dict[str, str]:
    """The names of `mine` that other SchedulerProfiles hold first, mapped to them. A scheduler
    that runs is never unseated by a newcomer."""
    taken: dict[str, str] = {}
    for claim in mine:
        for other in claims:
            same_name = other.scheduler_name == claim.scheduler_name
            if same_name and other.owner != claim.owner and other.rank < claim.rank:
                taken[claim.scheduler_name] = other.owner
    return taken
