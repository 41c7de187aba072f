"""Kopf wiring for SchedulerProfiles: thin handlers that feed the controller.

Raw events only, so Kopf persists nothing on the resources; the controller keeps its own
finalizer. The index of scheduler names lets every resource see the names the others claim, and
Kopf holds the handlers back until its initial listing is complete, so a restart never lets a
newer resource take a name an older one runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import kopf

from kubeherd.names import GROUP, SCHEDULERPROFILES, VERSION
from kubeherd.scheduler.controller import SchedulerProfileController
from kubeherd.scheduler.core.claims import Claim, claims_of


class IndexedClaims:
    """Every SchedulerProfile's scheduler names, read from Kopf's index."""

    def __init__(self) -> None:
        self.index: kopf.Index[str, Claim] | None = None

    def claims(self) -> Iterable[Claim]:
        if self.index is None:
            return []
        return [claim for name in list(self.index.keys()) for claim in self.index.get(name, [])]


class Memo(Protocol):
    """What these handlers read of Kopf's memo (kubeherd.main.Runtime)."""

    @property
    def schedulers(self) -> SchedulerProfileController: ...

    @property
    def scheduler_claims(self) -> IndexedClaims: ...


@kopf.index(GROUP, VERSION, SCHEDULERPROFILES)
async def kubeherd_scheduler_names(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[str, Claim]:
    return {claim.scheduler_name: claim for claim in claims_of(body)}


@kopf.on.event(GROUP, VERSION, SCHEDULERPROFILES)
async def schedulerprofile_event(
    namespace: str | None,
    name: str,
    type: str,
    body: kopf.Body,
    memo: Memo,
    **kwargs: Any,
) -> None:
    memo.scheduler_claims.index = kwargs["kubeherd_scheduler_names"]
    controller = memo.schedulers
    if type == "DELETED":
        controller.profile_deleted((namespace or "", name))
    else:
        # The raw dicts behind the body are replaced, never mutated, by Kopf on each event.
        controller.profile_changed(dict(body))
