"""Every write of a SchedulerProfile pass, in the order its plan gives them, and what they came to
(`ActOutcome`): the judge it starts, the objects it deletes, the objects it applies (only those
missing or different from what kubeherd last applied, a hash in a label, so a restart writes
nothing; never another's object of the same name), and once those went through, what an earlier
spec needed and this one does not. Also the finalizer, the cleanup on deletion and the status."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kubeherd.events import EventRecorder
from kubeherd.kube.client import Kube
from kubeherd.kube.kinds import kind_of
from kubeherd.names import SCHEDULERPROFILES
from kubeherd.scheduler.core.model import ActOutcome, Event, JudgeStart, PassPlan, Removal
from kubeherd.scheduler.core.owner import (
    MANIFEST_HASH_LABEL,
    OWNER_UID_LABEL,
    Owner,
    owned_selector,
)
from kubeherd.scheduler.shell.kinds import BY_NAME, POD, Place

logger = logging.getLogger(__name__)


def describe(manifest: Mapping[str, Any]) -> str:
    metadata = manifest["metadata"]
    where = f"{metadata['namespace']}/" if metadata.get("namespace") else ""
    return f"{manifest['kind']} {where}{metadata['name']}"


class Act:
    """The writes for one SchedulerProfile (`body`), with the events they bring."""

    def __init__(self, kube: Kube, events: EventRecorder, body: Mapping[str, Any]) -> None:
        self.kube = kube
        self.events = events
        self.body = body
        self.owner = Owner.of(body)

    def post(self, events: list[Event]) -> None:
        for event in events:
            if event.once:
                self.events.warn_once(self.body, event.reason, event.message)
            else:
                self.events.record(self.body, event.type, event.reason, event.message)

    async def send(self, plan: PassPlan) -> ActOutcome:
        if plan.finalizers is not None:
            await self.patch_finalizers(plan.finalizers)
        start_failure, config_map_refused = None, False
        if plan.judge_start is not None:
            start_failure, config_map_refused = await self._start_judge(plan.judge_start)
        left = [removal for removal in plan.removals if not await self.delete(removal)]
        dismissed_all = not any(removal in (plan.dismissed or ()) for removal in left)
        apply_failure = None
        for manifest in plan.apply:
            apply_failure = await self.apply(manifest, plan.config_hash)
            if apply_failure:
                break
        if apply_failure is None:
            for removal in [*plan.stale, *plan.unused_config_maps]:
                await self.delete(removal)
        return ActOutcome(start_failure, config_map_refused, dismissed_all, apply_failure)

    async def _start_judge(self, start: JudgeStart) -> tuple[str, bool]:
        """The judge's ConfigMap (the one its scheduler pods will mount), then the judge pod
        reading it, any other judge pod of the resource gone: "" once it is there, else why
        not; and whether the ConfigMap was refused."""
        failure = await self.apply(start.config_map, start.failure.config_hash)
        if failure:
            return failure[1], True
        for removal in start.dismissed:
            await self.delete(removal)
        outcome = await self.kube.create_object(POD, start.pod)
        if not outcome.ok and not outcome.already_exists:
            return f"could not create pod {start.failure.name}: {outcome.message}", False
        return "", False

    async def apply(self, manifest: Mapping[str, Any], config_hash: str) -> tuple[str, str] | None:
        """Apply one object unless it is already as wanted; (reason, message) on failure."""
        metadata = manifest["metadata"]
        existing = await self.kube.get_object(
            kind_of(manifest), metadata.get("namespace"), metadata["name"]
        )
        what = describe(manifest)
        if existing is not None:
            labels = existing["metadata"].get("labels") or {}
            if labels.get(OWNER_UID_LABEL) != self.owner.uid:
                message = (
                    f"{what} already exists and is not this SchedulerProfile's: "
                    "kubeherd leaves it alone; delete it or rename the SchedulerProfile"
                )
                self.events.warn_once(self.body, "NameConflict", message)
                return ("NameConflict", message)
            if labels.get(MANIFEST_HASH_LABEL) == metadata["labels"][MANIFEST_HASH_LABEL]:
                return None
        outcome = await self.kube.apply(manifest)
        if not outcome.ok:
            message = f"could not apply {what}: {outcome.message}"
            self.events.warn_once(self.body, "FailedApply", message)
            return ("ApplyFailed", message)
        if existing is None:
            message = f"created {what}"
        elif manifest["kind"] == "Deployment":
            message = f"updated {what}: rolling to configuration {config_hash}"
        else:
            message = f"updated {what}"
        reason = "Created" if existing is None else "Updated"
        self.events.record(self.body, "Normal", reason, message)
        return None

    async def delete(self, removal: Removal) -> bool:
        """Delete one object (gone already counts); False, with a Warning, if it stays."""
        kind = BY_NAME[removal.kind]
        outcome = await self.kube.delete_object(kind, removal.namespace, removal.name, removal.uid)
        if outcome.ok or outcome.not_found:
            return True
        what = f"{kind.kind} {removal.namespace or ''}/{removal.name}"
        message = f"could not delete {what}: {outcome.message}"
        self.events.record(self.body, "Warning", "FailedDelete", message)
        return False

    async def clean_up(self, places: list[Place], finalizers: list[str]) -> bool:
        """Delete everything kubeherd made for the resource, then leave only `finalizers`;
        False if something is left (the finalizer stays)."""
        complete, ours = True, owned_selector(self.owner)
        for kind, namespace in places:
            for existing in await self.kube.list_objects(kind, ours, namespace):
                complete &= await self.delete(Removal.of(kind.kind, existing))
        if complete:
            await self.patch_finalizers(finalizers)
        return complete

    async def patch_finalizers(self, finalizers: list[str]) -> None:
        # Only on the version we looked at: never drop a finalizer someone added meanwhile.
        version = self.body["metadata"]["resourceVersion"]
        operations: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": version},
            {"op": "add", "path": "/metadata/finalizers", "value": finalizers},
        ]
        owner = self.owner
        outcome = await self.kube.json_patch(
            SCHEDULERPROFILES, owner.namespace, owner.name, operations
        )
        if not outcome.ok and not outcome.not_found:
            # A concurrent change: the next watch event brings the current list.
            logger.info(
                "%s/%s: finalizers not written: %s", owner.namespace, owner.name, outcome.message
            )

    async def write_status(self, status: dict[str, Any]) -> bool:
        """True once written."""
        owner = self.owner
        outcome = await self.kube.patch_status(
            SCHEDULERPROFILES, owner.namespace, owner.name, status
        )
        if not outcome.ok and not outcome.not_found:
            logger.warning(
                "%s/%s: status not written: %s", owner.namespace, owner.name, outcome.message
            )
        return outcome.ok
