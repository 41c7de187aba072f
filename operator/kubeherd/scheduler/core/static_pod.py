"""A SchedulerProfile's kube-scheduler as a static Pod, the kubeadm way, for
`kubeherd render --static-pod`: the node's kubelet runs it from /etc/kubernetes/manifests with
the node's scheduler.conf, without the operator. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubeherd.api.identifiers import is_dns_subdomain
from kubeherd.scheduler.core.images import scheduler_image
from kubeherd.scheduler.core.objects import CONFIG_HASH_ANNOTATION

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
