"""What a SchedulerProfile must never do to a running cluster, shown with real kube-scheduler
pods: take the cluster's own scheduler's Lease, or replace a running configuration with one
kube-scheduler refuses."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster.realnode import NODE_NAME
from tests.helpers import eventually
from tests.integration.schedulers import (
    GROUP,
    PLURAL,
    VERSION,
    SchedulerProfiles,
    condition,
    scheduler_profile,
    wait_briefly,
)
from tests.realnode.conftest import RELEASE, RELEASE_NAMESPACE, RealCluster
from tests.realnode.test_scheduler_pods import (
    FAST_ELECTION,
    leading,
    lease_holder,
    real_node_profile,
    scheduler_pods,
)
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


def refused_at_apply(attempt: Callable[[], Any]) -> str:
    """The API server's refusal of a request, as kubectl prints it: the webhook's message."""
    with pytest.raises(ApiException) as refused:
        attempt()
    assert refused.value.status == 422, refused.value
    return str(refused.value.body)


def invalid_once_checked(profiles: SchedulerProfiles, name: str, attempt: Callable[[], Any]) -> str:
    """With no webhook the request goes through: the Valid=False condition's message, once the
    controller has checked this generation."""
    attempt()
    body = profiles.wait_for(name, "Valid", "False", "InvalidSpec")
    return str(condition(body, "Valid")["message"])


def webhook_answers(real: RealCluster, namespace: str) -> bool:
    """Whether the API server calls kubeherd's webhook: a dry run of a SchedulerProfile on the
    cluster's own scheduler's Lease is refused only by it."""
    probe = scheduler_profile(
        "probe",
        {"schedulerName": f"{namespace}-probe"},
        leaderElection={"resourceName": "kube-scheduler", "resourceNamespace": "kube-system"},
    )
    try:
        real.custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, probe, dry_run="All"
        )
    except ApiException as error:
        if error.status != 422:
            raise
        return True
    return False


@pytest.fixture
def webhook_down(chart_operator: RealCluster, profiles: SchedulerProfiles) -> Iterator[None]:
    """kubeherd's webhook configuration deleted, as when its operator is not installed with it
    or not there at all; the operator writes it again when it restarts."""
    real = chart_operator
    real.kubectl("delete", "validatingwebhookconfiguration", RELEASE)
    eventually(
        lambda: not webhook_answers(real, profiles.namespace),
        timeout=30,
        what="the API server to stop calling the webhook",
    )
    yield
    real.kubectl("rollout", "restart", f"deployment/{RELEASE}", "-n", RELEASE_NAMESPACE)
    real.kubectl(
        "rollout", "status", f"deployment/{RELEASE}", "-n", RELEASE_NAMESPACE, "--timeout=180s"
    )
    eventually(
        lambda: webhook_answers(real, profiles.namespace),
        timeout=60,
        what="the restarted operator's webhook to answer",
    )


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


def a_profile_on_the_clusters_scheduler_lease_is_refused_and_it_keeps_scheduling(
    real: RealCluster, profiles: SchedulerProfiles, refused: Callable[..., str]
) -> None:
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

    with the_clusters_scheduler_keeps_its_lease(real, profiles):
        message = refused(lambda: profiles.create(manifest))

    assert "Lease kube-system/kube-scheduler" in message


def test_a_command_pointing_at_the_clusters_scheduler_lease_is_refused(
    chart_operator: RealCluster, profiles: SchedulerProfiles
) -> None:
    """kube-scheduler honours --leader-elect-* flags even beside --config, and its role may
    update the Lease named kube-scheduler in any namespace: the CRD refuses such a command
    whether or not a webhook or an operator runs."""
    manifest = scheduler_profile(
        "usurper",
        {"schedulerName": f"{profiles.namespace}-usurper"},
        nodeSelector=ON_REAL_NODE,
        command=[
            "kube-scheduler",
            "--leader-elect-resource-namespace=kube-system",
            "--leader-elect-resource-name=kube-scheduler",
        ],
    )

    with the_clusters_scheduler_keeps_its_lease(chart_operator, profiles):
        message = refused_at_apply(lambda: profiles.create(manifest))

    assert "remove --leader-elect*" in message


@contextlib.contextmanager
def the_clusters_scheduler_keeps_its_lease(
    real: RealCluster, profiles: SchedulerProfiles
) -> Iterator[None]:
    """What the block does leaves kube-system/kube-scheduler to the cluster's own scheduler,
    which goes on binding pods."""
    leases = client.CoordinationV1Api(real.api)
    incumbent = leases.read_namespaced_lease("kube-scheduler", "kube-system").spec
    assert incumbent.holder_identity, "the cluster's scheduler elects on kube-system/kube-scheduler"
    yield
    wait_briefly(ROLLOUT_SECONDS)
    assert scheduler_pods(real, profiles.namespace, "usurper") == []
    default_scheduler_binds_a_pod(real, profiles.namespace, "still-scheduled")
    now = leases.read_namespaced_lease("kube-scheduler", "kube-system").spec
    assert now.holder_identity == incumbent.holder_identity
    assert now.lease_transitions == incumbent.lease_transitions


def test_a_profile_on_the_clusters_scheduler_lease_is_refused_at_apply(
    chart_operator: RealCluster, profiles: SchedulerProfiles
) -> None:
    a_profile_on_the_clusters_scheduler_lease_is_refused_and_it_keeps_scheduling(
        chart_operator, profiles, refused_at_apply
    )


def test_without_the_webhook_that_profile_is_invalid_and_runs_nothing(
    chart_operator: RealCluster, profiles: SchedulerProfiles, webhook_down: None
) -> None:
    a_profile_on_the_clusters_scheduler_lease_is_refused_and_it_keeps_scheduling(
        chart_operator, profiles, partial(invalid_once_checked, profiles, "usurper")
    )


def an_edit_kube_scheduler_would_refuse_leaves_the_running_scheduler_leading(
    real: RealCluster, profiles: SchedulerProfiles, refused: Callable[..., str]
) -> None:
    namespace = profiles.namespace
    profiles.create(real_node_profile(namespace, "steady"))
    leader = leading(real, profiles, "steady")
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

    message = refused(lambda: profiles.patch("steady", edit))

    assert "scoringStrategy" in message
    assert "weight" in message
    wait_briefly(ROLLOUT_SECONDS)
    (pod,) = scheduler_pods(real, namespace, "steady")
    assert pod.metadata.name == leader
    assert pod.status.phase == "Running"
    assert lease_holder(real, namespace, "steady") == leader
    assert profiles.get("steady")["status"]["configHash"] == steady_hash


def test_an_edit_kube_scheduler_would_refuse_is_refused_at_apply_and_nothing_rolls(
    chart_operator: RealCluster, profiles: SchedulerProfiles
) -> None:
    an_edit_kube_scheduler_would_refuse_leaves_the_running_scheduler_leading(
        chart_operator, profiles, refused_at_apply
    )


def test_without_the_webhook_such_an_edit_is_invalid_and_nothing_rolls(
    chart_operator: RealCluster, profiles: SchedulerProfiles, webhook_down: None
) -> None:
    an_edit_kube_scheduler_would_refuse_leaves_the_running_scheduler_leading(
        chart_operator, profiles, partial(invalid_once_checked, profiles, "steady")
    )


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
    profiles.create(real_node_profile(namespace, "undone"))
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
