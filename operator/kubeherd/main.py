"""The operator's entry module: activities and the handlers of every kind, in one registry."""

from __future__ import annotations

from typing import Any

import kopf

# Imported for their decorators, which register the handlers of each kind.
import kubeherd.daemonset.handlers
import kubeherd.scheduler.handlers  # noqa: F401
from kubeherd.daemonset.controller import DaemonSetController
from kubeherd.daemonset.handlers import IndexedNodes, IndexedPods
from kubeherd.kube.client import Kube
from kubeherd.scheduler.controller import SchedulerProfileController
from kubeherd.scheduler.handlers import IndexedClaims
from kubeherd.settings import OperatorOptions, configure


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    configure(settings)
    options: OperatorOptions = memo.get("options") or OperatorOptions()
    kube = await Kube.connect(options.limits)
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


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    for name in ("daemonsets", "schedulers"):
        controller: DaemonSetController | SchedulerProfileController | None = memo.get(name)
        if controller is not None:
            await controller.stop()
    kube: Kube | None = memo.get("kube")
    if kube is not None:
        await kube.close()
