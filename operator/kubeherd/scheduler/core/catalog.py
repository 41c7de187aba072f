"""What kube-scheduler of one Kubernetes minor has, from the catalogs shipped with kubeherd. Pure.

Each minor kubeherd validates for has a catalog, `catalogs/<minor>.json`, generated from that
minor's k8s.io/kubernetes module (hack/schedcatalog; never edited by hand): its in-tree plugins
and the extension points each implements, the plugins it cannot build with its default feature
gates, the plugins v1 refuses as removed, the default profile, the args kinds with their fields,
and the feature gates with their defaults. Everything that differs between minors is read from
there; the checks themselves are code (validation.py, pluginargs.py).

The minors kubeherd supports are exactly the catalogs present: adding a minor is adding its
catalog.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubeherd.scheduler.core.godecoding import (
    BOOL,
    DURATION,
    FLOAT64,
    INT32,
    INT64,
    STRING,
    GoList,
    GoMap,
    GoStruct,
    GoType,
)
from kubeherd.scheduler.core.images import official_release
from kubeherd.scheduler.core.problems import Problem

# The catalogs' folder: data of the scheduler package, beside its core and shell.
CATALOG_PACKAGE = "kubeherd.scheduler"
CATALOG_FOLDER = "catalogs"
_MINOR = re.compile(r"(\d+)\.(\d+)")
_RELEASE = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")
_SCALARS: Mapping[str, GoType] = {
    "bool": BOOL,
    "string": STRING,
    "int32": INT32,
    "int64": INT64,
    "float64": FLOAT64,
    "duration": DURATION,
}


class CatalogError(ValueError):
    """A catalog kubeherd cannot read: a bug in the generator or in this reader."""


@dataclass(frozen=True)
class Catalog:
    """kube-scheduler of one minor, as its configuration is checked."""

    minor: str  # "1.34"
    kubernetes: str  # the release it was derived from, "v1.34.4"
    # The points a profile's `plugins` may name in this minor, multiPoint included.
    extension_points: tuple[str, ...]
    # Each in-tree plugin kube-scheduler builds with its default gates, with its points.
    plugins: Mapping[str, frozenset[str]]
    # Registry names whose construction fails with the default gates, with the error.
    unbuildable_plugins: Mapping[str, str]
    removed_plugins: frozenset[str]
    # The default profile's plugins per extension point: (name, weight) in order.
    default_plugins: Mapping[str, tuple[tuple[str, int], ...]]
    # The v1 `<Plugin>Args` kinds, as kube-scheduler decodes pluginConfig args.
    args_types: Mapping[str, GoStruct]
    scheduler_features: Mapping[str, bool] = field(default_factory=dict)
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    # The catalogs of the other minors it was loaded beside, for messages that say where
    # something it lacks is.
    siblings: Catalogs | None = field(default=None, compare=False, repr=False)

    @property
    def name(self) -> str:
        """How messages name it: `kube-scheduler 1.34`."""
        return f"kube-scheduler {self.minor}"

    def gate(self, name: str) -> bool:
        """A feature gate's default in this minor (False for a gate it does not know)."""
        return bool(self.feature_gates.get(name, False))

    def feature(self, name: str) -> bool:
        """A scheduler plugin feature switch (feature.Features) as this minor fills it."""
        return bool(self.scheduler_features.get(name, False))

    def elsewhere(self, test: Callable[[Catalog], bool]) -> str:
        """`it is in 1.35, 1.36`: the minors loaded beside this one that pass `test`, as help
        for a message about something this minor lacks; "" when none does."""
        return self.siblings.which_have(test) if self.siblings is not None else ""


def minor_key(minor: str) -> tuple[int, int]:
    match = _MINOR.fullmatch(minor)
    if match is None:
        raise CatalogError(f"{minor!r} is not a Kubernetes minor such as 1.34")
    return int(match.group(1)), int(match.group(2))


def _go_type(where: str, spelled: Any) -> GoType:
    if isinstance(spelled, str):
        if spelled not in _SCALARS:
            # A Go kind this reader cannot decode: refusing to load is safer than guessing.
            raise CatalogError(f"{where}: the type {spelled!r} is not one kubeherd can decode")
        return _SCALARS[spelled]
    if isinstance(spelled, Mapping) and set(spelled) == {"list"}:
        return GoList(_go_type(f"{where}[]", spelled["list"]))
    if isinstance(spelled, Mapping) and set(spelled) == {"map"}:
        return GoMap(_go_type(f"{where}{{}}", spelled["map"]))
    if isinstance(spelled, Mapping) and set(spelled) == {"struct", "fields"}:
        fields = spelled["fields"]
        if not isinstance(fields, Mapping):
            raise CatalogError(f"{where}: a struct's fields must be an object")
        return GoStruct(
            str(spelled["struct"]),
            {str(name): _go_type(f"{where}.{name}", value) for name, value in fields.items()},
        )
    raise CatalogError(f"{where}: {spelled!r} is not a type of the catalog format")


def _plugin_sets(plugins: Mapping[str, Any]) -> dict[str, tuple[tuple[str, int], ...]]:
    return {
        str(point): tuple(
            (str(plugin["name"]), int(plugin.get("weight") or 0))
            for plugin in (plugin_set or {}).get("enabled") or []
        )
        for point, plugin_set in plugins.items()
        if (plugin_set or {}).get("enabled")
    }


def catalog_from_json(data: Mapping[str, Any]) -> Catalog:
    """A catalog from its JSON (see docs/schedulerprofile.md and hack/schedcatalog)."""
    try:
        minor = str(data["minor"])
        minor_key(minor)
        args_types = {}
        for plugin, spelled in data["argsTypes"].items():
            go_type = _go_type(f"argsTypes.{plugin}", spelled)
            if not isinstance(go_type, GoStruct):
                raise CatalogError(f"argsTypes.{plugin}: an args kind must be a struct")
            args_types[str(plugin)] = go_type
        return Catalog(
            minor=minor,
            kubernetes=str(data["kubernetes"]),
            extension_points=tuple(str(point) for point in data["extensionPoints"]),
            plugins={
                str(name): frozenset(str(point) for point in entry["extensionPoints"])
                for name, entry in data["plugins"].items()
            },
            unbuildable_plugins={
                str(name): str(error) for name, error in data["unbuildablePlugins"].items()
            },
            removed_plugins=frozenset(str(name) for name in data["removedPlugins"]),
            default_plugins=_plugin_sets(data["defaultProfile"]["plugins"]),
            args_types=args_types,
            scheduler_features={str(k): bool(v) for k, v in data["schedulerFeatures"].items()},
            feature_gates={str(k): bool(v) for k, v in data["featureGates"].items()},
        )
    except (KeyError, TypeError, AttributeError) as error:
        raise CatalogError(f"not a scheduler catalog: {type(error).__name__}: {error}") from None


class Catalogs:
    """The catalogs of one folder of `<minor>.json` files, each read once."""

    def __init__(self, names: Iterable[str], read: Callable[[str], str]) -> None:
        minors = [name.removesuffix(".json") for name in names if name.endswith(".json")]
        self.minors: tuple[str, ...] = tuple(
            sorted((m for m in minors if _MINOR.fullmatch(m)), key=minor_key)
        )
        self._read = read
        self._loaded: dict[str, Catalog] = {}

    def get(self, minor: str) -> Catalog:
        if minor not in self._loaded:
            if minor not in self.minors:
                raise CatalogError(f"no catalog for {minor}")
            catalog = catalog_from_json(json.loads(self._read(f"{minor}.json")))
            if catalog.minor != minor:
                raise CatalogError(f"{minor}.json holds the catalog of {catalog.minor}")
            self._loaded[minor] = dataclasses.replace(catalog, siblings=self)
        return self._loaded[minor]

    def newest(self) -> Catalog:
        if not self.minors:
            raise CatalogError("kubeherd ships no scheduler catalog")
        return self.get(self.minors[-1])

    def minors_where(self, test: Callable[[Catalog], bool]) -> list[str]:
        """The supported minors whose catalog passes `test`, oldest first."""
        return [minor for minor in self.minors if test(self.get(minor))]

    def which_have(self, test: Callable[[Catalog], bool]) -> str:
        """`it is in 1.35, 1.36`: help for a message about something one minor lacks; "" when
        no minor has it."""
        minors = self.minors_where(test)
        return f"it is in {', '.join(minors)}" if minors else ""


@functools.cache
def shipped() -> Catalogs:
    """The catalogs packaged with kubeherd."""
    folder = importlib.resources.files(CATALOG_PACKAGE) / CATALOG_FOLDER
    names = [entry.name for entry in folder.iterdir()] if folder.is_dir() else []
    return Catalogs(names, lambda name: folder.joinpath(name).read_text(encoding="utf-8"))


@dataclass(frozen=True)
class CatalogChoice:
    """Which catalog judges the configuration an image runs."""

    catalog: Catalog | None
    # Why the image is refused outright (a minor older than every catalog, a tag that names no
    # release).
    problems: tuple[Problem, ...] = ()
    # Why no catalog applies (a custom image, a minor newer than the newest catalog): only the
    # image itself can judge the configuration. "" when a catalog applies or the image is refused.
    by_image: str = ""


def choose_catalog(release: str | None, catalogs: Catalogs | None = None) -> CatalogChoice:
    """The catalog for an image: `release` is the tag of an official kube-scheduler image
    (`vMAJOR.MINOR.PATCH`), None for any other image."""
    catalogs = catalogs or shipped()
    if release is None:
        return CatalogChoice(
            None,
            by_image="spec.image is not the official kube-scheduler image: which plugins and args "
            "it has, only the image itself can tell",
        )
    match = _RELEASE.fullmatch(release)
    if match is None:
        return CatalogChoice(
            None,
            problems=(
                Problem(
                    "spec.image",
                    f"{release!r} is not a release version (vMAJOR.MINOR.PATCH): kubeherd "
                    "cannot tell which kube-scheduler checks apply",
                ),
            ),
        )
    minor = f"{int(match.group(1))}.{int(match.group(2))}"
    if minor in catalogs.minors:
        return CatalogChoice(catalogs.get(minor))
    known = ", ".join(catalogs.minors)
    if catalogs.minors and minor_key(minor) > minor_key(catalogs.minors[-1]):
        return CatalogChoice(
            None,
            by_image=f"kube-scheduler {release} is Kubernetes {minor}, newer than the minors this "
            f"kubeherd has catalogs for ({known}): only the image itself can judge the "
            "configuration",
        )
    return CatalogChoice(
        None,
        problems=(
            Problem(
                "spec.image",
                f"kube-scheduler {release} is Kubernetes {minor}, and this kubeherd validates "
                f"configurations for {known}: its plugins and args differ, so a configuration "
                f"Valid here could crash-loop there. Upgrade the cluster to a minor kubeherd "
                "covers, or set spec.image to a scheduler build of your own (judged by running it)",
            ),
        ),
    )


def image_catalog(image: str, catalogs: Catalogs | None = None) -> CatalogChoice:
    """The catalog that judges the configuration `image` runs."""
    return choose_catalog(official_release(image), catalogs)
