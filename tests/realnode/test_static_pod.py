"""A SchedulerProfile's kube-scheduler as a static pod, the way a kubeadm control-plane node runs
its own: `kubeherd render --static-pod` for the node's scheduler kubeconfig (kubeadm's
scheduler.conf, the user system:kube-scheduler) and the cluster's version, written into the
real node's static pod folder. The kubelet runs it; it leads on its own Lease with no RBAC
beyond the defaults, binds a pod that names it, restarts on a new configuration, and stops
when its manifest goes."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster.cluster import port_is_listening
from localcluster.images import SCHEDULER_REPOSITORY, TESTBOX_IMAGE
from localcluster.realnode import NODE_NAME, NodePaths
from tests.helpers import REPO, eventually
from tests.integration.schedulers import scheduled_by, wait_briefly
from tests.realnode.conftest import RealCluster, is_ready
from tests.realnode.workloads import ON_REAL_NODE, real_namespace

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

EXAMPLE = REPO / "examples" / "schedulerprofile-packing.yaml"
# What the example names: its scheduler, its Lease (both in kube-system) and the port
# `render --static-pod` gives the first static scheduler of a node.
SCHEDULER_NAME = "packing-scheduler"
LEASE = "kubeherd-packing"
PORT = 10260
# The kubelet names a static pod's mirror pod after the node.
MIRROR_POD = f"kubeherd-packing-{NODE_NAME}"
SYSTEM = "kube-system"


@dataclass
class StaticScheduler:
    real: RealCluster
    node: NodePaths
    profile: Path

    @property
    def manifest(self) -> Path:
        return self.node.static_pods / "kubeherd-packing.yaml"

    @property
    def config_root(self) -> Path:
        return self.node.folder / "kubeherd"

    def render(self, *options: str) -> str:
        """`kubeherd render schedulerprofile` as a user runs it; it warns of nothing here."""
        command = [sys.executable, "-m", "kubeherd.cli", "render", "sp", "-f", str(self.profile)]
        done = subprocess.run(
            [*command, f"--kubeconfig={self.node.scheduler_kubeconfig}", *options],
            capture_output=True,
            text=True,
            check=True,
        )
        assert done.stderr == ""
        return done.stdout

    def write(self) -> None:
        """The configuration first, then the manifest, as the manifest's comments say."""
        config_dir = self.config_root / "packing"
        config_dir.mkdir(parents=True, exist_ok=True)
        (config_dir / "config.yaml").write_text(self.render())
        self.manifest.write_text(
            self.render(
                "--static-pod",
                f"--kubernetes-version={self.cluster_version()}",
                f"--config-root={self.config_root}",
            )
        )

    def cluster_version(self) -> str:
        return str(client.VersionApi(self.real.api).get_code().git_version)

    def mirror_pod(self) -> Any | None:
        try:
            return self.real.core.read_namespaced_pod(MIRROR_POD, SYSTEM)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def ready_mirror_pod(self, other_than: str = "") -> Any:
        def ready() -> Any | None:
            pod = self.mirror_pod()
            fresh = pod is not None and pod.metadata.uid != other_than
            return pod if fresh and is_ready(pod) else None

        return eventually(ready, timeout=120, what=f"the mirror pod {MIRROR_POD} to be Ready")

    def lease_holder(self) -> str:
        leases = client.CoordinationV1Api(self.real.api)
        try:
            lease = leases.read_namespaced_lease(LEASE, SYSTEM)
        except ApiException as error:
            if error.status == 404:
                return ""
            raise
        return str(lease.spec.holder_identity or "")

    def containers(self) -> list[str]:
        """The node's containers of the static pod, as containerd lists them."""
        listed = subprocess.run(
            [
                str(self.real.binaries.path("ctr")),
                f"--address={self.node.containerd_socket}",
                "--namespace=k8s.io",
                "containers",
                "ls",
                "--quiet",
                f'labels."io.kubernetes.pod.name"=={MIRROR_POD}',
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        return listed.stdout.split()


@pytest.fixture
def static_scheduler(real_cluster: RealCluster, tmp_path: Path) -> Iterator[StaticScheduler]:
    profile = tmp_path / "packing.yaml"
    profile.write_text(EXAMPLE.read_text())
    scheduler = StaticScheduler(
        real_cluster, NodePaths(real_cluster.cluster.folder / "node"), profile
    )
    assert scheduler.lease_holder() == "", "the Lease is held before the scheduler runs"
    try:
        yield scheduler
    finally:
        scheduler.manifest.unlink(missing_ok=True)
        eventually(
            lambda: scheduler.mirror_pod() is None and not port_is_listening(PORT),
            timeout=120,
            what="the static scheduler to stop",
        )
        try:
            client.CoordinationV1Api(real_cluster.api).delete_namespaced_lease(LEASE, SYSTEM)
        except ApiException as error:
            if error.status != 404:
                raise


def pod_naming(real: RealCluster, namespace: str, name: str) -> str:
    """A pod for the static scheduler to place on the real node."""
    real.core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "schedulerName": SCHEDULER_NAME,
                "nodeSelector": ON_REAL_NODE,
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "box",
                        "image": TESTBOX_IMAGE,
                        "imagePullPolicy": "Never",
                        "command": ["sh", "-c", "sleep 3600"],
                    }
                ],
            },
        },
    )
    return name


def node_of(real: RealCluster, namespace: str, pod: str) -> str | None:
    return real.core.read_namespaced_pod(pod, namespace).spec.node_name  # type: ignore[no-any-return]


def test_the_kubelet_runs_the_rendered_static_scheduler_which_leads_and_binds(
    static_scheduler: StaticScheduler,
) -> None:
    real = static_scheduler.real

    static_scheduler.write()

    mirror = static_scheduler.ready_mirror_pod()
    assert mirror.metadata.annotations["kubernetes.io/config.source"] == "file"
    assert mirror.spec.node_name == NODE_NAME
    # The image of the cluster's own version, as --kubernetes-version asked (built here).
    version = static_scheduler.cluster_version()
    assert mirror.spec.containers[0].image == f"{SCHEDULER_REPOSITORY}:{version}"
    holder = eventually(static_scheduler.lease_holder, timeout=30, what=f"a holder of {LEASE}")
    # kube-scheduler's identity is "<hostname>_<uuid>"; with the host's network, the machine's.
    assert holder.split("_")[0] == socket.gethostname()
    logs = real.kubectl("logs", "-n", SYSTEM, MIRROR_POD).stdout
    assert f'"Successfully acquired lease" lock="{SYSTEM}/{LEASE}"' in logs

    with real_namespace(real, "static") as namespace:
        pod = pod_naming(real, namespace, "placed")
        eventually(lambda: node_of(real, namespace, pod), timeout=60, what=f"{pod} to be bound")
        assert node_of(real, namespace, pod) == NODE_NAME
        assert scheduled_by(real.core, namespace, pod) == SCHEDULER_NAME


def test_a_new_configuration_restarts_the_static_scheduler(
    static_scheduler: StaticScheduler,
) -> None:
    static_scheduler.write()
    first = static_scheduler.ready_mirror_pod()
    first_holder = eventually(static_scheduler.lease_holder, timeout=30, what="a holder")

    profile = static_scheduler.profile
    profile.write_text(profile.read_text().replace("weight: 5", "weight: 6"))
    static_scheduler.write()

    second = static_scheduler.ready_mirror_pod(other_than=first.metadata.uid)
    assert (
        second.metadata.annotations["kubeherd.io/config-hash"]
        != (first.metadata.annotations["kubeherd.io/config-hash"])
    )

    def new_holder() -> str | None:
        holder = static_scheduler.lease_holder()
        return holder if holder and holder != first_holder else None

    second_holder = eventually(new_holder, timeout=60, what="the new scheduler to take the Lease")
    assert second_holder.split("_")[0] == socket.gethostname()


def test_removing_the_manifest_stops_the_static_scheduler(
    static_scheduler: StaticScheduler,
) -> None:
    real = static_scheduler.real
    static_scheduler.write()
    static_scheduler.ready_mirror_pod()
    eventually(static_scheduler.lease_holder, timeout=30, what=f"a holder of {LEASE}")
    assert static_scheduler.containers()

    static_scheduler.manifest.unlink()

    eventually(
        lambda: static_scheduler.mirror_pod() is None,
        timeout=60,
        what=f"the mirror pod {MIRROR_POD} to go",
    )
    # It let go of its Lease on the way out, and nothing serves its port.
    assert static_scheduler.lease_holder() == ""
    eventually(lambda: not port_is_listening(PORT), timeout=30, what=f"port {PORT} to close")
    eventually(
        lambda: not static_scheduler.containers(),
        timeout=120,
        what="the node to remove the static pod's containers",
    )
    with real_namespace(real, "static-gone") as namespace:
        pod = pod_naming(real, namespace, "unplaced")
        wait_briefly(10)
        found = real.core.read_namespaced_pod(pod, namespace)
        assert (found.status.phase, found.spec.node_name) == ("Pending", None)
        events = real.core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={pod},reason=Scheduled"
        ).items
        assert events == []
