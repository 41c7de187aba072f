"""What the benchmarks create: one pod template, wrapped as a CustomDaemonSet, as a native
DaemonSet and as bare pods. Pure: plain data in, plain data out.

The template is a node agent that tolerates every taint, as kube-proxy and CNI agents do. So
every node is eligible from the moment it exists, and the measurements show the controllers,
not how fast kube-controller-manager lifts a new node's not-ready taint (some nodes a second).
"""

from __future__ import annotations

import copy
from typing import Any

from kubeherd.daemonset.core.eligibility import NODE_NAME_FIELD

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


# B6: the worst one namespace's user can make kubeherd hold. The tenant's CustomDaemonSets match
# no node, so they cost the operator what it keeps of them and not the pods it would make.
TENANT_NAMESPACE = "kubeherd-tenant"
FOREIGN_NAMESPACE = "kubeherd-foreign"
NO_NODE_LABEL = "bench.kubeherd.io/no-such-node"
# The daemon pods' label key (kubeherd.daemonset.core.pods.OWNER_LABEL): anyone may set it.
OWNER_LABEL = "kubeherd.io/customdaemonset"
# An environment variable: many small items are what costs most in memory per byte of JSON.
_ENV_VALUE_LENGTH = 64


def large_template(workload: str, kib: int, variant: int = 0) -> Manifest:
    """A pod template of about `kib` KiB of JSON that matches no node; `variant` changes it, so
    that each value makes a new revision."""
    item_bytes = len('{"name":"VAR_00000","value":""},') + _ENV_VALUE_LENGTH
    env = [
        {"name": f"VAR_{index:05d}", "value": f"{variant:08d}".ljust(_ENV_VALUE_LENGTH, "x")}
        for index in range(max(1, kib * 1024 // item_bytes))
    ]
    return {
        "metadata": {"labels": {BENCH_LABEL: workload}},
        "spec": {
            "nodeSelector": {NO_NODE_LABEL: "true"},
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "agent", "image": IMAGE, "env": env}],
        },
    }


def tenant_daemonset(
    workload: str, kib: int, variant: int = 0, history_limit: int | None = None
) -> Manifest:
    manifest = custom_daemonset(workload, TENANT_NAMESPACE)
    manifest["spec"]["template"] = large_template(workload, kib, variant)
    if history_limit is not None:
        manifest["spec"]["revisionHistoryLimit"] = history_limit
    return manifest


def foreign_pod(index: int, owners: int = 10) -> Manifest:
    """A pod anyone can create that carries kubeherd's label key, in a namespace without any
    CustomDaemonSet. No scheduler is named that exists: it stays Pending, costing nothing."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"foreign-{index:05d}",
            "namespace": FOREIGN_NAMESPACE,
            "labels": {OWNER_LABEL: f"foreign-{index % owners}", BENCH_LABEL: "foreign"},
        },
        "spec": {
            "schedulerName": "bench-no-such-scheduler",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "agent", "image": IMAGE}],
        },
    }
