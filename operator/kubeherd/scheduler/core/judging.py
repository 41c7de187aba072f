"""A configuration no catalog covers (a custom image's, an official minor newer than every
catalog) is judged by the image itself before it rolls out: what a pass decides about its judge
pods (judge.py builds and reads them). A verdict given before, or the Deployment running the
configuration already, needs no pod; else a judge pod is started, looked at every
JUDGE_LOOK_INTERVAL until it judges, and one that fails is tried again after a doubling delay.
Its refusal is handled as an invalid spec's; while it judges, nothing rolls out. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubeherd.scheduler.core.catalog import image_catalog
from kubeherd.scheduler.core.config import configuration_hash, configuration_text
from kubeherd.scheduler.core.judge import (
    Judgement,
    Outcome,
    judge_key,
    judge_pod,
    judge_pod_name,
    read_judgement,
    template_judge_key,
)
from kubeherd.scheduler.core.model import (
    Changes,
    Event,
    Given,
    JudgeBackoff,
    JudgeFailure,
    JudgeStart,
    PassPlan,
    Removal,
)
from kubeherd.scheduler.core.objects import config_map, scheduler_command, scheduler_names
from kubeherd.scheduler.core.owner import OWNER_UID_LABEL, Owner
from kubeherd.scheduler.core.status import Validity

# How often a pass looks at a judge pod that has not given its verdict yet.
JUDGE_LOOK_INTERVAL = 2.0


def judged_by_image(body: Mapping[str, Any], image: str | None) -> str:
    """The judge pod the configuration needs (no catalog covers its image), else ""."""
    if image is None or image_catalog(image).catalog is not None:
        return ""
    spec: Mapping[str, Any] = body.get("spec") or {}
    owner = Owner.of(body)
    config_hash = configuration_hash(configuration_text(spec, owner.name, owner.namespace))
    return judge_pod_name(owner, judge_key(image, scheduler_command(spec), config_hash))


def keeps_running(given: Given) -> str:
    running = given.running.config_hash
    return f"; configuration {running} keeps running" if running else ""


def dismiss_judges(given: Given, plan: PassPlan) -> None:
    """Delete the resource's judge pods: they have given their verdicts, or judge
    configurations the spec no longer renders."""
    plan.dismissed = _judges_but(given, "")
    plan.removals += plan.dismissed
    plan.changes.judge_pods_may_exist = False
    plan.changes.judging_hash = ""


def _judges_but(given: Given, keep: str) -> list[Removal]:
    return [
        Removal.of("Pod", pod)
        for pod in given.judge_pods
        if pod["metadata"]["name"] != keep and not pod["metadata"].get("deletionTimestamp")
    ]


def judge(
    given: Given, plan: PassPlan, image: str, text: str, config_hash: str, *, why: str
) -> Judgement | None:
    """The image's verdict on the configuration: one given before, or its judge pod's, which is
    started if there is none (None: its verdict comes in a later pass). Without a verdict yet,
    Valid=Unknown says why (and `why` no catalog judges it), and the pass is planned again."""
    spec, owner = given.spec, given.owner
    key = judge_key(image, scheduler_command(spec), config_hash)
    known = given.verdicts.get(key)
    if known is None and template_judge_key(given.deployment) == key:
        # It runs already: judged when it was rolled out (before a restart of the operator,
        # or this edit of the spec changes nothing the scheduler runs).
        known = Judgement(Outcome.ACCEPTED)
    if known is not None:
        if given.judge_pods_may_exist:
            dismiss_judges(given, plan)
        return known
    name = judge_pod_name(owner, key)
    what = f"kube-scheduler of image {image}"
    failure = JudgeFailure(what, config_hash, name, keeps_running(given), given.judge_retry_in)
    pod = given.judge_pod
    if pod is None:
        plan.changes.judging_hash = config_hash
        plan.judge_start = JudgeStart(
            config_map(owner, text, config_hash, scheduler_names(spec)),
            _judges_but(given, name),
            judge_pod(spec, owner, image=image, config_hash=config_hash),
            f"{what} judges configuration {config_hash} in pod {name}",
            failure,
        )
        return None
    labels = pod["metadata"].get("labels") or {}
    if labels.get(OWNER_UID_LABEL) != owner.uid:
        judgement = Judgement(
            Outcome.FAILED, f"pod {name} exists and is not this SchedulerProfile's"
        )
        pod = None
    elif pod["metadata"].get("deletionTimestamp"):
        judgement = Judgement(Outcome.WAITING, "the previous judge pod is being deleted")
    else:
        judgement = read_judgement(pod, given.now)
    if not judgement.final:
        if judgement.outcome is Outcome.FAILED and pod is not None:
            plan.removals.append(Removal.of("Pod", pod))
        unjudged(plan.changes, plan.events, judgement, failure, why=why)
        return None
    plan.changes.judge_verdict = (key, judgement)
    plan.changes.judge_backoff = JudgeBackoff.RESET
    dismiss_judges(given, plan)
    if judgement.outcome is Outcome.REFUSED:
        _drop_config(given, plan, config_hash)
    else:
        plan.events.append(
            Event("Normal", "AcceptedByImage", f"{what} accepted configuration {config_hash}")
        )
    return judgement


def unjudged(
    changes: Changes,
    events: list[Event],
    judgement: Judgement,
    failure: JudgeFailure,
    *,
    why: str = "",
) -> None:
    """A judge that failed (tried again after a doubling delay), or has not judged yet (looked
    at again in a moment): Valid=Unknown says which."""
    if judgement.outcome is Outcome.FAILED:
        message = (
            f"{failure.what} could not judge configuration {failure.config_hash} "
            f"(pod {failure.name}): {judgement.message}; trying again in "
            f"{failure.retry_in:.0f} s"
        )
        events.append(Event("Warning", "JudgeFailed", message))
        changes.validity = Validity("Unknown", "JudgeFailed", message + failure.keeps)
        changes.judge_backoff = JudgeBackoff.NEXT
        changes.retry_in = failure.retry_in
        return
    message = f"{failure.what} is judging configuration {failure.config_hash} in pod {failure.name}"
    if judgement.message:
        message += f", which cannot run yet: {judgement.message}"
        events.append(Event("Warning", "JudgeCannotRun", message, once=True))
    if why:
        message += f" ({why})"
    changes.validity = Validity("Unknown", "Judging", message + failure.keeps)
    changes.retry_in = JUDGE_LOOK_INTERVAL


def _drop_config(given: Given, plan: PassPlan, config_hash: str) -> None:
    """A refused configuration's ConfigMap goes now, unless something mounts or needs it (with
    a Deployment, the pruning of every unused ConfigMap says which)."""
    if given.deployment is not None:
        return
    if config_hash in (given.applied.config_hash, given.rendered_hash):
        return
    name = given.owner.config_map(config_hash)
    plan.removals += [
        Removal.of("ConfigMap", existing)
        for existing in given.config_maps or ()
        if existing["metadata"]["name"] == name
    ]
