"""Events kubeherd posts on its objects, in the background: a slow event must never hold up a
controller, and one that cannot be posted never stops a reconciliation."""

from __future__ import annotations

import asyncio
import datetime
import logging
import secrets
from typing import Any, Protocol

from kubeherd.kube.kinds import EVENTS
from kubeherd.kube.outcomes import Outcome

logger = logging.getLogger(__name__)

REPORTING_COMPONENT = "kubeherd"


class Writer(Protocol):
    """A write through the client's write limits and throttling retries (kube.client.Kube)."""

    async def write(self, method: str, path: str, *, body: Any = None) -> Outcome: ...


class EventPoster:
    def __init__(self, writer: Writer) -> None:
        self._writer = writer
        # Events posted in the background; kept here so that they are not garbage-collected.
        self._posting: set[asyncio.Task[Outcome]] = set()

    async def drain(self) -> None:
        """Wait for the events still being posted (before the client closes)."""
        await asyncio.gather(*self._posting, return_exceptions=True)

    async def post(
        self,
        involved: dict[str, Any],
        *,
        type_: str,
        reason: str,
        message: str,
        action: str,
    ) -> Outcome:
        """Record an Event on `involved` ({apiVersion, kind, name, namespace, uid})."""
        now = datetime.datetime.now(datetime.UTC)
        stamp = now.isoformat(timespec="seconds").replace("+00:00", "Z")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{involved['name']}.{secrets.token_hex(8)}",
                "namespace": involved["namespace"],
            },
            "involvedObject": involved,
            "type": type_,
            "reason": reason,
            # The API server caps event messages at 1 KiB.
            "message": message[:1024],
            "action": action,
            "source": {"component": REPORTING_COMPONENT},
            "reportingComponent": REPORTING_COMPONENT,
            "reportingInstance": REPORTING_COMPONENT,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        outcome = await self._writer.write("POST", EVENTS.path(involved["namespace"]), body=event)
        if not outcome.ok:
            # An event that cannot be posted must never stop the reconciliation.
            logger.warning("could not post event %s: %s", reason, outcome.message)
        return outcome

    def post_soon(self, involved: dict[str, Any], *, type_: str, reason: str, message: str) -> None:
        """Post an Event in the background: a slow event must never hold up a controller."""
        task = asyncio.get_running_loop().create_task(
            self.post(involved, type_=type_, reason=reason, message=message, action=reason)
        )
        self._posting.add(task)
        task.add_done_callback(self._posting.discard)
