"""What the CustomDaemonSet tests create and look at: manifests, and a handle on the objects in
a test's namespace that waits for what a user would wait for."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
import yaml
from kubernetes import client

from localcluster.nodes import CONTROL_PLANE_NODE, CONTROL_PLANE_ROLE
from tests.helpers import REPO, eventually

GROUP, VERSION, PLURAL = "kubeherd.io", "v1alpha1", "customdaemonsets"
WORKERS = {"worker-1", "worker-2"}
ALL_NODES = WORKERS | {CONTROL_PLANE_NODE}
CONTROL_PLANE_TOLERATION = {"key": CONTROL_PLANE_ROLE, "operator": "Exists", "effect": "NoSchedule"}


def load_example(name: str) -> dict[str, Any]:
    """An example from examples/, moved into the test's namespace: the examples are tested."""
    manifest: dict[str, Any] = yaml.safe_load((REPO / "examples" / name).read_text())
    manifest["metadata"].pop("namespace", None)
    return manifest


# Seed 004's fluentd-elasticsearch DaemonSet, as a CustomDaemonSet.
FLUENTD = load_example("fluentd-elasticsearch.yaml")


def agent(name: str = "agent", **pod_spec: Any) -> dict[str, Any]:
    """A minimal CustomDaemonSet; `pod_spec` fields are merged into its template's spec."""
    labels = {"app": name}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "CustomDaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{"name": "agent", "image": "registry.k8s.io/pause:3.10"}],
                    **pod_spec,
                },
            },
        },
    }


class DaemonSets:
    """What a test does with CustomDaemonSets in its namespace, and what it looks at."""

    def __init__(
        self,
        custom: client.CustomObjectsApi,
        core: client.CoreV1Api,
        apps: client.AppsV1Api,
        ns: str,
    ) -> None:
        self.custom = custom
        self.core = core
        self.apps = apps
        self.namespace = ns

    def create(self, manifest: dict[str, Any]) -> str:
        self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, copy.deepcopy(manifest)
        )
        return str(manifest["metadata"]["name"])

    def get(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name
        )
        return found

    def patch_spec(self, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name, {"spec": spec}
        )

    def delete(self, name: str, propagation: str | None = None) -> None:
        """Delete as `kubectl delete` does; `propagation` is its --cascade (Foreground, ...)."""
        options = {"propagationPolicy": propagation} if propagation else None
        self.custom.delete_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name, body=options
        )

    def exists(self, name: str) -> bool:
        try:
            self.get(name)
        except client.ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    def pods(self, name: str) -> list[Any]:
        """The daemon pods of `name` that are not being deleted."""
        pods = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"kubeherd.io/customdaemonset={name}"
        ).items
        return [pod for pod in pods if pod.metadata.deletion_timestamp is None]

    def nodes_with_pods(self, name: str) -> set[str]:
        return {target_node_of(pod) for pod in self.pods(name)}

    def wait_for_nodes(
        self, name: str, nodes: set[str], *, running: bool = True, timeout: float = 60
    ) -> list[Any]:
        def settled() -> tuple[list[Any]] | None:
            pods = self.pods(name)
            placed = [target_node_of(pod) for pod in pods]
            if sorted(placed) != sorted(nodes):
                return None
            if running and any(pod.status.phase != "Running" for pod in pods):
                return None
            return (pods,)  # truthy even when no pods are wanted

        what = f"{name} pods on exactly {sorted(nodes)}"
        return eventually(settled, timeout=timeout, what=what)[0]

    def wait_for_status(self, name: str, timeout: float = 60, **expected: Any) -> dict[str, Any]:
        def matches() -> dict[str, Any] | None:
            status = self.get(name).get("status") or {}
            return status if all(status.get(k) == v for k, v in expected.items()) else None

        return eventually(matches, timeout=timeout, what=f"{name} status {expected}")

    def revisions(self, name: str) -> dict[int, str]:
        """The ControllerRevisions of `name`: revision number -> controller-revision-hash."""
        found = self.apps.list_namespaced_controller_revision(
            self.namespace, label_selector=f"kubeherd.io/customdaemonset={name}"
        ).items
        return {r.revision: r.metadata.labels["controller-revision-hash"] for r in found}

    def progressing(self, name: str) -> dict[str, Any]:
        conditions = (self.get(name).get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Progressing"), {})

    def events(self, name: str, reason: str | None = None) -> list[Any]:
        selector = f"involvedObject.kind=CustomDaemonSet,involvedObject.name={name}"
        events = self.core.list_namespaced_event(self.namespace, field_selector=selector).items
        return [e for e in events if reason is None or e.reason == reason]


def target_node_of(pod: Any) -> str:
    if pod.spec.node_name:
        return str(pod.spec.node_name)
    terms = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
    return str(terms.node_selector_terms[0].match_fields[0].values[0])


def revision_of(pod: Any) -> str:
    return str(pod.metadata.labels["controller-revision-hash"])


NEW_IMAGE = {
    "template": {"spec": {"containers": [{"name": "agent", "image": "registry.k8s.io/pause:3.9"}]}}
}


def watch_rollout(daemonsets: DaemonSets, name: str, nodes: set[str], old_revision: str) -> int:
    """Poll the pods until every node runs a Ready pod of the new template; return the largest
    number of nodes seen at once without a Ready pod."""
    worst = 0
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        pods = daemonsets.pods(name)
        ready_nodes = {
            target_node_of(p)
            for p in pods
            if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        }
        worst = max(worst, len(nodes - ready_nodes))
        done = len(pods) == len(nodes) and all(revision_of(p) != old_revision for p in pods)
        if done and ready_nodes == nodes:
            return worst
        time.sleep(0.05)
    pytest.fail("the rollout did not finish in 90 s")
