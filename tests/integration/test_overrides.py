"""Per-pool resource overrides (spec.resourceOverrides) against the real control plane, with
`kubeherd run` as a process and kwok nodes labelled as a large pool: the pods of the pool get
the override's resources and an annotation naming it, the others the template's, and changing
the override replaces only the pool's pods."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import TrackedFakeNodes, eventually
from tests.integration.daemonsets import (
    WORKERS,
    DaemonSets,
    agent,
    load_example,
    target_node_of,
)

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

POOL_LABEL = "kubeherd.io/test-pool"
LARGE_NODES = {"pool-large-1", "pool-large-2"}
ANNOTATION = "kubeherd.io/resource-override"
PER_POOL = load_example("per-pool-resources.yaml")
TEMPLATE_RESOURCES = {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "32Mi"}}


def large_nodes_override(memory: str) -> list[dict[str, Any]]:
    return [
        {
            "name": "large-nodes",
            "nodeSelector": {"matchLabels": {POOL_LABEL: "large"}},
            "containers": [
                {
                    "name": "agent",
                    "resources": {"requests": {"memory": memory}, "limits": {"memory": memory}},
                }
            ],
        }
    ]


def resources_by_node(pods: list[Any]) -> dict[str, tuple[dict[str, str], dict[str, str]]]:
    """Per node: its pod's agent container's requests and limits."""
    return {
        target_node_of(pod): (
            dict(pod.spec.containers[0].resources.requests or {}),
            dict(pod.spec.containers[0].resources.limits or {}),
        )
        for pod in pods
    }


def test_an_override_applies_to_its_pool_and_a_change_replaces_only_its_pods(
    daemonsets: DaemonSets, fake_nodes: TrackedFakeNodes
) -> None:
    for node in sorted(LARGE_NODES):
        fake_nodes.add(node, labels={POOL_LABEL: "large"})
    nodes = WORKERS | LARGE_NODES
    manifest = agent(
        containers=[
            {
                "name": "agent",
                "image": "registry.k8s.io/pause:3.10",
                "resources": TEMPLATE_RESOURCES,
            }
        ]
    )
    manifest["spec"]["updateStrategy"] = {"rollingUpdate": {"maxUnavailable": 4}}
    manifest["spec"]["resourceOverrides"] = large_nodes_override("64Mi")
    name = daemonsets.create(manifest)

    pods = daemonsets.wait_for_nodes(name, nodes)

    resources = resources_by_node(pods)
    for node in LARGE_NODES:
        assert resources[node] == ({"cpu": "10m", "memory": "64Mi"}, {"memory": "64Mi"})
    for node in WORKERS:
        assert resources[node] == ({"cpu": "10m", "memory": "16Mi"}, {"memory": "32Mi"})
    annotations = {
        target_node_of(p): str((p.metadata.annotations or {}).get(ANNOTATION)) for p in pods
    }
    # `<name>/<hash of what it sets>`, the same on every node of the pool.
    assert len({annotations[node] for node in LARGE_NODES}) == 1
    assert annotations["pool-large-1"].startswith("large-nodes/")
    assert {annotations[node] for node in WORKERS} == {"None"}
    uids = {target_node_of(p): p.metadata.uid for p in pods}
    eventually(
        lambda: daemonsets.progressing(name).get("reason") == "RolloutComplete",
        what="the first rollout complete",
    )

    daemonsets.patch_spec(name, {"resourceOverrides": large_nodes_override("96Mi")})

    def replaced() -> tuple[list[Any]] | None:
        pods = daemonsets.wait_for_nodes(name, nodes)
        fresh = {target_node_of(p) for p in pods if p.metadata.uid != uids[target_node_of(p)]}
        return (pods,) if fresh >= LARGE_NODES else None

    pods = eventually(replaced, timeout=120, what="the large nodes' pods replaced")[0]
    resources = resources_by_node(pods)
    for node in LARGE_NODES:
        assert resources[node] == ({"cpu": "10m", "memory": "96Mi"}, {"memory": "96Mi"})
    # The other nodes' pods are the very same ones.
    assert {target_node_of(p): p.metadata.uid for p in pods if target_node_of(p) in WORKERS} == {
        node: uids[node] for node in WORKERS
    }
    eventually(
        lambda: daemonsets.progressing(name).get("reason") == "RolloutComplete",
        what="the override's rollout complete",
    )
    status = daemonsets.get(name)["status"]
    assert status["updatedNumberScheduled"] == len(nodes)
    assert status["resourceOverrides"] == [{"name": "large-nodes", "nodes": len(LARGE_NODES)}]
    # The override is no new revision of the template.
    assert len(daemonsets.revisions(name)) == 1


def test_the_per_pool_example_gives_a_labelled_node_the_overrides_memory(
    daemonsets: DaemonSets, fake_nodes: TrackedFakeNodes
) -> None:
    fake_nodes.add("pool-m5-1", labels={"node.kubernetes.io/instance-type": "m5.4xlarge"})
    name = daemonsets.create(PER_POOL)

    pods = daemonsets.wait_for_nodes(name, WORKERS | {"pool-m5-1"})

    resources = resources_by_node(pods)
    assert resources["pool-m5-1"] == ({"cpu": "10m", "memory": "256Mi"}, {"memory": "512Mi"})
    assert resources["worker-1"] == ({"cpu": "10m", "memory": "32Mi"}, {"memory": "64Mi"})


def test_with_in_place_updates_a_node_that_cannot_resize_gets_a_new_pod(
    daemonsets: DaemonSets, fake_nodes: TrackedFakeNodes
) -> None:
    """kwok nodes report no support for resize, and the API server refuses to resize their
    pods: the override's change then replaces the pod, as a refused resize of a template does."""
    fake_nodes.add("pool-large-3", labels={POOL_LABEL: "large"})
    nodes = WORKERS | {"pool-large-3"}
    manifest = agent(
        containers=[
            {
                "name": "agent",
                "image": "registry.k8s.io/pause:3.10",
                "resources": TEMPLATE_RESOURCES,
            }
        ]
    )
    manifest["spec"]["updateStrategy"] = {
        "rollingUpdate": {"rollingUpdateType": "InPlaceIfPossible", "maxUnavailable": 3}
    }
    manifest["spec"]["resourceOverrides"] = large_nodes_override("64Mi")
    name = daemonsets.create(manifest)
    before = {target_node_of(p): p.metadata.uid for p in daemonsets.wait_for_nodes(name, nodes)}

    daemonsets.patch_spec(name, {"resourceOverrides": large_nodes_override("96Mi")})

    def replaced() -> tuple[dict[str, Any]] | None:
        pods = {target_node_of(p): p for p in daemonsets.wait_for_nodes(name, nodes)}
        fresh = pods["pool-large-3"].metadata.uid != before["pool-large-3"]
        return (pods,) if fresh else None

    after = eventually(replaced, what="the large node's pod replaced")[0]
    large = after["pool-large-3"]
    assert large.spec.containers[0].resources.limits == {"memory": "96Mi"}
    assert {n: after[n].metadata.uid for n in WORKERS} == {n: before[n] for n in WORKERS}
    why = "on node pool-large-3 because it cannot be resized in place"
    eventually(
        lambda: [
            e.message for e in daemonsets.events(name, "SuccessfulDelete") if why in e.message
        ],
        what="an event saying why the pod was replaced",
    )
    eventually(
        lambda: daemonsets.progressing(name).get("reason") == "RolloutComplete",
        what="the override's rollout complete",
    )
