"""The judge pod that runs a custom image's kube-scheduler on a configuration, and how its
verdict is read back from the pod's status."""

from __future__ import annotations

from typing import Any

import pytest

from kubeherd.meta import iso_time
from kubeherd.scheduler.core.judge import (
    JUDGE_PATIENCE_SECONDS,
    MESSAGE_LIMIT,
    Outcome,
    judge_key,
    judge_pod,
    read_judgement,
    refusal_message,
    template_judge_key,
)
from kubeherd.scheduler.core.objects import deployment, scheduler_command
from kubeherd.scheduler.core.owner import Owner, selector_labels

OWNER = Owner("fast", "ops", "sp-uid")
IMAGE = "registry.example/kube-scheduler-plugins:v1"
SPEC: dict[str, Any] = {
    "profiles": [{"schedulerName": "fast"}],
    "nodeSelector": {"pool": "system"},
    "tolerations": [{"key": "dedicated", "operator": "Exists"}],
    "imagePullSecrets": ["registry-login"],
    "command": ["/bin/kube-scheduler", "--v=2"],
}
NOW = 1_800_000_000.0


def container(pod: dict[str, Any]) -> dict[str, Any]:
    (only,) = pod["spec"]["containers"]
    return dict(only)


def test_the_judge_runs_the_image_on_the_configurations_config_map_and_cannot_reach_the_api() -> (
    None
):
    pod = judge_pod(SPEC, OWNER, image=IMAGE, config_hash="abc123")

    judge = container(pod)
    assert judge["image"] == IMAGE
    assert judge["command"][:3] == [
        "/bin/kube-scheduler",
        "--v=2",
        "--config=/etc/kubernetes/kubeherd/config.yaml",
    ]
    # Its own flags come last, so that they win over the same flags in spec.command.
    assert judge["command"][3:] == [
        "--write-config-to=/dev/null",
        "--secure-port=0",
        "--master=http://127.0.0.1:1",
    ]
    assert pod["spec"]["volumes"] == [
        {"name": "config", "configMap": {"name": "fast-config-abc123"}}
    ]
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in pod["spec"]
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["activeDeadlineSeconds"] > 0
    assert judge["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert judge["resources"]["limits"]["memory"]


def test_the_judge_starts_where_and_as_the_scheduler_pods_would() -> None:
    pod = judge_pod(SPEC, OWNER, image=IMAGE, config_hash="abc123")
    scheduler = deployment(SPEC, OWNER, image=IMAGE, config_hash="abc123")["spec"]["template"]

    for field in ("nodeSelector", "tolerations", "imagePullSecrets", "securityContext"):
        assert pod["spec"][field] == scheduler["spec"][field], field
    assert container(pod)["securityContext"] == container(scheduler)["securityContext"]
    assert container(pod)["imagePullPolicy"] == container(scheduler)["imagePullPolicy"]


def test_a_judge_in_kube_system_gets_the_scheduler_pods_priority() -> None:
    owner = Owner("fast", "kube-system", "sp-uid")

    pod = judge_pod({"profiles": []}, owner, image=IMAGE, config_hash="abc123")

    assert pod["spec"]["priorityClassName"] == "system-cluster-critical"


def test_a_judge_is_owned_by_its_profile_and_is_not_counted_as_one_of_its_schedulers() -> None:
    pod = judge_pod(SPEC, OWNER, image=IMAGE, config_hash="abc123")

    metadata = pod["metadata"]
    assert metadata["ownerReferences"][0]["uid"] == "sp-uid"
    assert metadata["labels"]["kubeherd.io/schedulerprofile-uid"] == "sp-uid"
    assert metadata["labels"]["app.kubernetes.io/managed-by"] == "kubeherd"
    # The Deployment's selector (and so its budget and network policy) does not match a judge.
    assert not selector_labels(OWNER).items() <= metadata["labels"].items()


def test_one_judge_per_image_command_and_configuration() -> None:
    name = judge_pod(SPEC, OWNER, image=IMAGE, config_hash="abc123")["metadata"]["name"]

    assert name == judge_pod(SPEC, OWNER, image=IMAGE, config_hash="abc123")["metadata"]["name"]
    assert name.startswith("fast-judge-")
    others = {
        judge_pod(SPEC, OWNER, image=IMAGE, config_hash="def456")["metadata"]["name"],
        judge_pod(SPEC, OWNER, image=f"{IMAGE}.1", config_hash="abc123")["metadata"]["name"],
        judge_pod(
            {**SPEC, "command": ["/bin/kube-scheduler"]}, OWNER, image=IMAGE, config_hash="abc123"
        )["metadata"]["name"],
    }
    assert name not in others
    assert len(others) == 3


def test_a_deployment_running_the_configuration_needs_no_judge() -> None:
    running = deployment(SPEC, OWNER, image=IMAGE, config_hash="abc123")
    key = judge_key(IMAGE, scheduler_command(SPEC), "abc123")

    assert template_judge_key(running) == key
    assert template_judge_key(deployment(SPEC, OWNER, image=IMAGE, config_hash="def456")) != key
    assert template_judge_key(None) == ""


# What the kubelet reports. ---------------------------------------------------------------------

KLOG_REFUSAL = (
    "E0101 10:00:00.000000       1 options.go:205] The manifest file is empty, ignoring.\n"
    'E0101 10:00:00.100000       1 run.go:72] "command failed" err="initializing profiles: '
    'creating profile for scheduler name fast: initializing plugin \\"KubeherdNodeLabel\\": '
    'KubeherdNodeLabel args: unknown field \\"lable\\""\n'
)


def judge_status(phase: str, *, created: float = NOW, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "fast-judge-1", "creationTimestamp": iso_time(created)},
        "status": {"phase": phase, **status},
    }


def terminated(exit_code: int, reason: str = "Error", message: str = "") -> dict[str, Any]:
    state = {"terminated": {"exitCode": exit_code, "reason": reason, "message": message}}
    return {"containerStatuses": [{"name": "kube-scheduler", "state": state}]}


def waiting(reason: str, message: str) -> dict[str, Any]:
    state = {"waiting": {"reason": reason, "message": message}}
    return {"containerStatuses": [{"name": "kube-scheduler", "state": state}]}


def test_a_judge_that_succeeded_accepted_the_configuration() -> None:
    judgement = read_judgement(judge_status("Succeeded", **terminated(0, "Completed")), NOW)

    assert judgement.outcome is Outcome.ACCEPTED


def test_a_judge_that_exited_with_an_error_refused_in_kube_schedulers_own_words() -> None:
    pod = judge_status("Failed", **terminated(1, message=KLOG_REFUSAL))

    judgement = read_judgement(pod, NOW)

    assert judgement.outcome is Outcome.REFUSED
    assert judgement.message == (
        "initializing profiles: creating profile for scheduler name fast: initializing plugin "
        '"KubeherdNodeLabel": KubeherdNodeLabel args: unknown field "lable"'
    )


def test_a_panicking_plugin_refuses_too() -> None:
    log = "panic: assignment to entry in nil map\n\ngoroutine 1 [running]:\nmain.New(...)\n"

    judgement = read_judgement(judge_status("Failed", **terminated(2, message=log)), NOW)

    assert judgement.outcome is Outcome.REFUSED
    assert judgement.message == "panic: assignment to entry in nil map"


@pytest.mark.parametrize(
    ("status", "said"),
    [
        ({"reason": "DeadlineExceeded", **waiting("ImagePullBackOff", "pulling")}, "deadline"),
        (terminated(137, "OOMKilled"), "OOMKilled"),
        (terminated(128, "StartError", 'exec: "kube-scheduler": not found'), "not found"),
        (terminated(143, "Error"), "exit code 143"),
        ({"reason": "Evicted", "message": "The node was low on memory."}, "low on memory"),
    ],
)
def test_a_judge_stopped_from_outside_or_unable_to_start_has_not_judged(
    status: dict[str, Any], said: str
) -> None:
    judgement = read_judgement(judge_status("Failed", **status), NOW)

    assert judgement.outcome is Outcome.FAILED
    assert said in judgement.message


def test_a_judge_that_cannot_start_says_why_while_it_waits() -> None:
    pulling = judge_status("Pending", **waiting("ImagePullBackOff", 'Back-off pulling "x"'))
    unscheduled = judge_status(
        "Pending",
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 node(s) didn't match Pod's node selector.",
            }
        ],
    )

    assert read_judgement(pulling, NOW).outcome is Outcome.WAITING
    assert read_judgement(pulling, NOW).message == 'ImagePullBackOff: Back-off pulling "x"'
    assert "didn't match Pod's node selector" in read_judgement(unscheduled, NOW).message
    assert read_judgement(judge_status("Running"), NOW).message == ""


def test_a_judge_that_never_finishes_is_given_up_on() -> None:
    pod = judge_status("Pending", created=NOW - JUDGE_PATIENCE_SECONDS - 1)

    judgement = read_judgement(pod, NOW)

    assert judgement.outcome is Outcome.FAILED
    assert f"after {JUDGE_PATIENCE_SECONDS} s" in judgement.message


# kube-scheduler's words. ------------------------------------------------------------------------


def test_the_message_is_the_error_kube_scheduler_exits_with_unquoted() -> None:
    log = (
        'E1126 08:16:58 run.go:72] "command failed" err="scoringStrategy.type: Unsupported '
        'value: \\"Bad \\\\\\"quoted\\\\\\" é\\" \\u00e9\\x41\\t."'
    )

    assert (
        refusal_message(log)
        == 'scoringStrategy.type: Unsupported value: "Bad \\"quoted\\" é" éA\t.'
    )


def test_a_multi_line_error_is_kept_whole() -> None:
    log = 'E0101 run.go:72] "command failed" err=<\n\tfirst problem\n\tsecond problem\n >\n'

    assert refusal_message(log) == "first problem\nsecond problem"


def test_json_logging_and_flag_errors_are_read_too() -> None:
    json_log = '{"ts":1,"msg":"command failed","err":"profiles[0]: bad"}\n'
    flags = "Usage:\n  kube-scheduler [flags]\n\nError: unknown flag: --bogus\n"

    assert refusal_message(json_log) == "profiles[0]: bad"
    assert refusal_message(flags) == "unknown flag: --bogus"


def test_otherwise_the_last_line_and_never_more_than_the_limit() -> None:
    assert refusal_message("starting\nsomething odd happened\n\n") == "something odd happened"
    assert refusal_message("") == ""
    assert len(refusal_message("x" * 5000)) == MESSAGE_LIMIT
