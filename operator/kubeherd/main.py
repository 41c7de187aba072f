"""The operator's entry module: activities and the handlers of every kind, in one registry."""

from __future__ import annotations

import logging
from typing import Any

import kopf

# Imported for their decorators, which register the handlers of each kind.
import kubeherd.daemonset.handlers
import kubeherd.scheduler.handlers  # noqa: F401
from kubeherd.daemonset.controller import DaemonSetController
from kubeherd.daemonset.handlers import IndexedNodes, IndexedPods
from kubeherd.kube.client import Kind, Kube
from kubeherd.peering import CLUSTER_PEERING, NAMESPACED_PEERING, PeeringWatch
from kubeherd.scheduler.controller import SchedulerProfileController
from kubeherd.scheduler.handlers import IndexedClaims
from kubeherd.settings import OperatorOptions, configure

logger = logging.getLogger(__name__)


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    options: OperatorOptions = memo.get("options") or OperatorOptions()
    configure(settings, options.peering)
    kube = await Kube.connect(options.limits)
    if options.peering is not None:
        memo["peering"] = await watch_peering(kube, options, settings.peering.clusterwide)
    nodes, pods = IndexedNodes(), IndexedPods()
    memo["kube"] = kube
    memo["indexed_nodes"] = nodes
    memo["indexed_pods"] = pods
    memo["node_snapshots"] = {}
    memo["daemonsets"] = DaemonSetController(
        kube, nodes, pods, max_create_backoff=options.max_create_backoff
    )
    claims = IndexedClaims()
    memo["scheduler_claims"] = claims
    memo["schedulers"] = SchedulerProfileController(
        kube, claims, status_interval=options.scheduler_status_interval
    )


async def watch_peering(kube: Kube, options: OperatorOptions, clusterwide: bool) -> PeeringWatch:
    assert options.peering is not None
    # Kopf keeps one ClusterKopfPeering when it serves all namespaces, else one KopfPeering in
    # each namespace it serves.
    locations: list[tuple[Kind, str | None]] = (
        [(CLUSTER_PEERING, None)]
        if clusterwide
        else [(NAMESPACED_PEERING, namespace) for namespace in options.namespaces]
    )

    def demoted(leader: str) -> None:
        logger.error(
            "Replica %s outranks this one, which was active: exiting, so that only one works"
            " (Kubernetes restarts this one as a standby).",
            leader,
        )
        options.demote()  # asyncio.Events: this runs in Kopf's loop, as it must

    watch = PeeringWatch(kube, options.peering, locations, demoted)
    await watch.ensure_objects()
    watch.start()
    return watch


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    await stop_operator(memo)


async def stop_operator(memo: kopf.Memo) -> None:
    """Stop kubeherd's own tasks and end Kopf's wait on the stop flag."""
    options: OperatorOptions | None = memo.get("options")
    if options is not None:
        options.stopping.set()
    watch: PeeringWatch | None = memo.get("peering")
    if watch is not None:
        await watch.stop()
    for name in ("daemonsets", "schedulers"):
        controller: DaemonSetController | SchedulerProfileController | None = memo.get(name)
        if controller is not None:
            await controller.stop()
    kube: Kube | None = memo.get("kube")
    if kube is not None:
        await kube.close()
