"""Nothing of the real node leaves this machine: kwok's pod addresses look routable to
kube-proxy, so a Service backed by a kwok pod would be DNAT-ed out of the default route; the
guard rejects it here. Pods have no route out and no nameserver but loopback."""

from __future__ import annotations

import socket
import subprocess
from typing import Any

import pytest

from localcluster.realnode import GUARD_CHAIN, NODE_NAME
from tests.helpers import eventually
from tests.realnode.conftest import RealCluster
from tests.realnode.workloads import real_namespace

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]


def guard_rejections() -> int:
    """Packets the guard chain has rejected or dropped so far."""
    listed = subprocess.run(
        ["iptables", "-w", "-L", GUARD_CHAIN, "-n", "-v", "-x"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sum(int(line.split()[0]) for line in listed.splitlines()[2:] if line.strip())


def kwok_pod_service(real: RealCluster, namespace: str) -> Any:
    labels = {"app": "on-kwok"}
    real.core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "on-kwok", "labels": labels},
            "spec": {
                "nodeSelector": {"type": "kwok"},
                "containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}],
            },
        },
    )
    service = real.core.create_namespaced_service(
        namespace,
        {"metadata": {"name": "on-kwok"}, "spec": {"selector": labels, "ports": [{"port": 80}]}},
    )

    def pod_ip() -> str | None:
        pod = real.core.read_namespaced_pod("on-kwok", namespace)
        return str(pod.status.pod_ip) if pod.status and pod.status.pod_ip else None

    address = eventually(pod_ip, what="the kwok pod's address")

    def programmed() -> bool:
        # kube-proxy's DNAT to the kwok pod: until it is there, kube-proxy itself rejects
        # connections to a Service without endpoints, and the guard sees nothing.
        rules = subprocess.run(
            ["iptables-save", "-t", "nat"], capture_output=True, text=True, check=True
        ).stdout
        return f"--to-destination {address}:80" in rules

    eventually(programmed, timeout=60, what="kube-proxy's DNAT rule to the kwok pod")
    return service


def guarded_outputs() -> list[str]:
    listed = subprocess.run(
        ["iptables", "-w", "-S", "OUTPUT"], capture_output=True, text=True, check=True
    ).stdout
    return [line for line in listed.splitlines() if f"-j {GUARD_CHAIN}" in line]


def test_a_service_backed_by_a_kwok_pod_is_rejected_on_this_machine(
    real_cluster: RealCluster,
) -> None:
    with real_namespace(real_cluster, "guard") as namespace:
        service = kwok_pod_service(real_cluster, namespace)
        # Checked before anything is sent: without the guard this would leave the machine.
        assert guarded_outputs()
        before = guard_rejections()

        def refused() -> bool:
            with socket.socket() as connection:
                connection.settimeout(3)
                try:
                    connection.connect((service.spec.cluster_ip, 80))
                except ConnectionRefusedError:
                    return True
                except OSError:
                    return False
            return False

        assert refused()

        assert guard_rejections() > before


def test_pods_have_no_route_out_and_a_loopback_nameserver(chart_operator: RealCluster) -> None:
    # The operator's own pod: a real pod on the real node, with the image's Python.
    pods = chart_operator.core.list_namespaced_pod(
        "kubeherd-system", label_selector="app.kubernetes.io/name=kubeherd"
    ).items
    pod = next(p for p in pods if p.spec.node_name == NODE_NAME)
    probe = (
        "import socket; s = socket.socket(); s.settimeout(3)\n"
        "try:\n    s.connect(('192.0.2.1', 443)); print('connected')\n"
        "except OSError as e:\n    print('error', e.errno)\n"
        "print(open('/etc/resolv.conf').read())"
    )
    done = chart_operator.kubectl(
        "exec", "-n", "kubeherd-system", pod.metadata.name, "--", "python", "-c", probe
    )

    # ENETUNREACH: no default route in the pod's network namespace.
    assert "error 101" in done.stdout
    nameservers = [line for line in done.stdout.splitlines() if line.startswith("nameserver")]
    assert nameservers == ["nameserver 127.0.0.1"]
