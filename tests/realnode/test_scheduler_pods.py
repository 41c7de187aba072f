"""SchedulerProfiles whose kube-scheduler runs as real pods, from the image a SchedulerProfile
uses by default on this cluster: they take their Lease, bind pods that name them, roll on a
configuration change, and hand over when the leader goes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster.images import scheduler_image
from localcluster.realnode import NODE_NAME
from tests.helpers import eventually
from tests.integration.schedulers import SchedulerProfiles, scheduled_by, scheduler_profile
from tests.realnode.conftest import RealCluster
from tests.realnode.workloads import ON_REAL_NODE, box_daemonset, real_namespace

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

# Short lease timings so a handover shows within seconds.
FAST_ELECTION = {
    "leaderElect": True,
    "leaseDuration": "6s",
    "renewDeadline": "4s",
    "retryPeriod": "1s",
}


@pytest.fixture
def profiles(chart_operator: RealCluster) -> Iterator[SchedulerProfiles]:
    with real_namespace(chart_operator, "scheduler") as namespace:
        profiles = SchedulerProfiles(chart_operator.custom, chart_operator.core, namespace)
        yield profiles
        profiles.clean_up()


def real_node_profile(namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    """A SchedulerProfile of one profile named after it, whose pods run on the real node and
    elect on a Lease of its name with short timings."""
    return scheduler_profile(
        name,
        {"schedulerName": f"{namespace}-{name}"},
        nodeSelector=ON_REAL_NODE,
        leaderElection={**FAST_ELECTION, "resourceName": name},
        **spec,
    )


def scheduler_pods(real: RealCluster, namespace: str, name: str) -> list[Any]:
    pods = real.core.list_namespaced_pod(namespace).items
    return [
        pod
        for pod in pods
        if pod.metadata.name.startswith(f"{name}-") and pod.metadata.deletion_timestamp is None
    ]


def lease_holder(real: RealCluster, namespace: str, lease: str) -> str | None:
    try:
        found = client.CoordinationV1Api(real.api).read_namespaced_lease(lease, namespace)
    except ApiException:
        return None
    holder = found.spec.holder_identity or ""
    # kube-scheduler's identity is "<pod name>_<uuid>".
    return holder.split("_")[0] or None


def leading(real: RealCluster, profiles: SchedulerProfiles, name: str) -> str:
    """The pod the SchedulerProfile's status names as leader, once that pod runs (the status
    shows the Lease's holder: kube-scheduler's identity, "<pod name>_<uuid>")."""

    def leader() -> str | None:
        holder = (profiles.get(name).get("status") or {}).get("leader") or ""
        pods = {pod.metadata.name for pod in scheduler_pods(real, profiles.namespace, name)}
        pod = holder.split("_")[0]
        return pod if pod in pods else None

    return eventually(leader, timeout=180, what=f"a running leader of {name}")


def test_a_scheduler_profile_leads_and_binds_a_daemon_pod_on_the_real_node(
    chart_operator: RealCluster, profiles: SchedulerProfiles
) -> None:
    namespace = profiles.namespace
    scheduler_name = f"{namespace}-packer"
    profiles.create(
        scheduler_profile(
            "packer",
            {"schedulerName": scheduler_name},
            nodeSelector=ON_REAL_NODE,
            leaderElection={**FAST_ELECTION, "resourceName": "packer"},
        )
    )

    leader = leading(chart_operator, profiles, "packer")

    (pod,) = scheduler_pods(chart_operator, namespace, "packer")
    assert pod.spec.node_name == NODE_NAME
    assert pod.spec.containers[0].image == scheduler_image()
    assert lease_holder(chart_operator, namespace, "packer") == leader
    table = chart_operator.kubectl("get", "sp", "-n", namespace, "packer").stdout
    assert leader in table.splitlines()[1]

    daemonsets = chart_operator.daemonsets(namespace)
    name = daemonsets.create(box_daemonset("bound", "sleep 3600", schedulerName=scheduler_name))
    (daemon_pod,) = daemonsets.wait_for_nodes(name, {NODE_NAME}, timeout=120)
    assert daemon_pod.spec.node_name == NODE_NAME
    assert scheduled_by(chart_operator.core, namespace, daemon_pod.metadata.name) == scheduler_name


def test_a_configuration_change_rolls_the_scheduler_pods_and_the_lease_moves(
    chart_operator: RealCluster, profiles: SchedulerProfiles
) -> None:
    namespace = profiles.namespace
    profiles.create(real_node_profile(namespace, "rolling"))
    first = leading(chart_operator, profiles, "rolling")

    profiles.patch("rolling", {"spec": {"percentageOfNodesToScore": 50}})

    def moved() -> str | None:
        holder = lease_holder(chart_operator, namespace, "rolling")
        return holder if holder and holder != first else None

    second = eventually(moved, timeout=180, what="the Lease to move to a new scheduler pod")
    pods = {pod.metadata.name for pod in scheduler_pods(chart_operator, namespace, "rolling")}
    assert first not in pods or len(pods) > 1
    assert leading(chart_operator, profiles, "rolling") == second


def test_deleting_the_leader_of_two_scheduler_pods_hands_over(
    chart_operator: RealCluster, profiles: SchedulerProfiles
) -> None:
    namespace = profiles.namespace
    profiles.create(real_node_profile(namespace, "pair", replicas=2))
    eventually(
        lambda: (
            len(
                [
                    pod
                    for pod in scheduler_pods(chart_operator, namespace, "pair")
                    if pod.status.phase == "Running"
                ]
            )
            == 2
        ),
        timeout=180,
        what="two running scheduler pods",
    )
    leader = leading(chart_operator, profiles, "pair")

    chart_operator.kubectl("delete", "pod", "-n", namespace, leader, "--timeout=60s")

    def new_leader() -> str | None:
        holder = lease_holder(chart_operator, namespace, "pair")
        return holder if holder and holder != leader else None

    successor = eventually(new_leader, timeout=30, what="the other scheduler pod to lead")
    assert successor != leader
