"""B1-B5 on one local cluster: kubeherd and the native DaemonSet controller, one after the other,
with the same pod template on the same nodes."""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.api import Api, Json, wait_for
from bench.cleanup import CLEANUP_TIMEOUT, delete_collection, delete_in_parallel
from bench.clients import (
    NATIVE_DAEMONSET,
    Client,
    dispatched_by_schema,
    flow_schemas,
    kubeherd_client,
    requests_between,
)
from bench.operator import OperatorProcess
from bench.profile import Profiler, folded_summary, layer_shares
from bench.stats import Rollout, delays, percentile, rollout
from bench.tracking import NodeTracker, PodTracker
from bench.workload import (
    BENCH_LABEL,
    FOREIGN_NAMESPACE,
    NAMESPACE,
    TENANT_NAMESPACE,
    custom_daemonset,
    foreign_pod,
    native_daemonset,
    pinned_pod,
    tenant_daemonset,
)
from localcluster.binaries import Binaries
from localcluster.cluster import LocalCluster
from localcluster.nodes import (
    ZONES,
    default_node_manifests,
    fake_node_manifest,
)

REPO = Path(__file__).resolve().parent.parent
RELEASE, RELEASE_NAMESPACE = "kubeherd", "kubeherd-system"
KUBEHERD, NATIVE = "kubeherd", "native"
# Holds a benchmark's DaemonSet while its pods are cleaned up: a controller stops at the deletion
# timestamp, and the pods go in one request instead of one garbage-collector call each.
HOLD_FINALIZER = "bench.kubeherd.io/hold"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
PROGRESS_EVERY = 5.0
# B4's restart: what the operator logs once per CustomDaemonSet after it starts
# (kubeherd.daemonset.controller), and how long to wait for all of them.
FIRST_PASS = re.compile(r"first pass [0-9.]+s after start: ([^\n]+)")
RESTART_TIMEOUT = 300.0

Report = Callable[[str], None]


@dataclass
class Options:
    nodes: int = 1000
    runs: int = 3
    growth: tuple[int, ...] = (1000, 2000, 5000)
    growth_runs: int = 1
    join: int = 100
    daemonsets: int = 10
    idle_seconds: float = 300.0
    probe_concurrency: int = 32
    operator_arguments: tuple[str, ...] = ()
    # Record the operator with py-spy during the first kubeherd rollout at `nodes`.
    profile: Path | None = None
    only: frozenset[str] = frozenset({"B1", "B2", "B3", "B4", "B5"})
    # B6: one tenant's worst. Its CustomDaemonSets and their template size, the updates of one
    # of them (at that history limit), and pods with kubeherd's label key in another namespace.
    tenant_daemonsets: int = 200
    tenant_kib: int = 200
    tenant_updates: int = 150
    tenant_history: int = 100
    foreign_pods: int = 20000
    # The local cluster's kube-scheduler client QPS (None: its default).
    scheduler_qps: float | None = None


@dataclass
class Results:
    rollouts: list[dict[str, Any]] = field(default_factory=list)
    join: dict[str, Any] = field(default_factory=dict)
    limit: dict[str, Any] = field(default_factory=dict)
    cost: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] = field(default_factory=dict)
    tenant: dict[str, Any] = field(default_factory=dict)


def controller_kind(controller: str) -> tuple[str, Callable[[str], Json]]:
    if controller == KUBEHERD:
        return f"/apis/kubeherd.io/v1alpha1/namespaces/{NAMESPACE}/customdaemonsets", (
            custom_daemonset
        )
    return f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets", native_daemonset


async def bounded(concurrency: int, jobs: Iterable[Awaitable[Any]]) -> None:
    """Await every job, at most `concurrency` at a time."""
    slots = asyncio.Semaphore(concurrency)

    async def run(job: Awaitable[Any]) -> None:
        async with slots:
            await job

    await asyncio.gather(*(run(job) for job in jobs))


class Bench:
    def __init__(
        self, options: Options, cluster: LocalCluster, binaries: Binaries, report: Report
    ) -> None:
        self.options = options
        self.cluster = cluster
        self.binaries = binaries
        self.report = report
        self.results = Results()
        self.api: Api
        self.pods: PodTracker
        self.nodes: NodeTracker
        self.operator: OperatorProcess
        self.kubeherd: Client

    # Set-up -------------------------------------------------------------------------------

    async def set_up(self) -> None:
        ports = self.cluster.ports()
        assert ports is not None
        self.api = Api(f"https://127.0.0.1:{ports.apiserver}", self.cluster.pki)
        self.report("installing the chart (CRDs and RBAC; the operator runs here, below)")
        await asyncio.to_thread(self._install_chart)
        await self.api.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}}, allow=(409,))
        await wait_for(
            self._has_default_service_account, timeout=60, what="the namespace's ServiceAccount"
        )
        self.kubeherd = kubeherd_client(RELEASE_NAMESPACE, RELEASE)
        for precedence, client in ((10, self.kubeherd), (20, NATIVE_DAEMONSET)):
            for schema in flow_schemas(client, precedence):
                path = "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas"
                await self.api.create(path, schema, allow=(409,))
        self.pods = PodTracker(self.api, NAMESPACE)
        self.nodes = NodeTracker(self.api)
        await self.pods.start()
        await self.nodes.start()
        await self._start_operator()

    def _install_chart(self) -> None:
        installed = subprocess.run(
            [
                str(self.binaries.path("helm")),
                f"--kubeconfig={self.cluster.kubeconfig}",
                "upgrade",
                "--install",
                RELEASE,
                str(REPO / "charts" / "kubeherd"),
                f"--namespace={RELEASE_NAMESPACE}",
                "--create-namespace",
                "--set=replicaCount=0",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if installed.returncode != 0:
            raise RuntimeError(f"helm could not install the chart:\n{installed.stderr}")

    async def _has_default_service_account(self) -> bool:
        path = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"
        return await self.exists(path)

    async def exists(self, path: str) -> bool:
        return bool((await self.api.request("GET", path, allow=(404,)))["code"] != 404)

    async def _start_operator(self) -> None:
        token_path = f"/api/v1/namespaces/{RELEASE_NAMESPACE}/serviceaccounts/{RELEASE}/token"
        request = {"spec": {"audiences": [], "expirationSeconds": 6 * 3600}}
        token = (await self.api.create(token_path, request))["status"]["token"]
        kubeconfig = self.cluster.token_kubeconfig(
            RELEASE, token, self.cluster.folder / "kubeherd.kubeconfig"
        )
        self.operator = OperatorProcess(
            kubeconfig, self.cluster.logs / "kubeherd.log", self.options.operator_arguments
        )
        await asyncio.to_thread(self.operator.start)

    async def restart_operator(self) -> None:
        await asyncio.to_thread(self.operator.stop)
        await asyncio.to_thread(self.operator.start)

    async def tear_down(self) -> None:
        """Stop whatever set_up got as far as starting."""
        if (operator := getattr(self, "operator", None)) is not None:
            await asyncio.to_thread(operator.stop)
        for tracker in (getattr(self, "pods", None), getattr(self, "nodes", None)):
            if tracker is not None:
                await tracker.stop()
        if (api := getattr(self, "api", None)) is not None:
            await api.close()

    # Nodes --------------------------------------------------------------------------------

    async def grow_to(self, size: int) -> None:
        """Add default fake nodes until there are `size`, and let the cluster settle."""
        missing = [
            manifest
            for manifest in default_node_manifests(size)
            if manifest["metadata"]["name"] not in self.nodes.names
        ][: max(0, size - len(self.nodes.names))]
        if missing:
            self.report(f"adding {len(missing)} nodes to reach {size}")
            await self._create_nodes(missing)
        await self.settle_nodes(size)

    async def _create_nodes(self, manifests: list[Json]) -> None:
        await bounded(16, (self.api.create("/api/v1/nodes", m, allow=(409,)) for m in manifests))

    async def settle_nodes(self, size: int) -> None:
        """Wait until kwok marks every node Ready, and lift the not-ready taint that the API
        server puts on new nodes, as kube-controller-manager would (only faster: it does a few
        nodes a second). A benchmark then starts on a quiet cluster."""
        started = time.monotonic()
        while True:
            nodes, _ = await self.api.list_all("/api/v1/nodes")
            ready = [node for node in nodes if _is_ready(node)]
            tainted = [node for node in ready if _taint_keys(node) & {NOT_READY_TAINT}]
            if len(ready) >= size and not tainted:
                break
            await bounded(16, (self._lift_not_ready(node) for node in tainted))
            self.report(
                f"  nodes: {len(ready)}/{size} Ready, {len(tainted)} not-ready taints lifted "
                f"({time.monotonic() - started:.0f}s)"
            )
            await asyncio.sleep(2)

    async def _lift_not_ready(self, node: Json) -> None:
        taints = [t for t in node["spec"].get("taints") or [] if t["key"] != NOT_READY_TAINT]
        await self.api.patch(
            f"/api/v1/nodes/{node['metadata']['name']}", {"spec": {"taints": taints or None}}
        )

    # B1: one rollout ----------------------------------------------------------------------

    async def create(self, controller: str, workload: str) -> None:
        path, manifest_of = controller_kind(controller)
        manifest = manifest_of(workload)
        manifest["metadata"]["finalizers"] = [HOLD_FINALIZER]
        await self.api.create(path, manifest)

    async def rollout(self, controller: str, label: str) -> Rollout:
        """Create one DaemonSet of `controller`'s kind, wait for a Running pod on every node."""
        workload = f"{controller}-{label}"
        expected = len(self.nodes.names)
        started = asyncio.get_running_loop().time()
        await self.create(controller, workload)
        await self._wait_for_pods(workload, expected, started)
        records = self.pods.of(workload)
        result = rollout(started, [r.created for r in records], [r.running for r in records])
        self.report(
            f"  {controller}: {result.pods} pods created in {result.all_created:.1f}s, "
            f"all Running in {result.all_running:.1f}s ({result.create_rate:.0f} pods/s)"
        )
        return result

    async def _wait_for_pods(
        self, workload: str, expected: int, started: float, sharing: int = 1
    ) -> None:
        """Until `expected` pods of `workload` exist and run; progress every few seconds.
        `sharing`: how many workloads create their pods at the same time, from `started`."""
        loop = asyncio.get_running_loop()
        # Generous: the native controller's 20 writes per second, twice over, and a margin,
        # for all the pods created at once (B4's workloads share one API server).
        timeout = 120 + sharing * expected / 10
        last_report = started
        while True:
            if (error := self.pods.failed()) is not None:
                raise RuntimeError(f"the pod watch failed: {error}")
            created, running = self.pods.counts(workload)
            now = loop.time()
            if created >= expected and running >= expected:
                return
            if now - started > timeout:
                raise TimeoutError(
                    f"{workload}: {created}/{expected} pods created, {running} Running "
                    f"after {timeout:.0f}s; see {self.cluster.logs}"
                )
            if now - last_report >= PROGRESS_EVERY:
                last_report = now
                self.report(
                    f"    {workload}: {created}/{expected} created, {running} Running "
                    f"({now - started:.0f}s)"
                )
            await asyncio.sleep(0.1)

    async def remove(self, controller: str, workloads: list[str]) -> float:
        """Delete benchmark DaemonSets and their pods, and wait until all are gone; the seconds
        it took."""
        started = time.monotonic()
        path, _ = controller_kind(controller)
        for workload in workloads:
            await self.api.delete(f"{path}/{workload}")
        await self.delete_pods(workloads)
        for workload in workloads:
            await self.api.request(
                "PATCH",
                f"{path}/{workload}",
                body={"metadata": {"finalizers": None}},
                content_type="application/merge-patch+json",
                allow=(404,),
            )

        async def gone() -> bool:
            listing = await self.api.get(path, labelSelector=BENCH_LABEL)
            return not set(workloads) & {item["metadata"]["name"] for item in listing["items"]}

        await wait_for(gone, timeout=60, what="the benchmark DaemonSets to be deleted")
        return time.monotonic() - started

    async def delete_pods(self, workloads: list[str]) -> None:
        """Delete the pods of these workloads, one request per workload at once, and wait
        until the pod watch has seen them all go."""
        await delete_in_parallel(
            self.api,
            f"/api/v1/namespaces/{NAMESPACE}/pods",
            [f"{BENCH_LABEL}={workload}" for workload in workloads],
            lambda: self.pods.live(workloads),
            self.report,
            "benchmark pods",
        )
        # Let the controllers and kwok finish reacting to the deletions before the next run.
        await asyncio.sleep(3)

    async def rollouts(self, size: int, runs: int) -> None:
        """B1 at `size` nodes, `runs` times; the controllers take turns going first."""
        await self.grow_to(size)
        for run in range(1, runs + 1):
            order = (KUBEHERD, NATIVE) if run % 2 else (NATIVE, KUBEHERD)
            for controller in order:
                label = f"{size}-r{run}"
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

    async def limit(self) -> None:
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
        seconds = loop.time() - started
        self.results.limit = {
            "pods": len(nodes),
            "concurrency": concurrency,
            "seconds": seconds,
            "rate": len(nodes) / seconds,
        }
        self.report(f"  {len(nodes)} pods in {seconds:.1f}s: {len(nodes) / seconds:.0f} pods/s")
        await self.delete_pods([workload])

    # B4: the operator's cost --------------------------------------------------------------

    async def cost(self) -> None:
        count = self.options.daemonsets
        expected = len(self.nodes.names)
        self.report(f"[B4] restarting kubeherd; {count} CustomDaemonSets on {expected} nodes")
        await self.restart_operator()
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
        # Status writes may trail the last pods by a second or two.
        await asyncio.sleep(10)
        clients = (self.kubeherd, NATIVE_DAEMONSET)
        before = dispatched_by_schema(await self.api.text("/metrics"))
        rollout_requests = asdict(requests_between(self.kubeherd, at_first, before))
        self.report(f"  kubeherd's requests for the rollout: {rollout_requests}")
        usage_before = self.operator.usage()
        idle = self.options.idle_seconds
        self.report(f"  idle for {idle:.0f}s, counting each client's requests")
        await asyncio.sleep(idle)
        after = dispatched_by_schema(await self.api.text("/metrics"))
        usage_after = self.operator.usage()
        idle_requests = {c.label: asdict(requests_between(c, before, after)) for c in clients}
        self.report(f"  requests while idle: {idle_requests}")
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
            "rollout_requests": rollout_requests,
            "restart": restart,
            "metrics": asdict(scrapes),
        }
        self.results.cost["cleanup_seconds"] = await self.remove(KUBEHERD, workloads)
        self.report(f"  cleanup: {self.results.cost['cleanup_seconds']:.1f}s")

    async def _restart_on_pods(self, count: int) -> dict[str, Any]:
        """Restart kubeherd on the cluster with every pod in place: how long until each
        CustomDaemonSet had its first pass, what those passes found to do, and the requests
        and memory the start took."""
        self.report("  restarting kubeherd with every pod in place")
        await asyncio.to_thread(self.operator.stop)
        before = dispatched_by_schema(await self.api.text("/metrics"))
        loop = asyncio.get_running_loop()
        spawned = loop.time()
        await asyncio.to_thread(self.operator.start)
        first_passes: list[str] = []
        while len(first_passes) < count:
            if loop.time() - spawned > RESTART_TIMEOUT:
                raise TimeoutError(
                    f"{len(first_passes)} of {count} CustomDaemonSets had a first pass "
                    f"{RESTART_TIMEOUT:.0f}s after kubeherd started"
                )
            await asyncio.sleep(0.2)
            first_passes = FIRST_PASS.findall(self.operator.output())
        caught_up = loop.time() - spawned
        # Writes that trail the first passes (a status) count too.
        await asyncio.sleep(10)
        after = dispatched_by_schema(await self.api.text("/metrics"))
        usage = self.operator.usage()
        requests = asdict(requests_between(self.kubeherd, before, after))
        nothing = sum(1 for todo in first_passes if todo == "nothing to do")
        self.report(
            f"  all first passes {caught_up:.1f}s after start ({nothing} of {count}: nothing to "
            f"do); requests {requests}; peak RSS {usage.peak_rss_mib:.0f} MiB"
        )
        return {
            "seconds_to_first_passes": caught_up,
            "nothing_to_do": nothing,
            "requests": requests,
            "peak_rss_mib": usage.peak_rss_mib,
            "cpu_seconds": usage.cpu_seconds,
        }

    # B6: what one tenant can cost -------------------------------------------------------

    async def tenant(self) -> None:
        """One namespace's user at their worst: many CustomDaemonSets with large templates that
        match no node, one of them updated many times at a high history limit, and pods with
        kubeherd's label key in a namespace without CustomDaemonSets. The operator's peak RSS
        while all that is made, and after a restart with all of it in place."""
        options = self.options
        churn = "tenant-churn"
        self.report(
            f"[B6] {options.foreign_pods} foreign labelled pods, {options.tenant_daemonsets} "
            f"CustomDaemonSets of {options.tenant_kib} KiB, {options.tenant_updates} updates "
            f"of one at revisionHistoryLimit {options.tenant_history}"
        )
        for namespace in (TENANT_NAMESPACE, FOREIGN_NAMESPACE):
            await self.api.create(
                "/api/v1/namespaces", {"metadata": {"name": namespace}}, allow=(409,)
            )
        await self.restart_operator()
        at_start = self.operator.usage()
        self.report(f"  started: peak RSS {at_start.peak_rss_mib:.0f} MiB")
        loop = asyncio.get_running_loop()
        started = loop.time()
        pods_path = f"/api/v1/namespaces/{FOREIGN_NAMESPACE}/pods"
        await bounded(
            32,
            (
                self.api.create(pods_path, foreign_pod(index), allow=(409,))
                for index in range(options.foreign_pods)
            ),
        )
        foreign = self.operator.usage()
        self.report(
            f"  {options.foreign_pods} foreign pods in {loop.time() - started:.0f}s; "
            f"peak RSS {foreign.peak_rss_mib:.0f} MiB"
        )
        path = f"/apis/kubeherd.io/v1alpha1/namespaces/{TENANT_NAMESPACE}/customdaemonsets"
        names = [f"tenant-{index:03d}" for index in range(options.tenant_daemonsets)]
        await bounded(
            4,
            (
                self.api.create(path, tenant_daemonset(name, options.tenant_kib), allow=(409,))
                for name in names
            ),
        )
        await wait_for(
            lambda: self._observed(path, names),
            timeout=RESTART_TIMEOUT,
            what="a status for every tenant CustomDaemonSet",
            interval=5,
        )
        created = self.operator.usage()
        self.report(
            f"  {len(names)} CustomDaemonSets observed; peak RSS {created.peak_rss_mib:.0f} MiB"
        )
        await self.api.create(
            path,
            tenant_daemonset(churn, options.tenant_kib, 0, options.tenant_history),
            allow=(409,),
        )
        for variant in range(1, options.tenant_updates + 1):
            template = tenant_daemonset(churn, options.tenant_kib, variant)["spec"]["template"]
            answer = await self.api.patch(f"{path}/{churn}", {"spec": {"template": template}})
            generation = int(answer["metadata"]["generation"])
            await wait_for(
                lambda g=generation: self._observed(path, [churn], g),
                timeout=60,
                what=f"{churn} at generation {generation}",
                interval=0.2,
            )
            if variant % 25 == 0:
                self.report(
                    f"    {variant} updates; peak RSS {self.operator.usage().peak_rss_mib:.0f} MiB"
                )
        revisions = await self.api.get(
            f"/apis/apps/v1/namespaces/{TENANT_NAMESPACE}/controllerrevisions",
            labelSelector=f"{BENCH_LABEL}={churn}",
        )
        updated = self.operator.usage()
        self.report(
            f"  {options.tenant_updates} updates, {len(revisions['items'])} revisions kept; "
            f"peak RSS {updated.peak_rss_mib:.0f} MiB"
        )
        restart = await self._restart_on_pods(len(names) + 1)
        self.results.tenant = {
            "foreign_pods": options.foreign_pods,
            "daemonsets": len(names) + 1,
            "template_kib": options.tenant_kib,
            "updates": options.tenant_updates,
            "history_limit": options.tenant_history,
            "revisions_kept": len(revisions["items"]),
            "peak_rss_after_start_mib": at_start.peak_rss_mib,
            "peak_rss_foreign_mib": foreign.peak_rss_mib,
            "peak_rss_daemonsets_mib": created.peak_rss_mib,
            "peak_rss_updates_mib": updated.peak_rss_mib,
            "restart": restart,
        }
        await self._remove_tenant(path)

    async def _observed(self, path: str, names: list[str], generation: int = 1) -> bool:
        """Whether each of these CustomDaemonSets has a status for `generation` or later."""
        if len(names) == 1:
            items = [await self.api.get(f"{path}/{names[0]}")]
        else:
            items = (await self.api.list_all(path))[0]
        found = {
            item["metadata"]["name"]: int((item.get("status") or {}).get("observedGeneration") or 0)
            for item in items
        }
        return all(found.get(name, 0) >= generation for name in names)

    async def _remove_tenant(self, path: str) -> None:
        await self.api.delete(path)
        await delete_collection(
            self.api,
            f"/api/v1/namespaces/{FOREIGN_NAMESPACE}/pods",
            f"{BENCH_LABEL}=foreign",
            timeout=CLEANUP_TIMEOUT,
        )


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


def _is_ready(node: Json) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _taint_keys(node: Json) -> set[str]:
    return {taint["key"] for taint in (node.get("spec") or {}).get("taints") or []}
