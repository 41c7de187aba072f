"""Watches that timestamp what the benchmarks wait for: when each pod appeared, when it was first
seen Running, when each node appeared. Times are the event loop's clock (monotonic seconds) at
the moment the watch event arrived, the same clock the benchmarks start their timers on."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection
from dataclasses import dataclass

from bench.api import Api, Json
from bench.workload import BENCH_LABEL
from kubeherd.daemonset.core.pods import target_node


@dataclass
class PodRecord:
    workload: str
    node: str | None
    created: float
    running: float | None = None
    deleted: float | None = None


class Tracker:
    """Runs one watch in a task, from a listing taken when it starts."""

    def __init__(self, api: Api, path: str, **params: str) -> None:
        self.api = api
        self.path = path
        self.params = params
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        items, version = await self.api.list_all(self.path, **self.params)
        now = asyncio.get_running_loop().time()
        for item in items:
            self.observe("ADDED", item, now)
        self._task = asyncio.create_task(self._follow(version))

    async def _follow(self, version: str) -> None:
        loop = asyncio.get_running_loop()
        async for kind, obj in self.api.watch(self.path, version, **self.params):
            self.observe(kind, obj, loop.time())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def failed(self) -> BaseException | None:
        if self._task is not None and self._task.done() and not self._task.cancelled():
            return self._task.exception()
        return None

    def observe(self, kind: str, obj: Json, now: float) -> None:
        raise NotImplementedError


class PodTracker(Tracker):
    """Every benchmark pod in a namespace, by name."""

    def __init__(self, api: Api, namespace: str) -> None:
        super().__init__(api, f"/api/v1/namespaces/{namespace}/pods", labelSelector=BENCH_LABEL)
        self.pods: dict[str, PodRecord] = {}

    def observe(self, kind: str, obj: Json, now: float) -> None:
        name = obj["metadata"]["name"]
        record = self.pods.get(name)
        if record is None or record.deleted is not None:
            if kind == "DELETED":
                return
            workload = obj["metadata"]["labels"][BENCH_LABEL]
            record = self.pods[name] = PodRecord(workload, target_node(obj), now)
        if kind == "DELETED":
            record.deleted = now
        elif record.running is None and (obj.get("status") or {}).get("phase") == "Running":
            record.running = now

    def of(self, workload: str) -> list[PodRecord]:
        return [record for record in self.pods.values() if record.workload == workload]

    def live(self, workloads: Collection[str]) -> int:
        """Pods of these workloads that exist now."""
        return sum(
            1
            for record in self.pods.values()
            if record.deleted is None and record.workload in workloads
        )

    def counts(self, workload: str) -> tuple[int, int]:
        """(created, running) pods of a workload so far."""
        records = self.of(workload)
        return len(records), sum(1 for record in records if record.running is not None)


class NodeTracker(Tracker):
    """When each node appeared, and how many exist now."""

    def __init__(self, api: Api) -> None:
        super().__init__(api, "/api/v1/nodes")
        self.added: dict[str, float] = {}
        self.names: set[str] = set()

    def observe(self, kind: str, obj: Json, now: float) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self.names.discard(name)
            return
        if name not in self.names:
            self.names.add(name)
            self.added.setdefault(name, now)
