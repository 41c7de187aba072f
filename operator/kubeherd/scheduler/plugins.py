"""kube-scheduler v1.37.2's in-tree plugins: which extension points each implements, and the
default plugin set, for validating a configuration before kube-scheduler runs it.

Where the tables come from (to refresh them for another version, in the Kubernetes source):
- the plugins: `pkg/scheduler/framework/plugins/registry.go` `NewInTreeRegistry`;
- their extension points: the `var _ fwk.<Point>Plugin = ...` assertions in each plugin's
  package under `pkg/scheduler/framework/plugins/`;
- the defaults: `pkg/scheduler/apis/config/v1/default_plugins.go` `getDefaultPlugins` with the
  feature gates on by default, checked against what `kube-scheduler --write-config-to` prints;
- the removed plugins: `pkg/scheduler/apis/config/validation/validation.go`
  `invalidPluginsByVersion`.
The tests run the real kube-scheduler on configurations and compare its verdict with kubeherd's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from kubeherd.scheduler.problems import Problem

KUBE_SCHEDULER_VERSION = "v1.37.2"
# The Kubernetes minors whose kube-scheduler these tables and the checks follow. Another minor
# has another catalog (plugins added or removed), other args and feature gates: a configuration
# Valid here may crash-loop there, so it is refused rather than guessed.
VALIDATED_MINORS = ("1.37",)
_RELEASE = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")


def version_problems(image_version: str | None) -> list[Problem]:
    """Refusals of an official kube-scheduler image version (`vMAJOR.MINOR.PATCH`) whose minor
    kubeherd does not validate for; None (a custom image, or no version) is not refused here."""
    if image_version is None:
        return []
    match = _RELEASE.fullmatch(image_version)
    if match is None:
        return [
            Problem(
                "spec.image",
                f"{image_version!r} is not a release version (vMAJOR.MINOR.PATCH): kubeherd "
                "cannot tell which kube-scheduler checks apply",
            )
        ]
    minor = f"{int(match.group(1))}.{int(match.group(2))}"
    if minor in VALIDATED_MINORS:
        return []
    return [
        Problem(
            "spec.image",
            f"kube-scheduler {image_version} is Kubernetes {minor}, and this kubeherd validates "
            f"configurations only for {', '.join(VALIDATED_MINORS)}: its plugins and args differ, "
            "so a configuration Valid here could crash-loop there. Use a kubeherd release that "
            f"covers {minor}, or set spec.image to a scheduler build you have checked yourself",
        )
    ]


@dataclass(frozen=True)
class PluginInfo:
    name: str
    extension_points: frozenset[str]


def _plugin(name: str, *points: str) -> tuple[str, PluginInfo]:
    return name, PluginInfo(name, frozenset(points))


_FILTERING = ("preFilter", "filter")
_SCORING = ("preScore", "score")

IN_TREE_PLUGINS: Mapping[str, PluginInfo] = dict(
    [
        _plugin("SchedulingGates", "preEnqueue"),
        _plugin("PrioritySort", "queueSort"),
        _plugin("NodeName", *_FILTERING),
        _plugin("NodeUnschedulable", *_FILTERING),
        _plugin("TaintToleration", *_FILTERING, *_SCORING),
        _plugin("NodeAffinity", *_FILTERING, *_SCORING),
        _plugin("NodePorts", *_FILTERING),
        _plugin("NodeResourcesFit", *_FILTERING, *_SCORING, "placementScore"),
        _plugin("NodeResourcesBalancedAllocation", *_SCORING),
        _plugin("VolumeRestrictions", *_FILTERING),
        _plugin("NodeVolumeLimits", *_FILTERING),
        _plugin("VolumeBinding", *_FILTERING, "reserve", "preBind", *_SCORING),
        _plugin("VolumeZone", *_FILTERING),
        _plugin("PodTopologySpread", *_FILTERING, *_SCORING),
        _plugin("InterPodAffinity", *_FILTERING, *_SCORING),
        _plugin(
            "DynamicResources",
            "preEnqueue",
            *_FILTERING,
            "postFilter",
            "podGroupPostFilter",
            "score",
            "reserve",
            "preBind",
        ),
        # podGroupPostFilter has no interface assertion in the package; the framework finds the
        # method by reflection (framework/runtime/framework.go).
        _plugin("DefaultPreemption", "preEnqueue", "postFilter", "podGroupPostFilter"),
        _plugin("ImageLocality", "score"),
        _plugin("DefaultBinder", "bind"),
        _plugin("NodeDeclaredFeatures", *_FILTERING),
        # Behind feature gates that are off by default in 1.37.
        _plugin("DeferredPodScheduling", *_FILTERING, "permit"),
        _plugin("GangScheduling", "preEnqueue", "permit"),
        _plugin("TopologyPlacementGenerator", "placementGenerate"),
        _plugin("PodGroupPodsCount", "placementScore"),
    ]
)

# Removed from kubescheduler.config.k8s.io/v1; kube-scheduler refuses them by name.
REMOVED_PLUGINS: Mapping[str, str] = {
    "AzureDiskLimits": "removed in v1.32",
    "CinderLimits": "removed in v1.32",
    "EBSLimits": "removed in v1.32",
    "GCEPDLimits": "removed in v1.32",
}

# The v1 defaults, all under multiPoint, with their score weights (0: not a score plugin).
DEFAULT_PLUGINS: Mapping[str, tuple[tuple[str, int], ...]] = {
    "multiPoint": (
        ("SchedulingGates", 0),
        ("PrioritySort", 0),
        ("NodeName", 0),
        ("NodeUnschedulable", 0),
        ("TaintToleration", 3),
        ("NodeAffinity", 2),
        ("NodePorts", 0),
        ("NodeResourcesFit", 1),
        ("VolumeRestrictions", 0),
        ("NodeVolumeLimits", 0),
        ("VolumeBinding", 0),
        ("VolumeZone", 0),
        ("PodTopologySpread", 2),
        ("InterPodAffinity", 2),
        ("DynamicResources", 2),
        ("DefaultPreemption", 0),
        ("NodeResourcesBalancedAllocation", 1),
        ("ImageLocality", 1),
        ("DefaultBinder", 0),
        ("NodeDeclaredFeatures", 0),
    )
}
