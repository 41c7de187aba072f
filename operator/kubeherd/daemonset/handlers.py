"""Kopf wiring for CustomDaemonSets: thin handlers that feed the controller.

Nodes and pods are observed with indices and raw events only. Those persist nothing, so kubeherd
never writes to a Node (no annotations, no finalizers). Kopf holds back every handler until all
indices have their initial listing, so the controller never acts on a half-known cluster (and
never deletes pods of nodes it has not seen yet).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import kopf

from kubeherd.daemonset.controller import DaemonSetController, Key
from kubeherd.daemonset.eligibility import NodeInfo
from kubeherd.daemonset.planning import PodInfo
from kubeherd.daemonset.pods import OWNER_LABEL

GROUP, VERSION, PLURAL = "kubeherd.io", "v1alpha1", "customdaemonsets"


class IndexedNodes:
    """The controller's view of the nodes, read from Kopf's index (kept current by Kopf)."""

    def __init__(self) -> None:
        self.index: kopf.Index[str, NodeInfo] | None = None

    def get(self, name: str) -> NodeInfo | None:
        store = self.index.get(name) if self.index is not None else None
        return next(iter(store), None) if store is not None else None

    def names(self) -> Iterable[str]:
        return list(self.index.keys()) if self.index is not None else []


class IndexedPods:
    """Daemon pods by (namespace, owner, node), and by (namespace, owner) for a full pass."""

    def __init__(self) -> None:
        self.index: kopf.Index[tuple[str, ...], PodInfo] | None = None

    def on_node(self, key: Key, node: str) -> list[PodInfo]:
        store = self.index.get((*key, node)) if self.index is not None else None
        return list(store) if store is not None else []

    def nodes_with_pods(self, key: Key) -> set[str]:
        store = self.index.get(key) if self.index is not None else None
        return {pod.node for pod in store or () if pod.node}


def controller_of(memo: kopf.Memo) -> DaemonSetController:
    controller: DaemonSetController = memo["daemonsets"]
    return controller


def bind(memo: kopf.Memo, kwargs: dict[str, Any]) -> DaemonSetController:
    """Point the controller's views at Kopf's indices (Kopf passes them to handlers by name),
    and return the controller."""
    memo["indexed_nodes"].index = kwargs["kubeherd_nodes"]
    memo["indexed_pods"].index = kwargs["kubeherd_pods"]
    return controller_of(memo)


# Async indexers run on the event loop: sync ones would each take a thread of Kopf's executor,
# thousands at once during the initial listing of a large cluster.
@kopf.index("", "v1", "nodes")
async def kubeherd_nodes(name: str, body: kopf.Body, **_: Any) -> dict[str, NodeInfo]:
    return {name: NodeInfo.from_body(body)}


@kopf.index("", "v1", "pods", labels={OWNER_LABEL: kopf.PRESENT})  # type: ignore[arg-type]
async def kubeherd_pods(
    namespace: str, labels: kopf.Labels, body: kopf.Body, **_: Any
) -> dict[tuple[str, ...], PodInfo]:
    pod = PodInfo.from_body(body)
    owner = (namespace, labels[OWNER_LABEL])
    keys: dict[tuple[str, ...], PodInfo] = {owner: pod}
    if pod.node:
        keys[(*owner, pod.node)] = pod
    return keys


@kopf.on.event("", "v1", "nodes")
async def node_event(
    name: str,
    type: str,
    memo: kopf.Memo,
    **kwargs: Any,
) -> None:
    controller = bind(memo, kwargs)
    seen: dict[str, NodeInfo] = memo["node_snapshots"]
    current = memo["indexed_nodes"].get(name) if type != "DELETED" else None
    # Kubelets (and kwok) update node status all the time: only labels and taints matter here.
    if current is not None and seen.get(name) == current:
        return
    if current is None:
        seen.pop(name, None)
    else:
        seen[name] = current
    controller.node_changed(name)


@kopf.on.event("", "v1", "pods", labels={OWNER_LABEL: kopf.PRESENT})
async def pod_event(
    namespace: str | None,
    labels: kopf.Labels,
    body: kopf.Body,
    memo: kopf.Memo,
    **kwargs: Any,
) -> None:
    controller = bind(memo, kwargs)
    owner = (namespace or "", labels[OWNER_LABEL])
    pod = PodInfo.from_body(body)
    controller.pod_changed(owner, pod.node, pod.name)


@kopf.on.event(GROUP, VERSION, PLURAL)
async def daemonset_event(
    namespace: str | None,
    name: str,
    type: str,
    body: kopf.Body,
    memo: kopf.Memo,
    **kwargs: Any,
) -> None:
    controller = bind(memo, kwargs)
    if type == "DELETED":
        controller.daemonset_deleted((namespace or "", name))
    else:
        # The raw dicts behind the body are replaced, never mutated, by Kopf on each event.
        controller.daemonset_changed(dict(body))
