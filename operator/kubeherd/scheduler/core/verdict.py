"""kubeherd's verdict on a SchedulerProfile, as the controller and the admission webhook both
give it: kube-scheduler's own checks, then what only the cluster shows (names and Leases other
SchedulerProfiles hold, Leases kubeherd never takes, a lock in another namespace). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kubeherd.api.schedulerprofile_rules import DEFAULT_NAME_REFUSAL
from kubeherd.scheduler.core.catalog import CatalogChoice
from kubeherd.scheduler.core.claims import (
    Claim,
    claims_of,
    lease_claim,
    lock_problems,
    names_taken_before,
)
from kubeherd.scheduler.core.config import foreign_lock_namespace, lease_lock
from kubeherd.scheduler.core.problems import Problem, Verdict
from kubeherd.scheduler.core.validation import validate_spec


def profile_verdict(
    body: Mapping[str, Any], claims: Iterable[Claim], choice: CatalogChoice
) -> Verdict:
    """kubeherd's verdict on a SchedulerProfile: kube-scheduler's own checks (those of the
    catalog `choice` holds, if any), the scheduler names and Lease other SchedulerProfiles
    (`claims`, which may include this one's) hold first, and the Leases kubeherd never takes.
    The controller and the admission webhook both give it, so that what `kubectl apply` refuses
    is exactly what would be reported Valid=False."""
    metadata = body["metadata"]
    spec: Mapping[str, Any] = body.get("spec") or {}
    lock = lease_lock(spec, str(metadata["name"]), str(metadata.get("namespace") or ""))
    taken = names_taken_before(claims, claims_of(body))
    holders = {name: holder_seen_from(owner, metadata) for name, owner in taken.items()}
    verdict = validate_spec(spec, choice.catalog, taken_names=holders, by_image=choice.by_image)
    verdict.errors += choice.problems
    verdict.errors += lock_problems(lock)
    if metadata["name"] == "default":
        # Stored before the CRD refused it: its ServiceAccount would be the namespace's default.
        verdict.errors.append(Problem("metadata.name", DEFAULT_NAME_REFUSAL))
    # CEL cannot see the resource's namespace: the API server lets this through.
    if elsewhere := foreign_lock_namespace(spec, str(metadata.get("namespace") or "")):
        verdict.errors.append(Problem("spec.leaderElection.resourceNamespace", elsewhere))
    lock_holder = holders.get(lease_claim(lock))
    if lock_holder:
        verdict.errors.append(
            Problem(
                "spec.leaderElection.resourceName",
                f"{lease_claim(lock)} is the lock of {lock_holder}: "
                "two schedulers on one Lease take turns, one always idle; choose another "
                "resourceName",
            )
        )
    return verdict


def holder_seen_from(owner: str, metadata: Mapping[str, Any]) -> str:
    """Another SchedulerProfile (`namespace/name`), as a refusal may name it to this one's
    author: by name in the same namespace; elsewhere only as being elsewhere, since scheduler
    names are cluster-wide but the author may not read that namespace."""
    namespace = owner.partition("/")[0]
    if namespace == metadata.get("namespace"):
        return f"SchedulerProfile {owner}"
    return "a SchedulerProfile in another namespace"
