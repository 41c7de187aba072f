"""Start and stop a local control plane: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok, plus fake nodes. Used by `make cluster-up/down` and by the tests.

Everything a cluster owns lives in one folder (default `.cluster/`):

    kubeconfig      admin credentials (system:masters) for kubectl and the tests
    pki/            CA, serving and client certificates, the service-account key
    logs/<name>.log one log per component
    pids/<name>.pid one pid per component, so `down` stops exactly what `up` started
    state.json      the ports in use
    bin/            links to the cached binaries
    etcd/           etcd's data

Components are started in their own sessions, so they outlive `make cluster-up` and a Ctrl-C in
the terminal that started them does not take the cluster down half-way.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from localcluster.binaries import Binaries
from localcluster.mounts import mounts_under
from localcluster.nodes import FakeNodes, default_node_manifests
from localcluster.pki import Pki, generate_pki
from localcluster.realnode import APISERVER_FORWARD_PORT as NODE_APISERVER_PORT
from localcluster.realnode import (
    NODE_COMPONENTS,
    NODE_IP,
    NODE_NAME,
    RealNode,
    bridge_exists,
    real_node_owner,
)
from localcluster.stages import write_stages

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
# The order components start in; they stop in reverse.
# kube-apiserver's goroutines per DELETE collection request (its default is 1).
DELETE_COLLECTION_WORKERS = 16
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
# kwok gives every fake node this InternalIP.
KWOK_NODE_IP = "10.0.0.1"
START_TIMEOUT = 90.0
STOP_TIMEOUT = 15.0
# What the API server audits: who did what, at Metadata level, leaving out the components whose
# steady traffic nobody asks about (the controllers, the scheduler, lease renewals, health
# probes), so that the log stays small enough to read in a test. A CustomDaemonSet's status
# writes keep their bodies: which fields a write changed tells a needed write from a wasted one.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {
            "level": "None",
            "users": ["system:kube-controller-manager", "system:kube-scheduler"],
        },
        {"level": "None", "userGroups": ["system:serviceaccounts:kube-system", "system:nodes"]},
        {"level": "None", "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}]},
        {
            "level": "None",
            "nonResourceURLs": ["/healthz*", "/readyz*", "/livez*", "/version", "/openapi*"],
        },
        {
            "level": "Request",
            "verbs": ["patch", "update"],
            "resources": [{"group": "kubeherd.io", "resources": ["customdaemonsets/status"]}],
        },
        {"level": "Metadata"},
    ],
}

Report = Callable[[str], None]


def _print_report(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class ClusterError(RuntimeError):
    pass


def free_loopback_ports(count: int) -> list[int]:
    """Ports the kernel hands out as free right now (held together so they are distinct)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


def port_is_listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _process_state(pid: int) -> str | None:
    """The one-letter state from /proc/<pid>/stat, or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name in parentheses may contain spaces: the state follows the last ')'.
    return stat.rsplit(")", 1)[1].split()[0]


def _is_alive(pid: int) -> bool:
    state = _process_state(pid)
    return state is not None and state not in ("Z", "X")


def _command_line(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    kwok: int
    # The real node's health and metrics ports (0 when the cluster has none).
    kubelet_healthz: int = 0
    proxy_healthz: int = 0
    proxy_metrics: int = 0

    def listening(self) -> list[int]:
        return [port for port in self.__dict__.values() if port_is_listening(port)]


# kube-controller-manager's wait for a node heartbeat before it marks the node and its pods not
# Ready (its default: 50 s), for clusters of kwok nodes on a busy machine (thousands of nodes,
# or the test suites on 2 cores): kwok then renews some leases late, the node controller marks
# those nodes' pods not Ready, and kwok never marks them Ready again. A real kubelet would; no
# test waits for a node to be marked not Ready.
KWOK_NODE_GRACE = "10m"


class LocalCluster:
    def __init__(
        self,
        folder: Path,
        binaries: Binaries | None = None,
        *,
        nodes: int = 3,
        real_node: bool = False,
        image_archives: tuple[Path, ...] = (),
        pause_image: str = "",
        admission_plugins: tuple[str, ...] = (),
        apiserver_feature_gates: tuple[str, ...] = (),
        scheduler_client: tuple[float, int] | None = None,
        node_monitor_grace: str = "",
        kwok_pod_workers: int = 0,
        report: Report = _print_report,
    ) -> None:
        self.folder = folder.resolve()
        self.binaries = binaries
        self.node_count = nodes
        # With a real node: the images loaded into its containerd, the pause image among them.
        self.with_real_node = real_node
        self.image_archives = image_archives
        self.pause_image = pause_image
        # Admission plugins kube-apiserver enables besides its defaults (e.g. OpenShift's
        # OwnerReferencesPermissionEnforcement), for the tests that need a cluster like that.
        self.admission_plugins = admission_plugins
        # kube-apiserver's feature gates set otherwise than their defaults (e.g. WatchList=false),
        # for the tests of a cluster whose administrator turned one off.
        self.apiserver_feature_gates = apiserver_feature_gates
        # kube-scheduler's client rate (QPS, burst) instead of its default: it binds one pod per
        # request, so its client rate is the pace of a large benchmark's rollout.
        self.scheduler_client = scheduler_client
        # How long kube-controller-manager waits for a node's heartbeat before it marks the node
        # and its pods not Ready ("": its default). On a machine running a benchmark's thousands
        # of kwok nodes flat out, kwok renews their leases late, and readiness churn that no
        # real cluster of that size would see rewrites every status.
        self.node_monitor_grace = node_monitor_grace
        # How many pods kwok moves through their stages at once (0: kwok's default), for a
        # benchmark whose pods would otherwise wait for kwok long after they are bound.
        self.kwok_pod_workers = kwok_pod_workers
        self.report = report
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    # Paths -------------------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self.folder / "kubeconfig"

    @property
    def logs(self) -> Path:
        return self.folder / "logs"

    @property
    def audit_log(self) -> Path:
        return self.logs / "kube-apiserver-audit.log"

    @property
    def _pids(self) -> Path:
        return self.folder / "pids"

    @property
    def _state_file(self) -> Path:
        return self.folder / "state.json"

    @property
    def pki(self) -> Pki:
        return Pki(self.folder / "pki")

    def ports(self) -> Ports | None:
        try:
            return Ports(**json.loads(self._state_file.read_text())["ports"])
        except (FileNotFoundError, KeyError, TypeError, json.JSONDecodeError):
            return None

    def has_real_node(self) -> bool:
        """Whether the running cluster (per its state file) was started with a real node."""
        try:
            return bool(json.loads(self._state_file.read_text()).get("real_node"))
        except (FileNotFoundError, json.JSONDecodeError):
            return False

    def running_version(self) -> str | None:
        """The Kubernetes release the cluster was started at, per its state file."""
        try:
            version = json.loads(self._state_file.read_text()).get("kubernetes_version")
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return str(version) if version else None

    def _components(self) -> tuple[str, ...]:
        return (*COMPONENTS, *NODE_COMPONENTS) if self.has_real_node() else COMPONENTS

    def _real_node(self) -> RealNode:
        return RealNode(
            self.folder,
            report=self.report,
            start_process=self._start_executable,
            stop_process=self._stop_component,
        )

    # Processes ---------------------------------------------------------------------------------

    def _pid_of(self, component: str) -> int | None:
        """The pid recorded for `component`, if that process still runs that component of ours."""
        try:
            pid = int((self._pids / f"{component}.pid").read_text())
        except (FileNotFoundError, ValueError):
            return None
        # A recycled pid would run something else: only trust it if it runs our binary in this
        # cluster's folder (every component is started with the folder as its working directory).
        command = _command_line(pid)
        try:
            working_directory = Path(f"/proc/{pid}/cwd").readlink()
        except OSError:
            return None
        ours = bool(command) and Path(command[0]).name == component
        return pid if ours and working_directory == self.folder and _is_alive(pid) else None

    def running_components(self) -> dict[str, int]:
        found = {name: self._pid_of(name) for name in (*COMPONENTS, *NODE_COMPONENTS)}
        return {name: pid for name, pid in found.items() if pid is not None}

    def is_up(self) -> bool:
        wanted = self._components()
        running = self.running_components()
        return all(name in running for name in wanted) and self._apiserver_ready()

    def _binaries(self) -> Binaries:
        if self.binaries is None:
            raise ClusterError("starting a cluster needs its binaries")
        return self.binaries

    def _start(self, component: str, arguments: list[str]) -> None:
        self._start_executable(component, self._binaries().path(component), arguments, None)

    def _start_executable(
        self,
        component: str,
        executable: Path,
        arguments: list[str],
        environment: dict[str, str] | None,
    ) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        self._pids.mkdir(parents=True, exist_ok=True)
        with (self.logs / f"{component}.log").open("ab") as log:
            process = subprocess.Popen(
                [str(executable), *arguments],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.folder,
                start_new_session=True,
                env=environment,
            )
        self._children[component] = process
        (self._pids / f"{component}.pid").write_text(f"{process.pid}\n")

    def _has_exited(self, component: str) -> bool:
        child = self._children.get(component)
        if child is not None:
            # Right after the fork, /proc still shows this Python process until the exec:
            # our own child's exit status is the only reliable signal here.
            return child.poll() is not None
        return self._pid_of(component) is None

    def _wait_until(self, component: str, check: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not check():
            if self._has_exited(component):
                raise ClusterError(
                    f"{component} exited while starting\n{self._log_tail(component)}"
                )
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"{component}: {what} not reached in {START_TIMEOUT:.0f}s\n"
                    f"{self._log_tail(component)}"
                )
            time.sleep(0.1)

    def _log_tail(self, component: str, lines: int = 25) -> str:
        log = self.logs / f"{component}.log"
        text = log.read_text(errors="replace").splitlines()[-lines:] if log.exists() else []
        return f"--- last lines of {log} ---\n" + "\n".join(text)

    # Health checks -----------------------------------------------------------------------------

    def _get(self, url: str, *, client_cert: bool, verify: bool) -> int:
        context = (
            ssl.create_default_context(cafile=str(self.pki.ca_cert))
            if verify
            else (
                ssl._create_unverified_context()  # noqa: S323 - components' self-signed health ports
            )
        )
        if client_cert:
            context.load_cert_chain(self.pki.admin_cert, self.pki.admin_key)
        try:
            with urllib.request.urlopen(url, context=context, timeout=2) as response:  # noqa: S310
                return int(response.status)
        except urllib.error.HTTPError as error:
            return int(error.code)
        except (OSError, ssl.SSLError):
            return 0

    def _apiserver_ready(self) -> bool:
        ports = self.ports()
        return (
            ports is not None
            and self._get(
                f"https://127.0.0.1:{ports.apiserver}/readyz", client_cert=True, verify=True
            )
            == 200
        )

    def _healthy(self, port: int) -> Callable[[], bool]:
        return lambda: (
            self._get(f"https://127.0.0.1:{port}/healthz", client_cert=False, verify=False) == 200
        )

    def _etcd_healthy(self, port: int) -> bool:
        try:
            url = f"http://127.0.0.1:{port}/health"
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(json.load(response).get("health") == "true")
        except (OSError, ValueError):
            return False

    # Up and down -------------------------------------------------------------------------------

    def up(self) -> None:
        """Start the cluster, or do nothing but top up the default nodes if it already runs."""
        started = time.monotonic()
        if self.is_up():
            if self.with_real_node and not self.has_real_node():
                raise ClusterError(
                    f"a cluster without a real node runs in {self.folder}: "
                    "`make cluster-down` first"
                )
            wanted = self._binaries().kubernetes_version
            if self.running_version() not in (None, wanted):
                raise ClusterError(
                    f"a cluster at Kubernetes {self.running_version()} runs in {self.folder}, "
                    f"not {wanted}: `make cluster-down` first"
                )
            self.report(f"cluster already running ({self.folder})")
            self._create_default_nodes()
            return
        if self.running_components():
            self.report("found a partly running cluster: stopping it first")
        self.down(quiet=True)
        if self.with_real_node:
            self._undo_abandoned_real_node()
        self._reset_folder()
        try:
            self._start_control_plane()
            self._create_default_nodes()
            self._wait_for_default_service_account()
            if self.with_real_node:
                self._start_real_node()
        except BaseException:
            self.down(quiet=True)
            raise
        real = f" and real node {NODE_NAME}" if self.with_real_node else ""
        self.report(
            f"cluster ready in {time.monotonic() - started:.1f}s: Kubernetes "
            f"{self._binaries().kubernetes_version}, {self.node_count} fake nodes{real}, "
            f"KUBECONFIG={self.kubeconfig}"
        )

    def _undo_abandoned_real_node(self) -> None:
        """A run killed before its `down` (a timeout, a lost session) leaves its real node's
        bridge, mounts and rules behind, and no other real node can start: undo them from the
        record it kept, provided nothing of that cluster still runs."""
        owner = real_node_owner()
        if owner is None or owner == self.folder or not bridge_exists():
            return
        abandoned = LocalCluster(owner, report=self.report)
        if abandoned.running_components() or not (owner / "node" / "changes.json").is_file():
            return  # alive, or nothing to undo it from: the real node's own check explains
        self.report(f"undoing the real node a stopped run left in {owner}")
        abandoned.down(quiet=True)

    def _reset_folder(self) -> None:
        node_folder = self.folder / "node"
        if node_folder.exists() and mounts_under(node_folder):
            # Removing files through a mount would reach into containers' filesystems.
            raise ClusterError(f"{node_folder} still has mounts: run `make cluster-down` first")
        for name in (
            "etcd",
            "pki",
            "pids",
            "logs",
            "kubeconfig",
            "state.json",
            "node",
            "audit-policy.json",
        ):
            path = self.folder / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.exists() or path.is_symlink():
                path.unlink()
        self.folder.mkdir(parents=True, exist_ok=True)
        self._binaries().link_into(self.folder / "bin")

    def _start_control_plane(self) -> None:
        ports = Ports(*free_loopback_ports(9 if self.with_real_node else 6))
        state = {
            "ports": ports.__dict__,
            "real_node": self.with_real_node,
            "kubernetes_version": self._binaries().kubernetes_version,
        }
        self._state_file.write_text(json.dumps(state, indent=2) + "\n")
        pki = generate_pki(self.folder / "pki")
        self._write_kubeconfig(ports.apiserver, pki)
        audit_policy = self.folder / "audit-policy.json"
        audit_policy.write_text(json.dumps(AUDIT_POLICY, indent=2) + "\n")
        self.logs.mkdir(parents=True, exist_ok=True)
        kubeconfig = str(self.kubeconfig)

        step = time.monotonic()
        etcd_url = f"http://127.0.0.1:{ports.etcd_client}"
        peer_url = f"http://127.0.0.1:{ports.etcd_peer}"
        self._start(
            "etcd",
            [
                "--name=default",
                f"--data-dir={self.folder / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                # A throwaway test store: skipping fsync makes writes an order of magnitude faster.
                "--unsafe-no-fsync=true",
                "--quota-backend-bytes=8589934592",
                "--log-level=warn",
            ],
        )
        self._wait_until("etcd", lambda: self._etcd_healthy(ports.etcd_client), "/health")
        self.report(f"  etcd up in {time.monotonic() - step:.1f}s")

        step = time.monotonic()
        self._start(
            "kube-apiserver",
            [
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                # Without it the API server looks for a default route to advertise, and these
                # machines may have none.
                "--advertise-address=127.0.0.1",
                # Since 1.37 the endpoint reconciler refuses a loopback address; with none, the
                # `kubernetes` Service just has no endpoints, which nothing here needs.
                "--endpoint-reconciler-type=none",
                f"--secure-port={ports.apiserver}",
                f"--cert-dir={self.folder / 'pki'}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_cert}",
                # As kubeadm does; controller manager and scheduler read this CA at start-up
                # and log errors every second without it. No front-proxy cert is ever issued.
                f"--requestheader-client-ca-file={pki.ca_cert}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                "--authorization-mode=Node,RBAC",
                f"--service-account-issuer=https://127.0.0.1:{ports.apiserver}",
                f"--service-account-key-file={pki.service_account_public_key}",
                f"--service-account-signing-key-file={pki.service_account_key}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--allow-privileged=true",
                "--profiling=false",
                # A DELETE collection deletes its objects one at a time by default: tens of
                # thousands of benchmark or test pods then outlast the request timeout.
                f"--delete-collection-workers={DELETE_COLLECTION_WORKERS}",
                f"--audit-policy-file={audit_policy}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                "--audit-log-maxsize=200",
                "--audit-log-maxbackup=1",
                # For logs and exec on the real node; node names do not resolve here.
                f"--kubelet-client-certificate={pki.kubelet_client_cert}",
                f"--kubelet-client-key={pki.kubelet_client_key}",
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                # Admission webhooks behind a Service (the chart's) are dialled at a ready
                # endpoint's pod IP, not at the ClusterIP: from this machine, kube-proxy's DNAT
                # of the API server's own packets is not re-routed to the node's bridge, and the
                # real node's guard rejects them. API servers outside the pod network (managed
                # control planes) reach webhooks the same way.
                "--enable-aggregator-routing=true",
                *(
                    [f"--enable-admission-plugins={','.join(self.admission_plugins)}"]
                    if self.admission_plugins
                    else []
                ),
                *(
                    [f"--feature-gates={','.join(self.apiserver_feature_gates)}"]
                    if self.apiserver_feature_gates
                    else []
                ),
            ],
        )
        self._wait_until("kube-apiserver", self._apiserver_ready, "/readyz")
        self.report(f"  kube-apiserver up in {time.monotonic() - step:.1f}s")

        step = time.monotonic()
        self._start(
            "kube-controller-manager",
            [
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports.controller_manager}",
                f"--cert-dir={self.folder / 'pki' / 'controller-manager'}",
                "--leader-elect=false",
                # Every default controller: garbage collector, namespace, deployment, replicaset,
                # daemonset, serviceaccount, node lifecycle, ... at their default client QPS.
                "--controllers=*",
                # Each controller acts as its own service account, under the system:controller:*
                # RBAC roles, as on a real cluster.
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki.service_account_key}",
                f"--root-ca-file={pki.ca_cert}",
                f"--cluster-signing-cert-file={pki.ca_cert}",
                f"--cluster-signing-key-file={pki.ca_key}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--profiling=false",
                # Its default, /usr/libexec/kubernetes/..., would be created on the machine.
                f"--flex-volume-plugin-dir={self.folder / 'flexvolume'}",
                *(
                    [f"--node-monitor-grace-period={self.node_monitor_grace}"]
                    if self.node_monitor_grace
                    else []
                ),
            ],
        )
        self._start(
            "kube-scheduler",
            [
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={ports.scheduler}",
                f"--cert-dir={self.folder / 'pki' / 'scheduler'}",
                # With a real node the cluster stands in for a real one: its scheduler elects on
                # kube-system/kube-scheduler as kubeadm's does, so the tests can show that no
                # SchedulerProfile contends for that Lease.
                f"--leader-elect={'true' if self.with_real_node else 'false'}",
                "--profiling=false",
                # Deprecated in favour of the config file's clientConnection, and still read
                # when there is no config file, as here.
                *(
                    [
                        f"--kube-api-qps={self.scheduler_client[0]:g}",
                        f"--kube-api-burst={self.scheduler_client[1]}",
                    ]
                    if self.scheduler_client
                    else []
                ),
            ],
        )
        self._start_kwok(ports.kwok)
        self._wait_until(
            "kube-controller-manager", self._healthy(ports.controller_manager), "/healthz"
        )
        self._wait_until("kube-scheduler", self._healthy(ports.scheduler), "/healthz")
        self._wait_for_kwok(ports.kwok)
        self.report(
            f"  controller-manager, scheduler and kwok up in {time.monotonic() - step:.1f}s"
        )

    def _start_kwok(self, port: int) -> None:
        """kwok adopts only the nodes annotated as fake, so a real cluster's nodes are safe."""
        kubeconfig = str(self.kubeconfig)
        stages = write_stages(
            self._binaries().kwok_stages,
            self.folder / "kwok-stages.yaml",
            pod_stage_workers=self.kwok_pod_workers,
        )
        self._start(
            "kwok",
            [
                f"--kubeconfig={kubeconfig}",
                f"--config={stages}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                f"--cidr={POD_CIDR}",
                "--node-ip=10.0.0.1",
                f"--server-address=127.0.0.1:{port}",
                "--node-lease-duration-seconds=40",
            ],
        )

    def _wait_for_kwok(self, port: int) -> None:
        self._wait_until(
            "kwok",
            lambda: (
                self._get(f"http://127.0.0.1:{port}/healthz", client_cert=False, verify=False)
                == 200
            ),
            "/healthz",
        )

    def _write_kubeconfig(self, port: int, pki: Pki) -> None:
        import base64

        def encoded(path: Path) -> str:
            return base64.b64encode(path.read_bytes()).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "kubeherd-local",
                    "cluster": {
                        "server": f"https://127.0.0.1:{port}",
                        "certificate-authority-data": encoded(pki.ca_cert),
                    },
                }
            ],
            "users": [
                {
                    "name": "kubeherd-admin",
                    "user": {
                        "client-certificate-data": encoded(pki.admin_cert),
                        "client-key-data": encoded(pki.admin_key),
                    },
                }
            ],
            "contexts": [
                {
                    "name": "kubeherd-local",
                    "context": {
                        "cluster": "kubeherd-local",
                        "user": "kubeherd-admin",
                        "namespace": "default",
                    },
                }
            ],
            "current-context": "kubeherd-local",
        }
        # JSON is valid YAML, and every kubeconfig reader accepts it.
        self.kubeconfig.write_text(json.dumps(config, indent=2) + "\n")
        self.kubeconfig.chmod(0o600)

    def token_kubeconfig(self, account: str, token: str, path: Path) -> Path:
        """A kubeconfig for this cluster that logs in with a bearer token (a ServiceAccount's)."""
        return self._user_kubeconfig(account, {"token": token}, path)

    def _user_kubeconfig(self, user: str, credentials: dict[str, str], path: Path) -> Path:
        import yaml  # kind writes YAML kubeconfigs, this cluster JSON (which is YAML too)

        cluster_entry = yaml.safe_load(self.kubeconfig.read_text())["clusters"][0]["cluster"]
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "local", "cluster": cluster_entry}],
            "users": [{"name": user, "user": credentials}],
            "contexts": [{"name": user, "context": {"cluster": "local", "user": user}}],
            "current-context": user,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config, indent=2) + "\n")
        path.chmod(0o600)
        return path

    def core_v1(self) -> object:
        from kubernetes import client, config

        api_client = config.new_client_from_config(config_file=str(self.kubeconfig))
        return client.CoreV1Api(api_client)

    def _create_default_nodes(self) -> None:
        step = time.monotonic()
        FakeNodes(self.core_v1()).create(default_node_manifests(self.node_count))
        self.report(f"  {self.node_count} nodes Ready in {time.monotonic() - step:.1f}s")

    def _wait_for_default_service_account(self) -> None:
        # Pods cannot be created in a namespace until the controller manager has made its
        # `default` ServiceAccount; tests would otherwise race it.
        from kubernetes.client.exceptions import ApiException

        core: object = self.core_v1()
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                core.read_namespaced_service_account("default", "default")  # type: ignore[attr-defined]
                return
            except ApiException as error:
                if error.status != 404 or time.monotonic() > deadline:
                    raise
            time.sleep(0.2)

    def _start_real_node(self) -> None:
        ports = self.ports()
        assert ports is not None
        step = time.monotonic()
        self._real_node().up(
            self._binaries(),
            self.pki,
            ports.apiserver,
            self._client_kubeconfig,
            service_range=SERVICE_CLUSTER_IP_RANGE,
            guarded_ranges=(POD_CIDR, f"{KWOK_NODE_IP}/32"),
            pause_image=self.pause_image,
            image_archives=self.image_archives,
            wait_until=self._wait_until,
            ports=(ports.kubelet_healthz, ports.proxy_healthz, ports.proxy_metrics),
        )
        self._point_kubernetes_service_at_node()
        FakeNodes(self.core_v1()).wait_ready([NODE_NAME], timeout=START_TIMEOUT)
        self.report(f"  real node {NODE_NAME} Ready in {time.monotonic() - step:.1f}s")

    def _point_kubernetes_service_at_node(self) -> None:
        """Pods reach the API server at the `kubernetes` Service: its endpoint is the node's
        forwarder, since the API server listens on loopback only (and reconciles no endpoints)."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        api = client.DiscoveryV1Api(self.core_v1().api_client)  # type: ignore[attr-defined]
        slice_body = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": "kubernetes-real-node",
                "namespace": "default",
                "labels": {"kubernetes.io/service-name": "kubernetes"},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [NODE_IP], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": NODE_APISERVER_PORT, "protocol": "TCP"}],
        }
        try:
            api.create_namespaced_endpoint_slice("default", slice_body)
        except ApiException as error:
            if error.status != 409:
                raise

    def _client_kubeconfig(self, user: str, cert: Path, key: Path, path: Path) -> Path:
        """A kubeconfig for this cluster that logs in with a client certificate, held in the
        file as kubeadm writes them: a static pod that mounts the file has all it needs."""
        credentials = {
            "client-certificate-data": base64.b64encode(cert.read_bytes()).decode(),
            "client-key-data": base64.b64encode(key.read_bytes()).decode(),
        }
        return self._user_kubeconfig(user, credentials, path)

    def _stop_component(self, component: str) -> bool:
        """Stop one component if it runs; whether it did."""
        pid = self._pid_of(component)
        child = self._children.get(component)
        if pid is None and child is not None and child.poll() is None:
            pid = child.pid  # started by us, possibly not yet past its exec
        if pid is not None:
            self._stop(component, pid)
        with contextlib.suppress(FileNotFoundError):
            (self._pids / f"{component}.pid").unlink()
        return pid is not None

    def restart(self, component: str, while_down: Callable[[], None] = lambda: None) -> None:
        """Stop etcd or kube-apiserver, run `while_down`, and start it again as it was: an
        outage, as a control-plane upgrade or a crash makes one."""
        if component not in ("etcd", "kube-apiserver"):
            raise ClusterError(f"restarting {component} is not supported")
        pid = self._pid_of(component)
        if pid is None:
            raise ClusterError(f"{component} does not run")
        command = _command_line(pid)
        self._stop(component, pid)
        try:
            while_down()
        finally:
            self._start_executable(component, Path(command[0]), command[1:], None)
        ports = self.ports()
        assert ports is not None
        if component == "etcd":
            self._wait_until("etcd", lambda: self._etcd_healthy(ports.etcd_client), "/health")
        self._wait_until("kube-apiserver", self._apiserver_ready, "/readyz")

    def delete_from_etcd(self, key: str) -> int:
        """Delete a key straight from etcd (`/registry/pods/<namespace>/<name>`,
        `/registry/minions/<name>`), behind the API server's back: with the API server down,
        no watcher can ever be told of it; how many keys went."""
        ports = self.ports()
        assert ports is not None
        request = urllib.request.Request(
            f"http://127.0.0.1:{ports.etcd_client}/v3/kv/deleterange",
            data=json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode(),
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - loopback
            return int(json.loads(response.read()).get("deleted") or 0)

    def down(self, *, quiet: bool = False) -> None:
        """Stop every component this folder's pid files name, in reverse start order; a real
        node first, undoing what it changed on the machine."""
        stopped = []
        node = self._real_node()
        if node.paths.changes.is_file():
            node.down(self.folder / "bin")
            stopped.append(f"real node {NODE_NAME}")
        for component in reversed(COMPONENTS):
            if self._stop_component(component):
                stopped.append(component)
        if not quiet:
            self.report(f"stopped {', '.join(stopped)}" if stopped else "no cluster running")

    def _stop(self, component: str, pid: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        while _is_alive(pid) and time.monotonic() < deadline:
            self._reap(component)
            time.sleep(0.05)
        if _is_alive(pid):
            # Said even when quiet: a silent SIGKILL would hide a component that hangs on
            # SIGTERM, and the teardown test fails on this line.
            self.report(f"{component} did not exit within {STOP_TIMEOUT:g}s of SIGTERM: killed")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            while _is_alive(pid):
                time.sleep(0.05)
        self._reap(component)

    def _reap(self, component: str) -> None:
        # Our own children would otherwise stay zombies until this process exits.
        child = self._children.get(component)
        if child is not None and child.poll() is not None:
            del self._children[component]


@contextlib.contextmanager
def running_cluster(cluster: LocalCluster, *, keep: bool = False) -> Iterator[LocalCluster]:
    """Bring the cluster up for the duration of a block; `keep` leaves it running afterwards."""
    cluster.up()
    try:
        yield cluster
    finally:
        if not keep:
            cluster.down()


class AttachedCluster(LocalCluster):
    """Fake nodes on a cluster that runs elsewhere (a kind cluster, for `make test-kind`): only
    kwok runs here, with that cluster's kubeconfig, and adds the same default nodes."""

    def __init__(
        self,
        folder: Path,
        binaries: Binaries,
        kubeconfig: Path,
        *,
        nodes: int = 3,
        report: Report = _print_report,
    ) -> None:
        super().__init__(folder, binaries, nodes=nodes, report=report)
        self.source_kubeconfig = kubeconfig

    def is_up(self) -> bool:
        return "kwok" in self.running_components()

    def up(self) -> None:
        self.down(quiet=True)
        self._reset_folder()
        shutil.copyfile(self.source_kubeconfig, self.kubeconfig)
        self.kubeconfig.chmod(0o600)
        (port,) = free_loopback_ports(1)
        try:
            self._start_kwok(port)
            self._wait_for_kwok(port)
            self._create_default_nodes()
            self._wait_for_default_service_account()
        except BaseException:
            self.down(quiet=True)
            raise
