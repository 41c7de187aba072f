"""`kubeherd run` as a local process of its own, against a local cluster: as the integration
tests and `make bench` run it (there is no image to run in the cluster here)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class KubeherdProcess:
    """One `kubeherd run`, logging to `log` (appended to), with its liveness and metrics
    endpoints on free ports so that several can run side by side."""

    def __init__(
        self,
        kubeconfig: Path,
        log: Path,
        arguments: tuple[str, ...] = (),
        environment: dict[str, str] | None = None,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.log = log
        self.arguments = arguments
        # Set in the process's environment beside this one's.
        self.extra_environment = environment or {}
        self.port = free_port()
        self.metrics_port = free_port()
        self._process: subprocess.Popen[bytes] | None = None
        # The exit code of the last process `stop` or `kill` ended.
        self.returncode: int | None = None
        self._log_start = 0

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("the operator is not running")
        return self._process.pid

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "kubeherd.cli",
            "run",
            f"--health-address=127.0.0.1:{self.port}",
            f"--metrics-address=127.0.0.1:{self.metrics_port}",
            *self.arguments,
        ]

    def environment(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig), **self.extra_environment}

    def spawn(self) -> None:
        """Start the process; `healthy` tells when it serves."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._log_start = self.log.stat().st_size if self.log.exists() else 0
        self.returncode = None
        with self.log.open("ab") as log:
            self._process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.environment(),
                cwd=REPO,
            )

    def start(self, timeout: float = 90) -> None:
        """Start the process and wait until its liveness endpoint answers."""
        self.spawn()
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if self.exited():
                raise RuntimeError(f"kubeherd exited; its log ends with:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"kubeherd not healthy after {timeout:.0f}s; see {self.log}")
            time.sleep(0.2)

    def exited(self) -> bool:
        return self._process is None or self._process.poll() is not None

    def healthy(self) -> bool:
        try:
            url = f"http://127.0.0.1:{self.port}/healthz"
            with urllib.request.urlopen(url, timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def readyz(self) -> tuple[int, str]:
        """What /readyz answers: its status (0: no answer) and its text, the reasons."""
        url = f"http://127.0.0.1:{self.port}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as error:
            return int(error.code), error.read().decode()
        except OSError:
            return 0, ""

    def log_tail(self, characters: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-characters:]

    def output(self) -> str:
        """What this process logged since its last start."""
        with self.log.open("rb") as log:
            log.seek(self._log_start)
            return log.read().decode(errors="replace")

    def kill(self) -> None:
        """SIGKILL: no cleanup at all, as when a node dies under the operator."""
        if self._process is not None:
            self._process.kill()
            self.returncode = self._process.wait()
            self._process = None

    def stop(self, timeout: float = 10, signal: signal.Signals = signal.SIGTERM) -> None:
        """SIGTERM, as Kubernetes stops a pod, or SIGINT, as Ctrl-C: Kopf stops its handlers and
        releases its peering entry, and the process exits; `returncode` tells how.

        A process still running `timeout` seconds later is killed, and that is an error: a
        silent SIGKILL here once hid that kubeherd never exited on either signal."""
        if self._process is None:
            return
        process, self._process = self._process, None
        process.send_signal(signal)
        try:
            self.returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            self.returncode = process.wait()
            raise TimeoutError(
                f"kubeherd did not exit within {timeout:g}s of {signal.name}, and was killed;"
                f" its log ends with:\n{self.log_tail()}"
            ) from None
