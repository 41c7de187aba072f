"""Which plugins a profile runs at each extension point, and whether kube-scheduler of the
catalog's minor has them: its defaults merged with the profile's enabled and disabled lists as
kube-scheduler merges them (multiPoint first, `*` disabling every default), plugin names it
knows, at extension points it has and they implement, none it removed. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubeherd.api.schedulerprofile_rules import EXTENSION_POINTS
from kubeherd.scheduler.core.catalog import Catalog, shipped
from kubeherd.scheduler.core.problems import Problem, Verdict

ALL = "*"


MULTI_POINT = "multiPoint"


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


def check_plugin_names(
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


def unverified_plugins(profile_field: str, plugins: Mapping[str, Any]) -> list[Problem]:
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
