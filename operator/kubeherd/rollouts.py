"""`kubeherd rollout status|history|undo` for CustomDaemonSets.

kubectl's rollout commands only know the built-in workloads, so these do for a CustomDaemonSet
what `kubectl rollout` does for a DaemonSet, reading what the controller records: the status,
the Progressing condition and the ControllerRevisions.

The decisions are pure functions of plain data; the API calls are at the bottom.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import yaml

from kubeherd.daemonset.core.pods import OWNER_LABEL
from kubeherd.daemonset.core.revisions import CHANGE_CAUSE_ANNOTATION, Revision, owned_revisions
from kubeherd.daemonset.shell.api import DaemonSetApi
from kubeherd.kube import config
from kubeherd.kube.client import Kube
from kubeherd.kube.kinds import KINDS
from kubeherd.kube.limits import WriteLimits
from kubeherd.kube.login import ConfigError, Login
from kubeherd.kube.outcomes import KubeError
from kubeherd.names import API_VERSION, CUSTOMDAEMONSET, CUSTOMDAEMONSETS, GROUP
from kubeherd.stop_signals import StopSignalError, stop_on_signals, until_stopped

KIND_NAMES = frozenset(
    {
        "cds",
        CUSTOMDAEMONSET.lower(),
        CUSTOMDAEMONSETS,
        f"{CUSTOMDAEMONSET.lower()}.{GROUP}",
        f"{CUSTOMDAEMONSETS}.{GROUP}",
    }
)
POLL_SECONDS = 1.0
CUSTOMDAEMONSET_KIND = KINDS[(API_VERSION, CUSTOMDAEMONSET)]
# As kubectl names a resource in its messages.
RESOURCE = f"{CUSTOMDAEMONSET.lower()}.{GROUP}"


class RolloutError(Exception):
    """A failure to report as `error: ...` with a non-zero exit."""


def parse_resource(text: str) -> str:
    """The name in `cds/NAME` (or any of the resource's other spellings)."""
    kind, slash, name = text.partition("/")
    if not slash or not name or "/" in name:
        raise RolloutError(f"expected cds/NAME, got {text!r}")
    if kind.lower() not in KIND_NAMES:
        raise RolloutError(
            f"only CustomDaemonSets have kubeherd rollouts (cds/NAME); got {kind!r}: "
            "use kubectl rollout for built-in workloads"
        )
    return name


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(h|m|s)")


def parse_duration(text: str) -> float:
    """Seconds in a kubectl-style duration: `90`, `30s`, `5m`, `1h`, `1m30s`."""
    text = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise ValueError(f"invalid duration {text!r}: use e.g. 90s, 5m or 1h30m")
    factor = {"h": 3600.0, "m": 60.0, "s": 1.0}
    return sum(float(number) * factor[unit] for number, unit in parts)


@dataclass(frozen=True)
class Verdict:
    """What `rollout status` says now; `done` ends the wait, `failed` with an error."""

    message: str
    done: bool = False
    failed: bool = False


def status_verdict(cds: Mapping[str, Any]) -> Verdict:
    """The rules of `kubectl rollout status daemonset`, plus kubeherd's stuck, partition, wave
    and canary."""
    name = cds["metadata"]["name"]
    spec = cds.get("spec") or {}
    status = cds.get("status") or {}
    if (spec.get("updateStrategy") or {}).get("type") == "OnDelete":
        return Verdict(
            "rollout status is only available for RollingUpdate strategy type", failed=True
        )
    if int(status.get("observedGeneration") or 0) < int(cds["metadata"].get("generation") or 0):
        return Verdict("Waiting for customdaemonset spec update to be observed...")
    progressing: Mapping[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Progressing"), {}
    )
    reason = progressing.get("reason")
    desired = int(status.get("desiredNumberScheduled") or 0)
    updated = int(status.get("updatedNumberScheduled") or 0)
    available = int(status.get("numberAvailable") or 0)
    if reason == "ProgressDeadlineExceeded":
        return Verdict(
            f'customdaemonset "{name}" rollout is stuck: {progressing.get("message")}', failed=True
        )
    if reason == "CanaryFailed":
        return Verdict(
            f'customdaemonset "{name}" canary failed: {progressing.get("message")}', failed=True
        )
    if reason == "PartitionRolledOut":
        return Verdict(
            f"partitioned roll out complete: {updated} of {desired} nodes updated; "
            "the partition keeps the rest on the previous revision",
            done=True,
        )
    if reason == "WaveRolledOut":
        return Verdict(
            f"roll out of this wave complete: {updated} of {desired} nodes updated; "
            "rollingUpdate.selector keeps the rest on their revision",
            done=True,
        )
    waiting = f'Waiting for customdaemonset "{name}" rollout to finish: '
    if updated < desired:
        paused = {"Paused": " (paused)", "CanaryPaused": " (canary paused)"}.get(str(reason), "")
        return Verdict(f"{waiting}{updated} out of {desired} new pods have been updated...{paused}")
    if available < desired:
        return Verdict(f"{waiting}{available} of {desired} updated pods are available...")
    return Verdict(f'customdaemonset "{name}" successfully rolled out', done=True)


def _images(template: Mapping[str, Any]) -> str:
    containers = (template.get("spec") or {}).get("containers") or []
    return ",".join(str(container.get("image", "")) for container in containers) or "<none>"


def history_table(name: str, revisions: Sequence[Revision], causes: Mapping[str, str]) -> str:
    """The table `kubectl rollout history` prints, with the images of each revision."""
    if not revisions:
        return "No rollout history found.\n"
    rows = [("REVISION", "IMAGES", "CHANGE-CAUSE")]
    rows += [
        (str(r.number), _images(r.template), causes.get(r.name) or "<none>") for r in revisions
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(2)]
    lines = [f"customdaemonset.kubeherd.io/{name}"]
    lines += [f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]}" for row in rows]
    return "\n".join(lines) + "\n"


def find_revision(revisions: Iterable[Revision], number: int) -> Revision:
    for revision in revisions:
        if revision.number == number:
            return revision
    raise RolloutError(f"unable to find the specified revision {number}")


def undo_target(
    name: str, revisions: Sequence[Revision], update_revision: str, to_revision: int
) -> Revision:
    """The revision `undo` goes back to: the given one, else the newest before the current."""
    if to_revision:
        try:
            return find_revision(revisions, to_revision)
        except RolloutError:
            raise RolloutError(
                f"unable to find specified revision {to_revision} in history"
            ) from None
    ordered = sorted(revisions, key=lambda revision: revision.number)
    current = next(
        (r for r in ordered if r.name == update_revision), ordered[-1] if ordered else None
    )
    earlier = [r for r in ordered if current is not None and r.number < current.number]
    if not earlier:
        raise RolloutError(f'no rollout history found for customdaemonset "{name}"')
    return earlier[-1]


def rollback_patch(cds: Mapping[str, Any], revision: Revision) -> list[dict[str, Any]] | None:
    """The JSON patch that puts `revision`'s template back; None when the spec already has it.

    A JSON patch replaces the template whole (a merge patch would keep fields the old one lacks;
    custom resources have no strategic merge), and its test fails on a concurrent edit instead
    of overwriting it."""
    template = dict(revision.template)
    if template == (cds.get("spec") or {}).get("template"):
        return None
    return [
        {
            "op": "test",
            "path": "/metadata/resourceVersion",
            "value": cds["metadata"]["resourceVersion"],
        },
        {"op": "replace", "path": "/spec/template", "value": template},
    ]


def is_concurrent_edit(status: int, message: str) -> bool:
    """Whether a refused rollback patch means someone changed the object first: a 409, or the 422
    of a failed resourceVersion test. Any other 422 is the schema refusing the old template,
    which trying again cannot fix."""
    return status == 409 or (status == 422 and "/metadata/resourceVersion" in message)


# The API ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    name: str
    namespace: str | None
    kubeconfig: str | None
    context: str | None = None


def _login(target: Target) -> Login:
    """The login kubectl would use: the kubeconfig (--kubeconfig, else KUBECONFIG or
    ~/.kube/config) and its context (--context, else the current one), else the pod's service
    account. kubectl's order, not the operator's: a kubeconfig in a pod wins here."""
    try:
        return config.from_kubeconfig(target.kubeconfig, target.context)
    except ConfigError as kubeconfig_error:
        # A kubeconfig or context named on the command line must be used, never silently
        # replaced.
        if target.kubeconfig:
            raise RolloutError(f"cannot load --kubeconfig: {kubeconfig_error}") from None
        if target.context:
            raise RolloutError(f"cannot use --context: {kubeconfig_error}") from None
        try:
            return config.in_cluster()
        except ConfigError:
            raise RolloutError(
                f"{kubeconfig_error}, and not running in a cluster; "
                "set KUBECONFIG or pass --kubeconfig"
            ) from None


async def connect(target: Target) -> tuple[Kube, str]:
    login = _login(target)
    return Kube.connect(WriteLimits(), login), target.namespace or login.namespace or "default"


async def get_customdaemonset(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    try:
        found = await kube.get_object(CUSTOMDAEMONSET_KIND, namespace, name)
    except KubeError as error:
        raise RolloutError(str(error)) from None
    if found is None:
        raise RolloutError(f'{CUSTOMDAEMONSETS}.{GROUP} "{name}" not found')
    return found


async def _revisions(kube: Kube, cds: Mapping[str, Any]) -> tuple[list[Revision], dict[str, str]]:
    metadata = cds["metadata"]
    try:
        # A refused list (RBAC, say) raises: it must not pass for an empty history.
        bodies = await DaemonSetApi(kube).list_controller_revisions(
            metadata["namespace"], f"{OWNER_LABEL}={metadata['name']}"
        )
    except KubeError as error:
        raise RolloutError(f"listing ControllerRevisions: {error}") from None
    causes = {
        body["metadata"]["name"]: (body["metadata"].get("annotations") or {}).get(
            CHANGE_CAUSE_ANNOTATION, ""
        )
        for body in bodies
    }
    return owned_revisions(bodies, metadata["uid"]), causes


async def status(target: Target, timeout: float, out: TextIO) -> None:
    kube, namespace = await connect(target)
    try:
        deadline = time.monotonic() + timeout if timeout > 0 else None
        last = ""
        while True:
            verdict = status_verdict(await get_customdaemonset(kube, namespace, target.name))
            if verdict.failed:
                raise RolloutError(verdict.message)
            if verdict.message != last:
                out.write(verdict.message + "\n")
                out.flush()
                last = verdict.message
            if verdict.done:
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise RolloutError("timed out waiting for the condition")
            await asyncio.sleep(POLL_SECONDS)
    finally:
        await kube.close()


async def history(target: Target, revision: int, out: TextIO) -> None:
    kube, namespace = await connect(target)
    try:
        cds = await get_customdaemonset(kube, namespace, target.name)
        revisions, causes = await _revisions(kube, cds)
    finally:
        await kube.close()
    if not revision:
        out.write(history_table(target.name, revisions, causes))
        return
    chosen = find_revision(revisions, revision)
    out.write(f"{RESOURCE}/{target.name} with revision #{revision}\n")
    out.write(yaml.safe_dump({"template": dict(chosen.template)}, sort_keys=False))


async def undo(target: Target, to_revision: int, out: TextIO) -> None:
    kube, namespace = await connect(target)
    try:
        cds = await get_customdaemonset(kube, namespace, target.name)
        revisions, _causes = await _revisions(kube, cds)
        update_revision = str((cds.get("status") or {}).get("updateRevision") or "")
        chosen = undo_target(target.name, revisions, update_revision, to_revision)
        resource = f"{RESOURCE}/{target.name}"
        patch = rollback_patch(cds, chosen)
        if patch is None:
            out.write(
                f"{resource} skipped rollback (current template already matches revision "
                f"{chosen.number})\n"
            )
            return
        outcome = await kube.patch_object(CUSTOMDAEMONSET_KIND, namespace, target.name, patch)
        if is_concurrent_edit(outcome.status, outcome.message):
            raise RolloutError("the customdaemonset changed while rolling back; try again")
        if not outcome.ok:
            raise RolloutError(outcome.message)
    finally:
        await kube.close()
    out.write(f"{resource} rolled back\n")


def run(action: str, options: Any) -> int:
    """`rollout status|history|undo`: print errors as kubectl does and return the exit code."""

    def work(target: Target) -> Coroutine[Any, Any, None]:
        if action == "status":
            return status(target, options.timeout, sys.stdout)
        if action == "history":
            return history(target, options.revision, sys.stdout)
        return undo(target, options.to_revision, sys.stdout)

    return run_work(options, work)


def run_work(options: Any, work: Callable[[Target], Coroutine[Any, Any, None]]) -> int:
    """Run a rollout command's work on the CustomDaemonSet `options` name; print errors as
    kubectl does and return the exit code."""
    import aiohttp

    stop_on_signals()
    try:
        target = Target(
            parse_resource(options.resource),
            options.namespace,
            options.kubeconfig,
            options.context,
        )
        asyncio.run(until_stopped(work(target)))
    except RolloutError as error:
        sys.stderr.write(f"error: {error}\n")
        return 1
    except (aiohttp.ClientError, TimeoutError) as error:
        sys.stderr.write(f"error: request to the API server failed: {error}\n")
        return 1
    except (StopSignalError, KeyboardInterrupt):
        # Interrupting `rollout status` is how a user stops waiting: no traceback, and the exit
        # code kubectl gives.
        return 1
    return 0
