"""The checks kube-scheduler makes when it starts, made before kubeherd rolls anything out.

The API server already refused what the schema and CEL rules can see (see
api/schedulerprofile.py). What is left needs the plugin catalog or other objects: plugin names and
the extension points they implement, plugins kube-scheduler removed (plugin_sets.py), exactly one
queueSort and at least one bind plugin once the profile is merged with the defaults, one
queueSort for all profiles (queue_sort.py), plugin args (pluginargs.py), and scheduler names
across SchedulerProfiles (claims.py). This module runs them in kube-scheduler's order, with the
checks of the spec's own fields (schema, privileges, lease timings). Each problem names the field
and says how to fix it.

Pure: plain data in, plain data out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from kubeherd.api.schedulerprofile_rules import (
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
from kubeherd.scheduler.core.catalog import Catalog
from kubeherd.scheduler.core.godecoding import FieldHelp, struct_named
from kubeherd.scheduler.core.plugin_sets import (
    check_plugin_names,
    effective_plugins,
    unverified_plugins,
)
from kubeherd.scheduler.core.pluginargs import go_duration_seconds as go_duration_seconds
from kubeherd.scheduler.core.pluginargs import plugin_args_problems
from kubeherd.scheduler.core.problems import Problem as Problem
from kubeherd.scheduler.core.problems import Verdict as Verdict
from kubeherd.scheduler.core.queue_sort import (
    check_common_queue_sort,
    check_one_queue_sort_configuration,
    check_queue_sort_and_bind,
)


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
            verdict.warnings += unverified_plugins(where, plugins)
            continue
        all_known = check_plugin_names(where, plugins, catalog, verdict)
        effective = effective_plugins(plugins, catalog)
        if all_known:
            check_queue_sort_and_bind(where, effective, verdict)
        built = {name for names in effective.values() for name in names}
        _plugin_config(where, profile.get("pluginConfig") or [], built, catalog, verdict)
    check_common_queue_sort(profiles, verdict)
    if catalog is not None and profiles:
        check_one_queue_sort_configuration(profiles, catalog, verdict)
    return verdict


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
