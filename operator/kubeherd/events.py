"""Events about kubeherd's resources, for `kubectl describe` and `kubectl get events`: one
recorder per kind, shared by all objects of it, with client-go's event spam filter."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Protocol

from kubeherd.meta import involved_object
from kubeherd.metrics.health import EVENTS_DROPPED

logger = logging.getLogger(__name__)


class EventSink(Protocol):
    def post_event_soon(
        self, involved: dict[str, Any], *, type_: str, reason: str, message: str
    ) -> None: ...


class EventBudget:
    """client-go's event spam filter (tools/record, EventSourceObjectSpamFilter): a burst of
    25 events per object and event type, then one more every 5 minutes, so a rollout to 5,000
    nodes, or an object that stays broken, does not post thousands of events.

    The key is the object and the type (Normal or Warning), as client-go's getSpamKey has it,
    not the reason: with the reason in it, each reason kubeherd can give would get a burst of
    its own, multiplying what one object can post. The type is kept apart so a flood of Normal
    events (SuccessfulCreate in a rollout) cannot use up the budget of the Warnings that say
    something is wrong."""

    def __init__(self, burst: int = 25, refill_seconds: float = 300.0) -> None:
        self.burst = burst
        self.refill_seconds = refill_seconds
        self._tokens: dict[tuple[Hashable, str], tuple[float, float]] = {}

    def allow(self, key: Hashable, type_: str, now: float) -> bool:
        tokens, updated = self._tokens.get((key, type_), (float(self.burst), now))
        tokens = min(self.burst, tokens + (now - updated) / self.refill_seconds)
        allowed = tokens >= 1
        self._tokens[(key, type_)] = (tokens - 1 if allowed else tokens, now)
        return allowed

    def forget(self, key: Hashable) -> None:
        for entry in [entry for entry in self._tokens if entry[0] == key]:
            del self._tokens[entry]


class EventRecorder:
    """Logs every event and posts it in the background (a slow post never holds up a pass),
    within the budget; `once` posts a complaint once per spec generation."""

    def __init__(
        self,
        sink: EventSink,
        kind: str,
        *,
        budget: EventBudget | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._sink = sink
        self._kind = kind
        self._budget = budget or EventBudget()
        self._clock = clock
        self._posted_once: dict[Hashable, set[tuple[int, str]]] = {}

    def record(self, body: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        key = _key_of(body)
        logger.info("%s/%s: %s: %s", *key, reason, message)
        if not self._budget.allow(key, type_, self._clock()):
            EVENTS_DROPPED.labels(self._kind).inc()
            return
        self._sink.post_event_soon(
            involved_object(body, self._kind), type_=type_, reason=reason, message=message
        )

    def warn_once(self, body: Mapping[str, Any], reason: str, message: str) -> None:
        """One Warning per spec generation and reason: a pass repeated every few seconds must
        not post the same complaint again."""
        generation = int(body["metadata"].get("generation") or 0)
        posted = self._posted_once.setdefault(_key_of(body), set())
        if (generation, reason) in posted:
            return
        posted.add((generation, reason))
        self.record(body, "Warning", reason, message)

    def forget(self, key: tuple[str, str]) -> None:
        self._budget.forget(key)
        self._posted_once.pop(key, None)


def _key_of(body: Mapping[str, Any]) -> tuple[str, str]:
    metadata = body["metadata"]
    return (str(metadata.get("namespace") or ""), str(metadata["name"]))
