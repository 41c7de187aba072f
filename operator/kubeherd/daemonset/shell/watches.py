"""The watches of nodes and daemon pods that feed the CustomDaemonSet controller, and their
stores (the controller's NodeSource and PodSource).

Nodes and daemon pods are watched by kubeherd's own reflectors (kubeherd.kube.reflector), not by
Kopf: they persist nothing, so kubeherd never writes to a Node (no annotations, no finalizers),
and after an outage a new listing replaces what they hold, so what was deleted meanwhile leaves
the controller's view. No CustomDaemonSet is handed to the controller before both have their
first listing, so the controller never acts on a half-known cluster (and never deletes pods of
nodes it has not seen yet).

Anyone can label a pod with kubeherd's label key. The pod watch keeps only pods that a
CustomDaemonSet controls (its controller reference says so) and pods whose label names a
CustomDaemonSet kubeherd knows (orphans it may adopt); any other costs only its passage through
the watch stream. A CustomDaemonSet kubeherd first learns of (at start-up, the pod listing comes
first) has its labelled pods listed before the controller sees it, if its namespace had a pod
left out, so that its first pass sees every pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from kubeherd.daemonset.core.claims import selector_matches
from kubeherd.daemonset.core.eligibility import NodeInfo
from kubeherd.daemonset.core.model import FIRST_FREE_FLAG, PodInfo
from kubeherd.daemonset.core.pods import OWNER_LABEL
from kubeherd.daemonset.shell.state import Key
from kubeherd.daemonset.shell.watched_fields import WatchedNode, WatchedPod
from kubeherd.kube.reflector import Change, Reflector, Transport
from kubeherd.kube.store import Store
from kubeherd.names import API_VERSION, CUSTOMDAEMONSET
from kubeherd.readiness import Readiness

# A CustomDaemonSet's selector by its key, None while it is not known yet.
SelectorOf = Callable[[Key], Mapping[str, Any] | None]


def controlled_by_a_daemonset(metadata: Mapping[str, Any]) -> bool:
    """Whether a CustomDaemonSet is the object's controller. One that does not exist (a forged
    reference) is noticed by the garbage collector, which deletes the object."""
    return any(
        reference.get("controller")
        and reference.get("kind") == CUSTOMDAEMONSET
        and reference.get("apiVersion") == API_VERSION
        for reference in metadata.get("ownerReferences") or ()
    )


# DaemonPod's bits of PodInfo.flags, above PodInfo's own. Whether a pod is in its selector
# takes two: it may not be known yet.
CONTROLLED = FIRST_FREE_FLAG
SELECTOR_KNOWN = FIRST_FREE_FLAG << 1
IN_SELECTOR = FIRST_FREE_FLAG << 2


def daemon_flags(in_selector: bool | None, controlled: bool) -> int:
    """DaemonPod's bits of these values."""
    selector_bits = (
        0 if in_selector is None else SELECTOR_KNOWN | (IN_SELECTOR if in_selector else 0)
    )
    return selector_bits | (CONTROLLED if controlled else 0)


@dataclass(frozen=True, slots=True, repr=False)
class DaemonPod(PodInfo):
    """A daemon pod as the pod watch keeps it: what the controller needs of it (it is the
    PodInfo the controller reads, not a wrapper around one: one object per pod), and its
    CustomDaemonSet's name. Its other fields are bits of PodInfo's flags (`in_selector`,
    `controlled`)."""

    SHOWN_FIELDS: ClassVar[tuple[str, ...]] = (
        *PodInfo.SHOWN_FIELDS,
        "owner",
        "in_selector",
        "controlled",
    )

    owner: str = ""

    @staticmethod
    def packed(
        *,
        owner: str = "",
        in_selector: bool | None = None,
        controlled: bool = False,
        **fields: Any,
    ) -> dict[str, Any]:
        """The record's stored fields of its fields as read (PodInfo's, and these)."""
        return _with_daemon_fields(PodInfo.packed(**fields), owner, in_selector, controlled)

    @classmethod
    def watched(cls, body: Mapping[str, Any], selector_of: SelectorOf) -> DaemonPod:
        metadata = body.get("metadata") or {}
        labels = metadata.get("labels") or {}
        owner = sys.intern(str(labels.get(OWNER_LABEL, "")))
        selector = selector_of((str(metadata.get("namespace") or ""), owner))
        return cls(
            **_with_daemon_fields(
                PodInfo.fields_of(body),
                owner,
                selector_matches(selector, labels) if selector is not None else None,
                controlled_by_a_daemonset(metadata),
            )
        )

    # Whether its labels match its CustomDaemonSet's selector (None: not known yet). Only this
    # matters of its labels: a pod that leaves the selector is released, an orphan that
    # matches is adopted. Other label changes need nothing, and they happen to every pod: the
    # API server copies its node's topology labels onto it when it is bound.
    @property
    def in_selector(self) -> bool | None:
        if not self.flags & SELECTOR_KNOWN:
            return None
        return bool(self.flags & IN_SELECTOR)

    # Whether a CustomDaemonSet is its controller: such a pod is kept whatever its label says.
    @property
    def controlled(self) -> bool:
        return bool(self.flags & CONTROLLED)

    def claims_may_change(self, old: DaemonPod | None) -> bool:
        """Whether this change may call for adopting or releasing the pod."""
        if self.orphan and (old is None or not old.orphan or old.in_selector != self.in_selector):
            return True
        return self.in_selector is False and (old is None or old.in_selector is not False)


def _with_daemon_fields(
    fields: dict[str, Any], owner: str, in_selector: bool | None, controlled: bool
) -> dict[str, Any]:
    """PodInfo's stored fields (a dictionary of their own) with DaemonPod's added."""
    fields["flags"] |= daemon_flags(in_selector, controlled)
    fields["owner"] = owner
    return fields


class WatchListener(Protocol):
    """What the watches tell the controller (DaemonSetController), and ask it."""

    def node_changed(self, name: str) -> None: ...
    def pod_changed(self, key: Key, node: str | None, name: str | None = None) -> None: ...
    def pod_relabelled(self, key: Key) -> None: ...
    def selector_of(self, key: Key) -> Mapping[str, Any] | None: ...


class WatchedNodes:
    """The controller's view of the nodes (a NodeSource), read from the node watch's store."""

    def __init__(self) -> None:
        self.store: Store[NodeInfo] = Store()

    def get(self, name: str) -> NodeInfo | None:
        return self.store.get(("", name))

    def names(self) -> Iterable[str]:
        return list(self.store.names())


class WatchedPods:
    """Daemon pods by CustomDaemonSet and node (a PodSource), kept up to date from the pod
    watch's changes.

    A node's pods are a tuple, almost always of one pod: the ledger's record for the node
    keeps the same tuple, so a daemon pod costs one dictionary entry here and nothing more
    there (a dictionary per node, as before, was a third of a watched pod's memory)."""

    def __init__(self) -> None:
        self._by_owner: dict[Key, dict[str, tuple[PodInfo, ...]]] = {}

    def on_node(self, key: Key, node: str) -> tuple[PodInfo, ...]:
        return self._by_owner.get(key, {}).get(node, ())

    def nodes_with_pods(self, key: Key) -> set[str]:
        return set(self._by_owner.get(key, ()))

    def apply(self, change: Change[DaemonPod]) -> None:
        namespace, name = change.key
        if change.old is not None and change.old.node:
            self._forget((namespace, change.old.owner), change.old.node, name)
        if change.new is not None and change.new.node:
            on_nodes = self._by_owner.setdefault((namespace, change.new.owner), {})
            node = change.new.node
            on_nodes[node] = (*on_nodes.get(node, ()), change.new)

    def _forget(self, owner: Key, node: str, name: str) -> None:
        on_nodes = self._by_owner.get(owner)
        if on_nodes is None or node not in on_nodes:
            return
        left = tuple(pod for pod in on_nodes[node] if pod.name != name)
        if left:
            on_nodes[node] = left
            return
        del on_nodes[node]
        if not on_nodes:
            del self._by_owner[owner]


class Watches:
    """The node and daemon pod reflectors, wired to the controller."""

    def __init__(
        self,
        transport: Transport,
        namespaces: Iterable[str] = (),
        readiness: Readiness | None = None,
    ) -> None:
        """Daemon pods are watched in `namespaces` only, or in all of them if none is given.
        Each watch reports to `readiness` whether it has listed and whether it fails."""
        readiness = readiness if readiness is not None else Readiness()
        self.nodes = WatchedNodes()
        self.pods = WatchedPods()
        self.controller: WatchListener | None = None
        # The CustomDaemonSets whose labelled pods are kept, orphans included.
        self._known: set[Key] = set()
        # Namespaces where a labelled pod was left out: a CustomDaemonSet kubeherd learns of
        # there may have orphans to find. (One entry per namespace, whatever the pods.)
        self._left_out_in: set[str] = set()
        self._namespaces = tuple(namespaces)
        self._node_reflector: Reflector[NodeInfo] = Reflector(
            transport,
            "/api/v1/nodes",
            NodeInfo.from_body,
            self._node_changed,
            what="nodes",
            health=readiness.watch("nodes"),
            fields=WatchedNode,
        )
        self._pod_reflectors: list[Reflector[DaemonPod]] = [
            Reflector(
                transport,
                path,
                lambda body: DaemonPod.watched(body, self._selector_of),
                self._pod_changed,
                label_selector=OWNER_LABEL,
                what="daemon pods",
                keep=self._keeps_pod,
                health=readiness.watch("pods", namespace),
                fields=WatchedPod,
            )
            for namespace, path in (
                [(namespace, f"/api/v1/namespaces/{namespace}/pods") for namespace in namespaces]
                or [("", "/api/v1/pods")]
            )
        ]
        self.nodes.store = self._node_reflector.store
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._node_reflector.run())]
        self._tasks += [loop.create_task(reflector.run()) for reflector in self._pod_reflectors]

    async def listed(self) -> None:
        """Return once every watch has its first listing."""
        await self._node_reflector.listed.wait()
        for reflector in self._pod_reflectors:
            await reflector.listed.wait()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def admit(self, key: Key) -> None:
        """Keep the labelled pods of this CustomDaemonSet from now on, and find the ones left
        out before it was known. Return once they are in the pod store."""
        if key in self._known:
            return
        self._known.add(key)
        namespace, name = key
        reflector = self._pod_reflector_of(namespace)
        if reflector is None or namespace not in self._left_out_in:
            return
        try:
            await reflector.fill(f"/api/v1/namespaces/{namespace}/pods", f"{OWNER_LABEL}={name}")
        except BaseException:
            # Not admitted: the next try lists again.
            self._known.discard(key)
            raise
        if key not in self._known:
            # Deleted while its pods were listed.
            self._evict_orphans(reflector, key)

    async def ready(self, key: Key) -> None:
        """Return once every watch has its first listing and this CustomDaemonSet's pods are
        in the pod store: what its first pass needs."""
        await self.listed()
        await self.admit(key)

    def forget(self, key: Key) -> None:
        """The CustomDaemonSet is gone: its labelled pods that it does not control leave the
        store (the ones it controls stay until the garbage collector is done with them)."""
        if key not in self._known:
            return
        self._known.discard(key)
        reflector = self._pod_reflector_of(key[0])
        if reflector is not None:
            self._evict_orphans(reflector, key)

    def _evict_orphans(self, reflector: Reflector[DaemonPod], key: Key) -> None:
        namespace, name = key
        stored = len(reflector.store)
        reflector.evict(
            lambda pod_key, pod: (
                pod_key[0] == namespace and pod.owner == name and not pod.controlled
            )
        )
        if len(reflector.store) < stored:
            self._left_out_in.add(namespace)

    def _keeps_pod(self, body: Mapping[str, Any]) -> bool:
        metadata = body.get("metadata") or {}
        if controlled_by_a_daemonset(metadata):
            return True
        namespace = str(metadata.get("namespace") or "")
        owner = str((metadata.get("labels") or {}).get(OWNER_LABEL, ""))
        if (namespace, owner) in self._known:
            return True
        self._left_out_in.add(namespace)
        return False

    def _pod_reflector_of(self, namespace: str) -> Reflector[DaemonPod] | None:
        """The pod watch of the namespace; None if pods there are not watched."""
        if not self._namespaces:
            return self._pod_reflectors[0]
        if namespace not in self._namespaces:
            return None
        return self._pod_reflectors[self._namespaces.index(namespace)]

    def _node_changed(self, change: Change[NodeInfo]) -> None:
        # Kubelets update their node's status all the time; NodeInfo holds only what matters
        # (labels, taints...), and the reflector reports only changes of it.
        if self.controller is not None:
            self.controller.node_changed(change.key[1])

    def _pod_changed(self, change: Change[DaemonPod]) -> None:
        self.pods.apply(change)
        if self.controller is None:
            return
        namespace, name = change.key
        places = {(pod.owner, pod.node) for pod in (change.old, change.new) if pod}
        for owner, node in places:
            self.controller.pod_changed((namespace, owner), node, name)
        new = change.new
        if new is not None and new.claims_may_change(change.old):
            self.controller.pod_relabelled((namespace, new.owner))

    def _selector_of(self, key: Key) -> Mapping[str, Any] | None:
        return self.controller.selector_of(key) if self.controller is not None else None
