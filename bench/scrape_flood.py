"""`python -m bench.scrape_flood` (`make bench-flood`): whether a flood of /metrics scrapes
delays a CustomDaemonSet rollout, on the local control plane with kwok nodes.

The operator runs as in `make bench` (its own process, the chart's ServiceAccount, /metrics on
plain HTTP: no --metrics-secure, so the scrapers need no token). First, thousands of other
CustomDaemonSets that match no node fill its collectors, so that each scrape is as expensive as
in a large cluster, without their pods. Then B1's rollout (one CustomDaemonSet over every node,
timed until every pod exists, every pod Running, and its status counting every pod available)
runs once per arm, the arms interleaved run after run so that the machine's noise falls on each:

- `prometheus`: one scrape every 5 s, as Prometheus would;
- `flood`: the same, and 8 clients scraping back to back;
- `none` (only when named): no scrape at all.

The scrapers run in processes of their own and ask for gzip, as Prometheus does. Before each run
the 1-minute load average must be below --max-load (waiting a minute at a time, up to
--max-load-wait); it is reported with each run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.api import Api, Json, wait_for
from bench.harness import KUBEHERD, Options, bounded, controller_kind, name_results
from bench.provenance import REPO
from bench.report import publish, report
from bench.scenarios import Bench
from bench.stopping import Stopper, StopSignalError
from bench.workload import custom_daemonset
from localcluster.binaries import ensure_binaries
from localcluster.cluster import LocalCluster

ARMS = ("none", "prometheus", "flood")
PROMETHEUS_INTERVAL = 5.0
FLOOD_CLIENTS = 8
# Where the CustomDaemonSets that only fill the collectors live; they match no node.
FILLER_NAMESPACE = "kubeherd-flood-filler"
NO_NODE_LABEL = "bench.kubeherd.io/no-such-node"
# How long the scrapers run before the rollout starts, so that it starts inside the flood.
WARM_UP_SECONDS = 5.0
STATUS_POLL = 0.25
STATUS_TIMEOUT = 120.0

Report = Callable[[str], None]


# The scrapers' processes ------------------------------------------------------------------


def scrape_loop(url: str, clients: int, interval: float) -> None:
    """`clients` threads, each scraping, then sleeping `interval` seconds, forever; a line per
    scrape: its seconds and gzipped bytes, or `error` and the reason."""
    lock = threading.Lock()

    def client() -> None:
        while True:
            started = time.perf_counter()
            request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})  # noqa: S310
            try:
                with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
                    line = f"{time.perf_counter() - started:.4f} {len(response.read())}"
            except (OSError, urllib.error.URLError) as error:
                line = f"error {type(error).__name__}"
            with lock:
                print(line, flush=True)
            time.sleep(max(0.0, interval - (time.perf_counter() - started)))

    for _ in range(clients):
        threading.Thread(target=client, daemon=True).start()
    threading.Event().wait()


@dataclass
class Scrapers:
    """One process of scraping clients, and what it reported, with when the line arrived."""

    kind: str
    clients: int
    interval: float
    lines: list[tuple[float, str]] = field(default_factory=list)
    _process: asyncio.subprocess.Process | None = None
    _reader: asyncio.Task[None] | None = None

    async def start(self, port: int) -> None:
        self._process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.scrape_flood",
            "--client",
            f"http://127.0.0.1:{port}/metrics",
            f"--clients={self.clients}",
            f"--interval={self.interval}",
            stdout=subprocess.PIPE,
        )
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self._process is not None
        assert self._process.stdout is not None
        loop = asyncio.get_running_loop()
        async for line in self._process.stdout:
            self.lines.append((loop.time(), line.decode().strip()))

    async def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            await self._process.wait()
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)

    def between(self, start: float, end: float) -> dict[str, Any]:
        """The scrapes that ended in [start, end]: how many, how long, how large."""
        lines = [line for at, line in self.lines if start <= at <= end]
        errors = sum(1 for line in lines if line.startswith("error"))
        done = [line.split() for line in lines if not line.startswith("error")]
        seconds = sorted(float(part[0]) for part in done)
        return {
            "kind": self.kind,
            "clients": self.clients,
            "interval": self.interval,
            "scrapes": len(done),
            "errors": errors,
            "p50_ms": 1000 * statistics.median(seconds) if seconds else None,
            "max_ms": 1000 * seconds[-1] if seconds else None,
            "gzip_kib": int(done[-1][1]) / 1024 if done else None,
        }


def scrapers_of(arm: str) -> list[Scrapers]:
    if arm == "none":
        return []
    prometheus = Scrapers("prometheus", 1, PROMETHEUS_INTERVAL)
    if arm == "prometheus":
        return [prometheus]
    return [prometheus, Scrapers("flood", FLOOD_CLIENTS, 0.0)]


# The benchmark ----------------------------------------------------------------------------


def filler_daemonset(index: int) -> Json:
    """A CustomDaemonSet with the benchmark's template that no node is eligible for."""
    manifest = custom_daemonset(f"filler-{index:05d}", FILLER_NAMESPACE)
    manifest["spec"]["template"]["spec"]["nodeSelector"] = {NO_NODE_LABEL: "true"}
    return manifest


async def quiet_machine(max_load: float, max_wait: float, say: Report) -> tuple[float, float]:
    """Wait (a minute at a time, up to `max_wait` seconds) for the 1-minute load average to be
    at most `max_load`: (the load when the run starts, seconds waited)."""
    waited = 0.0
    while (load := os.getloadavg()[0]) > max_load and waited < max_wait:
        say(f"  load {load:.2f} > {max_load:g}: waiting 60 s ({waited:.0f} s so far)")
        await asyncio.sleep(60)
        waited += 60
    return load, waited


class Flood:
    def __init__(self, bench: Bench, arguments: argparse.Namespace) -> None:
        self.bench = bench
        self.arguments = arguments
        self.results: dict[str, Any] = {"runs": []}

    @property
    def api(self) -> Api:
        return self.bench.api

    async def fill(self) -> None:
        count = self.arguments.fillers
        self.results["fillers"] = count
        if not count:
            return
        report(f"[flood] {count} CustomDaemonSets that match no node, to fill the collectors")
        await self.api.create(
            "/api/v1/namespaces", {"metadata": {"name": FILLER_NAMESPACE}}, allow=(409,)
        )
        path = f"/apis/kubeherd.io/v1alpha1/namespaces/{FILLER_NAMESPACE}/customdaemonsets"
        loop = asyncio.get_running_loop()
        started = loop.time()
        await bounded(
            16, (self.api.create(path, filler_daemonset(i), allow=(409,)) for i in range(count))
        )
        report(f"  created in {loop.time() - started:.0f} s; waiting for a status on each")

        async def observed() -> bool:
            items, _ = await self.api.list_all(path)
            done = sum(1 for item in items if (item.get("status") or {}).get("observedGeneration"))
            report(f"    {done}/{count} with a status ({loop.time() - started:.0f} s)")
            return bool(done >= count)

        await wait_for(observed, timeout=1800, what="a status on every filler", interval=10)
        self.results["fill_seconds"] = loop.time() - started
        # Let the status writes and the events they caused settle.
        await asyncio.sleep(10)

    def page(self) -> dict[str, Any]:
        """One scrape as text and one gzipped, with nothing else scraping: their size, time."""
        url = f"http://127.0.0.1:{self.bench.operator.metrics_port}/metrics"
        measured: dict[str, Any] = {}
        for name, headers in (("plain", {}), ("gzip", {"Accept-Encoding": "gzip"})):
            started = time.perf_counter()
            request = urllib.request.Request(url, headers=headers)
            with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
                body = response.read()
            measured[f"{name}_seconds"] = time.perf_counter() - started
            measured[f"{name}_kib"] = len(body) / 1024
            if name == "plain":
                measured["series"] = sum(
                    1 for line in body.splitlines() if line and not line.startswith(b"#")
                )
        return measured

    async def run_arm(self, arm: str, label: str) -> dict[str, Any]:
        bench = self.bench
        load, waited = await quiet_machine(
            self.arguments.max_load, self.arguments.max_load_wait, report
        )
        scrapers = scrapers_of(arm)
        for scraper in scrapers:
            await scraper.start(bench.operator.metrics_port)
        if scrapers:
            await asyncio.sleep(WARM_UP_SECONDS)
        loop = asyncio.get_running_loop()
        cpu_before = bench.operator.usage().cpu_seconds
        workload = f"{KUBEHERD}-{label}"
        expected = len(bench.nodes.names)
        started = loop.time()
        status = asyncio.create_task(self._available(workload, expected))
        try:
            result = await bench.rollout(KUBEHERD, label)
            available = await status
        finally:
            status.cancel()
            ended = loop.time()
            for scraper in scrapers:
                await scraper.stop()
        cpu = bench.operator.usage().cpu_seconds - cpu_before
        scraped = [scraper.between(started, ended) for scraper in scrapers]
        report(
            f"  status: {available:.1f} s to every pod available; operator {cpu:.1f} CPU s; "
            f"load {load:.2f} before, {os.getloadavg()[0]:.2f} after; scrapes: "
            + (
                ", ".join(
                    f"{s['kind']} {s['scrapes']} (p50 {s['p50_ms'] or 0:.0f} ms, "
                    f"max {s['max_ms'] or 0:.0f} ms, {s['errors']} errors)"
                    for s in scraped
                )
                or "none"
            )
        )
        await bench.remove(KUBEHERD, [workload])
        return {
            "arm": arm,
            "label": label,
            "pods": result.pods,
            "all_created": result.all_created,
            "all_running": result.all_running,
            "status_available": available,
            "operator_cpu_seconds": cpu,
            "load_before": load,
            "load_after": os.getloadavg()[0],
            "load_waited_seconds": waited,
            "scrapes": scraped,
        }

    async def _available(self, workload: str, expected: int) -> float:
        """Seconds from now until the CustomDaemonSet's status counts `expected` pods available
        (and desired) for its current generation."""
        path = f"{controller_kind(KUBEHERD)[0]}/{workload}"
        loop = asyncio.get_running_loop()
        started = loop.time()
        while loop.time() - started < STATUS_TIMEOUT + expected / 10:
            answer = await self.api.request("GET", path, allow=(404,))
            status = answer.get("status") or {}
            generation = (answer.get("metadata") or {}).get("generation")
            if (
                generation is not None
                and status.get("observedGeneration") == generation
                and status.get("desiredNumberScheduled") == expected
                and status.get("numberAvailable") == expected
            ):
                return loop.time() - started
            await asyncio.sleep(STATUS_POLL)
        raise TimeoutError(f"{workload}: the status never counted {expected} pods available")

    async def measure(self) -> None:
        arguments = self.arguments
        bench = self.bench
        await bench.set_up()
        await bench.grow_to(arguments.nodes)
        await self.fill()
        self.results["page"] = await asyncio.to_thread(self.page)
        page = self.results["page"]
        report(
            f"  /metrics: {page['series']} series, {page['plain_kib']:.0f} KiB "
            f"({page['gzip_kib']:.0f} KiB gzipped), a lone scrape {page['gzip_seconds']:.2f} s"
        )
        for index in range(1, arguments.warm_up + 1):
            report(f"[flood] warm-up rollout {index} (not counted), no scrapes")
            await self.run_arm("none", f"warm-{index}")
        for run in range(1, arguments.runs + 1):
            for arm in arguments.arms:
                report(f"[flood] {arguments.nodes} nodes, run {run}/{arguments.runs}: {arm}")
                self.results["runs"].append(await self.run_arm(arm, f"{arm}-r{run}"))
                self.save()

    def save(self) -> None:
        self.arguments.json.write_text(json.dumps(self.document(), indent=1) + "\n")

    def document(self) -> dict[str, Any]:
        arguments = self.arguments
        return {
            "meta": {
                "started": arguments.started,
                "kubeherd_commit": arguments.commit,
                "nodes": arguments.nodes,
                "arms": list(arguments.arms),
                "runs": arguments.runs,
                "operator_arguments": list(arguments.operator_arg),
                "metrics": "plain HTTP (no --metrics-secure): the scrapers send no token",
                "max_load": arguments.max_load,
                "command": " ".join(sys.argv[1:]),
            },
            **self.results,
        }


# The report -------------------------------------------------------------------------------


def _median_of(runs: list[dict[str, Any]], arm: str, key: str) -> float | None:
    values = [run[key] for run in runs if run["arm"] == arm]
    return statistics.median(values) if values else None


def _scrape_cell(run: dict[str, Any], kind: str) -> str:
    found = [s for s in run["scrapes"] if s["kind"] == kind]
    if not found:
        return "—"
    s = found[0]
    if not s["scrapes"]:
        return f"0 ({s['errors']} errors)"
    errors = f", {s['errors']} errors" if s["errors"] else ""
    return f"{s['scrapes']} ({s['p50_ms']:.0f} / {s['max_ms']:.0f} ms{errors})"


def markdown(document: dict[str, Any]) -> str:
    meta = document["meta"]
    runs = document["runs"]
    page = document.get("page") or {}
    arms = [arm for arm in meta["arms"] if any(run["arm"] == arm for run in runs)]
    lines = [
        f"### Rollout under a /metrics flood ({meta['nodes']} nodes, "
        f"{document.get('fillers', 0)} other CustomDaemonSets)",
        "",
        f"kubeherd {meta['kubeherd_commit']}, started {meta['started']}; /metrics "
        f"{meta['metrics']}. The page: {page.get('series', 0)} series, "
        f"{page.get('plain_kib', 0):.0f} KiB ({page.get('gzip_kib', 0):.0f} KiB gzipped); "
        f"a lone gzipped scrape took {1000 * page.get('gzip_seconds', 0):.0f} ms.",
        "",
        "| run | arm | load before | all pods created | all Running | status: all available "
        "| operator CPU | Prometheus scrapes (p50 / max) | flood scrapes (p50 / max) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        lines.append(
            f"| {run['label']} | {run['arm']} | {run['load_before']:.2f} "
            f"| {run['all_created']:.1f} s | {run['all_running']:.1f} s "
            f"| {run['status_available']:.1f} s | {run['operator_cpu_seconds']:.1f} s "
            f"| {_scrape_cell(run, 'prometheus')} | {_scrape_cell(run, 'flood')} |"
        )
    lines += [
        "",
        "| arm | runs | median: all pods created | all Running | status: all available |",
        "|---|---:|---:|---:|---:|",
    ]
    keys = ("all_created", "all_running", "status_available")
    for arm in arms:
        count = sum(1 for run in runs if run["arm"] == arm)
        cells = " | ".join(f"{_median_of(runs, arm, key) or 0:.1f} s" for key in keys)
        lines.append(f"| {arm} | {count} | {cells} |")
    baseline = next((arm for arm in ("prometheus", "none") if arm in arms), None)
    if "flood" in arms and baseline is not None:
        ratios = []
        for key in keys:
            flood, base = _median_of(runs, "flood", key), _median_of(runs, baseline, key)
            ratios.append(f"{flood / base:.2f}" if flood and base else "—")
        lines.append(f"| flood / {baseline} | | {' | '.join(ratios)} |")
    return "\n".join(lines) + "\n"


# The command ------------------------------------------------------------------------------


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scrape_flood", description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000, help="kwok nodes (default 1000)")
    parser.add_argument("--fillers", type=int, default=5000, help="CustomDaemonSets on no node")
    parser.add_argument("--runs", type=int, default=3, help="rollouts per arm (default 3)")
    parser.add_argument("--arms", default="prometheus,flood", help=f"of {', '.join(ARMS)}")
    parser.add_argument("--warm-up", type=int, default=1, help="uncounted rollouts first")
    parser.add_argument("--max-load", type=float, default=3.0, help="1-minute load to start at")
    parser.add_argument("--max-load-wait", type=float, default=1200, help="seconds, per run")
    parser.add_argument("--operator-arg", action="append", default=[], help="repeatable")
    parser.add_argument("--dir", type=Path, default=REPO / ".cluster" / "bench-flood")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    parser.add_argument("--docs", type=Path, default=REPO / "docs" / "benchmarks.md")
    parser.add_argument("--no-docs", action="store_true", help="do not append to the docs")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    parser.add_argument("--render", type=Path, metavar="RESULTS_JSON", help="only report it")
    parser.add_argument("--client", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--clients", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--interval", type=float, default=0.0, help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    arguments.arms = tuple(a.strip() for a in arguments.arms.split(",") if a.strip())
    if unknown := set(arguments.arms) - set(ARMS):
        parser.error(f"unknown arms: {', '.join(sorted(unknown))}")
    return arguments


async def _measure_and_tear_down(flood: Flood) -> None:
    try:
        await flood.measure()
    finally:
        flood.save()
        await flood.bench.tear_down()


def main(argv: list[str] | None = None) -> int:
    arguments = parse(argv)
    if arguments.client:
        scrape_loop(arguments.client, arguments.clients, arguments.interval)
        return 0
    if arguments.render is not None:
        publish(markdown(json.loads(arguments.render.read_text())), arguments)
        return 0
    name_results(arguments, "flood")
    stopper = Stopper()
    stopper.install()
    binaries = ensure_binaries()
    cluster = LocalCluster(arguments.dir, binaries, nodes=arguments.nodes)
    options = Options(nodes=arguments.nodes, operator_arguments=tuple(arguments.operator_arg))
    flood = Flood(Bench(options, cluster, binaries, report), arguments)
    try:
        report(f"starting a fresh local cluster in {cluster.folder}")
        cluster.down(quiet=True)
        cluster.up()
        asyncio.run(stopper.run(_measure_and_tear_down(flood)))
    except (StopSignalError, KeyboardInterrupt):
        report("stopped: stopping the local cluster")
        return stopper.exit_status if stopper.received is not None else 130
    finally:
        stopper.cleaning_up()
        if not arguments.keep:
            cluster.down()
    publish(markdown(flood.document()), arguments)
    report(f"results in {arguments.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
