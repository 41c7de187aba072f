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

The checks after the defaults are code, by concern: args_placement.py (where pods go) and
args_resources.py (resources, volumes, devices; those read the minor's catalog: a field some
minors check only behind a feature gate, a check a minor made stricter).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubeherd.scheduler.core.args_placement import PLACEMENT_CHECKS
from kubeherd.scheduler.core.args_resources import RESOURCE_CHECKS
from kubeherd.scheduler.core.catalog import Catalog
from kubeherd.scheduler.core.godecoding import FieldHelp, GoDecoder, json_kind
from kubeherd.scheduler.core.godecoding import go_duration_seconds as go_duration_seconds
from kubeherd.scheduler.core.problems import Problem

ARGS_API_VERSION = "kubescheduler.config.k8s.io/v1"


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
        if plugin in PLACEMENT_CHECKS:
            PLACEMENT_CHECKS[plugin](where, decoded or {}, problems)
        elif plugin in RESOURCE_CHECKS:
            RESOURCE_CHECKS[plugin](where, decoded or {}, problems, catalog)
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
