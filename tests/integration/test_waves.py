"""Rollout waves against the real control plane, with `kubeherd run` as a process and kwok nodes
in three zones: zone by zone (`rollingUpdate.topologyKey`), and only the nodes a selector
matches (`rollingUpdate.selector`), observed pod by pod."""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest

from localcluster.nodes import ZONE_LABEL
from tests.helpers import TrackedFakeNodes, eventually
from tests.integration.daemonsets import (
    NEW_IMAGE,
    WORKERS,
    DaemonSets,
    agent,
    revision_of,
    target_node_of,
)

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("operator")]

# The session's workers are worker-1 in zone-b and worker-2 in zone-c.
ZONE_OF = {"wave-a1": "zone-a", "wave-a2": "zone-a", "wave-b1": "zone-b", "worker-1": "zone-b"}
ZONE_OF["worker-2"] = "zone-c"
MIN_READY_SECONDS = 2


def ready_since(pod: Any) -> float | None:
    for condition in pod.status.conditions or []:
        if condition.type == "Ready" and condition.status == "True":
            stamp: datetime.datetime = condition.last_transition_time
            return stamp.timestamp()
    return None


def test_a_rollout_by_zone_touches_no_zone_before_the_previous_one_is_available(
    daemonsets: DaemonSets, fake_nodes: TrackedFakeNodes
) -> None:
    for name in ("wave-a1", "wave-a2", "wave-b1"):
        fake_nodes.add(name, zone=ZONE_OF[name])
    nodes = set(ZONE_OF)
    manifest = agent()
    manifest["spec"]["minReadySeconds"] = MIN_READY_SECONDS
    manifest["spec"]["updateStrategy"] = {
        "rollingUpdate": {"maxUnavailable": 2, "topologyKey": ZONE_LABEL}
    }
    name = daemonsets.create(manifest)
    old_revision = revision_of(daemonsets.wait_for_nodes(name, nodes)[0])

    daemonsets.patch_spec(name, NEW_IMAGE)

    # Per zone: when a node of it was first seen touched (its old pod gone or going), and when
    # its last node got a Ready pod of the new template.
    touched: dict[str, float] = {}
    updated: dict[str, float] = {}
    deadline = time.monotonic() + 120
    while len(updated) < 3 and time.monotonic() < deadline:
        pods = daemonsets.pods(name)
        now = time.time()
        for zone in ("zone-a", "zone-b", "zone-c"):
            members = {node for node, z in ZONE_OF.items() if z == zone}
            olds = {target_node_of(p) for p in pods if revision_of(p) == old_revision}
            if members - olds and zone not in touched:
                touched[zone] = now
            fresh = [
                p for p in pods if target_node_of(p) in members and revision_of(p) != old_revision
            ]
            since = [ready_since(p) for p in fresh]
            if zone not in updated and len(fresh) == len(members) and None not in since:
                updated[zone] = max(s for s in since if s is not None)
        time.sleep(0.05)

    assert sorted(updated) == ["zone-a", "zone-b", "zone-c"], (touched, updated)
    assert sorted(touched, key=touched.__getitem__) == ["zone-a", "zone-b", "zone-c"]
    # A zone starts only once the one before it is all Ready for minReadySeconds (the API
    # server's times have whole seconds: one second of slack).
    assert touched["zone-b"] >= updated["zone-a"] + MIN_READY_SECONDS - 1, (touched, updated)
    assert touched["zone-c"] >= updated["zone-b"] + MIN_READY_SECONDS - 1, (touched, updated)
    eventually(
        lambda: daemonsets.progressing(name).get("reason") == "RolloutComplete",
        what="the rollout complete",
    )


def test_a_selector_updates_only_its_wave_until_it_is_widened(
    daemonsets: DaemonSets, fake_nodes: TrackedFakeNodes
) -> None:
    fake_nodes.add("canary-1", zone="zone-a", labels={"wave": "first"})
    nodes = WORKERS | {"canary-1"}
    manifest = agent()
    manifest["spec"]["updateStrategy"] = {
        "rollingUpdate": {"selector": {"matchLabels": {"wave": "first"}}}
    }
    name = daemonsets.create(manifest)
    old_revision = revision_of(daemonsets.wait_for_nodes(name, nodes)[0])

    daemonsets.patch_spec(name, NEW_IMAGE)

    eventually(
        lambda: daemonsets.progressing(name).get("reason") == "WaveRolledOut",
        what="the wave rolled out",
    )
    revisions = {target_node_of(p): revision_of(p) for p in daemonsets.wait_for_nodes(name, nodes)}
    assert {node for node, rev in revisions.items() if rev != old_revision} == {"canary-1"}

    # A merge patch: null removes the selector, and with it the wave.
    daemonsets.patch_spec(name, {"updateStrategy": {"rollingUpdate": {"selector": None}}})

    eventually(
        lambda: daemonsets.progressing(name).get("reason") == "RolloutComplete",
        what="the rollout complete once the selector matches every node",
    )
    pods = daemonsets.wait_for_nodes(name, nodes)
    assert old_revision not in {revision_of(p) for p in pods}
