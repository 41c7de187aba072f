"""Removing a benchmark's pods quickly, whatever their number.

The pods go by DELETE collection with no grace period, while their owner is held by a finalizer:
left to the garbage collector, they would go one request at a time at kube-controller-manager's
client rate. A DELETE collection is served by the API server's delete-collection workers (the
local cluster runs several), and one is sent per workload at once, each with its own workers. A
request that outlives the API server's request timeout is answered 504 (or its connection
dropped) with part of its pods deleted: it is sent again until one succeeds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp

from bench.api import Api

# Beyond this, a cleanup is stuck rather than slow: the benchmark fails instead of waiting.
CLEANUP_TIMEOUT = 1800.0
PROGRESS_EVERY = 15.0


async def delete_collection(api: Api, path: str, selector: str, *, timeout: float) -> int:
    """DELETE collection of `path`'s objects matching `selector`, with no grace period, sent
    again until the API server answers it in full; how many requests it took."""
    deadline = time.monotonic() + timeout
    requests = 0
    while True:
        requests += 1
        try:
            answer = await api.request(
                "DELETE",
                path,
                params={"labelSelector": selector, "gracePeriodSeconds": "0"},
                allow=(404, 504),
            )
        except aiohttp.ServerDisconnectedError:
            # Seen with 50,000 pods: the API server drops the connection instead of a 504.
            answer = {"code": 504}
        if answer.get("code") != 504:
            return requests
        if time.monotonic() > deadline:
            raise TimeoutError(f"DELETE {path}?labelSelector={selector}: {timeout:.0f}s")


async def delete_in_parallel(
    api: Api,
    path: str,
    selectors: list[str],
    remaining: Callable[[], int],
    report: Callable[[str], None],
    what: str,
) -> float:
    """One DELETE collection per selector, all at once, then until `remaining()` (what the
    benchmark's own watch still sees) is 0; the seconds it all took."""
    started = time.monotonic()
    at_start = remaining()
    deleting = asyncio.gather(
        *(delete_collection(api, path, selector, timeout=CLEANUP_TIMEOUT) for selector in selectors)
    )
    last_report = started
    try:
        while not deleting.done() or remaining():
            now = time.monotonic()
            if now - started > CLEANUP_TIMEOUT:
                raise TimeoutError(f"{what}: {remaining()} left after {CLEANUP_TIMEOUT:.0f}s")
            if now - last_report >= PROGRESS_EVERY:
                last_report = now
                report(
                    f"    deleting {what}: {remaining()} of {at_start} left ({now - started:.0f}s)"
                )
            await asyncio.wait([deleting], timeout=0.2)
            if deleting.done() and deleting.exception() is not None:
                await deleting
    finally:
        if not deleting.done():
            # Stopped (a signal, Ctrl-C, the timeout): the requests in flight are abandoned,
            # and their answers, errors included, are nobody's to report.
            deleting.cancel()
            await asyncio.gather(deleting, return_exceptions=True)
    requests = sum(await deleting)
    seconds = time.monotonic() - started
    report(f"  {at_start} {what} deleted in {seconds:.1f}s ({requests} DELETE collection requests)")
    return seconds
