"""The SchedulerProfile status, from plain Deployment and Lease data."""

from __future__ import annotations

from typing import Any

from kubeherd.scheduler.core.claims import Claim, names_taken_before
from kubeherd.scheduler.core.status import (
    Applied,
    Running,
    Validity,
    build_status,
    holder_hostname,
    lease_leader,
    running_config_hash,
)

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
    replicas: int = 1,
    ready: int = 1,
    updated: int = 1,
    generation: int = 1,
    config_hash: str = "abc",
    pods: int | None = None,
    observed: int | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {"generation": generation},
        "spec": {
            "replicas": replicas,
            "template": {"metadata": {"annotations": {"kubeherd.io/config-hash": config_hash}}},
        },
        "status": {
            "observedGeneration": generation if observed is None else observed,
            "replicas": replicas if pods is None else pods,
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
        running=kw.get("running", Running("abc", "fast")),
        deployment=deployment,
        leader=leader,
        lock="ops/fast",
        now="2026-11-23T10:00:05Z",
        leader_is_ours=kw.get("leader_is_ours", True),
        elects=kw.get("elects", True),
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

    status = status_of(None, leader="", validity=invalid, applied=Applied(), running=Running())

    assert "configHash" not in status
    assert "schedulerNames" not in status
    assert conditions(status) == {
        "Valid": ("False", "InvalidSpec"),
        "Available": ("False", "NotDeployed"),
        "Progressing": ("False", "InvalidSpec"),
    }


def test_a_first_configuration_is_deployed_once_valid() -> None:
    status = status_of(None, leader="", applied=Applied(), running=Running())

    assert conditions(status)["Progressing"] == ("True", "Deploying")


def test_while_the_image_judges_a_configuration_progress_says_so() -> None:
    judging = Validity("Unknown", "Judging", "the image is judging configuration abc in pod x")

    first = status_of(None, leader="", validity=judging, applied=Applied(), running=Running())
    next_one = status_of(a_deployment(), validity=judging)

    assert conditions(first)["Progressing"] == ("True", "Judging")
    assert conditions(next_one)["Progressing"] == ("True", "Judging")
    assert conditions(next_one)["Available"] == ("True", "Leading")


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


def test_a_configuration_runs_only_once_every_pod_has_it_and_is_available() -> None:
    assert running_config_hash(a_deployment(config_hash="new")) == "new"
    assert running_config_hash(None) is None
    # The Deployment controller has not seen the new template yet.
    assert running_config_hash(a_deployment(generation=2, observed=1)) is None
    # A new pod is not available yet, or an old one is still there.
    assert running_config_hash(a_deployment(replicas=2, ready=1, updated=2)) is None
    assert running_config_hash(a_deployment(replicas=2, ready=2, updated=1)) is None
    assert running_config_hash(a_deployment(replicas=1, ready=1, updated=1, pods=2)) is None


def test_while_the_new_configuration_rolls_out_the_status_names_the_old_one() -> None:
    rolling = a_deployment(replicas=1, ready=1, updated=0, generation=2, config_hash="new")

    status = status_of(
        rolling, applied=Applied("new", "fast, slow"), running=Running("old", "fast")
    )

    assert (status["configHash"], status["schedulerNames"]) == ("old", "fast")
    progressing = next(c for c in status["conditions"] if c["type"] == "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("True", "RollingOut")
    assert progressing["message"].startswith("configuration new: 0 of 1 scheduler pods updated")
    assert progressing["message"].endswith("configuration old still runs")


def test_a_template_rolled_back_from_the_spec_is_reported_and_left_alone() -> None:
    undone = a_deployment(generation=3, config_hash="old")

    status = status_of(undone, applied=Applied("new", "fast"), running=Running("old", "fast"))

    assert status["configHash"] == "old"
    progressing = next(c for c in status["conditions"] if c["type"] == "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("False", "RolledBack")
    assert "configuration old, not the spec's new" in progressing["message"]


def test_a_holder_that_is_not_one_of_its_pods_is_not_its_leader() -> None:
    status = status_of(a_deployment(), leader="kube-master_1234", leader_is_ours=False)

    available = next(c for c in status["conditions"] if c["type"] == "Available")
    assert (available["status"], available["reason"]) == ("False", "LeaseHeldElsewhere")
    assert "held by kube-master_1234, which is not a pod of this" in available["message"]


def test_the_holders_hostname_is_what_comes_before_kube_schedulers_uuid() -> None:
    assert holder_hostname("fast-7d9c8b7f6-x2x9z_8b1c2d3e-aaaa-bbbb") == "fast-7d9c8b7f6-x2x9z"
    assert holder_hostname("a_b_c") == "a_b"
    assert holder_hostname("plain") == "plain"


def test_a_scheduler_without_leader_election_is_available_once_ready() -> None:
    status = status_of(a_deployment(), leader="", elects=False)

    assert conditions(status)["Available"] == ("True", "Scheduling")
    assert conditions(status_of(a_deployment(ready=0), leader="", elects=False))["Available"] == (
        "False",
        "NoReadyScheduler",
    )
