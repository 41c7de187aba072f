"""Template revisions kept as ControllerRevision objects, as the native DaemonSet keeps them.

One ControllerRevision per distinct pod template, named `<cds>-<hash>`; the hash is also the
`controller-revision-hash` label of the template's pods. `revision` numbers only grow: bringing an
old template back (an undo) re-numbers its revision as the newest, as kubectl shows it.

Pure: plain data in, plain data out.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from kubeherd.daemonset.core.claims import Claim, revision_adoptions
from kubeherd.daemonset.core.in_place import in_place_key
from kubeherd.daemonset.core.pods import (
    OWNER_LABEL,
    REVISION_LABEL,
    canonical_hash,
    canonical_json,
)
from kubeherd.meta import controller_reference
from kubeherd.names import CUSTOMDAEMONSET

CHANGE_CAUSE_ANNOTATION = "kubernetes.io/change-cause"
# The native revision data is a strategic-merge patch that replaces the whole template.
PATCH_DIRECTIVE = "$patch"


def revision_hash(template: Mapping[str, Any], collision_count: int) -> str:
    return revision_hash_of_json(canonical_json(template), collision_count)


def revision_hash_of_json(template_json: bytes, collision_count: int) -> str:
    """The revision hash of a template given as its canonical JSON (`canonical_json`): a
    tenant's template can be large, and a pass that only compares revisions need not decode
    it."""
    # Without a collision the hash is the template's own, so pods created before kubeherd kept
    # revisions keep counting as up to date.
    if collision_count <= 0:
        return canonical_hash(template_json)
    # The canonical JSON of {"template": template, "collisionCount": n}, built around the
    # template's own bytes: sorted keys put collisionCount first, and canonical JSON is ASCII.
    wrapped = b'{"collisionCount":%d,"template":%s}' % (collision_count, template_json)
    return canonical_hash(wrapped)


def revision_name(cds_name: str, hash_: str) -> str:
    return f"{cds_name}-{hash_}"


def template_digest(template: Mapping[str, Any]) -> str:
    """A digest that is equal for two templates exactly when they are: it stands in for a kept
    revision's template, which can be large, where only its equality matters."""
    return template_digest_of_json(canonical_json(template))


def template_digest_of_json(template_json: bytes) -> str:
    """`template_digest` of a template given as its canonical JSON."""
    return hashlib.sha256(template_json).hexdigest()


class RevisionFacts(Protocol):
    """What deciding, reporting and pruning read of a revision."""

    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def hash(self) -> str: ...
    @property
    def number(self) -> int: ...
    @property
    def digest(self) -> str: ...


AnyRevision = TypeVar("AnyRevision", bound=RevisionFacts)


def _identity(body: Mapping[str, Any]) -> tuple[str, str, str, int]:
    """A ControllerRevision's name, uid, template hash and number."""
    metadata = body.get("metadata") or {}
    return (
        metadata.get("name", ""),
        metadata.get("uid", ""),
        (metadata.get("labels") or {}).get(REVISION_LABEL, ""),
        int(body.get("revision") or 0),
    )


@dataclass(frozen=True)
class RevisionRecord:
    """What the controller keeps of a ControllerRevision: its template's digest, not the
    template. A node a partition keeps back gets the template read again
    (shell/revision_writes.py)."""

    name: str
    uid: str
    hash: str
    number: int
    digest: str
    # Equal to another template's when the two differ in container images at most
    # (`in_place.in_place_key`): whether its pods can be updated in place.
    in_place_key: str = ""

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> RevisionRecord:
        template = revision_template(body)
        return cls(
            *_identity(body), digest=template_digest(template), in_place_key=in_place_key(template)
        )


@dataclass(frozen=True)
class Revision:
    """A ControllerRevision with its template, as `kubeherd rollouts` shows and restores it."""

    name: str
    uid: str
    hash: str
    number: int
    template: Mapping[str, Any]

    @property
    def digest(self) -> str:
        return template_digest(self.template)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Revision:
        return cls(*_identity(body), template=revision_template(body))


def revision_template(body: Mapping[str, Any]) -> dict[str, Any]:
    template = dict(((body.get("data") or {}).get("spec") or {}).get("template") or {})
    template.pop(PATCH_DIRECTIVE, None)
    return template


def controlled_by(body: Mapping[str, Any], owner_uid: str) -> bool:
    """Whether this CustomDaemonSet (not a deleted namesake) is the revision's controller."""
    references = (body.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("controller") and ref.get("uid") == owner_uid for ref in references)


def in_order(revisions: Iterable[AnyRevision]) -> list[AnyRevision]:
    return sorted(revisions, key=lambda revision: (revision.number, revision.name))


def owned_revisions(bodies: Iterable[Mapping[str, Any]], owner_uid: str) -> list[Revision]:
    """The revisions whose controller is this CustomDaemonSet, oldest first."""
    return in_order(Revision.from_body(body) for body in bodies if controlled_by(body, owner_uid))


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
            "ownerReferences": [controller_reference(cds, CUSTOMDAEMONSET)],
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
    renumber: tuple[RevisionFacts, int] | None = None


def decide_revision(
    revisions: Iterable[RevisionFacts], template_json: bytes, collision_count: int
) -> RevisionDecision:
    """Find or plan the revision of the template whose canonical JSON is `template_json`. A
    revision of that name holding a different template is a hash collision: count it and hash
    again, as the native controller does. The JSON is hashed, never decoded: at a restart every
    CustomDaemonSet's first pass decides its revision at once, and decoded templates take about
    ten times their JSON's size."""
    by_hash = {revision.hash: revision for revision in revisions}
    newest = max((revision.number for revision in by_hash.values()), default=0)
    digest = template_digest_of_json(template_json)
    while True:
        hash_ = revision_hash_of_json(template_json, collision_count)
        existing = by_hash.get(hash_)
        if existing is None:
            return RevisionDecision(hash_, collision_count, create=newest + 1)
        if existing.digest == digest:
            if existing.number < newest:
                return RevisionDecision(hash_, collision_count, renumber=(existing, newest + 1))
            return RevisionDecision(hash_, collision_count)
        collision_count += 1


def revisions_to_prune(
    revisions: Iterable[AnyRevision], current_hash: str, limit: int, live_hashes: set[str]
) -> list[AnyRevision]:
    """Old revisions beyond `limit`, oldest first, never the current one nor one a pod runs."""
    old = sorted(
        (revision for revision in revisions if revision.hash != current_hash),
        key=lambda revision: revision.number,
    )
    excess = len(old) - limit
    if excess <= 0:
        return []
    return [revision for revision in old if revision.hash not in live_hashes][:excess]


@dataclass(frozen=True)
class FoundRevisions:
    """A CustomDaemonSet's ControllerRevisions as a pass listed them: the ones it controls, and
    the orphans its selector matches that it may adopt, each with the metadata its adoption
    patch is made from (never the template)."""

    owned: tuple[RevisionRecord, ...] = ()
    orphans: tuple[tuple[RevisionRecord, Mapping[str, Any]], ...] = ()


@dataclass(frozen=True)
class RevisionPlan:
    """The revision writes of a pass: adoptions, then the current template's revision made or
    renumbered (`decision`). `records`: the revisions it then has, the new one aside."""

    adopt: tuple[Claim, ...]
    records: tuple[RevisionRecord, ...]
    decision: RevisionDecision
    # The collision count the decision started from.
    collision_count: int


def plan_revisions(
    found: FoundRevisions,
    template_json: bytes,
    collision_count: int,
    reference: Mapping[str, Any],
    owner_name: str,
    refused: frozenset[str] = frozenset(),
) -> RevisionPlan:
    """Adopt the orphans (but the ones whose adoption was `refused` this pass, by name), and
    decide the template's revision among the revisions that leaves."""
    orphans = [(record, body) for record, body in found.orphans if record.name not in refused]
    by_uid = {record.uid: record for record in found.owned}
    by_uid.update((record.uid, record) for record, _ in orphans)
    records = tuple(in_order(by_uid.values()))
    return RevisionPlan(
        tuple(revision_adoptions((body for _, body in orphans), reference, owner_name)),
        records,
        decide_revision(records, template_json, collision_count),
        collision_count,
    )


def previous_revision(
    revisions: Iterable[AnyRevision], current_revision_name: str, revision_hash: str
) -> AnyRevision | None:
    """The revision a partition keeps nodes on: the last one every node ran (the status's
    currentRevision), unless that is the template's own."""
    for revision in revisions:
        if revision.name == current_revision_name and revision.hash != revision_hash:
            return revision
    return None
