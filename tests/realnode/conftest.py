"""Fixtures of the tests that need a real node: a cluster of their own (two kwok nodes and the
real node, as `make cluster-up NODES=2 REAL_NODE=1` makes it), the images built here, and the
chart installed as a user installs it, running the operator image on the real node.

The rest of the suite keeps its kwok-only cluster: its tests count nodes and pods exactly, and
kwok runs any image. Here every pod that matters runs on the real node.

Where the machine cannot run a real node (not root, not Debian) these tests are skipped, saying
why; with KUBEHERD_REQUIRE_REAL_NODE=1 (CI sets it) that is a failure instead.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from localcluster.binaries import Binaries
from localcluster.cluster import KWOK_NODE_GRACE, LocalCluster
from localcluster.images import (
    OPERATOR_IMAGE,
    PAUSE_IMAGE,
    ImageArchive,
    ensure_images,
)
from localcluster.realnode import REAL_NODE_LABEL, machine_snapshot, real_node_supported
from tests.helpers import REPO, Kubectl, eventually
from tests.integration.daemonsets import DaemonSets
from tests.realnode.workloads import real_namespace

REQUIRE_REAL_NODE = "KUBEHERD_REQUIRE_REAL_NODE"
CHART = REPO / "charts" / "kubeherd"
RELEASE, RELEASE_NAMESPACE = "kubeherd", "kubeherd-system"
# How much of the operator's log a failed test shows.
OPERATOR_LOG_LINES = 200


@dataclass
class RealCluster:
    cluster: LocalCluster
    binaries: Binaries
    images: list[ImageArchive]
    # The machine as it was before the real node started: what cluster-down must restore.
    machine_before: dict[str, Any]
    kubectl: Kubectl
    api: client.ApiClient

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def daemonsets(self, namespace: str) -> DaemonSets:
        return DaemonSets(self.custom, self.core, self.apps, namespace)

    def install_chart(self, **values: Any) -> None:
        """`helm upgrade --install` of the chart, waiting for its rollout; `values` as
        chart_values takes them. A rollout that does not finish fails with the pods' logs."""
        installed = self.helm(
            "upgrade",
            "--install",
            RELEASE,
            str(CHART),
            f"--namespace={RELEASE_NAMESPACE}",
            "--create-namespace",
            "--wait",
            "--timeout=180s",
            *chart_values(**values),
            check=False,
        )
        if installed.returncode != 0:
            logs = self.kubectl(
                "logs",
                f"--namespace={RELEASE_NAMESPACE}",
                "--selector=app.kubernetes.io/name=kubeherd",
                "--tail=15",
                check=False,
            )
            pytest.fail(
                f"helm upgrade --install failed: {installed.stderr.strip()}\n"
                f"operator logs:\n{logs.stdout}{logs.stderr}"
            )

    def helm(self, *arguments: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                str(self.binaries.path("helm")),
                f"--kubeconfig={self.cluster.kubeconfig}",
                *arguments,
            ],
            capture_output=True,
            text=True,
            check=check,
            timeout=300,
        )


def skip_or_fail(reason: str) -> None:
    if os.environ.get(REQUIRE_REAL_NODE) == "1":
        pytest.fail(f"{REQUIRE_REAL_NODE}=1 but {reason}")
    pytest.skip(reason)


def scheduler_client_from_environment() -> tuple[float, int] | None:
    """kube-scheduler's client rate as KUBEHERD_REAL_SCHEDULER_QPS asks (its burst twice that):
    `make test-memory` gives it so that a large size binds its pods faster than the default 50 a
    second. Unset, as in `make test`: kube-scheduler's own default."""
    qps = os.environ.get("KUBEHERD_REAL_SCHEDULER_QPS")
    return (float(qps), 2 * int(float(qps))) if qps else None


@pytest.fixture(scope="session")
def real_cluster(binaries: Binaries) -> Iterator[RealCluster]:
    reason = real_node_supported()
    if reason:
        skip_or_fail(reason)
    images = ensure_images(binaries)
    folder = Path(os.environ.get("KUBEHERD_REAL_CLUSTER_DIR", REPO / ".cluster" / "pytest-real"))
    before = machine_snapshot()
    cluster = LocalCluster(
        folder,
        binaries,
        nodes=2,
        real_node=True,
        image_archives=tuple(image.archive for image in images),
        pause_image=PAUSE_IMAGE,
        # The memory test runs thousands of kwok nodes beside the real node; no test here
        # waits for a node to be marked not Ready.
        node_monitor_grace=KWOK_NODE_GRACE,
        scheduler_client=scheduler_client_from_environment(),
    )
    cluster.up()
    try:
        api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        kubectl = Kubectl(binaries.path("kubectl"), cluster.kubeconfig)
        yield RealCluster(cluster, binaries, images, before, kubectl, api)
    finally:
        cluster.down()


def chart_values(**overrides: Any) -> list[str]:
    """The chart's default values but for what a cluster without a registry needs: the image
    built here, never pulled, and the real node (kwok pods run nothing)."""
    repository, _, tag = OPERATOR_IMAGE.rpartition(":")
    settings = {
        "image.repository": repository,
        "image.tag": tag,
        "image.pullPolicy": "Never",
        **{key: str(value) for key, value in overrides.items()},
    }
    # --set splits keys at dots (the label's own are escaped) and would make "true" a boolean.
    selector = "nodeSelector." + REAL_NODE_LABEL.replace(".", "\\.") + "=true"
    return [f"--set={key}={value}" for key, value in settings.items()] + [
        f"--set-string={selector}"
    ]


def operator_pods(real: RealCluster) -> list[Any]:
    pods = real.core.list_namespaced_pod(
        RELEASE_NAMESPACE, label_selector="app.kubernetes.io/name=kubeherd"
    ).items
    return [pod for pod in pods if pod.metadata.deletion_timestamp is None]


def is_ready(pod: Any) -> bool:
    conditions = (pod.status.conditions or []) if pod.status else []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def wait_for_ready_operators(real: RealCluster, count: int, timeout: float = 180) -> list[Any]:
    def ready() -> list[Any] | None:
        pods = operator_pods(real)
        return pods if len(pods) == count and all(map(is_ready, pods)) else None

    return eventually(ready, timeout=timeout, what=f"{count} Ready operator pod(s)")


@pytest.fixture(scope="session")
def chart_operator(real_cluster: RealCluster) -> RealCluster:
    """`helm install` of the chart with its default values (one replica) on the real node."""
    real_cluster.install_chart()
    wait_for_ready_operators(real_cluster, 1)
    return real_cluster


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that ran against the chart's operator shows the operator's last log lines:
    the pod and its cluster are gone once the session ends, and CI keeps only this output."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when != "call" or not report.failed:
        return
    real = getattr(item, "funcargs", {}).get("chart_operator")
    if not isinstance(real, RealCluster):
        return
    for pod in operator_pods(real):
        try:
            text = real.core.read_namespaced_pod_log(
                pod.metadata.name, RELEASE_NAMESPACE, tail_lines=OPERATOR_LOG_LINES
            )
        except Exception as error:  # the log is a help, never a second failure
            text = f"(the operator's log could not be read: {error})"
        report.sections.append((f"operator log: {pod.metadata.name}", text))


@pytest.fixture
def daemonsets(chart_operator: RealCluster, request: pytest.FixtureRequest) -> Iterator[DaemonSets]:
    """The CustomDaemonSets of a test, in a namespace of its own, run by the chart's operator."""
    purpose = request.node.name.removeprefix("test_")[:20].replace("_", "-").strip("-")
    with real_namespace(chart_operator, purpose) as namespace:
        yield chart_operator.daemonsets(namespace)
