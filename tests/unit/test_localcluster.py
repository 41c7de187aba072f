"""The local control plane's pure parts: pins, version flags, fake node manifests; and how it
stops a component."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from localcluster import binaries as binaries_module
from localcluster import cluster
from localcluster.__main__ import main as localcluster_main
from localcluster.binaries import (
    KUBERNETES_BINARIES,
    Binaries,
    BuildStep,
    UnpinnedVersionError,
    build_steps,
    ensure_binaries,
    ensure_kube_scheduler,
    ensure_minor_binaries,
    envtest_overrides,
    kubernetes_minors,
    kubernetes_module_dir,
    kubernetes_version,
    kubernetes_version_ldflags,
    minor_bin_dir,
    newest_minor,
    pinned_minor,
    prebuilt_kube_scheduler,
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


@pytest.mark.parametrize("minor", kubernetes_minors())
def test_every_staging_module_is_replaced_by_the_matching_published_version(minor: str) -> None:
    go_mod = (kubernetes_module_dir(minor) / "go.mod").read_text()
    version = required_version(kubernetes_module_dir(minor), "k8s.io/kubernetes")
    staging = version.replace("v1.", "v0.", 1)

    assert version.startswith(f"v{minor}.")

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


def test_the_pinned_minors_run_from_1_34_to_the_newest_oldest_first() -> None:
    minors = kubernetes_minors()

    assert minors[0] == "1.34"
    assert minors[-1] == newest_minor()
    assert [int(minor.split(".")[1]) for minor in minors] == list(range(34, 34 + len(minors)))


@pytest.mark.parametrize("version", ["1.34", "v1.34", "v1.34.4", "1.34.4", " 1.34 "])
def test_a_pinned_minor_is_named_by_its_minor_or_its_pinned_release(version: str) -> None:
    assert kubernetes_version("1.34") == "v1.34.4"

    assert pinned_minor(version) == "1.34"


@pytest.mark.parametrize("version", ["1.33", "v1.99.0", "latest", "1", ""])
def test_an_unpinned_version_is_refused_with_the_pinned_ones(version: str) -> None:
    with pytest.raises(UnpinnedVersionError) as refused:
        pinned_minor(version)

    for minor in kubernetes_minors():
        assert f"{minor} ({kubernetes_version(minor)})" in str(refused.value)


def test_another_patch_of_a_pinned_minor_is_refused_naming_the_pinned_one() -> None:
    with pytest.raises(UnpinnedVersionError, match=r"1\.34 is pinned at v1\.34\.4"):
        pinned_minor("v1.34.3")


def test_each_minor_caches_its_binaries_in_a_folder_named_after_its_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    folders = {minor_bin_dir(minor) for minor in kubernetes_minors()}

    assert len(folders) == len(kubernetes_minors())
    assert minor_bin_dir("1.34") == tmp_path / "kubeherd" / "kubernetes-v1.34.4" / "bin"


class FakeGo:
    """Stands in for `go build`: records each invocation and writes the binaries it names."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.builds: list[BuildStep] = []
        monkeypatch.setattr(binaries_module, "_run_go_build", self.build)

    def build(self, step: BuildStep, out_dir: Path, label: str, report: object) -> None:
        self.builds.append(step)
        for name in step.outputs:
            (out_dir / name).write_text(f"{name} {step.version}")

    @property
    def invocations(self) -> list[tuple[str, tuple[str, ...]]]:
        return [(step.version, step.outputs) for step in self.builds]


@pytest.fixture
def fake_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeGo:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("KUBEHERD_BIN_DIR", raising=False)
    return FakeGo(monkeypatch)


def test_a_minors_binaries_build_together_once_and_a_later_one_alone(fake_go: FakeGo) -> None:
    first = ensure_minor_binaries("1.34", ("kube-scheduler", "kube-apiserver"), report=print)
    again = ensure_minor_binaries("1.34", ("kube-apiserver", "kube-scheduler"), report=print)
    scheduler = ensure_kube_scheduler("1.34", report=print)
    manager = ensure_minor_binaries("1.34", ("kube-controller-manager",), report=print)

    assert fake_go.invocations == [
        ("v1.34.4", ("kube-apiserver", "kube-scheduler")),
        ("v1.34.4", ("kube-controller-manager",)),
    ]
    assert first == again
    assert scheduler == first["kube-scheduler"] == minor_bin_dir("1.34") / "kube-scheduler"
    assert manager["kube-controller-manager"].read_text() == "kube-controller-manager v1.34.4"
    step = fake_go.builds[0]
    assert step.module_dir == kubernetes_module_dir("1.34")
    assert "-X k8s.io/component-base/version.gitVersion=v1.34.4" in step.ldflags


def test_a_prebuilt_scheduler_is_found_only_once_it_is_built(fake_go: FakeGo) -> None:
    assert prebuilt_kube_scheduler("1.35") is None

    built = ensure_kube_scheduler("1.35", report=print)

    assert prebuilt_kube_scheduler("1.35") == built
    assert fake_go.invocations == [("v1.35.4", ("kube-scheduler",))]


def test_a_binary_built_from_other_pins_is_rebuilt(
    fake_go: FakeGo, monkeypatch: pytest.MonkeyPatch
) -> None:
    ensure_kube_scheduler("1.36", report=print)
    stamp = minor_bin_dir("1.36") / ".kube-scheduler.built"
    stamp.write_text("a fingerprint of other pins\n")

    ensure_kube_scheduler("1.36", report=print)

    assert fake_go.invocations == [("v1.36.3", ("kube-scheduler",))] * 2


def test_an_unknown_binary_or_minor_is_refused(fake_go: FakeGo) -> None:
    with pytest.raises(ValueError, match="not a Kubernetes binary: etcd"):
        ensure_minor_binaries("1.34", ("etcd",))
    with pytest.raises(UnpinnedVersionError):
        ensure_kube_scheduler("1.20")

    assert fake_go.builds == []


@pytest.mark.parametrize(
    ("real_node", "from_the_minor"),
    [
        (False, {"kube-apiserver", "kube-controller-manager", "kube-scheduler"}),
        (
            True,
            {
                "kube-apiserver",
                "kube-controller-manager",
                "kube-scheduler",
                "kubelet",
                "kube-proxy",
            },
        ),
    ],
    ids=["fake-nodes", "real-node"],
)
def test_a_cluster_at_an_older_minor_runs_that_minors_control_plane(
    fake_go: FakeGo,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    real_node: bool,
    from_the_minor: set[str],
) -> None:
    default = Binaries(bin_dir=tmp_path / "default")
    monkeypatch.setattr(binaries_module, "_ensure_default_binaries", lambda *_: default)

    binaries = ensure_binaries(minor="1.34", real_node=real_node, report=print)

    assert binaries.kubernetes_version == "v1.34.4"
    for name in (*KUBERNETES_BINARIES, "etcd", "kwok", "helm", "containerd"):
        folder = minor_bin_dir("1.34") if name in from_the_minor else tmp_path / "default"
        assert binaries.path(name) == folder / name, name


def test_a_cluster_at_the_newest_minor_builds_nothing_more(
    fake_go: FakeGo, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    default = Binaries(bin_dir=tmp_path / "default")
    monkeypatch.setattr(binaries_module, "_ensure_default_binaries", lambda *_: default)

    binaries = ensure_binaries(minor=newest_minor(), real_node=True, report=print)

    assert binaries.overrides == {}
    assert binaries.kubernetes_version == kubernetes_version()
    assert fake_go.builds == []


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


def test_cluster_up_at_an_unpinned_version_says_which_are_pinned_and_starts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exit_code = localcluster_main(["--dir", str(tmp_path), "up", "--kubernetes-version", "1.33"])

    assert exit_code == 1
    error = capsys.readouterr().err
    assert error.startswith("error: Kubernetes 1.33 is not pinned here; pinned: 1.34 (v1.34.4)")
    assert list(tmp_path.iterdir()) == []
