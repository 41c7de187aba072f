"""The CRD is generated from the pydantic models, and crds/ holds exactly what they generate."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

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

    assert [(c["name"], c.get("priority", 0)) for c in columns] == [
        ("DESIRED", 0),
        ("CURRENT", 0),
        ("READY", 0),
        ("UP-TO-DATE", 0),
        ("AVAILABLE", 0),
        ("NODE SELECTOR", 0),
        ("AGE", 0),
        # Only with -o wide.
        ("CANARY", 1),
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


def selector_schema() -> dict[str, Any]:
    found: dict[str, Any] = schema()["properties"]["spec"]["properties"]["selector"]["properties"]
    return found


def regexes_of(rule: str) -> list[str]:
    return re.findall(r"matches\('([^']*)'\)", rule)


def key_rule_accepts(rule: str, key: str) -> bool:
    """The key rule read as the API server runs it: the first pattern must match and the
    second (a too long prefix) must not. CEL's matches, like re.search, is unanchored."""
    must, must_not = regexes_of(rule)
    return re.search(must, key) is not None and re.search(must_not, key) is None


KEYS = [
    ("app", True),
    ("example.com/team", True),
    ("Gpu_1.x-y", True),
    (".".join(["a" * 63] * 4)[:253] + "/" + "n" * 63, True),
    ("zz,team", False),
    ("a b", False),
    ("!app", False),
    ("a/b/c", False),
    ("/c", False),
    ("Example.com/x", False),
    ("n" * 64, False),
    ("a" * 254 + "/b", False),
    ("", False),
]


@pytest.mark.parametrize(("key", "valid"), KEYS)
def test_the_crd_refuses_selector_keys_validate_label_selector_refuses(
    key: str, valid: bool
) -> None:
    (labels_rule,) = selector_schema()["matchLabels"]["x-kubernetes-validations"]
    requirement = selector_schema()["matchExpressions"]["items"]["properties"]
    (key_rule,) = requirement["key"]["x-kubernetes-validations"]

    assert labels_rule["rule"].startswith("self.all(k, ")
    assert key_rule_accepts(labels_rule["rule"], key) is valid
    assert key_rule_accepts(key_rule["rule"], key) is valid


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("", True),
        ("agent", True),
        ("A_1.b-c", True),
        ("v" * 63, True),
        ("a,b", False),
        ("x),!app,(y", False),
        ("x-", False),
        ("-x", False),
        ("v" * 64, False),
    ],
)
def test_the_crd_refuses_selector_values_validate_label_selector_refuses(
    value: str, valid: bool
) -> None:
    labels_value = selector_schema()["matchLabels"]["additionalProperties"]
    requirement = selector_schema()["matchExpressions"]["items"]["properties"]
    expression_value = requirement["values"]["items"]

    for value_schema in (labels_value, expression_value):
        accepted = len(value) <= value_schema["maxLength"] and bool(
            re.search(value_schema["pattern"], value)
        )
        assert accepted is valid


def test_selector_requirements_need_values_exactly_for_in_and_notin() -> None:
    (rule,) = selector_schema()["matchExpressions"]["items"]["x-kubernetes-validations"]

    assert rule["rule"] == (
        "self.operator in ['In', 'NotIn'] ? has(self.values) && size(self.values) > 0"
        " : !has(self.values) || size(self.values) == 0"
    )


def test_the_selector_rules_work_on_bounded_sizes_to_stay_within_the_cel_cost_limit() -> None:
    selector = selector_schema()

    assert selector["matchLabels"]["maxProperties"] == 64
    assert selector["matchLabels"]["additionalProperties"]["maxLength"] == 63
    assert selector["matchExpressions"]["maxItems"] == 32
    assert selector["matchExpressions"]["items"]["properties"]["key"]["maxLength"] == 317


def template_schema() -> dict[str, Any]:
    found: dict[str, Any] = schema()["properties"]["spec"]["properties"]["template"]["properties"]
    return found


def test_what_one_object_makes_kubeherd_keep_is_bounded() -> None:
    spec = schema()["properties"]["spec"]["properties"]
    metadata = template_schema()["metadata"]["properties"]
    pod_spec = template_schema()["spec"]["properties"]

    assert spec["revisionHistoryLimit"]["maximum"] == 100
    assert metadata["annotations"]["maxProperties"] == 64
    assert metadata["annotations"]["additionalProperties"]["maxLength"] == 256 * 1024
    assert metadata["finalizers"]["maxItems"] == 32
    for field in ("labels", "annotations"):
        (rule,) = metadata[field]["x-kubernetes-validations"]
        assert rule["rule"] == "self.all(k, size(k) <= 317)"
    assert pod_spec["containers"]["maxItems"] == 32
    assert pod_spec["initContainers"]["maxItems"] == 32
    assert pod_spec["volumes"]["maxItems"] == 256
    # Each volume and container is kept as written: only the lists are bounded.
    assert pod_spec["volumes"]["items"]["x-kubernetes-preserve-unknown-fields"] is True


def example_daemonsets() -> list[dict[str, Any]]:
    return [
        document
        for path in sorted((REPO / "examples").glob("*.yaml"))
        for document in yaml.safe_load_all(path.read_text())
        if document and document.get("kind") == "CustomDaemonSet"
    ]


def test_every_example_is_within_the_bounds() -> None:
    examples = example_daemonsets()

    assert examples
    for example in examples:
        CustomDaemonSet.model_validate(example)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("revisionHistoryLimit", 101),
        ("template.spec.containers", [{"name": f"c{i}", "image": "i"} for i in range(33)]),
        ("template.spec.volumes", [{"name": f"v{i}", "emptyDir": {}} for i in range(257)]),
    ],
)
def test_the_model_refuses_lists_and_numbers_over_a_bound(field: str, value: Any) -> None:
    body: dict[str, Any] = {
        "spec": {
            "selector": {"matchLabels": {"app": "a"}},
            "template": {
                "metadata": {"labels": {"app": "a"}},
                "spec": {"containers": [{"name": "a", "image": "a"}]},
            },
        }
    }
    *parents, last = field.split(".")
    target = body["spec"]
    for part in parents:
        target = target[part]
    target[last] = value

    with pytest.raises(ValueError, match=r"should have at most|less than or equal to"):
        CustomDaemonSet.model_validate(body)
