"""The SchedulerProfile status: whether the spec is valid, what runs, who leads. Pure.

Ready replicas and rollout progress come from the Deployment; the leader from the Lease the
schedulers elect on. A Lease nobody renewed within its duration has no leader: its holder is
gone, and the profiles' pods wait until another scheduler takes it. A holder that is not one of
the SchedulerProfile's pods is not its leader either: its schedulers stand by.

`configHash` and `schedulerNames` say what runs: the configuration of the Deployment's template
once every pod runs it and is available. Until then they keep naming the old one, which still
schedules, and Progressing says the new one is rolling out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubeherd.meta import condition, conditions_by_type, parse_time
from kubeherd.scheduler.core.objects import CONFIG_HASH_ANNOTATION


@dataclass(frozen=True)
class Validity:
    """The verdict on the current spec: (status, reason, message) of the Valid condition."""

    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class Running:
    """The configuration every scheduler pod runs: its hash and scheduler names ("" for none)."""

    config_hash: str = ""
    scheduler_names: str = ""


@dataclass(frozen=True)
class Applied:
    """What kubeherd last applied for the spec (it runs once the rollout is done), and why the
    last attempt failed (or "")."""

    config_hash: str = ""
    scheduler_names: str = ""
    failure: str = ""
    failure_reason: str = "ApplyFailed"


def lease_leader(lease: Mapping[str, Any] | None, now: float) -> str:
    """The Lease's holder while its lease runs, else ""."""
    spec = (lease or {}).get("spec") or {}
    holder = str(spec.get("holderIdentity") or "")
    renewed = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))
    duration = spec.get("leaseDurationSeconds")
    if not holder or renewed is None or duration is None:
        return ""
    return holder if now <= renewed + float(duration) else ""


def holder_hostname(holder: str) -> str:
    """kube-scheduler's identity is `<hostname>_<uuid>`, and a pod's hostname is its name."""
    return holder.rsplit("_", 1)[0]


def template_config_hash(deployment: Mapping[str, Any] | None) -> str:
    template = ((deployment or {}).get("spec") or {}).get("template") or {}
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(CONFIG_HASH_ANNOTATION) or "")


def rolled_out(deployment: Mapping[str, Any]) -> bool:
    """The Deployment controller saw the current template and every pod runs it, available; no
    pod of an older template is left."""
    spec = deployment.get("spec") or {}
    status = deployment.get("status") or {}
    wanted = int(spec.get("replicas", 1))
    generation = int((deployment.get("metadata") or {}).get("generation") or 0)
    return (
        int(status.get("observedGeneration") or 0) >= generation
        and int(status.get("updatedReplicas") or 0) >= wanted
        and int(status.get("availableReplicas") or 0) >= wanted
        and int(status.get("replicas") or 0) == wanted
    )


def running_config_hash(deployment: Mapping[str, Any] | None) -> str | None:
    """The configuration every pod runs, or None while a rollout is under way (the one reported
    before still runs) or there is no Deployment."""
    if deployment is None or not rolled_out(deployment):
        return None
    return template_config_hash(deployment)


def _deployment_condition(deployment: Mapping[str, Any], type_: str) -> Mapping[str, Any]:
    return conditions_by_type(deployment.get("status") or {}).get(type_, {})


def available(
    deployment: Mapping[str, Any] | None,
    leader: str,
    lock: str,
    *,
    leader_is_ours: bool = True,
    elects: bool = True,
) -> tuple[str, str, str]:
    if deployment is None:
        return ("False", "NotDeployed", "the scheduler Deployment does not exist yet")
    status = deployment.get("status") or {}
    wanted = int((deployment.get("spec") or {}).get("replicas", 1))
    ready = int(status.get("readyReplicas") or 0)
    if wanted == 0:
        return ("False", "ScaledToZero", "spec.replicas is 0: no scheduler runs")
    if ready == 0:
        return ("False", "NoReadyScheduler", f"0 of {wanted} scheduler pods are ready")
    if not elects:
        # One replica (the CRD allows no more without election) schedules on its own.
        return ("True", "Scheduling", f"{ready} of {wanted} scheduler pods are ready")
    if not leader:
        return (
            "False",
            "NoLeader",
            f"{ready} of {wanted} scheduler pods are ready, but none holds Lease {lock}",
        )
    if not leader_is_ours:
        return (
            "False",
            "LeaseHeldElsewhere",
            f"Lease {lock} is held by {leader}, which is not a pod of this SchedulerProfile: "
            f"its {ready} ready scheduler pods stand by while it holds it",
        )
    return ("True", "Leading", f"{ready} of {wanted} scheduler pods are ready; {leader} leads")


def progressing(
    deployment: Mapping[str, Any] | None, applied: Applied, running: Running, validity: Validity
) -> tuple[str, str, str]:
    if applied.failure:
        return ("False", applied.failure_reason, applied.failure)
    if validity.reason == "Judging":
        # The image has yet to accept the new configuration: nothing rolls until it does.
        return ("True", "Judging", validity.message)
    if deployment is None:
        if validity.status == "False":
            return ("False", validity.reason, "no scheduler is deployed until the spec is valid")
        return ("True", "Deploying", "creating the scheduler Deployment")
    stalled = _deployment_condition(deployment, "Progressing")
    if stalled.get("reason") == "ProgressDeadlineExceeded":
        return ("False", "ProgressDeadlineExceeded", str(stalled.get("message") or ""))
    template_hash = template_config_hash(deployment)
    if applied.config_hash and template_hash != applied.config_hash:
        # kubeherd applies a spec once: a template changed since (kubectl rollout undo) stays.
        return (
            "False",
            "RolledBack",
            f"the Deployment's template has configuration {template_hash}, not the spec's "
            f"{applied.config_hash} (kubectl rollout undo?): it stays until the "
            "SchedulerProfile's spec changes",
        )
    spec = deployment.get("spec") or {}
    status = deployment.get("status") or {}
    wanted = int(spec.get("replicas", 1))
    if not rolled_out(deployment):
        updated = int(status.get("updatedReplicas") or 0)
        available_now = int(status.get("availableReplicas") or 0)
        still = (
            f"configuration {running.config_hash} still runs"
            if running.config_hash and running.config_hash != template_hash
            else "no configuration runs on every pod yet"
        )
        return (
            "True",
            "RollingOut",
            f"configuration {template_hash}: {updated} of {wanted} scheduler pods updated, "
            f"{available_now} available; {still}",
        )
    return (
        "True",
        "RolledOut",
        f"configuration {template_hash} runs on {wanted} of {wanted} scheduler pods",
    )


def build_status(
    previous: Mapping[str, Any],
    *,
    generation: int,
    validity: Validity,
    applied: Applied,
    running: Running,
    deployment: Mapping[str, Any] | None,
    leader: str,
    lock: str,
    now: str,
    leader_is_ours: bool = True,
    elects: bool = True,
) -> dict[str, Any]:
    before = conditions_by_type(previous)
    deployment_status = (deployment or {}).get("status") or {}
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "replicas": int(deployment_status.get("replicas") or 0),
        "readyReplicas": int(deployment_status.get("readyReplicas") or 0),
        "leader": leader,
        "conditions": [
            condition(
                before,
                "Valid",
                validity.status,
                validity.reason,
                validity.message,
                generation,
                now,
            ),
            condition(
                before,
                "Available",
                *available(deployment, leader, lock, leader_is_ours=leader_is_ours, elects=elects),
                generation,
                now,
            ),
            condition(
                before,
                "Progressing",
                *progressing(deployment, applied, running, validity),
                generation,
                now,
            ),
        ],
    }
    # Until a configuration runs on every pod, there is none to show.
    if running.config_hash:
        status["configHash"] = running.config_hash
        status["schedulerNames"] = running.scheduler_names
    return status
