"""What the benchmarks create: one pod template, wrapped as a CustomDaemonSet, as a native
DaemonSet and as bare pods. Pure: plain data in, plain data out.

The template is a node agent that tolerates every taint, as kube-proxy and CNI agents do. So
every node is eligible from the moment it exists, and the measurements show the controllers,
not how fast kube-controller-manager lifts a new node's not-ready taint (some nodes a second).
"""

from __future__ import annotations

import copy
from typing import Any

from kubeherd.daemonset.eligibility import NODE_NAME_FIELD

Manifest = dict[str, Any]

NAMESPACE = "kubeherd-bench"
# Every object the benchmarks create carries it, so one selector finds (and cleans) them all.
BENCH_LABEL = "bench.kubeherd.io/workload"
IMAGE = "registry.k8s.io/pause:3.10"


def pod_template(workload: str) -> Manifest:
    return {
        "metadata": {"labels": {BENCH_LABEL: workload}},
        "spec": {
            "tolerations": [{"operator": "Exists"}],
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "agent",
                    "image": IMAGE,
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                }
            ],
        },
    }


def _daemonset(api_version: str, kind: str, workload: str, namespace: str) -> Manifest:
    """The same selector and pod template, for either controller."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": workload, "namespace": namespace, "labels": {BENCH_LABEL: workload}},
        "spec": {
            "selector": {"matchLabels": {BENCH_LABEL: workload}},
            "template": pod_template(workload),
        },
    }


def custom_daemonset(workload: str, namespace: str = NAMESPACE) -> Manifest:
    return _daemonset("kubeherd.io/v1alpha1", "CustomDaemonSet", workload, namespace)


def native_daemonset(workload: str, namespace: str = NAMESPACE) -> Manifest:
    return _daemonset("apps/v1", "DaemonSet", workload, namespace)


def pinned_pod(workload: str, node: str, namespace: str = NAMESPACE) -> Manifest:
    """The pod a daemon controller makes for `node`: the template, pinned by node affinity."""
    template = copy.deepcopy(pod_template(workload))
    spec = template["spec"]
    spec["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": NODE_NAME_FIELD, "operator": "In", "values": [node]}]}
                ]
            }
        }
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{workload}-{node}", "namespace": namespace, **template["metadata"]},
        "spec": spec,
    }
