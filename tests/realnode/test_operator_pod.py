"""The chart as users install it, running the operator image built from ./Dockerfile as a real
pod: Ready on Kopf's /healthz, non-root on a read-only root filesystem, stopped promptly and
cleanly, rolled by `helm upgrade`, two replicas handing over, and an image without development
or benchmark packages."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import tomllib
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import watch

from tests.helpers import REPO, eventually
from tests.realnode.conftest import (
    RELEASE_NAMESPACE,
    RealCluster,
    operator_pods,
    wait_for_ready_operators,
)
from tests.realnode.workloads import box_daemonset, real_namespace

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

CHART = REPO / "charts" / "kubeherd"
# Generous for a loaded 2-core machine; the operator itself stops in well under 2 s.
PROMPT_EXIT = 10.0


def exec_in(real: RealCluster, pod: str, *command: str) -> str:
    done = real.kubectl("exec", "-n", RELEASE_NAMESPACE, pod, "--", *command, check=False)
    return done.stdout + done.stderr


class LastStatus:
    """Watches one pod from before it is deleted, keeping the last status the kubelet wrote."""

    def __init__(self, real: RealCluster, pod: Any) -> None:
        # Watched from a fresh listing's resourceVersion: the pod's own can be older than the
        # API server's last compaction (a pod unchanged for minutes), and the watch then ends
        # at once with 410 Gone.
        namespace, selector = pod.metadata.namespace, f"metadata.name={pod.metadata.name}"
        listed = real.core.list_namespaced_pod(namespace, field_selector=selector)
        self.last: Any = listed.items[0] if listed.items else pod
        self.deleted = threading.Event()
        self._watch = watch.Watch()
        self._thread = threading.Thread(
            target=self._follow,
            args=(real, namespace, selector, listed.metadata.resource_version),
        )
        self._thread.start()

    def _follow(self, real: RealCluster, namespace: str, selector: str, version: str) -> None:
        for event in self._watch.stream(
            real.core.list_namespaced_pod,
            namespace,
            field_selector=selector,
            resource_version=version,
            timeout_seconds=60,
        ):
            self.last = event["object"]
            if event["type"] == "DELETED":
                self.deleted.set()
                self._watch.stop()

    def exit_codes(self) -> list[int | None]:
        self._thread.join(timeout=60)
        codes = []
        for status in self.last.status.container_statuses or []:
            terminated = status.state.terminated if status.state else None
            codes.append(terminated.exit_code if terminated else None)
        return codes


def delete_pod_timed(real: RealCluster, pod: Any) -> tuple[float, list[int | None]]:
    """`kubectl delete pod` (which waits until it is gone): how long it took, and the exit
    codes of its containers."""
    follower = LastStatus(real, pod)
    started = time.monotonic()
    real.kubectl("delete", "pod", "-n", RELEASE_NAMESPACE, pod.metadata.name, "--timeout=60s")
    elapsed = time.monotonic() - started
    return elapsed, follower.exit_codes()


def test_the_chart_with_default_values_runs_an_operator_that_reconciles_on_the_real_node(
    chart_operator: RealCluster,
) -> None:
    (pod,) = operator_pods(chart_operator)
    with real_namespace(chart_operator, "reconciles") as namespace:
        daemonsets = chart_operator.daemonsets(namespace)
        name = daemonsets.create(box_daemonset("web", "httpd -f -p 8080 -h /www"))

        # Working, not merely started: a replica that crashes at start-up never gets here.
        status = daemonsets.wait_for_status(name, timeout=120, numberReady=1)

        assert status["desiredNumberScheduled"] == 1
        (daemon_pod,) = daemonsets.pods(name)
        assert daemon_pod.spec.node_name == "real-node"
    (same,) = operator_pods(chart_operator)
    assert same.metadata.uid == pod.metadata.uid
    assert same.spec.node_name == "real-node"
    (status,) = same.status.container_statuses
    assert status.ready
    assert status.restart_count == 0
    assert status.image.endswith("localhost/kubeherd/kubeherd:dev")
    logs = chart_operator.kubectl("logs", "-n", RELEASE_NAMESPACE, pod.metadata.name).stdout
    assert "getpwuid" not in logs


def test_the_operator_container_runs_non_root_on_a_read_only_root_filesystem(
    chart_operator: RealCluster,
) -> None:
    (pod,) = operator_pods(chart_operator)
    name = pod.metadata.name

    # The image's user, 65532 (no passwd entry: group 0, as OpenShift runs its assigned uids),
    # and a read-only root filesystem.
    ids = exec_in(
        chart_operator, name, "python", "-c", "import os; print(os.getuid(), os.getgid())"
    )
    assert ids.strip() == "65532 0"
    write = exec_in(chart_operator, name, "python", "-c", "open('/written', 'w')")
    assert "Read-only file system" in write


def test_deleting_the_operator_pod_stops_it_in_seconds_with_exit_code_0(
    chart_operator: RealCluster,
) -> None:
    (pod,) = operator_pods(chart_operator)

    elapsed, exit_codes = delete_pod_timed(chart_operator, pod)

    assert elapsed < PROMPT_EXIT, f"kubectl delete pod took {elapsed:.1f}s"
    # 137 would be SIGKILL at the end of the grace period.
    assert exit_codes == [0]
    wait_for_ready_operators(chart_operator, 1)


@pytest.fixture
def restore_release(chart_operator: RealCluster) -> Iterator[RealCluster]:
    yield chart_operator
    chart_operator.install_chart()
    wait_for_ready_operators(chart_operator, 1)


def test_helm_upgrade_rolls_the_operator_pod(restore_release: RealCluster) -> None:
    real = restore_release
    (before,) = operator_pods(real)

    real.install_chart(**{"operator.verbose": "true"})

    (after,) = wait_for_ready_operators(real, 1)
    assert after.metadata.name != before.metadata.name
    assert "--verbose" in after.spec.containers[0].args


def peering_entries(real: RealCluster) -> dict[str, Any]:
    body = real.kubectl("get", "clusterkopfpeering", "kubeherd", "-o", "json", check=False)
    if body.returncode != 0:
        return {}
    status: dict[str, Any] = json.loads(body.stdout).get("status") or {}
    return status


def last_peering_line(real: RealCluster, pod: Any) -> str:
    """What a replica last said about its part: "Active: ..." or "Standing by: ..."."""
    logs = real.kubectl("logs", "-n", RELEASE_NAMESPACE, pod.metadata.name, check=False).stdout
    said = [line for line in logs.splitlines() if "Active:" in line or "Standing by" in line]
    return said[-1] if said else ""


def active_replica(real: RealCluster, pods: list[Any]) -> tuple[Any, Any] | None:
    """(active, standby) by what each replica logged last."""
    said = {pod.metadata.name: last_peering_line(real, pod) for pod in pods}
    active = [pod for pod in pods if "Active:" in said[pod.metadata.name]]
    standby = [pod for pod in pods if "Standing by" in said[pod.metadata.name]]
    return (active[0], standby[0]) if len(active) == 1 and len(standby) == 1 else None


def test_two_replicas_hand_over_when_the_active_pod_is_deleted(
    restore_release: RealCluster,
) -> None:
    real = restore_release
    real.install_chart(replicaCount=2)
    pods = wait_for_ready_operators(real, 2)
    active, standby = eventually(
        lambda: active_replica(real, operator_pods(real)), timeout=60, what="one active replica"
    )
    assert set(peering_entries(real)) >= {active.metadata.name, standby.metadata.name}

    elapsed, exit_codes = delete_pod_timed(real, active)

    assert elapsed < PROMPT_EXIT, f"kubectl delete pod took {elapsed:.1f}s"
    assert exit_codes == [0]

    def took_over() -> bool:
        return "Active:" in last_peering_line(real, standby)

    started = time.monotonic()
    eventually(took_over, timeout=30, what="the standby replica to become active")
    assert time.monotonic() - started < 30
    assert len(pods) == 2


DENIED = 'admission webhook "{}.kubeherd.io" denied the request: '


def duplicate_container_names() -> dict[str, Any]:
    manifest = box_daemonset("duplicates", "sleep 3600")
    (box,) = manifest["spec"]["template"]["spec"]["containers"]
    manifest["spec"]["template"]["spec"]["containers"] = [box, box]
    return manifest


def kube_schedulers_lease() -> dict[str, Any]:
    return {
        "apiVersion": "kubeherd.io/v1alpha1",
        "kind": "SchedulerProfile",
        "metadata": {"name": "borrower"},
        "spec": {
            "profiles": [{"schedulerName": "borrower"}],
            "leaderElection": {
                "leaderElect": True,
                "resourceName": "kube-scheduler",
                "resourceNamespace": "kube-system",
            },
        },
    }


def dry_run_apply(real: RealCluster, namespace: str, manifest: dict[str, Any]) -> Any:
    """`kubectl apply --dry-run=server`: admission runs in full, nothing is stored."""
    return subprocess.run(
        real.kubectl.command("-n", namespace, "apply", "--dry-run=server", "-f", "-"),
        input=yaml.safe_dump(manifest),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def refused_by_the_webhook(real: RealCluster, namespace: str, manifest: dict[str, Any]) -> str:
    """kubectl's complaint, once the operator has written its configuration and the API server
    calls the webhook (through the chart's Service, with the operator's certificate)."""

    def complaint() -> str | None:
        result = dry_run_apply(real, namespace, manifest)
        return result.stderr if result.returncode != 0 else None

    return eventually(complaint, timeout=60, what="the webhook to refuse")


def webhook_endpoints(real: RealCluster) -> set[str]:
    slices = real.kubectl(
        "get", "endpointslices", "-n", RELEASE_NAMESPACE,
        "-l", "kubernetes.io/service-name=kubeherd-webhook", "-o", "json",
    )  # fmt: skip
    return {
        address
        for item in json.loads(slices.stdout)["items"]
        for endpoint in item.get("endpoints") or []
        if (endpoint.get("conditions") or {}).get("ready")
        for address in endpoint["addresses"]
    }


def test_the_charts_webhook_refuses_a_bad_customdaemonset_and_schedulerprofile(
    chart_operator: RealCluster,
) -> None:
    with real_namespace(chart_operator, "webhook") as namespace:
        daemonset = refused_by_the_webhook(chart_operator, namespace, duplicate_container_names())
        profile = refused_by_the_webhook(chart_operator, namespace, kube_schedulers_lease())

        stored = chart_operator.kubectl("get", "-n", namespace, "cds,sp", "-o", "name").stdout
    assert DENIED.format("customdaemonsets") in daemonset
    assert 'spec.template.spec.containers[1].name: Duplicate value: "box"' in daemonset
    assert DENIED.format("schedulerprofiles") in profile
    assert "spec.leaderElection.resourceName: Lease kube-system/kube-scheduler" in profile
    assert stored.strip() == ""
    configuration = json.loads(
        chart_operator.kubectl(
            "get", "validatingwebhookconfiguration", "kubeherd", "-o", "json"
        ).stdout
    )
    assert configuration["metadata"]["ownerReferences"][0]["kind"] == "ClusterRole"
    for webhook in configuration["webhooks"]:
        assert (webhook["failurePolicy"], webhook["timeoutSeconds"]) == ("Ignore", 5)


def test_both_replicas_serve_the_webhook_with_one_certificate(
    restore_release: RealCluster,
) -> None:
    """The standby serves too (peering pauses only the watches), with the certificate the
    replicas share: every request is refused, whichever pod the Service sends it to."""
    real = restore_release
    real.install_chart(replicaCount=2)
    pods = wait_for_ready_operators(real, 2)
    # Only these two behind the Service: a replaced pod that stops serves no more (and the
    # API server lets the request through, failurePolicy Ignore).
    eventually(
        lambda: webhook_endpoints(real) == {pod.status.pod_ip for pod in pods},
        what="the Service's endpoints to be the two replicas",
    )
    with real_namespace(real, "webhook-ha") as namespace:
        refused_by_the_webhook(real, namespace, duplicate_container_names())

        answers = [dry_run_apply(real, namespace, duplicate_container_names()) for _ in range(16)]

    assert all(DENIED.format("customdaemonsets") in a.stderr for a in answers), [
        a.stdout + a.stderr for a in answers if a.returncode == 0
    ]
    logs = [real.kubectl("logs", "-n", RELEASE_NAMESPACE, pod.metadata.name).stdout for pod in pods]
    assert sum("stored a new webhook certificate" in log for log in logs) <= 1


def dependency_group_packages(group: str) -> set[str]:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    names = set()
    for requirement in pyproject["dependency-groups"][group]:
        name = requirement.split(";")[0]
        for separator in "<>=!~[ ":
            name = name.split(separator)[0]
        names.add(name.lower().replace("_", "-"))
    return names


def test_the_image_holds_no_development_or_benchmark_packages(
    chart_operator: RealCluster,
) -> None:
    (pod,) = operator_pods(chart_operator)
    listing = exec_in(
        chart_operator,
        pod.metadata.name,
        "python",
        "-c",
        "import importlib.metadata as m; "
        "print('\\n'.join(sorted({d.metadata['Name'].lower() for d in m.distributions()})))",
    )
    installed = {line.strip().replace("_", "-") for line in listing.splitlines() if line.strip()}

    assert {"kopf", "kubeherd", "pydantic"} <= installed
    unwanted = dependency_group_packages("dev") | dependency_group_packages("bench")
    # Some dev tools are also runtime dependencies (pyyaml): those are wanted.
    runtime = {"pyyaml", "kopf", "pydantic"}
    assert installed & (unwanted - runtime) == set()
    assert not installed & {
        "matplotlib",
        "numpy",
        "pillow",
        "py-spy",
        "pytest",
        "mypy",
        "ruff",
        "kubernetes",
        "kubernetes-asyncio",
    }
