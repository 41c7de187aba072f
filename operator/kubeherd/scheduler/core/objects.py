"""The Kubernetes objects that run a SchedulerProfile's kube-scheduler. Pure.

In a cluster (what the operator applies): a ServiceAccount, an immutable ConfigMap per
configuration (named by its hash, so the pods of an older ReplicaSet keep reading the
configuration they started with, and `kubectl rollout undo` brings it back with the template),
ClusterRoleBindings to the built-in scheduler roles and to the extra ClusterRoles the spec names,
a RoleBinding that lets kube-scheduler read the authentication ConfigMap in kube-system, a Role
and RoleBinding for its own Lease, a NetworkPolicy that lets it reach the API server, a
PodDisruptionBudget when it has standbys, and the Deployment. The RBAC objects are rbac.py's,
how they are marked as kubeherd's owner.py's; without a cluster, the static Pod of
`kubeherd render --static-pod` is static_pod.py's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubeherd.scheduler.core.config import CONFIG_KEY, Lock
from kubeherd.scheduler.core.owner import (
    Owner,
    owned_manifest,
    pod_labels,
    selector_labels,
)
from kubeherd.scheduler.core.rbac import rbac_objects

CONFIG_HASH_ANNOTATION = "kubeherd.io/config-hash"
# On each configuration's ConfigMap: the scheduler names it runs, for the status once its pods do.
SCHEDULER_NAMES_ANNOTATION = "kubeherd.io/scheduler-names"
CONFIG_DIR = "/etc/kubernetes/kubeherd"
SECURE_PORT = 10259
PROBE_TIMEOUT_SECONDS = 15
# Where the scheduler pods get system-cluster-critical unless the spec names a class.
CRITICAL_NAMESPACE = "kube-system"
# Any non-root uid works: kube-scheduler writes nothing to disk (its serving certificate is
# generated in memory).
NON_ROOT_UID = 65532
# kube-scheduler caches every pod and node: its memory grows with the cluster, from about
# 100 MiB on a small one to GiBs on large ones. The request is what a small-to-medium cluster
# needs, so the pod is not the first one evicted under memory pressure; large clusters set
# spec.resources.
DEFAULT_RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}}
HOSTNAME_KEY = "kubernetes.io/hostname"
ZONE_KEY = "topology.kubernetes.io/zone"


def _https_probe(path: str, **timing: int) -> dict[str, Any]:
    # kubeadm's timeout for this component: a TLS handshake on a busy node with a 100m request
    # can outlast the default 1 s, and readiness would flap.
    return {
        "httpGet": {"path": path, "port": SECURE_PORT, "scheme": "HTTPS"},
        "timeoutSeconds": PROBE_TIMEOUT_SECONDS,
        **timing,
    }


def spread_constraints(owner: Owner) -> list[dict[str, Any]]:
    """Standby schedulers on other nodes: losing one node (a drain, a crash) must not stop
    scheduling. Required across nodes, as the point of a standby is another node; preferred
    across zones, which small clusters do not have. Counted per ReplicaSet (pod-template-hash),
    so a rollout's new pods spread among themselves rather than around the old ones. Only the
    nodes the pods may use count (nodeSelector and taints honoured): on a single eligible node
    every replica still fits, rather than one waiting for a node that cannot take it."""
    selector = {"matchLabels": selector_labels(owner)}

    def constraint(key: str, when_unsatisfiable: str) -> dict[str, Any]:
        return {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": when_unsatisfiable,
            "labelSelector": selector,
            "matchLabelKeys": ["pod-template-hash"],
            "nodeAffinityPolicy": "Honor",
            "nodeTaintsPolicy": "Honor",
        }

    return [constraint(HOSTNAME_KEY, "DoNotSchedule"), constraint(ZONE_KEY, "ScheduleAnyway")]


def disruption_budget(owner: Owner) -> dict[str, Any]:
    """With standbys, a drain evicts one scheduler at a time (the others keep the Lease)."""
    return owned_manifest(
        owner,
        "policy/v1",
        "PodDisruptionBudget",
        owner.name,
        owner.namespace,
        spec={"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(owner)}},
    )


def network_policy(owner: Owner) -> dict[str, Any]:
    """For namespaces with default-deny policies. Egress: the API server, whose address and port
    differ by cluster (the kubernetes Service's 443, an endpoint's 6443, a managed offering's)
    and which a NetworkPolicy cannot name, so any destination. Ingress: the secure port only,
    where the kubelet probes /livez and /readyz."""
    return owned_manifest(
        owner,
        "networking.k8s.io/v1",
        "NetworkPolicy",
        owner.name,
        owner.namespace,
        spec={
            "podSelector": {"matchLabels": selector_labels(owner)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"ports": [{"protocol": "TCP", "port": SECURE_PORT}]}],
            "egress": [{}],
        },
    )


def pod_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": NON_ROOT_UID,
        "runAsGroup": NON_ROOT_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def scheduler_command(spec: Mapping[str, Any]) -> list[str]:
    """kube-scheduler's command line in a scheduler pod, reading its configuration's ConfigMap."""
    return [*(spec.get("command") or ["kube-scheduler"]), f"--config={CONFIG_DIR}/{CONFIG_KEY}"]


def config_volume(owner: Owner, config_hash: str) -> dict[str, Any]:
    return {"name": "config", "configMap": {"name": owner.config_map(config_hash)}}


def config_mount() -> dict[str, Any]:
    return {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}


def placement(spec: Mapping[str, Any], owner: Owner) -> dict[str, Any]:
    """Where a scheduler pod may run and with which pull secrets and priority (pod spec fields)."""
    fields: dict[str, Any] = {}
    if spec.get("imagePullSecrets"):
        fields["imagePullSecrets"] = [{"name": name} for name in spec["imagePullSecrets"]]
    for field in ("nodeSelector", "tolerations", "priorityClassName"):
        if spec.get(field):
            fields[field] = spec[field]
    if "priorityClassName" not in fields and owner.namespace == CRITICAL_NAMESPACE:
        # A scheduler preempted or evicted first leaves its profiles' pods Pending. Outside
        # kube-system a critical class may be refused by quota (GKE limits them to it).
        fields["priorityClassName"] = "system-cluster-critical"
    return fields


def deployment(
    spec: Mapping[str, Any], owner: Owner, *, image: str, config_hash: str
) -> dict[str, Any]:
    """The Deployment running kube-scheduler with its configuration's ConfigMap. The config hash
    in the pod template makes a new configuration roll the pods, and each ReplicaSet's template
    names the ConfigMap of its own configuration."""
    replicas = int(spec.get("replicas", 1))
    container: dict[str, Any] = {
        "name": "kube-scheduler",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": scheduler_command(spec),
        "ports": [{"name": "https", "containerPort": SECURE_PORT, "protocol": "TCP"}],
        # As kubeadm probes kube-scheduler: /livez for liveness, /readyz (informers synced).
        "startupProbe": _https_probe("/livez", periodSeconds=10, failureThreshold=24),
        "livenessProbe": _https_probe("/livez", periodSeconds=10, failureThreshold=8),
        "readinessProbe": _https_probe("/readyz", periodSeconds=5, failureThreshold=3),
        "resources": dict(spec.get("resources") or DEFAULT_RESOURCES),
        "securityContext": container_security_context(),
        "volumeMounts": [config_mount()],
    }
    pod_spec: dict[str, Any] = {
        "serviceAccountName": owner.name,
        "securityContext": pod_security_context(),
        "containers": [container],
        "volumes": [config_volume(owner, config_hash)],
    }
    if replicas > 1:
        pod_spec["topologySpreadConstraints"] = spread_constraints(owner)
    pod_spec.update(placement(spec, owner))
    return owned_manifest(
        owner,
        "apps/v1",
        "Deployment",
        owner.name,
        owner.namespace,
        spec={
            "replicas": replicas,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector_labels(owner)},
            "template": {
                "metadata": {
                    "labels": pod_labels(owner),
                    "annotations": {CONFIG_HASH_ANNOTATION: config_hash},
                },
                "spec": pod_spec,
            },
        },
    )


def owned_objects(
    spec: Mapping[str, Any],
    owner: Owner,
    lock: Lock,
    *,
    image: str,
    configuration_text: str,
    config_hash: str,
) -> list[dict[str, Any]]:
    """Everything a SchedulerProfile runs on, in the order to apply it: the Deployment last, so
    its pods start with their configuration and permissions in place."""
    replicas = int(spec.get("replicas", 1))
    return [
        owned_manifest(owner, "v1", "ServiceAccount", owner.name, owner.namespace),
        config_map(owner, configuration_text, config_hash, scheduler_names(spec)),
        *rbac_objects(owner, lock, spec.get("extraClusterRoles") or ()),
        network_policy(owner),
        *([disruption_budget(owner)] if replicas > 1 else []),
        deployment(spec, owner, image=image, config_hash=config_hash),
    ]


def scheduler_names(spec: Mapping[str, Any]) -> str:
    return ", ".join(str(p["schedulerName"]) for p in spec.get("profiles") or [])


def config_map(
    owner: Owner, configuration_text: str, config_hash: str, names: str
) -> dict[str, Any]:
    """Immutable: what a ReplicaSet's pods read can never change under them (a bad edit cannot
    reach a running pod at its next restart), and the kubelet need not watch it."""
    manifest = owned_manifest(
        owner,
        "v1",
        "ConfigMap",
        owner.config_map(config_hash),
        owner.namespace,
        immutable=True,
        data={CONFIG_KEY: configuration_text},
    )
    manifest["metadata"]["annotations"] = {SCHEDULER_NAMES_ANNOTATION: names}
    return manifest


def config_maps_in_use(templates: Sequence[Mapping[str, Any]]) -> set[str]:
    """The ConfigMaps the pod templates (the Deployment's, its ReplicaSets') mount."""
    return {
        str(volume["configMap"]["name"])
        for template in templates
        for volume in ((template.get("spec") or {}).get("volumes") or [])
        if (volume.get("configMap") or {}).get("name")
    }
