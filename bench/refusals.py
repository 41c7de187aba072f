"""`python -m bench.refusals` (`make bench-refusals`): what a refused first batch of pod creates
costs kubeherd's CustomDaemonSet controller, on a local control plane with kwok nodes.

kubeherd runs as in `make bench` (its own process, the chart's ServiceAccount and RBAC, its
default settings unless --operator-arg says otherwise). For each case, in a namespace of its own,
something refuses the daemon pods, and one CustomDaemonSet over every node is created:

- `quota`: a ResourceQuota of 0 pods;
- `quota-5`: a ResourceQuota of 5 pods (its template's dry run is admitted);
- `webhook`: a validating admission webhook this process serves on 127.0.0.1 over HTTPS, which
  refuses every pod create in that namespace, dry runs included, and counts what it is asked;
- `policy` (only when named): a ValidatingAdmissionPolicy that refuses every pod.

The pod creates the API server refused are read from its own metrics (apiserver_request_total):
in the first pass (read 0.2 s after the first refusal is seen) and in the whole --window from
the CustomDaemonSet's creation. The results go to bench/results/<UTC time>-refusals.json, and a
markdown table is printed; `--render FILE` prints an earlier run's table again. The operator and
the local cluster are stopped at the end, on a failure, at Ctrl-C and at SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.__main__ import machine
from bench.api import Api, Json, wait_for
from bench.harness import Harness, Options, name_results
from bench.provenance import REPO
from bench.refusals_report import PodPosts, markdown, pod_posts
from bench.refusing import (
    RefusingWebhook,
    ReviewCounts,
    pod_quota,
    policy_binding,
    refusing_policy,
    webhook_configuration,
)
from bench.report import report
from bench.stopping import Stopper, StopSignalError
from bench.workload import BENCH_LABEL, IMAGE, custom_daemonset
from kubeherd.daemonset.core.rollout import MAX_FIRST_WINDOW
from kubeherd.defaults import MAX_CREATE_BACKOFF
from kubeherd.kube.limits import WriteLimits
from localcluster.binaries import ensure_binaries
from localcluster.cluster import LocalCluster


@dataclass(frozen=True)
class Case:
    name: str
    description: str
    # A quota's pods; None: no quota.
    quota: int | None = None


CASES = {
    case.name: case
    for case in (
        Case("quota", "ResourceQuota of 0 pods", quota=0),
        Case("quota-5", "ResourceQuota of 5 pods", quota=5),
        Case("webhook", "validating admission webhook"),
        Case("policy", "ValidatingAdmissionPolicy"),
    )
}
DEFAULT_CASES = ("quota", "quota-5", "webhook")
WORKLOAD = "refused"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
# The first pass's creates are answered together, and its retry is a second away at the least.
FIRST_PASS_ANSWERED = 0.2
METRICS_POLL = 0.1
# How long no node may change before a case starts: kwok and kube-controller-manager are done
# with the new nodes, and every pass the case sees is the controller's own.
NODES_QUIET = 5.0


def create_backoff_ceiling(operator_arguments: tuple[str, ...]) -> float:
    """The operator's --max-create-backoff: the last one given, else its default."""
    ceiling = MAX_CREATE_BACKOFF
    for argument in operator_arguments:
        flag, _, value = argument.partition("=")
        if flag == "--max-create-backoff" and value:
            ceiling = float(value)
    return ceiling


def probe_pod() -> Json:
    return {
        "metadata": {"name": "refusal-probe"},
        "spec": {"containers": [{"name": "probe", "image": IMAGE}]},
    }


class Refusals:
    def __init__(self, harness: Harness, arguments: argparse.Namespace) -> None:
        self.harness = harness
        self.arguments = arguments
        self.cases: list[dict[str, Any]] = []
        self.completed = False

    @property
    def api(self) -> Api:
        return self.harness.api

    async def measure_and_tear_down(self) -> None:
        try:
            await self.measure()
        finally:
            self.save()
            await self.harness.tear_down()

    async def measure(self) -> None:
        await self.harness.set_up()
        await self.harness.grow_to(self.arguments.nodes)
        for name in self.arguments.cases:
            await self._nodes_quiet()
            report(f"[refusals] {CASES[name].description}, {self.arguments.window:g} s")
            self.cases.append(await self.measure_case(CASES[name]))
            self.save()
        self.completed = True

    async def measure_case(self, case: Case) -> dict[str, Any]:
        namespace = f"refusals-{case.name}"
        await self._fresh_namespace(namespace)
        async with self._refusing(case, namespace) as webhook:
            measured = await self._roll_out_refused(namespace, webhook)
        await self.api.delete(f"/api/v1/namespaces/{namespace}")
        result = {"case": case.name, "description": case.description, **measured}
        report(
            f"  {result['pods']} pods created; refused creates: {result['refused_first_pass']} "
            f"in the first pass, {result['refused_in_window']} in the window; "
            f"{result['dry_runs_in_window']} dry runs; webhook: {result['webhook_reviews']}"
        )
        return result

    async def _roll_out_refused(
        self, namespace: str, webhook: RefusingWebhook | None
    ) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        window = self.arguments.window
        path = f"/apis/kubeherd.io/v1alpha1/namespaces/{namespace}/customdaemonsets"
        reviews = webhook.counts if webhook is not None else ReviewCounts()
        before = await self._pod_posts()
        started = loop.time()
        await self.api.create(path, custom_daemonset(WORKLOAD, namespace))
        try:
            first_seen = await self._first_refusal(before, started)
            first_pass = 0
            if first_seen is not None:
                await asyncio.sleep(FIRST_PASS_ANSWERED)
                first_pass = (await self._pod_posts() - before).refused
            await asyncio.sleep(max(0.0, window - (loop.time() - started)))
            in_window = await self._pod_posts() - before
            # Read with the metrics: the retries go on until the CustomDaemonSet is gone.
            reviewed = webhook.counts - reviews if webhook is not None else None
            pods = await self.api.get(
                f"/api/v1/namespaces/{namespace}/pods", labelSelector=f"{BENCH_LABEL}={WORKLOAD}"
            )
            status = (await self.api.get(f"{path}/{WORKLOAD}")).get("status") or {}
        finally:
            # Gone before what refuses its pods is.
            await self._remove(f"{path}/{WORKLOAD}")
        return {
            "namespace": namespace,
            "pods": len(pods.get("items") or []),
            "first_refusal_seconds": first_seen,
            "refused_first_pass": first_pass,
            "refused_in_window": in_window.refused,
            "dry_runs_in_window": in_window.dry_runs,
            "webhook_reviews": asdict(reviewed) if reviewed is not None else None,
            "replica_failure": next(
                (
                    condition.get("message")
                    for condition in status.get("conditions") or []
                    if condition.get("type") == "ReplicaFailure"
                ),
                None,
            ),
        }

    async def _first_refusal(self, before: PodPosts, started: float) -> float | None:
        """Seconds from `started` until the metrics count a refused create; None if none comes
        within the window."""
        loop = asyncio.get_running_loop()
        while loop.time() - started < self.arguments.window:
            if (await self._pod_posts() - before).refused:
                return loop.time() - started
            await asyncio.sleep(METRICS_POLL)
        return None

    async def _pod_posts(self) -> PodPosts:
        return pod_posts(await self.api.text("/metrics"))

    async def _remove(self, path: str) -> None:
        await self.api.delete(path)

        async def gone() -> bool:
            return not await self.harness.exists(path)

        await wait_for(gone, timeout=60, what=f"{path} to be deleted")

    async def _fresh_namespace(self, namespace: str) -> None:
        await self.api.create("/api/v1/namespaces", {"metadata": {"name": namespace}})

        async def has_service_account() -> bool:
            return await self.harness.exists(
                f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
            )

        await wait_for(has_service_account, timeout=60, what="the namespace's ServiceAccount")

    @contextlib.asynccontextmanager
    async def _refusing(self, case: Case, namespace: str) -> AsyncIterator[RefusingWebhook | None]:
        """What refuses the pods in `namespace`, in effect for the block; the webhook, if it
        is one. A quota goes with its namespace."""
        if case.quota is not None:
            await self._quota(namespace, case.quota)
            yield None
            return
        name = f"bench-{namespace}"
        if case.name == "policy":
            await self.api.create(f"{ADMISSION}/validatingadmissionpolicies", refusing_policy(name))
            binding = policy_binding(name, namespace)
            await self.api.create(f"{ADMISSION}/validatingadmissionpolicybindings", binding)
            try:
                await self._until_refused(namespace)
                yield None
            finally:
                await self._remove(f"{ADMISSION}/validatingadmissionpolicybindings/{name}")
                await self._remove(f"{ADMISSION}/validatingadmissionpolicies/{name}")
            return
        webhook = RefusingWebhook(self.harness.cluster.folder / "refusing-webhook")
        try:
            await webhook.start()
            configuration = webhook_configuration(name, namespace, webhook.url, webhook.ca_pem)
            await self.api.create(f"{ADMISSION}/validatingwebhookconfigurations", configuration)
            try:
                await self._until_refused(namespace)
                yield webhook
            finally:
                await self._remove(f"{ADMISSION}/validatingwebhookconfigurations/{name}")
        finally:
            await webhook.stop()

    async def _quota(self, namespace: str, pods: int) -> None:
        path = f"/api/v1/namespaces/{namespace}/resourcequotas"
        await self.api.create(path, pod_quota(pods))

        async def counted() -> bool:
            quota = await self.api.get(f"{path}/pods")
            return bool((quota.get("status") or {}).get("hard") == {"pods": str(pods)})

        await wait_for(counted, timeout=60, what="the quota to be counted")

    async def _until_refused(self, namespace: str) -> None:
        """Until the API server refuses a dry-run pod in `namespace`: the policy or webhook
        configuration has reached its admission chain."""

        async def refused() -> bool:
            answer = await self.api.request(
                "POST",
                f"/api/v1/namespaces/{namespace}/pods",
                body=probe_pod(),
                params={"dryRun": "All"},
                allow=(403,),
            )
            return bool(answer["code"] == 403)

        await wait_for(refused, timeout=60, what="a pod to be refused", interval=0.2)

    async def _nodes_quiet(self) -> None:
        versions: dict[str, str] = {}

        async def unchanged() -> bool:
            nodes, _ = await self.api.list_all("/api/v1/nodes")
            now = {node["metadata"]["name"]: node["metadata"]["resourceVersion"] for node in nodes}
            settled = now == versions
            versions.clear()
            versions.update(now)
            return settled

        await wait_for(unchanged, timeout=180, what="the nodes to settle", interval=NODES_QUIET)

    def save(self) -> None:
        self.arguments.json.write_text(json.dumps(self.document(), indent=1) + "\n")

    def document(self) -> dict[str, Any]:
        arguments = self.arguments
        operator = getattr(self.harness, "operator", None)
        limits = WriteLimits()
        return {
            "meta": {
                "started": arguments.started,
                "completed": self.completed,
                "kubeherd_commit": arguments.commit,
                "machine": machine(),
                "nodes": arguments.nodes,
                "window_seconds": arguments.window,
                "first_pass_read_after_seconds": FIRST_PASS_ANSWERED,
                "operator_arguments": list(operator.arguments if operator else ()),
                "max_create_backoff": create_backoff_ceiling(tuple(arguments.operator_arg)),
                "max_first_window": MAX_FIRST_WINDOW,
                "kubeherd_defaults": f"--qps={limits.qps:g} --burst={limits.burst} "
                f"--max-concurrent-writes={limits.max_concurrent} "
                f"--max-create-backoff={MAX_CREATE_BACKOFF:g}",
                "command": " ".join(sys.argv[1:]),
            },
            "cases": self.cases,
        }


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.refusals", description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000, help="kwok nodes (default 1000)")
    parser.add_argument("--window", type=float, default=60, help="seconds counted (default 60)")
    parser.add_argument(
        "--cases",
        default=",".join(DEFAULT_CASES),
        help=f"of {', '.join(CASES)} (default {','.join(DEFAULT_CASES)})",
    )
    parser.add_argument(
        "--operator-arg",
        action="append",
        default=[],
        help="an extra `kubeherd run` flag, e.g. --operator-arg=--max-create-backoff=4",
    )
    parser.add_argument("--dir", type=Path, default=REPO / ".cluster" / "bench-refusals")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    parser.add_argument("--render", type=Path, metavar="RESULTS_JSON", help="only print it")
    arguments = parser.parse_args(argv)
    arguments.cases = tuple(c.strip() for c in arguments.cases.split(",") if c.strip())
    if unknown := set(arguments.cases) - set(CASES):
        parser.error(f"unknown cases: {', '.join(sorted(unknown))}")
    return arguments


def main(argv: list[str] | None = None) -> int:
    arguments = parse(argv)
    if arguments.render is not None:
        print(markdown(json.loads(arguments.render.read_text())), end="")
        return 0
    name_results(arguments, "refusals")
    stopper = Stopper()
    stopper.install()
    binaries = ensure_binaries()
    cluster = LocalCluster(arguments.dir, binaries, nodes=arguments.nodes)
    options = Options(nodes=arguments.nodes, operator_arguments=tuple(arguments.operator_arg))
    refusals = Refusals(Harness(options, cluster, binaries, report), arguments)
    try:
        report(f"starting a fresh local cluster in {cluster.folder}")
        cluster.down(quiet=True)
        cluster.up()
        asyncio.run(stopper.run(refusals.measure_and_tear_down()))
    except (StopSignalError, KeyboardInterrupt):
        report("stopped: stopping kubeherd and the local cluster")
        return stopper.exit_status if stopper.received is not None else 130
    finally:
        stopper.cleaning_up()
        _stop_everything(refusals.harness, cluster)
    print("\n" + markdown(refusals.document()), end="")
    report(f"results in {arguments.json}")
    return 0


def _stop_everything(harness: Harness, cluster: LocalCluster) -> None:
    """The operator, whose start may have been under way in a thread when the loop was
    cancelled, then the cluster."""
    try:
        if (operator := getattr(harness, "operator", None)) is not None:
            operator.stop()
    finally:
        cluster.down()


if __name__ == "__main__":
    sys.exit(main())
