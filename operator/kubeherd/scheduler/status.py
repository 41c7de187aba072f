"""The SchedulerProfile status: whether the spec is valid, what runs, who leads. Pure.

Ready replicas and rollout progress come from the Deployment; the leader from the Lease the
schedulers elect on. A Lease nobody renewed within its duration has no leader: its holder is
gone, and the profiles' pods wait until another scheduler takes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubeherd.meta import condition, conditions_by_type, parse_time


@dataclass(frozen=True)
class Validity:
    """The verdict on the current spec: (status, reason, message) of the Valid condition."""

    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class Applied:
    """What kubeherd last rolled out, and why the last attempt failed (or "")."""

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


def _deployment_condition(deployment: Mapping[str, Any], type_: str) -> Mapping[str, Any]:
    return conditions_by_type(deployment.get("status") or {}).get(type_, {})


def available(deployment: Mapping[str, Any] | None, leader: str, lock: str) -> tuple[str, str, str]:
    if deployment is None:
        return ("False", "NotDeployed", "the scheduler Deployment does not exist yet")
    status = deployment.get("status") or {}
    wanted = int((deployment.get("spec") or {}).get("replicas", 1))
    ready = int(status.get("readyReplicas") or 0)
    if wanted == 0:
        return ("False", "ScaledToZero", "spec.replicas is 0: no scheduler runs")
    if ready == 0:
        return ("False", "NoReadyScheduler", f"0 of {wanted} scheduler pods are ready")
    if not leader:
        return (
            "False",
            "NoLeader",
            f"{ready} of {wanted} scheduler pods are ready, but none holds Lease {lock}",
        )
    return ("True", "Leading", f"{ready} of {wanted} scheduler pods are ready; {leader} leads")


def progressing(
    deployment: Mapping[str, Any] | None, applied: Applied, config_hash: str
) -> tuple[str, str, str]:
    if applied.failure:
        return ("False", applied.failure_reason, applied.failure)
    if deployment is None:
        return ("True", "Deploying", "creating the scheduler Deployment")
    spec = deployment.get("spec") or {}
    status = deployment.get("status") or {}
    wanted = int(spec.get("replicas", 1))
    updated = int(status.get("updatedReplicas") or 0)
    available_now = int(status.get("availableReplicas") or 0)
    total = int(status.get("replicas") or 0)
    stalled = _deployment_condition(deployment, "Progressing")
    if stalled.get("reason") == "ProgressDeadlineExceeded":
        return ("False", "ProgressDeadlineExceeded", str(stalled.get("message") or ""))
    observed = int(status.get("observedGeneration") or 0)
    generation = int((deployment.get("metadata") or {}).get("generation") or 0)
    if observed < generation or updated < wanted or total > wanted or available_now < wanted:
        return (
            "True",
            "RollingOut",
            f"configuration {config_hash}: {updated} of {wanted} scheduler pods updated, "
            f"{available_now} available",
        )
    return (
        "True",
        "RolledOut",
        f"configuration {config_hash} runs on {wanted} of {wanted} scheduler pods",
    )


def build_status(
    previous: Mapping[str, Any],
    *,
    generation: int,
    validity: Validity,
    applied: Applied,
    deployment: Mapping[str, Any] | None,
    leader: str,
    lock: str,
    now: str,
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
            condition(before, "Available", *available(deployment, leader, lock), generation, now),
            condition(
                before,
                "Progressing",
                *progressing(deployment, applied, applied.config_hash),
                generation,
                now,
            ),
        ],
    }
    # Until a valid spec has been rolled out, there is no running configuration to show.
    if applied.config_hash:
        status["configHash"] = applied.config_hash
        status["schedulerNames"] = applied.scheduler_names
    return status
