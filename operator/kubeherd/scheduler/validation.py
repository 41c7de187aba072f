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

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubeherd.api.schedulerprofile import (
    EXTENSION_POINTS,
    LEADER_ELECTION_DEFAULTS,
    LEASE_LOCK,
    LEASE_LOCK_ONLY,
    LEASE_LONGER_THAN_RENEW,
    NOT_NEGATIVE,
    REFUSED_CLUSTER_ROLE_MESSAGE,
    REFUSED_COMMAND_FLAG,
    REFUSED_COMMAND_FLAG_MESSAGE,
    RENEW_AFTER_RETRY,
    cluster_role_allowed,
)
from kubeherd.scheduler.catalog import Catalog, shipped
from kubeherd.scheduler.config import Lock
from kubeherd.scheduler.godecoding import FieldHelp, struct_named
from kubeherd.scheduler.pluginargs import go_duration_seconds as go_duration_seconds
from kubeherd.scheduler.pluginargs import plugin_args_problems
from kubeherd.scheduler.problems import Problem as Problem

ALL = "*"
MULTI_POINT = "multiPoint"


@dataclass
class Verdict:
    errors: list[Problem] = field(default_factory=list)
    # Accepted, but worth a Warning event (out-of-tree plugins in a custom image).
    warnings: list[Problem] = field(default_factory=list)
    # No catalog applied (a custom image, a minor newer than every catalog): only the checks
    # that need none were made, and the image itself must judge the configuration. `by_image`
    # says why.
    judge_by_image: bool = False
    by_image: str = ""

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


def effective_plugins(plugins: Mapping[str, Any] | None, catalog: Catalog) -> dict[str, list[str]]:
    """The plugins each extension point runs: the merged multiPoint set spread to the points
    each plugin implements (unless that point disables it or configures it itself), then the
    point's own merged plugins. Plugins the catalog does not know stay where they were written."""
    plugins = plugins or {}

    def merged(point: str) -> list[str]:
        defaults = [name for name, _weight in catalog.default_plugins.get(point, ())]
        return _merge(defaults, plugins.get(point))

    multi_point = merged(MULTI_POINT)
    effective: dict[str, list[str]] = {}
    for point in catalog.extension_points:
        if point == MULTI_POINT:
            continue
        own = merged(point)
        disabled = _disabled(plugins.get(point))
        spread = [
            name
            for name in multi_point
            if point in catalog.plugins.get(name, ())
            and name not in disabled
            and ALL not in disabled
            and name not in own
        ]
        effective[point] = spread + own
    return effective


def _in_parentheses(text: str) -> str:
    return f" ({text})" if text else ""


def _minors_with_plugin(catalog: Catalog, name: str) -> str:
    return _in_parentheses(catalog.elsewhere(lambda other: name in other.plugins))


def _minors_with_point(catalog: Catalog, point: str) -> str:
    return _in_parentheses(catalog.elsewhere(lambda other: point in other.extension_points))


def _plugin_problem(where: str, name: str, point: str, catalog: Catalog) -> Problem | None:
    """Why `name` cannot be enabled at `point` in this minor, if it cannot."""
    if name in catalog.removed_plugins:
        return Problem(
            where,
            f"{name} was removed from kube-scheduler (kubescheduler.config.k8s.io/v1 refuses it): "
            "remove it (NodeVolumeLimits covers CSI volume limits)",
        )
    if name in catalog.unbuildable_plugins:
        return Problem(
            where,
            f"{name} cannot run in {catalog.name} with its default feature gates "
            f"({catalog.unbuildable_plugins[name]}): remove it",
        )
    points = catalog.plugins.get(name)
    if points is None:
        return Problem(
            where,
            f"{name} is not a plugin of {catalog.name}{_minors_with_plugin(catalog, name)}: "
            "check the spelling, or set spec.image to a scheduler build that has it",
        )
    if point != MULTI_POINT and point not in points:
        listed = ", ".join(sorted(points)) or "none"
        return Problem(
            where,
            f"{name} does not implement {point} in {catalog.name} (it implements {listed}): "
            "enable it at one of those, or under multiPoint",
        )
    return None


def _plugin_names(
    profile_field: str, plugins: Mapping[str, Any], catalog: Catalog, verdict: Verdict
) -> bool:
    """Check every extension point and enabled plugin; return whether the catalog knows every
    plugin enabled."""
    all_known = True
    for point in EXTENSION_POINTS:
        if point not in catalog.extension_points:
            # As render writes it: an empty plugin set is left out, anything else is written.
            if plugins.get(point):
                verdict.errors.append(
                    Problem(
                        f"{profile_field}.plugins.{point}",
                        f"{point} is not an extension point of {catalog.name}"
                        f"{_minors_with_point(catalog, point)}: remove it",
                    )
                )
            continue
        seen: set[str] = set()
        for index, plugin in enumerate(_enabled(plugins.get(point))):
            name = str(plugin["name"])
            where = f"{profile_field}.plugins.{point}.enabled[{index}]"
            if name in seen:
                verdict.errors.append(
                    Problem(where, f"{name} is enabled twice at {point}: keep one entry")
                )
            seen.add(name)
            problem = _plugin_problem(where, name, point, catalog)
            if problem is not None:
                verdict.errors.append(problem)
                all_known = all_known and name in catalog.plugins
    return all_known


def _unknown_everywhere(profile_field: str, plugins: Mapping[str, Any]) -> list[Problem]:
    """With no catalog for the image: the plugin names no minor kubeherd knows has, accepted as
    the image's own (out-of-tree) plugins, worth a warning."""
    catalogs = shipped()
    known = {name for minor in catalogs.minors for name in catalogs.get(minor).plugins}
    return [
        Problem(
            f"{profile_field}.plugins.{point}.enabled[{index}]",
            f"{plugin['name']} is not an in-tree plugin of any kube-scheduler kubeherd knows "
            f"({', '.join(catalogs.minors)}); accepted as an out-of-tree plugin of spec.image",
        )
        for point in EXTENSION_POINTS
        for index, plugin in enumerate(_enabled(plugins.get(point)))
        if str(plugin["name"]) not in known
    ]


def renews_in_time(renew_seconds: float, retry_seconds: float) -> bool:
    """client-go's leader elector: renewDeadline > JitterFactor times retryPeriod, in nanoseconds
    (the product truncated, as Go converts it back to a Duration)."""
    renew, retry = round(renew_seconds * 1e9), round(retry_seconds * 1e9)
    # 1.2 times retry, exactly as the integer Go truncates it to (retry * 6 // 5 in integers).
    return renew > retry * 6 // 5


def _lease_problems(election: Mapping[str, Any]) -> list[Problem]:
    """The CRD's rules on leader election: Go durations, and, with leader election, the lease
    timings kube-scheduler uses (its default in place of a 0) in order, and a lease lock."""
    problems = []
    durations: dict[str, float] = {}
    for key, default in LEADER_ELECTION_DEFAULTS.items():
        try:
            written = go_duration_seconds(str(election.get(key, default)))
        except ValueError as error:
            problems.append(Problem(f"spec.leaderElection.{key}", str(error)))
            continue
        if written < 0:
            durations[key] = written
        else:
            durations[key] = written or go_duration_seconds(default)
    if not election.get("leaderElect", True):
        return problems
    for key in ("renewDeadline", "retryPeriod"):
        if durations.get(key, 1.0) < 0:
            problems.append(Problem(f"spec.leaderElection.{key}", f"{key} {NOT_NEGATIVE}"))
    lease, renew = durations.get("leaseDuration"), durations.get("renewDeadline")
    if lease is not None and renew is not None and lease <= renew:
        problems.append(Problem("spec.leaderElection", LEASE_LONGER_THAN_RENEW))
    retry = durations.get("retryPeriod")
    if renew is not None and retry is not None and not renews_in_time(renew, retry):
        problems.append(Problem("spec.leaderElection", RENEW_AFTER_RETRY))
    if election.get("resourceLock") not in (None, "", LEASE_LOCK):
        problems.append(Problem("spec.leaderElection", LEASE_LOCK_ONLY))
    return problems


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
    problems += _lease_problems(election)
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
    return problems + privilege_problems(spec)


def privilege_problems(spec: Mapping[str, Any]) -> list[Problem]:
    """The CRD's rules on what a scheduler runs with: no flag that moves its leader election,
    API server, credentials or authorization, no broad or system ClusterRole. Checked here too,
    so that a SchedulerProfile stored before these rules existed rolls nothing out."""
    problems = [
        Problem(f"spec.command[{index}]", REFUSED_COMMAND_FLAG_MESSAGE)
        for index, argument in enumerate(spec.get("command") or [])
        if re.match(REFUSED_COMMAND_FLAG, str(argument))
    ]
    problems += [
        Problem(f"spec.extraClusterRoles[{index}]", REFUSED_CLUSTER_ROLE_MESSAGE)
        for index, role in enumerate(spec.get("extraClusterRoles") or [])
        if not cluster_role_allowed(str(role))
    ]
    return problems


def validate_spec(
    spec: Mapping[str, Any],
    catalog: Catalog | None,
    *,
    taken_names: Mapping[str, str] | None = None,
    by_image: str = "",
) -> Verdict:
    """Check a SchedulerProfile's spec against the catalog of the minor its image runs; None:
    no catalog applies (`by_image` says why), so only the checks that need none are made and the
    image itself must judge the rest. `taken_names` maps the scheduler names of the other
    SchedulerProfiles to the resource using them, as the message names it.

    Never raises: plugin args pass the API server unchecked (preserve-unknown-fields), and a
    value of a shape the checks do not expect (a string where kube-scheduler decodes an
    object) is a refusal, not an exception. An exception left the previous verdict in the
    status: an edit to such args kept reporting Valid=True while nothing was applied."""
    try:
        verdict = _check_spec(spec, catalog, taken_names=taken_names)
    except Exception as error:  # any shape the checks did not foresee is a refusal
        verdict = Verdict(
            errors=[
                Problem(
                    "spec",
                    "a value has a shape kube-scheduler would not decode "
                    f"({type(error).__name__}: {error}); check the types of the plugin args",
                )
            ]
        )
    verdict.judge_by_image = catalog is None
    verdict.by_image = by_image if catalog is None else ""
    return verdict


def _check_spec(
    spec: Mapping[str, Any], catalog: Catalog | None, *, taken_names: Mapping[str, str] | None
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
                    f"{name} is already the scheduler name of {taken_names[name]}: two "
                    "schedulers with one name would both bind its pods; pick another name",
                )
            )
        plugins = profile.get("plugins") or {}
        if catalog is None:
            verdict.warnings += _unknown_everywhere(where, plugins)
            continue
        all_known = _plugin_names(where, plugins, catalog, verdict)
        effective = effective_plugins(plugins, catalog)
        if all_known:
            _queue_sort_and_bind(where, effective, verdict)
        built = {name for names in effective.values() for name in names}
        _plugin_config(where, profile.get("pluginConfig") or [], built, catalog, verdict)
    _common_queue_sort(profiles, verdict)
    if catalog is not None and profiles:
        _one_queue_sort_configuration(profiles, catalog, verdict)
    return verdict


def _queue_sort_and_bind(where: str, effective: Mapping[str, list[str]], verdict: Verdict) -> None:
    """Exactly one queueSort plugin and at least one bind plugin, as the framework counts them."""
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


def _plugin_config(
    where: str,
    entries: Sequence[Mapping[str, Any]],
    built: set[str],
    catalog: Catalog,
    verdict: Verdict,
) -> None:
    """kube-scheduler's checks of pluginConfig: one entry per plugin, none for a removed plugin,
    and args it can decode and accepts."""
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        at = f"{where}.pluginConfig[{index}]"
        name = str(entry.get("name"))
        if name in seen:
            verdict.errors.append(
                Problem(f"{at}.name", f"{name} has a second pluginConfig entry: merge them")
            )
        seen.add(name)
        if name in catalog.removed_plugins:
            verdict.errors.append(
                Problem(
                    f"{at}.name",
                    f"{name} was removed from kube-scheduler (kubescheduler.config.k8s.io/v1 "
                    "refuses it): remove its pluginConfig entry",
                )
            )
            continue
        verdict.errors += plugin_args_problems(
            f"{at}.args",
            name,
            entry.get("args"),
            built=name in built,
            catalog=catalog,
            elsewhere=_minors_with_args_field(catalog, name),
        )


def _minors_with_args_field(catalog: Catalog, plugin: str) -> FieldHelp:
    """Which minors have a field of `plugin`'s args that one minor lacks."""

    def help_for(struct: str, key: str) -> str:
        def has_field(other: Catalog) -> bool:
            args_type = other.args_types.get(plugin)
            return args_type is not None and key in (struct_named(args_type, struct) or {})

        return catalog.elsewhere(has_field)

    return help_for


def _plugin_set_value(plugin_set: Any) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """A PluginSet as kube-scheduler compares two (semantic DeepEqual after conversion): an
    absent set, `{}` and empty lists are alike, and an unset weight is 0."""

    def plugins(key: str) -> list[tuple[str, int]]:
        return [
            (str(p.get("name")), int(p.get("weight") or 0))
            for p in (plugin_set or {}).get(key) or []
        ]

    return plugins("enabled"), plugins("disabled")


def _common_queue_sort(profiles: Sequence[Mapping[str, Any]], verdict: Verdict) -> None:
    """One scheduler has one queue, so all its profiles must sort it alike (kube-scheduler's
    validateCommonQueueSort compares each profile's queueSort with the first one's, and the args
    any other profile gives the first one's queueSort plugin with the first one's args)."""
    if not profiles:
        return
    first = _plugin_set_value((profiles[0].get("plugins") or {}).get("queueSort"))
    sorter = first[0][0][0] if first[0] else None
    first_args = next(
        (e.get("args") for e in profiles[0].get("pluginConfig") or [] if e.get("name") == sorter),
        None,
    )
    for index, profile in enumerate(profiles[1:], start=1):
        if _plugin_set_value((profile.get("plugins") or {}).get("queueSort")) != first:
            verdict.errors.append(
                Problem(
                    f"spec.profiles[{index}].plugins.queueSort",
                    "all profiles of one scheduler share its queue, so their queueSort must be "
                    "the first profile's: copy it, or put this profile in another "
                    "SchedulerProfile",
                )
            )
        for entry in profile.get("pluginConfig") or []:
            if (
                sorter is not None
                and entry.get("name") == sorter
                and entry.get("args") != first_args
            ):
                verdict.errors.append(
                    Problem(
                        f"spec.profiles[{index}].pluginConfig",
                        f"the args of the queueSort plugin {sorter} must be the first profile's "
                        "in every profile: copy them",
                    )
                )


def _canonical_args(args: Any) -> str | None:
    """Args as kube-scheduler compares args it keeps raw (a plugin without an args kind): the JSON
    its YAML reader makes of them, keys sorted, a whole float written as an integer."""

    def normal(value: Any) -> Any:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, Mapping):
            return {str(key): normal(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [normal(item) for item in value]
        return value

    return None if args is None else json.dumps(normal(args), sort_keys=True)


def _one_queue_sort_configuration(
    profiles: Sequence[Mapping[str, Any]], catalog: Catalog, verdict: Verdict
) -> None:
    """kube-scheduler builds one queue for all profiles, so each profile's queueSort plugin, as it
    runs after the merge with the defaults, must be the first profile's, with the same args:
    args given in one profile only differ from none. It compares them when it builds the
    profiles, beyond what its validation compares (only a queueSort plugin enabled by name)."""
    first_sorter, first_args = _queue_sort_of(profiles[0], catalog)
    if first_sorter is None:
        return
    for index, profile in enumerate(profiles[1:], start=1):
        sorter, args = _queue_sort_of(profile, catalog)
        where = f"spec.profiles[{index}]"
        if sorter is None or sorter != first_sorter:
            continue  # none or several: refused above; another: refused with the plugin sets
        already = any(problem.field == f"{where}.pluginConfig" for problem in verdict.errors)
        if sorter in catalog.args_types or already:
            # An args kind: compared once defaulted (no in-tree queueSort plugin has one).
            continue
        if _canonical_args(args) != _canonical_args(first_args):
            verdict.errors.append(
                Problem(
                    f"{where}.pluginConfig",
                    f"the args of the queueSort plugin {sorter} must be the same in every profile "
                    "(kube-scheduler sorts one queue for all of them), and here they differ from "
                    "the first profile's: give the same args in every profile, or none in any",
                )
            )


def _queue_sort_of(profile: Mapping[str, Any], catalog: Catalog) -> tuple[str | None, Any]:
    """The queueSort plugin a profile runs (None unless exactly one), and the args its first
    pluginConfig entry gives it."""
    sorters = effective_plugins(profile.get("plugins") or {}, catalog)["queueSort"]
    if len(sorters) != 1:
        return None, None
    entries: list[Mapping[str, Any]] = list(profile.get("pluginConfig") or [])
    entry = next((e for e in entries if e.get("name") == sorters[0]), {})
    return sorters[0], entry.get("args")


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
