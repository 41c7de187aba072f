"""The local cluster as the benchmarks use it: the chart's CRDs and RBAC, kubeherd as a process,
fake nodes, the pod and node watches, one DaemonSet of either kind rolled out and removed."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.api import Api, Json, wait_for
from bench.cleanup import delete_in_parallel
from bench.clients import NATIVE_DAEMONSET, Client, flow_schemas, kubeherd_client
from bench.operator import OperatorProcess
from bench.provenance import REPO, commit
from bench.stats import Rollout, rollout
from bench.tracking import NodeTracker, PodTracker
from bench.workload import BENCH_LABEL, NAMESPACE, custom_daemonset, native_daemonset
from localcluster.binaries import Binaries
from localcluster.cluster import LocalCluster
from localcluster.nodes import default_node_manifests
from localcluster.operator import free_port


def name_results(arguments: argparse.Namespace, kind: str) -> None:
    """When a standalone benchmark started and from which commit (`arguments.started`,
    `arguments.commit`), and the results file it writes (`arguments.json`: under `--results`,
    named after that time and `kind`)."""
    now = datetime.datetime.now(datetime.UTC)
    arguments.started = now.strftime("%Y-%m-%d %H:%M UTC")
    arguments.commit = commit()
    arguments.results.mkdir(parents=True, exist_ok=True)
    arguments.json = arguments.results / f"{now.strftime('%Y%m%d-%H%M%S')}-{kind}.json"


RELEASE, RELEASE_NAMESPACE = "kubeherd", "kubeherd-system"
KUBEHERD, NATIVE = "kubeherd", "native"
# Holds a benchmark's DaemonSet while its pods are cleaned up: a controller stops at the deletion
# timestamp, and the pods go in one request instead of one garbage-collector call each.
HOLD_FINALIZER = "bench.kubeherd.io/hold"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
PROGRESS_EVERY = 5.0

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
    # How many pods kwok turns Running at once (0: kwok's default).
    kwok_pod_workers: int = 0


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


class Harness:
    """What every benchmark stands on; the benchmarks themselves are in `Bench`."""

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
        # One port for the whole benchmark, and the certificate kept in the Secret the chart's
        # RBAC lets the ServiceAccount write: restarted (B4), kubeherd finds its webhook
        # configuration as it left it, and writes nothing.
        webhook = (
            f"--webhook-listen=127.0.0.1:{free_port()}",
            f"--webhook-secret={RELEASE_NAMESPACE}/{RELEASE}-webhook-tls",
        )
        self.operator = OperatorProcess(
            kubeconfig,
            self.cluster.logs / "kubeherd.log",
            (*webhook, *self.options.operator_arguments),
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


def _is_ready(node: Json) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _taint_keys(node: Json) -> set[str]:
    return {taint["key"] for taint in (node.get("spec") or {}).get("taints") or []}
