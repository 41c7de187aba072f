"""`python -m bench.scrape_lag` (`make bench-scrape`): how long the operator's event loop stalls
while /metrics is scraped, with the collectors filled as thousands of CustomDaemonSets fill them.

No cluster: synthetic bodies, shaped as the controllers hold them, feed the real collectors and
the real server. Scrapers in another process (so that reading the pages costs this process
nothing) ask for gzip, as Prometheus does, back to back. Meanwhile a callback due every
millisecond records how late the loop runs it: what a watch event, an admission review or
/healthz would wait. (The results of the designs before, prometheus_client's handler on the loop
and then a worker thread, are kept in bench/results and docs/benchmarks.md.)
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gc
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.provenance import REPO, commit
from kubeherd.api.customdaemonset_reasons import IneligibleReason
from kubeherd.metrics.health import API_REQUESTS, PASS_DURATION
from kubeherd.metrics.objects import (
    OperatorCollector,
    OperatorRegistry,
    customdaemonsets,
    operator_registry,
    schedulerprofiles,
)
from kubeherd.metrics.server import MetricsServer

TICK = 0.001


def daemonset(index: int) -> dict[str, Any]:
    """A CustomDaemonSet with every status field the gauges read, and some ineligible nodes."""
    return {
        "metadata": {
            "namespace": f"team-{index % 100}",
            "name": f"agent-{index}",
            "generation": 3,
            "creationTimestamp": "2026-11-25T10:00:00Z",
        },
        "status": {
            "currentNumberScheduled": 1000,
            "desiredNumberScheduled": 1000,
            "numberAvailable": 990,
            "numberMisscheduled": 0,
            "numberReady": 995,
            "numberUnavailable": 10,
            "updatedNumberScheduled": 1000,
            "observedGeneration": 3,
            "ineligibleNodes": [
                {"reason": IneligibleReason.NODE_SELECTOR.value, "count": 12, "detail": "x"}
            ],
        },
    }


def schedulerprofile(index: int) -> dict[str, Any]:
    return {
        "metadata": {"namespace": f"team-{index % 100}", "name": f"scheduler-{index}"},
        "spec": {"replicas": 2},
        "status": {
            "readyReplicas": 2,
            "leader": "pod-a",
            "conditions": [{"type": "Valid", "status": "True"}],
        },
    }


def registry(daemonsets: int, profiles: int) -> OperatorRegistry:
    bodies = [daemonset(i) for i in range(daemonsets)]
    scheduler_bodies = [schedulerprofile(i) for i in range(profiles)]
    for verb in ("create", "delete", "patch", "get", "list", "watch"):
        API_REQUESTS.labels(verb, "200").inc(100)
    for kind in ("CustomDaemonSet", "SchedulerProfile"):
        PASS_DURATION.labels(kind).observe(0.05)
    return operator_registry(
        customdaemonsets(lambda: bodies),
        schedulerprofiles(lambda: scheduler_bodies),
        OperatorCollector(lambda: True, lambda: {"CustomDaemonSet": (3, 40)}),
    )


async def serve(source: OperatorRegistry) -> tuple[int, Any]:
    server = MetricsServer(source, "127.0.0.1:0")
    await server.start()
    return server.port, server.stop


def record_gc_pauses() -> list[float]:
    """The cyclic garbage collector's passes from now on, in seconds: they stop every thread,
    so they show in the loop's lag whatever the scrapes do."""
    pauses: list[float] = []
    started = [0.0]

    def timed(phase: str, _: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses.append(time.perf_counter() - started[0])

    gc.callbacks.append(timed)
    return pauses


def scrape_forever(url: str, concurrency: int) -> None:
    """The scrapers' process: `concurrency` threads, each scraping back to back; each scrape's
    seconds and size printed as a line."""
    lock = threading.Lock()

    def scraper() -> None:
        while True:
            started = time.perf_counter()
            request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})  # noqa: S310
            with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - loopback
                size = len(response.read())
            with lock:
                print(f"{time.perf_counter() - started:.4f} {size}", flush=True)

    for _ in range(concurrency):
        threading.Thread(target=scraper, daemon=True).start()
    threading.Event().wait()


async def measure(arguments: argparse.Namespace) -> dict[str, Any]:
    built = time.perf_counter()
    source = registry(arguments.daemonsets, arguments.schedulerprofiles)
    build_seconds = time.perf_counter() - built
    port, stop = await serve(source)
    lags: list[float] = []
    scrapes: list[tuple[float, int]] = []
    pauses = record_gc_pauses()
    # --concurrency 0: no scraper, for the loop's lag without any (its garbage collection).
    client = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.scrape_lag",
        "--client",
        f"http://127.0.0.1:{port}/metrics",
        f"--concurrency={arguments.concurrency}",
        stdout=subprocess.PIPE,
    )

    async def read_scrapes() -> None:
        assert client.stdout is not None
        async for line in client.stdout:
            seconds, size = line.split()
            scrapes.append((float(seconds), int(size)))

    reading = asyncio.create_task(read_scrapes())
    deadline = time.perf_counter() + arguments.seconds
    try:
        while time.perf_counter() < deadline:
            before = time.perf_counter()
            await asyncio.sleep(TICK)
            lags.append(time.perf_counter() - before - TICK)
    finally:
        client.terminate()
        await client.wait()
        reading.cancel()
        await stop()
    lags.sort()
    durations = sorted(seconds for seconds, _ in scrapes)
    return {
        "mode": "written on the loop in slices" if arguments.concurrency else "no scrapes",
        "daemonsets": arguments.daemonsets,
        "concurrency": arguments.concurrency,
        "registry_seconds": build_seconds,
        "scrapes": len(scrapes),
        "scrape_p50_ms": 1000 * statistics.median(durations) if durations else float("nan"),
        "scrape_max_ms": 1000 * durations[-1] if durations else float("nan"),
        "gzip_kib": scrapes[-1][1] / 1024 if scrapes else 0,
        "gc_max_ms": 1000 * max(pauses, default=0.0),
        "lag_p50_ms": 1000 * lags[len(lags) // 2],
        "lag_p99_ms": 1000 * lags[int(len(lags) * 0.99)],
        "lag_max_ms": 1000 * lags[-1],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scrape_lag", description=__doc__)
    parser.add_argument("--daemonsets", type=int, default=5000, help="default: %(default)s")
    parser.add_argument("--schedulerprofiles", type=int, default=50, help="default: %(default)s")
    parser.add_argument("--concurrency", type=int, default=4, help="scrapers at once")
    parser.add_argument("--seconds", type=float, default=20, help="how long to scrape")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    parser.add_argument("--client", metavar="URL", help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.client:
        scrape_forever(arguments.client, arguments.concurrency)
        return 0
    context = run_context(arguments.seconds)
    result = asyncio.run(measure(arguments))
    arguments.results.mkdir(parents=True, exist_ok=True)
    saved = arguments.results / f"{context['stamp']}-scrape.json"
    saved.write_text(json.dumps({"meta": context, "result": result}, indent=1) + "\n")
    print(
        f"{result['mode']}: {result['daemonsets']} CustomDaemonSets, "
        f"{result['concurrency']} scrapers back to back for {arguments.seconds:g} s\n"
        f"  scrapes: {result['scrapes']}, each p50 {result['scrape_p50_ms']:.0f} ms, "
        f"max {result['scrape_max_ms']:.0f} ms, {result['gzip_kib']:.0f} KiB gzipped\n"
        f"  event loop lag: p50 {result['lag_p50_ms']:.1f} ms, p99 {result['lag_p99_ms']:.1f} "
        f"ms, max {result['lag_max_ms']:.1f} ms\n"
        f"  longest garbage collection pass: {result['gc_max_ms']:.1f} ms\n"
        f"  load average before: {context['load_average']:.2f}; results in {saved}"
    )
    return 0


def run_context(seconds: float) -> dict[str, Any]:
    """What a result needs beside its figures: when, which code, and how busy the machine was
    (other work on its cores shows as lag with no scrape at all)."""
    now = datetime.datetime.now(datetime.UTC)
    return {
        "stamp": now.strftime("%Y%m%d-%H%M%S"),
        "started": now.strftime("%Y-%m-%d %H:%M UTC"),
        "kubeherd_commit": commit(),
        "cores": os.cpu_count(),
        "load_average": os.getloadavg()[0],
        "seconds": seconds,
    }


if __name__ == "__main__":
    sys.exit(main())
