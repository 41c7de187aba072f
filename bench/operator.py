"""kubeherd under test: `kubeherd run` as its own process, with the chart's ServiceAccount and
its default settings, and what /proc says it costs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OperatorProcess:
    def __init__(self, kubeconfig: Path, log: Path, arguments: tuple[str, ...] = ()) -> None:
        self.kubeconfig = kubeconfig
        self.log = log
        self.arguments = arguments
        self.port = _free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("the operator is not running")
        return self._process.pid

    def start(self, timeout: float = 90) -> None:
        command = [
            sys.executable,
            "-m",
            "kubeherd.cli",
            "run",
            f"--liveness=http://127.0.0.1:{self.port}/healthz",
            *self.arguments,
        ]
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self._process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
                cwd=REPO,
            )
        deadline = time.monotonic() + timeout
        while not self._healthy():
            if self._process.poll() is not None:
                raise RuntimeError(f"kubeherd exited at start-up; see {self.log}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"kubeherd not healthy after {timeout:.0f}s; see {self.log}")
            time.sleep(0.2)

    def _healthy(self) -> bool:
        try:
            url = f"http://127.0.0.1:{self.port}/healthz"
            with urllib.request.urlopen(url, timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def usage(self) -> Usage:
        return process_usage(self.pid)

    def stop(self) -> None:
        if self._process is None:
            return
        self._process.send_signal(signal.SIGINT)
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None
