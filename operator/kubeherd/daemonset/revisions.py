"""Template revisions kept as ControllerRevision objects, as the native DaemonSet keeps them.

One ControllerRevision per distinct pod template, named `<cds>-<hash>`; the hash is also the
`controller-revision-hash` label of the template's pods. `revision` numbers only grow: bringing an
old template back (an undo) re-numbers its revision as the newest, as kubectl shows it.

Pure: plain data in, plain data out.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubeherd.daemonset.pods import KIND, OWNER_LABEL, REVISION_LABEL, template_hash
from kubeherd.meta import controller_reference

CHANGE_CAUSE_ANNOTATION = "kubernetes.io/change-cause"
# The native revision data is a strategic-merge patch that replaces the whole template.
PATCH_DIRECTIVE = "$patch"


def revision_hash(template: Mapping[str, Any], collision_count: int) -> str:
    # Without a collision the hash is the template's own, so pods created before kubeherd kept
    # revisions keep counting as up to date.
    if collision_count <= 0:
        return template_hash(template)
    return template_hash({"template": template, "collisionCount": collision_count})


def revision_name(cds_name: str, hash_: str) -> str:
    return f"{cds_name}-{hash_}"


@dataclass(frozen=True)
class Revision:
    name: str
    uid: str
    hash: str
    number: int
    template: Mapping[str, Any]

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Revision:
        metadata = body.get("metadata") or {}
        return cls(
            name=metadata.get("name", ""),
            uid=metadata.get("uid", ""),
            hash=(metadata.get("labels") or {}).get(REVISION_LABEL, ""),
            number=int(body.get("revision") or 0),
            template=revision_template(body),
        )


def revision_template(body: Mapping[str, Any]) -> dict[str, Any]:
    template = dict(((body.get("data") or {}).get("spec") or {}).get("template") or {})
    template.pop(PATCH_DIRECTIVE, None)
    return template


def owned_revisions(bodies: Iterable[Mapping[str, Any]], owner_uid: str) -> list[Revision]:
    """The revisions whose controller is this CustomDaemonSet (not a deleted namesake's)."""
    owned = []
    for body in bodies:
        references = (body.get("metadata") or {}).get("ownerReferences") or []
        if any(ref.get("controller") and ref.get("uid") == owner_uid for ref in references):
            owned.append(Revision.from_body(body))
    return sorted(owned, key=lambda revision: (revision.number, revision.name))


def build_revision(
    cds: Mapping[str, Any], template: Mapping[str, Any], hash_: str, number: int
) -> dict[str, Any]:
    metadata = cds["metadata"]
    annotations = {}
    cause = (metadata.get("annotations") or {}).get(CHANGE_CAUSE_ANNOTATION)
    if cause:
        annotations[CHANGE_CAUSE_ANNOTATION] = cause
    template_labels = (template.get("metadata") or {}).get("labels") or {}
    return {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {
            "name": revision_name(metadata["name"], hash_),
            "namespace": metadata["namespace"],
            "labels": {**template_labels, OWNER_LABEL: metadata["name"], REVISION_LABEL: hash_},
            "annotations": annotations,
            "ownerReferences": [controller_reference(cds, KIND)],
        },
        "data": {
            "spec": {"template": {**copy.deepcopy(dict(template)), PATCH_DIRECTIVE: "replace"}}
        },
        "revision": number,
    }


@dataclass(frozen=True)
class RevisionDecision:
    """What to do so that the current template has the newest revision."""

    hash: str
    collision_count: int
    # Exactly one of these is set, or neither when the newest revision already is this template.
    create: int | None = None
    renumber: tuple[Revision, int] | None = None


def decide_revision(
    revisions: Iterable[Revision], template: Mapping[str, Any], collision_count: int
) -> RevisionDecision:
    """Find or plan the revision of `template`. A revision of that name holding a different
    template is a hash collision: count it and hash again, as the native controller does."""
    by_hash = {revision.hash: revision for revision in revisions}
    newest = max((revision.number for revision in by_hash.values()), default=0)
    while True:
        hash_ = revision_hash(template, collision_count)
        existing = by_hash.get(hash_)
        if existing is None:
            return RevisionDecision(hash_, collision_count, create=newest + 1)
        if existing.template == template:
            if existing.number < newest:
                return RevisionDecision(hash_, collision_count, renumber=(existing, newest + 1))
            return RevisionDecision(hash_, collision_count)
        collision_count += 1


def revisions_to_prune(
    revisions: Iterable[Revision], current_hash: str, limit: int, live_hashes: set[str]
) -> list[Revision]:
    """Old revisions beyond `limit`, oldest first, never the current one nor one a pod runs."""
    old = sorted(
        (revision for revision in revisions if revision.hash != current_hash),
        key=lambda revision: revision.number,
    )
    excess = len(old) - limit
    if excess <= 0:
        return []
    return [revision for revision in old if revision.hash not in live_hashes][:excess]
