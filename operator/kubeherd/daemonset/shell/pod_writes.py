"""The daemon pod writes of a pass, paced as the native controller paces them: creates in a
window that widens with each pod created and closes at the first refusal, a growing backoff
before a node's failed pod is replaced, expectations so a pod created is never created twice;
and the claims (adopting orphans the selector matches, releasing pods it no longer matches).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubeherd.daemonset.core.claims import PodClaims
from kubeherd.daemonset.core.in_place import (
    Target,
    resize_patch,
    unresizable_change,
    update_patch,
)
from kubeherd.daemonset.core.model import ExpectedPod
from kubeherd.daemonset.core.nodes import DeletePod
from kubeherd.daemonset.core.overrides import ResourceOverride
from kubeherd.daemonset.core.plan import PlannedCreate
from kubeherd.daemonset.core.pods import REVISION_LABEL, DaemonPodMaker
from kubeherd.daemonset.core.rollout import CreateWindow, UpdatePod
from kubeherd.daemonset.core.spec import DaemonSetSpec
from kubeherd.daemonset.shell.api import DaemonSetApi
from kubeherd.daemonset.shell.state import History, Pacing
from kubeherd.events import EventRecorder
from kubeherd.kube.kinds import KINDS
from kubeherd.kube.outcomes import Outcome
from kubeherd.kube.ratelimit import Backoff
from kubeherd.metrics.health import API_RETRIES

logger = logging.getLogger(__name__)

POD_KIND = KINDS[("v1", "Pod")]


async def delete_pods(
    kube: DaemonSetApi,
    events: EventRecorder,
    body: Mapping[str, Any],
    pacing: Pacing,
    deletes: list[DeletePod],
    now: float,
) -> None:
    namespace = body["metadata"]["namespace"]
    for delete in deletes:
        if delete.pod.phase == "Failed":
            # The next failed pod on this node stays for a growing delay before it is
            # replaced, so a crashing daemon does not hammer the API server (and the node)
            # with pods, and users can see why it failed.
            _, backoff = pacing.failed_pods.get(
                delete.node, (0.0, Backoff(pacing.max_failed_pod_backoff))
            )
            pacing.failed_pods[delete.node] = (now + backoff.next_delay(), backoff)
            events.record(
                body,
                "Warning",
                "FailedDaemonPod",
                f"Found failed daemon pod {namespace}/{delete.pod.name} "
                f"on node {delete.node}, will try to kill it",
            )
    outcomes = await asyncio.gather(
        *(kube.delete_pod(namespace, d.pod.name, d.pod.uid) for d in deletes)
    )
    for delete, outcome in zip(deletes, outcomes, strict=True):
        if outcome.ok:
            events.record(
                body,
                "Normal",
                "SuccessfulDelete",
                f"Deleted pod: {delete.pod.name} on node {delete.node} because {delete.why}",
            )
        elif not outcome.not_found:
            events.record(
                body,
                "Warning",
                "FailedDelete",
                f"Error deleting pod {delete.pod.name} on node {delete.node}: {outcome.message}",
            )


async def update_pods_in_place(
    kube: DaemonSetApi,
    events: EventRecorder,
    body: Mapping[str, Any],
    pacing: Pacing,
    updates: list[UpdatePod],
    spec: DaemonSetSpec,
    revision: str,
    now: float,
    override_of: Callable[[str], ResourceOverride | None] = lambda _node: None,
) -> set[str]:
    """Update each pod in place to the template's resources and images, with its node's
    resource override (`override_of`), and to `revision`, reading it first. A pod the API
    server will not resize (its new resources would change its QoS class, say), or whose
    resources other than CPU and memory change, is replaced instead. Returns the uids of the
    pods not updated (changed meanwhile, gone, refused, or deleted): the next pass plans them
    again."""
    if not updates:
        return set()
    namespace = body["metadata"]["namespace"]
    template = spec.template
    targets: dict[str, Target] = {}

    def target_for(node: str) -> Target:
        override = override_of(node)
        key = override.key if override is not None else ""
        if key not in targets:
            targets[key] = Target.of(template, override)
        return targets[key]

    results = await asyncio.gather(
        *(
            _update_in_place(kube, namespace, update, target_for(update.node), revision)
            for update in updates
        )
    )
    not_updated = set()
    for update, result in zip(updates, results, strict=True):
        pod, node = update.pod.name, update.node
        if result.outcome is not None and result.outcome.ok:
            events.record(
                body,
                "Normal",
                "SuccessfulUpdatePodInPlace",
                f"Updated pod {pod} on node {node} in place: {result.changes}",
            )
            continue
        not_updated.add(update.pod.uid)
        outcome = result.outcome
        if outcome is None or outcome.not_found or _changed_meanwhile(outcome):
            continue
        if result.resize_refused:
            why = f"it cannot be resized in place ({outcome.message})"
            replace = DeletePod(node, update.pod, why)
            await delete_pods(kube, events, body, pacing, [replace], now)
            continue
        events.record(
            body,
            "Warning",
            "FailedUpdatePodInPlace",
            f"Error updating pod {pod} on node {node} in place: {outcome.message}",
        )
    return not_updated


def _changed_meanwhile(outcome: Outcome) -> bool:
    """The patch's test of the resourceVersion failed: the pod changed since it was read."""
    return outcome.status == 422 and "test failed" in outcome.message


@dataclass(frozen=True)
class _Updated:
    # The last write's outcome; None: nothing was sent (the pod is not the one planned for).
    outcome: Outcome | None
    # What changed, for the event; whether the refusal was the resize's.
    changes: str = ""
    resize_refused: bool = False


async def _update_in_place(
    kube: DaemonSetApi, namespace: str, update: UpdatePod, target: Target, revision: str
) -> _Updated:
    pod = await kube.get_object(POD_KIND, namespace, update.pod.name)
    metadata = (pod or {}).get("metadata") or {}
    if pod is None or metadata.get("uid") != update.pod.uid or metadata.get("deletionTimestamp"):
        return _Updated(None)
    if unresizable_change(pod, target):
        why = Outcome(422, "resources other than CPU and memory change")
        return _Updated(why, resize_refused=True)
    containers = (pod.get("spec") or {}).get("containers") or []
    changes = [
        f"container {c.get('name')} image {c.get('image')} -> {target.images[c.get('name')]}"
        for c in containers
        if c.get("name") in target.images and c.get("image") != target.images[c.get("name")]
    ]
    resize = resize_patch(pod, target)
    version, resized = None, []
    if resize is not None:
        outcome = await kube.resize_pod(namespace, update.pod.name, resize)
        if not outcome.ok:
            return _Updated(outcome, resize_refused=outcome.status in (403, 422))
        version = outcome.resource_version or None
        resized = [container["name"] for container in resize["spec"]["containers"]]
        changes += [f"container {name} resized" for name in resized]
    operations = update_patch(pod, target, revision, resized, version)
    if operations is None:
        return _Updated(None)
    outcome = await kube.patch_object(POD_KIND, namespace, update.pod.name, operations)
    return _Updated(outcome, ", ".join(changes) or "labels only")


# Fresh names tried for one pod before its create counts as refused.
NAME_ATTEMPTS = 8


async def create_pods(
    kube: DaemonSetApi,
    events: EventRecorder,
    body: Mapping[str, Any],
    pacing: Pacing,
    creates: list[PlannedCreate],
    build: Callable[[PlannedCreate], dict[str, Any]],
    clock: Callable[[], float],
    in_flight: int,
    admitted_now: bool = False,
) -> Outcome | None:
    """Create through a window of creates in flight (`CreateWindow`) that widens with each
    pod created and closes at the first refusal: the creates already sent finish, nothing more
    is sent, as the native controller stops at a refused batch (a quota that refuses one pod
    refuses the next thousands too). The window opens at 1 after a refusal, else as wide as
    the last creates went, or wide when the pass's own dry run was admitted (`admitted_now`,
    `CreateWindow.first_width`), and grows to `in_flight`. Returns the refusal, if any."""
    namespace = body["metadata"]["namespace"]

    async def send(create: PlannedCreate) -> tuple[str, Outcome]:
        # A pod's body is built just before it is sent, and only as many at a time as the
        # window lets out: thousands built at once, by several CustomDaemonSets rolling out
        # together, were most of the operator's peak memory (docs/benchmarks.md).
        for _ in range(NAME_ATTEMPTS):
            pod = build(create)
            name = pod["metadata"]["name"]
            # Expected before it is sent: the watch may show it before the answer comes.
            pacing.expected[create.node] = ExpectedPod(
                name, pod["metadata"]["labels"][REVISION_LABEL], clock()
            )
            outcome = await _create_pod(kube, namespace, pod)
            # A fresh name already taken is another pod's: five random characters collide
            # now and then over thousands of pods. As the API server does for generateName,
            # try another name at once rather than wait out a backoff.
            if not outcome.already_exists:
                break
            API_RETRIES.labels("create", "name_taken").inc()
        return name, outcome

    window = CreateWindow.opening(
        CreateWindow.first_width(pacing.first_create_window, admitted_now), in_flight
    )
    running: dict[asyncio.Task[tuple[str, Outcome]], tuple[int, PlannedCreate]] = {}
    sent = 0
    failure: Outcome | None = None
    terminating = False
    try:
        while True:
            while window.may_send() and sent < len(creates):
                create = creates[sent]
                running[asyncio.ensure_future(send(create))] = (sent, create)
                window.sent()
                sent += 1
            if not running:
                break
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            # In the order they were sent, so events read as the creates went out.
            for task in sorted(done, key=lambda t: running[t][0]):
                _, create = running.pop(task)
                name, outcome = task.result()
                window.answered(outcome.ok)
                if outcome.ok:
                    events.record(
                        body,
                        "Normal",
                        "SuccessfulCreate",
                        f"Created pod: {name} on node {create.node}",
                    )
                    continue
                # Refused: nothing to wait for (a pod the watch showed meanwhile is seen).
                expected = pacing.expected.get(create.node)
                if expected is not None and expected.name == name:
                    del pacing.expected[create.node]
                if outcome.namespace_terminating:
                    # As the native controller: nothing to create in a namespace on its way
                    # out, and nothing to warn about.
                    terminating = True
                    continue
                if failure is None:
                    failure = outcome
                events.record(
                    body,
                    "Warning",
                    "FailedCreate",
                    f"Error creating pod for node {create.node}: {outcome.message}",
                )
    finally:
        # Stopped (the operator shutting down): the creates in flight stop with the pass.
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
    if terminating:
        return None
    pacing.first_create_window = window.next_first(pacing.first_create_window)
    return failure


async def _create_pod(kube: DaemonSetApi, namespace: str, pod: dict[str, Any]) -> Outcome:
    """Create, and if the answer was lost on the way, send the same pod again: its name makes
    the second request find the first one's pod (AlreadyExists) instead of making a second
    pod, so a retried create is created once."""
    outcome = await kube.create_pod(namespace, pod)
    if outcome.status != 0:
        return outcome
    API_RETRIES.labels("create", "lost_answer").inc()
    retried = await kube.create_pod(namespace, pod)
    return Outcome(201) if retried.already_exists else retried


async def send_claims(
    kube: DaemonSetApi,
    body: Mapping[str, Any],
    pacing: Pacing,
    claims: PodClaims,
    clock: Callable[[], float],
) -> list[str]:
    """Adopt, then release, as the plan says; the watch then shows the pods joining or
    leaving. Returns the nodes of the adoptions refused (the pod changed meanwhile): the plan
    counted on their pods."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    refused = []
    for claim in claims.adopt:
        outcome = await kube.patch_object(POD_KIND, namespace, claim.name, claim.patch)
        if outcome.ok:
            logger.info("%s/%s: adopted pod %s", namespace, name, claim.name)
            if claim.node and claim.node not in pacing.expected:
                # Until the watch shows it as ours, its node must not get a second pod.
                pacing.expected[claim.node] = ExpectedPod(claim.name, claim.revision, clock())
        elif claim.node:
            refused.append(claim.node)
    for claim in claims.release:
        outcome = await kube.patch_object(POD_KIND, namespace, claim.name, claim.patch)
        if outcome.ok:
            logger.info("%s/%s: released pod %s", namespace, name, claim.name)
    return refused


def pod_builder(
    body: Mapping[str, Any],
    history: History,
    template: Callable[[], Mapping[str, Any]],
    kept_back: Mapping[str, Mapping[str, Any]] | None = None,
    override_of: Callable[[str], ResourceOverride | None] = lambda _node: None,
) -> Callable[[PlannedCreate], dict[str, Any]]:
    """Builds each planned create's pod from its revision's template: the current one, which
    `template` gives (only once a pod is built), or by its hash one of `kept_back`
    (`revision_writes.kept_back_templates`) for a node a partition keeps back; with the
    node's resource override (`override_of`), whatever the revision."""
    makers: dict[str, DaemonPodMaker] = {}
    others = {
        history.revision: template,
        **{hash_: _given(t) for hash_, t in (kept_back or {}).items()},
    }

    def build(create: PlannedCreate) -> dict[str, Any]:
        if create.revision not in makers:
            makers[create.revision] = DaemonPodMaker.of(
                body, create.revision, others[create.revision]()
            )
        return makers[create.revision].pod(create.node, override_of(create.node))

    return build


def _given(template: Mapping[str, Any]) -> Callable[[], Mapping[str, Any]]:
    return lambda: template
