"""The controller and its judge pods, in virtual time against the in-memory API server: a custom
image's configuration rolls out only once that image's kube-scheduler accepted it, its refusal
leaves the running scheduler alone, and a judge that cannot run rolls nothing out."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from kubeherd.kube.kinds import Kind
from kubeherd.kube.outcomes import Outcome
from kubeherd.scheduler.core.judge import JUDGE_LABEL
from kubeherd.scheduler.core.objects import CONFIG_HASH_ANNOTATION
from tests.unit.test_scheduler_controller import (
    FakeKube,
    Profiles,
    config_maps,
    finish_rollout,
    named,
    started,
)
from tests.unit.virtual_time import run_virtually, wall_clock_iso

IMAGE = "registry.example/kube-scheduler-plugins:v1"
REFUSAL = (
    'E0101 10:00:00.100000       1 run.go:72] "command failed" err="initializing profiles: '
    'creating profile for scheduler name fast: initializing plugin \\"KubeherdNodeLabel\\": '
    'KubeherdNodeLabel args: unknown field \\"lable\\""\n'
)


class JudgingKube(FakeKube):
    """The in-memory API server, which also creates pods (as Pending, as the API server does)."""

    def __init__(self) -> None:
        super().__init__()
        self.created: list[str] = []
        self.version = "v1.37.2"

    async def server_version(self) -> str:
        return self.version

    async def create_object(self, kind: Kind, manifest: dict[str, Any]) -> Outcome:
        name = manifest["metadata"]["name"]
        self.writes.append(("create", kind.kind, name))
        refused = self.refused("create")
        if refused is not None:
            return refused
        namespace = manifest["metadata"].get("namespace")
        if (kind.kind, namespace, name) in self.objects:
            return Outcome(409, "already exists")
        body = copy.deepcopy(manifest)
        body["metadata"]["creationTimestamp"] = wall_clock_iso()
        body["status"] = {"phase": "Pending"}
        self.put(kind.kind, namespace, body)
        self.created.append(name)
        return Outcome(201)

    def judges(self) -> list[dict[str, Any]]:
        return [
            body
            for (kind, _, _), body in self.objects.items()
            if kind == "Pod" and JUDGE_LABEL in (body["metadata"].get("labels") or {})
        ]

    def judge(self) -> dict[str, Any]:
        (only,) = self.judges()
        return only

    def judge_ends(self, exit_code: int, message: str = "", **status: Any) -> None:
        terminated = {
            "exitCode": exit_code,
            "reason": "Completed" if exit_code == 0 else "Error",
            "message": message,
        }
        self.judge()["status"] = {
            "phase": "Succeeded" if exit_code == 0 else "Failed",
            "containerStatuses": [{"name": "kube-scheduler", "state": {"terminated": terminated}}],
            **status,
        }

    def judge_waits(self, reason: str, message: str) -> None:
        waiting = {"reason": reason, "message": message}
        self.judge()["status"] = {
            "phase": "Pending",
            "containerStatuses": [{"name": "kube-scheduler", "state": {"waiting": waiting}}],
        }

    def template_hash(self) -> str:
        deployment = self.objects[("Deployment", "ops", "fast")]
        return str(
            deployment["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH_ANNOTATION]
        )

    def valid(self) -> tuple[str, str, str]:
        valid = self.condition("fast", "Valid")
        return (valid.get("status", ""), valid.get("reason", ""), valid.get("message", ""))


def custom(generation: int = 1, **spec: Any) -> dict[str, Any]:
    body = named("fast", image=IMAGE, **spec)
    body["metadata"]["generation"] = generation
    return body


def test_a_custom_images_configuration_rolls_out_once_the_image_accepted_it() -> None:
    kube, profiles = JudgingKube(), Profiles()

    async def scenario() -> None:
        controller = started(kube, profiles, custom())
        await asyncio.sleep(1)
        judge = kube.judge()
        judged = judge["metadata"]["annotations"][CONFIG_HASH_ANNOTATION]
        assert judge["spec"]["containers"][0]["image"] == IMAGE
        # It reads the configuration's own ConfigMap; nothing else is applied yet.
        assert config_maps(kube) == {f"fast-config-{judged}"}
        assert ("Deployment", "ops", "fast") not in kube.objects
        assert kube.valid()[:2] == ("Unknown", "Judging")
        assert "Judging" in kube.reasons("fast")

        kube.judge_ends(0)
        await asyncio.sleep(3)
        assert kube.template_hash() == judged
        assert kube.valid()[:2] == ("True", "Valid")
        assert IMAGE in kube.valid()[2]
        assert kube.judges() == []
        assert "AcceptedByImage" in kube.reasons("fast")
        await controller.stop()

    run_virtually(scenario)


def test_a_refusal_by_the_image_is_valid_false_and_the_running_scheduler_stays() -> None:
    kube, profiles = JudgingKube(), Profiles()

    async def scenario() -> None:
        controller = started(kube, profiles, custom())
        await asyncio.sleep(1)
        kube.judge_ends(0)
        await asyncio.sleep(3)
        finish_rollout(kube)
        await asyncio.sleep(6)
        running = kube.template_hash()
        deployment = copy.deepcopy(kube.objects[("Deployment", "ops", "fast")])

        edited = custom(generation=2, percentageOfNodesToScore=30)
        profiles.bodies["fast"] = edited
        controller.profile_changed(edited)
        await asyncio.sleep(1)
        refused = kube.judge()["metadata"]["annotations"][CONFIG_HASH_ANNOTATION]
        kube.judge_ends(1, REFUSAL)
        await asyncio.sleep(3)

        status, reason, message = kube.valid()
        assert (status, reason) == ("False", "RefusedByImage")
        assert f"kube-scheduler of image {IMAGE} refused configuration {refused}" in message
        assert 'KubeherdNodeLabel args: unknown field "lable"' in message
        assert f"configuration {running} keeps running" in message
        assert kube.reasons("fast").count("RefusedByImage") == 1
        assert kube.objects[("Deployment", "ops", "fast")] == deployment
        assert kube.status_of["fast"]["configHash"] == running
        assert kube.judges() == []
        # Its ConfigMap is gone; the running one stays.
        assert config_maps(kube) == {f"fast-config-{running}"}

        # Looked at again (another profile freed a name): the verdict is remembered.
        controller._recheck_refused(("ops", "other"))
        await asyncio.sleep(3)
        assert len(kube.created) == 2
        assert kube.valid()[:2] == ("False", "RefusedByImage")
        await controller.stop()

    run_virtually(scenario)


def test_a_first_configuration_the_image_refuses_leaves_nothing_behind() -> None:
    kube, profiles = JudgingKube(), Profiles()

    async def scenario() -> None:
        controller = started(kube, profiles, custom())
        await asyncio.sleep(1)
        kube.judge_ends(1, REFUSAL)
        await asyncio.sleep(3)
        await controller.stop()

    run_virtually(scenario)
    assert kube.valid()[:2] == ("False", "RefusedByImage")
    assert "keeps running" not in kube.valid()[2]
    assert not [key for key in kube.objects if key[0] in ("ConfigMap", "Pod", "Deployment")]


def test_a_judge_that_cannot_run_rolls_nothing_out_says_why_and_is_tried_again() -> None:
    kube, profiles = JudgingKube(), Profiles()

    async def scenario() -> None:
        controller = started(kube, profiles, custom())
        await asyncio.sleep(1)
        kube.judge_waits("ImagePullBackOff", f'Back-off pulling image "{IMAGE}"')
        await asyncio.sleep(3)
        status, reason, message = kube.valid()
        assert (status, reason) == ("Unknown", "Judging")
        assert "cannot run yet: ImagePullBackOff" in message
        assert kube.reasons("fast").count("JudgeCannotRun") == 1

        kube.judge_ends(137, reason="DeadlineExceeded")
        await asyncio.sleep(0.5)
        status, reason, message = kube.valid()
        assert (status, reason) == ("Unknown", "JudgeFailed")
        assert "its deadline" in message
        assert "JudgeFailed" in kube.reasons("fast")
        assert kube.judges() == []
        assert ("Deployment", "ops", "fast") not in kube.objects

        # Tried again after the backoff, with a new judge pod of the same name.
        await asyncio.sleep(1)
        assert len(kube.created) == 2
        assert kube.valid()[:2] == ("Unknown", "Judging")
        kube.judge_ends(0)
        await asyncio.sleep(3)
        assert kube.valid()[:2] == ("True", "Valid")
        assert ("Deployment", "ops", "fast") in kube.objects
        await controller.stop()

    run_virtually(scenario)


def test_a_judge_pod_the_api_server_refuses_is_reported_with_its_message() -> None:
    kube, profiles = JudgingKube(), Profiles()
    kube.refusals["create"] = [Outcome(403, "exceeded quota: compute, requested: pods=1")]

    async def scenario() -> None:
        controller = started(kube, profiles, custom())
        await asyncio.sleep(0.5)
        status, reason, message = kube.valid()
        assert (status, reason) == ("Unknown", "JudgeFailed")
        assert "exceeded quota: compute" in message
        await asyncio.sleep(3)
        assert len(kube.created) == 1  # the retry
        await controller.stop()

    run_virtually(scenario)


def test_an_official_image_newer_than_every_catalog_is_judged_by_a_pod() -> None:
    kube, profiles = JudgingKube(), Profiles()
    kube.version = "v1.99.1"

    async def scenario() -> None:
        controller = started(kube, profiles, named("fast"))
        await asyncio.sleep(1)
        judge = kube.judge()
        assert judge["spec"]["containers"][0]["image"] == "registry.k8s.io/kube-scheduler:v1.99.1"
        status, reason, message = kube.valid()
        assert (status, reason) == ("Unknown", "Judging")
        assert "Kubernetes 1.99, newer than the minors" in message
        kube.judge_ends(0)
        await asyncio.sleep(3)
        await controller.stop()

    run_virtually(scenario)
    assert kube.valid()[:2] == ("True", "Valid")
    assert ("Deployment", "ops", "fast") in kube.objects


def test_official_images_are_judged_by_the_catalog_never_by_a_pod() -> None:
    kube, profiles = JudgingKube(), Profiles()
    valid = named("fast")
    invalid = named("slow")
    invalid["spec"]["profiles"][0]["pluginConfig"] = [
        {"name": "DefaultPreemption", "args": {"minCandidateNodesPercentage": 101}}
    ]

    async def scenario() -> None:
        controller = started(kube, profiles, valid, invalid)
        await asyncio.sleep(3)
        await controller.stop()

    run_virtually(scenario)
    assert kube.created == []
    assert kube.condition("slow", "Valid")["reason"] == "InvalidSpec"
    assert ("Deployment", "ops", "fast") in kube.objects


def test_a_restarted_operator_does_not_judge_what_the_deployment_runs_already() -> None:
    kube, profiles = JudgingKube(), Profiles()

    async def scenario() -> None:
        first = started(kube, profiles, custom())
        await asyncio.sleep(1)
        kube.judge_ends(0)
        await asyncio.sleep(3)
        await first.stop()
        applied = len([w for w in kube.writes if w[0] == "apply"])

        restarted = started(kube, Profiles(), custom())
        await asyncio.sleep(3)
        await restarted.stop()
        assert len(kube.created) == 1
        assert len([w for w in kube.writes if w[0] == "apply"]) == applied
        assert kube.valid()[:2] == ("True", "Valid")

    run_virtually(scenario)


def test_an_edit_while_a_judge_runs_replaces_it() -> None:
    kube, profiles = JudgingKube(), Profiles()

    async def scenario() -> None:
        controller = started(kube, profiles, custom())
        await asyncio.sleep(1)
        first = kube.judge()["metadata"]["name"]

        edited = custom(generation=2, percentageOfNodesToScore=30)
        controller.profile_changed(edited)
        await asyncio.sleep(1)
        assert [judge["metadata"]["name"] for judge in kube.judges()] != [first]
        assert len(kube.judges()) == 1
        await controller.stop()

    run_virtually(scenario)


def test_judge_pods_go_with_their_profile() -> None:
    kube, profiles = JudgingKube(), Profiles()
    body = custom()

    async def scenario() -> None:
        controller = started(kube, profiles, body)
        await asyncio.sleep(1)
        assert len(kube.judges()) == 1
        deleting = copy.deepcopy(body)
        deleting["metadata"].update(
            finalizers=["kubeherd.io/scheduler-cleanup"],
            deletionTimestamp="2026-01-01T00:01:00Z",
        )
        controller.profile_changed(deleting)
        await asyncio.sleep(1)
        await controller.stop()

    run_virtually(scenario)
    assert kube.judges() == []
