"""One pass over a SchedulerProfile, decided from what the pass read. Pure.

The pass reads (shell/gather.py), `plan_pass` decides, one act sends every write (shell/act.py),
and `settle` reads the act's answers into what the controller keeps (the data they hand on is
model.py's). What a plan decides:
- a converge, on a new generation (and once at start) or when its retry is due: the verdict
  (verdict.py) under the catalog of the image's minor; nothing when the image is not known (the
  API server's version unread), retried; for an invalid spec Valid=False and a Warning, nothing
  running touched; for a configuration no catalog judges, the image's own judge pod (judging.py),
  whose acceptance alone lets it roll out; for a valid spec, the objects to apply in order (act
  writes only those missing or changed) and, once they are, the objects an earlier spec needed
  and this one does not;
- the ConfigMaps neither the Deployment nor any of its ReplicaSets mounts (nor the spec's), once
  a rollout is over, after a converge, and at most every CONFIG_MAP_PRUNE_INTERVAL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubeherd.scheduler.core.catalog import CatalogChoice, image_catalog
from kubeherd.scheduler.core.config import configuration_hash, configuration_text, lease_lock
from kubeherd.scheduler.core.judge import Judgement, Outcome
from kubeherd.scheduler.core.judging import dismiss_judges, judge, keeps_running, unjudged
from kubeherd.scheduler.core.model import (
    ActOutcome,
    Changes,
    Event,
    Given,
    PassPlan,
    Removal,
)
from kubeherd.scheduler.core.objects import config_maps_in_use, owned_objects, scheduler_names
from kubeherd.scheduler.core.owner import FINALIZER
from kubeherd.scheduler.core.status import Applied, Validity, running_config_hash
from kubeherd.scheduler.core.verdict import profile_verdict

# The Deployment controller deletes ReplicaSets beyond its history a sync after a rollout ends,
# which changes nothing kubeherd watches: their ConfigMaps are looked at again this often.
CONFIG_MAP_PRUNE_INTERVAL = 60.0
VALID = Validity("True", "Valid", "the configuration passed kube-scheduler's checks")


def config_map_prune_due(given: Given) -> bool:
    """Whether the pass prunes ConfigMaps: after a converge, once a rollout is over, and at
    most every CONFIG_MAP_PRUNE_INTERVAL (then a ReplicaSet beyond the history may be gone)."""
    if given.deployment is None:
        return given.converging
    if given.converging:
        return True
    shape = _rollout_shape(given.deployment)
    due = given.now - given.pruned_at >= CONFIG_MAP_PRUNE_INTERVAL
    return shape is not None and (shape != given.pruned_shape or due)


def _generation(given: Given) -> int:
    return int(given.body["metadata"].get("generation", 0))


def plan_pass(given: Given) -> PassPlan:
    plan = PassPlan()
    finalizers = list(given.body["metadata"].get("finalizers") or [])
    if FINALIZER not in finalizers:
        plan.finalizers = [*finalizers, FINALIZER]
    if given.converging:
        _converge(given, plan)
    _prune_config_maps(given, plan)
    return plan


def _converge(given: Given, plan: PassPlan) -> None:
    body, spec, owner, image = given.body, given.spec, given.owner, given.image
    changes = plan.changes
    if image is None:
        changes.applied = Applied(
            given.applied.config_hash,
            given.applied.scheduler_names,
            failure=f"{given.image_problem}: no kube-scheduler image to run (set spec.image); "
            "retrying",
            failure_reason="UnknownServerVersion",
        )
        changes.retry_with_backoff = True
    # The checks are those of the minor of the image that runs: its catalog, or none (a custom
    # image, a minor newer than every catalog), or a refusal (an older minor).
    choice = image_catalog(image) if image is not None else CatalogChoice(None)
    plan.verdict = verdict = profile_verdict(body, given.claims, choice)
    if image is None and verdict.valid:
        return  # which minor judges it is not known yet: retried
    plan.events += [
        Event("Warning", "UnverifiedPlugin", str(w), once=True) for w in verdict.warnings
    ]
    if image is None or not verdict.valid:  # (an unknown image's verdict is invalid here)
        if given.judge_pods_may_exist:
            dismiss_judges(given, plan)
        _refuse(given, plan, "InvalidSpec", verdict.summary())
        return
    text = configuration_text(spec, owner.name, owner.namespace)
    config_hash = configuration_hash(text)
    if verdict.judge_by_image:
        judgement = judge(given, plan, image, text, config_hash, why=verdict.by_image)
        if judgement is not None and judgement.outcome is Outcome.REFUSED:
            _refuse(
                given,
                plan,
                "RefusedByImage",
                f"kube-scheduler of image {image} refused configuration {config_hash}: "
                f"{judgement.message}",
            )
            return
        if judgement is None or judgement.outcome is not Outcome.ACCEPTED:
            return  # no verdict yet: the validity says why, and a pass looks again
        changes.validity = Validity(
            "True", "Valid", f"kube-scheduler of image {image} accepted the configuration"
        )
    else:
        if given.judge_pods_may_exist:
            dismiss_judges(given, plan)
        changes.validity = VALID
    changes.rendered_hash = config_hash
    plan.config_hash = config_hash
    plan.apply = owned_objects(
        spec,
        owner,
        lease_lock(spec, owner.name, owner.namespace),
        image=image,
        configuration_text=text,
        config_hash=config_hash,
    )
    wanted = {
        (m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"]) for m in plan.apply
    }
    plan.stale = [
        Removal.of(listed.kind, listed.body)
        for listed in given.placed
        if (listed.kind, listed.body["metadata"].get("namespace"), listed.body["metadata"]["name"])
        not in wanted
    ]


def _rollout_shape(deployment: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """The Deployment's uid, generation and the configuration every pod runs; None while a
    rollout is under way."""
    running_hash = running_config_hash(deployment)
    if running_hash is None:
        return None
    metadata = deployment["metadata"]
    return (metadata.get("uid"), metadata.get("generation"), running_hash)


def _prune_config_maps(given: Given, plan: PassPlan) -> None:
    """Delete the ConfigMaps that neither the Deployment nor any of its ReplicaSets mounts (nor
    the spec's, which a Deployment not yet synced may not show). A ReplicaSet kept in the
    history keeps its configuration, for `kubectl rollout undo`."""
    deployment = given.deployment
    if deployment is None or given.config_maps is None or not config_map_prune_due(given):
        return
    owned_by_it = [
        replica_set
        for replica_set in given.replica_sets
        if any(
            reference.get("uid") == deployment["metadata"]["uid"]
            for reference in replica_set["metadata"].get("ownerReferences") or []
        )
    ]
    templates = [
        (item.get("spec") or {}).get("template") or {} for item in [deployment, *owned_by_it]
    ]
    in_use = config_maps_in_use(templates)
    changes = plan.changes
    # The spec's, even before the Deployment names it (its apply may fail).
    kept = (
        given.applied.config_hash,
        changes.rendered_hash if changes.rendered_hash is not None else given.rendered_hash,
        changes.judging_hash if changes.judging_hash is not None else given.judging_hash,
    )
    in_use |= {given.owner.config_map(h) for h in kept if h}
    plan.unused_config_maps = [
        Removal.of("ConfigMap", existing)
        for existing in given.config_maps
        if existing["metadata"]["name"] not in in_use
    ]
    changes.pruned = True
    changes.pruned_shape = _rollout_shape(deployment) or given.pruned_shape


def settle(given: Given, plan: PassPlan, outcome: ActOutcome) -> tuple[Changes, list[Event]]:
    """The plan's changes, completed with what its writes came to."""
    changes, events = plan.changes, list(plan.events)
    if plan.dismissed is not None:
        # Judge pods that would not go may still exist.
        changes.judge_pods_may_exist = not outcome.dismissed_all
    start = plan.judge_start
    if start is not None and outcome.judge_start_failure is not None:
        if not outcome.judge_config_map_refused:
            changes.judge_pods_may_exist = True  # the judge started, or a pod of its name is there
        if outcome.judge_start_failure:
            judgement = Judgement(Outcome.FAILED, outcome.judge_start_failure)
        else:
            judgement = Judgement(Outcome.WAITING)
            events.append(Event("Normal", "Judging", start.announcement))
        why = plan.verdict.by_image if plan.verdict is not None else ""
        unjudged(changes, events, judgement, start.failure, why=why)
    if plan.apply:
        if outcome.apply_failure is not None:
            reason, message = outcome.apply_failure
            applied = changes.applied or given.applied
            changes.applied = Applied(
                applied.config_hash,
                applied.scheduler_names,
                failure=message,
                failure_reason=reason,
            )
            changes.retry_with_backoff = True
            # What was not pruned for it is pruned on the next pass.
            changes.pruned, changes.pruned_shape = False, None
        else:
            changes.applied = Applied(plan.config_hash, scheduler_names(given.spec))
            changes.handled_generation = _generation(given)
            changes.reset_backoff = True
    return changes, events


def _refuse(given: Given, plan: PassPlan, reason: str, message: str) -> None:
    """Valid=False and a Warning: nothing already running is touched."""
    message += keeps_running(given)
    plan.changes.validity = Validity("False", reason, message)
    plan.events.append(Event("Warning", reason, message, once=True))
    plan.changes.handled_generation = _generation(given)
