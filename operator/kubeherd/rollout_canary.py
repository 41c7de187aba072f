"""`kubeherd rollout canary validate|pause|unpause|fail cds/NAME`: a person's word on the canary
of a CustomDaemonSet's current template (rollingUpdate.canary).

The command writes the canary command annotation, which the controller carries out once, and
waits a little to report what it did. The decisions are pure functions of plain data; the API
calls are at the bottom.
"""

from __future__ import annotations

import asyncio
import datetime
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

from kubeherd.daemonset.core.canary_commands import CANARY_COMMAND_ANNOTATION, CanaryVerb
from kubeherd.rollouts import (
    CUSTOMDAEMONSET_KIND,
    POLL_SECONDS,
    RESOURCE,
    RolloutError,
    Target,
    connect,
    get_customdaemonset,
    run_work,
)

# Which phases each command applies to, and what it leads to.
APPLIES_TO = {
    CanaryVerb.VALIDATE: ("Running", "Paused"),
    CanaryVerb.PAUSE: ("Running",),
    CanaryVerb.UNPAUSE: ("Paused",),
    CanaryVerb.FAIL: ("Running", "Paused"),
}
DONE = {
    CanaryVerb.VALIDATE: "validated",
    CanaryVerb.PAUSE: "paused",
    CanaryVerb.UNPAUSE: "unpaused",
    CanaryVerb.FAIL: "failed",
}
# How long the command waits for the controller to carry it out.
CARRY_OUT_TIMEOUT = 30.0


def command_value(cds: Mapping[str, Any], verb: CanaryVerb, now: float) -> str:
    """The annotation's value for `verb` on the canary of the current template; a RolloutError
    says why there is nothing to do."""
    name = cds["metadata"]["name"]
    status = cds.get("status") or {}
    canary = status.get("canary") or {}
    if not canary or canary.get("revision") != status.get("updateRevision"):
        raise RolloutError(f"{RESOURCE}/{name} has no canary for its current template")
    phase = str(canary.get("phase"))
    if phase not in APPLIES_TO[verb]:
        raise RolloutError(f"{RESOURCE}/{name}: the canary is {phase}; cannot {verb} it")
    revision_hash = str(canary["revision"]).removeprefix(f"{name}-")
    stamp = datetime.datetime.fromtimestamp(now, datetime.UTC).isoformat(timespec="microseconds")
    return f"{verb} {revision_hash} {stamp}"


def annotation_patch(value: str) -> dict[str, Any]:
    return {"metadata": {"annotations": {CANARY_COMMAND_ANNOTATION: value}}}


def carried_out(cds: Mapping[str, Any], value: str) -> str | None:
    """The canary's phase once the controller carried out the command `value`, else None."""
    canary = (cds.get("status") or {}).get("canary") or {}
    return str(canary.get("phase")) if canary.get("command") == value else None


async def canary(target: Target, verb: CanaryVerb, out: TextIO) -> None:
    kube, namespace = await connect(target)
    resource = f"{RESOURCE}/{target.name}"
    try:
        cds = await get_customdaemonset(kube, namespace, target.name)
        value = command_value(cds, verb, time.time())
        outcome = await kube.patch_object(
            CUSTOMDAEMONSET_KIND,
            namespace,
            target.name,
            annotation_patch(value),
            content_type="application/merge-patch+json",
        )
        if not outcome.ok:
            raise RolloutError(outcome.message)
        deadline = time.monotonic() + CARRY_OUT_TIMEOUT
        while time.monotonic() < deadline:
            phase = carried_out(await get_customdaemonset(kube, namespace, target.name), value)
            if phase is not None:
                out.write(f"{resource} canary {DONE[verb]}: it is {phase}\n")
                return
            await asyncio.sleep(POLL_SECONDS)
    finally:
        await kube.close()
    raise RolloutError(
        f"{resource}: canary {verb} requested, but kubeherd has not carried it out within "
        f"{CARRY_OUT_TIMEOUT:.0f}s; is the operator running?"
    )


def run(options: Any) -> int:
    """`rollout canary VERB cds/NAME`: the exit code."""
    verb = CanaryVerb(options.verb)
    return run_work(options, lambda target: canary(target, verb, sys.stdout))
