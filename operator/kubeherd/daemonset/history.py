"""The ControllerRevision store of one CustomDaemonSet: find (and adopt) its revisions, record
the current template as the newest, renumber an old one on undo, prune beyond the history
limit. The decisions are in `revisions` (pure); this module only talks to the API server.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubeherd.daemonset.claims import (
    adoption_patch,
    controller_uid,
    revision_adoptable,
    selector_text,
)
from kubeherd.daemonset.planning import NodeRecord
from kubeherd.daemonset.pods import KIND, OWNER_LABEL
from kubeherd.daemonset.revisions import (
    Revision,
    build_revision,
    decide_revision,
    owned_revisions,
    revision_name,
    revisions_to_prune,
)
from kubeherd.events import EventRecorder
from kubeherd.kube.client import KINDS, Kube, KubeError, Outcome
from kubeherd.meta import controller_reference

logger = logging.getLogger(__name__)

REVISION_KIND = KINDS[("apps/v1", "ControllerRevision")]
# A name taken by an object we do not own makes the next attempt hash with a higher count.
MAX_ATTEMPTS = 5


@dataclass(frozen=True)
class History:
    """The CustomDaemonSet's revisions and which one its current template is."""

    revision: str = ""
    revisions: tuple[Revision, ...] = ()
    collision_count: int = 0

    def previous(self, current_revision_name: str) -> Revision | None:
        """The revision a partition keeps nodes on: the last one every node ran."""
        for revision in self.revisions:
            if revision.name == current_revision_name and revision.hash != self.revision:
                return revision
        return None


async def record_revision(
    kube: Kube, events: EventRecorder, body: Mapping[str, Any], template: Mapping[str, Any]
) -> History:
    """Make sure the template has a ControllerRevision, and the newest revision number."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    uid = body["metadata"]["uid"]
    collision_count = int((body.get("status") or {}).get("collisionCount") or 0)
    for _attempt in range(MAX_ATTEMPTS):
        bodies = await claimed_revisions(kube, body)
        decision = decide_revision(owned_revisions(bodies, uid), template, collision_count)
        collision_count = decision.collision_count
        outcome = Outcome(200)
        if decision.create is not None:
            revision = build_revision(body, template, decision.hash, decision.create)
            outcome = await kube.create_controller_revision(namespace, revision)
            if outcome.already_exists:
                # Either another pass made it meanwhile (then the next listing shows it), or
                # an object we do not own took the name: a collision, so hash again.
                existing = await kube.get_controller_revision(
                    namespace, revision_name(name, decision.hash)
                )
                if existing is not None and not owned_revisions([existing], uid):
                    collision_count += 1
                continue
        elif decision.renumber is not None:
            # An undo: the old template's revision becomes the newest, in place, as the
            # native controller does (same object, same UID).
            old, number = decision.renumber
            outcome = await kube.patch_controller_revision(
                namespace, old.name, {"revision": number}
            )
            if outcome.status == 422 and "immutable" in outcome.message:
                # Stored by an earlier kubeherd with non-canonical data, which any patch is
                # refused for: made again with its new number instead.
                outcome = await _recreate_revision(kube, body, template, old, number)
                if outcome.already_exists:
                    continue
        if not outcome.ok:
            events.record(
                body,
                "Warning",
                "FailedRevision",
                f"Error recording the template's ControllerRevision: {outcome.message}",
            )
            raise KubeError(outcome)
        if decision.create is not None or decision.renumber is not None:
            bodies = await claimed_revisions(kube, body)
        return History(decision.hash, tuple(owned_revisions(bodies, uid)), collision_count)
    raise RuntimeError(f"no free ControllerRevision name for {namespace}/{name}")


async def claimed_revisions(kube: Kube, body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The CustomDaemonSet's revisions: the ones it controls, found by its own label or by its
    selector (a revision labelled the native way), and orphans matching its selector, which it
    adopts as the native controller does."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    uid = body["metadata"]["uid"]
    selector = selector_text((body.get("spec") or {}).get("selector") or {})
    by_uid: dict[str, dict[str, Any]] = {}
    orphans: list[dict[str, Any]] = []
    for query in (f"{OWNER_LABEL}={name}", selector):
        for found in await kube.list_controller_revisions(namespace, query):
            owner = controller_uid(found)
            if owner == uid:
                by_uid[found["metadata"]["uid"]] = found
            elif owner is None and query == selector and revision_adoptable(found):
                orphans.append(found)
    reference = controller_reference(body, KIND)
    for orphan in orphans:
        metadata = orphan["metadata"]
        outcome = await kube.patch_object(
            REVISION_KIND, namespace, metadata["name"], adoption_patch(orphan, reference, name)
        )
        if outcome.ok:
            logger.info("%s/%s: adopted %s", namespace, name, metadata["name"])
            owners = [*(metadata.get("ownerReferences") or []), reference]
            by_uid[metadata["uid"]] = {
                **orphan,
                "metadata": {**metadata, "ownerReferences": owners},
            }
    return list(by_uid.values())


async def _recreate_revision(
    kube: Kube, body: Mapping[str, Any], template: Mapping[str, Any], old: Revision, number: int
) -> Outcome:
    namespace = body["metadata"]["namespace"]
    outcome = await kube.delete_controller_revision(namespace, old.name, old.uid)
    if not (outcome.ok or outcome.not_found):
        return outcome
    return await kube.create_controller_revision(
        namespace, build_revision(body, template, old.hash, number)
    )


async def prune_history(
    kube: Kube,
    key: tuple[str, str],
    history: History,
    limit: int,
    ledger: Mapping[str, NodeRecord],
) -> History:
    """Delete the oldest revisions beyond `limit`, except the ones pods still run."""
    if len(history.revisions) - 1 <= limit:
        return history  # the common case, which must not look at every node
    live = {pod.revision for record in ledger.values() for pod in record.pods}
    kept = list(history.revisions)
    for revision in revisions_to_prune(kept, history.revision, limit, live):
        outcome = await kube.delete_controller_revision(key[0], revision.name, revision.uid)
        if outcome.ok or outcome.not_found:
            kept.remove(revision)
            logger.info("%s/%s: pruned %s", *key, revision.name)
        else:
            logger.warning("%s/%s: %s not pruned: %s", *key, revision.name, outcome.message)
    return History(history.revision, tuple(kept), history.collision_count)
