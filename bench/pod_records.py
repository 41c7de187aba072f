"""What one watched daemon pod costs the operator, by where it is allocated (no cluster).

Builds the pod watch's records of N CustomDaemonSets on M nodes from each pod's watch events as
the API server sends them (created, then Running and Ready; decoded as the watch decodes them),
then each CustomDaemonSet's ledger through the controller's own planning, and reports Python's
allocations per pod (tracemalloc).
B4 measures the whole process; this says which structure the bytes are in.

    make bench-records RECORDS_ARGS="--nodes 5000 --daemonsets 3"
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import string
import tracemalloc
import uuid
from collections.abc import Mapping
from typing import Any

import msgspec

from kubeherd.daemonset.core.eligibility import NodeInfo
from kubeherd.daemonset.core.model import NodeRecord
from kubeherd.daemonset.core.nodes import plan_nodes
from kubeherd.daemonset.core.pods import OWNER_LABEL, REVISION_LABEL
from kubeherd.daemonset.shell.watched_fields import WatchedPod
from kubeherd.daemonset.shell.watches import DaemonPod, WatchedPods
from kubeherd.kube.reflector import Change, WatchEvent
from kubeherd.kube.store import Store
from kubeherd.names import API_VERSION, CUSTOMDAEMONSET

NAMESPACE = "bench"


def pod_text(owner: str, node: str, index: int, name: str, uid: str, running: bool) -> bytes:
    """A watch event of a daemon pod as the API server sends it, with the fields the watch
    reads: just created (Pending, not Ready) or bound, Running and Ready."""
    stamp = f"2026-11-26T10:{index // 60000 % 60:02d}:{index // 1000 % 60:02d}Z"
    status: dict[str, Any] = {"phase": "Pending"}
    if running:
        status = {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": stamp}],
            "containerStatuses": [{"name": "agent", "restartCount": 0, "state": {}}],
        }
    pod = {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": uid,
            "creationTimestamp": stamp,
            "labels": {OWNER_LABEL: owner, REVISION_LABEL: "6d4f8b7c9a"},
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": CUSTOMDAEMONSET,
                    "name": owner,
                    "uid": "owner-uid",
                    "controller": True,
                }
            ],
        },
        "spec": {"nodeName": node},
        "status": status,
    }
    return json.dumps({"type": "MODIFIED" if running else "ADDED", "object": pod}).encode()


def pod_events(owner: str, node: str, index: int) -> tuple[bytes, bytes]:
    """A pod's two events: created, then Running and Ready (each decoded on its own, as the
    watch decodes each line)."""
    suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=5))  # noqa: S311
    name, uid = f"{owner}-{suffix}", str(uuid.uuid4())
    return (
        pod_text(owner, node, index, name, uid, running=False),
        pod_text(owner, node, index, name, uid, running=True),
    )


def measure(nodes: int, daemonsets: int, top: int) -> None:
    node_names = [f"kwok-node-{index}" for index in range(nodes)]
    node_infos = {
        name: NodeInfo.from_body({"metadata": {"name": name, "labels": {}}, "spec": {}})
        for name in node_names
    }
    owners = [f"agent-{index}" for index in range(daemonsets)]
    events = [
        pod_events(owner, node, index * nodes + position)
        for index, owner in enumerate(owners)
        for position, node in enumerate(node_names)
    ]
    selector: dict[str, Any] = {"matchLabels": {}}
    store: Store[DaemonPod] = Store()
    pods = WatchedPods()
    ledgers: dict[str, dict[str, NodeRecord | None]] = {}
    decoder = msgspec.json.Decoder(WatchEvent[WatchedPod])
    gc.collect()
    tracemalloc.start()
    # Every pod created first, then every pod running, as in a rollout.
    for line in [created for created, _ in events] + [running for _, running in events]:
        body: Mapping[str, Any] = decoder.decode(line)["object"]
        record = DaemonPod.watched(body, lambda _key: selector)
        key = (NAMESPACE, body["metadata"]["name"])
        old = store.get(key)
        store[key] = record
        pods.apply(Change(key, old, record))
    gc.collect()
    watched = tracemalloc.take_snapshot()
    for owner in owners:
        plan = plan_nodes(
            {"containers": [{"name": "agent"}]},
            node_names,
            node_infos.get,
            lambda node, owner=owner: pods.on_node((NAMESPACE, owner), node),  # type: ignore[misc]
        )
        ledgers[owner] = plan.records
    gc.collect()
    with_ledgers = tracemalloc.take_snapshot()
    count = len(events)
    in_watch = sum(stat.size for stat in watched.statistics("filename")) / count
    in_all = sum(stat.size for stat in with_ledgers.statistics("filename")) / count
    print(f"{daemonsets} CustomDaemonSets on {nodes} nodes: {count} daemon pods")
    print(f"  the pod watch's store and index: {in_watch:.0f} B per pod")
    print(f"  and the ledgers: {in_all - in_watch:.0f} B per pod; in all {in_all:.0f} B per pod")
    print("  where (largest first):")
    for stat in with_ledgers.statistics("lineno")[:top]:
        frame = stat.traceback[0]
        print(f"    {stat.size / count:6.0f} B per pod  {frame.filename}:{frame.lineno}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--daemonsets", type=int, default=10)
    parser.add_argument("--top", type=int, default=8, help="allocation sites to show")
    options = parser.parse_args()
    measure(options.nodes, options.daemonsets, options.top)


if __name__ == "__main__":
    main()
