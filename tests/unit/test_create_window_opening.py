"""Where a pass's window of creates opens, from what the API server said of the template in that
pass: wide after a dry run it admitted outright, at 1 otherwise (a new CustomDaemonSet), and
nothing at all when it refused the template. Against the in-memory cluster, in virtual time,
with creates that take a second: what is in flight before the first answer is the first wave."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from kubeherd.daemonset.core.rollout import MAX_FIRST_WINDOW
from kubeherd.kube.limits import WriteLimits
from kubeherd.kube.outcomes import Outcome
from tests.unit.daemonset_cluster import FakeCluster
from tests.unit.test_daemonset_controller import agent
from tests.unit.virtual_time import run_virtually

CREATE_SECONDS = 1.0
# The CustomDaemonSet as the cluster holds it once `before` ran (its status included).
RESTARTED: dict[str, Any] = {}


def slow_cluster(nodes: int) -> FakeCluster:
    cluster = FakeCluster()
    cluster.add_nodes(*(f"n{index}" for index in range(nodes)))
    cluster.limits = WriteLimits(max_concurrent=32)
    cluster.create_latency = CREATE_SECONDS
    return cluster


def first_wave(
    cluster: FakeCluster, body: dict[str, Any], before: Callable[[], Awaitable[Any]] | None = None
) -> int:
    """How many creates a controller started on `body` (after `before`) has in flight before
    any is answered."""
    wave: list[int] = []

    async def scenario() -> None:
        if before is not None:
            await before()
        controller = cluster.start(
            cluster.daemonset if body is RESTARTED else body, max_create_backoff=60
        )
        await asyncio.sleep(CREATE_SECONDS / 2)
        wave.append(cluster.creates_in_flight)
        await asyncio.sleep(CREATE_SECONDS * 10)
        await controller.stop()

    run_virtually(scenario)
    return wave[0]


def test_a_dry_run_admitted_in_the_pass_opens_the_window_wide() -> None:
    cluster = slow_cluster(40)
    assert first_wave(cluster, agent()) == MAX_FIRST_WINDOW
    assert cluster.dry_runs == 1
    assert len(cluster.pods_by_node()) == 40


def test_a_verdict_a_status_recorded_earlier_opens_the_window_at_one() -> None:
    cluster = slow_cluster(2)

    async def settle_then_add_nodes() -> None:
        controller = cluster.start(agent())
        await asyncio.sleep(10)
        cluster.run_pods()
        await asyncio.sleep(10)
        await controller.stop()
        cluster.controller = None  # the nodes join while no operator runs
        cluster.add_nodes(*(f"m{index}" for index in range(20)))

    # A restarted operator: its status says the template was accepted, so nothing is asked,
    # and nothing carries over from the last operator's creates.
    assert first_wave(cluster, RESTARTED, settle_then_add_nodes) == 1
    assert cluster.dry_runs == 1
    assert len(cluster.pods_by_node()) == 22


def test_a_refused_template_sends_no_create() -> None:
    cluster = slow_cluster(20)
    cluster.refuse("dry_run_pod", Outcome(422, 'Pod "agent" is invalid: spec.containers: Required'))
    assert first_wave(cluster, agent()) == 0
    assert cluster.verbs().count("create Pod") == 0
    assert cluster.condition("TemplateValid")["reason"] == "InvalidTemplate"


def test_a_dry_run_a_quota_refused_opens_the_window_at_one() -> None:
    cluster = slow_cluster(20)
    cluster.pod_quota = 0
    # The template is let through (the quota may be raised), but its creates start at 1.
    assert first_wave(cluster, agent()) == 1
    assert cluster.dry_runs == 1
    assert cluster.pods == {}
