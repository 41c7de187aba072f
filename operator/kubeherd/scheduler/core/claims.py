"""What SchedulerProfiles hold across the cluster: their scheduler names and the Leases they
elect on. Names are cluster-wide, so the first to hold one keeps it (one that runs it is never
unseated by a newcomer); and some Leases belong to the cluster's own components. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubeherd.scheduler.core.config import Lock, lease_lock
from kubeherd.scheduler.core.problems import Problem

# The Leases of the cluster's own control plane (kube-system, as kubeadm and the managed
# offerings name them). A SchedulerProfile's scheduler holds the RBAC to take its lock: on one of
# these it would contend with that component, which stands by while it holds it.
RESERVED_LOCKS = frozenset(
    Lock(component, "kube-system")
    for component in ("kube-scheduler", "kube-controller-manager", "cloud-controller-manager")
)


def lease_claim(lock: Lock) -> str:
    """A lock, as the claims index holds it beside scheduler names (which have no spaces)."""
    return f"Lease {lock.namespace}/{lock.name}"


def lock_problems(lock: Lock) -> list[Problem]:
    """Refusals of a leader-election lock kubeherd must never take."""
    if lock not in RESERVED_LOCKS:
        return []
    return [
        Problem(
            "spec.leaderElection.resourceName",
            f"Lease {lock.namespace}/{lock.name} belongs to the cluster's own {lock.name}, "
            "which would stand by while this scheduler held it: choose another resourceName "
            "(or resourceNamespace, or a SchedulerProfile of another name or namespace)",
        )
    ]


@dataclass(frozen=True)
class Claim:
    """A SchedulerProfile's claim on a scheduler name."""

    created: str
    owner: str  # namespace/name
    scheduler_name: str
    # Whether the name is in the resource's running configuration (status.schedulerNames).
    running: bool = False

    @property
    def rank(self) -> tuple[bool, str, str]:
        """Lower ranks keep the name: one that runs it, then the oldest (creation times have
        seconds only: ties go by namespace/name)."""
        return (not self.running, self.created, self.owner)


def names_taken_before(claims: Iterable[Claim], mine: Iterable[Claim]) -> dict[str, str]:
    """The names of `mine` that other SchedulerProfiles hold first, mapped to them. A scheduler
    that runs is never unseated by a newcomer."""
    taken: dict[str, str] = {}
    for claim in mine:
        for other in claims:
            same_name = other.scheduler_name == claim.scheduler_name
            if same_name and other.owner != claim.owner and other.rank < claim.rank:
                taken[claim.scheduler_name] = other.owner
    return taken


def running_names(body: Mapping[str, Any]) -> set[str]:
    names = str((body.get("status") or {}).get("schedulerNames") or "")
    return {name.strip() for name in names.split(",") if name.strip()}


def claims_of(body: Mapping[str, Any]) -> list[Claim]:
    """The scheduler names a SchedulerProfile's spec claims, and its Lease when it elects."""
    metadata = body["metadata"]
    created = str(metadata.get("creationTimestamp") or "")
    owner = f"{metadata.get('namespace')}/{metadata['name']}"
    running = running_names(body)
    spec = body.get("spec") or {}
    profiles = spec.get("profiles") or []
    names = [str(p["schedulerName"]) for p in profiles if p.get("schedulerName")]
    claims = [Claim(created, owner, name, running=name in running) for name in names]
    if (spec.get("leaderElection") or {}).get("leaderElect", True):
        # Two schedulers on one Lease take turns: one of them idles, both report it as leader.
        lock = lease_lock(spec, str(metadata["name"]), str(metadata.get("namespace") or ""))
        rolled_out = bool((body.get("status") or {}).get("configHash"))
        claims.append(Claim(created, owner, lease_claim(lock), running=rolled_out))
    return claims
