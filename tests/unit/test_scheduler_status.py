"""The SchedulerProfile status, from plain Deployment and Lease data."""

from __future__ import annotations

from typing import Any

from kubeherd.scheduler.status import Applied, Validity, build_status, lease_leader
from kubeherd.scheduler.validation import Claim, names_taken_before

VALID = Validity("True", "Valid", "ok")
LEASE = {
    "spec": {
        "holderIdentity": "node_1234",
        "renewTime": "2026-11-23T10:00:00.000000Z",
        "leaseDurationSeconds": 15,
    }
}
RENEWED = 1795428000.0  # 2026-11-23T10:00:00Z


def a_deployment(
    replicas: int = 1, ready: int = 1, updated: int = 1, generation: int = 1
) -> dict[str, Any]:
    return {
        "metadata": {"generation": generation},
        "spec": {"replicas": replicas},
        "status": {
            "observedGeneration": generation,
            "replicas": replicas,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "updatedReplicas": updated,
        },
    }


def status_of(deployment: dict[str, Any] | None, leader: str = "node_1234", **kw: Any) -> Any:
    return build_status(
        {},
        generation=3,
        validity=kw.get("validity", VALID),
        applied=kw.get("applied", Applied("abc", "fast")),
        deployment=deployment,
        leader=leader,
        lock="ops/fast",
        now="2026-11-23T10:00:05Z",
    )


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_the_leader_is_the_holder_only_while_its_lease_runs() -> None:
    assert lease_leader(LEASE, RENEWED + 10) == "node_1234"
    assert lease_leader(LEASE, RENEWED + 16) == ""
    assert lease_leader({"spec": {}}, RENEWED) == ""
    assert lease_leader(None, RENEWED) == ""


def test_a_rolled_out_scheduler_with_a_leader_is_available() -> None:
    status = status_of(a_deployment())

    assert conditions(status) == {
        "Valid": ("True", "Valid"),
        "Available": ("True", "Leading"),
        "Progressing": ("True", "RolledOut"),
    }
    assert (status["readyReplicas"], status["leader"], status["configHash"]) == (
        1,
        "node_1234",
        "abc",
    )
    assert status["observedGeneration"] == 3


def test_ready_pods_without_a_leader_are_not_available() -> None:
    status = status_of(a_deployment(), leader="")

    available = next(c for c in status["conditions"] if c["type"] == "Available")
    assert (available["status"], available["reason"]) == ("False", "NoLeader")
    assert "none holds Lease ops/fast" in available["message"]


def test_pods_of_an_older_configuration_mean_the_rollout_is_in_progress() -> None:
    status = status_of(a_deployment(replicas=2, ready=2, updated=1, generation=2))

    assert conditions(status)["Progressing"] == ("True", "RollingOut")


def test_a_failed_apply_stops_progress_with_its_reason() -> None:
    applied = Applied("abc", "fast", failure="Deployment ops/fast exists", failure_reason="X")

    status = status_of(a_deployment(), applied=applied)

    assert conditions(status)["Progressing"] == ("False", "X")


def test_before_any_valid_spec_ran_there_is_no_configuration_to_show() -> None:
    invalid = Validity("False", "InvalidSpec", "spec.profiles[0]: bad")

    status = status_of(None, leader="", validity=invalid, applied=Applied())

    assert "configHash" not in status
    assert "schedulerNames" not in status
    assert conditions(status) == {
        "Valid": ("False", "InvalidSpec"),
        "Available": ("False", "NotDeployed"),
        "Progressing": ("True", "Deploying"),
    }


def test_the_first_resource_to_claim_a_scheduler_name_keeps_it() -> None:
    old = Claim("2026-11-01T00:00:00Z", "a/old", "fast")
    new = Claim("2026-11-02T00:00:00Z", "b/new", "fast")
    other = Claim("2026-11-02T00:00:00Z", "b/new", "other")
    claims = [old, new, other]

    assert names_taken_before(claims, [new, other]) == {"fast": "a/old"}
    assert names_taken_before(claims, [old]) == {}


def test_a_name_that_runs_is_never_taken_by_a_newcomer() -> None:
    # Created in the same second, and the newcomer's namespace/name sorts first.
    running = Claim("t", "b/first", "fast", running=True)
    newcomer = Claim("t", "a/second", "fast")

    assert names_taken_before([running, newcomer], [newcomer]) == {"fast": "b/first"}
    assert names_taken_before([running, newcomer], [running]) == {}


def test_without_a_running_claim_ties_go_by_namespace_and_name() -> None:
    first, second = Claim("t", "a/x", "n"), Claim("t", "b/y", "n")

    assert names_taken_before([first, second], [second]) == {"n": "a/x"}
    assert names_taken_before([first, second], [first]) == {}
