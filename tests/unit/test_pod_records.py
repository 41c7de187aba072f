"""The pod watch's store of daemon pods by CustomDaemonSet and node, and what the ledger keeps
of it: the same records, not copies (a watched pod's memory is what the operator's limit
holds; docs/benchmarks.md)."""

from __future__ import annotations

from typing import Any

from kubeherd.daemonset.core.eligibility import NodeInfo
from kubeherd.daemonset.core.model import PodInfo, placement
from kubeherd.daemonset.core.nodes import plan_nodes
from kubeherd.daemonset.core.pods import OWNER_LABEL
from kubeherd.daemonset.shell.watches import DaemonPod, WatchedPods
from kubeherd.kube.reflector import Change

AGENT = ("ops", "agent")


def watched(name: str, node: str, owner: str = "agent", phase: str = "Running") -> DaemonPod:
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ops", "uid": f"uid-{name}"},
        "spec": {"nodeName": node},
        "status": {"phase": phase},
    }
    body["metadata"]["labels"] = {OWNER_LABEL: owner}
    return DaemonPod.watched(body, lambda _key: None)


def node(name: str) -> NodeInfo:
    return NodeInfo.from_body({"metadata": {"name": name, "labels": {}}, "spec": {}})


def names(pods: tuple[PodInfo, ...]) -> list[str]:
    return [pod.name for pod in pods]


def test_a_pod_is_found_on_its_node_until_it_moves_or_goes() -> None:
    pods = WatchedPods()
    first = watched("agent-a", "n1")
    pods.apply(Change(("ops", "agent-a"), None, first))
    pods.apply(Change(("ops", "agent-b"), None, watched("agent-b", "n1")))
    pods.apply(Change(("ops", "other-a"), None, watched("other-a", "n1", owner="other")))
    assert names(pods.on_node(AGENT, "n1")) == ["agent-a", "agent-b"]
    assert pods.nodes_with_pods(AGENT) == {"n1"}

    # A pod the watch shows again takes its old record's place among the node's pods.
    pods.apply(Change(("ops", "agent-a"), first, watched("agent-a", "n1", phase="Failed")))
    assert [(p.name, p.phase) for p in pods.on_node(AGENT, "n1")] == [
        ("agent-b", "Running"),
        ("agent-a", "Failed"),
    ]

    second = pods.on_node(AGENT, "n1")[0]
    assert isinstance(second, DaemonPod)
    pods.apply(Change(("ops", "agent-b"), second, None))
    assert names(pods.on_node(AGENT, "n1")) == ["agent-a"]
    gone = pods.on_node(AGENT, "n1")[0]
    assert isinstance(gone, DaemonPod)
    pods.apply(Change(("ops", "agent-a"), gone, None))
    assert pods.on_node(AGENT, "n1") == ()
    assert pods.nodes_with_pods(AGENT) == set()
    # The other CustomDaemonSet's pod on the same node is its own.
    assert names(pods.on_node(("ops", "other"), "n1")) == ["other-a"]


def test_an_unscheduled_pod_is_on_no_node() -> None:
    pods = WatchedPods()
    pods.apply(Change(("ops", "agent-a"), None, watched("agent-a", "")))
    assert pods.nodes_with_pods(AGENT) == set()


def test_the_ledger_keeps_the_watchs_records_and_shares_placements() -> None:
    pods = WatchedPods()
    for index in range(3):
        name = f"n{index}"
        pods.apply(Change(("ops", f"agent-{index}"), None, watched(f"agent-{index}", name)))
    nodes = {f"n{index}": node(f"n{index}") for index in range(3)}

    plan = plan_nodes(
        {"containers": [{"name": "agent", "image": "agent:1"}]},
        nodes,
        nodes.get,
        lambda name: pods.on_node(AGENT, name),
    )

    records = [plan.records[name] for name in nodes]
    assert all(record is not None for record in records)
    for name, record in zip(nodes, records, strict=True):
        assert record is not None
        assert record.pods is pods.on_node(AGENT, name)
    assert len({id(record.placement) for record in records if record is not None}) == 1
    assert placement(True, "", True, "", "") is placement(True, "", True, "", "")
