"""py-spy on the operator during a rollout: where its CPU goes, by function.

`folded_summary` is pure: it reads py-spy's raw (folded) output, one `frame;frame;... count` line
per distinct stack, and returns each function's share of the samples, inclusive of callees.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path


def _function(frame: str) -> str:
    """`name (path/to/module.py:12)` -> `name (module.py)`; a frame without a path stays."""
    name, _, where = frame.partition(" (")
    if not where:
        return name
    module = where.split(":", 1)[0].rsplit("/", 1)[-1].rstrip(")")
    return f"{name} ({module})"


# Frames on every stack that say nothing about where the time goes: the interpreter starting
# the module, asyncio's loop running callbacks, and the entry points of kubeherd and Kopf.
PLUMBING_MODULES = frozenset(
    {"runpy.py", "<frozen runpy>", "runners.py", "base_events.py", "events.py"}
)
ENTRY_POINTS = frozenset({"main (cli.py)", "_run (cli.py)", "run (running.py)"})


def _is_plumbing(function: str) -> bool:
    return (
        function.startswith("<module>")
        or function in ENTRY_POINTS
        or any(function.endswith(f"({module})") for module in PLUMBING_MODULES)
    )


def folded_summary(folded: str, top: int = 25) -> tuple[int, list[tuple[float, str]]]:
    """Total samples, and the `top` functions by inclusive share (percent), highest first."""
    inclusive: Counter[str] = Counter()
    total = 0
    for line in folded.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        for function in {_function(frame) for frame in stack.split(";")}:
            if not _is_plumbing(function):
                inclusive[function] += count
    if total == 0:
        return 0, []
    ranked = sorted(inclusive.items(), key=lambda item: (-item[1], item[0]))[:top]
    return total, [(100 * count / total, name) for name, count in ranked]


# Who a sample's time is spent for, by the code on its stack (first match wins).
KUBEHERD_LAYER = "kubeherd's code: its handlers, its controller, the requests it sends"
KOPF_LAYER = "Kopf: the watch streams, queueing and per-event processing around the handlers"
NETWORK_LAYER = "the event loop's network callbacks: TLS and HTTP reads, for both"
IDLE_LAYER = "idle, waiting for the network"


def _path(frame: str) -> str:
    return frame.partition(" (")[2].split(":", 1)[0]


def layer_shares(folded: str) -> list[tuple[float, str]]:
    """Each layer's share of the samples (percent), highest first. A sample counts for kubeherd
    when kubeherd's own code (its entry point aside) is on its stack, else for Kopf when Kopf's
    is, else it is idle or the event loop's network work."""
    counts: Counter[str] = Counter()
    for line in folded.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        frames = stack.split(";")
        paths = [_path(frame) for frame in frames if not _is_plumbing(_function(frame))]
        if any(path.startswith("kubeherd/") for path in paths):
            layer = KUBEHERD_LAYER
        elif any(path.startswith("kopf/") for path in paths):
            layer = KOPF_LAYER
        elif frames[-1].startswith("EpollSelector.select"):
            layer = IDLE_LAYER
        else:
            layer = NETWORK_LAYER
        counts[layer] += int(count_text)
    total = sum(counts.values())
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [(100 * count / total, layer) for layer, count in ranked]


class Profiler:
    """`py-spy record` attached to a running process until stopped."""

    def __init__(self, pid: int, output: Path, rate: int = 100) -> None:
        self.output = output
        py_spy = Path(sys.executable).parent / "py-spy"
        self._process = subprocess.Popen(
            [
                str(py_spy),
                "record",
                "--pid",
                str(pid),
                "--rate",
                str(rate),
                "--format",
                "raw",
                "--nonblocking",
                "--output",
                str(output),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def stop(self) -> str:
        """Stop recording; the folded stacks py-spy wrote."""
        self._process.send_signal(signal.SIGINT)
        _, errors = self._process.communicate(timeout=60)
        if not self.output.exists():
            raise RuntimeError(f"py-spy wrote no profile: {errors.decode(errors='replace')}")
        return self.output.read_text()
