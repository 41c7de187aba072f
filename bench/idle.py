"""B4's idle window: when it may start, and what a client wrote during it.

The window starts once every CustomDaemonSet's status says its rollout is done and that status
has stopped changing: a status write that trails the last pod is the rollout's, not idleness.
Which writes a client made comes from the API server's audit log, which names the user, the verb
and the resource of each request (the FlowSchema counters only say how many).
"""

from __future__ import annotations

import asyncio
import datetime
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.api import Api, Json
from bench.workload import BENCH_LABEL

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
# How long every status must stay the same before the window starts.
STABLE_SECONDS = 5.0
SETTLE_TIMEOUT = 600.0
POLL_INTERVAL = 1.0
# How often, while the statuses are stable but not every pod is available, the pods themselves
# are listed to tell whether the statuses are right.
POD_CHECK_INTERVAL = 10.0
# Names and times kept per kind of write, enough to tell what they were.
EXAMPLES = 5


def rollout_done(item: Json, nodes: int) -> bool:
    """Whether a CustomDaemonSet's status says its pods run, up to date, on all `nodes`."""
    status = item.get("status") or {}
    return caught_up(item, nodes) and status.get("numberAvailable") == nodes


def caught_up(item: Json, nodes: int) -> bool:
    """Whether its status is of its current generation, with an up-to-date pod on every node."""
    status = item.get("status") or {}
    generation = item["metadata"].get("generation")
    counts = [status.get(key) for key in ("desiredNumberScheduled", "updatedNumberScheduled")]
    return status.get("observedGeneration") == generation and counts == [nodes] * 2


@dataclass(frozen=True)
class Settled:
    seconds: float
    # Pods that stayed Running but not Ready, so that no status could say every pod available.
    not_ready_pods: int


async def wait_until_settled(
    api: Api, path: str, pods_path: str, names: list[str], nodes: int
) -> Settled:
    """Until every named CustomDaemonSet's rollout is done by its status and no status has
    changed for STABLE_SECONDS.

    A pod may stay not Ready for a reason of the cluster's: when kwok's node heartbeats lag on
    a loaded machine, kube-controller-manager marks the pods of those nodes not Ready, and kwok
    never makes them Ready again. A status that counts exactly the Ready pods is settled too;
    how many were not Ready is part of the answer."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    last_seen: dict[str, Any] = {}
    stable_since = started
    checked_pods_at = started - POD_CHECK_INTERVAL
    wanted = set(names)
    while True:
        items = [i for i in (await api.list_all(path))[0] if i["metadata"]["name"] in wanted]
        statuses = {item["metadata"]["name"]: item.get("status") for item in items}
        now = loop.time()
        if statuses != last_seen:
            last_seen, stable_since = statuses, now
        stable = len(items) == len(wanted) and now - stable_since >= STABLE_SECONDS
        if stable and all(rollout_done(item, nodes) for item in items):
            return Settled(now - started, 0)
        if (
            stable
            and all(caught_up(item, nodes) for item in items)
            and now - checked_pods_at >= POD_CHECK_INTERVAL
        ):
            checked_pods_at = now
            ready = await _ready_pods(api, pods_path, names)
            available = {i["metadata"]["name"]: i["status"].get("numberAvailable") for i in items}
            if all(available[name] == ready.get(name, 0) for name in names):
                return Settled(loop.time() - started, len(names) * nodes - sum(ready.values()))
        if now - started > SETTLE_TIMEOUT:
            finished = sum(1 for item in items if rollout_done(item, nodes))
            raise TimeoutError(
                f"{finished} of {len(wanted)} CustomDaemonSet statuses done, the last change "
                f"{now - stable_since:.0f}s ago, after {SETTLE_TIMEOUT:.0f}s"
            )
        await asyncio.sleep(POLL_INTERVAL)


async def _ready_pods(api: Api, pods_path: str, names: list[str]) -> Counter[str]:
    """Ready pods per workload, as the API server has them now."""
    pods, _ = await api.list_all(pods_path, labelSelector=f"{BENCH_LABEL} in ({','.join(names)})")
    ready: Counter[str] = Counter()
    for pod in pods:
        conditions = (pod.get("status") or {}).get("conditions") or []
        if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
            ready[pod["metadata"]["labels"][BENCH_LABEL]] += 1
    return ready


def now_utc() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _audit_files(log: Path) -> list[Path]:
    """The audit log and its rotated backups (named after it, with a time in between)."""
    return sorted(log.parent.glob(f"{log.stem}*{log.suffix}"))


def _timestamp(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _audit_events(log: Path, username: str) -> Iterator[Json]:
    needle = json.dumps(username).encode()
    for path in _audit_files(log):
        with path.open("rb") as lines:
            for line in lines:
                if needle in line:
                    yield json.loads(line)


def _status_sent(event: Json) -> Json | None:
    """The status a status patch sent, where the audit policy keeps request bodies (the local
    cluster's does for CustomDaemonSets: `AUDIT_POLICY`)."""
    ref = event.get("objectRef") or {}
    if ref.get("subresource") != "status" or event.get("verb") != "patch":
        return None
    sent = (event.get("requestObject") or {}).get("status")
    return sent if isinstance(sent, dict) else None


def changed_fields(before: Json | None, after: Json) -> list[str]:
    """The status fields a patch changed from the status its object's previous patch sent
    (kubeherd sends the whole status each time): [] for a patch that changed nothing."""
    if before is None:
        return ["(first seen)"]
    return sorted(key for key in before.keys() | after.keys() if before.get(key) != after.get(key))


def writes_between(
    log: Path, username: str, since: datetime.datetime, until: datetime.datetime
) -> list[dict[str, Any]]:
    """`username`'s writes the API server received between the two times, by verb, resource,
    subresource and answer: how many, and the first few objects with their second in the
    window. Status patches also say which fields they changed, and how many changed none."""
    counts: Counter[tuple[str, str, str, int]] = Counter()
    examples: dict[tuple[str, str, str, int], list[str]] = {}
    changes: dict[tuple[str, str, str, int], Counter[str]] = {}
    last_sent: dict[tuple[str, str, str], Json] = {}
    for event in _audit_events(log, username):
        if event.get("stage") != "ResponseComplete" or event.get("verb") not in WRITE_VERBS:
            continue
        ref = event.get("objectRef") or {}
        code = int((event.get("responseStatus") or {}).get("code") or 0)
        sent = _status_sent(event) if code < 300 else None
        target = (ref.get("resource", ""), ref.get("namespace", ""), ref.get("name", ""))
        previous = last_sent.get(target)
        if sent is not None:
            last_sent[target] = sent
        received = _timestamp(event["requestReceivedTimestamp"])
        if not since <= received < until:
            continue
        key = (event["verb"], ref.get("resource", ""), ref.get("subresource", ""), code)
        counts[key] += 1
        if sent is not None:
            changed = changed_fields(previous, sent)
            changes.setdefault(key, Counter()).update(changed or ["(nothing)"])
        named = examples.setdefault(key, [])
        if len(named) < EXAMPLES:
            offset = (received - since).total_seconds()
            named.append(f"{ref.get('namespace', '')}/{ref.get('name', '')} at {offset:.1f}s")
    return [
        {
            "verb": verb,
            "resource": resource,
            "subresource": subresource,
            "code": code,
            "count": count,
            "examples": examples[(verb, resource, subresource, code)],
            **(
                {"changed": dict(changes[key].most_common())}
                if (key := (verb, resource, subresource, code)) in changes
                else {}
            ),
        }
        for (verb, resource, subresource, code), count in counts.most_common()
    ]


def describe(writes: list[dict[str, Any]]) -> str:
    """One line: what the writes were."""
    if not writes:
        return "none"
    return "; ".join(
        f"{w['count']} {w['verb']} {w['resource']}"
        + (f"/{w['subresource']}" if w["subresource"] else "")
        + f" ({w['code']}, e.g. {', '.join(w['examples'][:2])}"
        + (f"; fields changed: {_counted(w['changed'])}" if w.get("changed") else "")
        + ")"
        for w in writes
    )


def _counted(fields: dict[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in fields.items())
