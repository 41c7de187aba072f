"""The parts of a Pod and of a Node that the watches' records are made of: the watches decode
only these from each object the API server sends, and skip the rest (managed fields, most of
the spec, a node's images and addresses) without building it.

Each field here is one that a record reads (PodInfo, DaemonPod, NodeInfo) or that the
reflector itself reads (name, namespace, resourceVersion, a bookmark's annotation, an error's
code and message). A field a record reads but this schema lacks would read as missing: the
schema's tests record every field the records read and check it is here.

Every field may be null (the API server sends some: the pod of a bookmark has
`"containers": null`), and the values the records read are taken as they come (`Any`): the
readers already take a missing or odd value as empty.
"""

from __future__ import annotations

from typing import Any, TypedDict

# Annotations hold other tools' data too (kubectl's last applied configuration can be larger
# than the rest of the pod): only these are kept, by name (a TypedDict's keys are literals):
# IN_PLACE_ANNOTATION, RESOURCE_OVERRIDE_ANNOTATION and the reflector's INITIAL_EVENTS_END.
WatchedAnnotations = TypedDict(
    "WatchedAnnotations",
    {
        "kubeherd.io/in-place-update": Any,
        "kubeherd.io/resource-override": Any,
        "k8s.io/initial-events-end": Any,
    },
    total=False,
)


class OwnerReference(TypedDict, total=False):
    apiVersion: Any
    kind: Any
    controller: Any


class Metadata(TypedDict, total=False):
    name: Any
    namespace: Any
    uid: Any
    resourceVersion: Any
    creationTimestamp: Any
    deletionTimestamp: Any
    # Every label: selectors may name any of them.
    labels: dict[str, Any] | None
    annotations: WatchedAnnotations | None
    ownerReferences: list[OwnerReference] | None


class FieldRequirement(TypedDict, total=False):
    key: Any
    operator: Any
    values: Any


class NodeSelectorTerm(TypedDict, total=False):
    matchFields: list[FieldRequirement] | None


class RequiredNodeAffinity(TypedDict, total=False):
    nodeSelectorTerms: list[NodeSelectorTerm] | None


class NodeAffinity(TypedDict, total=False):
    requiredDuringSchedulingIgnoredDuringExecution: RequiredNodeAffinity | None


class Affinity(TypedDict, total=False):
    nodeAffinity: NodeAffinity | None


class Container(TypedDict, total=False):
    name: Any
    # Requests and limits, compared when a pod is resized in place.
    resources: Any


class PodSpec(TypedDict, total=False):
    nodeName: Any
    # A pending pod's node is the one its affinity pins it to.
    affinity: Affinity | None
    containers: list[Container] | None


class Condition(TypedDict, total=False):
    type: Any
    status: Any
    lastTransitionTime: Any


class RunningState(TypedDict, total=False):
    startedAt: Any


class ReasonedState(TypedDict, total=False):
    reason: Any


class ContainerState(TypedDict, total=False):
    waiting: ReasonedState | None
    running: RunningState | None
    terminated: ReasonedState | None


class ContainerStatus(TypedDict, total=False):
    name: Any
    restartCount: Any
    state: ContainerState | None
    lastState: ContainerState | None
    resources: Any


class PodStatus(TypedDict, total=False):
    phase: Any
    conditions: list[Condition] | None
    containerStatuses: list[ContainerStatus] | None


class WatchedPod(TypedDict, total=False):
    metadata: Metadata | None
    spec: PodSpec | None
    status: PodStatus | None
    # An ERROR event's object is a Status: what the reflector reports of it.
    code: Any
    message: Any


class Taint(TypedDict, total=False):
    key: Any
    value: Any
    effect: Any


class NodeSpec(TypedDict, total=False):
    taints: list[Taint] | None


class WatchedNode(TypedDict, total=False):
    metadata: Metadata | None
    spec: NodeSpec | None
    code: Any
    message: Any
