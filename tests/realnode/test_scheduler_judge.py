"""A custom scheduler image judges each configuration before it runs it, shown with real pods of
kube-scheduler built here with kubeherd's own out-of-tree plugin (hack/schedplugin):
KubeherdNodeLabel, a Filter that admits only nodes with the label its args name, and refuses
args it cannot read. With valid args the configuration rolls out, leads and schedules with the
plugin; with invalid ones the image's refusal is reported in its own words while the running
scheduler goes on leading and binding. An official image is judged by the catalog alone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from localcluster.images import SCHEDULER_PLUGIN_IMAGE
from localcluster.realnode import NODE_NAME, REAL_NODE_LABEL
from tests.helpers import eventually
from tests.integration.schedulers import (
    SchedulerProfiles,
    condition,
    scheduled_by,
    scheduler_profile,
    wait_briefly,
)
from tests.realnode.conftest import RealCluster
from tests.realnode.test_scheduler_pods import FAST_ELECTION, leading, lease_holder
from tests.realnode.test_scheduler_safety import ROLLOUT_SECONDS, running_hash
from tests.realnode.test_scheduler_safety import webhook_down as webhook_down  # a fixture
from tests.realnode.workloads import ON_REAL_NODE, box_container, real_namespace

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

PLUGIN = "KubeherdNodeLabel"
JUDGE_SELECTOR = "kubeherd.io/judge"


@pytest.fixture
def profiles(chart_operator: RealCluster) -> Iterator[SchedulerProfiles]:
    with real_namespace(chart_operator, "judge") as namespace:
        profiles = SchedulerProfiles(chart_operator.custom, chart_operator.core, namespace)
        yield profiles
        profiles.clean_up()


def with_plugin(scheduler_name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "schedulerName": scheduler_name,
        "plugins": {"multiPoint": {"enabled": [{"name": PLUGIN}]}},
        "pluginConfig": [{"name": PLUGIN, "args": args}],
    }


def scheduler_pod_names(real: RealCluster, namespace: str, name: str) -> set[str]:
    """The scheduler Deployment's pods (not its judges), alive."""
    selector = f"app.kubernetes.io/name=kube-scheduler,app.kubernetes.io/instance={name}"
    pods = real.core.list_namespaced_pod(namespace, label_selector=selector).items
    return {pod.metadata.name for pod in pods if pod.metadata.deletion_timestamp is None}


def judge_pods(real: RealCluster, namespace: str) -> list[Any]:
    return list(real.core.list_namespaced_pod(namespace, label_selector=JUDGE_SELECTOR).items)


def create_pod(real: RealCluster, namespace: str, name: str, **spec: Any) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [box_container("sleep 3600")],
            **spec,
        },
    }
    real.core.create_namespaced_pod(namespace, pod)


def bound_node(real: RealCluster, namespace: str, name: str) -> str:
    def bound() -> str | None:
        node: str | None = real.core.read_namespaced_pod(name, namespace).spec.node_name
        return node

    return eventually(bound, timeout=60, what=f"pod {name} to be bound")


def kwok_node(real: RealCluster) -> str:
    """A fake node any pod may go to: untainted, without the real node's label."""
    nodes = real.core.list_node(label_selector="type=kwok").items
    return str(next(node.metadata.name for node in nodes if not node.spec.taints))


def failed_scheduling(real: RealCluster, namespace: str, pod: str) -> str:
    def message() -> str | None:
        selector = f"involvedObject.name={pod},reason=FailedScheduling"
        events = real.core.list_namespaced_event(namespace, field_selector=selector).items
        return next((str(e.message) for e in events if e.message), None)

    return eventually(message, timeout=60, what=f"the FailedScheduling event of {pod}")


def test_a_plugin_image_runs_what_it_accepts_and_refuses_bad_args_in_its_own_words(
    chart_operator: RealCluster, profiles: SchedulerProfiles
) -> None:
    real, namespace = chart_operator, profiles.namespace
    scheduler_name = f"{namespace}-labelled"
    profiles.create(
        scheduler_profile(
            "labelled",
            with_plugin(scheduler_name, {"label": REAL_NODE_LABEL}),
            image=SCHEDULER_PLUGIN_IMAGE,
            nodeSelector=ON_REAL_NODE,
            leaderElection={**FAST_ELECTION, "resourceName": "labelled"},
        )
    )

    # Judged by the image, then rolled out: it leads on its Lease.
    body = profiles.wait_for("labelled", "Valid", "True", "Valid", timeout=120)
    assert SCHEDULER_PLUGIN_IMAGE in condition(body, "Valid")["message"]
    assert profiles.events("labelled", "Judging")
    assert profiles.events("labelled", "AcceptedByImage")
    leader = leading(real, profiles, "labelled")
    assert lease_holder(real, namespace, "labelled") == leader
    eventually(lambda: judge_pods(real, namespace) == [], timeout=30, what="the judge to go")

    # The plugin is in play: a pod that names the scheduler goes to the labelled node, and one
    # that may only go to a node without the label stays Pending, for the plugin's reason.
    create_pod(real, namespace, "first", schedulerName=scheduler_name)
    assert bound_node(real, namespace, "first") == NODE_NAME
    assert scheduled_by(real.core, namespace, "first") == scheduler_name
    elsewhere = kwok_node(real)
    create_pod(
        real,
        namespace,
        "unlabelled",
        schedulerName=scheduler_name,
        nodeSelector={"kubernetes.io/hostname": elsewhere},
    )
    reason = failed_scheduling(real, namespace, "unlabelled")
    assert f"node(s) without label {REAL_NODE_LABEL} ({PLUGIN})" in reason
    assert real.core.read_namespaced_pod("unlabelled", namespace).spec.node_name is None

    running = running_hash(profiles, "labelled")
    pods = scheduler_pod_names(real, namespace, "labelled")
    profiles.patch(
        "labelled",
        {"spec": {"profiles": [with_plugin(scheduler_name, {"lable": REAL_NODE_LABEL})]}},
    )

    # Refused by kube-scheduler of the image, in its words; nothing of what runs changes.
    body = profiles.wait_for("labelled", "Valid", "False", "RefusedByImage", timeout=120)
    message = condition(body, "Valid")["message"]
    assert f"kube-scheduler of image {SCHEDULER_PLUGIN_IMAGE} refused configuration" in message
    assert f'initializing plugin "{PLUGIN}": {PLUGIN} args: unknown field "lable"' in message
    assert f"configuration {running} keeps running" in message
    warning = profiles.wait_for_event("labelled", "RefusedByImage", 'unknown field "lable"')
    assert warning.type == "Warning"
    wait_briefly(ROLLOUT_SECONDS)
    assert scheduler_pod_names(real, namespace, "labelled") == pods
    assert lease_holder(real, namespace, "labelled") == leader
    status = profiles.get("labelled")["status"]
    assert status["configHash"] == running
    assert status["leader"].split("_")[0] == leader
    assert judge_pods(real, namespace) == []

    # The previous configuration still schedules, with its plugin.
    create_pod(real, namespace, "second", schedulerName=scheduler_name)
    assert bound_node(real, namespace, "second") == NODE_NAME
    assert scheduled_by(real.core, namespace, "second") == scheduler_name


@pytest.mark.usefixtures("webhook_down")
def test_an_official_image_refused_by_the_catalog_starts_no_judge(
    chart_operator: RealCluster, profiles: SchedulerProfiles
) -> None:
    """With no webhook to refuse it at apply, the controller refuses it: the catalog of the
    official image's minor is enough, no pod runs to judge it."""
    namespace = profiles.namespace
    profiles.create(
        scheduler_profile(
            "catalogued",
            with_plugin(f"{namespace}-catalogued", {"label": REAL_NODE_LABEL}),
            nodeSelector=ON_REAL_NODE,
            leaderElection={**FAST_ELECTION, "resourceName": "catalogued"},
        )
    )

    body = profiles.wait_for("catalogued", "Valid", "False", "InvalidSpec")
    assert f"{PLUGIN} is not a plugin of kube-scheduler" in condition(body, "Valid")["message"]
    wait_briefly(5)
    assert judge_pods(chart_operator, namespace) == []
    assert not profiles.events("catalogued", "Judging")
    assert scheduler_pod_names(chart_operator, namespace, "catalogued") == set()
