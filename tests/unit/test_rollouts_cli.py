"""`kubeherd rollout`'s decisions with plain data: what it prints and when it stops."""

from __future__ import annotations

from typing import Any

import pytest

from kubeherd.cli import build_parser
from kubeherd.daemonset.core.revisions import Revision
from kubeherd.rollouts import (
    RolloutError,
    history_table,
    is_concurrent_edit,
    parse_duration,
    parse_resource,
    rollback_patch,
    status_verdict,
    undo_target,
)


def cds(
    *,
    generation: int = 2,
    observed: int = 2,
    desired: int = 5,
    updated: int = 5,
    available: int = 5,
    reason: str = "RollingUpdate",
    message: str = "",
    strategy: str = "RollingUpdate",
) -> dict[str, Any]:
    return {
        "metadata": {"name": "agent", "generation": generation},
        "spec": {"updateStrategy": {"type": strategy}},
        "status": {
            "observedGeneration": observed,
            "desiredNumberScheduled": desired,
            "updatedNumberScheduled": updated,
            "numberAvailable": available,
            "conditions": [{"type": "Progressing", "reason": reason, "message": message}],
        },
    }


def test_status_waits_for_the_new_spec_to_be_observed() -> None:
    verdict = status_verdict(cds(generation=3, observed=2))

    assert verdict.message == "Waiting for customdaemonset spec update to be observed..."
    assert not verdict.done
    assert not verdict.failed


def test_status_waits_for_pods_to_be_updated_then_available() -> None:
    updating = status_verdict(cds(updated=2))
    paused = status_verdict(cds(updated=2, reason="Paused"))
    starting = status_verdict(cds(available=4))

    assert updating.message == (
        'Waiting for customdaemonset "agent" rollout to finish: '
        "2 out of 5 new pods have been updated..."
    )
    assert paused.message.endswith("have been updated... (paused)")
    assert starting.message == (
        'Waiting for customdaemonset "agent" rollout to finish: '
        "4 of 5 updated pods are available..."
    )
    assert not any(v.done or v.failed for v in (updating, paused, starting))


def test_status_is_done_when_every_node_runs_an_available_new_pod() -> None:
    verdict = status_verdict(cds(reason="RolloutComplete"))

    assert verdict.done
    assert verdict.message == 'customdaemonset "agent" successfully rolled out'


def test_status_fails_at_once_when_the_rollout_is_stuck() -> None:
    verdict = status_verdict(
        cds(updated=1, available=4, reason="ProgressDeadlineExceeded", message="pod x: Pending")
    )

    assert verdict.failed
    assert verdict.message == 'customdaemonset "agent" rollout is stuck: pod x: Pending'


def test_status_is_done_when_a_partition_is_reached() -> None:
    verdict = status_verdict(cds(updated=3, reason="PartitionRolledOut"))

    assert verdict.done
    assert verdict.message.startswith("partitioned roll out complete: 3 of 5 nodes updated")


def test_status_is_done_when_a_wave_is_reached() -> None:
    verdict = status_verdict(cds(updated=3, reason="WaveRolledOut"))

    assert verdict.done
    assert verdict.message.startswith("roll out of this wave complete: 3 of 5 nodes updated")


def test_status_refuses_on_delete_as_kubectl_does() -> None:
    verdict = status_verdict(cds(strategy="OnDelete"))

    assert verdict.failed
    assert "only available for RollingUpdate" in verdict.message


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90), ("30s", 30), ("5m", 300), ("1h", 3600), ("1m30s", 90)]
)
def test_durations_read_as_kubectl_reads_them(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5x", "m", "1m 30s", "-5s"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    "text",
    ["cds/agent", "customdaemonset/agent", "CustomDaemonSets.kubeherd.io/agent"],
)
def test_every_spelling_of_the_resource_names_it(text: str) -> None:
    assert parse_resource(text) == "agent"


@pytest.mark.parametrize("text", ["agent", "cds/", "deploy/agent", "cds/a/b"])
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(RolloutError):
        parse_resource(text)


def revision(number: int, image: str) -> Revision:
    template = {"spec": {"containers": [{"name": "agent", "image": image}]}}
    return Revision(f"agent-h{number}", f"uid-{number}", f"h{number}", number, template)


HISTORY = [revision(1, "agent:1"), revision(2, "agent:2"), revision(3, "agent:3")]


def test_history_is_a_table_of_revisions_with_images_and_causes() -> None:
    table = history_table("agent", HISTORY, {"agent-h2": "bump to 2"})

    assert table.splitlines() == [
        "customdaemonset.kubeherd.io/agent",
        "REVISION  IMAGES   CHANGE-CAUSE",
        "1         agent:1  <none>",
        "2         agent:2  bump to 2",
        "3         agent:3  <none>",
    ]
    assert history_table("agent", [], {}) == "No rollout history found.\n"


def test_undo_goes_back_to_the_revision_before_the_current_one() -> None:
    assert undo_target("agent", HISTORY, "agent-h3", 0).number == 2
    # After an undo to 1 (re-numbered 4), the previous is 3.
    assert undo_target("agent", HISTORY, "agent-h2", 0).number == 1
    assert undo_target("agent", HISTORY, "", 0).number == 2


def test_undo_to_a_given_revision() -> None:
    assert undo_target("agent", HISTORY, "agent-h3", 1).number == 1


def test_undo_without_history_or_to_an_unknown_revision_is_an_error() -> None:
    with pytest.raises(RolloutError, match='no rollout history found for customdaemonset "agent"'):
        undo_target("agent", HISTORY[:1], "agent-h1", 0)
    with pytest.raises(RolloutError, match="unable to find specified revision 9 in history"):
        undo_target("agent", HISTORY, "agent-h3", 9)


def test_undo_skips_a_revision_the_spec_already_has() -> None:
    current = {"metadata": {"resourceVersion": "41"}, "spec": {"template": HISTORY[2].template}}

    assert rollback_patch(current, HISTORY[2]) is None


def test_undo_replaces_the_whole_template_only_if_nobody_changed_the_object() -> None:
    current = {"metadata": {"resourceVersion": "41"}, "spec": {"template": HISTORY[2].template}}

    assert rollback_patch(current, HISTORY[0]) == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "41"},
        {
            "op": "replace",
            "path": "/spec/template",
            "value": {"spec": {"containers": [{"name": "agent", "image": "agent:1"}]}},
        },
    ]


def test_only_a_failed_resource_version_test_reads_as_a_concurrent_edit() -> None:
    failed_test = "testing value /metadata/resourceVersion failed: test failed"
    invalid = 'CustomDaemonSet.kubeherd.io "agent" is invalid: spec.template.spec: Required value'

    assert is_concurrent_edit(409, "Operation cannot be fulfilled")
    assert is_concurrent_edit(422, failed_test)
    assert not is_concurrent_edit(422, invalid)


def test_the_command_line_parses_as_documented() -> None:
    options = build_parser().parse_args(
        ["rollout", "status", "cds/agent", "-n", "ops", "--timeout", "2m"]
    )

    assert (options.action, options.resource, options.namespace) == ("status", "cds/agent", "ops")
    assert options.timeout == 120
    undo = build_parser().parse_args(["rollout", "undo", "cds/agent", "--to-revision", "3"])
    assert undo.to_revision == 3
