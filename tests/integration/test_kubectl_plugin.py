"""`kubectl kubeherd ...` through the cluster's real kubectl, which finds the package's
`kubectl-kubeherd` on PATH: a CustomDaemonSet's rollout followed as `kubectl rollout status`
follows a DaemonSet's, exit codes included; and `kubeherd run --log-format json`."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kubeherd import __version__
from localcluster.binaries import Binaries
from localcluster.cluster import LocalCluster
from localcluster.operator import KubeherdProcess
from tests.helpers import eventually
from tests.integration.daemonsets import NEW_IMAGE, WORKERS, DaemonSets, agent

pytestmark = pytest.mark.cluster

# Where the package's console scripts are: a user puts this folder on PATH.
SCRIPTS = Path(sys.executable).parent
BROKEN_IMAGE = "unpullable.invalid/agent:broken"


def kubectl_with_plugins(
    binaries: Binaries, kubeconfig: Path, *arguments: str, stdout: int = subprocess.PIPE
) -> subprocess.CompletedProcess[str]:
    """The real kubectl, as a user runs it with the package's scripts on PATH."""
    path = os.pathsep.join([str(SCRIPTS), os.environ.get("PATH", "")])
    try:
        return subprocess.run(
            [str(binaries.path("kubectl")), *arguments],
            env={**os.environ, "PATH": path, "KUBECONFIG": str(kubeconfig)},
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        if stdout != subprocess.PIPE:
            os.close(stdout)


def closed_pipe() -> int:
    """The writing end of a pipe whose reader has gone, as `| head` leaves it."""
    reading, writing = os.pipe()
    os.close(reading)
    return writing


def daemonset_like(manifest: dict[str, Any]) -> dict[str, Any]:
    """The native DaemonSet with the same template: what kubectl rollout status is compared on."""
    native = copy.deepcopy(manifest)
    native["apiVersion"], native["kind"] = "apps/v1", "DaemonSet"
    native["metadata"]["name"] = "native"
    native["spec"]["updateStrategy"] = {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1},
    }
    return native


def set_image(apps: client.AppsV1Api, namespace: str, image: str) -> None:
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": image}]}}}}
    apps.patch_namespaced_daemon_set("native", namespace, patch)


@pytest.mark.usefixtures("operator")
def test_kubectl_kubeherd_rollout_status_ends_as_kubectl_rollout_status(
    daemonsets: DaemonSets,
    apps_v1: client.AppsV1Api,
    binaries: Binaries,
    local_cluster: LocalCluster,
) -> None:
    namespace, kubeconfig = daemonsets.namespace, local_cluster.kubeconfig
    manifest = agent()
    name = daemonsets.create(manifest)
    apps_v1.create_namespaced_daemon_set(namespace, daemonset_like(manifest))
    daemonsets.wait_for_nodes(name, WORKERS)
    daemonsets.patch_spec(name, NEW_IMAGE)
    set_image(apps_v1, namespace, "registry.k8s.io/pause:3.9")

    def status(resource: str, *flags: str) -> subprocess.CompletedProcess[str]:
        return kubectl_with_plugins(
            binaries, kubeconfig, *resource.split(), "-n", namespace, *flags
        )

    plugin = status("kubeherd rollout status cds/agent", "--timeout=90s")
    native = status("rollout status ds/native", "--timeout=90s")

    assert (plugin.returncode, native.returncode) == (0, 0), plugin.stderr + native.stderr
    assert plugin.stdout.splitlines()[-1] == 'customdaemonset "agent" successfully rolled out'
    assert native.stdout.splitlines()[-1] == 'daemon set "native" successfully rolled out'

    daemonsets.patch_spec(
        name, {"template": {"spec": {"containers": [{"name": "agent", "image": BROKEN_IMAGE}]}}}
    )
    set_image(apps_v1, namespace, BROKEN_IMAGE)
    plugin = status("kubeherd rollout status cds/agent", "--timeout=3s")
    native = status("rollout status ds/native", "--timeout=3s")

    assert (plugin.returncode, native.returncode) == (1, 1)
    assert plugin.stderr == native.stderr == "error: timed out waiting for the condition\n"

    plugin = status("kubeherd rollout status cds/missing")
    native = status("rollout status ds/missing")

    assert (plugin.returncode, native.returncode) == (1, 1)
    assert 'customdaemonsets.kubeherd.io "missing" not found' in plugin.stderr
    assert 'daemonsets.apps "missing" not found' in native.stderr


@pytest.mark.usefixtures("operator")
def test_kubectl_kubeherd_rollout_history_and_undo_with_a_named_context(
    daemonsets: DaemonSets, binaries: Binaries, local_cluster: LocalCluster, tmp_path: Path
) -> None:
    """--context picks the context, as with kubectl: here the current one is unusable."""
    kubeconfig = yaml.safe_load(local_cluster.kubeconfig.read_text())
    working = kubeconfig["current-context"]
    broken = {"name": "nowhere", "cluster": {"server": "https://127.0.0.1:1"}}
    kubeconfig["clusters"].append(broken)
    kubeconfig["contexts"].append(
        {
            "name": "nowhere",
            "context": {"cluster": "nowhere", "user": kubeconfig["users"][0]["name"]},
        }
    )
    kubeconfig["current-context"] = "nowhere"
    elsewhere = tmp_path / "kubeconfig"
    elsewhere.write_text(yaml.safe_dump(kubeconfig))
    name = daemonsets.create(agent())
    daemonsets.wait_for_nodes(name, WORKERS)
    daemonsets.patch_spec(name, NEW_IMAGE)
    eventually(lambda: len(daemonsets.revisions(name)) == 2, what="revision 2")

    def plugin(*arguments: str) -> subprocess.CompletedProcess[str]:
        return kubectl_with_plugins(
            binaries, elsewhere, "kubeherd", "rollout", *arguments, "-n", daemonsets.namespace
        )

    unusable = plugin("history", "cds/agent")
    history = plugin("history", "cds/agent", "--context", working)
    into_closed_pipe = kubectl_with_plugins(
        binaries,
        elsewhere,
        *("kubeherd", "rollout", "history", "cds/agent", "-n", daemonsets.namespace),
        *("--context", working),
        stdout=closed_pipe(),
    )
    undone = plugin("undo", "cds/agent", "--context", working)

    assert unusable.returncode == 1
    assert unusable.stderr.startswith("error: request to the API server failed")
    assert history.returncode == 0, history.stderr
    # As `kubectl get ... | head`: killed by SIGPIPE, silently (kubectl execs the plugin).
    assert (into_closed_pipe.returncode, into_closed_pipe.stderr) == (-signal.SIGPIPE, "")
    assert [line.split()[0] for line in history.stdout.splitlines()[1:]] == ["REVISION", "1", "2"]
    assert undone.returncode == 0, undone.stderr
    assert undone.stdout == "customdaemonset.kubeherd.io/agent rolled back\n"
    containers = daemonsets.get(name)["spec"]["template"]["spec"]["containers"]
    assert [c["image"] for c in containers] == ["registry.k8s.io/pause:3.10"]


def test_run_with_log_format_json_prints_one_json_object_per_line(
    local_cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    """Kopf's lines and kubeherd's own, --debug's included, for a log collector to parse."""
    log = tmp_path / "kubeherd.log"
    operator = KubeherdProcess(
        local_cluster.kubeconfig,
        log,
        # Its own empty namespace and no webhook: the session's operator is left alone.
        ("--log-format=json", "--debug", "--webhook-listen=", "-n", namespace),
    )
    operator.start()
    try:
        eventually(
            lambda: "Activity 'start' succeeded" in operator.output(), what="kubeherd started"
        )
    finally:
        operator.stop()

    lines = operator.output().splitlines()
    records = [json.loads(line) for line in lines]  # fails on the first line that is not JSON
    assert all(isinstance(record, dict) for record in records)
    assert {record["severity"] for record in records} >= {"debug", "info"}
    messages = [record["message"] for record in records]
    assert f"Starting kubeherd {__version__}" in messages  # kubeherd's own logger
    assert any(message.startswith("Metrics at http://") for message in messages)
    assert "Activity 'start' succeeded." in messages  # Kopf's
    assert operator.returncode == 0
