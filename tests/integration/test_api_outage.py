"""The control plane goes away and comes back: what changed meanwhile must reach the controller.

After kube-apiserver restarts, a watch cannot resume where it was (410 Gone) and lists again.
Nodes and daemon pods deleted while the watches were down are in no event at all: only the new
listing, where they are missing, says they are gone. The tests delete them straight from etcd
while the API server is down, so that no watcher can be told in any other way.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from localcluster.cluster import LocalCluster
from localcluster.nodes import ZONES, fake_node_manifest
from tests.helpers import TrackedFakeNodes
from tests.integration.daemonsets import NEW_IMAGE, WORKERS, DaemonSets, agent, target_node_of

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]


@pytest.fixture
def many_nodes(fake_nodes: TrackedFakeNodes, namespace: str) -> set[str]:
    """200 nodes named after the test: the nodes a test deletes behind every watcher's back must
    never come back under the same name in the next test. kwok, which missed their deletion, can
    keep their old leases and then never make the new nodes Ready."""
    names = [f"outage-{namespace.rsplit('-', 1)[-1]}-{index:03}" for index in range(200)]
    fake_nodes.create([fake_node_manifest(name, zone=ZONES[0]) for name in names], timeout=180)
    return set(names)


def converges_after(daemonsets: DaemonSets, name: str, eligible: set[str]) -> None:
    """What a user checks after an outage: pods on exactly the eligible nodes, the status says
    so, and the next template update reaches every node."""
    daemonsets.wait_for_nodes(name, eligible, timeout=120)
    daemonsets.wait_for_status(
        name, desiredNumberScheduled=len(eligible), numberAvailable=len(eligible), timeout=60
    )
    daemonsets.patch_spec(name, NEW_IMAGE)
    daemonsets.wait_for_status(
        name,
        desiredNumberScheduled=len(eligible),
        updatedNumberScheduled=len(eligible),
        numberAvailable=len(eligible),
        timeout=180,
    )


def test_nodes_and_pods_deleted_while_the_api_server_is_down_leave_the_view(
    daemonsets: DaemonSets,
    local_cluster: LocalCluster,
    fake_nodes: TrackedFakeNodes,
    many_nodes: set[str],
) -> None:
    name = daemonsets.create(agent())
    eligible = WORKERS | many_nodes
    pods = daemonsets.wait_for_nodes(name, eligible, timeout=180)
    gone_nodes = sorted(many_nodes)[:40]
    # Pods deleted on nodes that stay: each node must get a new one.
    victims = [pod for pod in pods if target_node_of(pod) in sorted(many_nodes)[40:60]]

    def behind_the_back() -> None:
        for node in gone_nodes:
            assert local_cluster.delete_from_etcd(f"/registry/minions/{node}") == 1
        for pod in victims:
            key = f"/registry/pods/{daemonsets.namespace}/{pod.metadata.name}"
            assert local_cluster.delete_from_etcd(key) == 1

    local_cluster.restart("kube-apiserver", while_down=behind_the_back)

    remaining = eligible - set(gone_nodes)
    daemonsets.wait_for_nodes(name, remaining, timeout=120)
    fake_nodes.add("after-outage")
    daemonsets.wait_for_nodes(name, remaining | {"after-outage"}, timeout=30)
    converges_after(daemonsets, name, remaining | {"after-outage"})


def test_an_etcd_restart_while_nodes_and_pods_go_converges(
    daemonsets: DaemonSets,
    local_cluster: LocalCluster,
    fake_nodes: TrackedFakeNodes,
    core_v1: client.CoreV1Api,
    many_nodes: set[str],
) -> None:
    name = daemonsets.create(agent())
    eligible = WORKERS | many_nodes
    pods = daemonsets.wait_for_nodes(name, eligible, timeout=180)
    gone_nodes = sorted(many_nodes)[:20]

    local_cluster.restart("etcd")
    for node in gone_nodes:
        fake_nodes.remove(node, wait=False)
    for pod in pods[:20]:
        core_v1.delete_namespaced_pod(pod.metadata.name, daemonsets.namespace)

    converges_after(daemonsets, name, eligible - set(gone_nodes))
