"""In-place updates on the real node (`rollingUpdateType: InPlaceIfPossible`): a kubelet
restarts the container whose image changed in the same pod, and anything beyond images
replaces the pod as a Standard update does."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from localcluster.images import OPERATOR_IMAGE
from localcluster.realnode import NODE_NAME
from tests.helpers import eventually
from tests.integration.daemonsets import DaemonSets, revision_of, target_node_of
from tests.realnode.conftest import is_ready
from tests.realnode.workloads import box_daemonset

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

READY_PROBE = {"exec": {"command": ["true"]}, "periodSeconds": 1}
IN_PLACE = {"type": "RollingUpdate", "rollingUpdate": {"rollingUpdateType": "InPlaceIfPossible"}}


def sleeper(name: str) -> dict[str, Any]:
    # `sh -c "sleep 3600"` runs in the test image and in the operator's (a Debian base) alike:
    # two images with different contents that both start the same command.
    manifest = box_daemonset(name, "sleep 3600", container={"readinessProbe": READY_PROBE})
    manifest["spec"]["updateStrategy"] = copy.deepcopy(IN_PLACE)
    return manifest


def with_image(manifest: dict[str, Any], image: str) -> dict[str, Any]:
    template = copy.deepcopy(manifest["spec"]["template"])
    template["spec"]["containers"][0]["image"] = image
    return {"template": template}


def container_status(pod: Any) -> Any:
    (status,) = pod.status.container_statuses
    return status


def test_an_image_only_update_restarts_the_container_in_the_same_pod(
    daemonsets: DaemonSets,
) -> None:
    manifest = sleeper("in-place")
    name = daemonsets.create(manifest)
    (old,) = daemonsets.wait_for_nodes(name, {NODE_NAME}, timeout=120)
    daemonsets.wait_for_status(name, numberAvailable=1, timeout=60)
    (old,) = daemonsets.pods(name)
    before = container_status(old)

    daemonsets.patch_spec(name, with_image(manifest, OPERATOR_IMAGE))

    def restarted() -> Any:
        pods = daemonsets.pods(name)
        if len(pods) != 1 or revision_of(pods[0]) == revision_of(old) or not is_ready(pods[0]):
            return None
        status = container_status(pods[0])
        return pods[0] if status.restart_count > before.restart_count else None

    pod = eventually(restarted, timeout=90, what="the pod running the new image, Ready")
    after = container_status(pod)
    assert (pod.metadata.uid, pod.metadata.name) == (old.metadata.uid, old.metadata.name)
    assert target_node_of(pod) == NODE_NAME
    assert after.restart_count == before.restart_count + 1
    assert after.image_id != before.image_id
    assert pod.spec.containers[0].image == OPERATOR_IMAGE
    eventually(
        lambda: daemonsets.progressing(name).get("reason") == "RolloutComplete",
        timeout=30,
        what="the rollout complete",
    )
    status = daemonsets.get(name)["status"]
    assert (status["updatedNumberScheduled"], status["numberAvailable"]) == (1, 1)
    (event,) = daemonsets.events(name, "SuccessfulUpdatePodInPlace")
    assert old.metadata.name in event.message
    assert NODE_NAME in event.message
    assert daemonsets.events(name, "SuccessfulDelete") == []


def with_cpu(manifest: dict[str, Any], cpu: str) -> dict[str, Any]:
    template: dict[str, Any] = copy.deepcopy(manifest["spec"]["template"])
    template["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu, "memory": "32Mi"}}
    return template


def test_new_cpu_resizes_the_running_container_without_a_restart(daemonsets: DaemonSets) -> None:
    manifest = sleeper("resized")
    manifest["spec"]["template"] = with_cpu(manifest, "50m")
    name = daemonsets.create(manifest)
    daemonsets.wait_for_nodes(name, {NODE_NAME}, timeout=120)
    daemonsets.wait_for_status(name, numberAvailable=1, timeout=60)
    (old,) = daemonsets.pods(name)
    before = container_status(old)

    daemonsets.patch_spec(name, {"template": with_cpu(manifest, "100m")})

    def resized() -> Any:
        pods = daemonsets.pods(name)
        if len(pods) != 1 or revision_of(pods[0]) == revision_of(old) or not is_ready(pods[0]):
            return None
        resources = container_status(pods[0]).resources
        return pods[0] if resources and resources.requests.get("cpu") == "100m" else None

    pod = eventually(resized, timeout=90, what="the running container with 100m of CPU")
    assert pod.metadata.uid == old.metadata.uid
    assert container_status(pod).restart_count == before.restart_count
    assert pod.spec.containers[0].resources.requests["cpu"] == "100m"
    eventually(
        lambda: daemonsets.progressing(name).get("reason") == "RolloutComplete",
        timeout=30,
        what="the rollout complete",
    )
    (event,) = daemonsets.events(name, "SuccessfulUpdatePodInPlace")
    assert "container box resized" in event.message


def test_a_change_beyond_images_replaces_the_pod(daemonsets: DaemonSets) -> None:
    manifest = sleeper("not-in-place")
    name = daemonsets.create(manifest)
    daemonsets.wait_for_nodes(name, {NODE_NAME}, timeout=120)
    (old,) = daemonsets.pods(name)

    changed = with_image(manifest, OPERATOR_IMAGE)
    changed["template"]["metadata"].setdefault("annotations", {})["version"] = "2"
    daemonsets.patch_spec(name, changed)

    def replaced() -> Any:
        pods = daemonsets.pods(name)
        fresh = [p for p in pods if p.metadata.uid != old.metadata.uid and is_ready(p)]
        return fresh[0] if len(pods) == 1 and fresh else None

    pod = eventually(replaced, timeout=90, what="a new pod, Ready, in place of the old one")
    assert revision_of(pod) != revision_of(old)
    assert daemonsets.events(name, "SuccessfulUpdatePodInPlace") == []
