"""The README's quickstart: `make run` as a new user types it, on a cluster of its own, then the
commands it prints, then `make run CLUSTER=current` against the same cluster."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster.binaries import Binaries
from tests.helpers import REPO, Kubectl, eventually

pytestmark = [pytest.mark.cluster]

CLUSTER_DIR = REPO / ".cluster" / "pytest-make-run"
HINT = "In another terminal, try:"


class MakeRun:
    """`make run` in its own process group, its output in a file."""

    def __init__(self, log: Path, **environment: str) -> None:
        self.log = log
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "CLUSTER")}
        env.update(KUBEHERD_CLUSTER_DIR=str(CLUSTER_DIR), NODES="3", **environment)
        with log.open("wb") as output:
            self.process = subprocess.Popen(
                ["make", "run"],
                cwd=REPO,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def output(self) -> str:
        if self.process.poll() is not None and HINT not in self.log.read_text():
            pytest.fail(f"make run exited {self.process.returncode}:\n{self.log.read_text()}")
        return self.log.read_text(errors="replace")

    def interrupt(self, timeout: float = 15) -> None:
        """Ctrl-C, as in a terminal: to the whole foreground process group. make returns once
        uv and kubeherd have exited; if that takes longer than `timeout`, the group is killed
        and the test fails (kubeherd once never exited on Ctrl-C, and a silent kill hid it)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            tail = self.log.read_text(errors="replace")[-3000:]
            pytest.fail(f"make run still ran {timeout:g}s after Ctrl-C, and was killed:\n{tail}")


@pytest.fixture(scope="module")
def cluster_down() -> Iterator[None]:
    yield
    environment = {**os.environ, "KUBEHERD_CLUSTER_DIR": str(CLUSTER_DIR)}
    subprocess.run(["make", "cluster-down"], cwd=REPO, env=environment, capture_output=True)


def suggested_commands(output: str) -> list[list[str]]:
    """The kubectl lines `make run` prints, as a shell would split them, comments dropped."""
    lines = output.split(HINT, 1)[1].split("\n\n", 2)[1].splitlines()
    return [
        shlex.split(line, comments=True) for line in lines if line.strip().startswith("kubectl")
    ]


def test_make_run_then_what_it_suggests(
    binaries: Binaries, cluster_down: None, tmp_path: Path
) -> None:
    run = MakeRun(tmp_path / "make-run.log")
    try:
        eventually(lambda: HINT in run.output(), timeout=600, what="make run's suggestions")
        output = run.output()
        kubeconfig = CLUSTER_DIR / "kubeconfig"
        assert f"export KUBECONFIG={kubeconfig} PATH={CLUSTER_DIR}/bin:$PATH" in output
        kubectl = Kubectl(CLUSTER_DIR / "bin" / "kubectl", kubeconfig)

        def ready(namespace: str, name: str) -> str:
            path = "jsonpath={.status.numberReady}/{.status.desiredNumberScheduled}"
            return kubectl("get", "cds", "-n", namespace, name, "-o", path).stdout

        # The examples are applied, and the operator works on them.
        eventually(lambda: ready("kube-system", "fluentd-elasticsearch") == "3/3", what="fluentd")
        eventually(lambda: ready("node-agents", "heartbeat") == "2/2", what="heartbeat")

        commands = suggested_commands(output)
        assert [c[:3] for c in commands] == [
            ["kubectl", "get", "cds,sp"],
            ["kubectl", "describe", "cds"],
            ["kubectl", "describe", "sp"],
            ["kubectl", "get", "events"],
            ["kubectl", "label", "node"],
            ["kubectl", "get", "pods"],
        ]
        results = {" ".join(c[1:3]): kubectl(*c[1:], check=False) for c in commands}
        assert all(r.returncode == 0 for r in results.values()), results
        assert "three-profiles" in results["get cds,sp"].stdout
        assert "SuccessfulCreate" in results["describe cds"].stdout  # its events
        eventually(lambda: ready("monitoring", "node-exporter") == "1/1", what="node-exporter")
        assert "Pending" in results["get pods"].stdout  # log-shipper: no scheduler runs here
    finally:
        run.interrupt()

    again = MakeRun(
        tmp_path / "make-run-current.log", CLUSTER="current", KUBECONFIG=str(kubeconfig)
    )
    try:
        eventually(lambda: HINT in again.output(), timeout=120, what="make run CLUSTER=current")
        eventually(lambda: "Activity 'start' succeeded" in again.output(), what="the operator")
        assert "Using the current kubeconfig context" in again.output()
        assert "Starting the local control plane" not in again.output()
    finally:
        again.interrupt()
