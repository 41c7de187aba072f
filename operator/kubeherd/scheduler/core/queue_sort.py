"""The queue's sort, which kube-scheduler shares between profiles: exactly one queueSort plugin
and at least one bind plugin per profile once merged with the defaults, the same queueSort in
every profile (compared after defaulting), and one configuration of its args. Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from kubeherd.scheduler.core.catalog import Catalog
from kubeherd.scheduler.core.plugin_sets import effective_plugins
from kubeherd.scheduler.core.problems import Problem, Verdict


def check_queue_sort_and_bind(
    where: str, effective: Mapping[str, list[str]], verdict: Verdict
) -> None:
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


def _plugin_set_value(plugin_set: Any) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """A PluginSet as kube-scheduler compares two (semantic DeepEqual after conversion): an
    absent set, `{}` and empty lists are alike, and an unset weight is 0."""

    def plugins(key: str) -> list[tuple[str, int]]:
        return [
            (str(p.get("name")), int(p.get("weight") or 0))
            for p in (plugin_set or {}).get(key) or []
        ]

    return plugins("enabled"), plugins("disabled")


def check_common_queue_sort(profiles: Sequence[Mapping[str, Any]], verdict: Verdict) -> None:
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


def check_one_queue_sort_configuration(
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
