"""The CustomDaemonSet API (kubeherd.io/v1alpha1): the single source of truth for crds/.

The spec mirrors apps/v1 DaemonSetSpec. The pod template is modelled only as far as kubeherd
reads it (placement and tolerations) plus what every pod needs (containers); all other pod
fields pass through untouched, so a real pod spec (volumes, resources, probes, ...) is kept, and
the API server checks them when kubeherd creates the pods.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from kubeherd.api.customdaemonset_reasons import CANARY_PAUSE_REASONS
from kubeherd.api.identifiers import (
    DNS_LABEL,
    DNS_LABEL_LENGTH,
    LABEL_KEY_LENGTH,
    LABEL_KEY_TEXT,
    LABEL_VALUE_LENGTH,
    label_key_rule,
)
from kubeherd.api.identifiers import LABEL_VALUE as LABEL_VALUE_PATTERN
from kubeherd.defaults import (
    DEFAULT_CANARY_DURATION,
    DEFAULT_CANARY_FAIL_RESTARTS,
    DEFAULT_CANARY_PAUSE_RESTARTS,
    DEFAULT_CANARY_REPLICAS,
    DEFAULT_CANARY_SLOW_START,
    DEFAULT_HISTORY_LIMIT,
    DEFAULT_MAX_SURGE,
    DEFAULT_MAX_UNAVAILABLE,
    DEFAULT_PROGRESS_DEADLINE,
    MAX_HISTORY_LIMIT,
)
from kubeherd.names import API_VERSION, CUSTOMDAEMONSET

PRESERVE: JsonDict = {"x-kubernetes-preserve-unknown-fields": True}
INT_OR_STRING: JsonDict = {"x-kubernetes-int-or-string": True}
# Bounds that keep the API server's cost estimate of the CEL rules below its limit.
MAX_LABELS = 64
MAX_EXPRESSIONS = 32
MAX_VALUES = 64
LABEL_VALUE: JsonDict = {"type": "string", "maxLength": LABEL_VALUE_LENGTH}
# The selector is turned into label queries (daemonset/claims.py): its keys and values must be
# what the API server's ValidateLabelSelector accepts, or a key such as `a,b` would read as
# two requirements there.
SELECTOR_VALUE: JsonDict = {**LABEL_VALUE, "pattern": LABEL_VALUE_PATTERN}
SELECTOR_KEY_MESSAGE = f"must be a label key: {LABEL_KEY_TEXT}"
# Bounds on what one object makes kubeherd keep and send. Far above what a daemon needs; the
# API server's own limits (its request and etcd value sizes, 256 KiB of annotations per pod)
# still apply within them.
MAX_ANNOTATIONS = 64
ANNOTATION_VALUE_LENGTH = 256 * 1024
MAX_FINALIZERS = 32
MAX_CONTAINERS = 32
MAX_VOLUMES = 256
ANNOTATION_VALUE: JsonDict = {"type": "string", "maxLength": ANNOTATION_VALUE_LENGTH}


def keys_at_most(length: int) -> JsonDict:
    """A map whose keys are at most `length` characters: a schema bounds only their number."""
    return {
        "x-kubernetes-validations": [
            {
                "rule": f"self.all(k, size(k) <= {length})",
                "message": f"keys must be at most {length} characters",
            }
        ]
    }


def list_map(key: str) -> JsonDict:
    """A list whose items are keyed by `key`: the API server refuses two items with one key,
    and server-side apply merges items by it."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": [key]}


class Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class PassThrough(Model):
    """An object kubeherd does not look into: every field is kept as written."""

    model_config = ConfigDict(extra="allow", json_schema_extra=PRESERVE)


class SelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class LabelSelectorRequirement(Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.operator in ['In', 'NotIn']"
                    " ? has(self.values) && size(self.values) > 0"
                    " : !has(self.values) || size(self.values) == 0",
                    "message": "values must be given for In and NotIn, and only for them",
                }
            ]
        }
    )

    key: str = Field(
        max_length=LABEL_KEY_LENGTH,
        description="The label key the rule is about.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": label_key_rule("self"), "message": SELECTOR_KEY_MESSAGE}
            ]
        },
    )
    operator: SelectorOperator = Field(
        description="How the label's value is compared with values: In, NotIn, Exists or "
        "DoesNotExist."
    )
    values: list[str] | None = Field(
        default=None,
        max_length=MAX_VALUES,
        description="The values for In and NotIn; must be empty for Exists and DoesNotExist.",
        json_schema_extra={"items": SELECTOR_VALUE},
    )


class LabelSelector(Model):
    match_labels: dict[str, str] | None = Field(
        default=None,
        description="Labels that must be present, each with exactly this value.",
        json_schema_extra={
            "maxProperties": MAX_LABELS,
            "additionalProperties": SELECTOR_VALUE,
            "x-kubernetes-validations": [
                {
                    "rule": f"self.all(k, {label_key_rule('k')})",
                    "message": f"each key {SELECTOR_KEY_MESSAGE}",
                }
            ],
        },
    )
    match_expressions: list[LabelSelectorRequirement] | None = Field(
        default=None,
        max_length=MAX_EXPRESSIONS,
        description="Rules on the labels that must all hold.",
    )


class NodeSelectorRequirement(Model):
    key: str = Field(
        description="A node label key (matchExpressions) or metadata.name (matchFields)."
    )
    operator: str = Field(description="In, NotIn, Exists, DoesNotExist, Gt or Lt.")
    values: list[str] | None = Field(
        default=None, description="The values to compare with; one integer for Gt and Lt."
    )


class NodeSelectorTerm(Model):
    match_expressions: list[NodeSelectorRequirement] | None = Field(
        default=None, description="Rules on node labels; all must hold."
    )
    match_fields: list[NodeSelectorRequirement] | None = Field(
        default=None, description="Rules on node fields (only metadata.name); all must hold."
    )


class NodeSelector(Model):
    node_selector_terms: list[NodeSelectorTerm] = Field(
        description="A node matches when it matches any one of these terms."
    )


class PreferredSchedulingTerm(Model):
    weight: int = Field(ge=1, le=100, description="How much the scheduler favours a match.")
    preference: NodeSelectorTerm = Field(description="The nodes this preference favours.")


class NodeAffinity(Model):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = Field(
        default=None,
        description="Nodes that may run a daemon pod. kubeherd replaces these terms in each "
        "pod it creates by one that names the pod's node.",
    )
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] | None = (
        Field(default=None, description="Kept as is in each daemon pod.")
    )


class Affinity(Model):
    model_config = ConfigDict(extra="allow", json_schema_extra=PRESERVE)

    node_affinity: NodeAffinity | None = Field(
        default=None, description="Which nodes are eligible (required) or favoured (preferred)."
    )


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class TolerationOperator(StrEnum):
    EXISTS = "Exists"
    EQUAL = "Equal"


class Toleration(Model):
    key: str | None = Field(
        default=None, description="The taint key tolerated; empty with Exists means every key."
    )
    operator: TolerationOperator | None = Field(
        default=None, description="Equal (the default) compares values; Exists ignores them."
    )
    value: str | None = Field(default=None, description="The taint value tolerated (Equal).")
    effect: TaintEffect | None = Field(
        default=None, description="The taint effect tolerated; empty means every effect."
    )
    toleration_seconds: int | None = Field(
        default=None, description="For NoExecute: how long the pod stays once tainted."
    )


class Container(Model):
    """A container; only name and image are checked here, the rest is passed through."""

    model_config = ConfigDict(extra="allow", json_schema_extra=PRESERVE)

    name: str = Field(description="The container's name, unique in the pod.")
    image: str = Field(description="The container image to run.")


class RestartPolicy(StrEnum):
    ALWAYS = "Always"


class PodSpec(Model):
    """The daemon pods' spec. Fields not listed here are kept as written and checked by the API
    server when the pods are created."""

    model_config = ConfigDict(extra="allow", json_schema_extra=PRESERVE)

    containers: list[Container] = Field(
        min_length=1,
        max_length=MAX_CONTAINERS,
        description=f"The pod's containers; at least one, at most {MAX_CONTAINERS}.",
    )
    init_containers: list[Container] | None = Field(
        default=None,
        max_length=MAX_CONTAINERS,
        description=f"Containers run to completion, in order, before the others; at most "
        f"{MAX_CONTAINERS}.",
    )
    volumes: list[PassThrough] | None = Field(
        default=None,
        max_length=MAX_VOLUMES,
        description=f"Volumes the containers can mount; at most {MAX_VOLUMES}.",
    )
    node_name: str | None = Field(
        default=None,
        description="If set, only this node is eligible. kubeherd itself never sets nodeName: "
        "the scheduler binds each pod.",
    )
    node_selector: dict[str, str] | None = Field(
        default=None, description="Only nodes with all these labels are eligible."
    )
    affinity: Affinity | None = Field(default=None, description="Node and pod affinity.")
    tolerations: list[Toleration] | None = Field(
        default=None,
        description="Taints the pods tolerate. kubeherd adds the tolerations every daemon pod "
        "has (not-ready, unreachable, disk-, memory- and pid-pressure, unschedulable, and "
        "network-unavailable with hostNetwork).",
    )
    host_network: bool | None = Field(
        default=None, description="Run in the node's network namespace."
    )
    scheduler_name: str | None = Field(
        default=None,
        description="The scheduler that binds the pods; empty means default-scheduler.",
    )
    restart_policy: RestartPolicy = Field(
        default=RestartPolicy.ALWAYS, description="Always: a daemon pod is always restarted."
    )


class TemplateMetadata(Model):
    labels: dict[str, str] = Field(
        description="Labels of every daemon pod; spec.selector must match them.",
        json_schema_extra={
            "maxProperties": MAX_LABELS,
            "minProperties": 1,
            "additionalProperties": LABEL_VALUE,
            **keys_at_most(LABEL_KEY_LENGTH),
        },
    )
    annotations: dict[str, str] | None = Field(
        default=None,
        description=f"Annotations of every daemon pod: at most {MAX_ANNOTATIONS}, each value "
        f"at most {ANNOTATION_VALUE_LENGTH // 1024} KiB.",
        json_schema_extra={
            "maxProperties": MAX_ANNOTATIONS,
            "additionalProperties": ANNOTATION_VALUE,
            **keys_at_most(LABEL_KEY_LENGTH),
        },
    )
    finalizers: list[str] | None = Field(
        default=None,
        max_length=MAX_FINALIZERS,
        description="Finalizers of every daemon pod, copied as the native controller copies them.",
        json_schema_extra={"items": {"type": "string", "maxLength": LABEL_KEY_LENGTH}},
    )


class PodTemplate(Model):
    metadata: TemplateMetadata = Field(description="Labels and annotations of the daemon pods.")
    spec: PodSpec = Field(description="The daemon pods' spec.")


class UpdateStrategyType(StrEnum):
    ROLLING_UPDATE = "RollingUpdate"
    ON_DELETE = "OnDelete"


class RollingUpdateType(StrEnum):
    """How a rolling update replaces an old pod (OpenKruise's names)."""

    STANDARD = "Standard"
    IN_PLACE_IF_POSSIBLE = "InPlaceIfPossible"


def _count_or_percent(field: str) -> JsonDict:
    return {
        "rule": f"!has(self.{field}) || (type(self.{field}) == int ? int(self.{field}) >= 0"
        f" : string(self.{field}).matches('^(100|[1-9]?[0-9])%$'))",
        "message": f"{field} must be a number of nodes (0 or more) or a percentage from 0% to 100%",
    }


class CanaryAutoPause(Model):
    enabled: bool = Field(
        default=True,
        description="Pause the rollout when a canary pod shows trouble: a container waiting "
        f"with {', '.join(CANARY_PAUSE_REASONS)}, a container OOMKilled, more than "
        "maxRestarts restarts, or no available pod maxSlowStartSeconds after it started.",
    )
    max_restarts: int = Field(
        default=DEFAULT_CANARY_PAUSE_RESTARTS,
        ge=0,
        description="Restarts of one canary pod's containers beyond which the rollout pauses.",
    )
    max_slow_start_seconds: int = Field(
        default=DEFAULT_CANARY_SLOW_START,
        ge=1,
        description="Seconds a canary node may go without an available pod of the new "
        "revision, from the pod's start (or the canary's), before the rollout pauses "
        "(reason SlowStart): a pod that stays Pending or never turns Ready.",
    )


class CanaryAutoFail(Model):
    enabled: bool = Field(
        default=True,
        description="Fail the canary when a canary pod restarts more than maxRestarts times: "
        "the rollout stops for this template (and rolls back, with rollback).",
    )
    max_restarts: int = Field(
        default=DEFAULT_CANARY_FAIL_RESTARTS,
        ge=0,
        description="Restarts of one canary pod's containers beyond which the canary fails.",
    )
    rollback: bool = Field(
        default=False,
        description="When the canary fails, put the previous revision back on the canary "
        "nodes. The spec keeps the failed template: the rollout stays stopped until the "
        "template changes. Not in ExtendedDaemonSet, whose failed canary stays as it is.",
    )


class Canary(Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "type(self.replicas) == int ? int(self.replicas) >= 1"
                    " : string(self.replicas).matches('^(100|[1-9][0-9]?)%$')",
                    "message": "canary.replicas must be a number of nodes (1 or more) or a "
                    "percentage from 1% to 100%",
                },
            ]
        }
    )

    replicas: int | str = Field(
        default=DEFAULT_CANARY_REPLICAS,
        description="How many eligible nodes (or what percentage, rounded up) run the new "
        "revision first.",
        json_schema_extra=INT_OR_STRING,
    )
    node_selector: LabelSelector | None = Field(
        default=None,
        description="Node labels the canary nodes are chosen among. Absent: every eligible node.",
    )
    node_anti_affinity_keys: list[str] | None = Field(
        default=None,
        max_length=8,
        description="Node label keys (such as topology.kubernetes.io/zone): the canary nodes "
        "are spread so that no two share the values of these labels while others are left.",
        json_schema_extra={
            "items": {"type": "string", "maxLength": LABEL_KEY_LENGTH},
            "x-kubernetes-validations": [
                {
                    "rule": f"self.all(k, {label_key_rule('k')})",
                    "message": f"each key must be a label key: {LABEL_KEY_TEXT}",
                }
            ],
        },
    )
    duration_seconds: int = Field(
        default=DEFAULT_CANARY_DURATION,
        ge=0,
        description="Seconds the canary is watched once every canary pod is available; the "
        "rollout then goes on to the other nodes on its own.",
    )
    auto_pause: CanaryAutoPause = Field(
        default_factory=CanaryAutoPause,
        description="When the rollout pauses on its own.",
        json_schema_extra={"default": {}},
    )
    auto_fail: CanaryAutoFail = Field(
        default_factory=CanaryAutoFail,
        description="When the canary fails on its own.",
        json_schema_extra={"default": {}},
    )


class RollingUpdate(Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _count_or_percent("maxUnavailable"),
                _count_or_percent("maxSurge"),
                {
                    # string() reads an int and a percent alike, without comparing across types.
                    "rule": "!(has(self.maxUnavailable) && has(self.maxSurge)"
                    " && string(self.maxUnavailable) in ['0', '0%']"
                    " && string(self.maxSurge) in ['0', '0%'])",
                    "message": "maxUnavailable and maxSurge cannot both be 0: nothing could be "
                    "replaced",
                },
                {
                    "rule": "!has(self.rollingUpdateType)"
                    " || self.rollingUpdateType != 'InPlaceIfPossible'"
                    " || !has(self.maxSurge) || string(self.maxSurge) in ['0', '0%']",
                    "message": "rollingUpdateType InPlaceIfPossible updates pods within "
                    "maxUnavailable: maxSurge must be 0",
                },
            ]
        }
    )

    max_unavailable: int | str = Field(
        default=DEFAULT_MAX_UNAVAILABLE,
        description="How many nodes (or what percentage, rounded up) may lack an available "
        "pod during an update.",
        json_schema_extra=INT_OR_STRING,
    )
    max_surge: int | str = Field(
        default=DEFAULT_MAX_SURGE,
        description="How many nodes (or what percentage, rounded up) may run an old and a new "
        "pod at once during an update: the new pod starts beside the old one, which goes "
        "once the new one is available.",
        json_schema_extra=INT_OR_STRING,
    )
    partition: int = Field(
        default=0,
        ge=0,
        description="How many eligible nodes keep the previous revision (status.currentRevision). "
        "Nodes are updated in name order, and nodes already updated count first, so the last "
        "nodes by name stay behind. A kept node that loses its pod gets one of the previous "
        "revision. 0 updates every node. Not in the native DaemonSet (OpenKruise has it).",
    )
    rolling_update_type: RollingUpdateType = Field(
        default=RollingUpdateType.STANDARD,
        description="Standard deletes an old pod and creates a new one. InPlaceIfPossible "
        "updates a pod where it runs when the new template differs from its revision only in "
        "container images and containers' CPU and memory (with the same QoS class): same pod, "
        "same node; the kubelet restarts the containers whose image changed and resizes the "
        "others (through the pod's resize subresource). Any other change, or a resize the API "
        "server refuses, replaces the pod as Standard does. Counts against maxUnavailable like "
        "a replacement: an updated pod is unavailable until its kubelet has carried out the "
        "update and it is Ready for minReadySeconds. Needs a real kubelet. Not in the native "
        "DaemonSet (OpenKruise has it).",
    )
    selector: LabelSelector | None = Field(
        default=None,
        description="Node labels: a rolling update replaces or updates only the pods of the "
        "eligible nodes whose labels match; the other nodes keep the revision they run (they "
        "still count for maxUnavailable), and a node without a pod still gets one of the "
        "current template. Change it to move the update on to more nodes. Absent: every node. "
        "Not in the native DaemonSet (OpenKruise has it).",
    )
    topology_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=LABEL_KEY_LENGTH,
        description="A node label key (such as topology.kubernetes.io/zone): the update goes "
        "one failure domain at a time, in sorted order of the label's values, nodes without "
        "the label last. A domain starts once every node of the one before runs an available "
        "pod of the new revision; maxUnavailable and maxSurge apply within it. Not in the "
        "native DaemonSet.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": label_key_rule("self"),
                    "message": f"topologyKey must be a label key: {LABEL_KEY_TEXT}",
                }
            ]
        },
    )
    canary: Canary | None = Field(
        default=None,
        description="Roll the new revision out to a few canary nodes first and watch them: "
        "trouble there pauses the rollout, worse fails it (autoPause, autoFail); after "
        "durationSeconds without trouble the rollout goes on to the other nodes. The other "
        "nodes keep the previous revision meanwhile, and a node joining gets it. Not in the "
        "native DaemonSet (ExtendedDaemonSet has one).",
    )


class UpdateStrategy(Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.type == 'RollingUpdate' || !has(self.rollingUpdate)"
                    " || !has(self.rollingUpdate.canary)",
                    "message": "a canary needs type RollingUpdate",
                }
            ]
        }
    )

    type: UpdateStrategyType = Field(
        default=UpdateStrategyType.ROLLING_UPDATE,
        description="RollingUpdate replaces pods when the template changes; OnDelete only when "
        "a pod is deleted.",
    )
    rolling_update: RollingUpdate = Field(
        default_factory=RollingUpdate,
        description="Limits of a rolling update.",
        json_schema_extra={"default": {}},
    )


# Bounds on spec.resourceOverrides, which also keep its CEL rule's cost estimate low.
MAX_OVERRIDES = 32
MAX_RESOURCES = 16
QUANTITY: JsonDict = {"x-kubernetes-int-or-string": True}
RESOURCE_NAME_LENGTH = LABEL_KEY_LENGTH


def resource_map(description: str) -> Any:
    return Field(
        default=None,
        description=description,
        json_schema_extra={
            "maxProperties": MAX_RESOURCES,
            "additionalProperties": QUANTITY,
            **keys_at_most(RESOURCE_NAME_LENGTH),
        },
    )


class OverriddenResources(Model):
    requests: dict[str, int | str] | None = resource_map(
        "Requests set over the template's, key by key (cpu, memory, ...)."
    )
    limits: dict[str, int | str] | None = resource_map(
        "Limits set over the template's, key by key."
    )


class ContainerOverride(Model):
    name: str = Field(
        min_length=1,
        max_length=DNS_LABEL_LENGTH,
        description="A container of the template, by name.",
    )
    resources: OverriddenResources = Field(
        description="The requests and limits this container gets on the matching nodes: each "
        "key given replaces the template's, the others stay as the template has them."
    )


class ResourceOverride(Model):
    name: str = Field(
        min_length=1,
        max_length=DNS_LABEL_LENGTH,
        pattern=DNS_LABEL,
        description="The override's name (a DNS label), unique in the list: pods record it, "
        "with a hash of what it sets, in their kubeherd.io/resource-override annotation.",
    )
    node_selector: LabelSelector = Field(
        description="The nodes it applies to, by their labels. A node matched by several "
        "overrides gets the first of them in list order."
    )
    containers: list[ContainerOverride] = Field(
        min_length=1,
        max_length=MAX_CONTAINERS,
        description="Per container of the template, by name: its requests and limits on these "
        "nodes.",
        json_schema_extra=list_map("name"),
    )


class CustomDaemonSetSpec(Model):
    selector: LabelSelector = Field(
        description="Which pods belong to this CustomDaemonSet. Must match "
        "template.metadata.labels, must not be empty, and cannot be changed.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self == oldSelf", "message": "spec.selector is immutable"}
            ]
        },
    )
    template: PodTemplate = Field(description="The pod that runs on every eligible node.")
    min_ready_seconds: int = Field(
        default=0, ge=0, description="Seconds a pod must be Ready before it counts as available."
    )
    update_strategy: UpdateStrategy = Field(
        default_factory=UpdateStrategy,
        description="How pods are replaced when the template changes.",
        json_schema_extra={"default": {}},
    )
    revision_history_limit: int = Field(
        default=DEFAULT_HISTORY_LIMIT,
        ge=0,
        le=MAX_HISTORY_LIMIT,
        description=f"How many old template revisions to keep, at most {MAX_HISTORY_LIMIT}: "
        "kubeherd reads every revision it keeps on each template change, and the native "
        "DaemonSet's default is 10. An object stored with more before this bound is treated as "
        f"if it said {MAX_HISTORY_LIMIT}.",
    )
    progress_deadline_seconds: int = Field(
        default=DEFAULT_PROGRESS_DEADLINE,
        ge=1,
        description="Seconds a rolling update may go without progress (a node updated, a new pod "
        "available) before kubeherd reports it stuck: the Progressing condition turns False with "
        "ProgressDeadlineExceeded and a Warning event says which pods hold it up. The update "
        "itself stays halted at maxUnavailable either way. As in a Deployment.",
    )
    paused: bool = Field(
        default=False,
        description="Stop replacing pods of an old template (a rolling update waits); nodes "
        "without a pod still get one, of the current template. Not in the native DaemonSet.",
    )
    resource_overrides: list[ResourceOverride] | None = Field(
        default=None,
        max_length=MAX_OVERRIDES,
        description="Containers' requests and limits set apart for the nodes a selector "
        "matches (the first matching override applies). A change replaces (with "
        "InPlaceIfPossible: resizes), through the rolling update, only the pods of the nodes "
        "whose override changed. Overrides are not "
        "part of the template's revisions: a rollback restores the template, not them. Not in "
        "the native DaemonSet (ExtendedDaemonSet has ExtendedDaemonsetSetting).",
        json_schema_extra=list_map("name"),
    )


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(Model):
    type: str = Field(
        description="Available, Progressing; ReplicaFailure while creates are refused; "
        "TemplateValid (False) while the API server refuses the pod template."
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str | None = Field(default=None, description="A one-word reason.")
    message: str | None = Field(default=None, description="What happened, in words.")
    last_transition_time: str | None = Field(
        default=None,
        description="When status last changed.",
        json_schema_extra={"format": "date-time"},
    )
    last_update_time: str | None = Field(
        default=None,
        description="Progressing only: when the rollout last made progress.",
        json_schema_extra={"format": "date-time"},
    )
    observed_generation: int | None = Field(
        default=None, description="The generation this condition describes."
    )


class IneligibleNodes(Model):
    reason: str = Field(
        description="NodeNameMismatch, NodeSelectorMismatch, NodeAffinityMismatch or "
        "UntoleratedTaint."
    )
    detail: str | None = Field(default=None, description="The taint or selector concerned.")
    count: int = Field(description="How many nodes have no pod for this reason.")
    nodes: list[str] | None = Field(default=None, description="A few of those nodes.")


class CanaryStatus(Model):
    revision: str = Field(description="The ControllerRevision the canary runs.")
    stable_revision: str = Field(
        description="The ControllerRevision the other nodes keep, and a rollback restores."
    )
    nodes: list[str] = Field(description="The canary nodes.")
    phase: str = Field(
        description="Running (watched), Paused (the rollout waits for a person), Failed "
        "(stopped, or rolled back) or Passed (the rollout goes on to every node)."
    )
    reason: str | None = Field(
        default=None,
        description="Why the canary paused or failed: a container's waiting or termination "
        "reason (CrashLoopBackOff, OOMKilled...), or Restarts.",
    )
    message: str | None = Field(
        default=None, description="What happened, naming the pod and its node."
    )
    available_since: str | None = Field(
        default=None,
        description="Since when every canary pod has been available; durationSeconds run "
        "from here.",
        json_schema_extra={"format": "date-time"},
    )
    rolled_back: bool | None = Field(
        default=None, description="The failed canary's nodes were given the stable revision."
    )
    last_transition_time: str = Field(
        description="When the phase last changed.", json_schema_extra={"format": "date-time"}
    )
    command: str | None = Field(
        default=None,
        description="The last `kubeherd rollout canary` command carried out (the value of the "
        "kubeherd.io/canary-command annotation it wrote).",
    )
    acknowledged_restarts: int | None = Field(
        default=None,
        description="The restarts an unpause acknowledged: only a restart beyond them pauses "
        "the canary again.",
    )


class OverrideNodes(Model):
    name: str = Field(description="A resource override of the spec.")
    nodes: int = Field(description="How many eligible nodes it applies to.")


class CustomDaemonSetStatus(Model):
    desired_number_scheduled: int | None = Field(default=None, description="Eligible nodes.")
    current_number_scheduled: int | None = Field(
        default=None, description="Eligible nodes with a daemon pod (Pending ones count)."
    )
    number_misscheduled: int | None = Field(
        default=None, description="Ineligible nodes that still run a daemon pod."
    )
    number_ready: int | None = Field(
        default=None, description="Eligible nodes whose daemon pod is Ready."
    )
    number_available: int | None = Field(
        default=None,
        description="Eligible nodes whose daemon pod has been Ready for minReadySeconds.",
    )
    number_unavailable: int | None = Field(
        default=None, description="Eligible nodes without an available daemon pod."
    )
    updated_number_scheduled: int | None = Field(
        default=None, description="Eligible nodes whose daemon pod runs the current template."
    )
    observed_generation: int | None = Field(
        default=None, description="The spec generation this status describes."
    )
    collision_count: int | None = Field(
        default=None,
        description="How many times a revision name collided with a different template; it is "
        "mixed into the next hash.",
    )
    update_revision: str | None = Field(
        default=None, description="The ControllerRevision of the current template."
    )
    current_revision: str | None = Field(
        default=None,
        description="The ControllerRevision every eligible node last ran: it becomes "
        "updateRevision once a rollout reaches all nodes, and partitioned nodes keep it.",
    )
    node_selector: str | None = Field(
        default=None, description="The template's nodeSelector as k=v pairs (for kubectl get)."
    )
    ineligible_nodes: list[IneligibleNodes] | None = Field(
        default=None, description="Why nodes have no daemon pod, grouped by reason."
    )
    canary: CanaryStatus | None = Field(
        default=None, description="The canary of the current template's rollout."
    )
    resource_overrides: list[OverrideNodes] | None = Field(
        default=None,
        description="Each of spec.resourceOverrides, in order, with how many eligible nodes it "
        "applies to (a node matched by several counts for the first).",
    )
    conditions: list[Condition] | None = Field(
        default=None,
        description="Available; Progressing (RollingUpdate, RolloutComplete, PartitionRolledOut, "
        "WaveRolledOut, CanaryRunning, CanaryPaused, CanaryFailed, Paused or "
        "ProgressDeadlineExceeded); ReplicaFailure while the API "
        "server refuses creates; TemplateValid False (InvalidTemplate) while it refuses the pod "
        "template itself.",
        json_schema_extra=list_map("type"),
    )


class CustomDaemonSet(Model):
    """One pod per eligible node, placed by node affinity and bound by a scheduler, like an
    apps/v1 DaemonSet."""

    api_version: str = Field(default=API_VERSION, description=API_VERSION)
    kind: str = Field(default=CUSTOMDAEMONSET, description=CUSTOMDAEMONSET)
    metadata: dict[str, Any] = Field(default_factory=dict, description="Standard metadata.")
    spec: CustomDaemonSetSpec = Field(description="What to run and where.")
    status: CustomDaemonSetStatus | None = Field(
        default=None, description="What kubeherd observed, written by kubeherd."
    )
