"""Which labelled pods the pod watch keeps: those a CustomDaemonSet controls, and orphans whose
label names a CustomDaemonSet kubeherd knows, found even when they were listed before it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from kubeherd.daemonset.core.pods import OWNER_LABEL
from kubeherd.daemonset.shell.watches import Watches


def pod(
    name: str, namespace: str, owner: str, node: str = "n1", controller: str | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "labels": {OWNER_LABEL: owner},
    }
    if controller is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "kubeherd.io/v1alpha1",
                "kind": controller,
                "name": owner,
                "uid": "uid-cds",
                "controller": True,
            }
        ]
    return {"metadata": metadata, "spec": {"nodeName": node}, "status": {"phase": "Running"}}


class Cluster:
    """Pods listed by path and label (`kubeherd.io/customdaemonset` or `...=name`); watches
    that stay open with nothing to say."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods
        self.listed: list[tuple[str, str]] = []

    def _list(self, path: str, query: list[tuple[str, str]]) -> list[dict[str, Any]]:
        selector = dict(query).get("labelSelector", "")
        self.listed.append((path, selector))
        return [body for body in self.pods if _listed(body, path, selector)]

    async def get_json(self, path: str, query: list[tuple[str, str]]) -> Mapping[str, Any]:
        return {"metadata": {"resourceVersion": "1"}, "items": self._list(path, query)}

    async def stream_lines(self, path: str, query: list[tuple[str, str]]) -> AsyncIterator[bytes]:
        """A streaming listing's objects and the bookmark that ends them; then nothing."""
        if dict(query).get("sendInitialEvents"):
            for body in self._list(path, query):
                yield json.dumps({"type": "ADDED", "object": body}).encode()
            end = {"resourceVersion": "1", "annotations": {"k8s.io/initial-events-end": "true"}}
            yield json.dumps({"type": "BOOKMARK", "object": {"metadata": end}}).encode()
        await asyncio.Event().wait()


def _listed(body: Mapping[str, Any], path: str, selector: str) -> bool:
    metadata = body["metadata"]
    if not path.startswith("/api/v1/") or not path.endswith("/pods"):
        return False
    if path.startswith("/api/v1/namespaces/") and path.split("/")[4] != metadata["namespace"]:
        return False
    key, _, value = selector.partition("=")
    labels = metadata["labels"]
    return key in labels and (not value or labels[key] == value)


def stored(watches: Watches) -> set[str]:
    return {name for reflector in watches._pod_reflectors for _, name in reflector.store}


async def started(cluster: Cluster) -> Watches:
    watches = Watches(cluster)
    watches.start()
    await asyncio.wait_for(watches.listed(), 5)
    return watches


def test_foreign_labelled_pods_are_not_kept_and_controlled_ones_are() -> None:
    cluster = Cluster(
        [pod(f"foreign-{index}", "tenant", "x") for index in range(50)]
        + [pod("agent-1", "ops", "agent", controller="CustomDaemonSet")]
        + [pod("other-1", "ops", "agent", controller="ReplicaSet")]
    )

    async def scenario() -> set[str]:
        watches = await started(cluster)
        kept = stored(watches)
        await watches.stop()
        return kept

    assert asyncio.run(scenario()) == {"agent-1"}


def test_an_orphan_listed_before_its_daemonset_is_known_is_there_for_its_first_pass() -> None:
    cluster = Cluster(
        [
            pod("orphan-1", "ops", "agent", node="n2"),
            pod("agent-1", "ops", "agent", controller="CustomDaemonSet"),
            pod("foreign-1", "tenant", "x"),
        ]
    )

    async def scenario() -> tuple[set[str], set[str], set[str]]:
        watches = await started(cluster)
        before = stored(watches)
        await watches.admit(("ops", "agent"))
        await watches.admit(("elsewhere", "agent"))
        nodes = watches.pods.nodes_with_pods(("ops", "agent"))
        after = stored(watches)
        await watches.stop()
        return before, after, nodes

    before, after, nodes = asyncio.run(scenario())

    assert before == {"agent-1"}
    assert after == {"agent-1", "orphan-1"}
    assert nodes == {"n1", "n2"}
    # Only the namespace where a pod was left out is listed again, for that label value.
    assert ("/api/v1/namespaces/ops/pods", f"{OWNER_LABEL}=agent") in cluster.listed
    assert not [path for path, _ in cluster.listed if "elsewhere" in path]


def test_a_deleted_daemonsets_orphans_leave_and_come_back_with_a_new_one() -> None:
    cluster = Cluster(
        [
            pod("orphan-1", "ops", "agent"),
            pod("agent-1", "ops", "agent", controller="CustomDaemonSet"),
        ]
    )

    async def scenario() -> list[set[str]]:
        watches = await started(cluster)
        seen = []
        await watches.admit(("ops", "agent"))
        seen.append(stored(watches))
        watches.forget(("ops", "agent"))
        seen.append(stored(watches))
        await watches.admit(("ops", "agent"))
        seen.append(stored(watches))
        await watches.stop()
        return seen

    assert asyncio.run(scenario()) == [
        {"agent-1", "orphan-1"},
        {"agent-1"},
        {"agent-1", "orphan-1"},
    ]
