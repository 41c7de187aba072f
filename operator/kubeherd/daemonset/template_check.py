"""Whether the API server would run the template's pods at all: a dry-run create of one, once
per template. The admission webhook refuses such a template at `kubectl apply`, but it may have
been down, or the object older than it; the controller then reports it and changes no pod.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kubeherd.daemonset.state import TemplateCheck
from kubeherd.daemonset.template_review import (
    NO_IDENTITY,
    OperatorIdentity,
    borrowed_identity,
    checked_pod,
    no_verdict,
    pod_template_review,
)
from kubeherd.events import EventRecorder
from kubeherd.kube.client import Kube

logger = logging.getLogger(__name__)


def judged_valid_before(body: Mapping[str, Any]) -> bool:
    """Whether the status says the template of this generation was accepted already: a status
    for this generation is written only once the API server judged its template, and it carries
    TemplateValid only while the template is refused. A restarted operator then sends no
    dry-run for templates that already run. A status written while the selector was refused
    (SelectorValid) says nothing about the template: it was not judged."""
    status = body.get("status") or {}
    if status.get("observedGeneration") != body["metadata"].get("generation"):
        return False
    unjudged = {"TemplateValid", "SelectorValid"}
    return not any(c.get("type") in unjudged for c in status.get("conditions") or ())


# Who the operator is, once the API server has said (None until it answers).
IdentityLookup = Callable[[], Awaitable[OperatorIdentity | None]]


async def no_identity() -> OperatorIdentity:
    return NO_IDENTITY


async def judge_template(
    kube: Kube,
    events: EventRecorder,
    body: Mapping[str, Any],
    template_hash: str,
    check: TemplateCheck,
    operator: IdentityLookup = no_identity,
) -> float | None:
    """Ask the API server about the template: None once it has judged (`check` says how), else
    how long to wait before asking again. A template that would lend its pods the operator's
    identity is refused without asking: the API server would accept it."""
    pod = checked_pod(body)
    identity = await operator()
    if identity is None:
        return _no_verdict(events, body, check, "the operator's own identity is not known yet")
    borrowed = borrowed_identity(pod, identity)
    if borrowed is not None:
        _refuse(events, body, template_hash, check, borrowed)
        return None
    answer = await kube.dry_run_pod(body["metadata"]["namespace"], pod)
    if no_verdict(answer.status):
        message = str(answer.body.get("message") or f"HTTP {answer.status}")
        return _no_verdict(events, body, check, message)
    check.backoff.reset()
    refusal = pod_template_review(answer.status, answer.body).refusal or None
    _refuse(events, body, template_hash, check, refusal)
    return None


def _no_verdict(
    events: EventRecorder, body: Mapping[str, Any], check: TemplateCheck, message: str
) -> float:
    """Not knowing is no yes: an invalid node affinity would read as "no node matches" and
    delete every pod. What runs keeps running until the API server answers; the delay until
    the next try."""
    first_failure = check.backoff.delay == 0
    delay = check.backoff.next_delay()
    logger.warning(
        "%s/%s: cannot check the pod template (%s); again in %.0f s",
        body["metadata"]["namespace"],
        body["metadata"]["name"],
        message,
        delay,
    )
    if first_failure:
        events.record(
            body,
            "Warning",
            "TemplateCheckFailed",
            "The API server gave no verdict on the pod template; no pod changes until it "
            f"does: {message}",
        )
    return delay


def _refuse(
    events: EventRecorder,
    body: Mapping[str, Any],
    template_hash: str,
    check: TemplateCheck,
    refusal: str | None,
) -> None:
    """Record the verdict on the template (None: accepted), with an event when it is a new
    refusal."""
    check.checked = template_hash
    if refusal is not None and refusal != check.problem:
        events.record(
            body,
            "Warning",
            "InvalidTemplate",
            f"The pod template is refused; no pod changes until it is fixed: {refusal}",
        )
    check.problem = refusal
