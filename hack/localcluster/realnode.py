"""One real node beside the kwok nodes: containerd, kubelet, kube-proxy and a bridge network,
for what depends on a real container (probes, grace periods, images, logs and exec, the
operator's own pod, SchedulerProfile scheduler pods).

It needs root and changes the machine while it runs. Each change is recorded in
`node/changes.json` before it is made, so `down` can undo exactly what `up` did, even after a
crash half-way:

- a bridge (`kubeherd0`) whose gateway address is the node's IP, with the pods' veths on it;
- iptables: guards that keep every packet of the node, its pods and kube-proxy's DNAT on this
  machine, plus the chains kubelet, kube-proxy and the portmap plugin add;
- the sysctls kubelet and the bridge plugin set (kernel.panic, vm.overcommit_memory,
  net.ipv4.ip_forward, ...), restored to the values read before;
- mounts (kubelet's root, containers' root filesystems, network namespaces) under the node
  folder, and `kubepods` cgroups in every hierarchy;
- a few paths outside the folder that kubelet, containerd and the CNI plugins always use.

Network safety: pods get a loopback nameserver and no default route; containerd sends every
image pull to a closed loopback port; forwarding to the external interface is dropped, and
output on it to the cluster's pod, Service and kwok ranges, or of any DNAT-ed connection, is
rejected. Nothing is done to the machine's own resolver.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localcluster.binaries import Binaries
from localcluster.hostpackages import REAL_NODE_PACKAGES, ensure_packages
from localcluster.mounts import unmount_all_under
from localcluster.pki import Pki, issue_client_certificate

NODE_NAME = "real-node"
REAL_NODE_LABEL = "kubeherd.io/real-node"
BRIDGE = "kubeherd0"
# The real node's pods: a range apart from kwok's pod range and the Service range. The bridge's
# gateway address is the node's IP (a node IP cannot be loopback).
NODE_SUBNET = "10.89.0.0/24"
NODE_IP = "10.89.0.1"
NODE_PREFIX = 24
# Where pods reach the API server: socat forwards it to the API server's loopback port.
APISERVER_FORWARD_PORT = 6443
KUBELET_PORT = 10250
# A loopback port where nothing listens: every image pull goes there and fails at once.
CLOSED_REGISTRY = "https://127.0.0.1:9"
GUARD_CHAIN = "KUBEHERD-GUARD"
# Names the cluster folder whose real node owns the bridge, so that a later `up` elsewhere can
# undo what a killed run left behind (its own `down` never ran).
OWNER_FILE = Path("/run/kubeherd-real-node")
# Sysctls kubelet (kernel tunables it expects) and the bridge plugin (forwarding) change.
TOUCHED_SYSCTLS = (
    "kernel.panic",
    "kernel.panic_on_oops",
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.ipv4.ip_forward",
    "net.ipv4.conf.all.route_localnet",
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
    "net.netfilter.nf_conntrack_max",
    "net.netfilter.nf_conntrack_tcp_timeout_established",
    "net.netfilter.nf_conntrack_tcp_timeout_close_wait",
    "net.ipv6.conf.all.forwarding",
)
# Paths outside the node folder that the components always use, whatever they are told.
OUTSIDE_PATHS = (
    "/var/lib/kubelet",
    "/var/lib/cni",
    "/etc/cni",
    "/opt/cni",
    "/run/containerd",
    "/var/run/netns",
    "/var/log/pods",
    "/var/log/containers",
    "/usr/libexec/kubernetes",
    "/etc/kubernetes",
)
# The order the node's processes start in; they stop in reverse.
NODE_COMPONENTS = ("containerd", "socat", "kubelet", "kube-proxy")

Report = Callable[[str], None]
# (component, condition, what) -> None, or raises when the component exits or times out.
WaitUntil = Callable[[str, Callable[[], bool], str], None]
# (user, client certificate, key, path) -> the kubeconfig written at path.
KubeconfigFor = Callable[[str, Path, Path, Path], Path]
StartProcess = Callable[[str, Path, list[str], dict[str, str]], None]
StopProcess = Callable[[str], object]


class RealNodeError(RuntimeError):
    pass


def real_node_supported() -> str | None:
    """None when this machine can run the real node, else why not (for a clear skip or error)."""
    if os.geteuid() != 0:
        return "the real node needs root (kubelet, containerd, bridges, iptables)"
    if not Path("/etc/debian_version").is_file():
        return "the real node is set up for Debian (its packages: runc, iptables, socat)"
    return None


def _http_ok(url: str) -> Callable[[], bool]:
    def answers() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - loopback
                return bool(response.status == 200)
        except OSError:
            return False

    return answers


def _run(command: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RealNodeError(
            f"{' '.join(command)} failed (exit {result.returncode}): {result.stderr.strip()}"
        )
    return result


def read_sysctl(name: str) -> str | None:
    path = Path("/proc/sys") / name.replace(".", "/")
    try:
        return path.read_text().strip()
    except OSError:
        return None


def write_sysctl(name: str, value: str) -> None:
    with contextlib.suppress(OSError):
        (Path("/proc/sys") / name.replace(".", "/")).write_text(value)


def external_interfaces() -> list[str]:
    """The interfaces default routes leave by: nothing of the node may go out through them."""
    names = set()
    for family in ("-4", "-6"):
        routes = _run(["ip", family, "route", "show", "default"], check=False).stdout
        names.update(re.findall(r"\bdev (\S+)", routes))
    return sorted(names)


def cgroup_roots() -> list[Path]:
    """Every cgroup hierarchy mounted on this machine (v1 controllers and the unified one)."""
    roots = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        separator = fields.index("-")
        if fields[separator + 1] in ("cgroup", "cgroup2"):
            roots.append(Path(fields[4]))
    return sorted(set(roots))


@dataclass(frozen=True)
class NodePaths:
    folder: Path

    @property
    def changes(self) -> Path:
        return self.folder / "changes.json"

    @property
    def containerd_config(self) -> Path:
        return self.folder / "containerd" / "config.toml"

    @property
    def containerd_socket(self) -> Path:
        return self.folder / "containerd" / "containerd.sock"

    @property
    def kubelet_root(self) -> Path:
        return self.folder / "kubelet"

    @property
    def cni_config(self) -> Path:
        return self.folder / "cni" / "net.d"

    @property
    def resolv_conf(self) -> Path:
        return self.folder / "resolv.conf"

    @property
    def static_pods(self) -> Path:
        """The kubelet's staticPodPath, as /etc/kubernetes/manifests is on a kubeadm node."""
        return self.folder / "static-pods"

    @property
    def scheduler_kubeconfig(self) -> Path:
        """What /etc/kubernetes/scheduler.conf is on a kubeadm node: the user
        system:kube-scheduler, its credentials inside the file (a static pod mounts only it)."""
        return self.folder / "scheduler.kubeconfig"


class Changes:
    """What `up` changed on the machine, saved before each change so `down` can undo it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict[str, Any] = {}
        if path.is_file():
            self.data = json.loads(path.read_text())

    def record(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.data, indent=2) + "\n")

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)


def containerd_config(paths: NodePaths, binaries: Binaries, pause_image: str) -> str:
    state = paths.folder / "containerd" / "state"
    return f"""version = 3
root = "{paths.folder / "containerd" / "root"}"
state = "{state}"

[grpc]
  address = "{paths.containerd_socket}"

[ttrpc]
  address = "{paths.folder / "containerd" / "containerd.sock.ttrpc"}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{paths.folder / "containerd" / "opt"}"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  # The locally built pause image: the default one would be pulled from a registry.
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{pause_image}"
  [plugins."io.containerd.cri.v1.images".registry]
    # _default/hosts.toml sends every pull to a closed loopback port.
    config_path = "{paths.folder / "containerd" / "certs.d"}"

[plugins."io.containerd.cri.v1.runtime"]
  # Root here lacks CAP_SYS_RESOURCE: runc cannot lower a sandbox's oom_score_adj to -998.
  restrict_oom_score_adj = true
  # Network namespaces inside the node folder, so teardown finds every one of them.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{binaries.cni_folder}"]
    conf_dir = "{paths.cni_config}"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
      BinaryName = "{shutil.which("runc") or "runc"}"
      Root = "{state / "runc"}"
      SystemdCgroup = false
"""


def registry_hosts() -> str:
    # `server` too: without it, containerd falls back to the image's own registry.
    return f"""server = "{CLOSED_REGISTRY}"

[host."{CLOSED_REGISTRY}"]
  capabilities = ["pull", "resolve"]
"""


def cni_config(paths: NodePaths, service_range: str) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "kubeherd",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "isDefaultGateway": False,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(paths.folder / "cni" / "ipam"),
                    "ranges": [[{"subnet": NODE_SUBNET, "gateway": NODE_IP}]],
                    # Only the Service range, through the node: pods have no default route.
                    "routes": [{"dst": service_range}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}, "snat": False},
        ],
    }


def kubelet_config(paths: NodePaths, pki: Pki, healthz_port: int) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": NODE_IP,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki.ca_cert)},
        },
        "authorization": {"mode": "Webhook"},
        # These machines have cgroup v1 hierarchies; kubelet 1.35+ refuses them unless told.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{paths.containerd_socket}",
        "imageServiceEndpoint": f"unix://{paths.containerd_socket}",
        # A loopback nameserver: a pod's lookups never reach the machine's resolver.
        "resolvConf": str(paths.resolv_conf),
        "staticPodPath": str(paths.static_pods),
        # A small test disk must not evict the test pods or collect their images.
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        # Lowering its own oom_score_adj needs CAP_SYS_RESOURCE, which root lacks here.
        "oomScoreAdj": 0,
        "podLogsDir": str(paths.folder / "pods-logs"),
        "volumePluginDir": str(paths.folder / "volume-plugins"),
        "serializeImagePulls": False,
        "shutdownGracePeriod": "0s",
        "registerNode": True,
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
        "nodeStatusUpdateFrequency": "5s",
        "maxPods": 50,
    }


def kube_proxy_config(kubeconfig: Path, healthz_port: int, metrics_port: int) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": NODE_NAME,
        "mode": "iptables",
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        # Zeros: leave the machine's conntrack sysctls as they are.
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        # No route_localnet sysctl, and NodePorts only on the node's own address.
        "iptables": {"localhostNodePorts": False},
        "nodePortAddresses": [f"{NODE_IP}/32"],
        "oomScoreAdj": 0,
    }


class RealNode:
    """The node's configuration, processes and machine changes, in `cluster_folder/node/`."""

    def __init__(
        self,
        cluster_folder: Path,
        *,
        report: Report,
        start_process: StartProcess | None = None,
        stop_process: StopProcess | None = None,
    ) -> None:
        self.paths = NodePaths(cluster_folder / "node")
        self.report = report
        self._start_process = start_process
        self._stop_process = stop_process
        self.changes = Changes(self.paths.changes)

    # Up ----------------------------------------------------------------------------------------

    def up(
        self,
        binaries: Binaries,
        pki: Pki,
        apiserver_port: int,
        kubeconfig_for: KubeconfigFor,
        *,
        service_range: str,
        guarded_ranges: Iterable[str],
        pause_image: str,
        image_archives: Iterable[Path],
        wait_until: WaitUntil,
        ports: tuple[int, int, int],
    ) -> None:
        """Start containerd (with the images), the API server forwarder, kubelet, kube-proxy."""
        reason = real_node_supported()
        if reason:
            raise RealNodeError(reason)
        ensure_packages(REAL_NODE_PACKAGES, self.report)
        if self.changes.get("bridge"):
            raise RealNodeError(f"{self.paths.folder} holds a real node already: stop it first")
        if bridge_exists():
            # One real node per machine: the bridge, kubelet's port and the node IP are fixed.
            owner = real_node_owner()
            where = f"`make cluster-down` in {owner}" if owner else "stop it"
            raise RealNodeError(
                f"another real node runs on this machine ({BRIDGE} exists): {where} first"
            )
        self.paths.folder.mkdir(parents=True, exist_ok=True)
        self._record_machine_state()
        self._guard_network(guarded_ranges, service_range)
        self._create_bridge()
        self._write_configs(binaries, service_range, pause_image)
        kubelet_kubeconfig = kubeconfig_for(
            f"system:node:{NODE_NAME}", *self._client_cert(pki, "kubelet", "system:nodes")
        )
        proxy_kubeconfig = kubeconfig_for(
            "system:kube-proxy", *self._client_cert(pki, "kube-proxy", "system:node-proxier")
        )
        self._write_scheduler_kubeconfig(pki, kubeconfig_for)
        kubelet_healthz, proxy_healthz, proxy_metrics = ports

        step = time.monotonic()
        self._start_containerd(binaries)
        wait_until("containerd", self._containerd_serves(binaries), "its socket")
        self._import_images(binaries, image_archives)
        self.report(f"  containerd up, images loaded in {time.monotonic() - step:.1f}s")
        step = time.monotonic()
        self._start_forwarder(apiserver_port)
        self._start_kubelet(binaries, pki, kubelet_kubeconfig, kubelet_healthz)
        self._start_kube_proxy(binaries, proxy_kubeconfig, proxy_healthz, proxy_metrics)
        wait_until("kubelet", _http_ok(f"http://127.0.0.1:{kubelet_healthz}/healthz"), "/healthz")
        wait_until("kube-proxy", _http_ok(f"http://127.0.0.1:{proxy_healthz}/healthz"), "/healthz")
        self.report(f"  kubelet and kube-proxy up in {time.monotonic() - step:.1f}s")

    def _ctr(self, binaries: Binaries) -> list[str]:
        return [
            str(binaries.path("ctr")),
            f"--address={self.paths.containerd_socket}",
            "--namespace=k8s.io",
        ]

    def _containerd_serves(self, binaries: Binaries) -> Callable[[], bool]:
        def serves() -> bool:
            if not self.paths.containerd_socket.exists():
                return False
            return _run([*self._ctr(binaries), "version"], check=False).returncode == 0

        return serves

    def _import_images(self, binaries: Binaries, archives: Iterable[Path]) -> None:
        for archive in archives:
            _run([*self._ctr(binaries), "images", "import", str(archive)])

    def _client_cert(self, pki: Pki, name: str, group: str) -> tuple[Path, Path, Path]:
        common_name = f"system:node:{NODE_NAME}" if name == "kubelet" else "system:kube-proxy"
        cert, key = issue_client_certificate(
            pki, self.paths.folder / "pki" / name, common_name, group
        )
        return cert, key, self.paths.folder / f"{name}.kubeconfig"

    def _write_scheduler_kubeconfig(self, pki: Pki, kubeconfig_for: KubeconfigFor) -> None:
        """As kubeadm's scheduler.conf: the user system:kube-scheduler, in no group, whom the
        default RBAC binds; for a scheduler the kubelet runs as a static pod."""
        user = "system:kube-scheduler"
        cert, key = issue_client_certificate(
            pki, self.paths.folder / "pki" / "scheduler", user, None
        )
        kubeconfig_for(user, cert, key, self.paths.scheduler_kubeconfig)

    def _record_machine_state(self) -> None:
        self.changes.record("sysctls", {name: read_sysctl(name) for name in TOUCHED_SYSCTLS})
        self.changes.record("nft_tables", nft_tables())
        self.changes.record(
            "outside_paths", [path for path in OUTSIDE_PATHS if not Path(path).exists()]
        )
        self.changes.record(
            "cgroups",
            [str(root / "kubepods") for root in cgroup_roots() if not (root / "kubepods").exists()],
        )

    def _guard_network(self, guarded_ranges: Iterable[str], service_range: str) -> None:
        """Keep everything on this machine: kwok's addresses and the Service range look routable
        to kube-proxy and would otherwise be DNAT-ed out of the default route."""
        interfaces = external_interfaces()
        self.changes.record("guard", {"interfaces": interfaces})
        ranges = sorted({*guarded_ranges, service_range, NODE_SUBNET})
        for tool in ("iptables", "ip6tables"):
            if shutil.which(tool) is None:
                continue
            _run([tool, "-w", "-N", GUARD_CHAIN], check=False)
            _run([tool, "-w", "-F", GUARD_CHAIN])
            for interface in interfaces:
                append = [tool, "-w", "-A", GUARD_CHAIN, "-o", interface]
                if tool == "iptables":
                    for cidr in ranges:
                        _run([*append, "-d", cidr, "-j", "REJECT"])
                _run([*append, "-m", "conntrack", "--ctstate", "DNAT", "-j", "REJECT"])
            for hook in ("OUTPUT", "FORWARD"):
                _run([tool, "-w", "-I", hook, "1", "-j", GUARD_CHAIN])
            for interface in interfaces:
                # Nothing the node forwards leaves by the external interface.
                _run([tool, "-w", "-A", GUARD_CHAIN, "-i", BRIDGE, "-o", interface, "-j", "DROP"])

    def _create_bridge(self) -> None:
        self.changes.record("bridge", BRIDGE)
        OWNER_FILE.write_text(f"{self.paths.folder.parent}\n")
        _run(["ip", "link", "add", BRIDGE, "type", "bridge"], check=False)
        _run(["ip", "addr", "replace", f"{NODE_IP}/{NODE_PREFIX}", "dev", BRIDGE])
        _run(["ip", "link", "set", BRIDGE, "up"])

    def _write_configs(self, binaries: Binaries, service_range: str, pause_image: str) -> None:
        paths = self.paths
        paths.containerd_config.parent.mkdir(parents=True, exist_ok=True)
        paths.containerd_config.write_text(containerd_config(paths, binaries, pause_image))
        hosts = paths.folder / "containerd" / "certs.d" / "_default" / "hosts.toml"
        hosts.parent.mkdir(parents=True, exist_ok=True)
        hosts.write_text(registry_hosts())
        paths.cni_config.mkdir(parents=True, exist_ok=True)
        (paths.cni_config / "10-kubeherd.conflist").write_text(
            json.dumps(cni_config(paths, service_range), indent=2) + "\n"
        )
        paths.resolv_conf.write_text("nameserver 127.0.0.1\n")
        paths.static_pods.mkdir(parents=True, exist_ok=True)

    def _environment(self, binaries: Binaries) -> dict[str, str]:
        # containerd finds its shim, and the shim runc, on PATH.
        return {**os.environ, "PATH": f"{binaries.bin_dir}:{os.environ.get('PATH', '')}"}

    def _start(
        self, component: str, executable: Path, arguments: list[str], env: dict[str, str]
    ) -> None:
        if self._start_process is None:
            raise RealNodeError("starting the node needs its cluster")
        self._start_process(component, executable, arguments, env)

    def _start_containerd(self, binaries: Binaries) -> None:
        self._start(
            "containerd",
            binaries.path("containerd"),
            [f"--config={self.paths.containerd_config}", "--log-level=warn"],
            self._environment(binaries),
        )

    def _start_forwarder(self, apiserver_port: int) -> None:
        socat = shutil.which("socat")
        if socat is None:
            raise RealNodeError("socat is missing")
        self._start(
            "socat",
            Path(socat),
            [
                f"TCP-LISTEN:{APISERVER_FORWARD_PORT},bind={NODE_IP},fork,reuseaddr",
                f"TCP:127.0.0.1:{apiserver_port}",
            ],
            dict(os.environ),
        )

    def _start_kubelet(
        self, binaries: Binaries, pki: Pki, kubeconfig: Path, healthz_port: int
    ) -> None:
        config = self.paths.folder / "kubelet-config.json"
        config.write_text(
            json.dumps(kubelet_config(self.paths, pki, healthz_port), indent=2) + "\n"
        )
        self.paths.kubelet_root.mkdir(parents=True, exist_ok=True)
        self._start(
            "kubelet",
            binaries.path("kubelet"),
            [
                f"--config={config}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={self.paths.kubelet_root}",
                f"--cert-dir={self.paths.folder / 'pki' / 'kubelet-serving'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={NODE_IP}",
                f"--node-labels={REAL_NODE_LABEL}=true",
                "--v=1",
            ],
            self._environment(binaries),
        )

    def _start_kube_proxy(
        self, binaries: Binaries, kubeconfig: Path, healthz_port: int, metrics_port: int
    ) -> None:
        config = self.paths.folder / "kube-proxy-config.json"
        config.write_text(
            json.dumps(kube_proxy_config(kubeconfig, healthz_port, metrics_port), indent=2) + "\n"
        )
        self._start(
            "kube-proxy",
            binaries.path("kube-proxy"),
            [f"--config={config}", "--v=1"],
            self._environment(binaries),
        )

    # Down --------------------------------------------------------------------------------------

    def down(self, binaries_folder: Path | None) -> None:
        """Stop the node's processes and undo every recorded change; safe to call twice."""
        if not self.paths.changes.is_file():
            return
        for component in reversed(NODE_COMPONENTS):
            if component == "containerd":
                self._remove_containers(binaries_folder)
            if self._stop_process is not None:
                self._stop_process(component)
        self._kill_leftover_processes()
        self._unmount_all()
        self._remove_cgroups()
        if binaries_folder is not None and (binaries_folder / "kube-proxy").is_file():
            # kube-proxy's own cleanup of the chains it made (iptables and nftables).
            _run([str(binaries_folder / "kube-proxy"), "--cleanup", "--v=0"], check=False)
        self._remove_chains()
        self._remove_interfaces()
        self._restore_sysctls()
        self._remove_outside_paths()
        # A kubelet started on this folder again must not bring back a test's static pods.
        shutil.rmtree(self.paths.static_pods, ignore_errors=True)
        self.paths.changes.unlink()

    def _remove_containers(self, binaries_folder: Path | None) -> None:
        """Kill every container while containerd still runs: shims outlive containerd."""
        ctr = binaries_folder / "ctr" if binaries_folder else None
        if ctr is None or not ctr.is_file() or not self.paths.containerd_socket.exists():
            return
        base = [str(ctr), f"--address={self.paths.containerd_socket}", "--namespace=k8s.io"]
        tasks = _run([*base, "tasks", "ls", "--quiet"], check=False).stdout.split()
        for task in tasks:
            _run([*base, "tasks", "kill", "--signal=SIGKILL", "--all", task], check=False)
        deadline = time.monotonic() + 10
        for task in tasks:
            while time.monotonic() < deadline:
                if _run([*base, "tasks", "delete", task], check=False).returncode == 0:
                    break
                time.sleep(0.2)

    def _processes_using(self, folder: Path) -> list[int]:
        """Processes whose command line or working directory names the node folder (shims,
        containers' init processes run from runc's state there)."""
        found = []
        prefix = str(folder)
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                command = (entry / "cmdline").read_bytes().decode(errors="replace")
                cwd = str((entry / "cwd").readlink())
            except OSError:
                continue
            if prefix in command or cwd.startswith(prefix):
                found.append(int(entry.name))
        return found

    def _kill_leftover_processes(self) -> None:
        for kill_signal in (signal.SIGTERM, signal.SIGKILL):
            pids = self._processes_using(self.paths.folder)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, kill_signal)
            deadline = time.monotonic() + 5
            while pids and time.monotonic() < deadline:
                pids = [pid for pid in pids if Path(f"/proc/{pid}").exists()]
                time.sleep(0.1)
        # Container processes run under a shim (now gone): whatever is left in kubepods.
        for cgroup in self._kubepods_cgroups():
            for procs in cgroup.rglob("cgroup.procs"):
                with contextlib.suppress(OSError):
                    for member in procs.read_text().split():
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(int(member), signal.SIGKILL)

    def _kubepods_cgroups(self) -> list[Path]:
        return [Path(path) for path in self.changes.get("cgroups", []) if Path(path).exists()]

    def _unmount_all(self) -> None:
        outside = [Path(path) for path in self.changes.get("outside_paths", [])]
        for folder in [self.paths.folder, *outside]:
            left = unmount_all_under(folder)
            if left:
                self.report(f"still mounted (detached lazily): {', '.join(left)}")

    def _remove_cgroups(self) -> None:
        deadline = time.monotonic() + 10
        for cgroup in self._kubepods_cgroups():
            folders = sorted(
                (path for path in cgroup.rglob("*") if path.is_dir()),
                key=lambda path: -len(path.parts),
            )
            for folder in [*folders, cgroup]:
                while folder.exists():
                    try:
                        folder.rmdir()
                    except OSError:
                        if time.monotonic() > deadline:
                            self.report(f"could not remove cgroup {folder}")
                            break
                        time.sleep(0.1)

    def _remove_chains(self) -> None:
        for tool in ("iptables", "ip6tables"):
            if shutil.which(tool) is None:
                continue
            for hook in ("OUTPUT", "FORWARD"):
                while (
                    _run([tool, "-w", "-D", hook, "-j", GUARD_CHAIN], check=False).returncode == 0
                ):
                    pass
            _run([tool, "-w", "-F", GUARD_CHAIN], check=False)
            _run([tool, "-w", "-X", GUARD_CHAIN], check=False)
            remove_chains_added_by_node(tool)
        # iptables-nft creates the filter, nat and mangle tables on first use; empty now, they
        # go if the machine had none before.
        for table in sorted(set(nft_tables()) - set(self.changes.get("nft_tables", []))):
            if table_is_empty(table):
                _run(["nft", "delete", *table.split()], check=False)

    def _remove_interfaces(self) -> None:
        bridge = self.changes.get("bridge")
        if bridge:
            _run(["ip", "link", "delete", bridge], check=False)
            if real_node_owner() == self.paths.folder.parent:
                OWNER_FILE.unlink()
        # veths of pods whose network namespace went away go with it; any left were ours.
        for line in _run(
            ["ip", "-o", "link", "show", "master", BRIDGE], check=False
        ).stdout.splitlines():
            name = line.split(":")[1].strip().split("@")[0]
            _run(["ip", "link", "delete", name], check=False)

    def _restore_sysctls(self) -> None:
        for name, value in (self.changes.get("sysctls") or {}).items():
            if value is not None and read_sysctl(name) != value:
                write_sysctl(name, value)

    def _remove_outside_paths(self) -> None:
        for path in self.changes.get("outside_paths", []):
            target = Path(path)
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target, ignore_errors=True)
            elif target.exists() or target.is_symlink():
                target.unlink()


def bridge_exists() -> bool:
    return _run(["ip", "link", "show", BRIDGE], check=False).returncode == 0


def real_node_owner() -> Path | None:
    """The cluster folder whose real node made the bridge, as it recorded it."""
    try:
        return Path(OWNER_FILE.read_text().strip())
    except OSError:
        return None


def nft_tables() -> list[str]:
    """The nftables tables, as `nft list tables` names them ("table ip filter")."""
    if shutil.which("nft") is None:
        return []
    listed = _run(["nft", "list", "tables"], check=False).stdout
    return sorted(line.strip() for line in listed.splitlines() if line.startswith("table "))


def table_is_empty(table: str) -> bool:
    """Whether an nftables table holds nothing but base chains without rules."""
    listed = _run(["nft", "list", *table.split()], check=False)
    if listed.returncode != 0:
        return False
    structure = ("table ", "chain ", "type ", "}")
    lines = [line.strip() for line in listed.stdout.splitlines() if line.strip()]
    return all(line.startswith(structure) for line in lines)


# Chains the node's components create: kubelet (KUBE-FIREWALL, KUBE-KUBELET-CANARY, ...),
# kube-proxy (KUBE-SERVICES, KUBE-SVC-..., ...) and the portmap plugin (CNI-HOSTPORT-...).
NODE_CHAIN = re.compile(r"^(KUBE-|CNI-)")


def remove_chains_added_by_node(tool: str) -> None:
    """Delete the rules that jump to, and then the chains named like, the node's chains."""
    for table in ("filter", "nat", "mangle", "raw"):
        saved = _run([f"{tool}-save", "-t", table], check=False).stdout
        chains = [line[1:].split()[0] for line in saved.splitlines() if line.startswith(":")]
        ours = [chain for chain in chains if NODE_CHAIN.match(chain)]
        if not ours:
            continue
        for chain in chains:
            if chain in ours:
                continue
            for rule in _rules_jumping_to(saved, chain, ours):
                _run([tool, "-w", "-t", table, "-D", chain, *rule], check=False)
        for chain in ours:
            _run([tool, "-w", "-t", table, "-F", chain], check=False)
        for chain in ours:
            _run([tool, "-w", "-t", table, "-X", chain], check=False)


def _rules_jumping_to(saved: str, chain: str, targets: list[str]) -> Iterator[list[str]]:
    import shlex

    for line in saved.splitlines():
        if not line.startswith(f"-A {chain} "):
            continue
        words = shlex.split(line)[2:]
        if "-j" in words and words[words.index("-j") + 1] in targets:
            yield words


# Process names (as /proc/<pid>/comm shows them, 15 characters at most) only a real node runs.
NODE_PROCESS_NAMES = frozenset(
    {"kubelet", "containerd", "containerd-shim", "kube-proxy", "socat", "runc", "pause"}
)
_COUNTERS = re.compile(r"\[\d+:\d+\]|counter packets \d+ bytes \d+")


def machine_snapshot() -> dict[str, Any]:
    """What a real node changes on the machine, to compare before `up` and after `down`."""
    interfaces = _run(["ip", "-o", "link", "show"], check=False).stdout.splitlines()
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    # A tool not installed yet shows no rules: `up` may install it (hostpackages.py), and the
    # snapshot after `down` must still compare equal when it left nothing behind.
    rules: dict[str, list[str]] = {"iptables-save": [], "ip6tables-save": [], "nft": []}
    for tool in ("iptables-save", "ip6tables-save"):
        if shutil.which(tool):
            saved = _run([tool], check=False).stdout
            rules[tool] = sorted(
                _COUNTERS.sub("", line) for line in saved.splitlines() if not line.startswith("#")
            )
    if shutil.which("nft"):
        ruleset = _run(["nft", "list", "ruleset"], check=False).stdout
        rules["nft"] = [_COUNTERS.sub("", line) for line in ruleset.splitlines()]
    processes = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, IndexError):
            name = (entry / "comm").read_text().strip() if entry.name.isdigit() else ""
            # A zombie has exited; only its parent has yet to collect its status.
            running = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
            if name in NODE_PROCESS_NAMES and running:
                processes.append(f"{entry.name} {name}")
    return {
        "interfaces": sorted(line.split(":")[1].strip().split("@")[0] for line in interfaces),
        "mounts": sorted(mounts),
        "rules": rules,
        "sysctls": {name: read_sysctl(name) for name in TOUCHED_SYSCTLS},
        "cgroups": sorted(str(root) for root in cgroup_roots() if (root / "kubepods").exists()),
        "paths": sorted(path for path in OUTSIDE_PATHS if Path(path).exists()),
        "processes": sorted(processes),
    }
