"""The SchedulerProfile API (kubeherd.io/v1alpha1): one extra kube-scheduler, configured.

The spec is a KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1) reduced to what a
second scheduler should set, plus how to run it. What the schema and CEL rules can check, the API
server refuses at `kubectl apply`; the rest (plugin names and extension points, queueSort and
bind after merging with the defaults, plugin args, names across resources) kubeherd checks before
it rolls anything out.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict

from kubeherd.api.customdaemonset import (
    PRESERVE,
    Condition,
    Model,
    PassThrough,
    Toleration,
    list_map,
)
from kubeherd.api.schedulerprofile_rules import (
    BROAD_CLUSTER_ROLES,
    LEADER_ELECTION_DEFAULTS,
    LEASE_LOCK,
    LEASE_LOCK_ONLY,
    LEASE_LONGER_THAN_RENEW,
    NOT_NEGATIVE,
    REFUSED_CLUSTER_ROLE_MESSAGE,
    REFUSED_COMMAND_FLAG,
    REFUSED_COMMAND_FLAG_MESSAGE,
    RENEW_AFTER_RETRY,
    SCHEDULER_CLUSTER_ROLES,
)
from kubeherd.names import API_VERSION, SCHEDULERPROFILE

MAX_PROFILES = 16
# The widths kube-scheduler decodes its whole numbers into: a larger one stops it at start.
INT32_MAX = 2**31 - 1
MAX_PLUGINS = 64
# Pods name their scheduler with a DNS subdomain, so a profile name must be one to be usable.
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# A Go duration, as time.ParseDuration (and so kube-scheduler) reads leaderElection's fields: a
# number may start or end with its dot (".5s", "15.s"), a sign may lead, "0" needs no unit.
GO_DURATION = r"^[-+]?((([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+|0)$"


def _cel_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{value}'" for value in values) + "]"


class EnabledPlugin(Model):
    name: str = Field(
        min_length=1,
        max_length=256,
        description="A plugin name; an in-tree plugin of the scheduler's version, or an "
        "out-of-tree one when `image` is a custom build.",
    )
    weight: int | None = Field(
        default=None,
        ge=0,
        le=INT32_MAX,
        description="Score plugins only: the plugin's weight (0 or unset means 1, as in "
        "kube-scheduler).",
    )


class DisabledPlugin(Model):
    name: str = Field(
        min_length=1, max_length=256, description="A plugin name, or '*' for all defaults."
    )


class PluginSet(Model):
    enabled: list[EnabledPlugin] | None = Field(
        default=None,
        max_length=MAX_PLUGINS,
        description="Plugins to run at this point, after the defaults that are not disabled; "
        "one with a default's name replaces it in place.",
    )
    disabled: list[DisabledPlugin] | None = Field(
        default=None,
        max_length=MAX_PLUGINS,
        description="Default plugins to leave out at this point; '*' leaves out all of them.",
    )


class Plugins(Model):
    """Plugins per extension point, merged with kube-scheduler's defaults as it merges them."""

    pre_enqueue: PluginSet | None = Field(default=None, description="Before a pod is queued.")
    queue_sort: PluginSet | None = Field(
        default=None, description="Orders the queue; all profiles must share it."
    )
    pre_filter: PluginSet | None = Field(default=None, description="Before filtering.")
    filter: PluginSet | None = Field(default=None, description="Rules out nodes.")
    post_filter: PluginSet | None = Field(
        default=None, description="When no node fits (preemption)."
    )
    pre_score: PluginSet | None = Field(default=None, description="Before scoring.")
    score: PluginSet | None = Field(default=None, description="Ranks the nodes that fit.")
    reserve: PluginSet | None = Field(default=None, description="Reserves resources.")
    permit: PluginSet | None = Field(default=None, description="Approves or delays binding.")
    pre_bind: PluginSet | None = Field(default=None, description="Before binding.")
    bind: PluginSet | None = Field(default=None, description="Binds the pod to its node.")
    post_bind: PluginSet | None = Field(default=None, description="After binding.")
    multi_point: PluginSet | None = Field(
        default=None,
        description="Plugins enabled at every extension point they implement.",
    )
    placement_generate: PluginSet | None = Field(
        default=None, description="Proposes placements for a pod group (workload scheduling)."
    )
    placement_score: PluginSet | None = Field(
        default=None, description="Ranks a pod group's placements (workload scheduling)."
    )
    pod_group_post_filter: PluginSet | None = Field(
        default=None, description="When a pod group cannot be scheduled (its preemption)."
    )


class PluginConfig(Model):
    name: str = Field(min_length=1, max_length=256, description="The plugin these args are for.")
    args: PassThrough | None = Field(
        default=None,
        description="The plugin's args, as kube-scheduler's <Plugin>Args (apiVersion and kind "
        "may be left out); kubeherd checks the in-tree plugins' args.",
    )


class Profile(Model):
    scheduler_name: str = Field(
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="The name pods give in spec.schedulerName; unique across all "
        "SchedulerProfiles, and never default-scheduler (the cluster's own scheduler has it).",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self != 'default-scheduler'",
                    "message": "default-scheduler is the cluster's own scheduler: "
                    "give this profile another schedulerName",
                }
            ]
        },
    )
    percentage_of_nodes_to_score: int | None = Field(
        default=None,
        ge=0,
        le=100,
        description="Overrides the global percentageOfNodesToScore for this profile.",
    )
    plugins: Plugins | None = Field(default=None, description="Plugins per extension point.")
    plugin_config: list[PluginConfig] | None = Field(
        default=None,
        max_length=MAX_PLUGINS,
        description="Args per plugin; at most one entry per plugin.",
        json_schema_extra=list_map("name"),
    )


class LeaderElection(Model):
    leader_elect: bool = Field(
        default=True,
        description="Elect one active scheduler among the replicas through a Lease.",
    )
    lease_duration: str = Field(
        default="15s", pattern=GO_DURATION, description="How long a lease lasts (Go duration)."
    )
    renew_deadline: str = Field(
        default="10s",
        pattern=GO_DURATION,
        description="How long the leader tries to renew before it gives up; below leaseDuration.",
    )
    retry_period: str = Field(
        default="2s", pattern=GO_DURATION, description="How often candidates retry."
    )
    resource_lock: str | None = Field(
        default=None,
        max_length=63,
        description="The lock's kind: leases, the only one kube-scheduler takes (and its "
        "default); without leader election it is not read.",
    )
    resource_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="The Lease's name; default: kubeherd-<the SchedulerProfile's name> (never "
        "the default scheduler's kube-scheduler lock).",
    )
    resource_namespace: str | None = Field(
        default=None,
        max_length=63,
        description="The Lease's namespace: the SchedulerProfile's own (any other is refused: "
        "its scheduler gets rights on the Lease, which must not reach another namespace).",
    )


_LEADER_DEFAULTS: JsonDict = {
    "leaderElect": True,
    "leaseDuration": "15s",
    "renewDeadline": "10s",
    "retryPeriod": "2s",
}


def _defaulted(field: str) -> str:
    """A lease duration as kube-scheduler uses it, in CEL: 0 is its default."""
    default = LEADER_ELECTION_DEFAULTS[field]
    return (
        f"(duration(self.{field}) == duration('0s') ? duration('{default}') : "
        f"duration(self.{field}))"
    )


_DURATION_RULES: JsonDict = {
    "x-kubernetes-validations": [
        {
            "rule": f"!self.leaderElect || {_defaulted('leaseDuration')} > "
            f"{_defaulted('renewDeadline')}",
            "message": LEASE_LONGER_THAN_RENEW,
        },
        {
            "rule": "!self.leaderElect || duration(self.renewDeadline) >= duration('0s')",
            "message": f"renewDeadline {NOT_NEGATIVE}",
        },
        {
            "rule": "!self.leaderElect || duration(self.retryPeriod) >= duration('0s')",
            "message": f"retryPeriod {NOT_NEGATIVE}",
        },
        {
            # client-go's leader elector refuses renewDeadline <= 1.2 x retryPeriod (its jitter);
            # CEL cannot multiply a duration, so in milliseconds: renew * 5 > retry * 6.
            "rule": f"!self.leaderElect || {_defaulted('renewDeadline')}.getMilliseconds() * 5 > "
            f"{_defaulted('retryPeriod')}.getMilliseconds() * 6",
            "message": RENEW_AFTER_RETRY,
        },
        {
            # kube-scheduler defaults an empty lock kind to leases.
            "rule": f"!self.leaderElect || !has(self.resourceLock) || "
            f"self.resourceLock in ['', '{LEASE_LOCK}']",
            "message": LEASE_LOCK_ONLY,
        },
    ]
}


class Resources(Model):
    """The scheduler container's resources, as a pod's."""

    model_config = ConfigDict(extra="allow", json_schema_extra=PRESERVE)


class SchedulerProfileSpec(Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.replicas <= 1 || self.leaderElection.leaderElect",
                    "message": "more than one replica needs leaderElection.leaderElect: true, "
                    "or the replicas would all schedule at once",
                },
                {
                    "rule": "self.podMaxBackoffSeconds >= self.podInitialBackoffSeconds",
                    "message": "podMaxBackoffSeconds must be at least podInitialBackoffSeconds",
                },
            ]
        }
    )

    profiles: list[Profile] = Field(
        min_length=1,
        max_length=MAX_PROFILES,
        description="The scheduler's profiles, one per schedulerName.",
        json_schema_extra=list_map("schedulerName"),
    )
    parallelism: int = Field(
        default=16, ge=1, le=INT32_MAX, description="Goroutines that filter and score nodes."
    )
    percentage_of_nodes_to_score: int = Field(
        default=0,
        ge=0,
        le=100,
        description="Share of nodes scored once enough fit; 0 means kube-scheduler's adaptive "
        "5-50%.",
    )
    # No maximum: the API server holds an integer as an int64 and refuses a wider one (as
    # kubeherd render does), and refuses int64's largest value as a maximum.
    pod_initial_backoff_seconds: int = Field(
        default=1, ge=1, description="First retry delay of an unschedulable pod."
    )
    pod_max_backoff_seconds: int = Field(
        default=10, ge=1, description="Longest retry delay of an unschedulable pod."
    )
    leader_election: LeaderElection = Field(
        default_factory=LeaderElection,
        description="Leader election among the replicas, on a Lease of its own.",
        # The full default, not {}: the API server checks a default against the CEL rules
        # before it fills in the nested defaults.
        json_schema_extra={"default": _LEADER_DEFAULTS, **_DURATION_RULES},
    )
    replicas: int = Field(
        default=1, ge=0, le=10, description="Scheduler pods; more than one needs leader election."
    )
    image: str | None = Field(
        default=None,
        min_length=1,
        description="The kube-scheduler image; default: registry.k8s.io/kube-scheduler at the "
        "release of the API server's version (v1.34.4 for v1.34.4-eks-a737599 or v1.34.4+k3s1); "
        "nothing is rolled out while that version cannot be read. The configuration is checked "
        "for the image's Kubernetes minor; any other image, or a minor newer than kubeherd "
        "knows, judges the configuration itself before it rolls out.",
    )
    command: list[str] | None = Field(
        default=None,
        max_length=32,
        description="The binary to run in the image, with flags of your own; default: "
        "kube-scheduler (the official image has it on PATH). Flags that change leader election, "
        "the API server, credentials, authorization or the configuration file are refused.",
        json_schema_extra={
            "items": {
                "type": "string",
                "minLength": 1,
                "maxLength": 1024,
                "x-kubernetes-validations": [
                    {
                        "rule": f"!self.matches('{REFUSED_COMMAND_FLAG}')",
                        "message": REFUSED_COMMAND_FLAG_MESSAGE,
                    }
                ],
            }
        },
    )
    resources: Resources | None = Field(
        default=None, description="The scheduler container's requests and limits."
    )
    node_selector: dict[str, str] | None = Field(
        default=None, description="Nodes the scheduler pods may run on."
    )
    tolerations: list[Toleration] | None = Field(
        default=None, description="Taints the scheduler pods tolerate."
    )
    priority_class_name: str | None = Field(
        default=None,
        description="The scheduler pods' PriorityClass; default: system-cluster-critical in "
        "kube-system, the cluster's default elsewhere.",
    )
    image_pull_secrets: list[str] | None = Field(
        default=None,
        max_length=16,
        description="Secrets (in the SchedulerProfile's namespace) to pull a private image with.",
        json_schema_extra={"items": {"type": "string", "minLength": 1, "maxLength": 253}},
    )
    extra_cluster_roles: list[str] | None = Field(
        default=None,
        max_length=16,
        description="ClusterRoles to bind to the scheduler's ServiceAccount besides "
        "system:kube-scheduler and system:volume-scheduler, for a custom image whose plugins "
        "read more (scheduler-plugins' podgroups, elasticquotas...). kubeherd may bind only "
        "the roles its own ClusterRole has `bind` on (the chart's "
        "schedulerProfiles.extraClusterRoles), and only for a requester who may bind them "
        "too. cluster-admin, admin, edit and other system: roles are refused.",
        json_schema_extra={
            "items": {
                "type": "string",
                "minLength": 1,
                "maxLength": 253,
                "x-kubernetes-validations": [
                    {
                        "rule": f"!(self in {_cel_list(BROAD_CLUSTER_ROLES)}) && "
                        f"(!self.startsWith('system:') || self in "
                        f"{_cel_list(SCHEDULER_CLUSTER_ROLES)})",
                        "message": REFUSED_CLUSTER_ROLE_MESSAGE,
                    }
                ],
            },
            "x-kubernetes-list-type": "set",
        },
    )


class SchedulerProfileStatus(Model):
    observed_generation: int | None = Field(
        default=None, description="The spec generation this status describes."
    )
    scheduler_names: str | None = Field(
        default=None, description="The profiles' scheduler names, comma-separated."
    )
    config_hash: str | None = Field(
        default=None, description="Hash of the running configuration (the pods carry it)."
    )
    replicas: int | None = Field(default=None, description="Scheduler pods.")
    ready_replicas: int | None = Field(default=None, description="Ready scheduler pods.")
    leader: str | None = Field(
        default=None, description="The Lease's holder: the pod that schedules now."
    )
    conditions: list[Condition] | None = Field(
        default=None,
        description="Valid (the spec passed every check), Available, Progressing.",
        json_schema_extra=list_map("type"),
    )


class SchedulerProfile(Model):
    """An extra kube-scheduler with its own profiles, RBAC and leader election."""

    api_version: str = Field(default=API_VERSION, description=API_VERSION)
    kind: str = Field(default=SCHEDULERPROFILE, description=SCHEDULERPROFILE)
    metadata: dict[str, Any] = Field(default_factory=dict, description="Standard metadata.")
    spec: SchedulerProfileSpec = Field(description="The configuration and how to run it.")
    status: SchedulerProfileStatus | None = Field(
        default=None, description="What kubeherd observed, written by kubeherd."
    )
