"""CustomDaemonSet behaviour against the real control plane, with `kubeherd run` as a process.

Each test has its own namespace and asserts what a user sees: pods and their affinity, the
status, events and `kubectl get`.
"""

from __future__ import annotations

import contextlib
import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kubeherd.daemonset.core.rollout import MAX_FIRST_WINDOW
from localcluster.cluster import LocalCluster
from localcluster.nodes import CONTROL_PLANE_NODE, CONTROL_PLANE_ROLE, fake_node_manifest
from tests.helpers import CDS_COLUMNS, Kubectl, OperatorProcess, TrackedFakeNodes, eventually
from tests.integration.daemonsets import (
    ALL_NODES,
    FLUENTD,
    WORKERS,
    DaemonSets,
    agent,
    target_node_of,
)

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

NEW_IMAGE_TEMPLATE: dict[str, Any] = {
    "template": {"spec": {"containers": [{"name": "agent", "image": "registry.k8s.io/pause:3.9"}]}}
}


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


def test_a_status_someone_else_wrote_is_corrected_and_their_condition_kept(
    daemonsets: DaemonSets, custom_api: client.CustomObjectsApi
) -> None:
    name = daemonsets.create(agent())
    daemonsets.wait_for_status(name, numberAvailable=2, numberReady=2)
    audited = {
        "type": "example.com/Audited",
        "status": "True",
        "reason": "Checked",
        "message": "checked by a policy engine",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    conditions = daemonsets.get(name)["status"]["conditions"]

    # Another writer zeroes the counters and adds a condition of its own, as `kubectl patch
    # --subresource=status` would.
    zeroed = {"numberReady": 0, "numberAvailable": 0, "currentNumberScheduled": 0}
    custom_api.patch_namespaced_custom_object_status(
        "kubeherd.io",
        "v1alpha1",
        daemonsets.namespace,
        "customdaemonsets",
        name,
        {"status": {**zeroed, "conditions": [*conditions, audited]}},
    )

    status = daemonsets.wait_for_status(
        name, numberReady=2, numberAvailable=2, currentNumberScheduled=2
    )
    assert audited in status["conditions"]
    assert {"Available", "Progressing"} <= {c["type"] for c in status["conditions"]}


# A node affinity the API server refuses, which kubeherd's own matching would read as "no node".
UNKNOWN_OPERATOR = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "Foo", "values": ["a"]}]}
            ]
        }
    }
}


def template_valid(daemonsets: DaemonSets, name: str) -> dict[str, Any] | None:
    conditions = (daemonsets.get(name).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "TemplateValid"), None)


def test_a_template_the_api_server_refuses_is_reported_and_changes_no_pod(
    daemonsets: DaemonSets,
) -> None:
    # The tests' operator runs without its admission webhook: as while the webhook is down.
    name = daemonsets.create(agent())
    running = {p.metadata.uid for p in daemonsets.wait_for_nodes(name, WORKERS)}

    daemonsets.patch_spec(name, {"template": {"spec": {"affinity": UNKNOWN_OPERATOR}}})

    condition = eventually(lambda: template_valid(daemonsets, name), what="TemplateValid")
    assert (condition["status"], condition["reason"]) == ("False", "InvalidTemplate")
    assert "spec.template.spec.affinity.nodeAffinity" in condition["message"]
    assert '"Foo"' in condition["message"]
    (event,) = eventually(lambda: daemonsets.events(name, "InvalidTemplate"), what="an event")
    assert event.type == "Warning"
    assert '"Foo"' in event.message
    time.sleep(3)  # passes come and go: still nothing changes
    assert {p.metadata.uid for p in daemonsets.pods(name)} == running

    fixed = copy.deepcopy(NEW_IMAGE_TEMPLATE)
    fixed["template"]["spec"]["affinity"] = None
    daemonsets.patch_spec(name, fixed)

    eventually(lambda: template_valid(daemonsets, name) is None, what="the condition cleared")

    def rolled_out() -> bool:
        pods = daemonsets.pods(name)
        images = {p.spec.containers[0].image for p in pods}
        return len(pods) == 2 and images == {"registry.k8s.io/pause:3.9"}

    eventually(rolled_out, what="the fixed template on both nodes")


class UnreachablePodWebhook:
    """A mutating webhook for pods in one namespace that nobody serves: while it is installed,
    every pod create there, dry-runs too, fails with 500 (no verdict on the pod itself)."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self.admission = client.AdmissionregistrationV1Api(api_client)
        self.namespace = namespace
        self.name = f"unreachable-{namespace}"

    def install(self) -> None:
        rule = {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["pods"],
        }
        webhook = {
            "name": "unreachable.kubeherd.io",
            "clientConfig": {"url": "https://127.0.0.1:9/mutate"},
            "rules": [rule],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.namespace}},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 2,
        }
        self.admission.create_mutating_webhook_configuration(
            {"metadata": {"name": self.name}, "webhooks": [webhook]}
        )

    def remove(self) -> None:
        try:
            self.admission.delete_mutating_webhook_configuration(self.name)
        except client.ApiException as error:
            if error.status != 404:
                raise


@pytest.fixture
def unreachable_pod_webhook(
    api_client: client.ApiClient, namespace: str
) -> Iterator[UnreachablePodWebhook]:
    webhook = UnreachablePodWebhook(api_client, namespace)
    yield webhook
    webhook.remove()


def test_a_template_without_a_verdict_changes_no_pod_until_the_api_server_answers(
    daemonsets: DaemonSets, unreachable_pod_webhook: UnreachablePodWebhook
) -> None:
    name = daemonsets.create(agent())
    running = {p.metadata.uid for p in daemonsets.wait_for_nodes(name, WORKERS)}
    # The dry-run of an invalid template now gets no verdict rather than the API server's
    # refusal: a webhook it must call first cannot be reached.
    unreachable_pod_webhook.install()

    daemonsets.patch_spec(name, {"template": {"spec": {"affinity": UNKNOWN_OPERATOR}}})

    (event,) = eventually(
        lambda: daemonsets.events(name, "TemplateCheckFailed"), what="a Warning event"
    )
    assert event.type == "Warning"
    assert "failed calling webhook" in event.message
    time.sleep(5)  # retries come and go: nothing acts on a template that may be invalid
    assert {p.metadata.uid for p in daemonsets.pods(name)} == running
    assert template_valid(daemonsets, name) is None

    unreachable_pod_webhook.remove()

    condition = eventually(lambda: template_valid(daemonsets, name), what="TemplateValid")
    assert (condition["status"], condition["reason"]) == ("False", "InvalidTemplate")
    assert {p.metadata.uid for p in daemonsets.pods(name)} == running


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


# Nodes for the refusal tests: a window's worth and more, so a pass that sent every create it
# may would show in the count.
REFUSING_NODES = 200
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
# How long the refused creates are counted, and the operator's --max-create-backoff in tests.
REFUSAL_WINDOW, MAX_CREATE_BACKOFF = 20.0, 4.0
# Well within the first retry's backoff (1 s), and past the first pass's last answer.
FIRST_PASS_ANSWERED = 0.2


def refused_pod_creates(kubectl: Kubectl) -> int:
    """Pod creates (not dry runs) the API server has refused so far, by its own metrics."""
    total = 0
    for line in kubectl("get", "--raw", "/metrics").stdout.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels, _, value = line.rpartition(" ")
        if all(
            part in labels
            for part in ('resource="pods"', 'subresource=""', 'verb="POST"', 'dry_run=""')
        ) and any(f'code="{code}"' in labels for code in ("403", "422")):
            total += int(float(value))
    return total


# What refuses pods in the refusal tests, and how many pods each lets through.
QUOTA_NONE, QUOTA_FIVE, POLICY = "quota", "quota-5", "policy"
ALLOWED_PODS = {QUOTA_NONE: 0, QUOTA_FIVE: 5, POLICY: 0}


@contextlib.contextmanager
def refusing_pods(
    how: str, namespace: str, core_v1: client.CoreV1Api, api_client: client.ApiClient
) -> Iterator[None]:
    """A quota of no pods or of five, or a ValidatingAdmissionPolicy refusing every pod, in
    `namespace`. A quota or a policy that refuses every pod refuses the template's dry run
    too (403, which kubeherd reports but does not take for an invalid template); a quota of
    five admits it, and refuses the sixth pod on."""
    if how in (QUOTA_NONE, QUOTA_FIVE):
        pods = str(ALLOWED_PODS[how])
        core_v1.create_namespaced_resource_quota(
            namespace, {"metadata": {"name": "pods"}, "spec": {"hard": {"pods": pods}}}
        )
        eventually(
            lambda: (
                (core_v1.read_namespaced_resource_quota("pods", namespace).status.hard or {})
                == {"pods": pods}
            ),
            what="the quota to be counted",
        )
        yield
        return
    admission = client.AdmissionregistrationV1Api(api_client)
    name = f"refuse-{namespace}"[:63]
    admission.create_validating_admission_policy(
        {
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
                        }
                    ]
                },
                "validations": [
                    {"expression": "false", "message": "no pods here", "reason": "Forbidden"}
                ],
            },
        }
    )
    admission.create_validating_admission_policy_binding(
        {
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
                },
            },
        }
    )
    probe = {
        "metadata": {"name": "probe"},
        "spec": {"containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.9"}]},
    }

    def refused() -> bool:
        try:
            core_v1.create_namespaced_pod(namespace, probe, dry_run="All")
        except client.ApiException as error:
            return bool(error.status == 403)
        return False

    eventually(refused, what="the policy to refuse pods")
    try:
        yield
    finally:
        admission.delete_validating_admission_policy_binding(name)
        admission.delete_validating_admission_policy(name)


def wait_until_nodes_are_quiet(core_v1: client.CoreV1Api, quiet: float = 5.0) -> None:
    """Until no node has changed for `quiet` seconds: kube-controller-manager and kwok are done
    with the new nodes, and every pass the rollout makes is the controller's own."""
    versions: dict[str, str] = {}

    def unchanged() -> bool:
        now = {n.metadata.name: n.metadata.resource_version for n in core_v1.list_node().items}
        settled = now == versions
        versions.clear()
        versions.update(now)
        if not settled:
            time.sleep(quiet)
        return settled

    eventually(unchanged, timeout=180, what="the nodes to settle")


@pytest.mark.parametrize("how", [QUOTA_NONE, POLICY, QUOTA_FIVE])
def test_a_refused_rollout_costs_one_create_per_retry_not_one_per_node(
    how: str,
    daemonsets: DaemonSets,
    core_v1: client.CoreV1Api,
    api_client: client.ApiClient,
    kubectl: Kubectl,
    fake_nodes: TrackedFakeNodes,
) -> None:
    added = [f"refusing-{index:03d}" for index in range(REFUSING_NODES - len(WORKERS))]
    fake_nodes.create([fake_node_manifest(name, zone="zone-a") for name in added], timeout=300)
    # The API server taints a new node not-ready, and kube-controller-manager lifts it a few
    # nodes a second: each node it lifts becomes eligible, which is a pass of its own with a
    # create of its own. Lifted at once, the nodes are settled before the rollout starts.
    for added_node in added:
        fake_nodes.untaint(added_node, NOT_READY_TAINT)
    wait_until_nodes_are_quiet(core_v1)
    with refusing_pods(how, daemonsets.namespace, core_v1, api_client):
        before = refused_pod_creates(kubectl)
        started = time.monotonic()
        name = daemonsets.create(agent())
        try:
            first = eventually(
                lambda: refused_pod_creates(kubectl) - before, what="a refused pod create"
            )
            # The first pass's creates are answered together; its retry is a second away.
            time.sleep(FIRST_PASS_ANSWERED)
            first_pass = refused_pod_creates(kubectl) - before
            time.sleep(max(0.0, REFUSAL_WINDOW - (time.monotonic() - started)))
            refused = refused_pod_creates(kubectl) - before
            pods = len(daemonsets.pods(name))
        finally:
            # Gone before what refuses its pods is.
            daemonsets.delete(name)
            eventually(lambda: not daemonsets.exists(name), what="the CustomDaemonSet to go")
    print(
        f"{how}: {pods} pods, {first_pass} pod creates refused in the first pass "
        f"(first seen {first}), {refused} in {REFUSAL_WINDOW:.0f} s"
    )
    assert pods == ALLOWED_PODS[how]
    # Each retry, 1, 2, 4 s apart and then every MAX_CREATE_BACKOFF, is one create (the window
    # opens at 1 after a refusal): a few per backoff window, never one per node.
    retries = 3 + REFUSAL_WINDOW / MAX_CREATE_BACKOFF
    if how == QUOTA_FIVE:
        # The dry run was admitted, so the first pass's window opened wide. Each pod created
        # widens it by one (and frees its place) before the first refusal comes back, so what
        # the quota refused of it is the opening window and one more per pod it admitted at
        # most, and one retry may be in the count; every retry after is one create.
        assert ALLOWED_PODS[how] + MAX_FIRST_WINDOW < REFUSING_NODES
        assert 1 <= first_pass <= MAX_FIRST_WINDOW + ALLOWED_PODS[how] + 1
        assert refused <= first_pass + 2 * retries
    else:
        # The dry run was refused too: the window opens at 1 (2 if the first retry, a second
        # later, came before the count was read).
        assert first_pass <= 2
        assert 1 <= refused <= 2 * retries < REFUSING_NODES


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


def test_a_foreground_delete_is_left_to_the_garbage_collector(daemonsets: DaemonSets) -> None:
    """`kubectl delete --cascade=foreground`: the CustomDaemonSet stays, marked for deletion,
    while the garbage collector deletes its pods. Recreating them would fight the collector."""
    name = daemonsets.create(agent())
    daemonsets.wait_for_nodes(name, WORKERS)
    created_before = len(daemonsets.events(name, "SuccessfulCreate"))

    daemonsets.delete(name, propagation="Foreground")

    eventually(lambda: not daemonsets.exists(name), what="the foreground delete to finish")
    assert daemonsets.pods(name) == []
    # Any pod recreated during the delete would have been announced within a second or two.
    time.sleep(2)
    assert len(daemonsets.events(name, "SuccessfulCreate")) == created_before


@pytest.fixture
def second_operator(
    local_cluster: LocalCluster, namespace: str, operator_kubeconfig: Path
) -> Iterator[OperatorProcess]:
    process = OperatorProcess(
        local_cluster,
        name="kubeherd-second",
        arguments=("--namespace", namespace),
        kubeconfig=operator_kubeconfig,
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
