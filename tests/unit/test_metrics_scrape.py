"""/metrics is collected off the event loop, one collection at a time: a slow collection does
not stall the loop, and concurrent scrapes share one collection."""

from __future__ import annotations

import asyncio
import gzip
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from kubeherd.metrics.objects import (
    ObjectCollector,
    OperatorCollector,
    customdaemonset_metrics,
    operator_registry,
)
from kubeherd.metrics.server import MetricsServer


class SlowCollector(Collector):
    """Keeps a CPU busy for `seconds` per collection, as thousands of objects do, and counts
    its collections."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.collections = 0

    def collect(self) -> Iterator[Metric]:
        self.collections += 1
        deadline = time.perf_counter() + self.seconds
        while time.perf_counter() < deadline:
            pass
        yield GaugeMetricFamily("slow_collections", "Collections so far.", self.collections)


@asynccontextmanager
async def serving(registry: Collector) -> AsyncIterator[str]:
    server = MetricsServer(registry, "127.0.0.1:0")
    await server.start()
    try:
        yield f"http://127.0.0.1:{server.port}/metrics"
    finally:
        await server.stop()


async def get(url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    # aiohttp asks for gzip unless told otherwise; Prometheus asks for it too.
    headers = {"Accept-Encoding": "identity", **headers}
    async with (
        aiohttp.ClientSession(auto_decompress=False) as session,
        session.get(url, headers=headers) as response,
    ):
        return response.status, dict(response.headers), await response.read()


async def longest_stall(during: Callable[[], Any], tick: float = 0.005) -> float:
    """The longest time the loop took to run a callback due every `tick` seconds, while the
    coroutine `during()` runs: how late a controller, the webhook or /healthz would answer."""
    worst = 0.0
    done = False

    async def ticker() -> None:
        nonlocal worst
        while not done:
            before = time.perf_counter()
            await asyncio.sleep(tick)
            worst = max(worst, time.perf_counter() - before - tick)

    ticking = asyncio.create_task(ticker())
    try:
        await during()
    finally:
        done = True
        await ticking
    return worst


def test_the_loop_keeps_answering_while_a_slow_collection_runs() -> None:
    slow = SlowCollector(0.6)

    async def scenario() -> tuple[float, int]:
        async with serving(operator_registry(slow)) as url:
            collections_at_start = slow.collections  # the registry collects once to learn names

            async def scrape() -> None:
                status, _, body = await get(url)
                assert status == 200
                assert b"slow_collections" in body

            stall = await longest_stall(scrape)
            return stall, slow.collections - collections_at_start

    stall, collections = asyncio.run(scenario())
    assert collections == 1
    # On the loop the collection would stall it 0.6 s; in its thread, the loop waits at most
    # for Python's switch interval (5 ms) now and then. Generous for a busy machine.
    assert stall < 0.2, f"the loop stalled {stall * 1000:.0f} ms"


def test_concurrent_scrapes_share_one_collection() -> None:
    slow = SlowCollector(0.4)

    async def scenario() -> tuple[list[bytes], int, int]:
        async with serving(operator_registry(slow)) as url:
            before = slow.collections
            answers = await asyncio.gather(*(get(url) for _ in range(10)))
            shared = slow.collections - before
            # Once the page is served, the next scrape collects afresh.
            await get(url)
            return [body for _, _, body in answers], shared, slow.collections - before

    bodies, shared, after_one_more = asyncio.run(scenario())
    assert shared == 1
    assert len(set(bodies)) == 1
    assert after_one_more == 2


def test_the_controllers_state_is_read_on_the_loop_and_the_page_built_off_it() -> None:
    threads: dict[str, str] = {}

    def bodies() -> list[dict[str, Any]]:
        threads["bodies"] = threading.current_thread().name
        return [{"metadata": {"namespace": "ns", "name": "agent"}, "status": {}}]

    def build(listed: Iterable[Any]) -> list[Metric]:
        threads["build"] = threading.current_thread().name
        return customdaemonset_metrics(listed)

    def waiting() -> dict[str, tuple[int, int]]:
        threads["waiting"] = threading.current_thread().name
        return {"CustomDaemonSet": (1, 2)}

    registry = operator_registry(
        ObjectCollector(bodies, build), OperatorCollector(lambda: True, waiting)
    )

    async def scenario() -> tuple[str, bytes]:
        async with serving(registry) as url:
            threads.clear()
            _, _, body = await get(url)
            return threading.current_thread().name, body

    loop_thread, body = asyncio.run(scenario())
    assert threads["bodies"] == threads["waiting"] == loop_thread
    assert threads["build"] != loop_thread
    assert b'customdaemonset="agent"' in body
    assert b'kubeherd_dirty_nodes{kind="CustomDaemonSet"} 2.0' in body


def test_a_scraper_that_accepts_gzip_gets_it_and_openmetrics_when_asked() -> None:
    registry = operator_registry(
        ObjectCollector(lambda: [{"metadata": {"name": "a"}}], customdaemonset_metrics)
    )

    async def scenario() -> list[tuple[int, dict[str, str], bytes]]:
        async with serving(registry) as url:
            return [
                await get(url, **{"Accept-Encoding": "gzip"}),
                await get(url, Accept="application/openmetrics-text; version=1.0.0"),
            ]

    (status, headers, body), (_, open_headers, open_body) = asyncio.run(scenario())
    assert status == 200
    assert headers["Content-Encoding"] == "gzip"
    assert headers["Content-Type"].startswith("text/plain")
    assert b"kubeherd_customdaemonset_created" in gzip.decompress(body)
    assert open_headers["Content-Type"].startswith("application/openmetrics-text")
    assert open_body.endswith(b"# EOF\n")
