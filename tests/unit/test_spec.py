"""What the controller keeps of a CustomDaemonSet between passes: the spec as read, with the
pod template as compact JSON, and a body without the template."""

from __future__ import annotations

import json
from typing import Any

from kubeherd.daemonset.core.pods import template_hash
from kubeherd.daemonset.core.spec import kept_body, parse_spec

TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"app": "agent"}, "annotations": {"big": "x" * 1000}},
    "spec": {
        "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"operator": "Exists"}],
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}},
            "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
        },
        "containers": [{"name": "agent", "image": "agent:1", "env": [{"name": "A"}]}],
        "volumes": [{"name": "logs", "emptyDir": {}}],
    },
}


def body(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeherd.io/v1alpha1",
        "kind": "CustomDaemonSet",
        "metadata": {
            "name": "agent",
            "namespace": "ops",
            "uid": "uid-1",
            "generation": 3,
            "resourceVersion": "42",
            "creationTimestamp": "2026-11-26T00:00:00Z",
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": json.dumps(TEMPLATE),
                "kubernetes.io/change-cause": "bump",
            },
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": TEMPLATE, **spec},
        "status": {"observedGeneration": 2},
    }


def test_the_template_is_kept_as_json_and_reads_back_the_same_with_the_same_hash() -> None:
    spec = parse_spec(body())

    assert isinstance(spec.template_json, bytes)
    assert spec.template == TEMPLATE
    assert spec.template_hash == template_hash(TEMPLATE)
    # Each read is a fresh copy: a caller changing it changes nothing kept.
    spec.template["spec"]["containers"].clear()
    assert spec.template == TEMPLATE


def test_passes_see_only_the_pod_specs_placement_fields() -> None:
    assert parse_spec(body()).pod_spec == {
        "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"operator": "Exists"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}},
    }


def test_the_kept_body_has_no_template_managed_fields_or_last_applied_annotation() -> None:
    kept = kept_body(body())

    assert kept == {
        "apiVersion": "kubeherd.io/v1alpha1",
        "kind": "CustomDaemonSet",
        "metadata": {
            "name": "agent",
            "namespace": "ops",
            "uid": "uid-1",
            "generation": 3,
            "resourceVersion": "42",
            "creationTimestamp": "2026-11-26T00:00:00Z",
            "annotations": {"kubernetes.io/change-cause": "bump"},
        },
        "spec": {"selector": {"matchLabels": {"app": "agent"}}},
        "status": {"observedGeneration": 2},
    }


def test_a_history_limit_stored_before_the_crd_bounded_it_counts_as_the_bound() -> None:
    assert parse_spec(body(revisionHistoryLimit=5000)).history_limit == 100
    assert parse_spec(body(revisionHistoryLimit=3)).history_limit == 3
    assert parse_spec(body()).history_limit == 10
