"""Render the CustomResourceDefinitions from the pydantic models.

Pydantic writes JSON Schema; Kubernetes wants a *structural* OpenAPI v3 schema: no $ref, no
anyOf for optional fields, no titles, no null defaults, int-or-string marked as such. This module
does that conversion and adds what only the API server can check (CEL rules), so `kubectl apply`
refuses a bad object with a message that says what is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import BaseModel

from kubeherd.api.customdaemonset import CustomDaemonSet
from kubeherd.api.schedulerprofile import SchedulerProfile
from kubeherd.api.schedulerprofile_rules import DEFAULT_NAME_REFUSAL
from kubeherd.names import CUSTOMDAEMONSETS, GROUP, SCHEDULERPROFILES, VERSION

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
    {
        # An override naming no container of the template would silently do nothing.
        "rule": "!has(self.resourceOverrides) || self.resourceOverrides.all(o,"
        " o.containers.all(c, self.template.spec.containers.exists(t, t.name == c.name)))",
        "message": "resourceOverrides may name only containers of spec.template.spec.containers",
        "fieldPath": ".resourceOverrides",
    },
]
ROOT_RULES = [
    {
        "rule": "size(self.metadata.name) <= 63",
        "message": "metadata.name must be at most 63 characters: it is a label value on the pods",
    }
]
DAEMONSET_COLUMNS = [
    ("DESIRED", "integer", ".status.desiredNumberScheduled", "Eligible nodes"),
    ("CURRENT", "integer", ".status.currentNumberScheduled", "Eligible nodes with a pod"),
    ("READY", "integer", ".status.numberReady", "Eligible nodes with a Ready pod"),
    ("UP-TO-DATE", "integer", ".status.updatedNumberScheduled", "Pods of the current template"),
    ("AVAILABLE", "integer", ".status.numberAvailable", "Eligible nodes with an available pod"),
    ("NODE SELECTOR", "string", ".status.nodeSelector", "The template's nodeSelector"),
    ("AGE", "date", ".metadata.creationTimestamp", ""),
]
# Shown by `kubectl get -o wide` only (priority 1).
DAEMONSET_WIDE_COLUMNS = [
    ("CANARY", "string", ".status.canary.phase", "The canary's phase, for its template"),
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


@dataclass(frozen=True)
class Resource:
    """One custom resource: its model and what its CRD says beyond the model."""

    model: type[BaseModel]
    plural: str
    short_names: tuple[str, ...]
    printer_columns: Sequence[tuple[str, str, str, str]]
    spec_rules: Sequence[dict[str, str]] = field(default_factory=list)
    root_rules: Sequence[dict[str, str]] = field(default_factory=list)
    # Columns `kubectl get -o wide` adds.
    wide_columns: Sequence[tuple[str, str, str, str]] = ()

    @property
    def kind(self) -> str:
        return self.model.__name__

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{GROUP}"


SCHEDULER_COLUMNS = [
    ("SCHEDULERS", "string", ".status.schedulerNames", "The profiles' scheduler names"),
    ("READY", "integer", ".status.readyReplicas", "Ready scheduler pods"),
    ("LEADER", "string", ".status.leader", "The Lease's holder"),
    ("VALID", "string", '.status.conditions[?(@.type=="Valid")].status', "The spec passed"),
    ("AGE", "date", ".metadata.creationTimestamp", ""),
]
CUSTOM_DAEMON_SET = Resource(
    CustomDaemonSet,
    CUSTOMDAEMONSETS,
    ("cds",),
    DAEMONSET_COLUMNS,
    SPEC_RULES,
    ROOT_RULES,
    wide_columns=DAEMONSET_WIDE_COLUMNS,
)
SCHEDULER_ROOT_RULES = [
    {
        "rule": "size(self.metadata.name) <= 63",
        "message": "metadata.name must be at most 63 characters: it is a label value on the "
        "scheduler pods",
    },
    {
        # The scheduler's ServiceAccount is named after the SchedulerProfile: as `default`, it
        # would be the account of every pod in the namespace that names none.
        "rule": "self.metadata.name != 'default'",
        "message": DEFAULT_NAME_REFUSAL,
    },
]
SCHEDULER_PROFILE = Resource(
    SchedulerProfile,
    SCHEDULERPROFILES,
    ("sp",),
    SCHEDULER_COLUMNS,
    root_rules=SCHEDULER_ROOT_RULES,
)
RESOURCES = (CUSTOM_DAEMON_SET, SCHEDULER_PROFILE)


def openapi_schema(resource: Resource = CUSTOM_DAEMON_SET) -> dict[str, Any]:
    raw = resource.model.model_json_schema(by_alias=True)
    definitions = raw.pop("$defs", {})
    schema: dict[str, Any] = _structural(raw, definitions)
    properties = schema["properties"]
    # The API server owns metadata's schema; a CRD may only say it is an object.
    properties["metadata"] = {"type": "object"}
    if resource.spec_rules:
        properties["spec"]["x-kubernetes-validations"] = list(resource.spec_rules)
    if resource.root_rules:
        schema["x-kubernetes-validations"] = list(resource.root_rules)
    # apiVersion and kind are always set by clients; defaults there would only confuse.
    for name in ("apiVersion", "kind"):
        properties[name].pop("default", None)
    schema.pop("description", None)
    schema["description"] = (resource.model.__doc__ or "").replace("\n    ", " ").strip()
    return schema


def render_crd(resource: Resource = CUSTOM_DAEMON_SET) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": resource.crd_name},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": resource.kind,
                "listKind": f"{resource.kind}List",
                "plural": resource.plural,
                "singular": resource.kind.lower(),
                "shortNames": list(resource.short_names),
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
                        for name, type_, path, text in resource.printer_columns
                    ]
                    + [
                        {"name": name, "type": type_, "jsonPath": path, "priority": 1}
                        | ({"description": text} if text else {})
                        for name, type_, path, text in resource.wide_columns
                    ],
                    "schema": {"openAPIV3Schema": openapi_schema(resource)},
                }
            ],
        },
    }


HEADER = "# Generated by `make crds` (kubeherd crds) from operator/kubeherd/api: do not edit.\n"


def render_crds_yaml(plurals: Sequence[str] = ()) -> str:
    """The CRDs of the given resources (all by default) as one YAML stream."""
    unknown = set(plurals) - {resource.plural for resource in RESOURCES}
    if unknown:
        raise ValueError(f"no such kubeherd resource: {', '.join(sorted(unknown))}")
    documents = [
        render_crd(resource) for resource in RESOURCES if not plurals or resource.plural in plurals
    ]
    return HEADER + "---\n".join(
        yaml.safe_dump(document, sort_keys=False, width=100) for document in documents
    )
