"""Several replicas, one active: Kopf peering, with the oldest replica in charge.

Kopf pauses an operator while a live peer of a higher priority is listed in the peering object,
and pauses *all* of them when two share one priority. So every replica takes a priority from its
start time, older ranking higher, with random low digits against ties: a replica that starts
while another works (a rolling update, a rescheduled pod) stands by instead of taking over, and
the next oldest takes over only when the active one leaves (it removes itself on a clean exit) or
stops renewing its entry for a lifetime.

Kopf's pause stops its watch streams, but not the work kubeherd's controllers already have in
hand (a rollout, a scheduler status loop). A replica that once was active and then finds a
higher-ranked live peer (after a network partition healed, or clocks that disagree) therefore
exits, as client-go's leader election does on a lost lease; Kubernetes restarts it, and it comes
back as the youngest replica, standing by.
"""

from __future__ import annotations

import asyncio
import getpass
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from kubeherd.kopf_adapter import Peer, live_peers, peering_manifest
from kubeherd.kube.client import Kube
from kubeherd.kube.kinds import Kind

logger = logging.getLogger(__name__)

# How often a replica reads the peering object to learn whether it was outranked.
CHECK_INTERVAL = 2.0


def own_identity(environment: Mapping[str, str] | None = None) -> str:
    """This replica's name in Kopf's peering entries (kopf.run's `identity`): the pod's name from
    POD_ID, which the chart sets; else, like Kopf's default, user@host/start time/random hex.

    Kopf's own default (`detect_own_id`) asks `getpass.getuser()`, which raises KeyError for a
    uid without a passwd entry and no USER or LOGNAME: the image runs as 65532, which has none,
    and the operator crashed at start. Such a user is named by its uid here instead."""
    environment = os.environ if environment is None else environment
    pod = environment.get("POD_ID")
    if pod:
        return pod
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # KeyError up to Python 3.12, OSError from 3.13
        user = f"uid-{os.getuid()}"
    started = time.strftime("%Y%m%d%H%M%S", time.gmtime())
    return f"{user}@{socket.gethostname()}/{started}/{secrets.token_hex(2)}"


def start_time_priority(now: float | None = None, tie_breaker: int | None = None) -> int:
    """A priority that ranks older replicas higher: minus the start time in milliseconds, times
    1000, minus a random 0-999. Unique in practice, and below 2**53, so it stays exact in
    JSON."""
    started_ms = int((time.time() if now is None else now) * 1000)
    jitter = secrets.randbelow(1000) if tie_breaker is None else tie_breaker
    return -(started_ms * 1000 + jitter)


@dataclass(frozen=True)
class PeeringOptions:
    """`kubeherd run --peering NAME`: the peering object's name and each entry's lifetime."""

    name: str
    lifetime: int = 60
    priority: int = field(default_factory=start_time_priority)


def outranking(peers: Sequence[Peer], own_priority: int) -> list[Peer]:
    """Live peers Kopf pauses this replica for. An equal priority is this replica's own entry:
    start_time_priority makes priorities unique."""
    return sorted(
        (peer for peer in peers if peer.priority > own_priority), key=lambda p: -p.priority
    )


class PeeringWatch:
    """Reads the peering object(s) every CHECK_INTERVAL seconds, logs when this replica becomes
    active or stands by, and calls `demoted` if it is outranked after having been active."""

    def __init__(
        self,
        kube: Kube,
        options: PeeringOptions,
        locations: Sequence[tuple[Kind, str | None]],
        demoted: Callable[[str], None],
    ) -> None:
        self.kube = kube
        self.options = options
        self.locations = locations
        self.demoted = demoted
        self.active: bool | None = None  # None until the first read
        self.task: asyncio.Task[None] | None = None

    async def ensure_objects(self) -> None:
        """Create the peering object(s) where missing: Kopf waits for them, paused, forever."""
        for kind, namespace in self.locations:
            manifest = peering_manifest(kind, self.options.name, namespace)
            if await self.kube.get_object(kind, namespace, self.options.name) is None:
                outcome = await self.kube.create_object(kind, manifest)
                if not (outcome.ok or outcome.already_exists):
                    raise RuntimeError(
                        f"cannot create the {kind.kind} {self.options.name!r} that peering needs:"
                        f" {outcome.message} (is its CRD installed? the chart installs it with"
                        " replicaCount >= 2)"
                    )

    def start(self) -> None:
        self.task = asyncio.create_task(self._watch(), name="kubeherd peering watch")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)

    async def check(self) -> None:
        ahead: list[Peer] = []
        for kind, namespace in self.locations:
            body = await self.kube.get_object(kind, namespace, self.options.name)
            ahead += outranking(live_peers(body, time.time()), self.options.priority)
        if ahead:
            leader = max(ahead, key=lambda peer: peer.priority).identity
            if self.active:
                self.active = False
                self.demoted(leader)
            elif self.active is None:
                self.active = False
                logger.info("Standing by: replica %s is active.", leader)
        elif not self.active:
            self.active = True
            logger.info("Active: no live replica of a higher priority in %r.", self.options.name)

    async def _watch(self) -> None:
        while True:
            try:
                await self.check()
            except Exception as error:  # a failed read is retried: peering must not stop
                logger.warning("Could not read the peering object: %s", error)
            await asyncio.sleep(CHECK_INTERVAL)
