"""A configuration judged by the very image that will run it. Pure.

No catalog says what a custom image accepts (its out-of-tree plugins decode and check their own
args), nor what an official image of a minor newer than kubeherd's catalogs accepts. Before such a
configuration replaces the running one, a short-lived pod runs that image's kube-scheduler on it,
as far as kube-scheduler goes before it needs an API server: with `--write-config-to` it decodes
the file strictly, defaults and validates it, builds every profile's plugins (so each plugin's
constructor checks its args), writes the completed configuration and exits 0. Any other exit is a
refusal, whose words the kubelet keeps as the container's termination message (the log's tail,
FallbackToLogsOnError).

The judge cannot act on the cluster: it has no service-account token and is pointed at an API
server address where nothing listens (it never gets as far as using one). In everything that
decides whether it starts, it is a scheduler pod: the same image, command, ConfigMap, security
context, pull secrets, node selector, tolerations and priority. The leader elector's timing rule,
which kube-scheduler checks only when it gets there, is client-go's in every image and kubeherd
checks it itself.

A pod named after what it judges (image, command and configuration): one judge per configuration,
and a lost watch or a restart of the operator finds the same pod again.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubeherd.meta import parse_time
from kubeherd.scheduler.core.objects import (
    CONFIG_HASH_ANNOTATION,
    config_mount,
    config_volume,
    container_security_context,
    placement,
    pod_security_context,
    scheduler_command,
)
from kubeherd.scheduler.core.owner import MANAGED_BY_LABEL, OWNER_UID_LABEL, Owner

# On a judge pod: the judge key of what it judges.
JUDGE_LABEL = "kubeherd.io/judge"
JUDGE_COMPONENT = "kube-scheduler-judge"
# Nothing listens there: a judge that went past its checks could not reach the cluster.
UNREACHABLE_API_SERVER = "http://127.0.0.1:1"
JUDGE_FLAGS = (
    "--write-config-to=/dev/null",
    "--secure-port=0",
    f"--master={UNREACHABLE_API_SERVER}",
)
# The kubelet stops a judge that has not finished by then (an image pulled slowly counts).
JUDGE_DEADLINE_SECONDS = 120
# The controller gives up on a judge pod this long after creating it (a pod never scheduled has
# no kubelet to stop it), deletes it and tries again later.
JUDGE_PATIENCE_SECONDS = JUDGE_DEADLINE_SECONDS + 60
# What kube-scheduler needs to read a configuration and build its plugins (docs/schedulerprofile.md
# has the figures); the limits leave room for plugins that do more, and satisfy quotas that
# require limits.
JUDGE_REQUESTS = {"cpu": "50m", "memory": "64Mi"}
JUDGE_LIMITS = {"cpu": "500m", "memory": "256Mi"}
# How much of kube-scheduler's message the status and the event carry.
MESSAGE_LIMIT = 1000
# Why a judge container did not start or finish: the pod could not judge, which says nothing of
# the configuration.
CANNOT_RUN = frozenset({"OOMKilled", "StartError", "ContainerCannotRun", "ContainerStatusUnknown"})
# What keeps a judge container from starting, as the kubelet reports it while it waits.
STUCK_WAITING = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)


class Outcome(enum.Enum):
    ACCEPTED = "accepted"
    REFUSED = "refused"
    # Still judging (the message says what holds it up, if anything does).
    WAITING = "waiting"
    # The pod could not judge (a deadline, no memory, no start): nothing is known yet.
    FAILED = "failed"


@dataclass(frozen=True)
class Judgement:
    outcome: Outcome
    message: str = ""

    @property
    def final(self) -> bool:
        return self.outcome in (Outcome.ACCEPTED, Outcome.REFUSED)


def judge_key(image: str, command: list[str], config_hash: str) -> str:
    """What a verdict holds for: the image, its command line, and the configuration."""
    text = json.dumps([image, command, config_hash], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def judge_pod_name(owner: Owner, key: str) -> str:
    return f"{owner.name}-judge-{key}"


def template_judge_key(deployment: Mapping[str, Any] | None) -> str:
    """The judge key of what a scheduler Deployment's template runs ("" if it has none): equal
    to a configuration's key when the Deployment runs it already, so it needs no judge."""
    template = ((deployment or {}).get("spec") or {}).get("template") or {}
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    containers = (template.get("spec") or {}).get("containers") or []
    config_hash = annotations.get(CONFIG_HASH_ANNOTATION)
    if not containers or not config_hash:
        return ""
    container = containers[0]
    return judge_key(
        str(container.get("image") or ""), list(container.get("command") or []), str(config_hash)
    )


def judge_labels(owner: Owner, key: str) -> dict[str, str]:
    """Not the scheduler pods' labels: the Deployment's selector, its disruption budget, its
    network policy and the PodMonitor must not count a judge as a scheduler."""
    return {
        "app.kubernetes.io/name": JUDGE_COMPONENT,
        "app.kubernetes.io/instance": owner.name,
        MANAGED_BY_LABEL: "kubeherd",
        OWNER_UID_LABEL: owner.uid,
        JUDGE_LABEL: key,
    }


def judge_pod(
    spec: Mapping[str, Any], owner: Owner, *, image: str, config_hash: str
) -> dict[str, Any]:
    """The pod that runs `image`'s kube-scheduler on the configuration `config_hash` (whose
    ConfigMap it mounts), owned by the SchedulerProfile so that it goes with it."""
    command = scheduler_command(spec)
    key = judge_key(image, command, config_hash)
    container = {
        "name": "kube-scheduler",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        # Later flags win: these override any of the same name in spec.command.
        "command": [*command, *JUDGE_FLAGS],
        "resources": {"requests": dict(JUDGE_REQUESTS), "limits": dict(JUDGE_LIMITS)},
        "securityContext": container_security_context(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [config_mount()],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": judge_pod_name(owner, key),
            "namespace": owner.namespace,
            "labels": judge_labels(owner, key),
            "annotations": {CONFIG_HASH_ANNOTATION: config_hash},
            "ownerReferences": [owner.reference],
        },
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": JUDGE_DEADLINE_SECONDS,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 1,
            "securityContext": pod_security_context(),
            "containers": [container],
            "volumes": [config_volume(owner, config_hash)],
            **placement(spec, owner),
        },
    }


def read_judgement(pod: Mapping[str, Any], now: float) -> Judgement:
    """The verdict a judge pod gives, as its status shows it at `now`."""
    status = pod.get("status") or {}
    phase = status.get("phase")
    if phase == "Succeeded":
        return Judgement(Outcome.ACCEPTED)
    container = _container_status(status)
    if phase == "Failed":
        return _failed(status, container)
    created = parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
    holdup = _holdup(status, container)
    if created is not None and now - created > JUDGE_PATIENCE_SECONDS:
        return Judgement(
            Outcome.FAILED,
            f"it had not finished after {JUDGE_PATIENCE_SECONDS} s"
            + (f" ({holdup})" if holdup else ""),
        )
    return Judgement(Outcome.WAITING, holdup)


def _container_status(status: Mapping[str, Any]) -> Mapping[str, Any]:
    for container in status.get("containerStatuses") or []:
        if container.get("name") == "kube-scheduler":
            return dict(container)
    return {}


def _failed(status: Mapping[str, Any], container: Mapping[str, Any]) -> Judgement:
    if status.get("reason") == "DeadlineExceeded":
        return Judgement(
            Outcome.FAILED, f"it had not finished after {JUDGE_DEADLINE_SECONDS} s (its deadline)"
        )
    terminated = (container.get("state") or {}).get("terminated") or {}
    exit_code = int(terminated.get("exitCode") or 0)
    reason = str(terminated.get("reason") or "")
    # Exit codes above 128 are signals: something stopped kube-scheduler, it did not refuse.
    if terminated and reason not in CANNOT_RUN and 0 < exit_code < 128:
        words = refusal_message(str(terminated.get("message") or ""))
        return Judgement(Outcome.REFUSED, words or f"kube-scheduler exited with code {exit_code}")
    if terminated:
        detail = str(terminated.get("message") or "").strip().splitlines()
        return Judgement(
            Outcome.FAILED,
            f"{reason or 'exit'} (exit code {exit_code})" + (f": {detail[-1]}" if detail else ""),
        )
    return Judgement(
        Outcome.FAILED,
        f"the pod failed: {status.get('reason') or 'no reason given'}: "
        f"{status.get('message') or 'no message'}",
    )


def _holdup(status: Mapping[str, Any], container: Mapping[str, Any]) -> str:
    """What keeps a judge from running, as the kubelet or the scheduler reports it, or ""."""
    waiting = (container.get("state") or {}).get("waiting") or {}
    if waiting.get("reason") in STUCK_WAITING:
        return f"{waiting['reason']}: {waiting.get('message') or ''}".rstrip(": ")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"{condition.get('reason') or 'Unschedulable'}: {condition.get('message') or ''}"
    return ""


# klog's text format: `"command failed" err="..."`, the value quoted as Go quotes strings, or a
# multi-line value as `err=<` then tab-indented lines then ` >`.
_COMMAND_FAILED = re.compile(r'"command failed" err=(?:"((?:[^"\\]|\\.)*)"|<$)')
_GO_ESCAPE = re.compile(r"\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-7]{3}|.)")
_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    '"': '"',
    "'": "'",
}


def _go_unquote(quoted: str) -> str:
    def unescape(match: re.Match[str]) -> str:
        escape = match.group(0)[1:]
        if escape[0] in "xuU":
            return chr(int(escape[1:], 16))
        if escape[0].isdigit():
            return chr(int(escape, 8))
        return _SIMPLE_ESCAPES.get(escape, escape)

    return _GO_ESCAPE.sub(unescape, quoted)


def refusal_message(log_tail: str) -> str:
    """kube-scheduler's reason for refusing, from the end of its log: the error it exits with
    (text or JSON logging), a flag error, or a panic; else the last line."""
    lines = log_tail.splitlines()
    for index in range(len(lines) - 1, -1, -1):
        line = lines[index]
        found = _COMMAND_FAILED.search(line)
        if found is not None:
            if found.group(1) is not None:
                return _limit(_go_unquote(found.group(1)))
            following = []
            for continued in lines[index + 1 :]:
                if not continued.startswith("\t"):
                    break
                following.append(continued[1:])
            return _limit("\n".join(following))
        logged = _json_error(line)
        if logged:
            return _limit(logged)
    for prefix in ("Error: ", "panic: "):
        said = [line for line in lines if line.startswith(prefix)]
        if said:
            return _limit(said[-1].removeprefix("Error: "))
    rest = [line.strip() for line in lines if line.strip()]
    return _limit(rest[-1]) if rest else ""


def _json_error(line: str) -> str:
    """The error of a JSON log line (`--logging-format=json`) that reports the exit, else ""."""
    if not line.startswith("{"):
        return ""
    try:
        entry = json.loads(line)
    except ValueError:
        return ""
    if isinstance(entry, dict) and entry.get("msg") == "command failed":
        return str(entry.get("err") or "")
    return ""


def _limit(message: str) -> str:
    message = message.strip()
    return message if len(message) <= MESSAGE_LIMIT else message[: MESSAGE_LIMIT - 3] + "..."
