"""Planning and status, with plain data: what the controller decides for given nodes and pods."""

from __future__ import annotations

from typing import Any

from kubeherd.daemonset.core.eligibility import ELIGIBLE, NodeInfo, Taint
from kubeherd.daemonset.core.model import NodeRecord, PodInfo
from kubeherd.daemonset.core.nodes import NodePlan, SurgeRule, plan_nodes, pods_to_keep
from kubeherd.daemonset.core.rollout import (
    MAX_FIRST_WINDOW,
    CreateWindow,
    nodes_kept_back,
    plan_rolling_update,
)
from kubeherd.daemonset.core.status import RolloutView, build_status, progressing
from kubeherd.daemonset.core.summary import node_selector_text, pods_holding_up, summarize
from kubeherd.meta import status_changed

SPEC: dict[str, Any] = {"containers": [{"name": "agent", "image": "agent:1"}]}
NOW = 1_000_000.0


def node(name: str, *taints: Taint, **labels: str) -> NodeInfo:
    return NodeInfo(name=name, labels={"kubernetes.io/hostname": name, **labels}, taints=taints)


def pod(
    name: str,
    node: str,
    *,
    phase: str = "Running",
    ready: bool = True,
    ready_since: float | None = NOW - 60,
    revision: str = "r1",
    created: str = "2026-01-01T00:00:00Z",
    deleting: bool = False,
    waiting_reason: str = "",
    restarts: int = 0,
    terminated_reason: str = "",
    override: str = "",
) -> PodInfo:
    return PodInfo.of(
        name=name,
        uid=f"uid-{name}",
        node=node,
        phase=phase,
        ready=ready,
        ready_since=ready_since if ready else None,
        revision=revision,
        created=created,
        deleting=deleting,
        waiting_reason=waiting_reason,
        restarts=restarts,
        terminated_reason=terminated_reason,
        override=override,
    )


def plan(
    nodes: dict[str, NodeInfo],
    pods: dict[str, list[PodInfo]],
    spec: dict[str, Any] = SPEC,
    names: list[str] | None = None,
    may_delete_failed: bool = True,
    surge: SurgeRule | None = None,
    pending: dict[str, str] | None = None,
) -> NodePlan:
    return plan_nodes(
        spec,
        names if names is not None else sorted(set(nodes) | set(pods)),
        nodes.get,
        lambda name: pods.get(name, []),
        may_delete_failed=lambda _name: may_delete_failed,
        surge=surge,
        pending=pending,
    )


def test_an_eligible_node_without_a_pod_gets_one() -> None:
    result = plan({"a": node("a")}, {})

    assert [c.node for c in result.creates] == ["a"]
    assert result.deletes == []


def test_an_eligible_node_with_its_pod_needs_nothing() -> None:
    result = plan({"a": node("a")}, {"a": [pod("p", "a")]})

    assert result.creates == []
    assert result.deletes == []


def test_only_the_given_nodes_are_planned() -> None:
    result = plan({"a": node("a"), "b": node("b")}, {}, names=["b"])

    assert [c.node for c in result.creates] == ["b"]
    assert set(result.records) == {"b"}


def test_a_pod_whose_node_is_gone_is_deleted_and_the_node_leaves_the_ledger() -> None:
    result = plan({}, {"gone": [pod("p", "gone")]})

    assert [(d.node, d.pod.name) for d in result.deletes] == [("gone", "p")]
    assert result.records == {"gone": None}


def test_an_untolerated_no_schedule_taint_keeps_the_running_pod() -> None:
    tainted = node("a", Taint(key="maintenance", effect="NoSchedule"))

    result = plan({"a": tainted}, {"a": [pod("p", "a")]})

    assert result.deletes == []
    assert result.creates == []
    record = result.records["a"]
    assert record is not None
    assert not record.verdict.should_run
    assert record.verdict.should_continue_running


def test_an_untolerated_no_execute_taint_deletes_the_pod() -> None:
    tainted = node("a", Taint(key="maintenance", effect="NoExecute"))

    result = plan({"a": tainted}, {"a": [pod("p", "a")]})

    assert [d.pod.name for d in result.deletes] == ["p"]


def record(*pods: PodInfo) -> NodeRecord:
    """An eligible node's record holding `pods` as they are."""
    return NodeRecord(ELIGIBLE, pods)


def test_a_failed_pod_is_deleted_and_replaced_once_it_is_gone_as_upstream() -> None:
    failed = {"a": [pod("p", "a", phase="Failed", ready=False)]}

    result = plan({"a": node("a")}, failed)
    after = plan({"a": node("a")}, {})

    assert [d.pod.name for d in result.deletes] == ["p"]
    assert result.creates == []
    assert [c.node for c in after.creates] == ["a"]


def test_a_failed_pod_stays_visible_while_its_node_backs_off() -> None:
    failed = {"a": [pod("p", "a", phase="Failed", ready=False)]}

    waiting = plan({"a": node("a")}, failed, may_delete_failed=False)

    assert waiting.deletes == []
    assert waiting.creates == []
    assert waiting.backing_off == ["a"]


def test_a_succeeded_pod_is_deleted_even_while_backing_off() -> None:
    done = {"a": [pod("p", "a", phase="Succeeded", ready=False)]}

    result = plan({"a": node("a")}, done, may_delete_failed=False)

    assert [d.pod.name for d in result.deletes] == ["p"]


def test_without_surge_no_pod_starts_beside_a_terminating_one() -> None:
    terminating = {"a": [pod("p", "a", deleting=True)]}

    result = plan({"a": node("a")}, terminating)

    assert result.creates == []
    assert result.deletes == []


def test_with_surge_a_pod_starts_beside_a_terminating_one() -> None:
    terminating = {"a": [pod("p", "a", deleting=True)]}

    result = plan({"a": node("a")}, terminating, surge=SurgeRule("r2", 0, NOW))

    assert [c.node for c in result.creates] == ["a"]


def test_a_node_whose_create_is_pending_gets_no_second_pod() -> None:
    result = plan({"a": node("a")}, {}, pending={"a": "r1"})

    assert result.creates == []


def test_terminating_and_failed_pods_count_in_the_status_as_upstream() -> None:
    pods = {
        "a": [pod("p", "a", deleting=True)],
        "b": [pod("q", "b", phase="Failed", ready=False)],
        "c": [pod("r", "c", phase="Failed", ready=False, deleting=True)],
    }
    result = plan({"a": node("a"), "b": node("b"), "c": node("c")}, pods, may_delete_failed=False)
    ledger = {name: record for name, record in result.records.items() if record is not None}

    summary = summarize(ledger, "r1", 0, NOW)

    assert (summary.desired, summary.current, summary.ready, summary.available) == (3, 2, 1, 1)


def test_a_terminating_pod_counts_as_unavailable_in_a_rolling_update() -> None:
    records = {
        "a": record(pod("p", "a", deleting=True)),
        "b": record(pod("q", "b", revision="r0")),
        "c": record(pod("s", "c", revision="r0")),
    }

    step = plan_rolling_update(records, "r1", {"maxUnavailable": 1}, 0, NOW, set())

    assert step.deletes == []
    assert step.outdated


def test_a_surge_pod_that_terminates_no_longer_counts_as_surging() -> None:
    records = {
        "a": record(
            pod("old-a", "a", revision="r0"), pod("new-a", "a", ready=False, deleting=True)
        ),
        "b": record(pod("old-b", "b", revision="r0")),
    }

    step = plan_rolling_update(records, "r1", {"maxSurge": 1}, 0, NOW, set())

    assert [c.node for c in step.creates] == ["a"]


def test_the_next_availability_wake_up_looks_at_every_pod_not_only_the_oldest() -> None:
    old = pod("old", "a", revision="r0", created="2026-01-01T00:00:00Z")
    new = pod("new", "a", ready_since=NOW - 5, created="2026-01-02T00:00:00Z")

    summary = summarize({"a": record(old, new)}, "r1", 10, NOW)

    assert summary.next_available_at == NOW + 5


def test_a_pod_that_turned_available_after_the_plan_still_wakes_a_pass() -> None:
    # The plan judged the surge pod at NOW - 2, one second before minReadySeconds were over,
    # and kept the old pod; the status is computed at NOW. Only a pass can let the old pod go,
    # and no watch event will bring one.
    old = pod("old", "a", revision="r0", created="2026-01-01T00:00:00Z")
    new = pod("new", "a", ready_since=NOW - 11, created="2026-01-02T00:00:00Z")

    judged_before = summarize({"a": record(old, new)}, "r1", 10, NOW, decided_at=NOW - 2)
    judged_since = summarize({"a": record(old, new)}, "r1", 10, NOW, decided_at=NOW)

    assert judged_before.next_available_at == NOW - 1
    assert judged_since.next_available_at is None


def test_an_unready_old_pod_beside_an_unavailable_new_one_goes_at_once() -> None:
    old = pod("old", "a", revision="r0", ready=False, created="2026-01-01T00:00:00Z")
    new = pod("new", "a", ready=False, created="2026-01-02T00:00:00Z")

    kept = pods_to_keep([old, new], SurgeRule("r1", 0, NOW))

    assert kept == [new]


def test_of_two_pods_on_one_node_the_oldest_stays() -> None:
    pods = {
        "a": [
            pod("new", "a", created="2026-01-02T00:00:00Z"),
            pod("old", "a", created="2026-01-01T00:00:00Z"),
        ]
    }

    result = plan({"a": node("a")}, pods)

    assert [d.pod.name for d in result.deletes] == ["new"]


def ledger(**records: NodeRecord) -> dict[str, NodeRecord]:
    return dict(records)


def record_for(info: NodeInfo, pods: list[PodInfo]) -> NodeRecord:
    result = plan({info.name: info}, {info.name: pods})
    entry = result.records[info.name]
    assert entry is not None
    return entry


def test_summary_counts_like_the_native_daemonset_status() -> None:
    tainted = node("t", Taint(key="maintenance", effect="NoSchedule"))
    book = ledger(
        a=record_for(node("a"), [pod("pa", "a")]),
        b=record_for(node("b"), [pod("pb", "b", ready=False)]),
        c=record_for(node("c"), []),
        d=record_for(node("d"), [pod("pd", "d", revision="old")]),
        t=record_for(tainted, [pod("pt", "t")]),
    )

    summary = summarize(book, "r1", 0, NOW)

    assert (summary.desired, summary.current, summary.ready, summary.available) == (4, 3, 2, 2)
    assert (summary.updated, summary.misscheduled, summary.unavailable) == (2, 1, 2)
    assert [(g.reason, g.detail, g.count, g.nodes) for g in summary.ineligible] == [
        ("UntoleratedTaint", "maintenance:NoSchedule", 1, ("t",))
    ]


def test_min_ready_seconds_delay_availability_and_say_when() -> None:
    book = ledger(a=record_for(node("a"), [pod("pa", "a", ready_since=NOW - 5)]))

    summary = summarize(book, "r1", 30, NOW)

    assert (summary.ready, summary.available) == (1, 0)
    assert summary.next_available_at == NOW + 25


def test_ineligible_nodes_are_grouped_by_reason_with_a_few_examples() -> None:
    nodes = {f"n{i}": node(f"n{i}") for i in range(5)}
    spec = {**SPEC, "nodeSelector": {"disk": "ssd"}}
    result = plan(nodes, {}, spec=spec)
    book = {name: rec for name, rec in result.records.items() if rec is not None}

    (group,) = summarize(book, "r1", 0, NOW).ineligible

    assert (group.reason, group.count) == ("NodeSelectorMismatch", 5)
    assert group.nodes == ("n0", "n1", "n2")


def test_the_node_selector_reads_as_kubectl_prints_it() -> None:
    assert node_selector_text({"nodeSelector": {"b": "2", "a": "1"}}) == "a=1,b=2"
    assert node_selector_text({}) == "<none>"


def test_status_is_unchanged_when_nothing_changed_and_keeps_transition_times() -> None:
    summary = summarize(ledger(a=record_for(node("a"), [pod("pa", "a")])), "r1", 0, NOW)
    first = build_status(
        summary,
        generation=1,
        node_selector="<none>",
        previous={},
        create_failure=None,
        now="2026-01-01T00:00:00Z",
        rollout=RolloutView(),
    )

    again = build_status(
        summary,
        generation=1,
        node_selector="<none>",
        previous=first,
        create_failure=None,
        now="2026-01-01T00:05:00Z",
        rollout=RolloutView(),
    )

    assert not status_changed(first, again)
    assert again["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"


def test_a_refused_create_shows_as_a_replica_failure_condition() -> None:
    summary = summarize(ledger(a=record_for(node("a"), [])), "r1", 0, NOW)

    status = build_status(
        summary,
        generation=2,
        node_selector="<none>",
        previous={},
        create_failure='pods "x" is forbidden: exceeded quota',
        now="2026-01-01T00:00:00Z",
        rollout=RolloutView(),
    )

    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Available"]["status"] == "False"
    assert conditions["ReplicaFailure"]["reason"] == "FailedCreate"
    assert "exceeded quota" in conditions["ReplicaFailure"]["message"]
    assert status["numberUnavailable"] == 1


def rolling(book: dict[str, NodeRecord], **update: Any) -> tuple[list[str], bool]:
    step = plan_rolling_update(book, "r2", update, 0, NOW, set())
    return [d.pod.name for d in step.deletes], step.outdated


def test_a_rolling_update_replaces_at_most_max_unavailable_available_pods() -> None:
    book = {n: record_for(node(n), [pod(f"p{n}", n, revision="r1")]) for n in "abcd"}

    assert rolling(book) == (["pa"], True)
    assert rolling(book, maxUnavailable=2) == (["pa", "pb"], True)
    assert rolling(book, maxUnavailable="50%") == (["pa", "pb"], True)
    assert rolling(book, maxUnavailable="30%") == (["pa", "pb"], True)  # rounded up


def test_unavailable_old_pods_go_at_once_and_use_up_the_budget() -> None:
    book = {
        "a": record_for(node("a"), [pod("pa", "a", revision="r1", ready=False)]),
        "b": record_for(node("b"), [pod("pb", "b", revision="r1")]),
    }

    assert rolling(book) == (["pa"], True)


def test_a_node_without_an_available_pod_stops_the_rollout() -> None:
    book = {
        "a": record_for(node("a"), [pod("pa", "a", revision="r2", ready=False)]),
        "b": record_for(node("b"), [pod("pb", "b", revision="r1")]),
    }

    assert rolling(book) == ([], True)


def test_pods_already_deleted_count_as_gone() -> None:
    book = {n: record_for(node(n), [pod(f"p{n}", n, revision="r1")]) for n in "ab"}

    step = plan_rolling_update(book, "r2", {}, 0, NOW, {"uid-pa"})

    assert step.deletes == []


def test_the_rollout_is_over_when_no_old_pod_is_left() -> None:
    book = {n: record_for(node(n), [pod(f"p{n}", n, revision="r2")]) for n in "ab"}

    assert rolling(book) == ([], False)


def test_surge_starts_new_pods_beside_old_ones_on_at_most_max_surge_nodes() -> None:
    book = {n: record_for(node(n), [pod(f"p{n}", n, revision="r1")]) for n in "abc"}

    step = plan_rolling_update(book, "r2", {"maxSurge": 1, "maxUnavailable": 0}, 0, NOW, set())

    assert [c.node for c in step.creates] == ["a"]
    assert step.deletes == []


def test_surge_counts_nodes_whose_new_pod_is_not_available_yet() -> None:
    book = {
        "a": record_for(
            node("a"), [pod("old", "a", revision="r1"), pod("new", "a", revision="r2", ready=False)]
        ),
        "b": record_for(node("b"), [pod("pb", "b", revision="r1")]),
        "c": record_for(node("c"), [pod("pc", "c", revision="r1", ready=False)]),
    }

    step = plan_rolling_update(book, "r2", {"maxSurge": 1}, 0, NOW, set())

    # b waits for a; c's old pod is unavailable, so it gets its new pod at once.
    assert [c.node for c in step.creates] == ["c"]


def test_with_surge_the_old_pod_goes_once_the_new_one_is_available() -> None:
    rule = SurgeRule("r2", 0, NOW)
    old = pod("old", "a", revision="r1", created="2026-01-01T00:00:00Z")
    waiting = pod("new", "a", revision="r2", ready=False, created="2026-01-02T00:00:00Z")
    ready = pod("new", "a", revision="r2", created="2026-01-02T00:00:00Z")

    assert pods_to_keep([old, waiting], rule) == [waiting, old]
    assert pods_to_keep([old, ready], rule) == [ready]
    assert pods_to_keep([old, ready], None) == [old]


def test_progressing_says_whether_a_rollout_runs_waits_is_stuck_or_is_complete() -> None:
    book = {
        "a": record_for(node("a"), [pod("pa", "a", revision="r1")]),
        "b": record_for(node("b"), [pod("pb", "b", revision="r2")]),
    }

    def reason(**view: Any) -> tuple[str, str]:
        status, why, _message = progressing(summarize(book, "r2", 0, NOW), RolloutView(**view))
        return status, why

    assert reason(number=2) == ("True", "RollingUpdate")
    assert reason(paused=True) == ("False", "Paused")
    assert reason(on_delete=True) == ("False", "OnDelete")
    assert reason(stuck="no progress") == ("False", "ProgressDeadlineExceeded")
    assert reason(kept_back=1) == ("True", "PartitionRolledOut")
    book["a"] = record_for(node("a"), [pod("pa", "a", revision="r2")])
    assert reason(paused=True, stuck="no progress") == ("True", "RolloutComplete")


def test_a_rollout_is_complete_only_once_the_new_pods_are_available() -> None:
    book = {"a": record_for(node("a"), [pod("pa", "a", revision="r2", ready=False)])}

    status, why, message = progressing(summarize(book, "r2", 0, NOW), RolloutView(number=2))

    assert (status, why) == ("True", "RollingUpdate")
    assert message == "1 of 1 eligible nodes run revision 2; 0 of 1 are available"


def test_the_status_names_the_revisions_and_the_time_of_the_last_progress() -> None:
    summary = summarize(
        ledger(a=record_for(node("a"), [pod("pa", "a", revision="r2")])), "r2", 0, NOW
    )
    view = RolloutView(
        update_revision="ds-r2",
        number=2,
        current_revision="ds-r2",
        collision_count=1,
        progress_time="2026-01-01T00:00:00Z",
    )

    status = build_status(
        summary,
        generation=3,
        node_selector="<none>",
        previous={},
        create_failure=None,
        now="2026-01-01T00:05:00Z",
        rollout=view,
    )

    assert (status["updateRevision"], status["currentRevision"]) == ("ds-r2", "ds-r2")
    assert status["collisionCount"] == 1
    found = next(c for c in status["conditions"] if c["type"] == "Progressing")
    assert found["lastUpdateTime"] == "2026-01-01T00:00:00Z"
    assert found["message"] == "revision 2 runs on all 1 eligible nodes and is available"


def five_nodes(**revisions: str) -> dict[str, NodeRecord]:
    return {
        name: record_for(node(name), [pod(f"p{name}", name, revision=revisions.get(name, "r1"))])
        for name in ("n1", "n2", "n3", "n4", "n5")
    }


def test_a_partition_keeps_the_last_nodes_by_name_on_the_old_revision() -> None:
    assert nodes_kept_back(five_nodes(), "r2", 2) == {"n4", "n5"}
    assert nodes_kept_back(five_nodes(), "r2", 0) == frozenset()
    assert nodes_kept_back(five_nodes(), "r2", 9) == {"n1", "n2", "n3", "n4", "n5"}


def test_a_partition_counts_nodes_already_updated_first() -> None:
    # n5 was updated before the partition was set: it keeps the new revision, and the kept
    # nodes are the last of the others.
    assert nodes_kept_back(five_nodes(n5="r2"), "r2", 2) == {"n3", "n4"}
    assert nodes_kept_back(five_nodes(n4="r2", n5="r2"), "r2", 4) == {"n1", "n2", "n3"}


def test_a_rolling_update_leaves_kept_nodes_alone_and_ends_there() -> None:
    book = five_nodes(n1="r2", n2="r2", n3="r2")
    kept = nodes_kept_back(book, "r2", 2)

    step = plan_rolling_update(book, "r2", {"maxUnavailable": 5}, 0, NOW, set(), kept_back=kept)

    assert step.deletes == []
    assert not step.outdated


def test_a_rolling_update_with_a_partition_replaces_only_the_nodes_in_front() -> None:
    book = five_nodes()
    kept = nodes_kept_back(book, "r2", 2)

    step = plan_rolling_update(book, "r2", {"maxUnavailable": 5}, 0, NOW, set(), kept_back=kept)

    assert sorted(delete.node for delete in step.deletes) == ["n1", "n2", "n3"]


def test_a_surge_update_with_a_partition_starts_new_pods_only_in_front() -> None:
    book = five_nodes()
    kept = nodes_kept_back(book, "r2", 3)

    step = plan_rolling_update(book, "r2", {"maxSurge": 5}, 0, NOW, set(), kept_back=kept)

    assert sorted(create.node for create in step.creates) == ["n1", "n2"]


def test_the_pods_holding_up_a_rollout_are_named_with_their_reason() -> None:
    book = {
        "a": record_for(
            node("a"),
            [pod("pa", "a", revision="r2", ready=False, waiting_reason="ImagePullBackOff")],
        ),
        "b": record_for(node("b"), [pod("pb", "b", revision="r2", ready=False, phase="Pending")]),
        "c": record_for(node("c"), [pod("pc", "c", revision="r2")]),
        "d": record_for(node("d"), [pod("pd", "d", revision="r1", ready=False)]),
    }

    count, examples = pods_holding_up(book, "r2", 0, NOW)

    assert count == 2
    assert examples == ["pa on a (ImagePullBackOff)", "pb on b (Pending)"]


def test_a_pod_body_reads_into_the_small_record_the_controller_keeps() -> None:
    body = {
        "metadata": {
            "name": "agent-x",
            "uid": "u1",
            "labels": {"controller-revision-hash": "r2"},
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"nodeName": "n1"},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [
                {"name": "sidecar", "state": {"running": {}}},
                {"name": "agent", "state": {"waiting": {"reason": "ImagePullBackOff"}}},
            ],
        },
    }

    info = PodInfo.from_body(body)

    assert (info.node, info.phase, info.ready, info.revision) == ("n1", "Pending", False, "r2")
    assert info.waiting_reason == "ImagePullBackOff"
    assert PodInfo.from_body({"metadata": {"name": "bare"}}).waiting_reason == ""


# the window of creates


def round_trips(window: CreateWindow, creates: int) -> list[int]:
    """How many creates go out in each round trip when every one is accepted and all those
    in flight are answered together."""
    rounds = []
    while creates:
        sending = 0
        while window.may_send() and sending < creates:
            window.sent()
            sending += 1
        rounds.append(sending)
        creates -= sending
        for _ in range(sending):
            window.answered(accepted=True)
    return rounds


def test_the_window_doubles_per_round_trip_up_to_the_writes_in_flight() -> None:
    assert round_trips(CreateWindow.opening(1, ceiling=32), 100) == [1, 2, 4, 8, 16, 32, 32, 5]
    assert round_trips(CreateWindow.opening(16, ceiling=32), 100) == [16, 32, 32, 20]
    assert round_trips(CreateWindow.opening(16, ceiling=4), 10) == [4, 4, 2]
    assert round_trips(CreateWindow.opening(0, ceiling=0), 2) == [1, 1]


def test_each_accepted_create_lets_two_more_go_without_waiting_for_the_others() -> None:
    window = CreateWindow.opening(2, ceiling=32)
    window.sent()
    window.sent()
    assert not window.may_send()
    window.answered(accepted=True)  # the other one still in flight
    window.sent()
    window.sent()
    assert (window.in_flight, window.may_send()) == (3, False)


def test_a_refusal_closes_the_window_and_the_next_pass_opens_at_one() -> None:
    window = CreateWindow.opening(8, ceiling=32)
    for _ in range(8):
        window.sent()
    window.answered(accepted=False)
    window.answered(accepted=True)  # answers to creates already in flight still come
    assert window.in_flight == 6
    assert not window.may_send()
    assert window.next_first(8) == 1


def test_the_next_pass_opens_as_wide_as_the_creates_went() -> None:
    after_a_rollout = CreateWindow.opening(1, ceiling=32)
    round_trips(after_a_rollout, 1000)
    assert after_a_rollout.next_first(1) == MAX_FIRST_WINDOW
    one_node_joined = CreateWindow.opening(MAX_FIRST_WINDOW, ceiling=32)
    round_trips(one_node_joined, 1)
    assert one_node_joined.next_first(MAX_FIRST_WINDOW) == MAX_FIRST_WINDOW
    three_nodes = CreateWindow.opening(1, ceiling=32)
    assert round_trips(three_nodes, 3) == [1, 2]
    assert three_nodes.next_first(1) == 2


def test_conditions_someone_else_set_are_kept_and_ours_are_replaced() -> None:
    summary = summarize({"a": record(pod("p", "a"))}, "r1", 0, NOW)
    foreign = {"type": "example.com/Audited", "status": "True", "reason": "Checked"}
    stale_failure = {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate"}

    status = build_status(
        summary,
        generation=1,
        node_selector="<none>",
        previous={"conditions": [foreign, stale_failure]},
        create_failure=None,
        now="2026-01-01T00:00:00Z",
        rollout=RolloutView(),
    )

    types = [c["type"] for c in status["conditions"]]
    assert types == ["Available", "Progressing", "example.com/Audited"]
    assert status["conditions"][2] == foreign
