"""/metrics is written on the event loop a slice of time at a time, one page per format at once:
a large page does not stall the loop, and concurrent scrapes share one page."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import parser

from kubeherd.metrics.objects import OperatorRegistry, customdaemonsets, operator_registry
from kubeherd.metrics.scrape import REST_FACTOR, Scraper
from kubeherd.metrics.server import MetricsServer
from tests.helpers import ManualClock

# prometheus_client's strict OpenMetrics parser, typed.
parse_openmetrics: Callable[[str], Iterable[Metric]] = parser.text_string_to_metric_families


def daemonsets(count: int) -> list[dict[str, Any]]:
    return [
        {
            "metadata": {"namespace": f"team-{i % 7}", "name": f"agent-{i}", "generation": 1},
            "status": {
                "desiredNumberScheduled": i,
                "ineligibleNodes": [{"reason": "x", "count": 1}],
            },
        }
        for i in range(count)
    ]


class Listing:
    """The controllers' bodies, counting how often a scrape lists them."""

    def __init__(self, bodies: list[dict[str, Any]]) -> None:
        self.bodies = bodies
        self.listings = 0

    def __call__(self) -> list[dict[str, Any]]:
        self.listings += 1
        return self.bodies


@asynccontextmanager
async def serving(registry: OperatorRegistry) -> AsyncIterator[str]:
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


def test_a_large_page_is_written_in_pieces_between_which_the_loop_runs_others() -> None:
    listing = Listing(daemonsets(2000))
    registry = operator_registry(customdaemonsets(listing))

    async def scenario(slice_seconds: float) -> tuple[bytes, int, int]:
        # A slice of 0: the writer hands the loop back at every chance it has.
        scraper = Scraper(registry, slice_seconds=slice_seconds)
        turns = 0
        writing = asyncio.create_task(scraper.page("", gzip_accepted=False))
        while not writing.done():
            turns += 1
            await asyncio.sleep(0)
        return (await writing).body, scraper.pauses, turns

    body, pauses, turns = asyncio.run(scenario(0.0))
    whole, pauses_with_no_limit, _ = asyncio.run(scenario(3600.0))

    assert pauses > 100
    # Another task ran between the pieces: as the controllers, the webhook and /healthz do.
    assert turns >= pauses
    assert pauses_with_no_limit == 0
    assert body == whole
    assert body.count(b"kubeherd_customdaemonset_status_desired_number_scheduled{") == 2000


def test_concurrent_scrapes_share_one_page_and_the_next_page_waits_its_turn() -> None:
    clock = ManualClock(100.0)
    listing = Listing(daemonsets(10))
    rests: list[float] = []

    def slow_listing() -> list[dict[str, Any]]:
        clock.now += 1.0
        return listing()

    async def sleep(seconds: float) -> None:
        rests.append(seconds)
        clock.now += seconds

    scraper = Scraper(operator_registry(customdaemonsets(slow_listing)), clock=clock, sleep=sleep)

    async def scenario() -> list[int]:
        listings = []
        await asyncio.gather(*(scraper.page("", gzip_accepted=True) for _ in range(10)))
        listings.append(listing.listings)
        # Written from 100 to 101: the next page of that format starts REST_FACTOR s later.
        clock.now = 102.0
        await scraper.page("", gzip_accepted=True)
        listings.append(listing.listings)
        # Another format is a page of its own, with a rest of its own.
        await scraper.page("", gzip_accepted=False)
        listings.append(listing.listings)
        return listings

    listings = asyncio.run(scenario())
    assert listings == [1, 2, 3]
    assert rests == [101.0 + REST_FACTOR - 102.0]


def test_a_page_shows_the_objects_as_they_were_when_the_scrape_began() -> None:
    listing = Listing(daemonsets(1000))
    scraper = Scraper(operator_registry(customdaemonsets(listing)), slice_seconds=0.0)

    async def scenario() -> bytes:
        writing = asyncio.create_task(scraper.page("", gzip_accepted=False))
        while not listing.listings:
            await asyncio.sleep(0)
        # Meanwhile the controllers forget objects and learn others, as a watch tells them.
        listing.bodies.clear()
        return (await writing).body

    body = asyncio.run(scenario())
    assert body.count(b"kubeherd_customdaemonset_metadata_generation{") == 1000


def test_a_scraper_that_accepts_gzip_gets_it_and_openmetrics_when_asked() -> None:
    registry = operator_registry(customdaemonsets(lambda: [{"metadata": {"name": "a"}}]))

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
    families = {family.name for family in parse_openmetrics(open_body.decode())}
    assert {"kubeherd_api_requests", "kubeherd_customdaemonset_created"} <= families
    assert open_body.count(b"# EOF") == 1
