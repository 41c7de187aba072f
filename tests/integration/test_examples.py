"""Every file in examples/ applies cleanly and does what its comment says.

Each example is applied with kubectl, as a user would, after moving its namespaced objects into
the test's namespace (so tests never collide) and dropping its Namespace. The examples tested
in other modules are named in ELSEWHERE.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from localcluster.nodes import fake_node_manifest
from tests.helpers import REPO, Kubectl, TrackedFakeNodes, eventually
from tests.integration.conftest import StartScheduler
from tests.integration.daemonsets import WORKERS, DaemonSets, target_node_of
from tests.integration.schedulers import SchedulerProfiles, scheduled_by, wait_briefly

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

EXAMPLES = REPO / "examples"
# Examples whose behaviour other modules check, and where.
ELSEWHERE = {
    # Loaded there as FLUENTD, which test_customdaemonset.py runs on every node.
    "fluentd-elasticsearch.yaml": "daemonsets.py",
    # Loaded there as PER_POOL, whose override test_overrides.py sees on a labelled node.
    "per-pool-resources.yaml": "test_overrides.py",
    "schedulerprofile-two-profiles.yaml": "test_schedulerprofile.py",
    "schedulerprofile-packing.yaml": "test_schedulerprofile.py",
    "schedulerprofile-three-profiles.yaml": "test_schedulerprofile.py",
}
CLUSTER_SCOPED = {"PriorityClass"}
# The image change canary-rollout.yaml's comment shows.
NEW_AGENT_IMAGE = (
    '[{"op":"replace","path":"/spec/template/spec/containers/0/image",'
    '"value":"registry.k8s.io/pause:3.9"}]'
)

ApplyExample = Callable[..., list[dict[str, Any]]]


def test_every_example_is_checked_by_a_test() -> None:
    here = Path(__file__).read_text()
    unchecked = [
        example.name
        for example in sorted(EXAMPLES.glob("*.yaml"))
        if example.name not in ELSEWHERE and f'"{example.name}"' not in here
    ]
    for name, module in ELSEWHERE.items():
        assert f'"{name}"' in (Path(__file__).parent / module).read_text(), name

    assert unchecked == []


@pytest.fixture
def apply_example(kubectl: Kubectl, namespace: str, tmp_path: Path) -> Iterator[ApplyExample]:
    """`kubectl apply` of an example, moved into the test's namespace; `rename` maps names
    that are cluster-wide (scheduler names) to the test's own. Cluster-scoped objects are
    deleted afterwards."""
    cluster_scoped: list[dict[str, Any]] = []

    def apply(name: str, rename: dict[str, str] | None = None) -> list[dict[str, Any]]:
        text = (EXAMPLES / name).read_text()
        for old, new in (rename or {}).items():
            text = text.replace(old, new)
        documents = [d for d in yaml.safe_load_all(text) if d and d["kind"] != "Namespace"]
        for document in documents:
            if document["kind"] in CLUSTER_SCOPED:
                cluster_scoped.append(document)
            else:
                document["metadata"]["namespace"] = namespace
        moved = tmp_path / name
        moved.write_text(yaml.safe_dump_all(documents))
        kubectl("apply", "-f", str(moved))
        return documents

    yield apply
    for document in cluster_scoped:
        kubectl("delete", document["kind"], document["metadata"]["name"], "--ignore-not-found")


def current_nodes(core: client.CoreV1Api) -> set[str]:
    return {n.metadata.name for n in core.list_node().items if not n.metadata.deletion_timestamp}


def test_the_monitoring_agent_runs_only_on_labelled_nodes(
    apply_example: ApplyExample, daemonsets: DaemonSets, fake_nodes: TrackedFakeNodes
) -> None:
    apply_example("monitoring-agent.yaml")

    status = daemonsets.wait_for_status("node-exporter", desiredNumberScheduled=0)
    (ineligible,) = status["ineligibleNodes"]
    assert ineligible["reason"] == "NodeSelectorMismatch"
    assert ineligible["detail"].endswith("nodeSelector monitoring=enabled")
    assert daemonsets.pods("node-exporter") == []

    fake_nodes.label("worker-1", {"monitoring": "enabled"})

    (agent,) = daemonsets.wait_for_nodes("node-exporter", {"worker-1"})
    assert agent.spec.containers[0].ports[0].host_port == 9100

    fake_nodes.label("worker-1", {"monitoring": None})

    daemonsets.wait_for_nodes("node-exporter", set())


def test_the_node_proxy_runs_on_every_node_whatever_its_taints(
    apply_example: ApplyExample,
    daemonsets: DaemonSets,
    fake_nodes: TrackedFakeNodes,
    core_v1: client.CoreV1Api,
) -> None:
    taints = [
        {"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"},
        {"key": "dedicated", "value": "storage", "effect": "NoExecute"},
    ]
    fake_nodes.create([fake_node_manifest("network-not-ready", zone="zone-a", taints=taints)])

    apply_example("node-proxy.yaml")

    def on_every_node() -> list[Any] | None:
        pods = daemonsets.pods("node-proxy")
        placed = sorted(target_node_of(pod) for pod in pods)
        running = all(pod.status.phase == "Running" for pod in pods)
        return pods if running and placed == sorted(current_nodes(core_v1)) else None

    pods = eventually(on_every_node, what="a node-proxy pod Running on every node")
    assert {"control-plane", "network-not-ready"} <= {target_node_of(p) for p in pods}
    for pod in pods:
        assert pod.spec.host_network is True
        assert pod.spec.priority == 2_000_001_000  # system-node-critical
        tolerated = {(t.key, t.effect) for t in pod.spec.tolerations}
        assert ("node.kubernetes.io/network-unavailable", "NoSchedule") in tolerated


def test_a_daemonset_waits_for_its_schedulerprofiles_scheduler_and_is_bound_by_it(
    apply_example: ApplyExample,
    daemonsets: DaemonSets,
    schedulerprofiles: SchedulerProfiles,
    start_scheduler: StartScheduler,
    core_v1: client.CoreV1Api,
    namespace: str,
) -> None:
    scheduler = f"node-agent-scheduler-{namespace.rsplit('-', 1)[-1]}"

    apply_example("daemonset-with-own-scheduler.yaml", {"node-agent-scheduler": scheduler})

    schedulerprofiles.wait_for("node-agents", "Progressing", "True", reason="RolledOut")
    # No scheduler of that name runs yet: the pods exist, pinned to their nodes, unbound.
    pending = eventually(lambda: len(daemonsets.pods("log-shipper")) == len(WORKERS) or None)
    assert pending
    wait_briefly(3)
    assert [pod.spec.node_name for pod in daemonsets.pods("log-shipper")] == [None, None]

    start_scheduler("node-agents")

    pods = daemonsets.wait_for_nodes("log-shipper", WORKERS)
    for pod in pods:
        assert pod.spec.node_name == target_node_of(pod)
        assert scheduled_by(core_v1, namespace, pod.metadata.name) == scheduler


def test_the_limit_range_fills_in_resources_and_the_quota_refuses_pods_beyond_it(
    apply_example: ApplyExample,
    daemonsets: DaemonSets,
    fake_nodes: TrackedFakeNodes,
    core_v1: client.CoreV1Api,
    namespace: str,
) -> None:
    apply_example("requests-and-limits.yaml")

    pods = daemonsets.wait_for_nodes("heartbeat", WORKERS)
    for pod in pods:
        resources = pod.spec.containers[0].resources
        assert resources.requests == {"cpu": "50m", "memory": "64Mi"}
        assert resources.limits == {"cpu": "200m", "memory": "128Mi"}

    def used_pods() -> str | None:
        quota = core_v1.read_namespaced_resource_quota("node-agents", namespace)
        return ((quota.status.used or {}).get("pods")) or None

    assert eventually(lambda: used_pods() == str(len(WORKERS)), what="the quota's usage")
    core_v1.patch_namespaced_resource_quota(
        "node-agents", namespace, {"spec": {"hard": {"pods": str(len(WORKERS))}}}
    )
    eventually(
        lambda: (core_v1.read_namespaced_resource_quota("node-agents", namespace).status.hard
                 or {}).get("pods") == str(len(WORKERS)),
        what="the smaller quota to be counted",
    )  # fmt: skip

    fake_nodes.create([fake_node_manifest("beyond-the-quota", zone="zone-b")])

    refused = eventually(lambda: daemonsets.events("heartbeat", "FailedCreate"), what="refusal")
    assert refused[0].type == "Warning"
    assert "exceeded quota: node-agents" in refused[0].message
    assert daemonsets.nodes_with_pods("heartbeat") == WORKERS


def test_the_priority_class_lets_a_daemon_pod_preempt_a_lower_priority_pod(
    apply_example: ApplyExample,
    daemonsets: DaemonSets,
    fake_nodes: TrackedFakeNodes,
    core_v1: client.CoreV1Api,
    namespace: str,
) -> None:
    # A node with 1 cpu, nearly filled by an ordinary pod (priority 0).
    small = {"cpu": "1", "memory": "4Gi", "pods": "110"}
    fake_nodes.create([fake_node_manifest("full", zone="zone-c", capacity=small)])
    filler = {
        "metadata": {"name": "filler"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": "full"},
            "containers": [
                {
                    "name": "filler",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "900m"}},
                }
            ],
        },
    }
    core_v1.create_namespaced_pod(namespace, filler)
    eventually(
        lambda: core_v1.read_namespaced_pod("filler", namespace).status.phase == "Running",
        what="the filler pod Running on the full node",
    )

    apply_example("priorityclass.yaml")

    pods = daemonsets.wait_for_nodes("security-agent", WORKERS | {"full"}, timeout=90)
    assert {pod.spec.priority for pod in pods} == {1_000_000}
    assert {pod.spec.priority_class_name for pod in pods} == {"node-agent-critical"}
    # The scheduler evicted the filler to make room on the full node.
    gone = [p for p in core_v1.list_namespaced_pod(namespace).items if p.metadata.name == "filler"]
    assert gone == [] or gone[0].metadata.deletion_timestamp is not None


def test_the_canary_rollout_updates_the_labelled_node_first(
    apply_example: ApplyExample,
    daemonsets: DaemonSets,
    fake_nodes: TrackedFakeNodes,
    kubectl: Kubectl,
    namespace: str,
) -> None:
    fake_nodes.label("worker-1", {"canary": "true"})
    apply_example("canary-rollout.yaml")
    old = {
        target_node_of(p): p.metadata.uid for p in daemonsets.wait_for_nodes("node-agent", WORKERS)
    }
    eventually(
        lambda: daemonsets.progressing("node-agent").get("reason") == "RolloutComplete",
        what="the first revision everywhere",
    )

    kubectl("-n", namespace, "patch", "cds", "node-agent", "--type=json", f"-p={NEW_AGENT_IMAGE}")

    canary = eventually(
        lambda: (daemonsets.get("node-agent").get("status") or {}).get("canary"),
        what="the canary started",
    )
    assert (canary["nodes"], canary["phase"]) == (["worker-1"], "Running")
    eventually(
        lambda: (
            {
                target_node_of(p)
                for p in daemonsets.pods("node-agent")
                if p.spec.containers[0].image == "registry.k8s.io/pause:3.9"
            }
            == {"worker-1"}
        ),
        what="the new image on the canary node",
    )
    # The five minutes of the canary's watch hold the other node on its pod.
    assert daemonsets.progressing("node-agent")["reason"] == "CanaryRunning"
    (worker_2,) = [p for p in daemonsets.pods("node-agent") if target_node_of(p) == "worker-2"]
    assert worker_2.metadata.uid == old["worker-2"]


def test_the_rollout_by_zone_completes_zone_by_zone(
    apply_example: ApplyExample, daemonsets: DaemonSets, kubectl: Kubectl, namespace: str
) -> None:
    apply_example("rollout-by-zone.yaml")
    daemonsets.wait_for_nodes("zonal-agent", WORKERS)
    eventually(
        lambda: daemonsets.progressing("zonal-agent").get("reason") == "RolloutComplete",
        what="the first revision everywhere",
    )

    kubectl("-n", namespace, "patch", "cds", "zonal-agent", "--type=json", f"-p={NEW_AGENT_IMAGE}")

    # The session's workers are in zone-b and zone-c: zone-b goes first, for 5 s at least.
    message = eventually(
        lambda: "updating" in (m := daemonsets.progressing("zonal-agent").get("message", "")) and m,
        what="the rollout naming its zone",
    )
    assert "topology.kubernetes.io/zone=zone-b (1 of 2)" in message
    eventually(
        lambda: daemonsets.progressing("zonal-agent").get("reason") == "RolloutComplete",
        timeout=90,
        what="the rollout complete",
    )
    pods = daemonsets.wait_for_nodes("zonal-agent", WORKERS)
    assert {p.spec.containers[0].image for p in pods} == {"registry.k8s.io/pause:3.9"}


def test_the_in_place_update_changes_the_image_of_the_running_pod(
    apply_example: ApplyExample, daemonsets: DaemonSets, kubectl: Kubectl, namespace: str
) -> None:
    apply_example("in-place-update.yaml")
    before = {p.metadata.uid for p in daemonsets.wait_for_nodes("in-place-agent", WORKERS)}
    eventually(
        lambda: daemonsets.progressing("in-place-agent").get("reason") == "RolloutComplete",
        what="the first revision everywhere",
    )

    kubectl(
        "-n", namespace, "patch", "cds", "in-place-agent", "--type=json", f"-p={NEW_AGENT_IMAGE}"
    )

    # kwok never restarts a container: the first pod updated stays pending, and holds the
    # rollout at maxUnavailable 1 (tests/realnode/test_in_place.py has a kubelet finish it).
    def updated() -> list[Any] | None:
        pods = daemonsets.pods("in-place-agent")
        new = [p for p in pods if p.spec.containers[0].image == "registry.k8s.io/pause:3.9"]
        return new or None

    (pod,) = eventually(updated, what="one pod updated in place")
    assert {p.metadata.uid for p in daemonsets.pods("in-place-agent")} == before
    assert pod.metadata.uid in before
    (event,) = daemonsets.events("in-place-agent", "SuccessfulUpdatePodInPlace")
    assert pod.metadata.name in event.message
