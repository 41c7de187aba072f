"""The ControllerRevision writes of a pass: adopt the orphans the plan adopts, make or renumber
the current template's revision as the plan decided (`revisions.plan_revisions`), read back
what the API server made; the templates of older revisions when a pod needs one; prune beyond
the history limit. The decisions are in `revisions` (pure); this module only talks to the API
server.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from kubeherd.daemonset.core.claims import Claim
from kubeherd.daemonset.core.model import NodeRecord
from kubeherd.daemonset.core.revisions import (
    RevisionFacts,
    RevisionPlan,
    build_revision,
    controlled_by,
    revision_name,
    revision_template,
    revisions_to_prune,
)
from kubeherd.daemonset.shell.api import DaemonSetApi
from kubeherd.daemonset.shell.reads import claimed_revisions
from kubeherd.daemonset.shell.state import Attempt, History
from kubeherd.events import EventRecorder
from kubeherd.kube.kinds import KINDS
from kubeherd.kube.outcomes import KubeError, Outcome

logger = logging.getLogger(__name__)

REVISION_KIND = KINDS[("apps/v1", "ControllerRevision")]


async def write_revisions(
    kube: DaemonSetApi,
    events: EventRecorder,
    body: Mapping[str, Any],
    template_json: bytes,
    plan: RevisionPlan,
    attempt: Attempt,
) -> History | Attempt:
    """Send the plan's revision writes; the revisions they leave, or what the next attempt of
    the pass must know when a write lost a race (an adoption refused, a name taken). The
    template is decoded only to write a revision: a pass that finds its revision in place
    (every first pass after a restart) holds only the JSON."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    refused = [claim.name for claim in plan.adopt if not await _adopt(kube, namespace, name, claim)]
    if refused:
        # The decision counted on them: it is made again without them.
        return Attempt(plan.collision_count, attempt.refused_adoptions | frozenset(refused))
    decision = plan.decision
    outcome = Outcome(200)
    if decision.create is not None:
        revision = build_revision(body, json.loads(template_json), decision.hash, decision.create)
        outcome = await kube.create_controller_revision(namespace, revision)
        if outcome.already_exists:
            # Either another pass made it meanwhile (then the next listing shows it), or an
            # object we do not own took the name: a collision, so hash again.
            existing = await kube.get_controller_revision(
                namespace, revision_name(name, decision.hash)
            )
            taken = existing is not None and not controlled_by(existing, body["metadata"]["uid"])
            return Attempt(decision.collision_count + taken, attempt.refused_adoptions)
    elif decision.renumber is not None:
        # An undo: the old template's revision becomes the newest, in place, as the native
        # controller does (same object, same UID).
        old, number = decision.renumber
        outcome = await kube.patch_controller_revision(namespace, old.name, {"revision": number})
        if outcome.status == 422 and "immutable" in outcome.message:
            # Stored by an earlier kubeherd with non-canonical data, which any patch is
            # refused for: made again with its new number instead.
            outcome = await _recreate_revision(kube, body, json.loads(template_json), old, number)
            if outcome.already_exists:
                return Attempt(decision.collision_count, attempt.refused_adoptions)
    if not outcome.ok:
        events.record(
            body,
            "Warning",
            "FailedRevision",
            f"Error recording the template's ControllerRevision: {outcome.message}",
        )
        raise KubeError(outcome)
    records = plan.records
    if decision.create is not None or decision.renumber is not None:
        # What the API server made of it: the new revision's uid, the renumbered one's number.
        records = tuple(await claimed_revisions(kube, body))
    return History(decision.hash, records, decision.collision_count)


async def _adopt(kube: DaemonSetApi, namespace: str, name: str, claim: Claim) -> bool:
    outcome = await kube.patch_object(REVISION_KIND, namespace, claim.name, claim.patch)
    if outcome.ok:
        logger.info("%s/%s: adopted %s", namespace, name, claim.name)
    return outcome.ok


async def kept_back_templates(
    kube: DaemonSetApi, namespace: str, history: History, hashes: set[str]
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
    kube: DaemonSetApi,
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
    kube: DaemonSetApi,
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
