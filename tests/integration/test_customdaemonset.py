"""CustomDaemonSet behaviour against the real control plane, with `kubeherd run` as a process.

Each test has its own namespace and asserts what a user sees: pods and their affinity, the
status, events and `kubectl get`.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from localcluster.cluster import LocalCluster
from localcluster.nodes import CONTROL_PLANE_NODE, CONTROL_PLANE_ROLE
from tests.helpers import CDS_COLUMNS, REPO, Kubectl, OperatorProcess, TrackedFakeNodes, eventually

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

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


@pytest.fixture(scope="session")
def custom_api(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


class DaemonSets:
    """What a test does with CustomDaemonSets in its namespace, and what it looks at."""

    def __init__(self, custom: client.CustomObjectsApi, core: client.CoreV1Api, ns: str) -> None:
        self.custom = custom
        self.core = core
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

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)

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

    def wait_for_status(self, name: str, timeout: float = 60, **expected: int) -> dict[str, Any]:
        def matches() -> dict[str, Any] | None:
            status = self.get(name).get("status") or {}
            return status if all(status.get(k) == v for k, v in expected.items()) else None

        return eventually(matches, timeout=timeout, what=f"{name} status {expected}")

    def events(self, name: str, reason: str | None = None) -> list[Any]:
        selector = f"involvedObject.kind=CustomDaemonSet,involvedObject.name={name}"
        events = self.core.list_namespaced_event(self.namespace, field_selector=selector).items
        return [e for e in events if reason is None or e.reason == reason]


def target_node_of(pod: Any) -> str:
    if pod.spec.node_name:
        return str(pod.spec.node_name)
    terms = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
    return str(terms.node_selector_terms[0].match_fields[0].values[0])


@pytest.fixture
def daemonsets(
    custom_api: client.CustomObjectsApi, core_v1: client.CoreV1Api, namespace: str
) -> DaemonSets:
    return DaemonSets(custom_api, core_v1, namespace)


def test_fluentd_with_the_control_plane_toleration_runs_on_every_node(
    daemonsets: DaemonSets, core_v1: client.CoreV1Api
) -> None:
    name = daemonsets.create(FLUENTD)

    pods = daemonsets.wait_for_nodes(name, ALL_NODES)

    uid = daemonsets.get(name)["metadata"]["uid"]
    for pod in pods:
        node = pod.spec.node_name
        terms = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
        assert len(terms.node_selector_terms) == 1
        field = terms.node_selector_terms[0].match_fields[0]
        assert (field.key, field.operator, field.values) == ("metadata.name", "In", [node])
        assert [(o.kind, o.name, o.uid, o.controller) for o in pod.metadata.owner_references] == [
            ("CustomDaemonSet", name, uid, True)
        ]
        # Bound by the scheduler, not by kubeherd setting nodeName.
        events = core_v1.list_namespaced_event(
            daemonsets.namespace, field_selector=f"involvedObject.name={pod.metadata.name}"
        ).items
        assert any(
            e.reason == "Scheduled" and e.reporting_component == "default-scheduler" for e in events
        )
        assert pod.spec.containers[0].resources.requests == {"cpu": "100m", "memory": "200Mi"}
        assert {v.name for v in pod.spec.volumes} >= {"varlog", "varlibdockercontainers"}
    status = daemonsets.wait_for_status(
        name,
        desiredNumberScheduled=3,
        currentNumberScheduled=3,
        numberReady=3,
        numberAvailable=3,
        updatedNumberScheduled=3,
        numberMisscheduled=0,
        numberUnavailable=0,
    )
    assert status["observedGeneration"] == daemonsets.get(name)["metadata"]["generation"]
    assert status["ineligibleNodes"] == []
    created = daemonsets.events(name, "SuccessfulCreate")
    assert len(created) == 3
    assert all(e.type == "Normal" and "on node" in e.message for e in created)


def test_without_the_toleration_fluentd_skips_the_control_plane_and_says_why(
    daemonsets: DaemonSets, kubectl: Kubectl
) -> None:
    manifest = copy.deepcopy(FLUENTD)
    del manifest["spec"]["template"]["spec"]["tolerations"]
    name = daemonsets.create(manifest)

    daemonsets.wait_for_nodes(name, WORKERS)

    status = daemonsets.wait_for_status(name, desiredNumberScheduled=2, numberAvailable=2)
    assert status["ineligibleNodes"] == [
        {
            "reason": "UntoleratedTaint",
            "detail": f"{CONTROL_PLANE_ROLE}:NoSchedule",
            "count": 1,
            "nodes": [CONTROL_PLANE_NODE],
        }
    ]
    described = kubectl("describe", "cds", name, "-n", daemonsets.namespace).stdout
    assert "UntoleratedTaint" in described
    assert CONTROL_PLANE_NODE in described


def test_kubectl_get_shows_the_printer_columns_with_the_right_numbers(
    daemonsets: DaemonSets, kubectl: Kubectl
) -> None:
    name = daemonsets.create(agent(nodeSelector={"kubernetes.io/os": "linux"}))
    daemonsets.wait_for_status(name, desiredNumberScheduled=2, numberAvailable=2)

    table = kubectl("get", "cds", name, "-n", daemonsets.namespace).stdout.splitlines()

    assert table[0].split() == CDS_COLUMNS
    assert table[1].split()[:7] == [name, "2", "2", "2", "2", "2", "kubernetes.io/os=linux"]


def test_a_node_added_gets_a_pod_and_a_node_deleted_loses_it(
    daemonsets: DaemonSets, fake_nodes: TrackedFakeNodes
) -> None:
    name = daemonsets.create(agent())
    daemonsets.wait_for_nodes(name, WORKERS)

    fake_nodes.add("joiner-1", zone="zone-b")
    daemonsets.wait_for_nodes(name, WORKERS | {"joiner-1"})
    daemonsets.wait_for_status(name, desiredNumberScheduled=3, numberAvailable=3)

    fake_nodes.remove("joiner-1")
    daemonsets.wait_for_nodes(name, WORKERS)
    daemonsets.wait_for_status(name, desiredNumberScheduled=2, numberAvailable=2)


def test_labels_added_and_removed_add_and_remove_pods(
    daemonsets: DaemonSets, fake_nodes: TrackedFakeNodes
) -> None:
    name = daemonsets.create(agent(nodeSelector={"disk": "ssd"}))
    daemonsets.wait_for_status(name, desiredNumberScheduled=0)
    assert daemonsets.pods(name) == []

    fake_nodes.label("worker-2", {"disk": "ssd"})
    daemonsets.wait_for_nodes(name, {"worker-2"})

    fake_nodes.label("worker-2", {"disk": None})
    daemonsets.wait_for_nodes(name, set())
    status = daemonsets.wait_for_status(name, desiredNumberScheduled=0, numberMisscheduled=0)
    assert {group["reason"] for group in status["ineligibleNodes"]} == {"NodeSelectorMismatch"}
    deleted = daemonsets.events(name, "SuccessfulDelete")
    assert [e.type for e in deleted] == ["Normal"]
    assert "on node worker-2" in deleted[0].message


def test_a_no_execute_taint_removes_the_pod_and_a_no_schedule_taint_keeps_it(
    daemonsets: DaemonSets, fake_nodes: TrackedFakeNodes
) -> None:
    name = daemonsets.create(agent())
    daemonsets.wait_for_nodes(name, WORKERS)

    fake_nodes.taint("worker-1", "maintenance", "NoSchedule")
    status = daemonsets.wait_for_status(name, desiredNumberScheduled=1, numberMisscheduled=1)
    assert daemonsets.nodes_with_pods(name) == WORKERS
    assert status["ineligibleNodes"][0]["detail"] == "maintenance:NoSchedule"

    fake_nodes.taint("worker-1", "maintenance", "NoExecute", value="now")
    daemonsets.wait_for_nodes(name, {"worker-2"})
    daemonsets.wait_for_status(name, desiredNumberScheduled=1, numberMisscheduled=0)
    # The controller manager's taint eviction may delete the pod before kubeherd does; either
    # way, kubeherd must not put a pod back on a node whose NoExecute taint it does not tolerate.
    time.sleep(3)
    assert daemonsets.nodes_with_pods(name) == {"worker-2"}

    fake_nodes.untaint("worker-1", "maintenance")
    daemonsets.wait_for_nodes(name, WORKERS)


def test_a_pod_deleted_by_someone_is_recreated(
    daemonsets: DaemonSets, core_v1: client.CoreV1Api
) -> None:
    name = daemonsets.create(agent())
    pods = daemonsets.wait_for_nodes(name, WORKERS)
    victim = next(pod for pod in pods if pod.spec.node_name == "worker-1")

    core_v1.delete_namespaced_pod(victim.metadata.name, daemonsets.namespace)

    def replaced() -> bool:
        pods = daemonsets.pods(name)
        return {target_node_of(p) for p in pods} == WORKERS and victim.metadata.uid not in {
            p.metadata.uid for p in pods
        }

    eventually(replaced, what="a new pod on worker-1")
    daemonsets.wait_for_nodes(name, WORKERS)


def test_a_failed_pod_is_replaced_and_reported(
    daemonsets: DaemonSets, core_v1: client.CoreV1Api
) -> None:
    name = daemonsets.create(agent())
    pods = daemonsets.wait_for_nodes(name, WORKERS)
    victim = next(pod for pod in pods if pod.spec.node_name == "worker-2")

    # What a kubelet reports when the daemon's container dies for good.
    core_v1.patch_namespaced_pod_status(
        victim.metadata.name, daemonsets.namespace, {"status": {"phase": "Failed"}}
    )

    eventually(lambda: daemonsets.events(name, "FailedDaemonPod"), what="a FailedDaemonPod event")
    event = daemonsets.events(name, "FailedDaemonPod")[0]
    assert event.type == "Warning"
    assert victim.metadata.name in event.message
    eventually(
        lambda: (
            victim.metadata.uid not in {p.metadata.uid for p in daemonsets.pods(name)}
            and len(daemonsets.wait_for_nodes(name, WORKERS)) == 2
        ),
        what="the failed pod replaced",
    )


def test_creates_refused_by_a_quota_warn_and_converge_once_it_allows(
    daemonsets: DaemonSets, core_v1: client.CoreV1Api, kubectl: Kubectl
) -> None:
    core_v1.create_namespaced_resource_quota(
        daemonsets.namespace, {"metadata": {"name": "pods"}, "spec": {"hard": {"pods": "1"}}}
    )
    eventually(
        lambda: (
            (
                core_v1.read_namespaced_resource_quota("pods", daemonsets.namespace).status.hard
                or {}
            ).get("pods")
            == "1"
        ),
        what="the quota to be counted",
    )
    name = daemonsets.create(agent())

    refused = eventually(lambda: daemonsets.events(name, "FailedCreate"), what="FailedCreate")
    assert refused[0].type == "Warning"
    assert "exceeded quota" in refused[0].message
    status = daemonsets.wait_for_status(name, desiredNumberScheduled=2, currentNumberScheduled=1)
    failure = next(c for c in status["conditions"] if c["type"] == "ReplicaFailure")
    assert failure["status"] == "True"
    assert "exceeded quota" in failure["message"]
    # Backing off, not looping: a handful of attempts over several seconds, not hundreds.
    time.sleep(6)
    attempts = sum(e.count or 1 for e in daemonsets.events(name, "FailedCreate"))
    assert attempts <= 6
    assert len(daemonsets.pods(name)) == 1

    core_v1.patch_namespaced_resource_quota(
        "pods", daemonsets.namespace, {"spec": {"hard": {"pods": "10"}}}
    )

    daemonsets.wait_for_nodes(name, WORKERS)
    status = daemonsets.wait_for_status(name, currentNumberScheduled=2, numberAvailable=2)
    assert "ReplicaFailure" not in {c["type"] for c in status["conditions"]}


def test_a_create_forbidden_by_a_limit_range_carries_the_api_message(
    daemonsets: DaemonSets, core_v1: client.CoreV1Api
) -> None:
    core_v1.create_namespaced_limit_range(
        daemonsets.namespace,
        {
            "metadata": {"name": "small"},
            "spec": {"limits": [{"type": "Container", "max": {"cpu": "50m"}}]},
        },
    )
    manifest = agent()
    manifest["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "100m"},
        "limits": {"cpu": "100m"},
    }
    name = daemonsets.create(manifest)

    refused = eventually(lambda: daemonsets.events(name, "FailedCreate"), what="FailedCreate")

    assert refused[0].type == "Warning"
    assert "maximum cpu usage per Container is 50m" in refused[0].message
    status = daemonsets.wait_for_status(name, desiredNumberScheduled=2, currentNumberScheduled=0)
    assert any(
        c["type"] == "ReplicaFailure" and c["status"] == "True" for c in status["conditions"]
    )
    assert daemonsets.pods(name) == []


def test_deleting_the_custom_daemonset_garbage_collects_its_pods(daemonsets: DaemonSets) -> None:
    name = daemonsets.create(agent())
    daemonsets.wait_for_nodes(name, WORKERS)

    daemonsets.delete(name)

    eventually(lambda: not daemonsets.pods(name), what="the pods to be garbage-collected")


@pytest.fixture
def second_operator(local_cluster: LocalCluster, namespace: str) -> Iterator[OperatorProcess]:
    process = OperatorProcess(
        local_cluster, name="kubeherd-second", arguments=("--namespace", namespace)
    )
    yield process
    process.stop()


def test_two_operators_at_once_never_duplicate_pods_and_nothing_changes_when_idle(
    daemonsets: DaemonSets, second_operator: OperatorProcess
) -> None:
    name = daemonsets.create(agent())
    daemonsets.wait_for_nodes(name, WORKERS)
    daemonsets.wait_for_status(name, numberAvailable=2)

    # A second instance (as during a restart, or a botched upgrade) replays everything.
    second_operator.start()
    time.sleep(5)

    pods = daemonsets.pods(name)
    assert sorted(target_node_of(p) for p in pods) == sorted(WORKERS)
    assert len(daemonsets.events(name, "SuccessfulCreate")) == 2
    # Idle: no pod, status or event writes while nothing changes.
    before = daemonsets.get(name)["metadata"]["resourceVersion"]
    pod_versions = {p.metadata.name: p.metadata.resource_version for p in pods}
    time.sleep(5)
    assert daemonsets.get(name)["metadata"]["resourceVersion"] == before
    assert {p.metadata.name: p.metadata.resource_version for p in daemonsets.pods(name)} == (
        pod_versions
    )


def test_status_json_is_what_kubectl_shows(daemonsets: DaemonSets, kubectl: Kubectl) -> None:
    name = daemonsets.create(agent())
    daemonsets.wait_for_status(name, numberAvailable=2)

    shown = json.loads(kubectl("get", "cds", name, "-n", daemonsets.namespace, "-o", "json").stdout)

    assert shown["status"]["desiredNumberScheduled"] == 2
    conditions = {c["type"]: (c["status"], c["reason"]) for c in shown["status"]["conditions"]}
    assert conditions == {
        "Available": ("True", "AllNodesAvailable"),
        "Progressing": ("True", "RolloutComplete"),
    }


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


def test_an_image_change_rolls_out_one_node_at_a_time(
    daemonsets: DaemonSets, fake_nodes: TrackedFakeNodes
) -> None:
    extra = {"roll-1", "roll-2", "roll-3"}
    for name in sorted(extra):
        fake_nodes.add(name, zone="zone-c")
    nodes = WORKERS | extra
    name = daemonsets.create(agent())
    old_revision = revision_of(daemonsets.wait_for_nodes(name, nodes)[0])

    daemonsets.patch_spec(name, NEW_IMAGE)

    worst = watch_rollout(daemonsets, name, nodes, old_revision)

    assert worst <= 1
    assert {p.spec.containers[0].image for p in daemonsets.pods(name)} == {
        "registry.k8s.io/pause:3.9"
    }
    daemonsets.wait_for_status(
        name, desiredNumberScheduled=5, updatedNumberScheduled=5, numberAvailable=5
    )


def test_on_delete_replaces_a_pod_only_when_it_is_deleted(
    daemonsets: DaemonSets, core_v1: client.CoreV1Api
) -> None:
    manifest = agent()
    manifest["spec"]["updateStrategy"] = {"type": "OnDelete"}
    name = daemonsets.create(manifest)
    pods = daemonsets.wait_for_nodes(name, WORKERS)
    old_revision = revision_of(pods[0])

    daemonsets.patch_spec(name, NEW_IMAGE)
    daemonsets.wait_for_status(name, observedGeneration=2, updatedNumberScheduled=0)
    time.sleep(3)
    assert {revision_of(p) for p in daemonsets.pods(name)} == {old_revision}

    victim = next(p for p in pods if p.spec.node_name == "worker-1")
    core_v1.delete_namespaced_pod(victim.metadata.name, daemonsets.namespace)

    def worker_1_updated() -> bool:
        return any(
            target_node_of(p) == "worker-1" and revision_of(p) != old_revision
            for p in daemonsets.pods(name)
        )

    eventually(worker_1_updated, what="a new-revision pod on worker-1")
    revisions = {target_node_of(p): revision_of(p) for p in daemonsets.pods(name)}
    assert revisions["worker-2"] == old_revision


def test_max_surge_never_leaves_a_node_without_an_available_pod(
    daemonsets: DaemonSets, fake_nodes: TrackedFakeNodes
) -> None:
    extra = {"surge-1", "surge-2", "surge-3"}
    for node_name in sorted(extra):
        fake_nodes.add(node_name, zone="zone-b")
    nodes = WORKERS | extra
    manifest = agent()
    manifest["spec"]["updateStrategy"] = {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    name = daemonsets.create(manifest)
    old_revision = revision_of(daemonsets.wait_for_nodes(name, nodes)[0])

    daemonsets.patch_spec(name, NEW_IMAGE)

    assert watch_rollout(daemonsets, name, nodes, old_revision) == 0
    daemonsets.wait_for_nodes(name, nodes)
    daemonsets.wait_for_status(name, updatedNumberScheduled=5, numberAvailable=5)


def test_a_paused_rollout_waits_while_new_nodes_still_get_pods(
    daemonsets: DaemonSets, fake_nodes: TrackedFakeNodes
) -> None:
    name = daemonsets.create(agent())
    old_revision = revision_of(daemonsets.wait_for_nodes(name, WORKERS)[0])

    daemonsets.patch_spec(name, {"paused": True, **NEW_IMAGE})
    status = daemonsets.wait_for_status(name, observedGeneration=2, updatedNumberScheduled=0)
    progressing = next(c for c in status["conditions"] if c["type"] == "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "Paused")
    fake_nodes.add("late-1", zone="zone-a")
    daemonsets.wait_for_nodes(name, WORKERS | {"late-1"})
    time.sleep(2)
    revisions = {target_node_of(p): revision_of(p) for p in daemonsets.pods(name)}
    assert revisions["worker-1"] == revisions["worker-2"] == old_revision
    assert revisions["late-1"] != old_revision

    daemonsets.patch_spec(name, {"paused": False})

    daemonsets.wait_for_status(name, updatedNumberScheduled=3, numberAvailable=3)
    assert {revision_of(p) for p in daemonsets.pods(name)} == {revisions["late-1"]}
