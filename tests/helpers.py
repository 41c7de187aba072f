"""Helpers for tests against the local control plane: kubectl, fake nodes, polling."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client

from localcluster.nodes import FakeNodes

REPO = Path(__file__).resolve().parent.parent

T = TypeVar("T")


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

    def __call__(self, *arguments: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self._binary), f"--kubeconfig={self._kubeconfig}", *arguments],
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
