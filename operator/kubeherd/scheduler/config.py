"""Render a SchedulerProfile's spec as the KubeSchedulerConfiguration kube-scheduler reads.

Pure: plain data in, plain data out. Only what the user set is written, except the leader
election lock, which always names the SchedulerProfile's own Lease (`kubeherd-<name>` unless the
spec names one): left to kube-scheduler's defaults it would be `kube-system/kube-scheduler`, the
default scheduler's, and the two would take turns leading.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from kubeherd.api.schedulerprofile import EXTENSION_POINTS

CONFIG_API_VERSION = "kubescheduler.config.k8s.io/v1"
CONFIG_KEY = "config.yaml"
_GLOBAL_FIELDS = (
    "parallelism",
    "percentageOfNodesToScore",
    "podInitialBackoffSeconds",
    "podMaxBackoffSeconds",
)
_LEADER_DEFAULTS = {"leaseDuration": "15s", "renewDeadline": "10s", "retryPeriod": "2s"}


@dataclass(frozen=True)
class Lock:
    name: str
    namespace: str


# The default lock's name: the resource's name alone could be any other component's Lease in
# that namespace (a SchedulerProfile named cluster-autoscaler in kube-system would contend with
# the cluster autoscaler, with RBAC that lets it win). Nothing but kubeherd names Leases so.
DEFAULT_LOCK_PREFIX = "kubeherd-"


def lease_lock(spec: Mapping[str, Any], name: str, namespace: str) -> Lock:
    election = spec.get("leaderElection") or {}
    return Lock(
        str(election.get("resourceName") or f"{DEFAULT_LOCK_PREFIX}{name}"),
        str(election.get("resourceNamespace") or namespace),
    )


def foreign_lock_namespace(spec: Mapping[str, Any], namespace: str) -> str:
    """Why the spec's lock may not be where it says, or "". kubeherd grants the scheduler
    create, get and update on its Lease: a lock in another namespace would let whoever may
    create a SchedulerProfile in one namespace take any Lease of another (an operator's leader
    election, say) and make its holder stand by."""
    election = spec.get("leaderElection") or {}
    elsewhere = election.get("resourceNamespace")
    if not elsewhere or elsewhere == namespace:
        return ""
    return (
        f"the Lease must be in the SchedulerProfile's own namespace {namespace}, not "
        f"{elsewhere}: its scheduler gets rights on that Lease, which must not reach another "
        "namespace (leave resourceNamespace out)"
    )


def _plugin_set(written: Mapping[str, Any]) -> dict[str, Any]:
    rendered: dict[str, Any] = {}
    for key in ("enabled", "disabled"):
        plugins = written.get(key)
        if plugins is not None:
            rendered[key] = [
                {"name": plugin["name"]}
                | ({"weight": plugin["weight"]} if plugin.get("weight") is not None else {})
                for plugin in plugins
            ]
    return rendered


def render_profile(profile: Mapping[str, Any]) -> dict[str, Any]:
    rendered: dict[str, Any] = {"schedulerName": profile["schedulerName"]}
    if profile.get("percentageOfNodesToScore") is not None:
        rendered["percentageOfNodesToScore"] = profile["percentageOfNodesToScore"]
    plugins = profile.get("plugins") or {}
    points = {
        point: _plugin_set(plugins[point]) for point in EXTENSION_POINTS if plugins.get(point)
    }
    if points:
        rendered["plugins"] = points
    if profile.get("pluginConfig"):
        rendered["pluginConfig"] = [
            {"name": entry["name"], "args": dict(entry.get("args") or {})}
            for entry in profile["pluginConfig"]
        ]
    return rendered


def render_configuration(
    spec: Mapping[str, Any], name: str, namespace: str, kubeconfig: str = ""
) -> dict[str, Any]:
    """The configuration for the SchedulerProfile `namespace/name`; an empty `kubeconfig`
    means the pod's service account, as kube-scheduler reads it."""
    election = spec.get("leaderElection") or {}
    lock = lease_lock(spec, name, namespace)
    configuration: dict[str, Any] = {
        "apiVersion": CONFIG_API_VERSION,
        "kind": "KubeSchedulerConfiguration",
    }
    for field in _GLOBAL_FIELDS:
        if spec.get(field) is not None:
            configuration[field] = spec[field]
    configuration["clientConnection"] = {"kubeconfig": kubeconfig}
    configuration["leaderElection"] = {
        "leaderElect": bool(election.get("leaderElect", True)),
        **{key: str(election.get(key) or default) for key, default in _LEADER_DEFAULTS.items()},
        "resourceLock": "leases",
        "resourceName": lock.name,
        "resourceNamespace": lock.namespace,
    }
    configuration["profiles"] = [render_profile(profile) for profile in spec["profiles"]]
    return configuration


def configuration_yaml(configuration: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(configuration), sort_keys=False)


def configuration_hash(text: str) -> str:
    """Short and stable: the scheduler pods carry it, so a new configuration rolls them."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]
