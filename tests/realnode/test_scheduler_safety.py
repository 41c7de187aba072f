"""What a SchedulerProfile must never do to a running cluster, shown with real kube-scheduler
pods: take the cluster's own scheduler's Lease, or replace a running configuration with one
kube-scheduler refuses."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster.realnode import NODE_NAME
from tests.helpers import eventually
from tests.integration.schedulers import (
    SchedulerProfiles,
    condition,
    scheduler_profile,
    wait_briefly,
)
from tests.realnode.conftest import RealCluster
from tests.realnode.test_scheduler_pods import FAST_ELECTION, leading, lease_holder, scheduler_pods
from tests.realnode.workloads import ON_REAL_NODE, box_container, real_namespace

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

# Long enough for a replacement pod to start and take the Lease, had one been rolled out.
ROLLOUT_SECONDS = 15.0


@pytest.fixture
def profiles(chart_operator: RealCluster) -> Iterator[SchedulerProfiles]:
    with real_namespace(chart_operator, "safety") as namespace:
        profiles = SchedulerProfiles(chart_operator.custom, chart_operator.core, namespace)
        yield profiles
        profiles.clean_up()


def refusal(profiles: SchedulerProfiles, name: str, attempt: Any) -> str:
    """What a user is told when kubeherd refuses a SchedulerProfile: the API server's refusal
    at apply (the webhook), else the Valid=False condition's message once the controller has
    checked this generation."""
    try:
        attempt()
    except ApiException as error:
        if error.status not in (400, 403, 422):
            raise
        return str(error.body)
    body = profiles.wait_for(name, "Valid", "False", "InvalidSpec")
    return str(condition(body, "Valid")["message"])


def running_hash(profiles: SchedulerProfiles, name: str) -> str:
    """The configuration the SchedulerProfile says runs, once its rollout is over (the status
    names a configuration only when its pods are available)."""
    body = profiles.wait_for(name, "Progressing", "True", "RolledOut", timeout=180)
    return str(body["status"]["configHash"])


def default_scheduler_binds_a_pod(real: RealCluster, namespace: str, name: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": ON_REAL_NODE,
            "terminationGracePeriodSeconds": 1,
            "containers": [box_container("sleep 3600")],
        },
    }
    real.core.create_namespaced_pod(namespace, pod)

    def bound() -> str | None:
        node: str | None = real.core.read_namespaced_pod(name, namespace).spec.node_name
        return node

    assert eventually(bound, timeout=60, what=f"pod {name} to be bound") == NODE_NAME


def test_a_profile_on_the_clusters_scheduler_lease_is_refused_and_it_keeps_scheduling(
    chart_operator: RealCluster, profiles: SchedulerProfiles
) -> None:
    leases = client.CoordinationV1Api(chart_operator.api)
    incumbent = leases.read_namespaced_lease("kube-scheduler", "kube-system").spec
    assert incumbent.holder_identity, "the cluster's scheduler elects on kube-system/kube-scheduler"
    manifest = scheduler_profile(
        "usurper",
        {"schedulerName": f"{profiles.namespace}-usurper"},
        nodeSelector=ON_REAL_NODE,
        leaderElection={
            **FAST_ELECTION,
            "resourceName": "kube-scheduler",
            "resourceNamespace": "kube-system",
        },
    )

    message = refusal(profiles, "usurper", lambda: profiles.create(manifest))

    assert "Lease kube-system/kube-scheduler" in message
    assert scheduler_pods(chart_operator, profiles.namespace, "usurper") == []
    default_scheduler_binds_a_pod(chart_operator, profiles.namespace, "still-scheduled")
    now = leases.read_namespaced_lease("kube-scheduler", "kube-system").spec
    assert now.holder_identity == incumbent.holder_identity
    assert now.lease_transitions == incumbent.lease_transitions


def test_an_edit_kube_scheduler_would_refuse_leaves_the_running_scheduler_leading(
    chart_operator: RealCluster, profiles: SchedulerProfiles
) -> None:
    namespace = profiles.namespace
    profiles.create(
        scheduler_profile(
            "steady",
            {"schedulerName": f"{namespace}-steady"},
            nodeSelector=ON_REAL_NODE,
            leaderElection={**FAST_ELECTION, "resourceName": "steady"},
        )
    )
    leader = leading(chart_operator, profiles, "steady")
    steady_hash = running_hash(profiles, "steady")
    # The API server passes plugin args unread; kube-scheduler refuses a weight above 100.
    refused_by_kube_scheduler = {
        "name": "NodeResourcesFit",
        "args": {
            "scoringStrategy": {
                "type": "MostAllocated",
                "resources": [{"name": "cpu", "weight": 101}],
            }
        },
    }
    edit = {
        "spec": {
            "profiles": [
                {
                    "schedulerName": f"{namespace}-steady",
                    "pluginConfig": [refused_by_kube_scheduler],
                }
            ]
        }
    }

    message = refusal(profiles, "steady", lambda: profiles.patch("steady", edit))

    assert "scoringStrategy" in message
    assert "weight" in message
    wait_briefly(ROLLOUT_SECONDS)
    (pod,) = scheduler_pods(chart_operator, namespace, "steady")
    assert pod.metadata.name == leader
    assert pod.status.phase == "Running"
    assert lease_holder(chart_operator, namespace, "steady") == leader
    assert profiles.get("steady")["status"]["configHash"] == steady_hash


def mounted_configuration(real: RealCluster, pod: Any) -> str:
    """The configuration file the scheduler pod reads, as the kubelet mounted it on the node."""
    uid = str(pod.metadata.uid)
    volumes = real.cluster.folder / "node" / "kubelet" / "pods" / uid / "volumes"
    (path,) = volumes.glob("kubernetes.io~configmap/*/config.yaml")
    return path.read_text()


def test_rollout_undo_brings_back_the_old_configuration_with_the_old_template(
    chart_operator: RealCluster, profiles: SchedulerProfiles
) -> None:
    namespace = profiles.namespace
    profiles.create(
        scheduler_profile(
            "undone",
            {"schedulerName": f"{namespace}-undone"},
            nodeSelector=ON_REAL_NODE,
            leaderElection={**FAST_ELECTION, "resourceName": "undone"},
        )
    )
    first_leader = leading(chart_operator, profiles, "undone")
    first_hash = running_hash(profiles, "undone")
    (first_pod,) = scheduler_pods(chart_operator, namespace, "undone")
    first_configuration = mounted_configuration(chart_operator, first_pod)
    assert "percentageOfNodesToScore: 0" in first_configuration

    profiles.patch("undone", {"spec": {"percentageOfNodesToScore": 50}})
    assert running_hash(profiles, "undone") != first_hash
    second_leader = leading(chart_operator, profiles, "undone")
    assert second_leader != first_leader

    chart_operator.kubectl("rollout", "undo", "deployment/undone", "-n", namespace)

    def back_to_first() -> dict[str, Any] | None:
        body = profiles.get("undone")
        status = body.get("status") or {}
        rolled_back = condition(body, "Progressing").get("reason") == "RolledBack"
        return body if rolled_back and status.get("configHash") == first_hash else None

    eventually(back_to_first, timeout=180, what="the first configuration to run again")
    leader = leading(chart_operator, profiles, "undone")
    (pod,) = [
        p for p in scheduler_pods(chart_operator, namespace, "undone") if p.metadata.name == leader
    ]
    assert pod.metadata.annotations["kubeherd.io/config-hash"] == first_hash
    assert mounted_configuration(chart_operator, pod) == first_configuration
    assert lease_holder(chart_operator, namespace, "undone") == leader
