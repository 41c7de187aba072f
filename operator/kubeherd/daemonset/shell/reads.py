"""What one pass reads, gathered before anything is decided: the dirty nodes' Nodes and daemon
pods from the watches, and from the API server only what the watches cannot say and the pass
needs now: the verdict on a template not judged yet (a dry-run create), the ControllerRevisions
when the template changed, and the pods a claim may concern when claims are due. Nothing is
written here, and nothing decided: `core.plan.plan_pass` decides from what this returns.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from kubeherd.daemonset.core.canary_state import CanaryState
from kubeherd.daemonset.core.claims import (
    PodCandidates,
    controller_uid,
    outside_selector_texts,
    revision_adoptable,
    selector_text,
)
from kubeherd.daemonset.core.plan import NodeView, PassInput, previous_revision_hash
from kubeherd.daemonset.core.pods import OWNER_LABEL
from kubeherd.daemonset.core.revisions import FoundRevisions, RevisionRecord, in_order
from kubeherd.daemonset.core.template import (
    NO_IDENTITY,
    OperatorIdentity,
    TemplateAnswer,
    TemplateVerdict,
    borrowed_identity,
    checked_pod,
    judged_valid_before,
    template_verdict,
)
from kubeherd.daemonset.shell.api import DaemonSetApi
from kubeherd.daemonset.shell.state import Attempt, DaemonSetState, Key, NodeSource, PodSource
from kubeherd.kube.kinds import KINDS
from kubeherd.runner import Marks

POD_KIND = KINDS[("v1", "Pod")]

# Who the operator is, once the API server has said (None until it answers).
IdentityLookup = Callable[[], Awaitable[OperatorIdentity | None]]


async def no_identity() -> OperatorIdentity:
    return NO_IDENTITY


@dataclass
class Reads:
    kube: DaemonSetApi
    nodes: NodeSource
    pods: PodSource
    operator: IdentityLookup
    clock: Callable[[], float]

    async def gather(
        self, key: Key, state: DaemonSetState, marks: Marks, attempt: Attempt, deferred: bool
    ) -> PassInput:
        """Everything the pass decides from. `deferred`: a status is waiting to be written."""
        spec, rollout, body = state.spec, state.rollout, state.body
        new_spec = (spec.template_hash, spec.generation) != (
            rollout.template_hash,
            rollout.generation,
        )
        given = PassInput(
            spec=spec,
            revision=state.history.revision,
            previous_revision=previous_revision_hash(
                body, state.history.revisions, state.history.revision
            ),
            dirty={},
            ledger=state.ledger,
            expected=state.pacing.expected,
            failed_pod_not_before=state.pacing.failed_pod_not_before(),
            rollout_deleted=rollout.deleted,
            rollout_updated=rollout.updated,
            revision_keys=tuple((r.hash, r.in_place_key) for r in state.history.revisions),
            rolling=rollout.rolling,
            now=self.clock(),
            body=body,
            selector_problem_announced=state.selector_problem_announced,
            template_problem=state.template.problem,
            template_unanswered=state.template.backoff.delay != 0,
            canary=rollout.canary or CanaryState.from_status(body.get("status") or {}, key[1]),
        )
        if spec.selector_problem is not None:
            return given
        verdict = None
        if spec.template_hash != state.template.checked:
            # A status for this generation says whether the API server accepted it already.
            accepted = judged_valid_before(body)
            verdict = TemplateVerdict(spec.template_hash) if accepted else await self._judge(state)
            given = replace(given, template=verdict)
        problem = state.template.problem if verdict is None else verdict.problem
        if problem is not None or (verdict is not None and verdict.no_verdict is not None):
            return given  # the pass stops short: nothing more to read
        revisions = None
        if spec.template_hash != rollout.template_hash:
            revisions = await found_revisions(self.kube, body)
        candidates = await self._pod_candidates(key, state) if state.claims_due else None
        collision_count = attempt.collision_count
        if collision_count is None:
            collision_count = int((body.get("status") or {}).get("collisionCount") or 0)
        # The watches last: what they show is the freshest the pass can have.
        dirty = marks.nodes
        if marks.everything or new_spec:
            # A new template or generation can change every node's verdict.
            dirty = set(self.nodes.names()) | set(state.ledger) | self.pods.nodes_with_pods(key)
        return replace(
            given,
            dirty={
                name: NodeView(self.nodes.get(name), self.pods.on_node(key, name)) for name in dirty
            },
            rolling=rollout.rolling or marks.everything or new_spec,
            found_revisions=revisions,
            collision_count=collision_count,
            refused_adoptions=attempt.refused_adoptions,
            pod_candidates=candidates,
            new_generation=spec.generation != rollout.generation,
            flush_status=new_spec and deferred and state.status.last_pass is not None,
        )

    async def _judge(self, state: DaemonSetState) -> TemplateVerdict:
        """Ask the API server about the template. A template that would lend its pods the
        operator's identity is not asked about: the API server would accept it."""
        body, spec = state.body, state.spec
        template_hash = spec.template_hash
        pod = checked_pod({**body, "spec": {**body["spec"], "template": spec.template}})
        identity = await self.operator()
        if identity is None:
            return template_verdict(TemplateAnswer(template_hash, identity_known=False))
        borrowed = borrowed_identity(pod, identity)
        if borrowed is not None:
            return template_verdict(TemplateAnswer(template_hash, borrowed=borrowed))
        answer = await self.kube.dry_run_pod(body["metadata"]["namespace"], pod)
        return template_verdict(
            TemplateAnswer(template_hash, status=answer.status, body=answer.body)
        )

    async def _pod_candidates(self, key: Key, state: DaemonSetState) -> PodCandidates | None:
        """The orphans the selector matches (the ones without the owner label, which the watch
        does not see, and the ones the watch shows without an owner, read again), and the
        pods with the owner label outside the selector, one query per requirement."""
        namespace, name = key
        selector = state.spec.selector
        if not selector_text(selector):
            return PodCandidates()
        orphan_query = f"{selector_text(selector)},!{OWNER_LABEL}"
        outside_queries = [f"{OWNER_LABEL}={name},{q}" for q in outside_selector_texts(selector)]
        seen = [
            pod.name
            for node in self.pods.nodes_with_pods(key)
            for pod in self.pods.on_node(key, node)
            if pod.orphan and not pod.deleting
        ]
        orphans = await self.kube.list_objects(POD_KIND, orphan_query, namespace)
        for pod_name in seen:
            found = await self.kube.get_object(POD_KIND, namespace, pod_name)
            if found is not None:
                orphans.append(found)
        outside = []
        for query in outside_queries:
            outside += await self.kube.list_objects(POD_KIND, query, namespace)
        return PodCandidates(tuple(orphans), tuple(outside))


async def found_revisions(kube: DaemonSetApi, body: Mapping[str, Any]) -> FoundRevisions:
    """The CustomDaemonSet's revisions, oldest first: the ones it controls, found by its own
    label or by its selector (a revision labelled the native way), and the orphans its
    selector matches, which it may adopt as the native controller does. Read a page at a time,
    and only records are kept: a revision holds a whole template, and a tenant can make many."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    uid = body["metadata"]["uid"]
    selector = selector_text((body.get("spec") or {}).get("selector") or {})
    owned: dict[str, RevisionRecord] = {}
    orphans: dict[str, tuple[RevisionRecord, Mapping[str, Any]]] = {}
    for query in (f"{OWNER_LABEL}={name}", selector):
        async for page in kube.controller_revision_pages(namespace, query):
            _sort_revisions(page, uid, query == selector, owned, orphans)
            # Emptied now, not when the next page (or the other query's first) has come: at a
            # restart every CustomDaemonSet's first pass lists its revisions at once, and each
            # would hold a page of whole templates while it waits for the next.
            page.clear()
    return FoundRevisions(
        tuple(in_order(owned.values())),
        tuple(orphans[record.uid] for record in in_order(r for r, _ in orphans.values())),
    )


def _sort_revisions(
    page: list[dict[str, Any]],
    uid: str,
    by_selector: bool,
    owned: dict[str, RevisionRecord],
    orphans: dict[str, tuple[RevisionRecord, Mapping[str, Any]]],
) -> None:
    """The records of the page's revisions the CustomDaemonSet controls, and of the orphans it
    may adopt: the ones its selector found (`by_selector`) that `revision_adoptable` allows."""
    for found in page:
        owner = controller_uid(found)
        if owner == uid:
            owned[found["metadata"]["uid"]] = RevisionRecord.from_body(found)
        elif owner is None and by_selector and revision_adoptable(found):
            record = RevisionRecord.from_body(found)
            orphans[record.uid] = (record, {"metadata": found["metadata"]})


async def claimed_revisions(kube: DaemonSetApi, body: Mapping[str, Any]) -> list[RevisionRecord]:
    """The revisions the CustomDaemonSet controls, oldest first."""
    return list((await found_revisions(kube, body)).owned)
