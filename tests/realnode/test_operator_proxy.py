"""The operator pod behind an HTTPS proxy, as OpenShift's cluster-wide proxy and AKS's HTTP proxy
inject one into pods: with the Service network in NO_PROXY (a CIDR), kubeherd talks to the API
server directly and rolls out a CustomDaemonSet; with a proxy that refuses everything and no
NO_PROXY, the pod never turns Ready, /readyz says why, and the chart's alert holds on its
metrics, instead of a pod that is Ready and does nothing.

The proxy is this test's own: it listens on the real node's bridge address only (the pods reach
it there, nothing beyond the machine does), records what it is asked, and refuses it all."""

from __future__ import annotations

import ipaddress
import socketserver
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster.cluster import SERVICE_CLUSTER_IP_RANGE
from localcluster.realnode import NODE_IP
from tests.alerts import scrape, watch_failing_fires
from tests.helpers import eventually
from tests.realnode.conftest import (
    RELEASE,
    RELEASE_NAMESPACE,
    RealCluster,
    is_ready,
    operator_pods,
    wait_for_ready_operators,
)
from tests.realnode.workloads import box_daemonset, real_namespace

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]

PROXY_VARIABLES = ("HTTPS_PROXY", "NO_PROXY")
HEALTH_PORT, METRICS_PORT = 8080, 8081
# How long a pod behind the refusing proxy is watched never turning Ready: a dozen readiness
# probes (one each 5 s), and several of the watches' retries.
NEVER_READY_SECONDS = 60.0


REFUSAL = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
# The API server's Service address in the pods' environment (KUBERNETES_SERVICE_HOST).
KUBERNETES_SERVICE = str(ipaddress.ip_network(SERVICE_CLUSTER_IP_RANGE)[1])


class RefusingProxy(socketserver.ThreadingTCPServer):
    """An HTTP proxy that answers every request (CONNECT included) 403, and remembers the
    request lines."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str) -> None:
        self.requests: list[str] = []
        super().__init__((host, 0), RefusingHandler)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class RefusingHandler(socketserver.StreamRequestHandler):
    server: RefusingProxy

    def handle(self) -> None:
        line = self.rfile.readline(8192).decode(errors="replace").strip()
        while self.rfile.readline(8192).strip():
            pass  # the headers
        self.server.requests.append(line)
        self.wfile.write(
            b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )


@pytest.fixture
def refusing_proxy(chart_operator: RealCluster) -> Iterator[tuple[RealCluster, RefusingProxy]]:
    """The proxy, and the chart with plain-HTTP metrics (a scrape needs no token: a pod that
    cannot reach the API server could not check one); afterwards the pod without the proxy
    variables, and the chart's defaults again."""
    real = chart_operator
    real.install_chart(**{"metrics.secure": "false"})
    wait_for_ready_operators(real, 1)
    proxy = RefusingProxy(NODE_IP)
    try:
        yield real, proxy
    finally:
        proxy.stop()
        set_env(real, *(f"{name}-" for name in PROXY_VARIABLES))
        real.install_chart()
        wait_for_ready_operators(real, 1)


def set_env(real: RealCluster, *assignments: str) -> None:
    """`kubectl set env` on the operator's Deployment: NAME=VALUE sets, NAME- removes. The
    chart's single replica is replaced (Recreate). For a pod that will never be Ready, which
    `helm upgrade --wait` would wait for in vain."""
    real.kubectl(
        "set", "env", "-n", RELEASE_NAMESPACE, f"deployment/{RELEASE}", *assignments
    )  # fmt: skip


def env_of(pod: Any) -> dict[str, str]:
    return {item.name: item.value or "" for item in pod.spec.containers[0].env or []}


def the_pod_with(real: RealCluster, env: dict[str, str]) -> Any:
    """The one operator pod, once its container has started with exactly these proxy
    variables."""

    def started() -> Any | None:
        pods = operator_pods(real)
        if len(pods) != 1:
            return None
        (pod,) = pods
        proxy_env = {k: v for k, v in env_of(pod).items() if k in PROXY_VARIABLES}
        statuses = pod.status.container_statuses or []
        running = bool(statuses) and statuses[0].state.running is not None
        return pod if proxy_env == env and running and pod.status.pod_ip else None

    return eventually(started, timeout=120, what=f"the operator pod with {env}")


def pod_logs(real: RealCluster, pod: Any) -> str:
    logs = []
    for previous in ("--previous=true", "--previous=false"):
        done = real.kubectl(
            "logs", "-n", RELEASE_NAMESPACE, pod.metadata.name, previous, "--tail=40", check=False
        )
        logs.append(f"{previous}:\n{done.stdout}{done.stderr}")
    return "\n".join(logs)


def readyz(pod_ip: str) -> tuple[int, str]:
    """/readyz of the pod, from this machine straight over the bridge (no proxy)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://{pod_ip}:{HEALTH_PORT}/readyz", timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()
    except OSError:
        return 0, ""  # not serving yet


def test_behind_a_proxy_that_refuses_everything_the_pod_never_turns_ready(
    refusing_proxy: tuple[RealCluster, RefusingProxy], tmp_path: Path
) -> None:
    real, proxy = refusing_proxy
    set_env(real, f"HTTPS_PROXY={proxy.url}")

    pod = the_pod_with(real, {"HTTPS_PROXY": proxy.url})
    try:
        eventually(lambda: readyz(pod.status.pod_ip)[0] or None, timeout=60, what="/readyz")
    except BaseException:
        pytest.fail(f"/readyz never answered; the pod's logs:\n{pod_logs(real, pod)}")
    answers: list[int] = []
    started = time.monotonic()
    while time.monotonic() - started < NEVER_READY_SECONDS:
        (now,) = (p for p in operator_pods(real) if p.metadata.uid == pod.metadata.uid)
        assert not is_ready(now), "the operator pod turned Ready behind a refusing proxy"
        status, reason = readyz(pod.status.pod_ip)
        answers.append(status)
        time.sleep(2)

    assert set(answers) == {503}, answers
    assert "[-]watch nodes: not listed yet; failing for " in reason
    assert "[-]watch pods: not listed yet; failing for " in reason
    # Kopf's watches of kubeherd's kinds go through the same transport: refused alike.
    assert "[-]watch customdaemonsets: not listed yet" in reason
    assert "[-]watch schedulerprofiles: not listed yet" in reason
    # kubeherd went through the proxy to the API server's Service address, and was refused.
    assert f"CONNECT {KUBERNETES_SERVICE}:443 HTTP/1.1" in proxy.requests
    (now,) = (p for p in operator_pods(real) if p.metadata.uid == pod.metadata.uid)
    assert now.status.container_statuses[0].restart_count == 0
    assert not is_ready(now)

    found = scrape(f"http://{pod.status.pod_ip}:{METRICS_PORT}/metrics")
    seen = f"{reason}\nproxy: {proxy.requests}\nlog:\n{pod_logs(real, pod)}"
    assert found[("kubeherd_ready", ())] == 0
    for resource in ("nodes", "pods"):
        labels = (("resource", resource), ("watched_namespace", ""))
        assert found[("kubeherd_watch_listed", labels)] == 0
        assert found[("kubeherd_watch_failures_total", labels)] >= 3, seen
        assert found[("kubeherd_watch_failing_seconds", labels)] > NEVER_READY_SECONDS / 2
    for resource in ("customdaemonsets", "schedulerprofiles"):
        assert (
            found[("kubeherd_watch_listed", (("resource", resource), ("watched_namespace", "")))]
            == 0
        )
    # The chart's alert on the series of this scrape.
    ran = watch_failing_fires(
        found, tmp_path, ["customdaemonsets", "nodes", "pods", "schedulerprofiles"]
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_with_the_service_network_in_no_proxy_it_bypasses_the_proxy_and_rolls_out(
    refusing_proxy: tuple[RealCluster, RefusingProxy],
) -> None:
    real, proxy = refusing_proxy
    env = {"HTTPS_PROXY": proxy.url, "NO_PROXY": SERVICE_CLUSTER_IP_RANGE}
    # As a user sets them: the chart's extraEnv (helm waits for the pod to be Ready).
    extra_env = {}
    for index, (name, value) in enumerate(env.items()):
        extra_env[f"extraEnv[{index}].name"] = name
        extra_env[f"extraEnv[{index}].value"] = value
    real.install_chart(**{"metrics.secure": "false"}, **extra_env)

    pod = the_pod_with(real, env)
    (ready,) = wait_for_ready_operators(real, 1)
    assert ready.metadata.uid == pod.metadata.uid
    with real_namespace(real, "no-proxy") as namespace:
        daemonsets = real.daemonsets(namespace)
        name = daemonsets.create(box_daemonset("web", "httpd -f -p 8080 -h /www"))
        status = daemonsets.wait_for_status(name, timeout=120, numberReady=1)
    assert status["desiredNumberScheduled"] == 1
    assert readyz(pod.status.pod_ip)[0] == 200
    # Nothing went through the proxy: the API server's address is in the Service network.
    assert proxy.requests == []
