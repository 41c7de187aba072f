"""The Kubernetes objects that run a SchedulerProfile's kube-scheduler. Pure.

So far: the static Pod of `kubeherd render --static-pod`, the kubeadm way of the seeds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubeherd.scheduler.plugins import KUBE_SCHEDULER_VERSION

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
