"""A canary on the real node (rollingUpdate.canary): a new template that crash-loops there
pauses the rollout, naming the node and the reason; beyond autoFail's restarts the canary fails
and, with rollback, the previous revision is back on the node. The kwok node beside it is never
touched."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster.realnode import NODE_NAME
from tests.helpers import eventually
from tests.integration.daemonsets import DaemonSets, revision_of, target_node_of
from tests.realnode.conftest import is_ready
from tests.realnode.workloads import box_container, box_daemonset

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

CANARY = {
    "nodeSelector": {"matchLabels": {"kubernetes.io/hostname": NODE_NAME}},
    "autoPause": {"maxRestarts": 5},
    "autoFail": {"maxRestarts": 2, "rollback": True},
}


def everywhere(name: str) -> dict[str, Any]:
    """The test box on every eligible node: the real node and the kwok worker."""
    manifest = box_daemonset(name, "sleep 3600")
    del manifest["spec"]["template"]["spec"]["nodeSelector"]
    manifest["spec"]["updateStrategy"] = {"rollingUpdate": {"canary": CANARY}}
    return manifest


def test_a_crash_looping_canary_pauses_then_fails_and_rolls_back(daemonsets: DaemonSets) -> None:
    manifest = everywhere("canary")
    name = daemonsets.create(manifest)
    eventually(
        lambda: daemonsets.progressing(name).get("reason") == "RolloutComplete",
        timeout=120,
        what="the first revision on every node",
    )
    before = {target_node_of(pod): pod for pod in daemonsets.pods(name)}
    (kwok_node,) = set(before) - {NODE_NAME}
    stable = revision_of(before[NODE_NAME])

    template = manifest["spec"]["template"]
    template["spec"]["containers"] = [box_container("exit 3")]
    daemonsets.patch_spec(name, {"template": template})

    paused = eventually(
        lambda: (c := daemonsets.progressing(name)).get("reason") == "CanaryPaused" and c,
        timeout=120,
        what="the rollout paused by the canary",
    )
    assert paused["status"] == "False"
    assert f"on node {NODE_NAME}" in paused["message"]
    assert "CrashLoopBackOff" in paused["message"]
    (event,) = daemonsets.events(name, "CanaryPaused")
    assert NODE_NAME in event.message
    assert "CrashLoopBackOff" in event.message
    assert daemonsets.get(name)["status"]["canary"]["reason"] == "CrashLoopBackOff"

    failed = eventually(
        lambda: (c := daemonsets.progressing(name)).get("reason") == "CanaryFailed" and c,
        timeout=180,
        what="the canary failed beyond autoFail.maxRestarts",
    )
    assert "more than autoFail.maxRestarts 2" in failed["message"]

    def rolled_back() -> Any:
        pods = [p for p in daemonsets.pods(name) if target_node_of(p) == NODE_NAME]
        if len(pods) != 1 or revision_of(pods[0]) != stable or not is_ready(pods[0]):
            return None
        return pods[0]

    back = eventually(rolled_back, timeout=120, what="the stable revision back on the real node")
    assert back.metadata.uid != before[NODE_NAME].metadata.uid
    canary = daemonsets.get(name)["status"]["canary"]
    assert (canary["phase"], canary["rolledBack"], canary["nodes"]) == (
        "Failed",
        True,
        [NODE_NAME],
    )
    (kept,) = [p for p in daemonsets.pods(name) if target_node_of(p) == kwok_node]
    assert kept.metadata.uid == before[kwok_node].metadata.uid
    assert daemonsets.events(name, "CanaryStarted")
