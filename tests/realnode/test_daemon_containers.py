"""CustomDaemonSets whose pods run real containers: readiness probes gate readiness and
rollouts, surge waits for real readiness, host networking, host paths, logs, exec and grace
periods. The operator is the chart's pod on the real node."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import pytest

from localcluster.realnode import NODE_IP, NODE_NAME
from tests.helpers import eventually
from tests.integration.daemonsets import DaemonSets, revision_of
from tests.realnode.conftest import RealCluster, is_ready
from tests.realnode.workloads import box_daemonset

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

# A file in the container's own /tmp (an emptyDir-less scratch place), not the host's.
READY_FILE = "/tmp/ready"  # noqa: S108
READY_FILE_PROBE = {
    "exec": {"command": ["test", "-f", READY_FILE]},
    "periodSeconds": 1,
    "failureThreshold": 1,
}
HTTP_PROBE = {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1, "failureThreshold": 1}
SERVE = "mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 8080 -h /www"


def kubectl_in(real: RealCluster, daemonsets: DaemonSets, *arguments: str) -> str:
    done = real.kubectl("-n", daemonsets.namespace, *arguments, check=False)
    return done.stdout + done.stderr


def test_a_readiness_probe_gates_number_ready_and_exec_reaches_the_container(
    chart_operator: RealCluster, daemonsets: DaemonSets
) -> None:
    manifest = box_daemonset("gated", "sleep 3600", container={"readinessProbe": READY_FILE_PROBE})
    name = daemonsets.create(manifest)
    (pod,) = daemonsets.wait_for_nodes(name, {NODE_NAME}, timeout=120)
    time.sleep(3)  # several probe periods: the container runs, its probe fails
    status = daemonsets.get(name)["status"]
    assert (status["currentNumberScheduled"], status["numberReady"]) == (1, 0)

    kubectl_in(chart_operator, daemonsets, "exec", pod.metadata.name, "--", "touch", READY_FILE)

    daemonsets.wait_for_status(name, numberReady=1, numberAvailable=1)


def test_kubectl_logs_shows_what_a_daemon_container_printed(
    chart_operator: RealCluster, daemonsets: DaemonSets
) -> None:
    name = daemonsets.create(box_daemonset("talker", "echo hello from $(hostname); sleep 3600"))
    (pod,) = daemonsets.wait_for_nodes(name, {NODE_NAME}, timeout=120)

    def printed() -> str | None:
        text = kubectl_in(chart_operator, daemonsets, "logs", pod.metadata.name)
        return text if "hello from" in text else None

    logs = eventually(printed, what="the container's output in kubectl logs")
    assert f"hello from {pod.metadata.name}" in logs


def test_a_template_whose_probe_fails_keeps_the_old_pod_and_reports_rollout_stuck(
    daemonsets: DaemonSets,
) -> None:
    manifest = box_daemonset("surge", SERVE, container={"readinessProbe": HTTP_PROBE})
    manifest["spec"]["updateStrategy"] = {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    manifest["spec"]["progressDeadlineSeconds"] = 10
    name = daemonsets.create(manifest)
    daemonsets.wait_for_status(name, timeout=120, numberReady=1)
    (old,) = daemonsets.pods(name)
    broken = box_daemonset("surge", "sleep 3600", container={"readinessProbe": HTTP_PROBE})

    daemonsets.patch_spec(name, {"template": broken["spec"]["template"]})

    stuck = eventually(
        lambda: daemonsets.events(name, "RolloutStuck"), timeout=90, what="a RolloutStuck event"
    )
    assert stuck[0].type == "Warning"
    pods = daemonsets.pods(name)
    # Surge: the new pod runs beside the old one, which stays because the new is never Ready.
    assert len(pods) == 2
    assert old.metadata.uid in {pod.metadata.uid for pod in pods}
    assert all(pod.status.phase == "Running" for pod in pods)
    assert [is_ready(pod) for pod in pods if pod.metadata.uid == old.metadata.uid] == [True]
    status = daemonsets.get(name)["status"]
    # As the native controller counts: a node's status is its oldest pod's, here the old one.
    assert (status["numberAvailable"], status["updatedNumberScheduled"]) == (1, 0)


def test_a_surge_replaces_the_old_pod_only_once_the_new_one_is_ready(
    daemonsets: DaemonSets,
) -> None:
    slow_start = f"sleep 4; {SERVE}"
    manifest = box_daemonset("surge-ok", SERVE, container={"readinessProbe": HTTP_PROBE})
    manifest["spec"]["updateStrategy"] = {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    name = daemonsets.create(manifest)
    daemonsets.wait_for_status(name, timeout=120, numberReady=1)
    (old,) = daemonsets.pods(name)
    update = box_daemonset("surge-ok", slow_start, container={"readinessProbe": HTTP_PROBE})

    daemonsets.patch_spec(name, {"template": update["spec"]["template"]})

    seen_unready_alone = False
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pods = daemonsets.pods(name)
        if not any(is_ready(pod) for pod in pods):
            seen_unready_alone = True
        if len(pods) == 1 and pods[0].metadata.uid != old.metadata.uid and is_ready(pods[0]):
            break
        time.sleep(0.2)
    else:
        pytest.fail("the surge rollout did not finish in 120 s")
    assert not seen_unready_alone, "the node had no Ready pod during a maxUnavailable 0 rollout"
    assert revision_of(pods[0]) != revision_of(old)


def test_host_network_and_host_port_serve_on_the_node_address(daemonsets: DaemonSets) -> None:
    port = 18080
    serve = (
        "mkdir -p /www && echo on-node > /www/index.html"
        f" && exec httpd -f -p {NODE_IP}:{port} -h /www"
    )
    manifest = box_daemonset(
        "host-net",
        serve,
        container={"ports": [{"containerPort": port, "hostPort": port, "protocol": "TCP"}]},
        hostNetwork=True,
    )
    name = daemonsets.create(manifest)
    (pod,) = daemonsets.wait_for_nodes(name, {NODE_NAME}, timeout=120)

    def served() -> str | None:
        try:
            with urllib.request.urlopen(f"http://{NODE_IP}:{port}/", timeout=2) as response:
                return str(response.read().decode())
        except OSError:
            return None

    assert eventually(served, what="httpd on the node's address").strip() == "on-node"
    assert pod.spec.host_network


def test_a_host_path_volume_reaches_the_node_filesystem(
    chart_operator: RealCluster, daemonsets: DaemonSets
) -> None:
    folder = chart_operator.cluster.folder / "host-path" / daemonsets.namespace
    folder.mkdir(parents=True)
    manifest = box_daemonset(
        "host-path",
        "echo written-by-$(hostname) > /host/hello && sleep 3600",
        container={"volumeMounts": [{"name": "host", "mountPath": "/host"}]},
        volumes=[{"name": "host", "hostPath": {"path": str(folder), "type": "Directory"}}],
    )
    name = daemonsets.create(manifest)
    (pod,) = daemonsets.wait_for_nodes(name, {NODE_NAME}, timeout=120)

    hello = Path(folder / "hello")
    eventually(hello.is_file, what="the file the pod wrote")
    assert hello.read_text().strip() == f"written-by-{pod.metadata.name}"


def test_termination_grace_period_is_honoured_on_delete(
    chart_operator: RealCluster, daemonsets: DaemonSets
) -> None:
    # The container ignores SIGTERM: the kubelet waits the grace period, then kills it.
    manifest = box_daemonset(
        "graceful", "trap 'echo ignoring TERM' TERM; while true; do sleep 1; done"
    )
    manifest["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 4
    name = daemonsets.create(manifest)
    (pod,) = daemonsets.wait_for_nodes(name, {NODE_NAME}, timeout=120)

    started = time.monotonic()
    chart_operator.kubectl(
        "delete", "pod", "-n", daemonsets.namespace, pod.metadata.name, "--timeout=60s"
    )
    elapsed = time.monotonic() - started

    assert 4 <= elapsed < 15, f"deletion took {elapsed:.1f}s with a 4 s grace period"
    # The CustomDaemonSet puts a new pod on the node.
    replacement = eventually(
        lambda: [p for p in daemonsets.pods(name) if p.metadata.uid != pod.metadata.uid],
        what="a replacement pod",
    )
    assert len(replacement) == 1
