"""Template revisions with plain data: names, numbering, collisions and pruning."""

from __future__ import annotations

from typing import Any

from kubeherd.daemonset.core.pods import canonical_json, template_hash
from kubeherd.daemonset.core.revisions import (
    Revision,
    RevisionRecord,
    build_revision,
    decide_revision,
    owned_revisions,
    revision_hash,
    revision_hash_of_json,
    revision_template,
    revisions_to_prune,
)

CDS: dict[str, Any] = {
    "metadata": {
        "name": "agent",
        "namespace": "ops",
        "uid": "uid-cds",
        "annotations": {"kubernetes.io/change-cause": "bump to v2"},
    }
}


def template(image: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "agent"}},
        "spec": {"containers": [{"name": "agent", "image": image}]},
    }


def revision(image: str, number: int, collision_count: int = 0) -> Revision:
    hash_ = revision_hash(template(image), collision_count)
    return Revision(f"agent-{hash_}", f"uid-{number}", hash_, number, template(image))


def stored(image: str) -> bytes:
    """The template as the spec keeps it: its canonical JSON."""
    return canonical_json(template(image))


def test_without_collisions_the_revision_hash_is_the_pods_template_hash() -> None:
    assert revision_hash(template("agent:1"), 0) == template_hash(template("agent:1"))
    assert revision_hash(template("agent:1"), 1) != revision_hash(template("agent:1"), 0)


def test_the_hash_of_a_template_kept_as_json_is_the_hash_of_the_template() -> None:
    for count in (0, 1, 7, 12):
        wrapped = {"template": template("agent:1"), "collisionCount": count}
        expected = template_hash(wrapped) if count else template_hash(template("agent:1"))
        assert revision_hash_of_json(stored("agent:1"), count) == expected
        assert revision_hash(template("agent:1"), count) == expected


def test_a_revision_object_holds_the_template_and_reads_back_the_same() -> None:
    body = build_revision(CDS, template("agent:2"), "h2", 2)

    assert body["metadata"]["name"] == "agent-h2"
    assert body["metadata"]["labels"] == {
        "app": "agent",
        "kubeherd.io/customdaemonset": "agent",
        "controller-revision-hash": "h2",
    }
    assert body["metadata"]["annotations"] == {"kubernetes.io/change-cause": "bump to v2"}
    assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-cds"
    assert body["data"]["spec"]["template"]["$patch"] == "replace"
    assert revision_template(body) == template("agent:2")
    assert body["revision"] == 2


def test_only_revisions_this_object_controls_count() -> None:
    mine = {**build_revision(CDS, template("agent:1"), "h1", 1)}
    other_cds = {**CDS, "metadata": {**CDS["metadata"], "uid": "uid-old-namesake"}}
    theirs = build_revision(other_cds, template("agent:2"), "h2", 2)

    assert [r.name for r in owned_revisions([theirs, mine], "uid-cds")] == ["agent-h1"]


def test_a_new_template_gets_the_next_number() -> None:
    decision = decide_revision(
        [revision("agent:1", 1), revision("agent:2", 2)], stored("agent:3"), 0
    )

    assert decision.create == 3
    assert decision.renumber is None
    assert decision.hash == template_hash(template("agent:3"))


def test_the_newest_template_needs_nothing() -> None:
    decision = decide_revision(
        [revision("agent:1", 1), revision("agent:2", 2)], stored("agent:2"), 0
    )

    assert (decision.create, decision.renumber) == (None, None)


def test_an_old_template_brought_back_becomes_the_newest_revision() -> None:
    first = revision("agent:1", 1)

    decision = decide_revision([first, revision("agent:2", 2)], stored("agent:1"), 0)

    assert decision.create is None
    assert decision.renumber == (first, 3)


def test_a_name_taken_by_another_template_is_a_collision_and_hashes_again() -> None:
    taken = revision("agent:1", 1)
    impostor = Revision(taken.name, "uid-x", taken.hash, 1, template("agent:other"))

    decision = decide_revision([impostor], stored("agent:1"), 0)

    assert decision.collision_count == 1
    assert decision.hash == revision_hash(template("agent:1"), 1)
    assert decision.create == 2


def test_pruning_drops_the_oldest_beyond_the_limit_but_never_one_in_use() -> None:
    history = [revision(f"agent:{n}", n) for n in range(1, 6)]
    current = history[-1].hash

    pruned = revisions_to_prune(history, current, 2, live_hashes={history[0].hash})

    # Four old revisions, two kept: the two oldest go, except revision 1, which a pod still runs.
    assert [r.number for r in pruned] == [2, 3]


def test_pruning_keeps_everything_within_the_limit_and_never_the_current_one() -> None:
    history = [revision(f"agent:{n}", n) for n in range(1, 4)]

    assert revisions_to_prune(history, history[-1].hash, 2, set()) == []
    assert [r.number for r in revisions_to_prune(history, history[0].hash, 0, set())] == [2, 3]


def record(image: str, number: int, collision_count: int = 0) -> RevisionRecord:
    hash_ = revision_hash(template(image), collision_count)
    body = build_revision(CDS, template(image), hash_, number)
    body["metadata"]["uid"] = f"uid-{number}"
    return RevisionRecord.from_body(body)


def test_a_kept_record_has_no_template_but_tells_the_same_one_from_another() -> None:
    kept = record("agent:1", 1)

    assert not hasattr(kept, "template")
    assert decide_revision([kept], stored("agent:1"), 0).create is None
    assert decide_revision([kept], stored("agent:2"), 0).create == 2


def test_a_record_whose_hash_holds_another_template_is_a_collision() -> None:
    taken = record("agent:1", 1)
    impostor = RevisionRecord(taken.name, "uid-x", taken.hash, 1, record("agent:9", 1).digest)

    decision = decide_revision([impostor], stored("agent:1"), 0)

    assert decision.collision_count == 1
    assert decision.create == 2
