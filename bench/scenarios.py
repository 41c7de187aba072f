"""B1-B5 on one local cluster: kubeherd and the native DaemonSet controller, one after the other,
with the same pod template on the same nodes."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass

import aiohttp

from bench.api import wait_for
from bench.clients import NATIVE_DAEMONSET, dispatched_by_schema, requests_between
from bench.harness import KUBEHERD, NATIVE, bounded, controller_kind
from bench.idle import describe, now_utc, wait_until_settled
from bench.limit import probe_record, with_probe
from bench.profile import Profiler, folded_summary, layer_shares
from bench.stats import Rollout, delays, percentile
from bench.tenant import TenantBench
from bench.workload import NAMESPACE, pinned_pod
from localcluster.nodes import ZONES, fake_node_manifest


class Bench(TenantBench):
    """B1-B6, each a method that `python -m bench` calls in turn."""

    async def rollouts(self, size: int, runs: int) -> None:
        """B1 at `size` nodes, `runs` times; the controllers take turns going first."""
        await self.grow_to(size)
        # B3's probe right before each kubeherd run at --nodes: a pair on the same cluster, a
        # few seconds apart, so that the share does not depend on how busy the machine was.
        paired = "B3" in self.options.only and size == self.options.nodes
        for run in range(1, runs + 1):
            order = (KUBEHERD, NATIVE) if run % 2 else (NATIVE, KUBEHERD)
            for controller in order:
                label = f"{size}-r{run}"
                if paired and controller == KUBEHERD:
                    await self.limit(run)
                self.report(f"[B1] {size} nodes, run {run}/{runs}: {controller}")
                profile_path = self.options.profile
                profiler = (
                    Profiler(self.operator.pid, profile_path)
                    if profile_path is not None
                    and controller == KUBEHERD
                    and size == self.options.nodes
                    and not self.results.profile
                    else None
                )
                result = await self.rollout(controller, label)
                if profiler is not None:
                    self._record_profile(profiler, result)
                self.results.rollouts.append(
                    {"controller": controller, "nodes": size, "run": run, **asdict(result)}
                )
                await self.remove(controller, [f"{controller}-{label}"])

    def _record_profile(self, profiler: Profiler, result: Rollout) -> None:
        folded = profiler.stop()
        samples, top = folded_summary(folded)
        layers = layer_shares(folded)
        self.results.profile = {
            "nodes": result.pods,
            "seconds": result.all_running,
            "samples": samples,
            "layers": layers,
            "top": top,
            "folded": str(profiler.output),
        }
        self.report(f"  py-spy: {samples} samples; by layer:")
        for share, layer in layers:
            self.report(f"    {share:5.1f} %  {layer}")
        self.report("  inclusive share of the busiest functions:")
        for share, function in top[:15]:
            self.report(f"    {share:5.1f} %  {function}")

    # B2: nodes joining --------------------------------------------------------------------

    async def join(self) -> None:
        count = self.options.join
        label = "join"
        self.report(f"[B2] both controllers running on {len(self.nodes.names)} nodes")
        for controller in (KUBEHERD, NATIVE):
            await self.rollout(controller, label)
        start = len(self.nodes.names)
        names = [f"joined-{start + index}" for index in range(count)]
        self.report(f"[B2] adding {count} nodes")
        started = asyncio.get_running_loop().time()
        await self._create_nodes(
            [fake_node_manifest(name, zone=ZONES[i % len(ZONES)]) for i, name in enumerate(names)]
        )
        for controller in (KUBEHERD, NATIVE):
            await self._wait_for_pods(f"{controller}-{label}", start + count, started)
        added = {name: self.nodes.added[name] for name in names}
        self.results.join = {"nodes": count, "existing_nodes": start}
        for controller in (KUBEHERD, NATIVE):
            records = self.pods.of(f"{controller}-{label}")
            waits = delays(added, {r.node: r.created for r in records if r.node in added})
            self.results.join[controller] = {
                "p50": percentile(waits, 0.5),
                "p99": percentile(waits, 0.99),
                "max": max(waits),
                "delays": sorted(waits),
            }
            self.report(
                f"  {controller}: node to pod p50 {percentile(waits, 0.5) * 1000:.0f} ms, "
                f"p99 {percentile(waits, 0.99) * 1000:.0f} ms"
            )
        for controller in (KUBEHERD, NATIVE):
            await self.remove(controller, [f"{controller}-{label}"])
        await self.settle_nodes(start + count)

    # B3: the API server's limit -----------------------------------------------------------

    async def limit(self, run: int | None = None) -> None:
        """One probe; `run`: the kubeherd B1 run that follows it."""
        nodes = sorted(self.nodes.names)
        workload = "probe"
        concurrency = self.options.probe_concurrency
        self.report(
            f"[B3] creating {len(nodes)} pods from {concurrency} concurrent requests, nothing else"
        )
        path = f"/api/v1/namespaces/{NAMESPACE}/pods"
        loop = asyncio.get_running_loop()
        started = loop.time()
        await bounded(concurrency, (self.api.create(path, pinned_pod(workload, n)) for n in nodes))
        probe = probe_record(len(nodes), loop.time() - started, run)
        self.results.limit = with_probe(self.results.limit, concurrency, probe)
        self.report(f"  {len(nodes)} pods in {probe['seconds']:.1f}s: {probe['rate']:.0f} pods/s")
        await self.delete_pods([workload])

    # B4: the operator's cost --------------------------------------------------------------

    async def cost(self) -> None:
        count = self.options.daemonsets
        expected = len(self.nodes.names)
        self.report(f"[B4] restarting kubeherd; {count} CustomDaemonSets on {expected} nodes")
        await self.restart_operator()
        # Read once its watches have listed the nodes: /healthz answers while the listings are
        # still on their way, and reads taken then varied by 20 MiB between runs.
        await wait_for(self._operator_ready, timeout=120, what="kubeherd's /readyz")
        at_start = self.operator.usage()
        self.report(
            f"  started: peak RSS {at_start.peak_rss_mib:.0f} MiB, {at_start.cpu_seconds:.1f} CPU s"
        )
        workloads = [f"{KUBEHERD}-cost-{index}" for index in range(1, count + 1)]
        loop = asyncio.get_running_loop()
        at_first = dispatched_by_schema(await self.api.text("/metrics"))
        # Scraped as a Prometheus would, through the rollout and the idle time, so that the
        # figures include what serving the metrics costs (none when they are turned off).
        scrapes = MetricsScrapes()
        scraping = asyncio.create_task(scrapes.run(self.operator.metrics_port))
        started = loop.time()
        for workload in workloads:
            await self.create(KUBEHERD, workload)
        for workload in workloads:
            await self._wait_for_pods(workload, expected, started, sharing=count)
        rollout_seconds = loop.time() - started
        rolled_out = self.operator.usage()
        self.report(
            f"  {count * expected} pods in {rollout_seconds:.0f}s; kubeherd peak RSS "
            f"{rolled_out.peak_rss_mib:.0f} MiB, {rolled_out.cpu_seconds:.1f} CPU s"
        )
        path, _ = controller_kind(KUBEHERD)
        pods_path = f"/api/v1/namespaces/{NAMESPACE}/pods"
        settled = await wait_until_settled(self.api, path, pods_path, workloads, expected)
        self.report(
            f"  every status done and unchanged {settled.seconds:.1f}s after the last pod"
            + (
                f" ({settled.not_ready_pods} pods not Ready, counted so)"
                if settled.not_ready_pods
                else ""
            )
        )
        clients = (self.kubeherd, NATIVE_DAEMONSET)
        before = dispatched_by_schema(await self.api.text("/metrics"))
        idle_from = now_utc()
        rollout_requests = asdict(requests_between(self.kubeherd, at_first, before))
        self.report(f"  kubeherd's requests for the rollout: {rollout_requests}")
        usage_before = self.operator.usage()
        idle = self.options.idle_seconds
        self.report(f"  idle for {idle:.0f}s, counting each client's requests")
        await asyncio.sleep(idle)
        after = dispatched_by_schema(await self.api.text("/metrics"))
        idle_until = now_utc()
        usage_after = self.operator.usage()
        idle_requests = {c.label: asdict(requests_between(c, before, after)) for c in clients}
        self.report(f"  requests while idle: {idle_requests}")
        idle_writes = await self._writes_between(idle_from, idle_until)
        self.report(f"  kubeherd's writes while idle, by the audit log: {describe(idle_writes)}")
        scraping.cancel()
        await asyncio.gather(scraping, return_exceptions=True)
        self.report(f"  /metrics: {scrapes.summary()}")
        restart = await self._restart_on_pods(count)
        self.results.cost = {
            "daemonsets": count,
            "nodes": expected,
            "pods": count * expected,
            "rollout_seconds": rollout_seconds,
            "peak_rss_mib": usage_after.peak_rss_mib,
            "peak_rss_after_start_mib": at_start.peak_rss_mib,
            "cpu_seconds_start": at_start.cpu_seconds,
            "cpu_seconds_rollout": rolled_out.cpu_seconds - at_start.cpu_seconds,
            "cpu_seconds_idle": usage_after.cpu_seconds - usage_before.cpu_seconds,
            "idle_seconds": idle,
            "idle_requests": idle_requests,
            "idle_writes": idle_writes,
            "settle_seconds": settled.seconds,
            "not_ready_pods_at_idle": settled.not_ready_pods,
            "rollout_requests": rollout_requests,
            "restart": restart,
            "metrics": asdict(scrapes),
        }
        self.results.cost["cleanup_seconds"] = await self.remove(KUBEHERD, workloads)
        self.report(f"  cleanup: {self.results.cost['cleanup_seconds']:.1f}s")


# How often B4 reads the operator's /metrics: a common Prometheus scrape interval.
SCRAPE_INTERVAL = 15.0


@dataclass
class MetricsScrapes:
    """The operator's /metrics, read every SCRAPE_INTERVAL until cancelled."""

    scrapes: int = 0
    failed: int = 0
    last_bytes: int = 0
    last_series: int = 0

    async def run(self, port: int) -> None:
        url = f"http://127.0.0.1:{port}/metrics"
        async with aiohttp.ClientSession() as session:
            while True:
                try:
                    async with session.get(url) as response:
                        body = await response.read()
                    self.scrapes += 1
                    self.last_bytes = len(body)
                    self.last_series = sum(
                        1 for line in body.splitlines() if line and not line.startswith(b"#")
                    )
                except aiohttp.ClientError:
                    self.failed += 1
                await asyncio.sleep(SCRAPE_INTERVAL)

    def summary(self) -> str:
        if not self.scrapes:
            return f"not served ({self.failed} attempts)"
        return (
            f"{self.scrapes} scrapes, the last {self.last_series} series in "
            f"{self.last_bytes / 1024:.0f} KiB"
        )
