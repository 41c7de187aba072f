"""kubeherd's checks against kube-scheduler's own: the built kube-scheduler reads each rendered
configuration (`--write-config-to` builds every profile's plugins, then exits), and kubeherd must
accept exactly what it accepts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubeherd.scheduler.config import configuration_yaml, render_configuration
from kubeherd.scheduler.validation import validate_spec
from localcluster.binaries import Binaries
from localcluster.cluster import LocalCluster
from tests.helpers import REPO, Kubectl

pytestmark = [pytest.mark.cluster]


def example(name: str) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((REPO / "examples" / name).read_text())["spec"]
    return spec


def profile(**fields: Any) -> dict[str, Any]:
    return {"profiles": [{"schedulerName": "checked", **fields}]}


def plugins(**points: Any) -> dict[str, Any]:
    return profile(plugins=points)


def plugin_args(plugin: str, **args: Any) -> dict[str, Any]:
    return profile(pluginConfig=[{"name": plugin, "args": args}])


def fit_args(**args: Any) -> dict[str, Any]:
    return plugin_args("NodeResourcesFit", **args)


def spread(*constraints: dict[str, Any], **args: Any) -> dict[str, Any]:
    return plugin_args("PodTopologySpread", defaultConstraints=list(constraints), **args)


ZONE_SPREAD = {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}


VALID = {
    "minimal": profile(),
    "two profiles (seed 002)": example("schedulerprofile-two-profiles.yaml"),
    "MostAllocated packing": example("schedulerprofile-packing.yaml"),
    "LeastAllocated": fit_args(scoringStrategy={"type": "LeastAllocated"}),
    "a resource weight of 0 (read as 1)": fit_args(
        scoringStrategy={"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 0}]}
    ),
    "RequestedToCapacityRatio": fit_args(
        scoringStrategy={
            "type": "RequestedToCapacityRatio",
            "resources": [{"name": "cpu", "weight": 1}],
            "requestedToCapacityRatio": {
                "shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]
            },
        }
    ),
    "a default's weight changed": plugins(
        score={"enabled": [{"name": "TaintToleration", "weight": 9}]}
    ),
    "all defaults off but sort and bind": plugins(
        multiPoint={
            "disabled": [{"name": "*"}],
            "enabled": [{"name": "PrioritySort"}, {"name": "DefaultBinder"}],
        }
    ),
    "filter plugins re-listed (seed 000's first profile)": plugins(
        filter={
            "enabled": [{"name": "NodeResourcesFit"}, {"name": "NodeName"}],
            "disabled": [{"name": "TaintToleration"}],
        }
    ),
    "the same queueSort in every profile": {
        "profiles": [
            {
                "schedulerName": "a",
                "plugins": {"queueSort": {"enabled": [{"name": "PrioritySort"}]}},
            },
            {
                "schedulerName": "b",
                "plugins": {"queueSort": {"enabled": [{"name": "PrioritySort"}]}},
            },
        ]
    },
    "preemption from 0 % but at least 50 nodes": plugin_args(
        "DefaultPreemption", minCandidateNodesPercentage=0, minCandidateNodesAbsolute=50
    ),
    "hard pod affinity weight 0": plugin_args("InterPodAffinity", hardPodAffinityWeight=0),
    "listed spread constraints": spread(ZONE_SPREAD, defaultingType="List"),
    "an empty spread defaulting type (read as System)": plugin_args(
        "PodTopologySpread", defaultingType=""
    ),
    "a Go duration starting with its dot": plugin_args("DynamicResources", filterTimeout=".5s"),
    "balanced allocation weight 0 (read as 1)": plugin_args(
        "NodeResourcesBalancedAllocation", resources=[{"name": "cpu", "weight": 0}]
    ),
    "a DRA filter timeout of 0s": plugin_args("DynamicResources", filterTimeout="0s"),
    "args for a plugin that takes none": plugin_args("TaintToleration", anything=1),
}
INVALID = {
    "preemption with no candidates": plugin_args(
        "DefaultPreemption", minCandidateNodesPercentage=0, minCandidateNodesAbsolute=0
    ),
    "preemption above 100 %": plugin_args("DefaultPreemption", minCandidateNodesPercentage=101),
    "an unknown preemption arg": plugin_args("DefaultPreemption", minCandidates=1),
    "hard pod affinity weight 101": plugin_args("InterPodAffinity", hardPodAffinityWeight=101),
    "an unknown spread defaulting type": spread(defaultingType="Zonal"),
    "a Go duration with a space": plugin_args("DynamicResources", filterTimeout=" 1s"),
    "spread constraints with System defaulting": spread(ZONE_SPREAD),
    "a spread constraint with skew 0": spread({**ZONE_SPREAD, "maxSkew": 0}, defaultingType="List"),
    "a spread constraint with a selector": spread(
        {**ZONE_SPREAD, "labelSelector": {}}, defaultingType="List"
    ),
    "two spread constraints on one key": spread(
        ZONE_SPREAD, {**ZONE_SPREAD, "maxSkew": 2}, defaultingType="List"
    ),
    "balanced allocation weight 2": plugin_args(
        "NodeResourcesBalancedAllocation", resources=[{"name": "cpu", "weight": 2}]
    ),
    "a negative volume bind timeout": plugin_args("VolumeBinding", bindTimeoutSeconds=-1),
    "a DRA binding timeout under 1s": plugin_args("DynamicResources", bindingTimeout="0s"),
    "no bind plugin": plugins(bind={"disabled": [{"name": "DefaultBinder"}]}),
    "no queueSort plugin": plugins(queueSort={"disabled": [{"name": "*"}]}),
    "queueSort differs between profiles": {
        "profiles": [
            {"schedulerName": "a"},
            {
                "schedulerName": "b",
                "plugins": {"queueSort": {"enabled": [{"name": "PrioritySort"}]}},
            },
        ]
    },
    "an unknown plugin": plugins(filter={"enabled": [{"name": "NoSuchPlugin"}]}),
    "seed 000's MyCustomPlugin with the stock image": plugins(
        filter={"enabled": [{"name": "MyCustomPlugin"}], "disabled": [{"name": "TaintToleration"}]}
    ),
    "a plugin at a point it does not implement": plugins(
        filter={"enabled": [{"name": "ImageLocality"}]}
    ),
    "a removed plugin": plugins(filter={"enabled": [{"name": "EBSLimits"}]}),
    "a plugin enabled twice": plugins(
        score={"enabled": [{"name": "ImageLocality"}, {"name": "ImageLocality"}]}
    ),
    "an unknown scoring strategy": fit_args(scoringStrategy={"type": "Fullest"}),
    "a resource weight of 101": fit_args(
        scoringStrategy={"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 101}]}
    ),
    "an unknown Fit arg": fit_args(scoringStrateg={"type": "MostAllocated"}),
}


def kube_scheduler_accepts(
    binaries: Binaries, cluster: LocalCluster, spec: dict[str, Any], folder: Path
) -> tuple[bool, str]:
    rendered = render_configuration(spec, "checked", "default", str(cluster.kubeconfig))
    config = folder / "config.yaml"
    config.write_text(configuration_yaml(rendered))
    result = subprocess.run(
        [
            str(binaries.path("kube-scheduler")),
            f"--config={config}",
            f"--write-config-to={folder / 'completed.yaml'}",
            f"--authentication-kubeconfig={cluster.kubeconfig}",
            f"--authorization-kubeconfig={cluster.kubeconfig}",
            "--secure-port=0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize(
    ("spec", "valid"),
    [pytest.param(spec, True, id=name) for name, spec in VALID.items()]
    + [pytest.param(spec, False, id=name) for name, spec in INVALID.items()],
)
def test_kubeherd_accepts_exactly_what_kube_scheduler_accepts(
    binaries: Binaries,
    local_cluster: LocalCluster,
    tmp_path: Path,
    spec: dict[str, Any],
    valid: bool,
) -> None:
    verdict = validate_spec(spec, custom_image=False)
    accepted, log = kube_scheduler_accepts(binaries, local_cluster, spec, tmp_path)

    assert accepted == valid, f"kube-scheduler {'refused' if valid else 'accepted'} it: {log}"
    assert verdict.valid == valid, f"kubeherd said: {verdict.summary() or 'valid'}"


def test_the_static_pod_is_a_pod_the_api_server_accepts(kubectl: Kubectl) -> None:
    manifest = subprocess.run(
        [
            sys.executable,
            "-m",
            "kubeherd.cli",
            "render",
            "schedulerprofile",
            "-f",
            str(REPO / "examples" / "schedulerprofile-packing.yaml"),
            "--static-pod",
            "--kubeconfig=/etc/kubernetes/scheduler.conf",
            "--kubernetes-version=v1.37.2",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout

    applied = subprocess.run(
        kubectl.command("apply", "--dry-run=server", "-f", "-"),
        input=manifest,
        capture_output=True,
        text=True,
        check=False,
    )

    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.strip() == "pod/packing created (server dry run)"
