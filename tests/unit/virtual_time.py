"""Virtual time for the controllers' scenario tests: a loop whose clock jumps to the next timer
when nothing else is ready (looptime), so backoffs and deadlines of minutes take no time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import looptime

from kubeherd.meta import iso_time

T = TypeVar("T")

# Wall-clock time at the loop's time 0: 2026-01-01T00:00:00Z.
EPOCH = 1_767_225_600.0


def run_virtually(scenario: Callable[[], Coroutine[Any, Any, T]]) -> T:
    with asyncio.Runner(loop_factory=lambda: looptime.new_event_loop(start=0.0)) as runner:
        return runner.run(scenario())


def wall_clock() -> float:
    """The running loop's (virtual) time as seconds since 1970, as time.time() gives it."""
    return EPOCH + asyncio.get_running_loop().time()


def wall_clock_iso() -> str:
    return iso_time(wall_clock())
