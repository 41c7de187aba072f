"""A healthy canary against the real control plane, with `kubeherd run` as a process and kwok
nodes: the new template runs on the canary node alone for durationSeconds once available, then
the rollout goes on to the other nodes on its own."""

from __future__ import annotations

import subprocess
import time
from typing import Any

import pytest

from localcluster.cluster import LocalCluster
from tests.helpers import TrackedFakeNodes, eventually
from tests.integration.daemonsets import (
    NEW_IMAGE,
    WORKERS,
    DaemonSets,
    agent,
    revision_of,
    target_node_of,
)
from tests.integration.test_rollouts import kubeherd
from tests.integration.test_waves import ready_since

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

DURATION = 4


def rolled_out_with_canary(
    daemonsets: DaemonSets, fake_nodes: TrackedFakeNodes, canary_node: str, **canary: Any
) -> tuple[str, str]:
    """A CustomDaemonSet whose canary is chosen among nodes labelled pool=canary (one, added:
    `canary_node`), rolled out once on every node: its name and first revision."""
    fake_nodes.add(canary_node, labels={"pool": "canary"})
    manifest = agent()
    manifest["spec"]["updateStrategy"] = {
        "rollingUpdate": {
            "maxUnavailable": 3,
            "canary": {"nodeSelector": {"matchLabels": {"pool": "canary"}}, **canary},
        }
    }
    name = daemonsets.create(manifest)
    first = revision_of(daemonsets.wait_for_nodes(name, WORKERS | {canary_node})[0])
    eventually(
        lambda: daemonsets.progressing(name).get("reason") == "RolloutComplete",
        what="the first revision everywhere",
    )
    return name, first


def test_a_healthy_canary_passes_after_its_duration_and_the_rollout_goes_on(
    daemonsets: DaemonSets, fake_nodes: TrackedFakeNodes
) -> None:
    nodes = WORKERS | {"canary-b"}
    name, old_revision = rolled_out_with_canary(
        daemonsets, fake_nodes, "canary-b", durationSeconds=DURATION
    )

    workers_before = {p.metadata.uid for p in daemonsets.pods(name) if target_node_of(p) in WORKERS}
    daemonsets.patch_spec(name, NEW_IMAGE)

    # When the canary's new pod was Ready, and when a worker was first seen touched.
    canary_ready: float | None = None
    touched: float | None = None
    watched: dict[str, Any] = {}
    deadline = time.monotonic() + 90
    while touched is None and time.monotonic() < deadline:
        pods = daemonsets.pods(name)
        fresh = [p for p in pods if revision_of(p) != old_revision]
        if not workers_before <= {p.metadata.uid for p in pods}:
            touched = time.time()
        for pod in fresh:
            if target_node_of(pod) == "canary-b" and canary_ready is None:
                canary_ready = ready_since(pod)
        if canary_ready is not None and not watched:
            canary = (daemonsets.get(name).get("status") or {}).get("canary") or {}
            if canary.get("phase") == "Running":
                watched = canary
        time.sleep(0.1)

    assert canary_ready is not None, "the canary's new pod was never Ready"
    assert touched is not None, "no worker was updated after the canary"
    # The API server's times have whole seconds: one second of slack.
    assert touched >= canary_ready + DURATION - 1, (canary_ready, touched)
    assert watched["nodes"] == ["canary-b"]
    eventually(
        lambda: daemonsets.progressing(name).get("reason") == "RolloutComplete",
        what="the rollout complete after the canary",
    )
    assert old_revision not in {revision_of(p) for p in daemonsets.wait_for_nodes(name, nodes)}
    (started,) = daemonsets.events(name, "CanaryStarted")
    assert "canary node canary-b" in started.message
    (passed,) = daemonsets.events(name, "CanaryPassed")
    assert f"available for {DURATION}s without trouble" in passed.message
    status = daemonsets.get(name)["status"]
    assert (status["canary"]["phase"], status["canary"]["nodes"]) == ("Passed", ["canary-b"])


def test_a_person_pauses_unpauses_and_validates_the_canary(
    daemonsets: DaemonSets, fake_nodes: TrackedFakeNodes, local_cluster: LocalCluster
) -> None:
    nodes = WORKERS | {"canary-c"}
    name, old_revision = rolled_out_with_canary(daemonsets, fake_nodes, "canary-c")
    daemonsets.patch_spec(name, NEW_IMAGE)
    eventually(
        lambda: daemonsets.progressing(name).get("reason") == "CanaryRunning",
        what="the canary running",
    )

    def canary(verb: str) -> subprocess.CompletedProcess[str]:
        return kubeherd(
            local_cluster, "rollout", "canary", verb, "cds/agent", "-n", daemonsets.namespace
        )

    paused = canary("pause")
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout == "customdaemonset.kubeherd.io/agent canary paused: it is Paused\n"
    assert daemonsets.progressing(name)["reason"] == "CanaryPaused"
    again = canary("pause")
    assert (again.returncode, again.stderr) == (
        1,
        "error: customdaemonset.kubeherd.io/agent: the canary is Paused; cannot pause it\n",
    )
    unpaused = canary("unpause")
    assert unpaused.stdout == "customdaemonset.kubeherd.io/agent canary unpaused: it is Running\n"
    # The default durationSeconds is ten minutes: only the validation lets the rollout go on.
    validated = canary("validate")
    assert validated.stdout == "customdaemonset.kubeherd.io/agent canary validated: it is Passed\n"

    waited = kubeherd(
        local_cluster,
        "rollout",
        "status",
        "cds/agent",
        "-n",
        daemonsets.namespace,
        "--timeout",
        "90s",
    )
    assert waited.returncode == 0, waited.stderr
    assert old_revision not in {revision_of(p) for p in daemonsets.wait_for_nodes(name, nodes)}
    reasons = [e.reason for e in daemonsets.events(name) if e.reason.startswith("Canary")]
    assert sorted(reasons) == ["CanaryPassed", "CanaryPaused", "CanaryStarted", "CanaryUnpaused"]
