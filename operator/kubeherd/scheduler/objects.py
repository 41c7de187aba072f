"""The Kubernetes objects that run a SchedulerProfile's kube-scheduler. Pure.

In a cluster (what the operator applies): a ServiceAccount, an immutable ConfigMap per
configuration (named by its hash, so the pods of an older ReplicaSet keep reading the
configuration they started with, and `kubectl rollout undo` brings it back with the template),
ClusterRoleBindings to the built-in scheduler roles and to the extra ClusterRoles the spec names,
a RoleBinding that lets kube-scheduler read the authentication ConfigMap in kube-system, a Role
and RoleBinding for its own Lease, a NetworkPolicy that lets it reach the API server, a
PodDisruptionBudget when it has standbys, and the Deployment. Without one: the static Pod of
`kubeherd render --static-pod`, the kubeadm way of the seeds.

Objects in the resource's namespace are owned by it (the garbage collector removes them). The
others cannot be: an owner reference may not cross namespaces or point from a cluster-scoped
object to a namespaced one. Every object carries the resource's uid in a label, which is how
kubeherd finds them to delete, and how it tells its objects from someone else's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubeherd.api.identifiers import is_dns_subdomain
from kubeherd.meta import controller_reference
from kubeherd.scheduler.config import CONFIG_KEY, Lock

KIND = "SchedulerProfile"
OWNER_UID_LABEL = "kubeherd.io/schedulerprofile-uid"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
CONFIG_HASH_ANNOTATION = "kubeherd.io/config-hash"
# The hash of the manifest kubeherd applied: equal means there is nothing to write. A label, not
# an annotation: `kubectl rollout undo` replaces a Deployment's annotations with the old
# ReplicaSet's and leaves its labels, so an undo does not look like a spec kubeherd has yet to
# apply (kubeherd leaves it in place until the SchedulerProfile changes).
MANIFEST_HASH_LABEL = "kubeherd.io/manifest-hash"
# On each configuration's ConfigMap: the scheduler names it runs, for the status once its pods do.
SCHEDULER_NAMES_ANNOTATION = "kubeherd.io/scheduler-names"
CONFIG_DIR = "/etc/kubernetes/kubeherd"
SECURE_PORT = 10259
PROBE_TIMEOUT_SECONDS = 15
# Where the scheduler pods get system-cluster-critical unless the spec names a class.
CRITICAL_NAMESPACE = "kube-system"
# Where the API server keeps the authentication settings kube-scheduler reads.
AUTHENTICATION_NAMESPACE = "kube-system"
# Any non-root uid works: kube-scheduler writes nothing to disk (its serving certificate is
# generated in memory).
NON_ROOT_UID = 65532
# kube-scheduler caches every pod and node: its memory grows with the cluster, from about
# 100 MiB on a small one to GiBs on large ones. The request is what a small-to-medium cluster
# needs, so the pod is not the first one evicted under memory pressure; large clusters set
# spec.resources.
DEFAULT_RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}}
RBAC = "rbac.authorization.k8s.io"
LEASES = "coordination.k8s.io"
HOSTNAME_KEY = "kubernetes.io/hostname"
ZONE_KEY = "topology.kubernetes.io/zone"

OFFICIAL_IMAGE = "registry.k8s.io/kube-scheduler"
# The default scheduler of a kubeadm node already listens on 10259 in the host's network; a
# second static SchedulerProfile on one node needs a port of its own (render --port).
STATIC_POD_PORT = 10260
STATIC_POD_KUBECONFIG = "/etc/kubernetes/scheduler.conf"
# A directory of kubeherd's own: /etc/kubernetes/<name> would let a SchedulerProfile named
# `manifests` or `pki` write into kubeadm's directories.
STATIC_CONFIG_ROOT = "/etc/kubernetes/kubeherd"
# Before the static Pod's name and file name: a kubelet runs one pod of a name per node, so a
# SchedulerProfile named `kube-scheduler` or `etcd` would replace kubeadm's own.
STATIC_POD_PREFIX = "kubeherd-"


def scheduler_image(spec: Mapping[str, Any], version: str = "") -> str:
    """The spec's image, else the official one of `version` (the cluster's release)."""
    if spec.get("image"):
        return str(spec["image"])
    if not version:
        raise ValueError("no spec.image and no Kubernetes release: which kube-scheduler to run?")
    return f"{OFFICIAL_IMAGE}:{version}"


def is_custom_image(spec: Mapping[str, Any]) -> bool:
    """Any image but the official one may hold out-of-tree plugins."""
    image = spec.get("image")
    return bool(image) and not str(image).startswith(f"{OFFICIAL_IMAGE}:")


def official_release(image: str) -> str | None:
    """The tag of an official kube-scheduler image (its Kubernetes release), else None."""
    prefix = f"{OFFICIAL_IMAGE}:"
    return image[len(prefix) :] if image.startswith(prefix) else None


def static_config_dir(name: str, root: str = STATIC_CONFIG_ROOT) -> str:
    return f"{root}/{name}"


def static_pod_name(name: str) -> str:
    return f"{STATIC_POD_PREFIX}{name}"


def _probe(path: str, port: int, **timing: int) -> dict[str, Any]:
    return {
        "httpGet": {"host": "127.0.0.1", "path": path, "port": port, "scheme": "HTTPS"},
        **timing,
    }


def static_pod(
    spec: Mapping[str, Any],
    name: str,
    version: str = "",
    *,
    port: int = STATIC_POD_PORT,
    kubeconfig: str = STATIC_POD_KUBECONFIG,
    config_root: str = STATIC_CONFIG_ROOT,
    config_hash: str = "",
) -> dict[str, Any]:
    """A kube-scheduler static Pod for a kubeadm control-plane node's /etc/kubernetes/manifests.
    It reads its configuration from /etc/kubernetes/kubeherd/<name>/config.yaml and logs in with
    the node's `kubeconfig` (scheduler.conf), both from the host. `version` should be the node's
    Kubernetes release (the caller asks for it: a static pod has no API server to read it
    from). The kubelet restarts a static pod only when its manifest changes: `config_hash`, the
    configuration's, makes a new configuration a new manifest."""
    if not is_dns_subdomain(name):
        # The name is a directory on the node: `../../pki` would mount kubeadm's keys.
        raise ValueError(f"a static Pod's name must be a DNS-1123 subdomain, not {name!r}")
    config_dir = static_config_dir(name, config_root)
    command = [
        *(spec.get("command") or ["kube-scheduler"]),
        f"--config={config_dir}/config.yaml",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
    ]
    container: dict[str, Any] = {
        "name": "kube-scheduler",
        "image": scheduler_image(spec, version),
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "resources": dict(spec.get("resources") or {"requests": {"cpu": "100m"}}),
        "startupProbe": _probe(
            "/livez", port, initialDelaySeconds=10, periodSeconds=10, failureThreshold=24
        ),
        "livenessProbe": _probe(
            "/livez", port, initialDelaySeconds=10, periodSeconds=10, failureThreshold=8
        ),
        "readinessProbe": _probe("/readyz", port, periodSeconds=1, failureThreshold=3),
        "volumeMounts": [
            {"name": "config", "mountPath": config_dir, "readOnly": True},
            {"name": "kubeconfig", "mountPath": kubeconfig, "readOnly": True},
        ],
    }
    metadata: dict[str, Any] = {
        "name": static_pod_name(name),
        "namespace": "kube-system",
        "labels": {"component": static_pod_name(name), "tier": "control-plane"},
    }
    if config_hash:
        metadata["annotations"] = {CONFIG_HASH_ANNOTATION: config_hash}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "containers": [container],
            "hostNetwork": True,
            "priorityClassName": spec.get("priorityClassName") or "system-node-critical",
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "volumes": [
                # Both must be there: the kubelet waits for them, saying so in the pod's events,
                # and creates nothing on the host.
                {"name": "config", "hostPath": {"path": config_dir, "type": "Directory"}},
                {"name": "kubeconfig", "hostPath": {"path": kubeconfig, "type": "File"}},
            ],
        },
    }


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
            KIND,
        )


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


def _object(
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


def _binding(
    owner: Owner, kind: str, name: str, namespace: str | None, role_kind: str, role: str
) -> dict[str, Any]:
    return _object(
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
        _object(
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
    return _object(
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
    return _object(
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
    return _object(
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
        _object(owner, "v1", "ServiceAccount", owner.name, owner.namespace),
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
    manifest = _object(
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
