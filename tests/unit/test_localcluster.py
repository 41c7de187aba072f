"""The local control plane's pure parts: pins, version flags, fake node manifests; and how it
stops a component."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from localcluster import cluster
from localcluster.binaries import (
    Binaries,
    build_steps,
    envtest_overrides,
    kubernetes_module_dir,
    kubernetes_version_ldflags,
    required_version,
    versions_key,
)
from localcluster.cluster import LocalCluster
from localcluster.nodes import (
    CONTROL_PLANE_NODE,
    CONTROL_PLANE_ROLE,
    KWOK_ANNOTATION,
    ZONE_LABEL,
    default_node_manifests,
    default_node_names,
)


def test_required_version_reads_the_pin_from_a_go_mod(tmp_path: Path) -> None:
    (tmp_path / "go.mod").write_text(
        "module example\n\ngo 1.26.0\n\nrequire (\n"
        "\tgithub.com/other/thing v1.2.3 // indirect\n"
        "\tsigs.k8s.io/kwok v0.8.0\n)\n"
    )

    assert required_version(tmp_path, "sigs.k8s.io/kwok") == "v0.8.0"
    with pytest.raises(RuntimeError, match=r"does not require k8s\.io/kubernetes"):
        required_version(tmp_path, "k8s.io/kubernetes")


def test_every_staging_module_is_replaced_by_the_matching_published_version() -> None:
    go_mod = (kubernetes_module_dir() / "go.mod").read_text()
    version = required_version(kubernetes_module_dir(), "k8s.io/kubernetes")
    staging = version.replace("v1.", "v0.", 1)

    replaces = [line for line in go_mod.splitlines() if line.startswith("replace k8s.io/")]

    assert len(replaces) >= 31
    for line in replaces:
        module = line.split()[1]
        assert line == f"replace {module} => {module} {staging}"


def test_kubernetes_binaries_carry_the_version_in_both_version_packages() -> None:
    flags = kubernetes_version_ldflags("v1.37.2")

    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert f"-X {package}.gitVersion=v1.37.2" in flags
        assert f"-X {package}.gitMajor=1" in flags
        assert f"-X {package}.gitMinor=37" in flags


def test_the_cache_folder_is_named_after_every_pinned_version() -> None:
    key = versions_key(build_steps())

    assert key.startswith("kubernetes-v1.")
    for name in ("etcd-v3.6.", "kwok-v", "helm-v4."):
        assert name in key


def test_default_nodes_are_a_tainted_control_plane_node_and_workers_over_zones() -> None:
    manifests = default_node_manifests(4)
    names = [m["metadata"]["name"] for m in manifests]

    assert names == [CONTROL_PLANE_NODE, "worker-1", "worker-2", "worker-3"]
    control_plane, *workers = manifests
    assert control_plane["spec"]["taints"] == [{"key": CONTROL_PLANE_ROLE, "effect": "NoSchedule"}]
    assert CONTROL_PLANE_ROLE in control_plane["metadata"]["labels"]
    assert all(not w["spec"]["taints"] for w in workers)
    assert len({m["metadata"]["labels"][ZONE_LABEL] for m in manifests}) >= 2
    for manifest in manifests:
        assert manifest["metadata"]["annotations"][KWOK_ANNOTATION] == "fake"
        assert (
            manifest["metadata"]["labels"]["kubernetes.io/hostname"] == manifest["metadata"]["name"]
        )
        assert {"cpu", "memory", "pods"} <= set(manifest["status"]["allocatable"])


def test_a_cluster_needs_at_least_one_node() -> None:
    with pytest.raises(ValueError, match="at least one node"):
        default_node_names(0)


def test_kubebuilder_assets_supply_apiserver_etcd_and_kubectl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("kube-apiserver", "etcd", "kubectl"):
        (tmp_path / name).write_text("")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))

    overrides = envtest_overrides()

    assert overrides == {name: tmp_path / name for name in ("etcd", "kube-apiserver", "kubectl")}
    binaries = Binaries(bin_dir=tmp_path / "cache", overrides=overrides)
    assert binaries.path("etcd") == tmp_path / "etcd"
    assert binaries.path("kube-scheduler") == tmp_path / "cache" / "kube-scheduler"


def test_an_incomplete_kubebuilder_assets_folder_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "kube-apiserver").write_text("")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))

    assert envtest_overrides() == {}


# A component that exits on SIGTERM, and one that ignores it (as a hung one would).
EXITS_ON_SIGTERM = "import time; print('ready', flush=True); time.sleep(60)"
IGNORES_SIGTERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    " print('ready', flush=True); time.sleep(60)"
)


@pytest.mark.parametrize(
    ("program", "expected_reports"),
    [
        (EXITS_ON_SIGTERM, []),
        (IGNORES_SIGTERM, ["kwok did not exit within 0.5s of SIGTERM: killed"]),
    ],
    ids=["exits", "hangs"],
)
def test_a_component_killed_because_sigterm_did_not_stop_it_is_reported(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    program: str,
    expected_reports: list[str],
) -> None:
    monkeypatch.setattr(cluster, "STOP_TIMEOUT", 0.5)
    reports: list[str] = []
    local = LocalCluster(tmp_path, report=reports.append)
    process = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    with process, process.stdout as output:
        assert output.readline() == "ready\n"

        local._stop("kwok", process.pid)

        assert process.wait(timeout=5) is not None
    assert reports == expected_reports
