"""Serving `/metrics` without stalling the event loop, and within a share of its time.

With thousands of CustomDaemonSets a page holds about a hundred thousand samples. Written in
one go on the operator's event loop, it would stall the controllers, the admission webhook and
Kopf's `/healthz` for that long, once per request. Nor does a worker thread help: it shares the
interpreter with the loop, which then waits for the interpreter lock at each of its system calls.
So the page is written on the loop, a slice of time at a time (metrics.exposition).

The loop's time is the controllers' too: scrapers asking back to back would keep it writing
pages. Requests that arrive while a page of their format is being written wait for it and get
it, and a page just written is served again for a few times as long as it took to write: a
flood of scrapes costs at most a fifth of the loop's time, whatever its size, while Prometheus,
scraping every 15 or 30 s, always gets a fresh page.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client.exposition import choose_encoder

from kubeherd.metrics.exposition import DEFAULT_SLICE_SECONDS, Pacer
from kubeherd.metrics.objects import Encoder, OperatorRegistry

OPENMETRICS_TYPE = "application/openmetrics-text"
# A page is served again for this many times the seconds it took to write: the loop then spends
# at most 1 / (1 + this) of its time writing pages.
REUSE_FACTOR = 4.0

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
    ) -> None:
        self._registry = registry
        self._slice_seconds = slice_seconds
        self._clock = clock
        self._running: dict[PageKey, asyncio.Task[Page]] = {}
        # The last page of each format, and until when it is served again.
        self._written: dict[PageKey, tuple[Page, float]] = {}
        # How often the pages written so far handed the loop back: for the tests.
        self.pauses = 0

    async def page(self, accept: str, gzip_accepted: bool) -> Page:
        """The metrics in the format the Accept header asks for, compressed if asked."""
        encode, content_type = choose_encoder(accept)
        key = (content_type, gzip_accepted)
        written, reusable_until = self._written.get(key, (None, 0.0))
        if written is not None and self._clock() < reusable_until:
            return written
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
        page = Page(body, content_type, gzipped)
        finished = self._clock()
        self._written[key] = (page, finished + REUSE_FACTOR * (finished - started))
        return page

    async def close(self) -> None:
        running = list(self._running.values())
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
