"""A keyed runner, shared by the controllers: one pass at a time per object.

Watch events and timers only *mark* an object (all of it, or some of its nodes) and make sure
a task runs for it. The task takes everything marked so far and runs one pass over it; marks
made meanwhile are folded into its next pass, and it ends when nothing is marked. So a burst of
events costs one pass, a repeated event changes nothing, and two passes never race on one object.

Timers live in one table, by object and name ("status", "deadline", "create-retry" ...): a wake
set again under the same name replaces the earlier one, or with `merge` keeps the sooner time and
joins the marks, so no timer is lost and none piles up. A pass that raises is retried after a
delay that doubles per object and resets after a pass that succeeds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from kubeherd.kube.ratelimit import Backoff
from kubeherd.metrics.health import PASS_DURATION, PASS_ERRORS

logger = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)

RETRY_TIMER = "retry"


@dataclass
class Marks:
    """What a pass is asked to look at: everything, or only these nodes (none: only the
    object itself, e.g. its status)."""

    everything: bool = False
    nodes: set[str] = field(default_factory=set)

    def add(self, nodes: Iterable[str], everything: bool) -> None:
        self.everything |= everything
        self.nodes.update(nodes)


@dataclass
class _Timer:
    due: float
    handle: asyncio.TimerHandle
    marks: Marks


class KeyedRunner(Generic[K]):
    def __init__(
        self,
        run_pass: Callable[[K, Marks], Awaitable[None]],
        *,
        what: str,
        coalesce_seconds: float = 0.0,
        max_retry_delay: float = 60.0,
    ) -> None:
        self._run_pass = run_pass
        self._what = what
        self._coalesce_seconds = coalesce_seconds
        self._max_retry_delay = max_retry_delay
        self._marks: dict[K, Marks] = {}
        self._tasks: dict[K, asyncio.Task[None]] = {}
        self._timers: dict[tuple[K, str], _Timer] = {}
        self._retries: dict[K, Backoff] = {}

    def mark(self, key: K, *, nodes: Iterable[str] = (), everything: bool = False) -> None:
        """Ask for a pass over `nodes` (or everything) of the object, soon."""
        self._marks.setdefault(key, Marks()).add(nodes, everything)
        if key not in self._tasks:
            self._tasks[key] = asyncio.get_running_loop().create_task(self._run(key))

    def wake_later(
        self,
        key: K,
        timer: str,
        delay: float,
        *,
        nodes: Iterable[str] = (),
        everything: bool = False,
        merge: bool = False,
    ) -> None:
        """Mark the object after `delay` seconds, by the timer called `timer`."""
        loop = asyncio.get_running_loop()
        due = loop.time() + max(0.0, delay)
        marks = Marks()
        marks.add(nodes, everything)
        existing = self._timers.get((key, timer))
        if existing is not None:
            existing.handle.cancel()
            if merge:
                marks.add(existing.marks.nodes, existing.marks.everything)
                due = min(due, existing.due)
        handle = loop.call_at(due, self._fire, key, timer)
        self._timers[(key, timer)] = _Timer(due, handle, marks)

    def cancel(self, key: K, timer: str) -> None:
        existing = self._timers.pop((key, timer), None)
        if existing is not None:
            existing.handle.cancel()

    def pending(self, key: K, timer: str) -> bool:
        return (key, timer) in self._timers

    def waiting(self) -> tuple[int, int]:
        """The objects marked for a pass not started yet, and the nodes marked for them."""
        return len(self._marks), sum(len(marks.nodes) for marks in self._marks.values())

    def forget(self, key: K) -> None:
        """The object is gone: no more passes (a running one finishes), no timers."""
        self._marks.pop(key, None)
        self._retries.pop(key, None)
        for entry in [entry for entry in self._timers if entry[0] == key]:
            self._timers.pop(entry).handle.cancel()

    async def stop(self) -> None:
        for timer in self._timers.values():
            timer.handle.cancel()
        self._timers.clear()
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _fire(self, key: K, timer: str) -> None:
        fired = self._timers.pop((key, timer), None)
        if fired is not None:
            self.mark(key, nodes=fired.marks.nodes, everything=fired.marks.everything)

    async def _run(self, key: K) -> None:
        try:
            # Watch events come in bursts: let a burst gather so that one pass covers it.
            await asyncio.sleep(self._coalesce_seconds)
            while (marks := self._marks.pop(key, None)) is not None:
                started = time.monotonic()
                try:
                    await self._run_pass(key, marks)
                except Exception:
                    PASS_ERRORS.labels(self._what).inc()
                    # Never let one object's failure stop the others: retry it later.
                    backoff = self._retries.setdefault(key, Backoff(self._max_retry_delay))
                    delay = backoff.next_delay()
                    logger.exception(
                        "%s %s: pass failed; retrying in %.0f s", self._what, key, delay
                    )
                    self.wake_later(key, RETRY_TIMER, delay, everything=True, merge=True)
                else:
                    if key in self._retries:
                        self._retries[key].reset()
                finally:
                    PASS_DURATION.labels(self._what).observe(time.monotonic() - started)
        finally:
            del self._tasks[key]
