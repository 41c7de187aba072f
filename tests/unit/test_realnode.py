"""The real node's pure parts: its configurations keep everything on this machine, and the
teardown helpers find what to undo."""

from __future__ import annotations

from pathlib import Path

import pytest

from localcluster import hostpackages
from localcluster.binaries import Binaries
from localcluster.pki import Pki
from localcluster.realnode import (
    CLOSED_REGISTRY,
    NODE_IP,
    NodePaths,
    _rules_jumping_to,
    cni_config,
    containerd_config,
    kube_proxy_config,
    kubelet_config,
    registry_hosts,
)

PATHS = NodePaths(Path("/clusters/c/node"))
SERVICES = "10.96.0.0/16"


def test_pods_get_no_default_route_only_the_service_range() -> None:
    bridge = cni_config(PATHS, SERVICES)["plugins"][0]

    assert bridge["isGateway"] is True
    assert bridge["isDefaultGateway"] is False
    assert bridge["ipMasq"] is False
    assert bridge["ipam"]["routes"] == [{"dst": SERVICES}]
    assert bridge["ipam"]["ranges"][0][0]["gateway"] == NODE_IP


def test_every_image_pull_goes_to_a_closed_loopback_port() -> None:
    hosts = registry_hosts()

    assert f'server = "{CLOSED_REGISTRY}"' in hosts
    assert CLOSED_REGISTRY.startswith("https://127.0.0.1:")
    config = containerd_config(PATHS, Binaries(Path("/bin-dir")), "localhost/pause:dev")
    assert 'config_path = "/clusters/c/node/containerd/certs.d"' in config
    assert 'sandbox = "localhost/pause:dev"' in config
    # Root here lacks CAP_SYS_RESOURCE: without this every pod sandbox fails to start.
    assert "restrict_oom_score_adj = true" in config
    assert 'bin_dirs = ["/bin-dir/cni"]' in config


def test_pods_resolve_names_with_a_loopback_nameserver_only() -> None:
    config = kubelet_config(PATHS, Pki(Path("/clusters/c/pki")), 12345)

    assert config["resolvConf"] == str(PATHS.resolv_conf)
    assert config["address"] == NODE_IP
    assert config["readOnlyPort"] == 0
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["failCgroupV1"] is False


def test_kube_proxy_changes_no_sysctl_and_serves_node_ports_on_the_node_address_only() -> None:
    config = kube_proxy_config(Path("/k"), 1, 2)

    assert config["conntrack"]["maxPerCore"] == 0
    assert config["iptables"]["localhostNodePorts"] is False
    assert config["nodePortAddresses"] == [f"{NODE_IP}/32"]
    assert config["healthzBindAddress"].startswith("127.0.0.1:")


def test_teardown_finds_the_rules_that_jump_to_the_nodes_chains() -> None:
    saved = "\n".join(
        [
            "*nat",
            ":PREROUTING ACCEPT [0:0]",
            ":KUBE-SERVICES - [0:0]",
            '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
            "-A PREROUTING -d 10.0.0.0/8 -j ACCEPT",
            "COMMIT",
        ]
    )

    rules = list(_rules_jumping_to(saved, "PREROUTING", ["KUBE-SERVICES"]))

    assert rules == [
        ["-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"]
    ]


def test_a_missing_package_is_named_with_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)

    with pytest.raises(hostpackages.HostPackageError, match="sudo apt-get install no-such-pkg"):
        hostpackages.ensure_packages({"no-such-command-here": "no-such-pkg"})


def test_present_commands_need_no_install() -> None:
    assert hostpackages.missing_packages({"sh": "dash", "nope-not-here": "nope"}) == ["nope"]
