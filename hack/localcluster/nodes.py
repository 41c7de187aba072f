"""Fake nodes: Node objects that kwok adopts (by annotation), marks Ready and keeps alive.

The manifests are plain data. `FakeNodes` is the small helper tests use to add, remove, label
and taint nodes; it writes only to the nodes of this local cluster, which exist for the tests.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

# kwok manages only the nodes carrying this annotation (--manage-nodes-with-annotation-selector).
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_ANNOTATION_VALUE = "fake"
CONTROL_PLANE_ROLE = "node-role.kubernetes.io/control-plane"
CONTROL_PLANE_NODE = "control-plane"
ZONE_LABEL = "topology.kubernetes.io/zone"
ZONES = ("zone-a", "zone-b", "zone-c")
# A modest cloud VM: what a daemon pod and the scheduler's resource fit will see.
DEFAULT_CAPACITY = {"cpu": "4", "memory": "16Gi", "pods": "110", "ephemeral-storage": "100Gi"}

Manifest = dict[str, Any]


def worker_name(index: int) -> str:
    return f"worker-{index}"


def default_node_names(count: int) -> list[str]:
    """The first node is the control-plane node, the rest are workers: worker-1, worker-2, ..."""
    if count < 1:
        raise ValueError("a cluster needs at least one node")
    return [CONTROL_PLANE_NODE] + [worker_name(index) for index in range(1, count)]


def fake_node_manifest(
    name: str,
    *,
    zone: str,
    labels: Mapping[str, str] | None = None,
    taints: Iterable[Mapping[str, str]] = (),
    capacity: Mapping[str, str] | None = None,
) -> Manifest:
    resources = dict(capacity or DEFAULT_CAPACITY)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "kwok.4x16",
                "topology.kubernetes.io/region": "local",
                ZONE_LABEL: zone,
                "type": "kwok",
                **(labels or {}),
            },
        },
        "spec": {"taints": [dict(taint) for taint in taints]},
        # kwok's node-initialize stage keeps capacity and allocatable as given here.
        "status": {"capacity": resources, "allocatable": dict(resources)},
    }


def default_node_manifests(count: int) -> list[Manifest]:
    """`count` nodes spread over the zones; the first one is a tainted control-plane node."""
    manifests = []
    for index, name in enumerate(default_node_names(count)):
        zone = ZONES[index % len(ZONES)]
        if name == CONTROL_PLANE_NODE:
            manifests.append(
                fake_node_manifest(
                    name,
                    zone=zone,
                    labels={CONTROL_PLANE_ROLE: ""},
                    taints=[{"key": CONTROL_PLANE_ROLE, "effect": "NoSchedule"}],
                )
            )
        else:
            manifests.append(fake_node_manifest(name, zone=zone))
    return manifests


def is_ready(node: Any) -> bool:
    conditions = (node.status.conditions or []) if node.status else []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


class FakeNodes:
    """Add, remove, label and taint fake nodes through a kubernetes.client.CoreV1Api."""

    def __init__(self, core_v1: Any, *, parallelism: int = 8) -> None:
        self._core = core_v1
        self._parallelism = parallelism

    def create(self, manifests: list[Manifest], *, wait: bool = True, timeout: float = 120) -> None:
        """Create nodes that do not exist yet (an existing name is left as it is)."""
        from kubernetes.client.exceptions import ApiException

        def create_one(manifest: Manifest) -> None:
            try:
                self._core.create_node(manifest)
            except ApiException as error:
                if error.status != 409:
                    raise

        with ThreadPoolExecutor(self._parallelism) as pool:
            list(pool.map(create_one, manifests))
        if wait:
            self.wait_ready([m["metadata"]["name"] for m in manifests], timeout=timeout)

    def add(
        self,
        name: str,
        *,
        zone: str = ZONES[0],
        labels: Mapping[str, str] | None = None,
        taints: Iterable[Mapping[str, str]] = (),
        capacity: Mapping[str, str] | None = None,
        wait: bool = True,
    ) -> None:
        manifest = fake_node_manifest(
            name, zone=zone, labels=labels, taints=taints, capacity=capacity
        )
        self.create([manifest], wait=wait)

    def remove(self, name: str, *, wait: bool = True, timeout: float = 60) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self._core.delete_node(name)
        except ApiException as error:
            if error.status != 404:
                raise
        deadline = time.monotonic() + timeout
        while wait and self.exists(name):
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {name} was not deleted within {timeout}s")
            time.sleep(0.2)

    def exists(self, name: str) -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            self._core.read_node(name)
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    def label(self, name: str, labels: Mapping[str, str | None]) -> None:
        """Set labels; a value of None removes that label."""
        self._core.patch_node(name, {"metadata": {"labels": dict(labels)}})

    def taint(self, name: str, key: str, effect: str, value: str | None = None) -> None:
        """Add a taint, or replace the one with the same key and effect."""
        taints = [t for t in self._taints(name) if (t["key"], t["effect"]) != (key, effect)]
        taint = {"key": key, "effect": effect}
        if value is not None:
            taint["value"] = value
        self._set_taints(name, [*taints, taint])

    def untaint(self, name: str, key: str, effect: str | None = None) -> None:
        taints = [
            t
            for t in self._taints(name)
            if not (t["key"] == key and (effect is None or t["effect"] == effect))
        ]
        self._set_taints(name, taints)

    def _taints(self, name: str) -> list[dict[str, str]]:
        node = self._core.read_node(name)
        return [
            {k: v for k, v in {"key": t.key, "value": t.value, "effect": t.effect}.items() if v}
            for t in node.spec.taints or []
        ]

    def _set_taints(self, name: str, taints: list[dict[str, str]]) -> None:
        # A merge patch replaces the whole list, which is what removing a taint needs.
        self._core.patch_node(name, {"spec": {"taints": taints or None}})

    def wait_ready(self, names: Iterable[str], *, timeout: float = 120) -> None:
        waiting = set(names)
        deadline = time.monotonic() + timeout
        while waiting:
            ready = {node.metadata.name for node in self._core.list_node().items if is_ready(node)}
            waiting -= ready
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"nodes not Ready after {timeout}s: {sorted(waiting)}")
            time.sleep(0.2)
