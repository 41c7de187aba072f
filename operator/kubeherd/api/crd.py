"""Render the CustomResourceDefinitions from the pydantic models.

Pydantic writes JSON Schema; Kubernetes wants a *structural* OpenAPI v3 schema: no $ref, no
anyOf for optional fields, no titles, no null defaults, int-or-string marked as such. This module
does that conversion and adds what only the API server can check (CEL rules), so `kubectl apply`
refuses a bad object with a message that says what is wrong.
"""

from __future__ import annotations

from typing import Any

import yaml

from kubeherd.api.customdaemonset import CustomDaemonSet

GROUP = "kubeherd.io"
VERSION = "v1alpha1"

_LABELS = "self.template.metadata.labels"
_EXPRESSION_MATCHES = (
    f"e.operator == 'In' ? (e.key in {_LABELS} && has(e.values) && {_LABELS}[e.key] in e.values)"
    f" : e.operator == 'NotIn' ? (!(e.key in {_LABELS}) || !has(e.values)"
    f" || !({_LABELS}[e.key] in e.values))"
    f" : e.operator == 'Exists' ? e.key in {_LABELS}"
    f" : !(e.key in {_LABELS})"
)
SPEC_RULES = [
    {
        "rule": "(has(self.selector.matchLabels) && size(self.selector.matchLabels) > 0)"
        " || (has(self.selector.matchExpressions) && size(self.selector.matchExpressions) > 0)",
        "message": "spec.selector must not be empty: it would select every pod in the namespace",
    },
    {
        "rule": "(!has(self.selector.matchLabels) || self.selector.matchLabels.all(k,"
        f" k in {_LABELS} && {_LABELS}[k] == self.selector.matchLabels[k]))"
        " && (!has(self.selector.matchExpressions)"
        f" || self.selector.matchExpressions.all(e, {_EXPRESSION_MATCHES}))",
        "message": "spec.selector does not match spec.template.metadata.labels",
    },
]
ROOT_RULES = [
    {
        "rule": "size(self.metadata.name) <= 63",
        "message": "metadata.name must be at most 63 characters: it is a label value on the pods",
    }
]
PRINTER_COLUMNS = [
    ("DESIRED", "integer", ".status.desiredNumberScheduled", "Eligible nodes"),
    ("CURRENT", "integer", ".status.currentNumberScheduled", "Eligible nodes with a pod"),
    ("READY", "integer", ".status.numberReady", "Eligible nodes with a Ready pod"),
    ("UP-TO-DATE", "integer", ".status.updatedNumberScheduled", "Pods of the current template"),
    ("AVAILABLE", "integer", ".status.numberAvailable", "Eligible nodes with an available pod"),
    ("NODE SELECTOR", "string", ".status.nodeSelector", "The template's nodeSelector"),
    ("AGE", "date", ".metadata.creationTimestamp", ""),
]


def _structural(node: Any, definitions: dict[str, Any]) -> Any:
    """Inline $refs and rewrite pydantic's JSON Schema idioms into Kubernetes' structural form."""
    if isinstance(node, list):
        return [_structural(item, definitions) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    while "$ref" in node or "anyOf" in node:
        if "$ref" in node:
            target = definitions[node.pop("$ref").rsplit("/", 1)[-1]]
            # The field's own description beats the referenced model's docstring.
            node = {**target, **node}
            continue
        options = [o for o in node.pop("anyOf") if o != {"type": "null"}]
        if len(options) == 1 and not node.get("x-kubernetes-int-or-string"):
            node = {**options[0], **node}
    if "const" in node:
        node["enum"] = [node.pop("const")]
    node.pop("title", None)
    if node.get("default", 0) is None:
        del node["default"]
    # Pydantic says true for models that allow extra fields; Kubernetes spells that
    # x-kubernetes-preserve-unknown-fields, and forbids additionalProperties next to properties.
    if isinstance(node.get("additionalProperties"), bool):
        del node["additionalProperties"]
    if node.get("x-kubernetes-int-or-string"):
        node.pop("type", None)
    return {key: _structural(value, definitions) for key, value in node.items()}


def openapi_schema() -> dict[str, Any]:
    raw = CustomDaemonSet.model_json_schema(by_alias=True)
    definitions = raw.pop("$defs", {})
    schema: dict[str, Any] = _structural(raw, definitions)
    properties = schema["properties"]
    # The API server owns metadata's schema; a CRD may only say it is an object.
    properties["metadata"] = {"type": "object"}
    properties["spec"]["x-kubernetes-validations"] = SPEC_RULES
    schema["x-kubernetes-validations"] = ROOT_RULES
    # apiVersion and kind are always set by clients; defaults there would only confuse.
    for field in ("apiVersion", "kind"):
        properties[field].pop("default", None)
    schema.pop("description", None)
    schema["description"] = (CustomDaemonSet.__doc__ or "").replace("\n    ", " ").strip()
    return schema


def render_crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"customdaemonsets.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": "CustomDaemonSet",
                "listKind": "CustomDaemonSetList",
                "plural": "customdaemonsets",
                "singular": "customdaemonset",
                "shortNames": ["cds"],
                "categories": ["all", "kubeherd"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": name, "type": type_, "jsonPath": path}
                        | ({"description": text} if text else {})
                        for name, type_, path, text in PRINTER_COLUMNS
                    ],
                    "schema": {"openAPIV3Schema": openapi_schema()},
                }
            ],
        },
    }


HEADER = "# Generated by `make crds` (kubeherd crds) from operator/kubeherd/api: do not edit.\n"


def render_crds_yaml() -> str:
    documents = [render_crd()]
    return HEADER + "---\n".join(
        yaml.safe_dump(document, sort_keys=False, width=100) for document in documents
    )
