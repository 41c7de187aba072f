"""Where the API server serves each kind kubeherd reads and writes: its path, by kind."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubeherd.names import (
    API_VERSION,
    CUSTOMDAEMONSET,
    CUSTOMDAEMONSETS,
    GROUP,
    SCHEDULERPROFILE,
    SCHEDULERPROFILES,
    VERSION,
)


@dataclass(frozen=True)
class Kind:
    """Where the API server serves a kind: its group-version prefix and resource name."""

    prefix: str
    resource: str
    kind: str
    namespaced: bool = True

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        parts = [self.prefix]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{namespace}")
        parts.append(self.resource)
        if name:
            parts.append(name)
        return "/".join(parts)


_RBAC = "/apis/rbac.authorization.k8s.io/v1"
# The kinds kubeherd reads and writes besides pods, keyed by (apiVersion, kind).
KINDS = {
    ("v1", "ConfigMap"): Kind("/api/v1", "configmaps", "ConfigMap"),
    ("v1", "ServiceAccount"): Kind("/api/v1", "serviceaccounts", "ServiceAccount"),
    ("apps/v1", "Deployment"): Kind("/apis/apps/v1", "deployments", "Deployment"),
    ("apps/v1", "ReplicaSet"): Kind("/apis/apps/v1", "replicasets", "ReplicaSet"),
    ("v1", "Pod"): Kind("/api/v1", "pods", "Pod"),
    ("policy/v1", "PodDisruptionBudget"): Kind(
        "/apis/policy/v1", "poddisruptionbudgets", "PodDisruptionBudget"
    ),
    ("networking.k8s.io/v1", "NetworkPolicy"): Kind(
        "/apis/networking.k8s.io/v1", "networkpolicies", "NetworkPolicy"
    ),
    ("coordination.k8s.io/v1", "Lease"): Kind("/apis/coordination.k8s.io/v1", "leases", "Lease"),
    ("rbac.authorization.k8s.io/v1", "Role"): Kind(_RBAC, "roles", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): Kind(_RBAC, "rolebindings", "RoleBinding"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): Kind(
        _RBAC, "clusterrolebindings", "ClusterRoleBinding", namespaced=False
    ),
    # The admission webhook's own objects: its configuration, the Secret its replicas share,
    # and the chart's ClusterRole, which owns the configuration (see kubeherd/admission).
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): Kind(
        _RBAC, "clusterroles", "ClusterRole", namespaced=False
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"): Kind(
        "/apis/admissionregistration.k8s.io/v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        namespaced=False,
    ),
    ("v1", "Secret"): Kind("/api/v1", "secrets", "Secret"),
    ("apps/v1", "ControllerRevision"): Kind(
        "/apis/apps/v1", "controllerrevisions", "ControllerRevision"
    ),
    (API_VERSION, CUSTOMDAEMONSET): Kind(
        f"/apis/{GROUP}/{VERSION}", CUSTOMDAEMONSETS, CUSTOMDAEMONSET
    ),
    (API_VERSION, SCHEDULERPROFILE): Kind(
        f"/apis/{GROUP}/{VERSION}", SCHEDULERPROFILES, SCHEDULERPROFILE
    ),
}
# Where Events are posted.
EVENTS = Kind("/api/v1", "events", "Event")


def kind_of(manifest: Mapping[str, Any]) -> Kind:
    return KINDS[(str(manifest["apiVersion"]), str(manifest["kind"]))]
