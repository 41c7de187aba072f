"""The local control plane behaves as a real cluster does, for everything kubeherd relies on."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster.binaries import kubernetes_module_dir, required_version
from localcluster.cluster import LocalCluster, _is_alive, port_is_listening
from localcluster.nodes import CONTROL_PLANE_NODE, CONTROL_PLANE_ROLE, ZONE_LABEL, is_ready
from tests.helpers import REPO, Kubectl, TrackedFakeNodes, eventually

pytestmark = pytest.mark.cluster


def pause_pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}], **spec},
    }


def pod_events(core: client.CoreV1Api, namespace: str, pod: str) -> list[Any]:
    selector = f"involvedObject.kind=Pod,involvedObject.name={pod}"
    return list(core.list_namespaced_event(namespace, field_selector=selector).items)


def running_pods(core: client.CoreV1Api, namespace: str, selector: str) -> list[Any]:
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    return [pod for pod in pods if pod.status.phase == "Running"]


def test_fake_nodes_are_listed_ready_with_realistic_labels_and_capacity(kubectl: Kubectl) -> None:
    nodes = json.loads(kubectl("get", "nodes", "-o", "json").stdout)["items"]
    by_name = {node["metadata"]["name"]: node for node in nodes}

    assert {CONTROL_PLANE_NODE, "worker-1", "worker-2"} <= set(by_name)
    for node in nodes:
        conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}
        assert conditions["Ready"] == "True", node["metadata"]["name"]
        labels = node["metadata"]["labels"]
        assert labels["kubernetes.io/hostname"] == node["metadata"]["name"]
        assert labels["kubernetes.io/os"] == "linux"
        assert {"cpu", "memory", "pods"} <= set(node["status"]["allocatable"])
    assert len({node["metadata"]["labels"][ZONE_LABEL] for node in nodes}) >= 2

    control_plane = by_name[CONTROL_PLANE_NODE]
    assert CONTROL_PLANE_ROLE in control_plane["metadata"]["labels"]
    assert {"key": CONTROL_PLANE_ROLE, "effect": "NoSchedule"} in control_plane["spec"]["taints"]


def test_kubectl_and_the_api_server_report_the_built_version(kubectl: Kubectl) -> None:
    built = required_version(kubernetes_module_dir(), "k8s.io/kubernetes")

    versions = json.loads(kubectl("version", "-o", "json").stdout)

    assert versions["clientVersion"]["gitVersion"] == built
    assert versions["serverVersion"]["gitVersion"] == built


def test_a_deployment_pod_is_bound_by_the_scheduler_runs_and_is_garbage_collected(
    core_v1: client.CoreV1Api, apps_v1: client.AppsV1Api, namespace: str
) -> None:
    labels = {"app": "web"}
    apps_v1.create_namespaced_deployment(
        namespace,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": pause_pod("web")["spec"],
                },
            },
        },
    )

    pod = eventually(
        lambda: running_pods(core_v1, namespace, "app=web"), what="the Deployment's pod to run"
    )[0]
    assert pod.spec.node_name
    assert pod.status.pod_ip

    def scheduled_event() -> Any:
        events = pod_events(core_v1, namespace, pod.metadata.name)
        return next((e for e in events if e.reason == "Scheduled"), None)

    event = eventually(scheduled_event, what="a Scheduled event")
    assert event.reporting_component == "default-scheduler"
    assert pod.spec.node_name in event.message

    apps_v1.delete_namespaced_deployment("web", namespace)

    eventually(
        lambda: (
            not apps_v1.list_namespaced_replica_set(namespace).items
            and not core_v1.list_namespaced_pod(namespace).items
        ),
        what="the ReplicaSet and its pods to be garbage-collected",
    )


def test_deleting_a_namespace_completes(core_v1: client.CoreV1Api, namespace: str) -> None:
    core_v1.create_namespaced_config_map(namespace, {"metadata": {"name": "settings"}})
    core_v1.create_namespaced_pod(namespace, pause_pod("idle"))
    eventually(lambda: running_pods(core_v1, namespace, "app=idle"), what="the pod to run")

    core_v1.delete_namespace(namespace)

    def gone() -> bool:
        try:
            core_v1.read_namespace(namespace)
        except ApiException as error:
            return bool(error.status == 404)
        return False

    eventually(gone, timeout=90, what=f"namespace {namespace} to be deleted")


def test_a_pod_asking_more_cpu_than_any_node_has_stays_pending(
    core_v1: client.CoreV1Api, namespace: str
) -> None:
    pod = pause_pod("greedy")
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "64"}}
    core_v1.create_namespaced_pod(namespace, pod)

    def failed_scheduling() -> Any:
        events = pod_events(core_v1, namespace, "greedy")
        return next((e for e in events if e.reason == "FailedScheduling"), None)

    event = eventually(failed_scheduling, what="a FailedScheduling event")
    assert "Insufficient cpu" in event.message
    assert event.type == "Warning"
    assert core_v1.read_namespaced_pod("greedy", namespace).status.phase == "Pending"


def test_a_pod_without_toleration_is_never_placed_on_the_control_plane_node(
    core_v1: client.CoreV1Api, namespace: str
) -> None:
    pinned = {"nodeSelector": {"kubernetes.io/hostname": CONTROL_PLANE_NODE}}
    core_v1.create_namespaced_pod(namespace, pause_pod("intolerant", **pinned))
    toleration = {"key": CONTROL_PLANE_ROLE, "operator": "Exists", "effect": "NoSchedule"}
    core_v1.create_namespaced_pod(
        namespace, pause_pod("tolerant", tolerations=[toleration], **pinned)
    )

    # The tolerating twin proves the node itself takes pods: only the taint keeps the other off.
    eventually(
        lambda: running_pods(core_v1, namespace, "app=tolerant"),
        what="the tolerating pod to run on the control-plane node",
    )

    def failed_scheduling() -> Any:
        events = pod_events(core_v1, namespace, "intolerant")
        return next((e for e in events if e.reason == "FailedScheduling"), None)

    event = eventually(failed_scheduling, what="a FailedScheduling event")
    # The node selector rules out the workers; the taint rules out the control-plane node.
    assert "1 node(s) had untolerated taint(s)" in event.message
    intolerant = core_v1.read_namespaced_pod("intolerant", namespace)
    assert intolerant.spec.node_name is None
    assert intolerant.status.phase == "Pending"


def test_many_pods_without_toleration_spread_over_workers_only(
    core_v1: client.CoreV1Api, apps_v1: client.AppsV1Api, namespace: str
) -> None:
    labels = {"app": "spread"}
    apps_v1.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "spread"},
            "spec": {
                "replicas": 6,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": pause_pod("spread")["spec"]},
            },
        },
    )

    def six_running() -> list[Any] | None:
        found = running_pods(core_v1, namespace, "app=spread")
        return found if len(found) == 6 else None

    pods = eventually(six_running, what="six running pods")
    assert CONTROL_PLANE_NODE not in {pod.spec.node_name for pod in pods}


def test_the_node_helper_adds_labels_taints_and_removes_nodes(
    core_v1: client.CoreV1Api, namespace: str, fake_nodes: TrackedFakeNodes
) -> None:
    fake_nodes.add("edge-1", zone="zone-c", labels={"tier": "edge"})
    assert is_ready(core_v1.read_node("edge-1"))

    core_v1.create_namespaced_pod(namespace, pause_pod("edge-agent", nodeSelector={"tier": "edge"}))
    pod = eventually(
        lambda: running_pods(core_v1, namespace, "app=edge-agent"), what="the pod on the new node"
    )[0]
    assert pod.spec.node_name == "edge-1"

    fake_nodes.label("edge-1", {"tier": None, "disk": "ssd"})
    labels = core_v1.read_node("edge-1").metadata.labels
    assert "tier" not in labels
    assert labels["disk"] == "ssd"

    # A NoExecute taint makes the controller manager's taint-eviction controller evict the pod.
    fake_nodes.taint("edge-1", "maintenance", "NoExecute", value="true")
    eventually(
        lambda: not core_v1.list_namespaced_pod(namespace, label_selector="app=edge-agent").items,
        what="the pod to be evicted by the NoExecute taint",
    )
    fake_nodes.untaint("edge-1", "maintenance")
    assert not core_v1.read_node("edge-1").spec.taints

    fake_nodes.remove("edge-1")
    assert not fake_nodes.exists("edge-1")


def test_cluster_up_is_idempotent_and_cluster_down_leaves_nothing_behind(
    tmp_path: Path, local_cluster: LocalCluster
) -> None:
    folder = tmp_path / "cluster"
    environment = {**os.environ, "KUBEHERD_CLUSTER_DIR": str(folder), "NODES": "2"}

    def make(target: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["make", "--no-print-directory", target],
            cwd=REPO,
            env=environment,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    first = make("cluster-up")
    assert first.returncode == 0, first.stderr
    cluster = LocalCluster(folder)
    pids = cluster.running_components()
    ports = cluster.ports()
    assert ports is not None
    assert len(pids) == 5
    assert (folder / "kubeconfig").is_file()
    assert (folder / "bin" / "kubectl").resolve().is_file()
    assert (folder / "logs" / "kube-apiserver.log").is_file()

    again = make("cluster-up")
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stderr
    assert cluster.running_components() == pids

    down = make("cluster-down")
    assert down.returncode == 0, down.stderr

    assert not [pid for pid in pids.values() if _is_alive(pid)]
    assert not ports.listening()
    assert not port_is_listening(ports.apiserver)
