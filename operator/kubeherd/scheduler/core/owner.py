"""The SchedulerProfile that objects belong to, and how kubeherd marks them as its own: the
resource's uid in a label (how kubeherd finds them to delete, and tells them from someone
else's), an owner reference where one may point (in the resource's own namespace), and the hash
of the manifest kubeherd applied. Pure."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubeherd.meta import controller_reference
from kubeherd.names import SCHEDULERPROFILE

OWNER_UID_LABEL = "kubeherd.io/schedulerprofile-uid"
# Held while kubeherd has objects of the resource to delete that no owner reference takes
# along (cluster-scoped, or in other namespaces).
FINALIZER = "kubeherd.io/scheduler-cleanup"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"


# The hash of the manifest kubeherd applied: equal means there is nothing to write. A label, not
# an annotation: `kubectl rollout undo` replaces a Deployment's annotations with the old
# ReplicaSet's and leaves its labels, so an undo does not look like a spec kubeherd has yet to
# apply (kubeherd leaves it in place until the SchedulerProfile changes).
MANIFEST_HASH_LABEL = "kubeherd.io/manifest-hash"
MAX_NAME = 253


@dataclass(frozen=True)
class Owner:
    """The SchedulerProfile the objects belong to."""

    name: str
    namespace: str
    uid: str

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> Owner:
        metadata = body["metadata"]
        return cls(str(metadata["name"]), str(metadata["namespace"]), str(metadata["uid"]))

    def cluster_unique(self, purpose: str) -> str:
        """A name for an object outside the resource's namespace, where two SchedulerProfiles
        of one name in different namespaces must not collide. Within 253 characters: the CRD
        caps the resource's name at 63, a namespace has at most 63, and a purpose that would
        overflow (a long ClusterRole name) is replaced by its hash."""
        name = f"kubeherd:{self.namespace}:{self.name}:{purpose}"
        if len(name) <= MAX_NAME:
            return name
        digest = hashlib.sha256(purpose.encode()).hexdigest()[:16]
        return f"kubeherd:{self.namespace}:{self.name}:{digest}"

    def config_map(self, config_hash: str) -> str:
        """The ConfigMap of one configuration: a new configuration is a new ConfigMap."""
        return f"{self.name}-config-{config_hash}"

    @property
    def reference(self) -> dict[str, Any]:
        return controller_reference(
            {"metadata": {"name": self.name, "uid": self.uid}},
            SCHEDULERPROFILE,
        )


def owned_selector(owner: Owner) -> str:
    """The label selector of every object kubeherd made for the resource."""
    return f"{OWNER_UID_LABEL}={owner.uid}"


def selector_labels(owner: Owner) -> dict[str, str]:
    return {"app.kubernetes.io/name": "kube-scheduler", "app.kubernetes.io/instance": owner.name}


def pod_labels(owner: Owner) -> dict[str, str]:
    """The scheduler pods' labels: the selector's, and kubeherd's mark, which the chart's
    PodMonitor also selects on so that another tool's kube-scheduler pods in the same namespace
    are not sent its token. Not in the selector: a Deployment's selector cannot change."""
    return {**selector_labels(owner), MANAGED_BY_LABEL: "kubeherd"}


def _labels(owner: Owner) -> dict[str, str]:
    return {
        **selector_labels(owner),
        MANAGED_BY_LABEL: "kubeherd",
        OWNER_UID_LABEL: owner.uid,
    }


def manifest_hash(manifest: Mapping[str, Any]) -> str:
    text = json.dumps(manifest, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def owned_manifest(
    owner: Owner, api_version: str, kind: str, name: str, namespace: str | None, **body: Any
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": _labels(owner)}
    if namespace:
        metadata["namespace"] = namespace
        if namespace == owner.namespace:
            metadata["ownerReferences"] = [owner.reference]
    manifest = {"apiVersion": api_version, "kind": kind, "metadata": metadata, **body}
    metadata["labels"] = {**metadata["labels"], MANIFEST_HASH_LABEL: manifest_hash(manifest)}
    return manifest
