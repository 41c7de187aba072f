"""The records a pass reads and keeps: one daemon pod as the watch shows it (`PodInfo`), and
one node's standing for one CustomDaemonSet (`NodeRecord`, an entry of the ledger). Small and
slotted: thousands stay cheap.

Pure: plain data in, plain data out.
"""

from __future__ import annotations

import datetime
import functools
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from kubeherd.daemonset.core.eligibility import Verdict
from kubeherd.daemonset.core.in_place import update_status
from kubeherd.daemonset.core.pods import (
    RESOURCE_OVERRIDE_ANNOTATION,
    REVISION_LABEL,
    target_node,
)


# Cached: the pods of a rollout become ready within the same few seconds, and a shared float is
# one object instead of one per pod.
@functools.lru_cache(maxsize=1024)
def parse_time(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


# The bits of PodInfo.flags. Small ints are objects CPython shares (up to 256), so a pod's
# flags cost its record one slot and no object of their own. A subclass's bits start at
# FIRST_FREE_FLAG.
READY = 1 << 0
DELETING = 1 << 1
ORPHAN = 1 << 2
FIRST_FREE_FLAG = 1 << 3


@dataclass(frozen=True, slots=True)
class PodExtras:
    """The fields of a daemon pod that keep their defaults on all but a few pods: one in
    trouble, or one made with a resource override. Every pod without any shares NO_EXTRAS,
    and the others share one per distinct value (`pod_extras`): one slot of the pod's record
    holds all four."""

    # Why a container is not running yet (ImagePullBackOff, CrashLoopBackOff...), or "".
    waiting_reason: str = ""
    # Container restarts since the pod began running its revision, and the reason the last
    # container to end gave (OOMKilled, Error...) or "": what a canary is judged by.
    restarts: int = 0
    terminated_reason: str = ""
    # The resource override it was made with (`overrides.ResourceOverride.key`), or "".
    override: str = ""


NO_EXTRAS = PodExtras()


def pod_extras(
    waiting_reason: str = "", restarts: int = 0, terminated_reason: str = "", override: str = ""
) -> PodExtras:
    """The shared PodExtras of these values: NO_EXTRAS when all are defaults."""
    if not (waiting_reason or restarts or terminated_reason or override):
        return NO_EXTRAS
    return _shared_extras(waiting_reason, restarts, terminated_reason, override)


# Cached: the pods of a pool with an override, or of a rollout that crashes, have the same.
@functools.lru_cache(maxsize=1024)
def _shared_extras(
    waiting_reason: str, restarts: int, terminated_reason: str, override: str
) -> PodExtras:
    return PodExtras(waiting_reason, restarts, terminated_reason, override)


@dataclass(frozen=True, slots=True, repr=False)
class PodInfo:
    """What the controller needs to know of one daemon pod: small, so thousands stay cheap.

    Slots, the strings that repeat across pods (node, phase, revision) shared, the booleans
    bits of one small int (`flags`) and the fields rarely set in one shared PodExtras: a
    watched pod's memory is mostly this record (docs/benchmarks.md). The packed fields read
    as fields all the same (`pod.ready`, `pod.restarts`...); records are built of them as
    read with `of` (or from a body with `from_body`), and compare, hash and print as such.
    `dataclasses.replace` knows only the stored fields: it refuses the packed ones."""

    # The fields as read, in the order repr shows them (a subclass adds its own).
    SHOWN_FIELDS: ClassVar[tuple[str, ...]] = (
        "name",
        "uid",
        "node",
        "phase",
        "ready",
        "ready_since",
        "revision",
        "created",
        "deleting",
        "waiting_reason",
        "orphan",
        "restarts",
        "terminated_reason",
        "override",
    )

    name: str
    uid: str
    node: str | None
    phase: str
    ready_since: float | None
    revision: str
    created: str
    # READY, DELETING and ORPHAN (no controller owns it: it carries the owner label but lost
    # its owner reference), and a subclass's bits.
    flags: int
    extras: PodExtras = NO_EXTRAS

    @classmethod
    def of(cls, **fields: Any) -> Self:
        """A record of its fields as read (`packed`'s keywords, and a subclass's own)."""
        return cls(**cls.packed(**fields))

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Self:
        return cls(**cls.fields_of(body))

    @staticmethod
    def packed(
        *,
        name: str,
        uid: str,
        node: str | None,
        phase: str,
        ready: bool,
        ready_since: float | None,
        revision: str,
        created: str,
        deleting: bool,
        waiting_reason: str = "",
        orphan: bool = False,
        restarts: int = 0,
        terminated_reason: str = "",
        override: str = "",
    ) -> dict[str, Any]:
        """The record's stored fields (the keyword arguments of PodInfo) of its fields as read."""
        return {
            "name": name,
            "uid": uid,
            "node": node,
            "phase": phase,
            "ready_since": ready_since,
            "revision": revision,
            "created": created,
            "flags": (READY if ready else 0)
            | (DELETING if deleting else 0)
            | (ORPHAN if orphan else 0),
            "extras": pod_extras(waiting_reason, restarts, terminated_reason, override),
        }

    @staticmethod
    def fields_of(body: Mapping[str, Any]) -> dict[str, Any]:
        """The record's stored fields (`packed`), as read from the pod's body."""
        metadata = body.get("metadata", {})
        status = body.get("status") or {}
        ready_condition: Mapping[str, Any] = next(
            (c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {}
        )
        ready = ready_condition.get("status") == "True"
        ready_since = parse_time(ready_condition.get("lastTransitionTime")) if ready else None
        in_place = update_status(body)
        if in_place is not None and in_place.pending:
            # Updated in place, and its kubelet has not restarted every updated container yet.
            ready, ready_since = False, None
        elif ready and in_place is not None and in_place.started_at is not None:
            # The Ready condition need not have changed across a quick restart.
            ready_since = max(ready_since or 0.0, in_place.started_at)
        node = target_node(body)
        annotations = metadata.get("annotations") or {}
        return PodInfo.packed(
            name=metadata.get("name", ""),
            uid=metadata.get("uid", ""),
            node=sys.intern(node) if node else None,
            phase=sys.intern(status.get("phase") or "Pending"),
            ready=ready,
            ready_since=ready_since,
            revision=sys.intern((metadata.get("labels") or {}).get(REVISION_LABEL, "")),
            created=sys.intern(metadata.get("creationTimestamp") or ""),
            deleting=bool(metadata.get("deletionTimestamp")),
            waiting_reason=_waiting_reason(status),
            orphan=not any(
                reference.get("controller") for reference in metadata.get("ownerReferences") or ()
            ),
            restarts=_restarts(status, in_place.restart_counts if in_place is not None else {}),
            terminated_reason=_terminated_reason(status),
            override=sys.intern(annotations.get(RESOURCE_OVERRIDE_ANNOTATION, "")),
        )

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.SHOWN_FIELDS)
        return f"{type(self).__qualname__}({shown})"

    @property
    def ready(self) -> bool:
        return bool(self.flags & READY)

    @property
    def deleting(self) -> bool:
        return bool(self.flags & DELETING)

    @property
    def orphan(self) -> bool:
        return bool(self.flags & ORPHAN)

    @property
    def waiting_reason(self) -> str:
        return self.extras.waiting_reason

    @property
    def restarts(self) -> int:
        return self.extras.restarts

    @property
    def terminated_reason(self) -> str:
        return self.extras.terminated_reason

    @property
    def override(self) -> str:
        return self.extras.override

    @property
    def finished(self) -> bool:
        return self.phase in ("Failed", "Succeeded")

    @property
    def forgotten(self) -> bool:
        """Finished and deleted: the kubelet or the pod garbage collector removes it, and the
        native controller no longer counts it for anything."""
        return self.finished and self.deleting


def _waiting_reason(status: Mapping[str, Any]) -> str:
    for container in status.get("containerStatuses") or ():
        reason = ((container.get("state") or {}).get("waiting") or {}).get("reason")
        if reason:
            return str(reason)
    return ""


def _restarts(status: Mapping[str, Any], before_update: Mapping[str, int]) -> int:
    """Restarts since the pod began running its revision: for a container updated in place,
    those after the one restart the update itself brought."""
    total = 0
    for container in status.get("containerStatuses") or ():
        count = int(container.get("restartCount") or 0)
        name = str(container.get("name"))
        if name in before_update:
            count -= before_update[name] + 1
        total += max(0, count)
    return total


def _terminated_reason(status: Mapping[str, Any]) -> str:
    for container in status.get("containerStatuses") or ():
        for state in ("state", "lastState"):
            reason = ((container.get(state) or {}).get("terminated") or {}).get("reason")
            if reason:
                return sys.intern(str(reason))
    return ""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a node's labels put it for one CustomDaemonSet's rollout. Kept in the node's
    record so a rollout step never reads a Node: the record is recomputed whenever the node is
    dirty, and a new generation (a changed selector, key or override) makes every node dirty.
    Few distinct values across thousands of nodes: records share them (`placement`)."""

    # Whether rollingUpdate.selector matches the node's labels (True without a selector), and
    # its value of rollingUpdate.topologyKey ("" without a key or the label).
    in_wave: bool = True
    domain: str = ""
    # Where the canary's nodeSelector and nodeAntiAffinityKeys put the node (`WaveRule`).
    canary_pool: bool = True
    canary_spread: str = ""
    # The key of the resource override its pods should have ("" for none).
    override: str = ""


@functools.lru_cache(maxsize=4096)
def placement(
    in_wave: bool, domain: str, canary_pool: bool, canary_spread: str, override: str
) -> Placement:
    """The shared Placement of these values."""
    return Placement(in_wave, domain, canary_pool, canary_spread, override)


ANYWHERE = Placement()


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """One node's standing for one CustomDaemonSet: its verdict, its daemon pods, and where
    its labels put it in a rollout. One per node and CustomDaemonSet: three fields only."""

    verdict: Verdict
    # Terminating and failed pods included: the status counts them, as the native one does.
    pods: tuple[PodInfo, ...]
    placement: Placement = ANYWHERE

    @property
    def in_wave(self) -> bool:
        return self.placement.in_wave

    @property
    def domain(self) -> str:
        return self.placement.domain

    @property
    def canary_pool(self) -> bool:
        return self.placement.canary_pool

    @property
    def canary_spread(self) -> str:
        return self.placement.canary_spread

    @property
    def override(self) -> str:
        return self.placement.override

    def up_to_date(self, pod: PodInfo, revision: str) -> bool:
        """Whether the pod runs `revision` with its node's resource override: else a rolling
        update replaces it, and the status does not count it as updated."""
        return pod.revision == revision and pod.override == self.override

    @property
    def oldest_pod(self) -> PodInfo | None:
        # With several pods on a node, the oldest decides the status, as in the native controller.
        # One pod is by far the most common case, and the status sums up every node's.
        return self.pods[0] if len(self.pods) == 1 else oldest_of(self.pods)

    @property
    def active_pods(self) -> tuple[PodInfo, ...]:
        """The pods neither being deleted nor finished: the ones a rollout counts on or replaces
        (plan_nodes deals with finished ones)."""
        if len(self.pods) == 1 and not self.pods[0].deleting and not self.pods[0].finished:
            return self.pods
        return tuple(pod for pod in self.pods if not pod.deleting and not pod.finished)

    @property
    def holds_finished_pod(self) -> bool:
        return any(pod.finished and not pod.deleting for pod in self.pods)


def oldest_of(pods: Iterable[PodInfo]) -> PodInfo | None:
    return min(pods, key=lambda pod: (pod.created, pod.name), default=None)


def pod_available(pod: PodInfo, min_ready_seconds: int, now: float) -> bool:
    return pod.ready and (pod.ready_since or now) + min_ready_seconds <= now


@dataclass(frozen=True)
class Event:
    """An event a pass posts about its CustomDaemonSet."""

    type: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class ExpectedPod:
    """A pod this controller created (or adopted) that the watch has not shown yet."""

    name: str
    revision: str
    sent_at: float
