"""The SchedulerProfile API's rules that kubeherd checks in code as well as in the CRD schema,
kept free of pydantic: the operator reads them at run time, and the models in
schedulerprofile.py (which only the CRD generator and the CLI load) build their schema from them,
so the two cannot drift apart.
"""

from __future__ import annotations

# The extension points of kube-scheduler's `plugins`, as the v1 Plugins type names them.
EXTENSION_POINTS = (
    "preEnqueue",
    "queueSort",
    "preFilter",
    "filter",
    "postFilter",
    "preScore",
    "score",
    "reserve",
    "permit",
    "preBind",
    "bind",
    "postBind",
    "multiPoint",
    "placementGenerate",
    "placementScore",
    "podGroupPostFilter",
)
# What kube-scheduler puts in place of a lease duration of 0 (and of no resourceLock).
LEADER_ELECTION_DEFAULTS = {"leaseDuration": "15s", "renewDeadline": "10s", "retryPeriod": "2s"}
LEASE_LOCK = "leases"
# kube-scheduler flags that would move the scheduler off what kubeherd sets up and checks: its
# leader election (kube-scheduler honours these flags even beside --config, so they could point
# it at the cluster's own Lease), the API server and credentials it uses, its authentication and
# authorization, and its configuration file. Kubernetes' flags read `_` as `-`.
REFUSED_COMMAND_FLAG = (
    r"^--(leader[-_]elect|lock[-_]object|master|kubeconfig|authentication[-_]|"
    r"authorization[-_]|client[-_]ca[-_]file|requestheader[-_]|config|write[-_]config[-_]to)"
)
REFUSED_COMMAND_FLAG_MESSAGE = (
    "kubeherd sets the scheduler's leader election, API server, credentials, authorization and "
    "configuration file itself: remove --leader-elect*, --lock-object*, --master, --kubeconfig, "
    "--authentication-*, --authorization-*, --client-ca-file, --requestheader-*, --config and "
    "--write-config-to from command (spec.leaderElection sets the Lease)"
)
# The roles every scheduler is bound to; spec.extraClusterRoles may add others, except the
# cluster's broad roles and its system roles, whose rights reach far past scheduling.
SCHEDULER_CLUSTER_ROLES = ("system:kube-scheduler", "system:volume-scheduler")
BROAD_CLUSTER_ROLES = ("cluster-admin", "admin", "edit")
REFUSED_CLUSTER_ROLE_MESSAGE = (
    "cluster-admin, admin, edit and system: roles (other than system:kube-scheduler and "
    "system:volume-scheduler) reach far past scheduling: a scheduler may not be bound to them"
)

DEFAULT_NAME_REFUSAL = (
    "metadata.name may not be default: the scheduler's ServiceAccount is named after it, and "
    "every pod of the namespace without one would run as it"
)


def cluster_role_allowed(role: str) -> bool:
    """Whether spec.extraClusterRoles may name `role` (its CEL rule, in Python)."""
    if role in BROAD_CLUSTER_ROLES:
        return False
    return not role.startswith("system:") or role in SCHEDULER_CLUSTER_ROLES


# kube-scheduler reads the lease fields only with leaderElect, and then puts its default in place
# of a 0: the rules check what it would use, and only then.
LEASE_LONGER_THAN_RENEW = (
    "leaseDuration must be longer than renewDeadline (a duration of 0s is kube-scheduler's "
    "default: leaseDuration 15s, renewDeadline 10s, retryPeriod 2s)"
)
NOT_NEGATIVE = "must not be negative (0s is kube-scheduler's default)"
RENEW_AFTER_RETRY = (
    "renewDeadline must be longer than 1.2 times retryPeriod (the leader elector's jitter): "
    "shorten retryPeriod or lengthen renewDeadline"
)
LEASE_LOCK_ONLY = "resourceLock must be leases (or left out): kube-scheduler takes no other lock"
