"""Helpers for tests against the local control plane: kubectl, fake nodes, polling."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest
from kubernetes import client

from localcluster.cluster import LocalCluster
from localcluster.nodes import FakeNodes

REPO = Path(__file__).resolve().parent.parent

T = TypeVar("T")

# `kubectl get cds` header words, as `kubectl get daemonset` prints them ("NODE SELECTOR" splits).
CDS_COLUMNS = [
    "NAME",
    "DESIRED",
    "CURRENT",
    "READY",
    "UP-TO-DATE",
    "AVAILABLE",
    "NODE",
    "SELECTOR",
    "AGE",
]


def eventually(probe: Callable[[], T | None], *, timeout: float = 60, what: str = "") -> T:
    """Poll `probe` until it returns something truthy; fail naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.25)


class Kubectl:
    """Runs the cluster's own kubectl, as a user at a terminal would."""

    def __init__(self, binary: Path, kubeconfig: Path) -> None:
        self._binary = binary
        self._kubeconfig = kubeconfig

    def as_user(self, kubeconfig: Path) -> Kubectl:
        """The same kubectl, logged in with another kubeconfig."""
        return Kubectl(self._binary, kubeconfig)

    def command(self, *arguments: str) -> list[str]:
        return [str(self._binary), f"--kubeconfig={self._kubeconfig}", *arguments]

    def __call__(self, *arguments: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*arguments),
            capture_output=True,
            text=True,
            check=check,
            timeout=60,
        )


class TrackedFakeNodes(FakeNodes):
    """FakeNodes that undo a test's changes: added nodes go, touched nodes get their labels and
    taints back, so one test's nodes never leak into the next."""

    def __init__(self, core: client.CoreV1Api) -> None:
        super().__init__(core)
        self._core_api = core
        self.added: list[str] = []
        self._originals: dict[str, dict[str, Any]] = {}

    def create(
        self, manifests: list[dict[str, Any]], *, wait: bool = True, timeout: float = 120
    ) -> None:
        self.added += [m["metadata"]["name"] for m in manifests]
        super().create(manifests, wait=wait, timeout=timeout)

    def _remember(self, name: str) -> None:
        if name in self.added or name in self._originals:
            return
        node = self._core_api.read_node(name)
        self._originals[name] = {
            "labels": dict(node.metadata.labels or {}),
            "taints": self._taints(name),
        }

    def label(self, name: str, labels: Mapping[str, str | None]) -> None:
        self._remember(name)
        super().label(name, labels)

    def taint(self, name: str, key: str, effect: str, value: str | None = None) -> None:
        self._remember(name)
        super().taint(name, key, effect, value)

    def untaint(self, name: str, key: str, effect: str | None = None) -> None:
        self._remember(name)
        super().untaint(name, key, effect)

    def restore(self) -> None:
        for name in self.added:
            self.remove(name, wait=False)
        for name, original in self._originals.items():
            current = self._core_api.read_node(name).metadata.labels or {}
            labels: dict[str, str | None] = dict.fromkeys(current)
            labels.update(original["labels"])
            self._core_api.patch_node(
                name,
                {"metadata": {"labels": labels}, "spec": {"taints": original["taints"] or None}},
            )


def service_account_kubeconfig(
    cluster: LocalCluster, core: client.CoreV1Api, namespace: str, account: str, folder: Path
) -> Path:
    """A kubeconfig for the cluster that logs in with a token of the ServiceAccount, asked of
    the TokenRequest API as a pod's projected token would be."""
    request = {"spec": {"audiences": [], "expirationSeconds": 6 * 3600}}
    token = core.create_namespaced_service_account_token(account, namespace, request).status.token
    return cluster.token_kubeconfig(account, token, folder / f"{namespace}.{account}.kubeconfig")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OperatorProcess:
    """`kubeherd run` in a process of its own, logging to the cluster's logs/ folder."""

    def __init__(
        self,
        cluster: LocalCluster,
        *,
        name: str,
        arguments: tuple[str, ...] = (),
        kubeconfig: Path | None = None,
    ) -> None:
        self.cluster = cluster
        self.kubeconfig = kubeconfig or cluster.kubeconfig
        self.log = cluster.logs / f"{name}.log"
        self.port = free_port()
        self.arguments = arguments
        self._process: subprocess.Popen[bytes] | None = None
        self._log_start = 0

    def start(self) -> None:
        environment = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        command = [
            sys.executable,
            "-m",
            "kubeherd.cli",
            "run",
            f"--liveness=http://127.0.0.1:{self.port}/healthz",
            # Short enough that a test sees a refused create retried within seconds.
            "--max-create-backoff=4",
            # Leader changes show in a SchedulerProfile's status within a second.
            "--scheduler-status-interval=1",
            "--verbose",
            *self.arguments,
        ]
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._log_start = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as log:
            self._process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=environment, cwd=REPO
            )
        eventually(self._alive, timeout=60, what="the operator's liveness endpoint")

    def _alive(self) -> bool:
        if self._process is None or self._process.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            pytest.fail(f"the operator exited; its log ends with:\n{tail}")
        try:
            url = f"http://127.0.0.1:{self.port}/healthz"
            with urllib.request.urlopen(url, timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def output(self) -> str:
        """What this process logged since its last start."""
        with self.log.open("rb") as log:
            log.seek(self._log_start)
            return log.read().decode(errors="replace")

    def kill(self) -> None:
        """SIGKILL: no cleanup at all, as when a node dies under the operator."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None

    def stop(self) -> None:
        if self._process is None:
            return
        self._process.send_signal(signal.SIGINT)
        try:
            self._process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None


class Operator(Protocol):
    """The operator the session's tests run against: stopped and started by some tests."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


class InClusterOperator:
    """The chart's Deployment on a real cluster (`make test-kind`): stopped by scaling it to 0,
    started by scaling it to 1 and waiting for the rollout."""

    def __init__(self, kubectl: Kubectl, namespace: str, name: str) -> None:
        self.kubectl = kubectl
        self.deployment = ["-n", namespace, f"deployment/{name}"]

    def start(self) -> None:
        self.kubectl("scale", *self.deployment, "--replicas=1")
        self.kubectl("rollout", "status", *self.deployment, "--timeout=180s")

    def stop(self) -> None:
        self.kubectl("scale", *self.deployment, "--replicas=0")
        self.kubectl("rollout", "status", *self.deployment, "--timeout=180s")
