"""What a CustomDaemonSet claims, as a DaemonSet does: by selector and controller reference.

Revisions labelled the native way, orphaned pods and pods relabelled out of the selector.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes import client

from kubeherd.daemonset.core.pods import template_hash
from tests.helpers import eventually
from tests.integration.daemonsets import WORKERS, DaemonSets, agent, target_node_of

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

NEW_IMAGE_NAME = "registry.k8s.io/pause:3.9"


def controller_of(pod: Any) -> str | None:
    return next((ref.uid for ref in pod.metadata.owner_references or [] if ref.controller), None)


def owner_reference(cds: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kubeherd.io/v1alpha1",
        "kind": "CustomDaemonSet",
        "name": cds["metadata"]["name"],
        "uid": cds["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def test_a_revision_labelled_the_native_way_is_recognised_and_the_update_rolls_out(
    daemonsets: DaemonSets, apps_v1: client.AppsV1Api
) -> None:
    name = daemonsets.create(agent())
    daemonsets.wait_for_nodes(name, WORKERS)
    cds = daemonsets.get(name)
    template = copy.deepcopy(cds["spec"]["template"])
    template["spec"]["containers"][0]["image"] = NEW_IMAGE_NAME
    hash_ = template_hash(template)
    # As the native controller labels its revisions: the template's labels and the hash.
    apps_v1.create_namespaced_controller_revision(
        daemonsets.namespace,
        {
            "metadata": {
                "name": f"{name}-{hash_}",
                "labels": {**template["metadata"]["labels"], "controller-revision-hash": hash_},
                "ownerReferences": [owner_reference(cds)],
            },
            "data": {"spec": {"template": {**template, "$patch": "replace"}}},
            "revision": 2,
        },
    )

    daemonsets.patch_spec(name, {"template": template})

    daemonsets.wait_for_status(
        name, updateRevision=f"{name}-{hash_}", updatedNumberScheduled=2, numberAvailable=2
    )
    assert {p.spec.containers[0].image for p in daemonsets.pods(name)} == {NEW_IMAGE_NAME}


def test_an_orphaned_pod_is_adopted_and_its_node_gets_no_second_pod(
    daemonsets: DaemonSets, core_v1: client.CoreV1Api
) -> None:
    name = daemonsets.create(agent())
    pods = daemonsets.wait_for_nodes(name, WORKERS)
    uid = daemonsets.get(name)["metadata"]["uid"]
    orphan = next(pod for pod in pods if target_node_of(pod) == "worker-1")

    # What `kubectl delete --cascade=orphan` leaves: the pod without its owner reference.
    core_v1.patch_namespaced_pod(
        orphan.metadata.name,
        daemonsets.namespace,
        [{"op": "remove", "path": "/metadata/ownerReferences"}],
    )

    def adopted() -> bool:
        pod = core_v1.read_namespaced_pod(orphan.metadata.name, daemonsets.namespace)
        return bool(controller_of(pod) == uid)

    eventually(adopted, what="the orphan adopted")
    on_node = [p for p in daemonsets.pods(name) if target_node_of(p) == "worker-1"]
    assert [p.metadata.uid for p in on_node] == [orphan.metadata.uid]


def test_a_pod_relabelled_out_of_the_selector_is_released_and_replaced(
    daemonsets: DaemonSets, core_v1: client.CoreV1Api
) -> None:
    name = daemonsets.create(agent())
    pods = daemonsets.wait_for_nodes(name, WORKERS)
    leaving = next(pod for pod in pods if target_node_of(pod) == "worker-2")

    # A common way to take a pod out of service for debugging.
    core_v1.patch_namespaced_pod(
        leaving.metadata.name, daemonsets.namespace, {"metadata": {"labels": {"app": "debug"}}}
    )

    def released() -> Any:
        pod = core_v1.read_namespaced_pod(leaving.metadata.name, daemonsets.namespace)
        return pod if controller_of(pod) is None else None

    pod = eventually(released, what="the relabelled pod released")
    assert "kubeherd.io/customdaemonset" not in pod.metadata.labels
    replacement = daemonsets.wait_for_nodes(name, WORKERS)
    assert leaving.metadata.uid not in {p.metadata.uid for p in replacement}
