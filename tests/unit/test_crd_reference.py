"""docs/reference.md is generated from the CRDs' own schema and says what the API server checks."""

from __future__ import annotations

from kubeherd.api.crd import RESOURCES
from kubeherd.api.markdown import cell, render_reference, type_of, walk
from tests.helpers import REPO


def test_the_committed_reference_is_what_the_models_generate() -> None:
    committed = (REPO / "docs" / "reference.md").read_text()

    assert committed == render_reference(), "docs/reference.md drifted: run `make crds`"


def test_fields_show_their_type_requiredness_default_and_allowed_values() -> None:
    reference = render_reference()

    assert "| `spec.selector` | object | yes |" in reference
    max_unavailable = next(
        line for line in reference.splitlines()
        if line.startswith("| `spec.updateStrategy.rollingUpdate.maxUnavailable` |")
    )  # fmt: skip
    assert "| int-or-string |  | `1` |" in max_unavailable
    assert "One of: `RollingUpdate`, `OnDelete`." in reference


def test_every_cel_rule_message_is_listed() -> None:
    reference = render_reference()

    for resource in RESOURCES:
        for rule in [*resource.spec_rules, *resource.root_rules]:
            assert rule["message"] in reference


def test_a_hand_made_schema_is_walked_depth_first_with_pipes_escaped() -> None:
    schema = {
        "type": "object",
        "required": ["size"],
        "properties": {
            "size": {"x-kubernetes-int-or-string": True, "description": "a | b", "default": 1},
            "items": {
                "type": "array",
                "maxItems": 1,
                "items": {"type": "object", "properties": {"on": {"type": "boolean"}}},
            },
            "raw": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    }

    rows = list(walk(schema, "spec", True))

    assert [(r.path, r.type, r.required) for r in rows] == [
        ("spec", "object", True),
        ("spec.size", "int-or-string", True),
        ("spec.items", "array of object", False),
        ("spec.items[].on", "boolean", False),
        ("spec.raw", "object (any)", False),
    ]
    assert rows[1].description == "a \\| b"
    assert rows[1].default == "`1`"
    assert (
        walk({"type": "object", "default": {"on": True}}, "x", False).__next__().default
        == '`{"on": true}`'
    )
    assert rows[2].description == "At most 1 item."
    assert "Passed to Kubernetes as it is" in rows[4].description
    assert cell("two\n  lines") == "two lines"
    assert (
        type_of({"type": "object", "additionalProperties": {"type": "string"}}) == "map of string"
    )
