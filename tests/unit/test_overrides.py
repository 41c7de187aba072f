"""Per-pool resource overrides (spec.resourceOverrides), with plain data: which override a node
gets, what its pod looks like, and which pods a rolling update replaces when one changes."""

from __future__ import annotations

import copy
from typing import Any

from kubeherd.daemonset.core.eligibility import NodeInfo, Taint
from kubeherd.daemonset.core.in_place import Target, unresizable_change, update_patch
from kubeherd.daemonset.core.model import NodeRecord, PodInfo
from kubeherd.daemonset.core.nodes import SurgeRule, WaveRule, plan_nodes, pods_to_keep
from kubeherd.daemonset.core.overrides import OverrideRule
from kubeherd.daemonset.core.plan import NodeView, plan_pass
from kubeherd.daemonset.core.pods import RESOURCE_OVERRIDE_ANNOTATION, DaemonPodMaker
from kubeherd.daemonset.core.rollout import nodes_outside_wave, plan_rolling_update
from kubeherd.daemonset.core.status import RolloutView, build_status, progressing
from kubeherd.daemonset.core.summary import summarize
from tests.unit.test_daemon_pods import custom_daemon_set
from tests.unit.test_passes import given, rolling, spec_of
from tests.unit.test_planning import NOW, SPEC, node, pod

LARGE = {"matchLabels": {"size": "large"}}
TEMPLATE_RESOURCES = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}


def override(
    name: str = "large-nodes",
    selector: dict[str, Any] | None = None,
    memory: str = "1Gi",
    container: str = "agent",
) -> dict[str, Any]:
    return {
        "name": name,
        "nodeSelector": LARGE if selector is None else selector,
        "containers": [
            {
                "name": container,
                "resources": {"requests": {"memory": memory}, "limits": {"memory": "2Gi"}},
            }
        ],
    }


def key_of(*items: dict[str, Any]) -> str:
    """The key of the first override given."""
    return OverrideRule.of(items).overrides[0].key


def record(info: NodeInfo, pods: list[PodInfo], rule: OverrideRule) -> NodeRecord:
    result = plan_nodes(SPEC, [info.name], lambda _n: info, lambda _n: pods, overrides=rule)
    entry = result.records[info.name]
    assert entry is not None
    return entry


def test_the_first_override_in_list_order_whose_selector_matches_applies() -> None:
    rule = OverrideRule.of(
        [
            override("zone-a", {"matchLabels": {"zone": "a"}}),
            override("large-nodes"),
            override("everything", {}),
        ]
    )

    assert rule.key_for({"zone": "a", "size": "large"}).startswith("zone-a/")
    assert rule.key_for({"zone": "b", "size": "large"}).startswith("large-nodes/")
    # An empty selector matches every node, as a LabelSelector does.
    assert rule.key_for({"zone": "b"}).startswith("everything/")
    assert OverrideRule.of([override()]).key_for({"size": "small"}) == ""


def test_the_key_changes_with_what_the_override_sets_and_only_with_it() -> None:
    assert key_of(override(memory="1Gi")) == key_of(override(memory="1Gi", selector={}))
    assert key_of(override(memory="1Gi")) != key_of(override(memory="2Gi"))
    assert key_of(override("one")) != key_of(override("two"))


def test_a_pod_gets_the_override_merged_key_by_key_and_an_annotation_naming_it() -> None:
    containers = [
        {"name": "agent", "image": "agent:1", "resources": TEMPLATE_RESOURCES},
        {"name": "sidecar", "image": "sidecar:1", "resources": TEMPLATE_RESOURCES},
    ]
    cds = custom_daemon_set(containers=containers)
    pristine = copy.deepcopy(cds)
    large = OverrideRule.of([override()]).overrides[0]

    pod_ = DaemonPodMaker.of(cds, "r1").pod("n1", large)

    agent, sidecar = pod_["spec"]["containers"]
    assert agent["resources"] == {
        "requests": {"cpu": "100m", "memory": "1Gi"},
        "limits": {"memory": "2Gi"},
    }
    assert sidecar["resources"] == TEMPLATE_RESOURCES
    assert pod_["metadata"]["annotations"][RESOURCE_OVERRIDE_ANNOTATION] == large.key
    assert cds == pristine


def test_a_pod_without_an_override_has_the_templates_resources_and_no_annotation() -> None:
    cds = custom_daemon_set(
        containers=[{"name": "agent", "image": "agent:1", "resources": TEMPLATE_RESOURCES}]
    )

    pod_ = DaemonPodMaker.of(cds, "r1").pod("n1")

    assert pod_["spec"]["containers"][0]["resources"] == TEMPLATE_RESOURCES
    assert RESOURCE_OVERRIDE_ANNOTATION not in pod_["metadata"]["annotations"]


def test_a_pods_record_reads_the_override_it_was_made_with() -> None:
    body = {"metadata": {"name": "p", "annotations": {RESOURCE_OVERRIDE_ANNOTATION: "big/abc"}}}

    assert PodInfo.from_body(body).override == "big/abc"
    assert PodInfo.from_body({"metadata": {"name": "p"}}).override == ""


def test_a_node_record_names_the_override_its_labels_select() -> None:
    rule = OverrideRule.of([override()])

    assert record(node("a", size="large"), [], rule).override == key_of(override())
    assert record(node("b", size="small"), [], rule).override == ""


def test_a_changed_override_replaces_only_the_pods_of_the_nodes_it_matches() -> None:
    before, after = key_of(override(memory="1Gi")), OverrideRule.of([override(memory="3Gi")])
    ledger = {
        name: record(
            node(name, size=size),
            [pod(f"p{name}", name, revision="r2", override=before if size else "")],
            after,
        )
        for name, size in (("a", "large"), ("b", ""), ("c", "large"), ("d", ""))
    }

    step = plan_rolling_update(ledger, "r2", {"maxUnavailable": 4}, 0, NOW, set())

    assert sorted(d.node for d in step.deletes) == ["a", "c"]
    assert {d.why for d in step.deletes} == {"its resource override is out of date"}
    assert step.outdated


def test_an_override_change_stays_within_max_unavailable() -> None:
    rule = OverrideRule.of([override(memory="3Gi")])
    ledger = {
        name: record(node(name, size="large"), [pod(f"p{name}", name, revision="r2")], rule)
        for name in ("a", "b", "c")
    }

    step = plan_rolling_update(ledger, "r2", {"maxUnavailable": 1}, 0, NOW, set())

    assert [d.node for d in step.deletes] == ["a"]


def test_a_node_that_loses_its_override_gets_the_templates_resources_back() -> None:
    ledger = {
        "a": record(
            node("a", size="large"),
            [pod("pa", "a", revision="r2", override=key_of(override()))],
            OverrideRule(),
        )
    }

    step = plan_rolling_update(ledger, "r2", {"maxUnavailable": 1}, 0, NOW, set())

    assert [d.node for d in step.deletes] == ["a"]


def test_with_in_place_updates_an_override_change_is_an_update_in_place() -> None:
    rule = OverrideRule.of([override(memory="3Gi")])
    current = rule.overrides[0].key
    ledger = {
        "a": record(node("a", size="large"), [pod("pa", "a", revision="r2")], rule),
        "b": record(node("b"), [pod("pb", "b", revision="r1")], rule),
        "c": record(
            node("c", size="large"), [pod("pc", "c", revision="r1", override=current)], rule
        ),
        "d": record(
            node("d", size="large"), [pod("pd", "d", revision="r2", override=current)], rule
        ),
    }

    step = plan_rolling_update(
        ledger, "r2", {"maxUnavailable": 4}, 0, NOW, set(), in_place_from=frozenset({"r1", "r2"})
    )

    # The override alone (a), the revision alone (b) or both (c): d is up to date.
    assert [u.node for u in step.updates] == ["a", "b", "c"]
    assert step.deletes == []


def test_without_in_place_updates_an_override_change_replaces_the_pod() -> None:
    rule = OverrideRule.of([override(memory="3Gi")])
    ledger = {"a": record(node("a", size="large"), [pod("pa", "a", revision="r2")], rule)}

    step = plan_rolling_update(ledger, "r2", {"maxUnavailable": 1}, 0, NOW, set())

    assert [d.node for d in step.deletes] == ["a"]
    assert step.updates == []


def test_with_surge_the_new_pod_starts_beside_the_one_with_the_old_override() -> None:
    rule = OverrideRule.of([override(memory="3Gi")])
    old = pod("old", "a", revision="r2", created="2026-01-01T00:00:00Z")
    ledger = {"a": record(node("a", size="large"), [old], rule)}

    step = plan_rolling_update(ledger, "r2", {"maxSurge": 1}, 0, NOW, set())

    assert [c.node for c in step.creates] == ["a"]
    new = pod(
        "new", "a", revision="r2", created="2026-01-02T00:00:00Z", override=rule.overrides[0].key
    )
    surge = SurgeRule("r2", 0, NOW)
    # The new pod is available: the old one goes, though it is older.
    assert pods_to_keep([old, new], surge, rule.overrides[0].key) == [new]


def test_a_pod_with_another_override_is_not_counted_as_updated() -> None:
    rule = OverrideRule.of([override(memory="3Gi")])
    current = rule.overrides[0].key
    ledger = {
        "a": record(node("a", size="large"), [pod("pa", "a", revision="r2")], rule),
        "b": record(
            node("b", size="large"), [pod("pb", "b", revision="r2", override=current)], rule
        ),
        "c": record(node("c"), [pod("pc", "c", revision="r2")], rule),
    }

    summary = summarize(ledger, "r2", 0, NOW)

    assert (summary.updated, summary.desired) == (2, 3)
    assert progressing(summary, RolloutView())[1] == "RollingUpdate"


def test_a_rollout_of_an_override_alone_completes_once_its_nodes_are_replaced() -> None:
    rule = OverrideRule.of([override(memory="3Gi")])
    current = rule.overrides[0].key
    ledger = {
        "a": record(
            node("a", size="large"), [pod("pa", "a", revision="r2", override=current)], rule
        ),
        "c": record(node("c"), [pod("pc", "c", revision="r2")], rule),
    }

    step = plan_rolling_update(ledger, "r2", {"maxUnavailable": 1}, 0, NOW, set())
    summary = summarize(ledger, "r2", 0, NOW)

    assert not step.outdated
    assert progressing(summary, RolloutView())[1] == "RolloutComplete"


def test_a_pass_after_an_override_change_deletes_the_matching_nodes_pods_only() -> None:
    old_key = key_of(override(memory="1Gi"))
    spec = spec_of(resourceOverrides=[override(memory="3Gi")], **rolling(maxUnavailable=3))
    dirty = {
        "a": NodeView(node("a", size="large"), (pod("pa", "a", revision="r2", override=old_key),)),
        "b": NodeView(node("b"), (pod("pb", "b", revision="r2"),)),
        "c": NodeView(node("c", size="large"), (pod("pc", "c", revision="r2", override=old_key),)),
    }

    plan = plan_pass(given(spec, dirty=dirty, rolling=True))

    assert sorted(d.node for d in plan.deletes) == ["a", "c"]
    assert plan.rolling


def test_a_node_relabelled_into_a_pool_has_its_pod_replaced_without_a_spec_change() -> None:
    spec = spec_of(resourceOverrides=[override()])
    dirty = {"a": NodeView(node("a", size="large"), (pod("pa", "a", revision="r2"),))}

    # No rollout under way: only the Node event made the node dirty.
    plan = plan_pass(given(spec, dirty=dirty, rolling=False))

    assert [d.node for d in plan.deletes] == ["a"]


def test_the_status_counts_the_eligible_nodes_each_override_applies_to() -> None:
    rule = OverrideRule.of(
        [
            override("zone-a", {"matchLabels": {"zone": "a"}}),
            override(),
            override("typo", {"matchLabels": {"size": "larg"}}),
        ]
    )
    tainted = node("e", Taint(key="maintenance", effect="NoSchedule"), size="large")
    ledger = {
        "a": record(node("a", size="large", zone="a"), [], rule),
        "b": record(node("b", size="large"), [], rule),
        "c": record(node("c", size="large"), [], rule),
        "d": record(node("d"), [], rule),
        "e": record(tainted, [], rule),
    }

    summary = summarize(ledger, "r2", 0, NOW, overrides=rule)
    status = build_status(
        summary,
        generation=1,
        node_selector="",
        previous={},
        create_failure=None,
        now="",
        rollout=RolloutView(),
    )

    # A node counts for the first override that matches it, an ineligible one for none; an
    # override matching no node shows 0.
    assert status["resourceOverrides"] == [
        {"name": "zone-a", "nodes": 1},
        {"name": "large-nodes", "nodes": 2},
        {"name": "typo", "nodes": 0},
    ]


def test_the_status_clears_its_overrides_once_the_spec_has_none() -> None:
    summary = summarize({}, "r2", 0, NOW)
    previous = {"resourceOverrides": [{"name": "large-nodes", "nodes": 2}]}

    def status_after(previous: dict[str, Any]) -> dict[str, Any]:
        return build_status(
            summary,
            generation=1,
            node_selector="",
            previous=previous,
            create_failure=None,
            now="",
            rollout=RolloutView(),
        )

    assert status_after(previous)["resourceOverrides"] == []
    assert "resourceOverrides" not in status_after({})


def test_a_wave_selector_holds_an_override_change_to_its_nodes() -> None:
    rule = OverrideRule.of([override(memory="3Gi")])
    waves = WaveRule({"matchLabels": {"wave": "1"}})
    infos = {name: node(name, size="large", wave=wave) for name, wave in (("a", "1"), ("b", "2"))}
    result = plan_nodes(
        SPEC,
        sorted(infos),
        infos.get,
        lambda name: [pod(f"p{name}", name, revision="r2")],
        waves=waves,
        overrides=rule,
    )
    ledger = {name: entry for name, entry in result.records.items() if entry is not None}

    step = plan_rolling_update(ledger, "r2", {"maxUnavailable": 2}, 0, NOW, set())

    assert [d.node for d in step.deletes] == ["a"]
    assert nodes_outside_wave(ledger, "r2", frozenset()) == 1


def sized_template(**resources: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "agent", "image": "agent:1", "resources": resources}]}}


def live_pod(resources: dict[str, Any], annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "agent-x",
            "resourceVersion": "41",
            "labels": {},
            "annotations": annotations,
        },
        "spec": {"containers": [{"name": "agent", "image": "agent:1", "resources": resources}]},
    }


def test_an_in_place_target_has_the_nodes_override_merged_in() -> None:
    large = OverrideRule.of([override(memory="3Gi")]).overrides[0]

    target = Target.of(sized_template(requests={"cpu": "100m", "memory": "64Mi"}), large)

    assert target.resources["agent"] == {
        "requests": {"cpu": "100m", "memory": "3Gi"},
        "limits": {"memory": "2Gi"},
    }
    assert target.override_key == large.key
    assert Target.of(sized_template()).override_key == ""


def test_an_in_place_update_writes_the_override_annotation_or_removes_it() -> None:
    large = OverrideRule.of([override()]).overrides[0]
    plain_pod = live_pod({}, {})
    overridden_pod = live_pod({}, {RESOURCE_OVERRIDE_ANNOTATION: "old/key"})
    path = "/metadata/annotations/kubeherd.io~1resource-override"

    to_large = update_patch(plain_pod, Target.of(sized_template(), large), "r1") or []
    to_plain = update_patch(overridden_pod, Target.of(sized_template()), "r1") or []
    stays_plain = update_patch(plain_pod, Target.of(sized_template()), "r1") or []

    assert {"op": "add", "path": path, "value": large.key} in to_large
    assert {"op": "remove", "path": path} in to_plain
    assert not any(op["path"] == path for op in stays_plain)


def test_an_override_of_resources_other_than_cpu_and_memory_cannot_be_resized() -> None:
    storage = override()
    storage["containers"][0]["resources"] = {"limits": {"ephemeral-storage": "2Gi"}}
    memory = OverrideRule.of([override(memory="3Gi")]).overrides[0]
    pod_body = live_pod({"requests": {"memory": "64Mi"}}, {})

    assert unresizable_change(
        pod_body, Target.of(sized_template(), OverrideRule.of([storage]).overrides[0])
    )
    assert not unresizable_change(pod_body, Target.of(sized_template(), memory))


def test_an_override_update_in_place_is_in_flight_until_the_watch_shows_the_annotation() -> None:
    in_place = rolling(rollingUpdateType="InPlaceIfPossible", maxUnavailable=2)
    spec = spec_of(resourceOverrides=[override(memory="3Gi")], **in_place)
    sent = pod("pa", "a", revision="r2")
    dirty = {"a": NodeView(node("a", size="large"), (sent,))}

    plan = plan_pass(
        given(
            spec,
            dirty=dirty,
            rolling=True,
            revision_keys=(("r2", spec.in_place_key),),
            rollout_updated=frozenset({sent.uid}),
        )
    )

    # Sent last pass, not shown yet: neither updated again nor replaced.
    assert (plan.updates, plan.deletes) == ([], [])
    assert plan.rollout_updated == {sent.uid}
