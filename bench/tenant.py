"""B6, one tenant's worst, and the restart with everything in place that B4 and B6 end with."""

from __future__ import annotations

import asyncio
import datetime
import re
from dataclasses import asdict
from typing import Any

from bench.api import wait_for
from bench.cleanup import CLEANUP_TIMEOUT, delete_collection
from bench.clients import dispatched_by_schema, requests_between
from bench.harness import RELEASE, RELEASE_NAMESPACE, Harness, bounded
from bench.idle import describe, now_utc, writes_between
from bench.workload import (
    BENCH_LABEL,
    FOREIGN_NAMESPACE,
    TENANT_NAMESPACE,
    foreign_pod,
    tenant_daemonset,
)

# B4's restart: what the operator logs once per CustomDaemonSet after it starts
# (kubeherd.daemonset.controller), and how long to wait for all of them.
FIRST_PASS = re.compile(r"first pass ([0-9.]+)s after start: ([^\n]+)")
RESTART_TIMEOUT = 300.0


class TenantBench(Harness):
    """B6, and the restart measure B4 shares with it."""

    async def _writes_between(
        self, since: datetime.datetime, until: datetime.datetime
    ) -> list[dict[str, Any]]:
        user = f"system:serviceaccount:{RELEASE_NAMESPACE}:{RELEASE}"
        log = self.cluster.audit_log
        return await asyncio.to_thread(writes_between, log, user, since, until)

    async def _operator_ready(self) -> bool:
        status, _ = await asyncio.to_thread(self.operator.readyz)
        return status == 200

    async def _restart_on_pods(self, count: int) -> dict[str, Any]:
        """Restart kubeherd on the cluster with every pod in place: how long until each
        CustomDaemonSet had its first pass, what those passes found to do, and the requests
        and memory the start took."""
        self.report("  restarting kubeherd with every pod in place")
        await asyncio.to_thread(self.operator.stop)
        before = dispatched_by_schema(await self.api.text("/metrics"))
        restart_from = now_utc()
        loop = asyncio.get_running_loop()
        spawned = loop.time()
        await asyncio.to_thread(self.operator.start)
        first_passes: list[tuple[str, str]] = []
        # When /readyz first answered: its watches had listed the nodes and the pods, so what
        # came after was the passes' own time.
        ready_after: float | None = None
        while len(first_passes) < count:
            if loop.time() - spawned > RESTART_TIMEOUT:
                raise TimeoutError(
                    f"{len(first_passes)} of {count} CustomDaemonSets had a first pass "
                    f"{RESTART_TIMEOUT:.0f}s after kubeherd started"
                )
            await asyncio.sleep(0.2)
            if ready_after is None and await self._operator_ready():
                ready_after = loop.time() - spawned
            first_passes = FIRST_PASS.findall(self.operator.output())
        caught_up = loop.time() - spawned
        # Writes that trail the first passes (a status) count too.
        await asyncio.sleep(10)
        after = dispatched_by_schema(await self.api.text("/metrics"))
        writes = await self._writes_between(restart_from, now_utc())
        usage = self.operator.usage()
        requests = asdict(requests_between(self.kubeherd, before, after))
        nothing = sum(1 for _, todo in first_passes if todo == "nothing to do")
        logged = sorted(float(seconds) for seconds, _ in first_passes)
        self.report(
            f"  ready (watches listed) {ready_after or caught_up:.1f}s after start; first passes "
            f"logged {logged[0]:.1f}-{logged[-1]:.1f}s after the operator's start"
        )
        self.report(
            f"  all first passes {caught_up:.1f}s after start ({nothing} of {count}: nothing to "
            f"do); requests {requests}; peak RSS {usage.peak_rss_mib:.0f} MiB; writes by the "
            f"audit log: {describe(writes)}"
        )
        return {
            "seconds_to_first_passes": caught_up,
            "seconds_to_ready": ready_after if ready_after is not None else caught_up,
            "first_passes_logged_seconds": [logged[0], logged[-1]],
            "nothing_to_do": nothing,
            "requests": requests,
            "writes": writes,
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
