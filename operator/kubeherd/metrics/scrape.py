"""Collecting and rendering `/metrics` off the event loop, one collection at a time.

With thousands of CustomDaemonSets a collection takes a large fraction of a second of pure
Python. On the operator's event loop it would stall the controllers, the admission webhook and
Kopf's `/healthz` for that long, once per request: a few concurrent scrapes would fail the
liveness probe. Here the loop only takes a snapshot of what the controllers hold (a list of
references), and one worker thread builds, renders and compresses the page. Requests that
arrive while a collection of their format runs wait for it and get its page, so a flood of
scrapes costs one collection at a time, not one each.
"""

from __future__ import annotations

import asyncio
import gzip
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from kubeherd.metrics.objects import LoopStateCollector


@dataclass(frozen=True)
class Page:
    """One rendering of the metrics, as the response carries it."""

    body: bytes
    content_type: str
    gzipped: bool


class Scraper:
    def __init__(self, source: Collector) -> None:
        self._source = source
        # A single worker: collections never run side by side, whatever the requests' formats.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kubeherd-metrics")
        self._running: dict[tuple[str, bool], asyncio.Future[Page]] = {}

    async def page(self, accept: str, gzip_accepted: bool) -> Page:
        """The metrics in the format the Accept header asks for, compressed if asked."""
        encode, content_type = choose_encoder(accept)
        key = (content_type, gzip_accepted)
        running = self._running.get(key)
        if running is None:
            # The snapshot is the only part on the loop: it must not see a controller's state
            # halfway through a change, and it costs a list copy.
            source = self._source
            if isinstance(source, LoopStateCollector):
                source = source.snapshot()

            def render() -> Page:
                body = encode(source)
                if gzip_accepted:
                    body = gzip.compress(body, compresslevel=6)
                return Page(body, content_type, gzip_accepted)

            running = asyncio.get_running_loop().run_in_executor(self._worker, render)
            self._running[key] = running
            running.add_done_callback(lambda _: self._running.pop(key, None))
        # Shielded: a client that hangs up must not cancel the page others wait for.
        return await asyncio.shield(running)

    def close(self) -> None:
        self._worker.shutdown(wait=False, cancel_futures=True)
