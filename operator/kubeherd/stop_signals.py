"""How a command that runs an event loop ends on a stop signal: quietly, with kubectl's exit
code 1, after its requests and clients have closed."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from types import FrameType
from typing import Any

# kubectl stops waiting on any of these, silently, with exit code 1.
STOP_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGQUIT)


class StopSignalError(Exception):
    """A stop signal ended the command."""


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise StopSignalError


def stop_on_signals() -> None:
    """Until an event loop runs (`until_stopped`), and after it, a stop signal raises
    StopSignalError."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _interrupt)


async def until_stopped(work: Coroutine[Any, Any, None]) -> None:
    """Run the work; a stop signal cancels it, so its requests and clients close as it unwinds.

    The loop takes the signals over while it runs: an exception raised by a Python signal
    handler lands between any two bytecodes, even between creating a coroutine and awaiting
    it, and leaves warnings about coroutines never awaited on stderr.
    """
    loop = asyncio.get_running_loop()
    running = asyncio.ensure_future(work)
    received: list[int] = []

    def stop(signum: int) -> None:
        received.append(signum)
        running.cancel()

    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, stop, signum)
    try:
        await running
    except asyncio.CancelledError:
        if received:
            raise StopSignalError from None
        raise
    finally:
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)
            signal.signal(signum, _interrupt)
