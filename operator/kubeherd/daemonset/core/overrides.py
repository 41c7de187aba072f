"""Per-pool resource overrides (spec.resourceOverrides): containers' requests and limits set
apart for the nodes a selector matches, so that the same agent gets more memory on large nodes.

An override is not part of the template, nor of its revisions: a pod records the override it
was made with in an annotation, and a pod whose override is not its node's is out of date the
way a pod of an older revision is.

Pure: plain data in, plain data out.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubeherd.daemonset.core.claims import selector_matches
from kubeherd.daemonset.core.pods import canonical_hash, canonical_json

# The parts of a container's resources an override sets, key by key.
OVERRIDDEN_PARTS = ("requests", "limits")


@dataclass(frozen=True)
class ResourceOverride:
    """One item of spec.resourceOverrides."""

    name: str
    node_selector: Mapping[str, Any]
    # Per container of the template, by name: the requests and limits to set.
    containers: Mapping[str, Mapping[str, Any]]
    # `<name>/<hash>`: changes whenever what the override sets changes, and only then.
    key: str

    @classmethod
    def of(cls, item: Mapping[str, Any]) -> ResourceOverride:
        containers = {
            str(container["name"]): {
                part: dict(values)
                for part, values in (container.get("resources") or {}).items()
                if part in OVERRIDDEN_PARTS and values
            }
            for container in item.get("containers") or ()
        }
        name = str(item["name"])
        key = f"{name}/{canonical_hash(canonical_json(containers))}"
        return cls(name, item.get("nodeSelector") or {}, containers, sys.intern(key))

    def matches(self, labels: Mapping[str, str]) -> bool:
        return selector_matches(self.node_selector, labels)

    def apply(self, containers: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """The containers with this override's requests and limits merged into the named
        ones, key by key over the template's; the others are the very same objects."""
        return [
            with_resources(container, self.containers[container.get("name") or ""])
            if container.get("name") in self.containers
            else container
            for container in containers
        ]


def with_resources(
    container: Mapping[str, Any], overridden: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    resources = dict(container.get("resources") or {})
    for part, values in overridden.items():
        resources[part] = {**(resources.get(part) or {}), **values}
    return {**container, "resources": resources}


@dataclass(frozen=True)
class OverrideRule:
    """spec.resourceOverrides in list order: the first whose selector matches a node's labels
    applies to it."""

    overrides: tuple[ResourceOverride, ...] = ()

    @classmethod
    def of(cls, items: Sequence[Mapping[str, Any]] | None) -> OverrideRule:
        return cls(tuple(ResourceOverride.of(item) for item in items or ()))

    def for_labels(self, labels: Mapping[str, str]) -> ResourceOverride | None:
        return next((o for o in self.overrides if o.matches(labels)), None)

    def key_for(self, labels: Mapping[str, str]) -> str:
        """The key of the node's override ("" for none)."""
        override = self.for_labels(labels) if self.overrides else None
        return override.key if override is not None else ""

    def by_key(self, key: str) -> ResourceOverride | None:
        return next((o for o in self.overrides if o.key == key), None) if key else None


NO_OVERRIDES = OverrideRule()
