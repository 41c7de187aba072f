"""Serving `/metrics` without stalling the event loop, one collection per format at a time.

With thousands of CustomDaemonSets a page holds about a hundred thousand samples. Written in
one go on the operator's event loop, it would stall the controllers, the admission webhook and
Kopf's `/healthz` for that long, once per request. Nor does a worker thread help: it shares the
interpreter with the loop, which then waits for the interpreter lock at each of its system calls.
So the page is written on the loop, a slice of time at a time (metrics.exposition), and requests
that arrive while a page of their format is being written wait for it and get it, so a flood of
scrapes costs one page at a time, not one each.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from prometheus_client.exposition import choose_encoder

from kubeherd.metrics.exposition import DEFAULT_SLICE_SECONDS, Pacer
from kubeherd.metrics.objects import Encoder, OperatorRegistry

OPENMETRICS_TYPE = "application/openmetrics-text"


@dataclass(frozen=True)
class Page:
    """One rendering of the metrics, as the response carries it."""

    body: bytes
    content_type: str
    gzipped: bool


class Scraper:
    def __init__(
        self, registry: OperatorRegistry, slice_seconds: float = DEFAULT_SLICE_SECONDS
    ) -> None:
        self._registry = registry
        self._slice_seconds = slice_seconds
        self._running: dict[tuple[str, bool], asyncio.Task[Page]] = {}
        # How often the pages written so far handed the loop back: for the tests.
        self.pauses = 0

    async def page(self, accept: str, gzip_accepted: bool) -> Page:
        """The metrics in the format the Accept header asks for, compressed if asked."""
        encode, content_type = choose_encoder(accept)
        key = (content_type, gzip_accepted)
        running = self._running.get(key)
        if running is None:
            running = asyncio.create_task(self._write(encode, content_type, gzip_accepted))
            self._running[key] = running
            running.add_done_callback(lambda _: self._running.pop(key, None))
        # Shielded: a client that hangs up must not cancel the page others wait for.
        return await asyncio.shield(running)

    async def _write(self, encode: Encoder, content_type: str, gzipped: bool) -> Page:
        pacer = Pacer(self._slice_seconds)
        openmetrics = content_type.startswith(OPENMETRICS_TYPE)
        try:
            body = await self._registry.page(
                encode, openmetrics=openmetrics, gzipped=gzipped, pacer=pacer
            )
        finally:
            self.pauses += pacer.pauses
        return Page(body, content_type, gzipped)

    async def close(self) -> None:
        running = list(self._running.values())
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
