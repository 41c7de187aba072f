"""The kinds the SchedulerProfile controller reads and writes, and where kubeherd may have left
objects of a SchedulerProfile: in its namespace, and outside it (RBAC)."""

from __future__ import annotations

from kubeherd.kube.kinds import KINDS, Kind
from kubeherd.scheduler.core.owner import Owner
from kubeherd.scheduler.core.rbac import AUTHENTICATION_NAMESPACE

DEPLOYMENT = KINDS[("apps/v1", "Deployment")]
REPLICA_SET = KINDS[("apps/v1", "ReplicaSet")]
CONFIG_MAP = KINDS[("v1", "ConfigMap")]
POD = KINDS[("v1", "Pod")]
LEASE = KINDS[("coordination.k8s.io/v1", "Lease")]
# Kinds kubeherd may have left outside the resource's namespace (or outside any namespace).
SPREAD_KINDS = (
    KINDS[("rbac.authorization.k8s.io/v1", "ClusterRoleBinding")],
    KINDS[("rbac.authorization.k8s.io/v1", "RoleBinding")],
    KINDS[("rbac.authorization.k8s.io/v1", "Role")],
)
LOCAL_KINDS = (
    DEPLOYMENT,
    CONFIG_MAP,
    POD,  # judge pods: the scheduler pods are the Deployment's
    KINDS[("v1", "ServiceAccount")],
    KINDS[("policy/v1", "PodDisruptionBudget")],
    KINDS[("networking.k8s.io/v1", "NetworkPolicy")],
)
# Kinds in the resource's namespace that a spec may stop needing (no budget for one replica).
OPTIONAL_LOCAL_KINDS = (KINDS[("policy/v1", "PodDisruptionBudget")],)
# By name, as the plans name them.
BY_NAME = {kind.kind: kind for kind in (*SPREAD_KINDS, *LOCAL_KINDS)}

Place = tuple[Kind, str | None]


def spread_places(owner: Owner, *, cluster_wide: bool) -> list[Place]:
    """Where the resource's RBAC objects may be: ClusterRoleBindings, and Roles and
    RoleBindings in any namespace (an earlier version put a Lease's elsewhere), or for an
    operator of some namespaces, where it makes them: the Lease's Role and RoleBinding in
    the resource's own namespace, the authentication reader's RoleBinding in kube-system."""
    if cluster_wide:
        return [(kind, None) for kind in SPREAD_KINDS]
    cluster_role_binding, role_binding, role = SPREAD_KINDS
    return [
        (cluster_role_binding, None),
        *((role_binding, ns) for ns in sorted({owner.namespace, AUTHENTICATION_NAMESPACE})),
        (role, owner.namespace),
    ]


def prunable_places(owner: Owner, *, cluster_wide: bool) -> list[Place]:
    """Where an earlier spec may have left objects this one does not need."""
    return [
        *spread_places(owner, cluster_wide=cluster_wide),
        *((kind, owner.namespace) for kind in OPTIONAL_LOCAL_KINDS),
    ]


def every_place(owner: Owner, *, cluster_wide: bool) -> list[Place]:
    """Wherever kubeherd may have made something for the resource."""
    return [
        *spread_places(owner, cluster_wide=cluster_wide),
        *((kind, owner.namespace) for kind in LOCAL_KINDS),
    ]
