"""What a SchedulerProfile's ServiceAccount may do: bindings to the built-in scheduler roles and to
the extra ClusterRoles the spec names, the authentication reader in kube-system, and a Role of
its own Lease. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kubeherd.scheduler.core.config import Lock
from kubeherd.scheduler.core.owner import Owner, owned_manifest

# Where the API server keeps the authentication settings kube-scheduler reads.
AUTHENTICATION_NAMESPACE = "kube-system"
RBAC = "rbac.authorization.k8s.io"


LEASES = "coordination.k8s.io"


def _binding(
    owner: Owner, kind: str, name: str, namespace: str | None, role_kind: str, role: str
) -> dict[str, Any]:
    return owned_manifest(
        owner,
        f"{RBAC}/v1",
        kind,
        name,
        namespace,
        roleRef={"apiGroup": RBAC, "kind": role_kind, "name": role},
        subjects=[{"kind": "ServiceAccount", "name": owner.name, "namespace": owner.namespace}],
    )


def extra_role_binding(owner: Owner, role: str) -> dict[str, Any]:
    """A ClusterRole the spec asks for (a custom image's plugins watch their own resources)."""
    return _binding(
        owner,
        "ClusterRoleBinding",
        owner.cluster_unique(f"extra:{role}"),
        None,
        "ClusterRole",
        role,
    )


def rbac_objects(
    owner: Owner, lock: Lock, extra_cluster_roles: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """What the scheduler's ServiceAccount needs. The built-in system:kube-scheduler role grants
    leases only on kube-system/kube-scheduler, the default scheduler's: the Role here grants the
    scheduler its own Lease instead of widening a built-in role."""
    lease_role = owner.cluster_unique("leader-election")
    return [
        *(extra_role_binding(owner, role) for role in extra_cluster_roles),
        _binding(
            owner,
            "ClusterRoleBinding",
            owner.cluster_unique("kube-scheduler"),
            None,
            "ClusterRole",
            "system:kube-scheduler",
        ),
        _binding(
            owner,
            "ClusterRoleBinding",
            owner.cluster_unique("volume-scheduler"),
            None,
            "ClusterRole",
            "system:volume-scheduler",
        ),
        _binding(
            owner,
            "RoleBinding",
            owner.cluster_unique("authentication-reader"),
            AUTHENTICATION_NAMESPACE,
            "Role",
            "extension-apiserver-authentication-reader",
        ),
        owned_manifest(
            owner,
            f"{RBAC}/v1",
            "Role",
            lease_role,
            lock.namespace,
            rules=[
                # The name of an object to create is not known when RBAC decides: `create`
                # cannot be limited to resourceNames.
                {"apiGroups": [LEASES], "resources": ["leases"], "verbs": ["create"]},
                {
                    "apiGroups": [LEASES],
                    "resources": ["leases"],
                    "resourceNames": [lock.name],
                    "verbs": ["get", "update"],
                },
            ],
        ),
        _binding(owner, "RoleBinding", lease_role, lock.namespace, "Role", lease_role),
    ]
