"""The ControllerRevision store of one CustomDaemonSet: find (and adopt) its revisions, record
the current template as the newest, renumber an old one on undo, prune beyond the history
limit. The decisions are in `revisions` (pure); this module only talks to the API server.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
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
    RevisionFacts,
    RevisionRecord,
    build_revision,
    controlled_by,
    decide_revision,
    in_order,
    revision_name,
    revision_template,
    revisions_to_prune,
)
from kubeherd.daemonset.state import History
from kubeherd.events import EventRecorder
from kubeherd.kube.client import KINDS, Kube, KubeError, Outcome
from kubeherd.meta import controller_reference

logger = logging.getLogger(__name__)

REVISION_KIND = KINDS[("apps/v1", "ControllerRevision")]
# A name taken by an object we do not own makes the next attempt hash with a higher count.
MAX_ATTEMPTS = 5


async def record_revision(
    kube: Kube, events: EventRecorder, body: Mapping[str, Any], template_json: bytes
) -> History:
    """Make sure the template (its canonical JSON) has a ControllerRevision, and the newest
    revision number. The template is decoded only to write a revision: a pass that finds its
    revision in place (every first pass after a restart) holds only the JSON while it waits for
    the revision listing."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    uid = body["metadata"]["uid"]
    collision_count = int((body.get("status") or {}).get("collisionCount") or 0)
    for _attempt in range(MAX_ATTEMPTS):
        records = await claimed_revisions(kube, body)
        decision = decide_revision(records, template_json, collision_count)
        collision_count = decision.collision_count
        outcome = Outcome(200)
        if decision.create is not None:
            revision = build_revision(
                body, json.loads(template_json), decision.hash, decision.create
            )
            outcome = await kube.create_controller_revision(namespace, revision)
            if outcome.already_exists:
                # Either another pass made it meanwhile (then the next listing shows it), or
                # an object we do not own took the name: a collision, so hash again.
                existing = await kube.get_controller_revision(
                    namespace, revision_name(name, decision.hash)
                )
                if existing is not None and not controlled_by(existing, uid):
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
                outcome = await _recreate_revision(
                    kube, body, json.loads(template_json), old, number
                )
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
            records = await claimed_revisions(kube, body)
        return History(decision.hash, tuple(records), collision_count)
    raise RuntimeError(f"no free ControllerRevision name for {namespace}/{name}")


async def claimed_revisions(kube: Kube, body: Mapping[str, Any]) -> list[RevisionRecord]:
    """The CustomDaemonSet's revisions, oldest first: the ones it controls, found by its own
    label or by its selector (a revision labelled the native way), and orphans matching its
    selector, which it adopts as the native controller does. Read a page at a time, and only
    records are kept: a revision holds a whole template, and a tenant can make many."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    selector = selector_text((body.get("spec") or {}).get("selector") or {})
    reference = controller_reference(body, KIND)
    by_uid: dict[str, RevisionRecord] = {}
    for query in (f"{OWNER_LABEL}={name}", selector):
        async for page in kube.controller_revision_pages(namespace, query):
            for found in await _records(kube, body, page, reference, adopt=query == selector):
                by_uid[found.uid] = found
            # Emptied now, not when the next page (or the other query's first) has come: at a
            # restart every CustomDaemonSet's first pass lists its revisions at once, and each
            # would hold a page of whole templates while it waits for the next.
            page.clear()
    return in_order(by_uid.values())


async def _records(
    kube: Kube,
    body: Mapping[str, Any],
    page: list[dict[str, Any]],
    reference: Mapping[str, Any],
    adopt: bool,
) -> list[RevisionRecord]:
    """The records of the page's revisions that the CustomDaemonSet controls, or adopts
    (`adopt`: the page was found by its selector)."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    uid = body["metadata"]["uid"]
    records = []
    for found in page:
        owner = controller_uid(found)
        adopted = (
            owner is None
            and adopt
            and revision_adoptable(found)
            and await _adopt(kube, namespace, name, found, reference)
        )
        if owner == uid or adopted:
            records.append(RevisionRecord.from_body(found))
    return records


async def _adopt(
    kube: Kube,
    namespace: str,
    name: str,
    orphan: Mapping[str, Any],
    reference: Mapping[str, Any],
) -> bool:
    metadata = orphan["metadata"]
    outcome = await kube.patch_object(
        REVISION_KIND, namespace, metadata["name"], adoption_patch(orphan, reference, name)
    )
    if outcome.ok:
        logger.info("%s/%s: adopted %s", namespace, name, metadata["name"])
    return outcome.ok


async def kept_back_templates(
    kube: Kube, namespace: str, history: History, hashes: set[str]
) -> dict[str, dict[str, Any]]:
    """The templates of these older revisions, read from their ControllerRevisions: only
    their digests are kept, and nodes a partition keeps back need one only to get a pod."""
    templates: dict[str, dict[str, Any]] = {}
    for revision in history.revisions:
        if revision.hash in hashes and revision.hash != history.revision:
            found = await kube.get_controller_revision(namespace, revision.name)
            if found is None:
                raise KubeError(Outcome(404, f"ControllerRevision {revision.name} not found"))
            templates[revision.hash] = revision_template(found)
    return templates


async def _recreate_revision(
    kube: Kube,
    body: Mapping[str, Any],
    template: Mapping[str, Any],
    old: RevisionFacts,
    number: int,
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
