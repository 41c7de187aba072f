"""CustomDaemonSet updates against the real control plane, with `kubeherd run` as a process:
rolling updates watched pod by pod, surge, OnDelete, pause, partition, revisions and rollback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest
from kubernetes import client

from localcluster.cluster import LocalCluster
from tests.helpers import REPO, Kubectl, TrackedFakeNodes, eventually
from tests.integration.daemonsets import (
    NEW_IMAGE,
    WORKERS,
    DaemonSets,
    agent,
    revision_of,
    target_node_of,
    watch_rollout,
)

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]


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
    new_revision = revision_of(daemonsets.pods(name)[0])
    status = daemonsets.wait_for_status(
        name,
        desiredNumberScheduled=5,
        updatedNumberScheduled=5,
        numberAvailable=5,
        updateRevision=f"{name}-{new_revision}",
        currentRevision=f"{name}-{new_revision}",
    )
    assert daemonsets.revisions(name) == {1: old_revision, 2: new_revision}
    assert daemonsets.progressing(name)["reason"] == "RolloutComplete"
    replaced = [
        e.message for e in daemonsets.events(name, "SuccessfulDelete") if "out of date" in e.message
    ]
    assert len(replaced) == 5
    finished = eventually(
        lambda: [
            e.message
            for e in daemonsets.events(name, "RolloutComplete")
            if e.message.startswith("revision 2 ")
        ],
        what="a RolloutComplete event for revision 2",
    )
    assert finished == ["revision 2 runs on all 5 eligible nodes and is available"]
    assert status["observedGeneration"] == 2


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


def test_a_partition_keeps_the_last_nodes_on_the_old_revision(
    daemonsets: DaemonSets, fake_nodes: TrackedFakeNodes, core_v1: client.CoreV1Api
) -> None:
    extra = {"part-1", "part-2", "part-3"}
    for node_name in sorted(extra):
        fake_nodes.add(node_name, zone="zone-a")
    nodes = WORKERS | extra
    manifest = agent()
    manifest["spec"]["updateStrategy"] = {"rollingUpdate": {"maxUnavailable": 2, "partition": 2}}
    name = daemonsets.create(manifest)
    old_revision = revision_of(daemonsets.wait_for_nodes(name, nodes)[0])

    daemonsets.patch_spec(name, NEW_IMAGE)

    # Nodes update in name order, so worker-1 and worker-2 (the last by name) stay behind.
    eventually(
        lambda: daemonsets.progressing(name).get("reason") == "PartitionRolledOut",
        what="the partitioned rollout to finish",
    )
    pods = daemonsets.wait_for_nodes(name, nodes)
    revisions = {target_node_of(p): revision_of(p) for p in pods}
    assert {node for node, rev in revisions.items() if rev == old_revision} == WORKERS
    new_revision = revisions["part-1"]
    status = daemonsets.get(name)["status"]
    assert status["updatedNumberScheduled"] == 3
    assert status["currentRevision"] == f"{name}-{old_revision}"
    assert status["updateRevision"] == f"{name}-{new_revision}"
    eventually(lambda: daemonsets.events(name, "PartitionRolledOut"), what="PartitionRolledOut")

    # A kept node that loses its pod gets the old revision back.
    victim = next(p for p in pods if target_node_of(p) == "worker-2")
    core_v1.delete_namespaced_pod(victim.metadata.name, daemonsets.namespace)
    eventually(
        lambda: (
            victim.metadata.uid not in {p.metadata.uid for p in daemonsets.pods(name)}
            and len(daemonsets.wait_for_nodes(name, nodes)) == 5
        ),
        what="the deleted pod replaced",
    )
    revisions = {target_node_of(p): revision_of(p) for p in daemonsets.pods(name)}
    assert revisions["worker-2"] == old_revision
    assert sum(rev == old_revision for rev in revisions.values()) == 2

    daemonsets.patch_spec(name, {"updateStrategy": {"rollingUpdate": {"partition": 0}}})

    daemonsets.wait_for_status(
        name, updatedNumberScheduled=5, numberAvailable=5, currentRevision=f"{name}-{new_revision}"
    )
    assert {revision_of(p) for p in daemonsets.wait_for_nodes(name, nodes)} == {new_revision}


NEW_IMAGE_NAME = "registry.k8s.io/pause:3.9"
BROKEN_IMAGE = {
    "template": {
        "spec": {"containers": [{"name": "agent", "image": "unpullable.invalid/agent:broken"}]}
    }
}


def test_a_template_whose_pods_never_become_ready_halts_the_rollout_until_fixed(
    daemonsets: DaemonSets, fake_nodes: TrackedFakeNodes
) -> None:
    extra = {"stuck-1", "stuck-2"}
    for node_name in sorted(extra):
        fake_nodes.add(node_name, zone="zone-c")
    nodes = WORKERS | extra
    manifest = agent()
    manifest["spec"]["progressDeadlineSeconds"] = 5
    name = daemonsets.create(manifest)
    old_revision = revision_of(daemonsets.wait_for_nodes(name, nodes)[0])

    daemonsets.patch_spec(name, BROKEN_IMAGE)

    stuck = eventually(
        lambda: daemonsets.events(name, "RolloutStuck"), timeout=60, what="a RolloutStuck event"
    )
    progressing = daemonsets.progressing(name)
    assert (progressing["status"], progressing["reason"]) == ("False", "ProgressDeadlineExceeded")
    assert "ImagePullBackOff" in progressing["message"]
    assert "maxUnavailable 1" in progressing["message"]
    assert stuck[0].type == "Warning"
    assert stuck[0].message == progressing["message"]
    # Halted at maxUnavailable: one node runs the broken pod, the others keep theirs.
    time.sleep(2)
    pods = daemonsets.pods(name)
    assert sum(revision_of(p) != old_revision for p in pods) == 1
    assert sum(revision_of(p) == old_revision and p.status.phase == "Running" for p in pods) == 3
    status = daemonsets.get(name)["status"]
    assert (status["numberAvailable"], status["desiredNumberScheduled"]) == (3, 4)

    daemonsets.patch_spec(name, NEW_IMAGE)

    daemonsets.wait_for_status(name, updatedNumberScheduled=4, numberAvailable=4, timeout=90)
    assert {p.spec.containers[0].image for p in daemonsets.wait_for_nodes(name, nodes)} == {
        "registry.k8s.io/pause:3.9"
    }
    assert daemonsets.progressing(name)["reason"] == "RolloutComplete"


def test_old_revisions_beyond_the_history_limit_are_pruned_unless_a_pod_runs_them(
    daemonsets: DaemonSets,
) -> None:
    manifest = agent()
    manifest["spec"]["updateStrategy"] = {"type": "OnDelete"}
    manifest["spec"]["revisionHistoryLimit"] = 1
    name = daemonsets.create(manifest)
    first = revision_of(daemonsets.wait_for_nodes(name, WORKERS)[0])

    for generation, tag in enumerate(("3.8", "3.7", "3.6"), start=2):
        image = {"template": {"spec": {"containers": [{"name": "agent", "image": f"pause:{tag}"}]}}}
        daemonsets.patch_spec(name, image)
        daemonsets.wait_for_status(name, observedGeneration=generation)

    # Revisions 2 and 3 are pruned; 1 stays, as the pods (OnDelete) still run it.
    def pruned() -> dict[int, str] | None:
        found = daemonsets.revisions(name)
        return found if len(found) == 2 else None

    revisions = eventually(pruned, what="two ControllerRevisions left")
    assert sorted(revisions) == [1, 4]
    assert revisions[1] == first
    assert daemonsets.get(name)["status"]["updateRevision"] == f"{name}-{revisions[4]}"


def kubeherd(cluster: LocalCluster, *arguments: str) -> subprocess.CompletedProcess[str]:
    """The kubeherd command line, as a user runs it against the cluster."""
    return subprocess.run(
        [sys.executable, "-m", "kubeherd.cli", *arguments],
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_undo_brings_back_the_previous_template_and_status_waits_for_it(
    daemonsets: DaemonSets, local_cluster: LocalCluster
) -> None:
    manifest = agent()
    manifest["spec"]["minReadySeconds"] = 2
    name = daemonsets.create(manifest)
    resource = ("cds/agent", "-n", daemonsets.namespace)
    first = revision_of(daemonsets.wait_for_nodes(name, WORKERS)[0])
    daemonsets.patch_spec(name, NEW_IMAGE)
    waited = kubeherd(local_cluster, "rollout", "status", *resource, "--timeout", "90s")
    assert waited.returncode == 0, waited.stderr
    assert waited.stdout.splitlines()[-1] == 'customdaemonset "agent" successfully rolled out'
    assert {p.spec.containers[0].image for p in daemonsets.pods(name)} == {NEW_IMAGE_NAME}

    # Long enough that the rollback outlasts the CLI's start-up, even on a loaded machine (a
    # change of minReadySeconds alone makes no new revision).
    daemonsets.patch_spec(name, {"minReadySeconds": 6})

    undone = kubeherd(local_cluster, "rollout", "undo", *resource)

    assert undone.returncode == 0, undone.stderr
    assert undone.stdout == "customdaemonset.kubeherd.io/agent rolled back\n"
    waited = kubeherd(local_cluster, "rollout", "status", *resource, "--timeout", "90s")
    assert waited.returncode == 0, waited.stderr
    # minReadySeconds makes the wait visible: status saw the pods being replaced.
    assert "Waiting for customdaemonset" in waited.stdout
    pods = daemonsets.wait_for_nodes(name, WORKERS)
    assert {p.spec.containers[0].image for p in pods} == {"registry.k8s.io/pause:3.10"}
    assert {revision_of(p) for p in pods} == {first}
    history = kubeherd(local_cluster, "rollout", "history", *resource)
    assert [line.split() for line in history.stdout.splitlines()[1:]] == [
        ["REVISION", "IMAGES", "CHANGE-CAUSE"],
        ["2", NEW_IMAGE_NAME, "<none>"],
        ["3", "registry.k8s.io/pause:3.10", "<none>"],
    ]
    assert daemonsets.revisions(name)[3] == first


def test_rollout_status_fails_on_a_stuck_rollout_and_on_a_timeout(
    daemonsets: DaemonSets, local_cluster: LocalCluster
) -> None:
    manifest = agent()
    manifest["spec"]["progressDeadlineSeconds"] = 10
    name = daemonsets.create(manifest)
    daemonsets.wait_for_nodes(name, WORKERS)
    resource = ("cds/agent", "-n", daemonsets.namespace)
    daemonsets.patch_spec(name, BROKEN_IMAGE)

    timed_out = kubeherd(local_cluster, "rollout", "status", *resource, "--timeout", "1s")
    stuck = kubeherd(local_cluster, "rollout", "status", *resource, "--timeout", "60s")

    assert timed_out.returncode == 1
    assert timed_out.stderr == "error: timed out waiting for the condition\n"
    assert stuck.returncode == 1
    assert stuck.stderr.startswith(
        'error: customdaemonset "agent" rollout is stuck: revision 2 made no progress for 10s'
    )
    assert "ImagePullBackOff" in stuck.stderr


def label_revision(daemonsets: DaemonSets, kubectl: Kubectl, revision_name: str) -> Any:
    """`kubectl label controllerrevision` as a user runs it; the revision as it is then."""
    labelled = kubectl(
        "label",
        "controllerrevision",
        revision_name,
        "team=infra",
        "-n",
        daemonsets.namespace,
        check=False,
    )
    assert labelled.returncode == 0, labelled.stderr
    revision = daemonsets.apps.read_namespaced_controller_revision(
        revision_name, daemonsets.namespace
    )
    assert revision.metadata.labels["team"] == "infra"
    return revision


def test_revisions_can_be_labelled_and_an_undo_renumbers_the_same_object(
    daemonsets: DaemonSets, local_cluster: LocalCluster, kubectl: Kubectl
) -> None:
    name = daemonsets.create(agent())
    first = revision_of(daemonsets.wait_for_nodes(name, WORKERS)[0])
    revision_name = f"{name}-{first}"

    before = label_revision(daemonsets, kubectl, revision_name)

    daemonsets.patch_spec(name, NEW_IMAGE)
    daemonsets.wait_for_status(name, updatedNumberScheduled=2, numberAvailable=2)
    undone = kubeherd(local_cluster, "rollout", "undo", f"cds/{name}", "-n", daemonsets.namespace)
    assert undone.returncode == 0, undone.stderr

    eventually(lambda: daemonsets.revisions(name).get(3) == first, what="revision 3 is the first")
    after = daemonsets.apps.read_namespaced_controller_revision(revision_name, daemonsets.namespace)
    assert after.metadata.uid == before.metadata.uid
    assert after.revision == 3


def test_a_template_with_text_in_any_script_is_recorded_and_rolled_out(
    daemonsets: DaemonSets, kubectl: Kubectl
) -> None:
    # Emoji lie beyond the Basic Multilingual Plane, where JSON and YAML escape differently.
    greeting = "héllo, 世界 🚀\\ud83d"
    manifest = agent(
        containers=[
            {
                "name": "agent",
                "image": "registry.k8s.io/pause:3.10",
                "env": [{"name": "GREETING", "value": greeting}],
            }
        ]
    )
    manifest["spec"]["template"]["metadata"]["annotations"] = {"note": "🛰️ node agent"}
    name = daemonsets.create(manifest)

    pods = daemonsets.wait_for_nodes(name, WORKERS)
    assert {pod.spec.containers[0].env[0].value for pod in pods} == {greeting}
    revision_name = f"{name}-{revision_of(pods[0])}"
    stored = label_revision(daemonsets, kubectl, revision_name)
    assert stored.data["spec"]["template"]["metadata"]["annotations"] == {"note": "🛰️ node agent"}
