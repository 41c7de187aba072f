"""How `python -m bench` stops when asked to: SIGTERM and SIGHUP take the path Ctrl-C takes, so
that the operator and the local cluster it started are stopped whichever of them arrived. A
control plane left running after its benchmark was killed holds gigabytes and both cores."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

# Ctrl-C (SIGINT) needs nothing here: Python raises KeyboardInterrupt outside the event loop, and
# asyncio.run cancels its main task inside it.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class StopSignalError(Exception):
    """The benchmark was stopped by a signal; what was started is being stopped too."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


class Stopper:
    """Turns SIGTERM and SIGHUP into an exception outside the event loop, and into the main
    task's cancellation inside it, so that every `finally` on the way out runs."""

    def __init__(self) -> None:
        self.received: signal.Signals | None = None
        # While stopping what was started, a further signal must not cut that short.
        self._cleaning_up = False

    def install(self) -> None:
        for stop_signal in STOP_SIGNALS:
            signal.signal(stop_signal, self._raise)

    def cleaning_up(self) -> None:
        """From now on, a signal is only noted: the clean-up under way goes on."""
        self._cleaning_up = True

    @property
    def exit_status(self) -> int:
        """The shell's convention for a process ended by a signal."""
        return 128 + int(self.received) if self.received is not None else 1

    def _raise(self, signal_number: int, frame: FrameType | None) -> None:
        if self.received is not None:
            return
        self.received = signal.Signals(signal_number)
        if not self._cleaning_up:
            raise StopSignalError(self.received.name)

    async def run(self, main: Coroutine[Any, Any, T]) -> T:
        """Await `main` in the running loop's main task; a stop signal cancels that task, and
        `StopSignalError` comes out once `main` has run its clean-up."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        for stop_signal in STOP_SIGNALS:
            loop.add_signal_handler(stop_signal, self._cancel, stop_signal, task)
        try:
            return await main
        except asyncio.CancelledError:
            if self.received is None:
                raise
            raise StopSignalError(self.received.name) from None
        finally:
            for stop_signal in STOP_SIGNALS:
                loop.remove_signal_handler(stop_signal)
            # The loop's removal restores the default handler, which would kill the process
            # without a clean-up.
            self.install()

    def _cancel(self, stop_signal: signal.Signals, task: asyncio.Task[Any]) -> None:
        if self.received is None:
            self.received = stop_signal
            task.cancel()
