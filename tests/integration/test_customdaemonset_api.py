"""What the API server itself accepts and refuses at `kubectl apply`, from the generated CRD."""

from __future__ import annotations

import copy
import json
import subprocess
from typing import Any

import pytest
import yaml

from tests.helpers import CDS_COLUMNS, Kubectl

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("crds_installed")]


def valid(name: str = "agent") -> dict[str, Any]:
    return {
        "apiVersion": "kubeherd.io/v1alpha1",
        "kind": "CustomDaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent", "tier": "node"}},
                "spec": {
                    "containers": [
                        {
                            "name": "agent",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "100m", "memory": "20Mi"}},
                        }
                    ],
                    "volumes": [{"name": "logs", "hostPath": {"path": "/var/log"}}],
                },
            },
        },
    }


def apply(
    kubectl: Kubectl, namespace: str, manifest: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*kubectl.command("-n", namespace, "apply", "-f", "-")],
        input=yaml.safe_dump(manifest),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def refused(kubectl: Kubectl, namespace: str, manifest: dict[str, Any]) -> str:
    result = apply(kubectl, namespace, manifest)
    assert result.returncode != 0, "the API server accepted an invalid CustomDaemonSet"
    return result.stderr


def test_a_valid_object_is_stored_with_defaults_and_every_pod_field(
    kubectl: Kubectl, namespace: str
) -> None:
    assert apply(kubectl, namespace, valid()).returncode == 0

    stored = json.loads(kubectl("-n", namespace, "get", "cds", "agent", "-o", "json").stdout)

    spec = stored["spec"]
    assert spec["minReadySeconds"] == 0
    assert spec["revisionHistoryLimit"] == 10
    assert spec["progressDeadlineSeconds"] == 600
    assert spec["paused"] is False
    assert spec["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {
            "maxUnavailable": 1,
            "maxSurge": 0,
            "partition": 0,
            "rollingUpdateType": "Standard",
        },
    }
    pod_spec = spec["template"]["spec"]
    assert pod_spec["restartPolicy"] == "Always"
    assert pod_spec["volumes"] == [{"name": "logs", "hostPath": {"path": "/var/log"}}]
    assert pod_spec["containers"][0]["resources"]["requests"] == {"cpu": "100m", "memory": "20Mi"}


def test_kubectl_get_prints_the_daemonset_columns(kubectl: Kubectl, namespace: str) -> None:
    apply(kubectl, namespace, valid())

    header = kubectl("-n", namespace, "get", "cds").stdout.splitlines()[0]
    wide = kubectl("-n", namespace, "get", "cds", "-o", "wide").stdout.splitlines()[0]

    assert header.split() == CDS_COLUMNS
    assert wide.split() == [*CDS_COLUMNS, "CANARY"]


def test_a_selector_that_does_not_match_the_labels_is_refused(
    kubectl: Kubectl, namespace: str
) -> None:
    manifest = valid()
    manifest["spec"]["selector"] = {"matchLabels": {"app": "other"}}

    assert "spec.selector does not match spec.template.metadata.labels" in refused(
        kubectl, namespace, manifest
    )


@pytest.mark.parametrize(
    ("expression", "matches"),
    [
        ({"key": "tier", "operator": "In", "values": ["node", "edge"]}, True),
        ({"key": "tier", "operator": "In", "values": ["edge"]}, False),
        ({"key": "tier", "operator": "NotIn", "values": ["edge"]}, True),
        ({"key": "tier", "operator": "NotIn", "values": ["node"]}, False),
        ({"key": "tier", "operator": "Exists"}, True),
        ({"key": "zone", "operator": "Exists"}, False),
        ({"key": "zone", "operator": "DoesNotExist"}, True),
        ({"key": "tier", "operator": "DoesNotExist"}, False),
    ],
)
def test_match_expressions_are_checked_against_the_labels(
    kubectl: Kubectl, namespace: str, expression: dict[str, Any], matches: bool
) -> None:
    manifest = valid()
    manifest["spec"]["selector"]["matchExpressions"] = [expression]

    result = apply(kubectl, namespace, manifest)

    assert (result.returncode == 0) == matches, result.stderr


def test_an_empty_selector_is_refused(kubectl: Kubectl, namespace: str) -> None:
    manifest = valid()
    manifest["spec"]["selector"] = {}

    assert "spec.selector must not be empty" in refused(kubectl, namespace, manifest)


def test_the_selector_cannot_change(kubectl: Kubectl, namespace: str) -> None:
    apply(kubectl, namespace, valid())
    changed = valid()
    changed["spec"]["selector"] = {"matchLabels": {"tier": "node"}}

    assert "spec.selector is immutable" in refused(kubectl, namespace, changed)


def test_a_restart_policy_other_than_always_is_refused(kubectl: Kubectl, namespace: str) -> None:
    manifest = valid()
    manifest["spec"]["template"]["spec"]["restartPolicy"] = "Never"

    message = refused(kubectl, namespace, manifest)

    assert "restartPolicy" in message
    assert '"Always"' in message


def test_an_unknown_toleration_effect_is_refused(kubectl: Kubectl, namespace: str) -> None:
    manifest = valid()
    manifest["spec"]["template"]["spec"]["tolerations"] = [
        {"key": "gpu", "operator": "Exists", "effect": "Sometimes"}
    ]

    message = refused(kubectl, namespace, manifest)

    assert "effect" in message
    assert "NoSchedule" in message


def test_a_template_without_containers_is_refused(kubectl: Kubectl, namespace: str) -> None:
    manifest = copy.deepcopy(valid())
    manifest["spec"]["template"]["spec"]["containers"] = []

    assert "containers" in refused(kubectl, namespace, manifest)


@pytest.mark.parametrize(
    ("path", "value", "complaint"),
    [
        ("revisionHistoryLimit", 101, "less than or equal to 100"),
        (
            "template.metadata.annotations",
            {f"a{index}": "v" for index in range(65)},
            "must have at most 64 items",
        ),
        ("template.metadata.annotations", {"a": "v" * (256 * 1024 + 1)}, "262144"),
        ("template.metadata.annotations", {"a" * 318: "v"}, "at most 317 characters"),
        (
            "template.spec.containers",
            [{"name": f"c{index}", "image": "i"} for index in range(33)],
            "must have at most 32 items",
        ),
        (
            "template.spec.volumes",
            [{"name": f"v{index}", "emptyDir": {}} for index in range(257)],
            "must have at most 256 items",
        ),
    ],
)
def test_what_kubeherd_keeps_of_an_object_is_bounded_at_apply(
    kubectl: Kubectl, namespace: str, path: str, value: Any, complaint: str
) -> None:
    manifest = copy.deepcopy(valid())
    *parents, last = path.split(".")
    target = manifest["spec"]
    for part in parents:
        target = target[part]
    target[last] = value

    assert complaint in refused(kubectl, namespace, manifest)


def test_a_name_longer_than_a_label_value_is_refused(kubectl: Kubectl, namespace: str) -> None:
    assert "at most 63 characters" in refused(kubectl, namespace, valid("a" * 64))


@pytest.mark.parametrize(
    ("rolling_update", "complaint"),
    [
        ({"maxUnavailable": 0}, "maxUnavailable and maxSurge cannot both be 0"),
        ({"maxUnavailable": "0%", "maxSurge": 0}, "maxUnavailable and maxSurge cannot both be 0"),
        ({"maxUnavailable": "ten"}, "maxUnavailable must be a number of nodes"),
        ({"maxSurge": "150%"}, "maxSurge must be a number of nodes"),
        ({"maxUnavailable": -1}, "maxUnavailable must be a number of nodes"),
        ({"partition": -1}, "partition"),
        (
            {"rollingUpdateType": "InPlaceIfPossible", "maxSurge": 1},
            "rollingUpdateType InPlaceIfPossible updates pods within maxUnavailable",
        ),
        ({"rollingUpdateType": "Sideways"}, 'supported values: "Standard", "InPlaceIfPossible"'),
        ({"topologyKey": "zone,region"}, "topologyKey must be a label key"),
        ({"topologyKey": ""}, "topologyKey"),
        (
            {
                "selector": {
                    "matchExpressions": [{"key": "wave", "operator": "Exists", "values": ["1"]}]
                }
            },
            "values must be given for In and NotIn, and only for them",
        ),
    ],
)
def test_rolling_update_limits_that_cannot_work_are_refused(
    kubectl: Kubectl, namespace: str, rolling_update: dict[str, Any], complaint: str
) -> None:
    manifest = valid()
    manifest["spec"]["updateStrategy"] = {"rollingUpdate": rolling_update}

    assert complaint in refused(kubectl, namespace, manifest)


@pytest.mark.parametrize(
    "rolling_update",
    [
        {"maxUnavailable": "25%"},
        {"maxUnavailable": 0, "maxSurge": "10%"},
        {"partition": 3},
        {"rollingUpdateType": "InPlaceIfPossible", "maxUnavailable": "20%", "maxSurge": 0},
        {"selector": {"matchLabels": {"rollout-wave": "1"}}},
        {"topologyKey": "topology.kubernetes.io/zone", "maxSurge": 1, "maxUnavailable": 0},
    ],
)
def test_rolling_update_limits_that_work_are_accepted(
    kubectl: Kubectl, namespace: str, rolling_update: dict[str, Any]
) -> None:
    manifest = valid()
    manifest["spec"]["updateStrategy"] = {"rollingUpdate": rolling_update}

    result = apply(kubectl, namespace, manifest)

    assert result.returncode == 0, result.stderr


def test_kubectl_explain_describes_the_fields(kubectl: Kubectl) -> None:
    template = kubectl("explain", "cds.spec.template").stdout
    selector = kubectl("explain", "cds.spec.selector").stdout
    tolerations = kubectl("explain", "cds.spec.template.spec.tolerations").stdout

    assert "The pod that runs on every eligible node." in template
    assert "Must match template.metadata.labels" in " ".join(selector.split())
    assert "not-ready" in tolerations


def override(**changes: Any) -> dict[str, Any]:
    """A resource override of the `valid()` template's container, with `changes` on top."""
    return {
        "name": "large-nodes",
        "nodeSelector": {"matchLabels": {"node.kubernetes.io/instance-type": "m5.4xlarge"}},
        "containers": [{"name": "agent", "resources": {"limits": {"memory": "2Gi"}}}],
        **changes,
    }


@pytest.mark.parametrize(
    ("overrides", "complaint"),
    [
        (
            [override(containers=[{"name": "sidecar", "resources": {"limits": {"cpu": 1}}}])],
            "resourceOverrides may name only containers of spec.template.spec.containers",
        ),
        (
            [override(), override()],
            'resourceOverrides[1]: Duplicate value: {"name":"large-nodes"}',
        ),
        ([override(name="Large_Nodes")], "spec.resourceOverrides[0].name"),
        ([override(containers=[])], "spec.resourceOverrides[0].containers"),
        (
            [override(nodeSelector={"matchExpressions": [{"key": "pool", "operator": "In"}]})],
            "values must be given for In and NotIn, and only for them",
        ),
    ],
)
def test_resource_overrides_that_cannot_work_are_refused(
    kubectl: Kubectl, namespace: str, overrides: list[dict[str, Any]], complaint: str
) -> None:
    manifest = valid()
    manifest["spec"]["resourceOverrides"] = overrides

    assert complaint in refused(kubectl, namespace, manifest)


def test_resource_overrides_of_the_template_containers_are_accepted(
    kubectl: Kubectl, namespace: str
) -> None:
    manifest = valid()
    manifest["spec"]["resourceOverrides"] = [
        override(),
        override(name="small-nodes", nodeSelector={"matchLabels": {"pool": "small"}}),
    ]

    result = apply(kubectl, namespace, manifest)

    assert result.returncode == 0, result.stderr
