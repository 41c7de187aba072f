"""The Kubernetes objects that run a SchedulerProfile's kube-scheduler. Pure.

In a cluster (what the operator applies): a ServiceAccount, a ConfigMap with the configuration,
ClusterRoleBindings to the built-in scheduler roles, a RoleBinding that lets kube-scheduler read
the authentication ConfigMap in kube-system, a Role and RoleBinding for its own Lease, and the
Deployment. Without one: the static Pod of `kubeherd render --static-pod`, the kubeadm way of the
seeds.

Objects in the resource's namespace are owned by it (the garbage collector removes them). The
others cannot be: an owner reference may not cross namespaces or point from a cluster-scoped
object to a namespaced one. Every object carries the resource's uid in a label, which is how
kubeherd finds them to delete, and how it tells its objects from someone else's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubeherd.meta import controller_reference
from kubeherd.scheduler.config import CONFIG_KEY, Lock
from kubeherd.scheduler.plugins import KUBE_SCHEDULER_VERSION

KIND = "SchedulerProfile"
OWNER_UID_LABEL = "kubeherd.io/schedulerprofile-uid"
CONFIG_HASH_ANNOTATION = "kubeherd.io/config-hash"
# The hash of the manifest kubeherd applied: equal means there is nothing to write.
MANIFEST_HASH_ANNOTATION = "kubeherd.io/manifest-hash"
CONFIG_DIR = "/etc/kubernetes/kubeherd"
SECURE_PORT = 10259
PROBE_TIMEOUT_SECONDS = 15
# Where the scheduler pods get system-cluster-critical unless the spec names a class.
CRITICAL_NAMESPACE = "kube-system"
# Any non-root uid works: kube-scheduler writes nothing to disk (its serving certificate is
# generated in memory).
NON_ROOT_UID = 65532
DEFAULT_RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}}
RBAC = "rbac.authorization.k8s.io"
LEASES = "coordination.k8s.io"

OFFICIAL_IMAGE = "registry.k8s.io/kube-scheduler"
# The default scheduler of a kubeadm node already listens on 10259 in the host's network.
STATIC_POD_PORT = 10260
STATIC_POD_KUBECONFIG = "/etc/kubernetes/scheduler.conf"


def scheduler_image(spec: Mapping[str, Any], version: str = KUBE_SCHEDULER_VERSION) -> str:
    return str(spec.get("image") or f"{OFFICIAL_IMAGE}:{version}")


def is_custom_image(spec: Mapping[str, Any]) -> bool:
    """Any image but the official one may hold out-of-tree plugins."""
    image = spec.get("image")
    return bool(image) and not str(image).startswith(f"{OFFICIAL_IMAGE}:")


def official_release(image: str) -> str | None:
    """The tag of an official kube-scheduler image (its Kubernetes release), else None."""
    prefix = f"{OFFICIAL_IMAGE}:"
    return image[len(prefix) :] if image.startswith(prefix) else None


def static_config_dir(name: str) -> str:
    return f"/etc/kubernetes/{name}"


def _probe(path: str, port: int, **timing: int) -> dict[str, Any]:
    return {
        "httpGet": {"host": "127.0.0.1", "path": path, "port": port, "scheme": "HTTPS"},
        **timing,
    }


def static_pod(
    spec: Mapping[str, Any], name: str, version: str = KUBE_SCHEDULER_VERSION
) -> dict[str, Any]:
    """A kube-scheduler static Pod for a kubeadm control-plane node's /etc/kubernetes/manifests.
    It reads its configuration from /etc/kubernetes/<name>/config.yaml and logs in with the
    node's scheduler.conf, both from the host."""
    config_dir = static_config_dir(name)
    command = [
        *(spec.get("command") or ["kube-scheduler"]),
        f"--config={config_dir}/config.yaml",
        f"--authentication-kubeconfig={STATIC_POD_KUBECONFIG}",
        f"--authorization-kubeconfig={STATIC_POD_KUBECONFIG}",
        "--bind-address=127.0.0.1",
        f"--secure-port={STATIC_POD_PORT}",
    ]
    container: dict[str, Any] = {
        "name": "kube-scheduler",
        "image": scheduler_image(spec, version),
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "resources": dict(spec.get("resources") or {"requests": {"cpu": "100m"}}),
        "startupProbe": _probe(
            "/livez", STATIC_POD_PORT, initialDelaySeconds=10, periodSeconds=10, failureThreshold=24
        ),
        "livenessProbe": _probe(
            "/livez", STATIC_POD_PORT, initialDelaySeconds=10, periodSeconds=10, failureThreshold=8
        ),
        "readinessProbe": _probe("/readyz", STATIC_POD_PORT, periodSeconds=1, failureThreshold=3),
        "volumeMounts": [
            {"name": "config", "mountPath": config_dir, "readOnly": True},
            {"name": "kubeconfig", "mountPath": STATIC_POD_KUBECONFIG, "readOnly": True},
        ],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "kube-system",
            "labels": {"component": name, "tier": "control-plane"},
        },
        "spec": {
            "containers": [container],
            "hostNetwork": True,
            "priorityClassName": spec.get("priorityClassName") or "system-node-critical",
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "volumes": [
                {
                    "name": "config",
                    "hostPath": {"path": config_dir, "type": "DirectoryOrCreate"},
                },
                {
                    "name": "kubeconfig",
                    "hostPath": {"path": STATIC_POD_KUBECONFIG, "type": "FileOrCreate"},
                },
            ],
        },
    }


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
        of one name in different namespaces must not collide."""
        return f"kubeherd:{self.namespace}:{self.name}:{purpose}"

    @property
    def config_map(self) -> str:
        return f"{self.name}-config"

    @property
    def reference(self) -> dict[str, Any]:
        return controller_reference(
            {"metadata": {"name": self.name, "uid": self.uid}},
            KIND,
        )


def selector_labels(owner: Owner) -> dict[str, str]:
    return {"app.kubernetes.io/name": "kube-scheduler", "app.kubernetes.io/instance": owner.name}


def _labels(owner: Owner) -> dict[str, str]:
    return {
        **selector_labels(owner),
        "app.kubernetes.io/managed-by": "kubeherd",
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
    metadata["annotations"] = {MANIFEST_HASH_ANNOTATION: manifest_hash(manifest)}
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


def rbac_objects(owner: Owner, lock: Lock) -> list[dict[str, Any]]:
    """What the scheduler's ServiceAccount needs. The built-in system:kube-scheduler role grants
    leases only on kube-system/kube-scheduler, the default scheduler's: the Role here grants the
    scheduler its own Lease instead of widening a built-in role."""
    lease_role = owner.cluster_unique("leader-election")
    return [
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
            "kube-system",
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


def deployment(
    spec: Mapping[str, Any], owner: Owner, *, image: str, config_hash: str
) -> dict[str, Any]:
    """The Deployment running kube-scheduler with the ConfigMap's configuration. The config hash
    in the pod template makes a new configuration roll the pods."""
    replicas = int(spec.get("replicas", 1))
    container: dict[str, Any] = {
        "name": "kube-scheduler",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": [
            *(spec.get("command") or ["kube-scheduler"]),
            f"--config={CONFIG_DIR}/{CONFIG_KEY}",
        ],
        "ports": [{"name": "https", "containerPort": SECURE_PORT, "protocol": "TCP"}],
        # As kubeadm probes kube-scheduler: /livez for liveness, /readyz (informers synced).
        "startupProbe": _https_probe("/livez", periodSeconds=10, failureThreshold=24),
        "livenessProbe": _https_probe("/livez", periodSeconds=10, failureThreshold=8),
        "readinessProbe": _https_probe("/readyz", periodSeconds=5, failureThreshold=3),
        "resources": dict(spec.get("resources") or DEFAULT_RESOURCES),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}],
    }
    pod_spec: dict[str, Any] = {
        "serviceAccountName": owner.name,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": NON_ROOT_UID,
            "runAsGroup": NON_ROOT_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [{"name": "config", "configMap": {"name": owner.config_map}}],
    }
    if replicas > 1:
        # Standby schedulers on other nodes: losing one node must not stop scheduling.
        pod_spec["affinity"] = {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": selector_labels(owner)},
                        },
                    }
                ]
            }
        }
    for field in ("nodeSelector", "tolerations", "priorityClassName"):
        if spec.get(field):
            pod_spec[field] = spec[field]
    if "priorityClassName" not in pod_spec and owner.namespace == CRITICAL_NAMESPACE:
        # A scheduler preempted or evicted first leaves its profiles' pods Pending. Outside
        # kube-system a critical class may be refused by quota (GKE limits them to it).
        pod_spec["priorityClassName"] = "system-cluster-critical"
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
                    "labels": selector_labels(owner),
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
    return [
        _object(owner, "v1", "ServiceAccount", owner.name, owner.namespace),
        _object(
            owner,
            "v1",
            "ConfigMap",
            owner.config_map,
            owner.namespace,
            data={CONFIG_KEY: configuration_text},
        ),
        *rbac_objects(owner, lock),
        deployment(spec, owner, image=image, config_hash=config_hash),
    ]
