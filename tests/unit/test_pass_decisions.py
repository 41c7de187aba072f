"""What the pure pass decides besides pods: adoption and release of pods, adoption of orphan
revisions, the template's revision made or renumbered, and a pass that stops short. Each is a
plan output, from plain data, with no cluster."""

from __future__ import annotations

import copy
from typing import Any

from kubeherd.daemonset.core.claims import PodCandidates
from kubeherd.daemonset.core.model import ExpectedPod
from kubeherd.daemonset.core.plan import NodeView, PassInput, Stop, plan_pass
from kubeherd.daemonset.core.pods import (
    OWNER_LABEL,
    REVISION_LABEL,
    daemon_pod_name,
    pinned_affinity,
)
from kubeherd.daemonset.core.revisions import (
    FoundRevisions,
    RevisionRecord,
    build_revision,
    revision_hash_of_json,
)
from kubeherd.daemonset.core.spec import parse_spec
from kubeherd.daemonset.core.template import TemplateVerdict
from tests.unit.test_passes import given as pass_input
from tests.unit.test_planning import NOW, node

UID = "uid-cds"
LABELS = {"app": "agent"}


def cds(image: str = "agent:2", **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeherd.io/v1alpha1",
        "kind": "CustomDaemonSet",
        "metadata": {"name": "agent", "namespace": "ops", "uid": UID, "generation": 2},
        "spec": {
            "selector": {"matchLabels": LABELS},
            "template": {
                "metadata": {"labels": LABELS},
                "spec": {"containers": [{"name": "agent", "image": image}]},
            },
        },
        "status": status,
    }


def given(body: dict[str, Any], **fields: Any) -> PassInput:
    spec = parse_spec(body)
    return pass_input(spec, **{"revision": spec.template_hash, "body": body, **fields})


def pod_body(node_name: str, owner: dict[str, Any] | None, **labels: str) -> dict[str, Any]:
    references = (
        [{"apiVersion": "kubeherd.io/v1alpha1", "kind": "CustomDaemonSet", "uid": UID,
          "name": "agent", "controller": True}]
        if owner is not None else []
    )  # fmt: skip
    return {
        "metadata": {
            "name": daemon_pod_name("agent"),
            "namespace": "ops",
            "uid": f"uid-pod-{node_name}",
            "resourceVersion": "7",
            "labels": {**LABELS, **labels},
            "ownerReferences": references,
        },
        "spec": {"affinity": pinned_affinity(None, node_name)},
    }


def revision(body: dict[str, Any], number: int, uid: str, owned: bool = True) -> RevisionRecord:
    spec = parse_spec(body)
    made = build_revision(body, spec.template, spec.template_hash, number)
    made["metadata"]["uid"] = uid
    if not owned:
        made["metadata"]["ownerReferences"] = []
    return RevisionRecord.from_body(made)


def test_an_orphan_pod_on_a_node_is_adopted_and_its_node_gets_no_second_pod() -> None:
    orphan = pod_body("n1", owner=None, **{REVISION_LABEL: "r1"})
    dirty = {"n1": NodeView(node("n1"), ())}

    plan = plan_pass(given(cds(), dirty=dirty, pod_candidates=PodCandidates(orphans=(orphan,))))

    assert plan.claims is not None
    (adoption,) = plan.claims.adopt
    assert (adoption.name, adoption.node, adoption.revision) == (
        orphan["metadata"]["name"],
        "n1",
        "r1",
    )
    operations = {(op["op"], op["path"]) for op in adoption.patch}
    assert ("add", "/metadata/ownerReferences") in operations
    assert ("test", "/metadata/resourceVersion") in operations
    assert plan.creates == []


def test_a_pod_being_deleted_or_owned_by_another_is_not_adopted() -> None:
    deleting = pod_body("n1", owner=None)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    taken = pod_body("n2", owner={"uid": "other"})
    candidates = PodCandidates(orphans=(deleting, taken))

    plan = plan_pass(given(cds(), pod_candidates=candidates))

    assert plan.claims is not None
    assert plan.claims.adopt == ()


def test_a_pod_outside_the_selector_is_released_once_whatever_the_queries_found() -> None:
    mine = pod_body("n1", owner={"uid": UID}, **{OWNER_LABEL: "agent"})
    mine["metadata"]["labels"]["app"] = "other"
    others = pod_body("n2", owner=None, **{OWNER_LABEL: "agent"})
    others["metadata"]["ownerReferences"] = [{"uid": "another", "controller": True}]
    candidates = PodCandidates(outside=(mine, copy.deepcopy(mine), others))

    plan = plan_pass(given(cds(), pod_candidates=candidates))

    assert plan.claims is not None
    (release,) = plan.claims.release
    assert release.name == mine["metadata"]["name"]
    assert {"op": "remove", "path": "/metadata/ownerReferences/0"} in release.patch
    assert {"op": "remove", "path": "/metadata/labels/kubeherd.io~1customdaemonset"} in (
        release.patch
    )


def test_a_new_template_gets_a_revision_numbered_after_the_newest() -> None:
    old = revision(cds("agent:1"), 4, "uid-r4")

    plan = plan_pass(given(cds(), found_revisions=FoundRevisions(owned=(old,))))

    assert plan.revisions is not None
    decision = plan.revisions.decision
    assert (decision.create, decision.renumber) == (5, None)
    assert plan.revision == decision.hash == parse_spec(cds()).template_hash


def test_an_undo_renumbers_the_old_revision_instead_of_making_one() -> None:
    back = revision(cds(), 1, "uid-r1")
    newer = revision(cds("agent:1"), 2, "uid-r2")

    plan = plan_pass(given(cds(), found_revisions=FoundRevisions(owned=(back, newer))))

    assert plan.revisions is not None
    decision = plan.revisions.decision
    assert decision.create is None
    assert decision.renumber == (back, 3)


def test_a_revision_already_newest_needs_no_write() -> None:
    current = revision(cds(), 2, "uid-r2")

    plan = plan_pass(given(cds(), found_revisions=FoundRevisions(owned=(current,))))

    assert plan.revisions is not None
    assert (plan.revisions.decision.create, plan.revisions.decision.renumber) == (None, None)
    assert plan.revisions.adopt == ()


def test_an_orphan_revision_is_adopted_and_counted_unless_its_adoption_was_refused() -> None:
    orphan = revision(cds(), 1, "uid-orphan", owned=False)
    metadata = {"metadata": {"name": orphan.name, "uid": orphan.uid, "labels": {}}}
    found = FoundRevisions(orphans=((orphan, metadata),))

    adopted = plan_pass(given(cds(), found_revisions=found))
    refused = plan_pass(
        given(cds(), found_revisions=found, refused_adoptions=frozenset({orphan.name}))
    )

    assert adopted.revisions is not None
    assert refused.revisions is not None
    assert [claim.name for claim in adopted.revisions.adopt] == [orphan.name]
    # Adopted, it is the template's revision already; refused, one is made.
    assert adopted.revisions.decision.create is None
    assert refused.revisions.adopt == ()
    assert refused.revisions.decision.create == 1


def test_a_name_taken_by_another_template_is_hashed_again_with_the_collision_counted() -> None:
    body = cds()
    spec = parse_spec(body)
    stranger = RevisionRecord(f"agent-{spec.template_hash}", "uid-x", spec.template_hash, 1, "x")

    plan = plan_pass(given(body, found_revisions=FoundRevisions(owned=(stranger,))))

    assert plan.revisions is not None
    decision = plan.revisions.decision
    assert decision.collision_count == 1
    assert decision.hash == revision_hash_of_json(spec.template_json, 1)
    assert plan.revision == decision.hash


def test_a_partition_keeps_nodes_on_the_status_current_revision_of_the_new_listing() -> None:
    body = cds(currentRevision="agent-old")
    body["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}
    old = RevisionRecord("agent-old", "uid-old", "h-old", 1, "d")
    dirty = {"n1": NodeView(node("n1"), ())}

    plan = plan_pass(given(body, dirty=dirty, found_revisions=FoundRevisions(owned=(old,))))

    assert plan.kept_back == {"n1"}
    assert [(create.node, create.revision) for create in plan.creates] == [("n1", "h-old")]


def test_a_refused_template_stops_the_pass_with_one_event_per_refusal() -> None:
    verdict = TemplateVerdict("h", problem="spec.containers: Required")
    dirty = {"n1": NodeView(node("n1"), ())}

    first = plan_pass(given(cds(), dirty=dirty, template=verdict))
    again = plan_pass(given(cds(), template=verdict, template_problem=verdict.problem))

    assert (first.stop, first.creates, first.revisions) == (Stop.TEMPLATE, [], None)
    assert [event.reason for event in first.events] == ["InvalidTemplate"]
    assert again.events == []


def test_no_verdict_on_the_template_stops_the_pass_and_warns_once() -> None:
    verdict = TemplateVerdict("h", no_verdict="HTTP 503")

    first = plan_pass(given(cds(), template=verdict))
    again = plan_pass(given(cds(), template=verdict, template_unanswered=True))

    assert first.stop is again.stop is Stop.NO_VERDICT
    assert [event.reason for event in first.events] == ["TemplateCheckFailed"]
    assert again.events == []


def test_an_invalid_selector_stops_the_pass_before_any_claim_or_revision() -> None:
    body = cds()
    body["spec"]["selector"] = {"matchLabels": {"a,b": "x"}}

    plan = plan_pass(given(body, found_revisions=FoundRevisions(), pod_candidates=PodCandidates()))

    assert (plan.stop, plan.claims, plan.revisions) == (Stop.SELECTOR, None, None)
    assert [event.reason for event in plan.events] == ["InvalidSelector"]


def test_an_adopted_pod_is_expected_until_the_watch_shows_it() -> None:
    orphan = pod_body("n1", owner=None)
    expected = {"n2": ExpectedPod("agent-zzzzz", "r1", NOW)}

    plan = plan_pass(
        given(
            cds(),
            dirty={"n1": NodeView(node("n1"), ()), "n2": NodeView(node("n2"), ())},
            expected=expected,
            pod_candidates=PodCandidates(orphans=(orphan,)),
        )
    )

    # Neither node gets a pod: n1's is being adopted, n2's create is on its way.
    assert plan.creates == []
    assert plan.seen == set()
