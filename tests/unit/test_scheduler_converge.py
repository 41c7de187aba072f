"""The SchedulerProfile pass's pure plan: from what a pass read, which objects it applies and
deletes, which judge it starts, and the conditions and events that follow, with no API server
and no event loop (the controller scenarios run the same plan through the fake cluster)."""

from __future__ import annotations

from typing import Any

from kubeherd.scheduler.core.config import Lock
from kubeherd.scheduler.core.converge import plan_pass, settle
from kubeherd.scheduler.core.judge import Judgement, Outcome
from kubeherd.scheduler.core.judging import judged_by_image
from kubeherd.scheduler.core.model import ActOutcome, Given, JudgeBackoff, Listed, Removal
from kubeherd.scheduler.core.objects import CONFIG_HASH_ANNOTATION
from kubeherd.scheduler.core.owner import FINALIZER, OWNER_UID_LABEL
from kubeherd.scheduler.core.report import Seen, report
from kubeherd.scheduler.core.status import Applied, Running, Validity

OFFICIAL = "registry.k8s.io/kube-scheduler:v1.37.2"
CUSTOM = "registry.example/kube-scheduler-plugins:v1"
OURS = {OWNER_UID_LABEL: "sp-uid"}


def body(generation: int = 1, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "fast",
            "namespace": "ops",
            "uid": "sp-uid",
            "generation": generation,
            "finalizers": [FINALIZER],
        },
        "spec": {"profiles": [{"schedulerName": "fast"}], **spec},
    }


def given(profile: dict[str, Any] | None = None, **fields: Any) -> Given:
    values: dict[str, Any] = {
        "body": profile or body(),
        "now": 1000.0,
        "converging": True,
        "applied": Applied(),
        "running": Running(),
        "image": OFFICIAL,
        **fields,
    }
    return Given(**values)


def owned(kind: str, name: str, namespace: str | None = "ops", **rest: Any) -> dict[str, Any]:
    metadata = {"name": name, "uid": f"uid-{name}", "labels": dict(OURS)}
    if namespace:
        metadata["namespace"] = namespace
    return {"kind": kind, "metadata": metadata, **rest}


def test_a_valid_spec_applies_its_objects_with_the_deployment_last_and_is_valid() -> None:
    plan = plan_pass(given())

    kinds = [manifest["kind"] for manifest in plan.apply]
    assert kinds[0] == "ServiceAccount"
    assert kinds[-1] == "Deployment"
    assert "PodDisruptionBudget" not in kinds  # one replica: no budget
    assert plan.changes.validity == Validity(
        "True", "Valid", "the configuration passed kube-scheduler's checks"
    )
    assert plan.changes.rendered_hash == plan.config_hash
    assert plan.judge_start is None
    assert plan.changes.handled_generation is None

    changes, _ = settle(given(), plan, ActOutcome())
    assert changes.applied == Applied(plan.config_hash, "fast")
    assert changes.handled_generation == 1
    assert changes.reset_backoff


def test_the_finalizer_is_the_first_write_when_missing() -> None:
    profile = body()
    profile["metadata"]["finalizers"] = ["someone.else/keep"]

    plan = plan_pass(given(profile, converging=False))

    assert plan.finalizers == ["someone.else/keep", FINALIZER]
    assert plan_pass(given(converging=False)).finalizers is None


def test_objects_an_earlier_spec_needed_are_deleted_and_the_wanted_ones_kept() -> None:
    placed = [
        Listed("PodDisruptionBudget", owned("PodDisruptionBudget", "fast")),
        Listed(
            "ClusterRoleBinding", owned("ClusterRoleBinding", "kubeherd:ops:fast:extra:gone", None)
        ),
        Listed(
            "ClusterRoleBinding",
            owned("ClusterRoleBinding", "kubeherd:ops:fast:kube-scheduler", None),
        ),
    ]

    plan = plan_pass(given(placed=placed))

    assert plan.stale == [
        Removal("PodDisruptionBudget", "ops", "fast", "uid-fast"),
        Removal(
            "ClusterRoleBinding",
            None,
            "kubeherd:ops:fast:extra:gone",
            "uid-kubeherd:ops:fast:extra:gone",
        ),
    ]


def test_an_invalid_spec_is_refused_once_and_leaves_what_runs() -> None:
    profile = body(percentageOfNodesToScore=20)
    profile["spec"]["profiles"][0]["pluginConfig"] = [
        {"name": "DefaultPreemption", "args": {"minCandidateNodesPercentage": 101}}
    ]

    plan = plan_pass(given(profile, running=Running("abc", "fast")))

    assert plan.apply == []
    assert plan.stale == []
    validity = plan.changes.validity
    assert validity is not None
    assert (validity.status, validity.reason) == ("False", "InvalidSpec")
    assert validity.message.endswith("; configuration abc keeps running")
    assert [(e.reason, e.once) for e in plan.events] == [("InvalidSpec", True)]
    assert plan.changes.handled_generation == 1


def test_without_an_image_nothing_rolls_out_and_it_is_retried() -> None:
    plan = plan_pass(given(image=None, image_problem="reading the API server's /version failed"))

    assert plan.apply == []
    applied = plan.changes.applied
    assert applied is not None
    assert applied.failure_reason == "UnknownServerVersion"
    assert plan.changes.retry_with_backoff
    assert plan.changes.handled_generation is None


def test_a_refused_apply_keeps_what_was_applied_and_is_retried_without_pruning() -> None:
    before = Applied("old", "fast")
    seen = given(
        applied=before, placed=[Listed("PodDisruptionBudget", owned("PodDisruptionBudget", "fast"))]
    )
    plan = plan_pass(seen)

    changes, _ = settle(seen, plan, ActOutcome(apply_failure=("ApplyFailed", "quota")))

    assert changes.applied == Applied("old", "fast", failure="quota", failure_reason="ApplyFailed")
    assert changes.retry_with_backoff
    assert changes.handled_generation is None
    assert not changes.pruned


def test_a_custom_images_configuration_starts_a_judge_and_rolls_nothing_out() -> None:
    seen = given(body(image=CUSTOM), image=CUSTOM)
    plan = plan_pass(seen)

    start = plan.judge_start
    assert start is not None
    assert plan.apply == []
    assert start.config_map["kind"] == "ConfigMap"
    assert start.pod["metadata"]["name"] == judged_by_image(seen.body, CUSTOM)
    assert plan.changes.judging_hash == start.pod["metadata"]["annotations"][CONFIG_HASH_ANNOTATION]

    changes, events = settle(seen, plan, ActOutcome(judge_start_failure=""))
    assert changes.validity is not None
    assert changes.validity.reason == "Judging"
    assert [event.reason for event in events] == ["Judging"]
    assert changes.judge_pods_may_exist
    assert changes.retry_in == 2.0


def test_a_judge_pod_the_api_server_refuses_fails_with_its_words_and_backs_off() -> None:
    seen = given(body(image=CUSTOM), image=CUSTOM, judge_retry_in=4.0)
    plan = plan_pass(seen)

    changes, events = settle(
        seen, plan, ActOutcome(judge_start_failure="could not create pod x: quota")
    )

    assert changes.validity is not None
    assert changes.validity.reason == "JudgeFailed"
    assert "quota; trying again in 4 s" in changes.validity.message
    assert changes.judge_backoff is JudgeBackoff.NEXT
    assert changes.retry_in == 4.0
    assert [event.reason for event in events] == ["JudgeFailed"]


def test_a_judges_refusal_is_remembered_and_drops_its_config_map() -> None:
    profile = body(image=CUSTOM)
    name = judged_by_image(profile, CUSTOM)
    pod = owned("Pod", name)
    pod["status"] = {
        "phase": "Failed",
        "containerStatuses": [
            {
                "name": "kube-scheduler",
                "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": "Error: no"}},
            }
        ],
    }
    first = plan_pass(given(profile, image=CUSTOM))
    assert first.judge_start is not None
    config_map = owned("ConfigMap", first.judge_start.config_map["metadata"]["name"])

    plan = plan_pass(
        given(profile, image=CUSTOM, judge_pod=pod, judge_pods=[pod], config_maps=[config_map])
    )

    assert plan.changes.validity is not None
    assert plan.changes.validity.reason == "RefusedByImage"
    assert plan.changes.judge_verdict is not None
    assert plan.changes.judge_verdict[1] == Judgement(Outcome.REFUSED, "no")
    assert plan.removals == [Removal.of("Pod", pod), Removal.of("ConfigMap", config_map)]
    assert plan.apply == []
    assert plan.changes.handled_generation == 1


def test_a_configuration_judged_before_rolls_out_with_no_pod() -> None:
    profile = body(image=CUSTOM)
    start = plan_pass(given(profile, image=CUSTOM)).judge_start
    assert start is not None
    key = start.pod["metadata"]["labels"]["kubeherd.io/judge"]

    plan = plan_pass(given(profile, image=CUSTOM, verdicts={key: Judgement(Outcome.ACCEPTED)}))

    assert plan.judge_start is None
    assert plan.apply[-1]["kind"] == "Deployment"
    assert plan.changes.validity is not None
    assert plan.changes.validity.status == "True"


def rolled_out(config_hash: str) -> dict[str, Any]:
    template = {
        "metadata": {"annotations": {CONFIG_HASH_ANNOTATION: config_hash}},
        "spec": {
            "volumes": [{"name": "config", "configMap": {"name": f"fast-config-{config_hash}"}}]
        },
    }
    return {
        "metadata": {"name": "fast", "uid": "dep-uid", "generation": 2, "labels": dict(OURS)},
        "spec": {"replicas": 1, "template": template},
        "status": {
            "observedGeneration": 2,
            "replicas": 1,
            "updatedReplicas": 1,
            "availableReplicas": 1,
        },
    }


def test_once_a_rollout_is_over_unused_config_maps_go_and_the_specs_stays() -> None:
    old_rs = {
        "metadata": {"name": "fast-1", "ownerReferences": [{"uid": "dep-uid"}]},
        "spec": {"template": {"spec": {"volumes": [{"configMap": {"name": "fast-config-old"}}]}}},
    }
    config_maps = [owned("ConfigMap", f"fast-config-{h}") for h in ("new", "old", "gone", "spec")]

    plan = plan_pass(
        given(
            converging=False,
            applied=Applied("new", "fast"),
            rendered_hash="spec",
            deployment=rolled_out("new"),
            replica_sets=[old_rs],
            config_maps=config_maps,
        )
    )

    assert [removal.name for removal in plan.unused_config_maps] == ["fast-config-gone"]
    assert plan.changes.pruned
    assert plan.changes.pruned_shape == ("dep-uid", 2, "new")


def seen(**fields: Any) -> Seen:
    values: dict[str, Any] = {
        "body": body(),
        "validity": Validity("True", "Valid", "ok"),
        "applied": Applied("new", "fast"),
        "running": Running("old", "slow"),
        "converged": True,
        "deployment": rolled_out("new"),
        "running_names": "",
        "lock": Lock("kubeherd-fast", "ops"),
        "leader": "",
        "leader_is_ours": True,
        "now": 1000.0,
        **fields,
    }
    return Seen(**values)


def test_the_status_names_a_configuration_once_every_pod_runs_it() -> None:
    result = report(seen())

    assert result.running == Running("new", "fast")
    assert result.status is not None
    assert (result.status["configHash"], result.status["schedulerNames"]) == ("new", "fast")
    # An older one a rollout undo brought back: its names are its ConfigMap's.
    undone = report(seen(deployment=rolled_out("old0"), running_names="older"))
    assert undone.running == Running("old0", "older")


def test_the_report_names_a_new_leader_and_asks_again_for_a_deleted_deployment() -> None:
    profile = body()
    profile["status"] = {"leader": "fast-abc_1"}

    result = report(seen(body=profile, deployment=None))

    assert result.reconverge
    assert result.status is not None
    assert result.status["leader"] == ""
    assert [(event.type, event.reason) for event in result.events] == [("Warning", "NoLeader")]
