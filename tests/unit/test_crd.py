"""The CRD is generated from the pydantic models, and crds/ holds exactly what they generate."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubeherd.api.crd import RESOURCES, Resource, render_crd, render_crds_yaml
from kubeherd.api.customdaemonset import CustomDaemonSet
from tests.helpers import REPO


def schema() -> dict[str, Any]:
    found: dict[str, Any] = render_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return found


@pytest.mark.parametrize("resource", RESOURCES, ids=lambda resource: resource.plural)
@pytest.mark.parametrize("folder", ["crds", "charts/kubeherd/files/crds"])
def test_the_committed_crds_are_what_the_models_generate(resource: Resource, folder: str) -> None:
    committed = REPO / folder / f"{resource.crd_name}.yaml"
    assert committed.read_text() == render_crds_yaml([resource.plural]), (
        f"{folder}/ drifted from operator/kubeherd/api: run `make crds` and commit the result"
    )


@pytest.mark.parametrize("resource", RESOURCES, ids=lambda resource: resource.plural)
def test_the_schema_is_structural_no_refs_no_nullable_unions_no_titles(
    resource: Resource,
) -> None:
    text = json.dumps(render_crd(resource)["spec"]["versions"][0]["schema"])

    for forbidden in ('"$ref"', '"anyOf"', '"title"', '"$defs"', '"default": null'):
        assert forbidden not in text


def test_the_printer_columns_are_the_daemonset_ones_in_order() -> None:
    columns = render_crd()["spec"]["versions"][0]["additionalPrinterColumns"]

    assert [c["name"] for c in columns] == [
        "DESIRED",
        "CURRENT",
        "READY",
        "UP-TO-DATE",
        "AVAILABLE",
        "NODE SELECTOR",
        "AGE",
    ]


def test_defaults_are_in_the_models_and_in_the_schema() -> None:
    spec = schema()["properties"]["spec"]["properties"]
    model = CustomDaemonSet.model_validate(
        {
            "spec": {
                "selector": {"matchLabels": {"app": "a"}},
                "template": {
                    "metadata": {"labels": {"app": "a"}},
                    "spec": {"containers": [{"name": "a", "image": "a"}]},
                },
            }
        }
    )

    assert (model.spec.min_ready_seconds, model.spec.revision_history_limit) == (0, 10)
    assert model.spec.update_strategy.type == "RollingUpdate"
    assert model.spec.update_strategy.rolling_update.max_unavailable == 1
    assert model.spec.update_strategy.rolling_update.max_surge == 0
    assert spec["minReadySeconds"]["default"] == 0
    assert spec["revisionHistoryLimit"]["default"] == 10
    strategy = spec["updateStrategy"]
    assert strategy["default"] == {}
    assert strategy["properties"]["type"]["default"] == "RollingUpdate"
    rolling = strategy["properties"]["rollingUpdate"]["properties"]
    assert rolling["maxUnavailable"]["default"] == 1
    assert rolling["maxUnavailable"]["x-kubernetes-int-or-string"] is True
    assert "type" not in rolling["maxSurge"]


def test_pod_fields_kubeherd_does_not_model_survive_a_round_trip() -> None:
    template: dict[str, Any] = {
        "metadata": {"labels": {"app": "a"}},
        "spec": {
            "containers": [
                {
                    "name": "a",
                    "image": "a",
                    "resources": {"requests": {"cpu": "100m"}},
                    "volumeMounts": [{"name": "logs", "mountPath": "/var/log"}],
                }
            ],
            "volumes": [{"name": "logs", "hostPath": {"path": "/var/log"}}],
            "priorityClassName": "system-node-critical",
        },
    }
    body = {"spec": {"selector": {"matchLabels": {"app": "a"}}, "template": template}}

    dumped: dict[str, Any] = CustomDaemonSet.model_validate(body).model_dump(
        by_alias=True, exclude_none=True
    )

    pod_spec = dumped["spec"]["template"]["spec"]
    assert pod_spec["volumes"] == template["spec"]["volumes"]
    assert pod_spec["priorityClassName"] == "system-node-critical"
    assert pod_spec["containers"][0]["resources"] == {"requests": {"cpu": "100m"}}
    template_spec = schema()["properties"]["spec"]["properties"]["template"]["properties"]["spec"]
    assert template_spec["x-kubernetes-preserve-unknown-fields"] is True
