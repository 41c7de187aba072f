"""Serving `/metrics` without stalling the event loop, and within a share of its time.

With thousands of CustomDaemonSets a page holds about a hundred thousand samples. Written in
one go on the operator's event loop, it would stall the controllers, the admission webhook and
Kopf's `/healthz` for that long, once per request. Nor does a worker thread help: it shares the
interpreter with the loop, which then waits for the interpreter lock at each of its system calls.
So the page is written on the loop, a slice of time at a time (metrics.exposition).

The loop's time is the controllers' too: scrapers asking back to back would keep it writing
pages and serving them. Requests that arrive while a page of their format is being written wait
for it and get it; and after a page is written, the next one of its format waits a few times as
long as that one took to write, the requests waiting with it. So a flood of scrapes costs at
most a fifth of the loop's time in pages, and a few requests per page, however many scrape;
Prometheus, scraping every 15 or 30 s, never waits.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from prometheus_client.exposition import choose_encoder

from kubeherd.metrics.exposition import DEFAULT_SLICE_SECONDS, Pacer
from kubeherd.metrics.objects import Encoder, OperatorRegistry

OPENMETRICS_TYPE = "application/openmetrics-text"
# After a page is written, the next of its format waits this many times the seconds that one
# took: the loop then spends at most 1 / (1 + this) of its time writing pages.
REST_FACTOR = 4.0

PageKey = tuple[str, bool]


@dataclass(frozen=True)
class Page:
    """One rendering of the metrics, as the response carries it."""

    body: bytes
    content_type: str
    gzipped: bool


class Scraper:
    def __init__(
        self,
        registry: OperatorRegistry,
        slice_seconds: float = DEFAULT_SLICE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._registry = registry
        self._slice_seconds = slice_seconds
        self._clock = clock
        self._sleep = sleep
        self._running: dict[PageKey, asyncio.Task[Page]] = {}
        # When the next page of each format may start.
        self._rested: dict[PageKey, float] = {}
        # How often the pages written so far handed the loop back: for the tests.
        self.pauses = 0

    async def page(self, accept: str, gzip_accepted: bool) -> Page:
        """The metrics in the format the Accept header asks for, compressed if asked."""
        encode, content_type = choose_encoder(accept)
        key = (content_type, gzip_accepted)
        running = self._running.get(key)
        if running is None and (rest := self._rested.get(key, 0.0) - self._clock()) > 0:
            await self._sleep(rest)
            running = self._running.get(key)
        if running is None:
            running = asyncio.create_task(self._write(key, encode))
            self._running[key] = running
            running.add_done_callback(lambda _: self._running.pop(key, None))
        # Shielded: a client that hangs up must not cancel the page others wait for.
        return await asyncio.shield(running)

    async def _write(self, key: PageKey, encode: Encoder) -> Page:
        content_type, gzipped = key
        pacer = Pacer(self._slice_seconds)
        started = self._clock()
        try:
            body = await self._registry.page(
                encode,
                openmetrics=content_type.startswith(OPENMETRICS_TYPE),
                gzipped=gzipped,
                pacer=pacer,
            )
        finally:
            self.pauses += pacer.pauses
        finished = self._clock()
        self._rested[key] = finished + REST_FACTOR * (finished - started)
        return Page(body, content_type, gzipped)

    async def close(self) -> None:
        running = list(self._running.values())
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
