"""Helpers for tests against the local control plane: kubectl, fake nodes, polling."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest
from kubernetes import client

from localcluster.cluster import LocalCluster
from localcluster.nodes import FakeNodes
from localcluster.operator import KubeherdProcess

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


class ManualClock:
    """A clock for code that takes one (`clock=`): it reads `now`, which the test moves."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


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

    def __init__(self, binary: Path, kubeconfig: Path, impersonate: str = "") -> None:
        self._binary = binary
        self._kubeconfig = kubeconfig
        self.user = impersonate

    def as_user(self, kubeconfig: Path) -> Kubectl:
        """The same kubectl, logged in with another kubeconfig."""
        return Kubectl(self._binary, kubeconfig)

    def impersonating(self, user: str) -> Kubectl:
        """The same kubectl acting as `user` (`--as`): the API server authorizes and admits
        each request as that user's, with that user's rights only."""
        return Kubectl(self._binary, self._kubeconfig, impersonate=user)

    def command(self, *arguments: str) -> list[str]:
        impersonation = [f"--as={self.user}"] if self.user else []
        return [str(self._binary), f"--kubeconfig={self._kubeconfig}", *impersonation, *arguments]

    def __call__(self, *arguments: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(*arguments),
            capture_output=True,
            text=True,
            check=check,
            timeout=60,
        )


# How long the garbage collector gets to delete the Leases of a test's removed nodes before the
# test deletes them itself.
LEASE_COLLECTION_SECONDS = 60
NODE_LEASES = "kube-node-lease"  # the namespace of the nodes' heartbeat Leases


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
        self._wait_for_leases_to_go(set(self.added))
        for name, original in self._originals.items():
            current = self._core_api.read_node(name).metadata.labels or {}
            labels: dict[str, str | None] = dict.fromkeys(current)
            labels.update(original["labels"])
            self._core_api.patch_node(
                name,
                {"metadata": {"labels": labels}, "spec": {"taints": original["taints"] or None}},
            )

    def _wait_for_leases_to_go(self, names: set[str]) -> None:
        """A removed node's Lease lives on until the garbage collector deletes it. A node of the
        same name made before that, in the next test, would find the old Lease: kwok renews it,
        the collector deletes it, and kwok's renewals, which name the old Lease's UID, can fail
        from then on, so that the new node never turns Ready. So the nodes go with their Leases.
        """
        leases = client.CoordinationV1Api(self._core_api.api_client)
        deadline = time.monotonic() + LEASE_COLLECTION_SECONDS
        while True:
            names &= {
                lease.metadata.name for lease in leases.list_namespaced_lease(NODE_LEASES).items
            }
            if not names:
                return
            if time.monotonic() > deadline:
                for name in names:
                    with contextlib.suppress(client.ApiException):
                        leases.delete_namespaced_lease(name, NODE_LEASES)
                return
            time.sleep(0.5)


def service_account_kubeconfig(
    cluster: LocalCluster, core: client.CoreV1Api, namespace: str, account: str, folder: Path
) -> Path:
    """A kubeconfig for the cluster that logs in with a token of the ServiceAccount, asked of
    the TokenRequest API as a pod's projected token would be."""
    request = {"spec": {"audiences": [], "expirationSeconds": 6 * 3600}}
    token = core.create_namespaced_service_account_token(account, namespace, request).status.token
    return cluster.token_kubeconfig(account, token, folder / f"{namespace}.{account}.kubeconfig")


class OperatorProcess(KubeherdProcess):
    """`kubeherd run` in a process of its own, logging to the cluster's logs/ folder, with the
    settings that let tests see retries and leader changes within seconds."""

    def __init__(
        self,
        cluster: LocalCluster,
        *,
        name: str,
        arguments: tuple[str, ...] = (),
        kubeconfig: Path | None = None,
        environment: dict[str, str] | None = None,
    ) -> None:
        test_settings = (
            # Short enough that a test sees a refused create retried within seconds.
            "--max-create-backoff=4",
            # Leader changes show in a SchedulerProfile's status within a second.
            "--scheduler-status-interval=1",
            "--verbose",
            # No admission webhook: the session's tests specify the controllers, and most of
            # them create what the webhook would refuse. tests/integration/test_admission.py
            # runs an operator with it (a later --webhook-listen wins).
            "--webhook-listen=",
        )
        super().__init__(
            kubeconfig or cluster.kubeconfig,
            cluster.logs / f"{name}.log",
            (*test_settings, *arguments),
            environment,
        )
        self.cluster = cluster

    def start(self, timeout: float = 60) -> None:
        self.spawn()
        eventually(self._alive, timeout=timeout, what="the operator's liveness endpoint")

    def _alive(self) -> bool:
        if self.exited():
            pytest.fail(f"the operator exited; its log ends with:\n{self.log_tail()}")
        return self.healthy()


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
