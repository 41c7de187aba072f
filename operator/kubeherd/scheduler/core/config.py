"""Render a SchedulerProfile's spec as the KubeSchedulerConfiguration kube-scheduler reads.

Pure: plain data in, plain data out. Only what the user set is written, except the leader
election lock, which always names the SchedulerProfile's own Lease (`kubeherd-<name>` unless the
spec names one): left to kube-scheduler's defaults it would be `kube-system/kube-scheduler`, the
default scheduler's, and the two would take turns leading.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from kubeherd.api.schedulerprofile_rules import (
    EXTENSION_POINTS,
    LEADER_ELECTION_DEFAULTS,
    LEASE_LOCK,
)

CONFIG_API_VERSION = "kubescheduler.config.k8s.io/v1"
CONFIG_KEY = "config.yaml"
_GLOBAL_FIELDS = (
    "parallelism",
    "percentageOfNodesToScore",
    "podInitialBackoffSeconds",
    "podMaxBackoffSeconds",
)


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
        # The args as written: kube-scheduler decodes them, and a rewrite here (null as {}, a
        # string as a mapping) would be a configuration the user never wrote.
        rendered["pluginConfig"] = [
            {"name": entry["name"]} | ({"args": entry["args"]} if "args" in entry else {})
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
        **{
            key: str(election.get(key) or default)
            for key, default in LEADER_ELECTION_DEFAULTS.items()
        },
        # As written; kube-scheduler takes only leases (and an empty kind is its default).
        "resourceLock": str(election.get("resourceLock", LEASE_LOCK)),
        "resourceName": lock.name,
        "resourceNamespace": lock.namespace,
    }
    configuration["profiles"] = [render_profile(profile) for profile in spec["profiles"]]
    return configuration


# A plain scalar go-yaml (YAML 1.1, as kube-scheduler reads its file) takes for a string. PyYAML
# leaves some others plain that go-yaml reads as a bool or a number (`y`, `n`, `1e3`, `0b1`,
# `1_000`): those, and anything not matching this, are written quoted.
_PLAIN_STRING = re.compile(r"[A-Za-z0-9_/][-A-Za-z0-9_./]*")
_GO_YAML_NUMBER = re.compile(
    r"[-+]?(?:\.[0-9]+|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?0[xXbBoO][0-9a-fA-F_]+"
)
_GO_YAML_NON_STRINGS = frozenset(
    word
    for spelling in ("y", "yes", "n", "no", "true", "false", "on", "off", "null")
    for word in (spelling, spelling.capitalize(), spelling.upper())
)


class _GoYamlDumper(yaml.SafeDumper):
    pass


def _represent_string(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    plain = (
        _PLAIN_STRING.fullmatch(text) is not None
        and _GO_YAML_NUMBER.fullmatch(text) is None
        and text not in _GO_YAML_NON_STRINGS
    )
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=None if plain else '"')


_GoYamlDumper.add_representer(str, _represent_string)


def configuration_yaml(configuration: Mapping[str, Any]) -> str:
    return yaml.dump(dict(configuration), Dumper=_GoYamlDumper, sort_keys=False)


def configuration_hash(text: str) -> str:
    """Short and stable: the scheduler pods carry it, so a new configuration rolls them."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def configuration_text(spec: Mapping[str, Any], name: str, namespace: str) -> str:
    """The configuration file a SchedulerProfile's kube-scheduler reads."""
    return configuration_yaml(render_configuration(spec, name, namespace))
