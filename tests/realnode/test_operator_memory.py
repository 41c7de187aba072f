"""The chart's default memory limit holds: the operator pod, as `helm install` runs it on the
real node, rolls CustomDaemonSets out to thousands of kwok nodes and starts again with all their
pods in place, and is never OOM-killed.

The size is KUBEHERD_MEMORY_TEST_NODES x KUBEHERD_MEMORY_TEST_DAEMONSETS (defaults below: what
this machine holds within CI's time); `make test-memory` runs this test alone at any size.
`make bench` (B4) measures the memory per pod.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from localcluster.nodes import ZONES, FakeNodes, fake_node_manifest
from tests.helpers import eventually
from tests.integration.daemonsets import agent
from tests.realnode.conftest import (
    RELEASE_NAMESPACE,
    RealCluster,
    operator_pods,
    wait_for_ready_operators,
)
from tests.realnode.workloads import real_namespace

NODES = int(os.environ.get("KUBEHERD_MEMORY_TEST_NODES", "2000"))
DAEMONSETS = int(os.environ.get("KUBEHERD_MEMORY_TEST_DAEMONSETS", "5"))
PODS = NODES * DAEMONSETS

# The test's own waits (each CustomDaemonSet's rollout, 120 s + 1 s per 20 pods; the restart)
# add up to more than the suite's 600 s per test: a slow machine must meet those waits'
# messages, not pytest-timeout's.
pytestmark = [
    pytest.mark.cluster,
    pytest.mark.real_node,
    pytest.mark.timeout(max(1800, 600 + PODS // 8)),
]
MEMORY_TEST_LABEL = "kubeherd.io/memory-test"
FIRST_PASS = re.compile(r"first pass [0-9.]+s after start: ([^\n]+)")
# The container's peak memory as its cgroup counts it (v2, else v1), in bytes.
PEAK_MEMORY = """
from pathlib import Path
for path in ("/sys/fs/cgroup/memory.peak", "/sys/fs/cgroup/memory/memory.max_usage_in_bytes"):
    if Path(path).exists():
        print(Path(path).read_text().strip())
        break
"""


def memory_test_nodes(count: int) -> list[dict[str, Any]]:
    return [
        fake_node_manifest(
            f"memory-{index:05d}", zone=ZONES[index % len(ZONES)], labels={MEMORY_TEST_LABEL: ""}
        )
        for index in range(count)
    ]


def delete_all(delete: Callable[[], Any], remaining: Callable[[], list[Any]], what: str) -> None:
    """Delete a collection of thousands: the API server may give up on one call after 60 s
    (504) with part of it done, so call again until nothing is left."""

    def gone() -> bool | None:
        if not remaining():
            return True
        try:
            delete()
        except ApiException as error:
            if error.status != 504:
                raise
        return None

    eventually(gone, timeout=600, what=f"{what} deleted")


@pytest.fixture
def many_nodes(chart_operator: RealCluster) -> Iterator[int]:
    core = chart_operator.core
    nodes = FakeNodes(core, parallelism=16)
    nodes.create(memory_test_nodes(NODES), timeout=600)
    try:
        yield NODES
    finally:
        delete_all(
            lambda: core.delete_collection_node(label_selector=MEMORY_TEST_LABEL),
            lambda: core.list_node(label_selector=MEMORY_TEST_LABEL, limit=1).items,
            "the test's nodes",
        )


def node_agent(name: str) -> dict[str, Any]:
    return agent(
        name,
        nodeSelector={MEMORY_TEST_LABEL: ""},
        # New nodes carry the not-ready taint until kube-controller-manager lifts it, a few
        # nodes a second: the pods need not wait for that.
        tolerations=[
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}
        ],
    )


def peak_memory_mib(real: RealCluster, pod: str) -> float:
    done = real.kubectl(
        "exec", "-n", RELEASE_NAMESPACE, pod, "--", "python", "-c", PEAK_MEMORY, check=False
    )
    return int(done.stdout.strip()) / 2**20


def memory_limit(pod: Any) -> str:
    (container,) = pod.spec.containers
    return str(container.resources.limits["memory"])


def assert_never_restarted(real: RealCluster, uid: str) -> Any:
    (pod,) = operator_pods(real)
    assert pod.metadata.uid == uid
    (status,) = pod.status.container_statuses
    terminated = status.last_state.terminated if status.last_state else None
    assert status.restart_count == 0, f"restarted: {terminated}"
    return pod


def test_the_default_memory_limit_holds_thousands_of_nodes_and_a_restart(
    chart_operator: RealCluster, many_nodes: int
) -> None:
    real = chart_operator
    (operator,) = operator_pods(real)
    limit = memory_limit(operator)
    with real_namespace(real, "memory") as namespace:
        daemonsets = real.daemonsets(namespace)
        names = [daemonsets.create(node_agent(f"agent-{index}")) for index in range(DAEMONSETS)]
        for name in names:
            daemonsets.wait_for_status(
                name,
                timeout=120 + PODS / 20,
                desiredNumberScheduled=many_nodes,
                numberAvailable=many_nodes,
            )
        assert_never_restarted(real, operator.metadata.uid)
        rolled_out = peak_memory_mib(real, operator.metadata.name)

        # Started again with every pod in place: the initial listing is the peak of a start.
        real.kubectl("delete", "pod", "-n", RELEASE_NAMESPACE, operator.metadata.name)
        (restarted,) = wait_for_ready_operators(real, 1)

        def first_passes() -> list[str] | None:
            logs = real.kubectl("logs", "-n", RELEASE_NAMESPACE, restarted.metadata.name).stdout
            found = FIRST_PASS.findall(logs)
            return found if len(found) >= DAEMONSETS else None

        # Listing every pod again comes first: about a second per 1,000 on this machine.
        todo = eventually(
            first_passes, timeout=120 + PODS / 1000, what="a first pass over every agent"
        )
        assert todo == ["nothing to do"] * DAEMONSETS
        restarted = assert_never_restarted(real, restarted.metadata.uid)
        after_restart = peak_memory_mib(real, restarted.metadata.name)
        print(
            f"\n{PODS} daemon pods on {many_nodes} kwok nodes, limit {limit}: operator peak "
            f"{rolled_out:.0f} MiB after the rollout, {after_restart:.0f} MiB after a restart"
        )
        # Off the kwok nodes before the namespace goes: orphaned, then removed at once
        # (kwok would acknowledge each pod's deletion one at a time).
        for name in names:
            daemonsets.delete(name, propagation="Orphan")
        delete_all(
            lambda: real.core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0),
            lambda: real.core.list_namespaced_pod(namespace, limit=1).items,
            "the daemon pods",
        )
