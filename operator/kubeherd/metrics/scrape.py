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
import contextlib
import gc
import gzip
import os
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from kubeherd.metrics.objects import LoopStateCollector

WORKER_NICENESS = 10
# How soon the worker hands the interpreter back to the loop's thread while it collects.
COLLECTING_SWITCH_INTERVAL = 0.001


@contextlib.contextmanager
def loop_first() -> Iterator[None]:
    """While a collection runs in the worker, the loop's thread waits as little as it can.

    The thread wakes after each system call and must get the interpreter lock back from the
    worker: Python makes it wait a switch interval (5 ms by default) each time, and serving one
    request takes several. And the collection's many short-lived objects set off the cyclic
    garbage collector's full passes, which stop every thread; reference counting frees those
    objects anyway. Both are process-wide settings: only this single worker changes them, and
    puts them back when the collection ends."""
    interval, collecting_garbage = sys.getswitchinterval(), gc.isenabled()
    sys.setswitchinterval(min(interval, COLLECTING_SWITCH_INTERVAL))
    gc.disable()
    try:
        yield
    finally:
        sys.setswitchinterval(interval)
        if collecting_garbage:
            gc.enable()


def _yield_the_cpu() -> None:
    """On a busy node the worker and the loop's thread compete for a CPU too: the worker, niced,
    lets the system run the loop's thread first (Linux nices a single thread by its id)."""
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WORKER_NICENESS)


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
        self._worker = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="kubeherd-metrics", initializer=_yield_the_cpu
        )
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
                with loop_first():
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
