"""Readiness that tells the truth: not ready until every watch has listed, nor while one keeps
failing; what /readyz answers, and the series the metrics show for it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import pytest

from kubeherd.daemonset.shell.watches import Watches
from kubeherd.kube import reflector as reflector_module
from kubeherd.metrics.objects import ReadinessCollector, operator_registry
from kubeherd.probes import HealthServer
from kubeherd.readiness import Readiness
from tests.helpers import ManualClock
from tests.unit.test_metrics import samples

FORBIDDEN = 'nodes is forbidden: User "system:serviceaccount:ops:kubeherd" cannot watch'


def test_not_ready_before_start_up_is_done_nor_before_each_watch_has_listed() -> None:
    readiness = Readiness()
    nodes, pods = readiness.watch("nodes"), readiness.watch("pods", "ops")

    assert readiness.verdict().lines == (
        "[-]started: start-up is not done yet",
        "[-]watch nodes: not listed yet",
        "[-]watch pods in ops: not listed yet",
    )
    readiness.started = True
    nodes.has_listed()
    assert not readiness.ready()
    pods.has_listed()

    verdict = readiness.verdict()
    assert verdict.ready
    assert verdict.text().endswith("[+]watch pods in ops ok\nreadyz check passed\n")


def test_a_watch_that_never_lists_says_why_and_for_how_long() -> None:
    clock = ManualClock(1000.0)
    readiness = Readiness(grace=120, clock=clock)
    readiness.started = True
    nodes = readiness.watch("nodes")

    nodes.failed(RuntimeError(FORBIDDEN))
    clock.now += 5
    nodes.failed(RuntimeError(FORBIDDEN))

    verdict = readiness.verdict()
    assert not verdict.ready
    assert verdict.lines[1] == (
        f"[-]watch nodes: not listed yet; failing for 5s (2 failures), last: {FORBIDDEN}"
    )
    assert verdict.text().endswith("readyz check failed\n")


def test_a_listed_watch_may_fail_for_the_grace_period_and_no_longer() -> None:
    clock = ManualClock(1000.0)
    readiness = Readiness(grace=120, clock=clock)
    readiness.started = True
    nodes = readiness.watch("nodes")
    nodes.has_listed()

    nodes.failed(ConnectionResetError())
    clock.now += 120
    assert readiness.ready()
    clock.now += 1
    assert not readiness.ready()
    assert readiness.verdict().lines[1] == (
        "[-]watch nodes: failing for 121s (1 failures), last: ConnectionResetError"
    )

    nodes.worked()

    assert readiness.ready()
    assert nodes.failing_seconds() == 0
    assert nodes.failures == 1


def test_the_metrics_show_readiness_and_each_watch() -> None:
    clock = ManualClock(1000.0)
    readiness = Readiness(clock=clock)
    readiness.started = True
    readiness.watch("nodes").failed(RuntimeError(FORBIDDEN))
    readiness.watch("pods").has_listed()
    clock.now += 42
    registry = operator_registry(ReadinessCollector(readiness))

    found = samples(registry)

    nodes = (("resource", "nodes"), ("watched_namespace", ""))
    pods = (("resource", "pods"), ("watched_namespace", ""))
    assert found[("kubeherd_ready", ())] == 0
    assert found[("kubeherd_watch_listed", nodes)] == 0
    assert found[("kubeherd_watch_failing_seconds", nodes)] == 42
    assert found[("kubeherd_watch_failures_total", nodes)] == 1
    assert found[("kubeherd_watch_listed", pods)] == 1
    assert found[("kubeherd_watch_failing_seconds", pods)] == 0
    assert found[("kubeherd_watch_failures_total", pods)] == 0


class RefusingThenListing:
    """An API that refuses every (streaming) listing of nodes `refusals` times, then answers
    that there are none; the pod listing always works, and watches stay open."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals

    async def get_json(self, path: str, query: list[tuple[str, str]]) -> Mapping[str, Any]:
        raise AssertionError("a streaming listing is not listed in pages")

    async def stream_lines(self, path: str, query: list[tuple[str, str]]) -> AsyncIterator[bytes]:
        if path == "/api/v1/nodes" and self.refusals:
            self.refusals -= 1
            raise RuntimeError(FORBIDDEN)
        end = {"resourceVersion": "1", "annotations": {"k8s.io/initial-events-end": "true"}}
        yield json.dumps({"type": "BOOKMARK", "object": {"metadata": end}}).encode()
        await asyncio.Event().wait()


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reflector_module, "MAX_RETRY_DELAY", 0.0)


def test_the_watches_report_their_listings_and_failures() -> None:
    readiness = Readiness()
    readiness.started = True
    api = RefusingThenListing(refusals=3)
    watches = Watches(api, ("ops", "web"), readiness)

    async def scenario() -> None:
        watches.start()
        await asyncio.wait_for(watches.listed(), 5)
        await watches.stop()

    asyncio.run(scenario())

    assert [(w.name, w.listed, w.failures) for w in readiness.watches] == [
        ("nodes", True, 3),
        ("pods in ops", True, 0),
        ("pods in web", True, 0),
    ]
    assert readiness.ready()


def test_readyz_answers_503_with_the_reason_until_ready_and_healthz_200_throughout() -> None:
    readiness = Readiness()
    nodes = readiness.watch("nodes")
    nodes.failed(RuntimeError(FORBIDDEN))

    async def probe(server: HealthServer, path: str) -> tuple[int, str]:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{server.port}{path}") as response,
        ):
            return response.status, await response.text()

    async def scenario() -> list[tuple[int, str]]:
        server = HealthServer(readiness, "127.0.0.1:0")
        await server.start()
        try:
            answers = [await probe(server, "/healthz"), await probe(server, "/readyz")]
            readiness.started = True
            nodes.has_listed()
            answers += [await probe(server, "/readyz")]
            return answers
        finally:
            await server.stop()

    healthz, not_ready, ready = asyncio.run(scenario())

    assert healthz == (200, "ok\n")
    assert not_ready[0] == 503
    assert "[-]started: start-up is not done yet\n" in not_ready[1]
    failing = f"[-]watch nodes: not listed yet; failing for 0s (1 failures), last: {FORBIDDEN}"
    assert failing in not_ready[1]
    assert ready == (200, "[+]started ok\n[+]watch nodes ok\nreadyz check passed\n")
