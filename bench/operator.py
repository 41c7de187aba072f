"""kubeherd under test: `kubeherd run` as its own process, with the chart's ServiceAccount and
its default settings, and what /proc says it costs."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from localcluster.operator import KubeherdProcess

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Usage:
    peak_rss_mib: float
    cpu_seconds: float


def process_usage(pid: int) -> Usage:
    """Peak resident memory (VmHWM) and user + system CPU time of a process, all threads."""
    status = Path(f"/proc/{pid}/status").read_text()
    peak_kib = next(
        int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM")
    )
    # Fields after the command name (which may hold spaces): utime and stime are 14th and 15th.
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return Usage(peak_rss_mib=peak_kib / 1024, cpu_seconds=ticks / _CLOCK_TICKS)


# `make bench` runs the operator with the interpreter of a virtualenv that holds only kubeherd's
# runtime dependencies, as the image does: the development ones (the sync kubernetes client
# above all, which Kopf imports when it is installed) would add to its memory.
OPERATOR_PYTHON = "KUBEHERD_OPERATOR_PYTHON"


class OperatorProcess(KubeherdProcess):
    """kubeherd as the benchmark runs it: its default settings, and what it costs."""

    def command(self) -> list[str]:
        python = os.environ.get(OPERATOR_PYTHON)
        command = super().command()
        return [python, *command[1:]] if python else command

    def usage(self) -> Usage:
        return process_usage(self.pid)
