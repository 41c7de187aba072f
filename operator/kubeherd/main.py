"""The operator's entry module: activities and the handlers of every kind, in one registry."""

from __future__ import annotations

from typing import Any

import kopf

import kubeherd.daemonset.handlers  # noqa: F401  (registers the CustomDaemonSet handlers)
from kubeherd.daemonset.controller import DaemonSetController
from kubeherd.daemonset.handlers import IndexedNodes, IndexedPods
from kubeherd.kube.client import Kube
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


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    controller: DaemonSetController | None = memo.get("daemonsets")
    if controller is not None:
        await controller.stop()
    kube: Kube | None = memo.get("kube")
    if kube is not None:
        await kube.close()
