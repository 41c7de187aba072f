"""The daemon pod of one node: the template pinned to the node, as the native controller builds it.

Pure: plain data in, plain data out; the inputs are never changed.
"""

from __future__ import annotations

import copy
import hashlib
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kubeherd.daemonset.core.eligibility import NODE_NAME_FIELD, with_daemon_tolerations
from kubeherd.meta import controller_reference
from kubeherd.names import CUSTOMDAEMONSET

if TYPE_CHECKING:
    from kubeherd.daemonset.core.overrides import ResourceOverride

OWNER_LABEL = "kubeherd.io/customdaemonset"
REVISION_LABEL = "controller-revision-hash"
NODE_ANNOTATION = "kubeherd.io/node"
# The resource override a pod was made with (`overrides.ResourceOverride.key`); absent without.
RESOURCE_OVERRIDE_ANNOTATION = "kubeherd.io/resource-override"

# No vowels, so that no digest spells a word (the alphabet Kubernetes uses for generated names).
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_DIGEST_LENGTH = 10


def canonical_json(value: Any) -> bytes:
    """JSON with sorted keys and no spaces: equal data always gives equal bytes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def canonical_hash(data: bytes) -> str:
    """The template hash of a template's canonical JSON (`canonical_json`)."""
    number = int.from_bytes(hashlib.sha256(data).digest(), "big")
    chars = []
    for _ in range(_DIGEST_LENGTH):
        number, index = divmod(number, len(_ALPHABET))
        chars.append(_ALPHABET[index])
    return "".join(chars)


def template_hash(template: Mapping[str, Any]) -> str:
    return canonical_hash(canonical_json(template))


# What the API server's generateName keeps of a base name, so that the pod name with its suffix
# still fits the 63 characters of a hostname.
_MAX_BASE_LENGTH = 58
_SUFFIX_LENGTH = 5


def daemon_pod_name(cds_name: str) -> str:
    """A fresh name, as the native controller's generateName gives: `<cds>-xxxxx`.

    Chosen here rather than by the API server so that a create whose answer was lost can be
    sent again under the same name and be created once. Each pod gets its own name: a
    replacement can start while its predecessor still terminates, and nothing that tracks
    pods by name (kube-scheduler's cache among them) mistakes the new pod for the old one."""
    suffix = "".join(secrets.choice(_ALPHABET) for _ in range(_SUFFIX_LENGTH))
    return f"{cds_name}-"[:_MAX_BASE_LENGTH] + suffix


def target_node(pod: Mapping[str, Any]) -> str | None:
    """The node a pod runs on or, while it is pending, the node its affinity pins it to."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    for term in required.get("nodeSelectorTerms") or ():
        for requirement in term.get("matchFields") or ():
            if requirement.get("key") == NODE_NAME_FIELD and requirement.get("operator") == "In":
                values = requirement.get("values") or []
                return str(values[0]) if len(values) == 1 else None
    return None


def pinned_affinity(affinity: Mapping[str, Any] | None, node_name: str) -> dict[str, Any]:
    """The affinity with its required node affinity replaced by one term naming the node.

    The scheduler, not the controller, binds the pod, so it still honours the pod's resources,
    ports, preferred node affinity and pod (anti-)affinity.
    """
    pinned = copy.deepcopy(dict(affinity or {}))
    node_affinity = pinned["nodeAffinity"] = pinned.get("nodeAffinity") or {}
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": NODE_NAME_FIELD, "operator": "In", "values": [node_name]}]}
        ]
    }
    return pinned


@dataclass(frozen=True)
class DaemonPodMaker:
    """What the pods of one revision share, worked out once per pass: deep-copying the template
    for each of a thousand pods took 8 % of the operator's CPU in a rollout (py-spy).

    The pods it makes share the template's parts (containers, volumes ...); they are sent to the
    API server and dropped, never changed. Each gets its own metadata, spec and affinity.
    """

    cds_name: str
    namespace: str
    revision: str
    spec: Mapping[str, Any]
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    owner_reference: Mapping[str, Any]
    finalizers: tuple[str, ...]

    @classmethod
    def of(
        cls,
        cds: Mapping[str, Any],
        revision: str,
        template: Mapping[str, Any] | None = None,
    ) -> DaemonPodMaker:
        """The maker for `revision`; `template` is that revision's when it is not the
        CustomDaemonSet's current one (nodes a partition keeps back)."""
        metadata = cds["metadata"]
        template = copy.deepcopy(
            dict(template if template is not None else cds["spec"]["template"])
        )
        template_metadata = template.get("metadata") or {}
        spec = template.get("spec") or {}
        spec["tolerations"] = with_daemon_tolerations(spec)
        return cls(
            cds_name=metadata["name"],
            namespace=metadata["namespace"],
            revision=revision,
            spec=spec,
            labels={
                **(template_metadata.get("labels") or {}),
                OWNER_LABEL: metadata["name"],
                REVISION_LABEL: revision,
            },
            annotations=template_metadata.get("annotations") or {},
            owner_reference=controller_reference(cds, CUSTOMDAEMONSET),
            # The native controller copies the template's finalizers too.
            finalizers=tuple(template_metadata.get("finalizers") or ()),
        )

    def pod(self, node_name: str, override: ResourceOverride | None = None) -> dict[str, Any]:
        """The pod for the node, pinned to it by node affinity, with the node's resource
        override (spec.resourceOverrides) if it has one."""
        spec = dict(self.spec)
        spec["affinity"] = pinned_affinity(self.spec.get("affinity"), node_name)
        annotations = {**self.annotations, NODE_ANNOTATION: node_name}
        if override is not None:
            spec["containers"] = override.apply(spec.get("containers") or ())
            annotations[RESOURCE_OVERRIDE_ANNOTATION] = override.key
        metadata: dict[str, Any] = {
            "name": daemon_pod_name(self.cds_name),
            "namespace": self.namespace,
            "labels": dict(self.labels),
            "annotations": annotations,
            "ownerReferences": [dict(self.owner_reference)],
        }
        if self.finalizers:
            metadata["finalizers"] = list(self.finalizers)
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def build_daemon_pod(
    cds: Mapping[str, Any],
    node_name: str,
    revision: str,
    template: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The pod of `revision` for the node; `template` is that revision's when it is not the
    CustomDaemonSet's current one (a node a partition keeps back)."""
    return DaemonPodMaker.of(cds, revision, template).pod(node_name)
