"""Build the control-plane binaries from the pinned Go wrapper modules, and cache them.

The versions live in one place: the go.mod files under hack/. Each wrapper module holds only a
go.mod and go.sum; `go build` compiles the upstream main packages it requires. Binaries land in
a cache folder outside the repository whose name carries the versions, so a second run finds them
in seconds and a version bump never mixes old and new binaries.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

HACK_DIR = Path(__file__).resolve().parent.parent
# One wrapper module per Kubernetes minor, hack/k8s/<minor>/go.mod (hack/k8s/pin.sh makes one).
KUBERNETES_MODULES = HACK_DIR / "k8s"

# Every binary the local cluster and the tests run.
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
# The real node's own programs (runc and iptables come from Debian: hostpackages.py).
REAL_NODE_BINARIES = ("kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "ctr")
# CNI plugins live in a folder of their own, which containerd is pointed at.
CNI_FOLDER = "cni"
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
ALL_BINARIES = (*CONTROL_PLANE, "kwok", "helm", *REAL_NODE_BINARIES)
# What the one k8s.io/kubernetes build makes.
KUBERNETES_BINARIES = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kubelet",
    "kube-proxy",
)
# The tags upstream's hack/lib/golang.sh builds release binaries with.
KUBERNETES_TAGS = ("selinux", "notest", "grpcnotrace")
# What a cluster at another minor than the newest takes from that minor (the rest, kubectl
# among them, is the newest's); a real node adds its own programs.
MINOR_CONTROL_PLANE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
MINOR_REAL_NODE = ("kubelet", "kube-proxy")
# What KUBEBUILDER_ASSETS is expected to hold (the envtest layout).
ENVTEST_BINARIES = ("etcd", "kube-apiserver", "kubectl")
KWOK_STAGES_FILE = "kwok-stages.yaml"

# The stages kwokctl enables by default: nodes become Ready and keep a Lease; scheduled pods
# become Running; Job pods complete; deleted pods are finalised (the kubelet's job).
KWOK_STAGE_FILES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)

Report = Callable[[str], None]


def _print_report(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def required_version(module_dir: Path, module_path: str) -> str:
    """The version of `module_path` that the wrapper module at `module_dir` requires."""
    go_mod = (module_dir / "go.mod").read_text()
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module_path)}\s+(v\S+)", go_mod, re.M)
    if match is None:
        raise RuntimeError(f"{module_dir}/go.mod does not require {module_path}")
    return match.group(1)


@dataclass(frozen=True)
class BuildStep:
    """One `go build` in one wrapper module, producing one or more binaries."""

    name: str
    module_dir: Path
    main_module: str
    packages: tuple[str, ...]
    outputs: tuple[str, ...]
    ldflags: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    # A folder under the bin folder for the outputs (CNI plugins), or "" for the bin folder.
    subfolder: str = ""
    # The steps this one builds together in one invocation, each stamped on its own.
    parts: tuple[BuildStep, ...] = ()

    @property
    def version(self) -> str:
        return required_version(self.module_dir, self.main_module)

    def fingerprint(self) -> str:
        """Changes whenever the build's inputs change: pins, checksums or flags."""
        digest = hashlib.sha256()
        for name in ("go.mod", "go.sum"):
            digest.update((self.module_dir / name).read_bytes())
        digest.update(repr((self.packages, self.ldflags, self.tags)).encode())
        return digest.hexdigest()[:16]


def kubernetes_version_ldflags(version: str) -> tuple[str, ...]:
    # Without these, every component reports v0.0.0-master+$Format:%H$, and tools that compare
    # versions (helm's kubeVersion, kubectl's skew warning) misjudge the cluster.
    major, minor = version.removeprefix("v").split(".")[:2]
    flags: list[str] = []
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {package}.gitVersion={version}",
            f"-X {package}.gitMajor={major}",
            f"-X {package}.gitMinor={minor}",
            f"-X {package}.gitTreeState=clean",
            # A fixed date keeps the build reproducible and the Go build cache warm.
            f"-X {package}.buildDate=1970-01-01T00:00:00Z",
        ]
    return tuple(flags)


def kubernetes_minors() -> tuple[str, ...]:
    """The Kubernetes minors pinned under hack/k8s, oldest first."""
    minors = [
        folder.name for folder in KUBERNETES_MODULES.glob("*/go.mod") for folder in [folder.parent]
    ]
    return tuple(sorted(minors, key=lambda minor: tuple(int(part) for part in minor.split("."))))


def kubernetes_module_dir(minor: str | None = None) -> Path:
    """The wrapper module of `minor` (default: the newest pinned)."""
    return KUBERNETES_MODULES / (minor or kubernetes_minors()[-1])


class UnpinnedVersionError(RuntimeError):
    """A Kubernetes version that no wrapper module under hack/k8s pins."""


def pinned_minor(version: str) -> str:
    """The pinned minor that `version` names: `1.34`, `v1.34`, or the pinned release itself
    (`v1.34.4`, `1.34.4`); any other version is refused with the list of pinned ones."""
    minors = kubernetes_minors()
    pinned = ", ".join(f"{minor} ({kubernetes_version(minor)})" for minor in minors)
    match = re.fullmatch(r"v?(1\.\d+)(\.\d+)?", version.strip())
    if match is None or match.group(1) not in minors:
        raise UnpinnedVersionError(f"Kubernetes {version} is not pinned here; pinned: {pinned}")
    minor = match.group(1)
    if match.group(2) and f"v{minor}{match.group(2)}" != kubernetes_version(minor):
        raise UnpinnedVersionError(
            f"Kubernetes {version} is not pinned here: {minor} is pinned at "
            f"{kubernetes_version(minor)} (hack/k8s/pin.sh pins another); pinned: {pinned}"
        )
    return minor


def newest_minor() -> str:
    return kubernetes_minors()[-1]


def kubernetes_version(minor: str | None = None) -> str:
    """The release pinned for `minor` (default: the newest), such as v1.34.4."""
    return required_version(kubernetes_module_dir(minor), "k8s.io/kubernetes")


def kubernetes_step(minor: str | None, names: tuple[str, ...]) -> BuildStep:
    """One `go build` of the Kubernetes binaries `names` of `minor` (default: the newest)."""
    return BuildStep(
        name="kubernetes",
        module_dir=kubernetes_module_dir(minor),
        main_module="k8s.io/kubernetes",
        packages=tuple(f"k8s.io/kubernetes/cmd/{name}" for name in names),
        outputs=names,
        ldflags=kubernetes_version_ldflags(kubernetes_version(minor)),
        tags=KUBERNETES_TAGS,
    )


def build_steps() -> tuple[BuildStep, ...]:
    helm_dir = HACK_DIR / "helm"
    kwok_dir = HACK_DIR / "kwok"
    containerd_dir = HACK_DIR / "containerd"
    cni_dir = HACK_DIR / "cni"
    return (
        # One invocation, so the packages they share are compiled once.
        kubernetes_step(None, KUBERNETES_BINARIES),
        BuildStep(
            name="etcd",
            module_dir=HACK_DIR / "etcd",
            main_module="go.etcd.io/etcd/server/v3",
            packages=("go.etcd.io/etcd/server/v3",),
            outputs=("etcd",),
        ),
        BuildStep(
            name="kwok",
            module_dir=kwok_dir,
            main_module="sigs.k8s.io/kwok",
            packages=("sigs.k8s.io/kwok/cmd/kwok",),
            outputs=("kwok",),
            ldflags=(
                f"-X sigs.k8s.io/kwok/pkg/consts.Version="
                f"{required_version(kwok_dir, 'sigs.k8s.io/kwok').removeprefix('v')}",
            ),
        ),
        BuildStep(
            name="helm",
            module_dir=helm_dir,
            main_module="helm.sh/helm/v4",
            packages=("helm.sh/helm/v4/cmd/helm",),
            outputs=("helm",),
            ldflags=(
                "-X helm.sh/helm/v4/internal/version.version="
                + required_version(helm_dir, "helm.sh/helm/v4"),
            ),
        ),
        BuildStep(
            name="containerd",
            module_dir=containerd_dir,
            main_module="github.com/containerd/containerd/v2",
            packages=tuple(
                f"github.com/containerd/containerd/v2/cmd/{name}"
                for name in ("containerd", "containerd-shim-runc-v2", "ctr")
            ),
            outputs=("containerd", "containerd-shim-runc-v2", "ctr"),
            ldflags=(
                "-X github.com/containerd/containerd/v2/version.Version="
                + required_version(containerd_dir, "github.com/containerd/containerd/v2"),
            ),
            # Snapshotters this node never uses; without them the build needs no cgo.
            tags=("no_btrfs", "no_devmapper", "no_zfs"),
        ),
        BuildStep(
            name="cni-plugins",
            module_dir=cni_dir,
            main_module="github.com/containernetworking/plugins",
            packages=(
                "github.com/containernetworking/plugins/plugins/main/bridge",
                "github.com/containernetworking/plugins/plugins/ipam/host-local",
                "github.com/containernetworking/plugins/plugins/main/loopback",
                "github.com/containernetworking/plugins/plugins/meta/portmap",
            ),
            outputs=CNI_PLUGINS,
            subfolder=CNI_FOLDER,
        ),
    )


def monitoring_steps() -> tuple[BuildStep, ...]:
    """Prometheus and promtool, for the metrics tests: cached apart from the cluster's binaries,
    so that neither's version bump rebuilds the other."""
    prometheus_dir = HACK_DIR / "prometheus"
    return (
        BuildStep(
            name="prometheus",
            module_dir=prometheus_dir,
            main_module="github.com/prometheus/prometheus",
            packages=(
                "github.com/prometheus/prometheus/cmd/prometheus",
                "github.com/prometheus/prometheus/cmd/promtool",
            ),
            outputs=("prometheus", "promtool"),
            ldflags=(
                "-X github.com/prometheus/common/version.Version="
                + required_version(prometheus_dir, "github.com/prometheus/prometheus"),
            ),
        ),
    )


def versions_key(steps: tuple[BuildStep, ...]) -> str:
    """A readable cache folder name: kubernetes-v1.37.2_etcd-v3.6.16_kwok-v0.8.0_helm-v4.3.1."""
    return "_".join(f"{step.name}-{step.version}" for step in steps)


def _cache_home() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kubeherd"


def default_bin_dir() -> Path:
    explicit = os.environ.get("KUBEHERD_BIN_DIR")
    if explicit:
        return Path(explicit).expanduser().resolve()
    return _cache_home() / versions_key(build_steps()) / "bin"


def monitoring_bin_dir() -> Path:
    return _cache_home() / versions_key(monitoring_steps()) / "bin"


@dataclass
class Binaries:
    """Where each binary lives. Most come from bin_dir; KUBEBUILDER_ASSETS may override some."""

    bin_dir: Path
    overrides: dict[str, Path] = field(default_factory=dict)
    # The Kubernetes minor of the control plane (the newest pinned, unless a cluster asks for
    # another: then that minor's binaries are among the overrides).
    minor: str = field(default_factory=newest_minor)

    @property
    def kubernetes_version(self) -> str:
        return kubernetes_version(self.minor)

    def path(self, name: str) -> Path:
        return self.overrides.get(name, self.bin_dir / name)

    @property
    def cni_folder(self) -> Path:
        return self.bin_dir / CNI_FOLDER

    @property
    def kwok_stages(self) -> Path:
        return self.bin_dir / KWOK_STAGES_FILE

    def link_into(self, folder: Path) -> None:
        """Symlink every binary into `folder` (the cluster's bin/), replacing stale links."""
        folder.mkdir(parents=True, exist_ok=True)
        for name in ALL_BINARIES:
            link = folder / name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(self.path(name))


def envtest_overrides() -> dict[str, Path]:
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if not assets:
        return {}
    folder = Path(assets).expanduser()
    if not all((folder / name).is_file() for name in ENVTEST_BINARIES):
        return {}
    return {name: (folder / name).resolve() for name in ENVTEST_BINARIES}


def _go_environment() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        # Never download another Go toolchain: the machine's Go must satisfy the go.mod lines.
        GOTOOLCHAIN="local",
        # Static binaries, like upstream's release builds.
        CGO_ENABLED="0",
        # Lets `rm -rf` clean the module cache; go.sum must already list every module.
        GOFLAGS=" ".join(filter(None, [env.get("GOFLAGS", ""), "-modcacherw", "-mod=readonly"])),
    )
    return env


def _format_elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def run_go_verbose(
    command: list[str], cwd: Path, label: str, report: Report, stdout: IO[str] | None = None
) -> None:
    """Run a `go build -v` or `go run -v`, reporting the number of packages compiled every 20
    seconds; `stdout` takes the program's output (`go run`), else it joins the diagnostics."""
    started = time.monotonic()
    compiled = 0
    diagnostics: list[str] = []
    done = threading.Event()

    def heartbeat() -> None:
        while not done.wait(20):
            report(
                f"{label} still compiling: {compiled} packages compiled, "
                f"{_format_elapsed(time.monotonic() - started)} elapsed"
            )

    ticker = threading.Thread(target=heartbeat, daemon=True)
    ticker.start()
    try:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=_go_environment(),
            stdout=stdout if stdout is not None else subprocess.PIPE,
            stderr=subprocess.PIPE if stdout is not None else subprocess.STDOUT,
            text=True,
        )
        output = process.stderr if stdout is not None else process.stdout
        assert output is not None
        for line in output:
            # `-v` prints one package path per line as it compiles; anything else (with a
            # space, a colon or a #) is a diagnostic worth keeping for the error message.
            if re.fullmatch(r"[\w.\-/~+]+", line.strip()):
                compiled += 1
            else:
                diagnostics.append(line.rstrip())
        returncode = process.wait()
    finally:
        done.set()
    if returncode != 0:
        tail = "\n".join(diagnostics[-40:])
        raise RuntimeError(f"{label} failed (`{command[1]}` exit {returncode}):\n{tail}")


def _run_go_build(step: BuildStep, out_dir: Path, label: str, report: Report) -> None:
    """Run one `go build -v` of a step into `out_dir`."""
    # One package builds straight to its binary's name (etcd's main package would otherwise be
    # named after its last path element, "server"); several build into the folder.
    out_dir = out_dir / step.subfolder
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / step.outputs[0] if len(step.packages) == 1 else f"{out_dir}/"
    command = ["go", "build", "-v", "-trimpath", "-o", str(target)]
    if step.tags:
        command.append("-tags=" + ",".join(step.tags))
    command.append("-ldflags=" + " ".join(("-s", "-w", *step.ldflags)))
    command += step.packages
    run_go_verbose(command, step.module_dir, label, report)


def _write_kwok_stages(kwok_dir: Path, bin_dir: Path) -> None:
    """kwok has no built-in stages (only kwokctl embeds them): assemble them from its module."""
    module_root = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kwok"],
        cwd=kwok_dir,
        env=_go_environment(),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    documents = [
        (Path(module_root) / relative).read_text().strip() for relative in KWOK_STAGE_FILES
    ]
    (bin_dir / KWOK_STAGES_FILE).write_text("\n---\n".join(documents) + "\n")


def _stamp_path(bin_dir: Path, step: BuildStep) -> Path:
    return bin_dir / f".{step.name}.built"


def _is_current(bin_dir: Path, step: BuildStep) -> bool:
    stamp = _stamp_path(bin_dir, step)
    return (
        stamp.is_file()
        and stamp.read_text().strip() == step.fingerprint()
        and all((bin_dir / step.subfolder / output).is_file() for output in step.outputs)
    )


def ensure_binaries(
    bin_dir: Path | None = None,
    report: Report = _print_report,
    *,
    minor: str | None = None,
    real_node: bool = False,
) -> Binaries:
    """Return the binaries, building whatever is missing or out of date (and only that). With
    a `minor` other than the newest, the control plane (and, for a `real_node`, kubelet and
    kube-proxy: never newer than the API server) are that minor's."""
    binaries = _ensure_default_binaries(bin_dir, report)
    if minor is None or minor == binaries.minor:
        return binaries
    names = MINOR_CONTROL_PLANE + (MINOR_REAL_NODE if real_node else ())
    return binaries_at(binaries, minor, ensure_minor_binaries(minor, names, report))


def _ensure_default_binaries(bin_dir: Path | None, report: Report) -> Binaries:
    bin_dir = bin_dir or default_bin_dir()
    overrides = envtest_overrides()
    steps = build_steps()
    # With KUBEBUILDER_ASSETS, kube-apiserver, etcd and kubectl come from there, but the
    # controller manager and scheduler still come from the kubernetes build.
    pending = [
        step
        for step in steps
        if not _is_current(bin_dir, step) and not (step.name == "etcd" and "etcd" in overrides)
    ]
    _build(pending, bin_dir, report)
    if not (bin_dir / KWOK_STAGES_FILE).is_file():
        kwok = next(step for step in steps if step.name == "kwok")
        _write_kwok_stages(kwok.module_dir, bin_dir)
    return Binaries(bin_dir=bin_dir, overrides=overrides)


def minor_bin_dir(minor: str) -> Path:
    """Where `minor`'s own Kubernetes binaries are cached: a folder per pinned release, so a
    patch bump never mixes binaries."""
    return _cache_home() / f"kubernetes-{kubernetes_version(minor)}" / "bin"


def _binary_step(minor: str, name: str) -> BuildStep:
    # Stamped one binary at a time: a later build that adds binaries keeps the earlier ones.
    return dataclasses.replace(kubernetes_step(minor, (name,)), name=name)


def _in_default_bundle(minor: str, names: tuple[str, ...]) -> dict[str, Path] | None:
    """The newest minor's binaries, where `make bins` put them, if they are current there."""
    if minor != newest_minor() or os.environ.get("KUBEHERD_BIN_DIR"):
        return None
    bin_dir = default_bin_dir()
    if not _is_current(bin_dir, kubernetes_step(None, KUBERNETES_BINARIES)):
        return None
    return {name: bin_dir / name for name in names}


def ensure_minor_binaries(
    minor: str, names: Iterable[str], report: Report = _print_report
) -> dict[str, Path]:
    """The Kubernetes binaries `names` of a pinned `minor`, by name: those missing or out of
    date are built in one `go build`, so the packages they share compile once."""
    if minor not in kubernetes_minors():
        raise UnpinnedVersionError(f"Kubernetes {minor} is not pinned under {KUBERNETES_MODULES}")
    wanted = set(names)
    unknown = sorted(wanted - set(KUBERNETES_BINARIES))
    if unknown:
        raise ValueError(f"not a Kubernetes binary: {', '.join(unknown)}")
    ordered = tuple(name for name in KUBERNETES_BINARIES if name in wanted)
    bundled = _in_default_bundle(minor, ordered)
    if bundled is not None:
        return bundled
    bin_dir = minor_bin_dir(minor)
    parts = [_binary_step(minor, name) for name in ordered]

    def together(pending: list[BuildStep]) -> list[BuildStep]:
        if not pending:
            return []
        outputs = tuple(step.outputs[0] for step in pending)
        return [dataclasses.replace(kubernetes_step(minor, outputs), parts=tuple(pending))]

    _build(parts, bin_dir, report, combine=together)
    return {name: bin_dir / name for name in ordered}


def ensure_kube_scheduler(minor: str, report: Report = _print_report) -> Path:
    """kube-scheduler of a pinned `minor`, built (only it) on first use and cached."""
    return ensure_minor_binaries(minor, ("kube-scheduler",), report)["kube-scheduler"]


def prebuilt_minor_binaries(minor: str, names: Iterable[str]) -> dict[str, Path] | None:
    """`minor`'s binaries `names` if all are built and current, else None: for the tests, which
    must not compile under their timeout (`make test` builds them first)."""
    ordered = tuple(name for name in KUBERNETES_BINARIES if name in set(names))
    bundled = _in_default_bundle(minor, ordered)
    if bundled is not None:
        return bundled
    bin_dir = minor_bin_dir(minor)
    if all(_is_current(bin_dir, _binary_step(minor, name)) for name in ordered):
        return {name: bin_dir / name for name in ordered}
    return None


def prebuilt_kube_scheduler(minor: str) -> Path | None:
    """kube-scheduler of `minor` if it is already built and current, else None."""
    found = prebuilt_minor_binaries(minor, ("kube-scheduler",))
    return None if found is None else found["kube-scheduler"]


def binaries_at(default: Binaries, minor: str, found: dict[str, Path]) -> Binaries:
    """`default` with `minor`'s binaries `found` in place of the newest's."""
    return Binaries(bin_dir=default.bin_dir, overrides={**default.overrides, **found}, minor=minor)


def oldest_minor() -> str:
    """The oldest pinned minor: `make test` starts a second cluster at it, the minor furthest
    from the newest that every other test runs on."""
    return kubernetes_minors()[0]


def ensure_test_binaries(report: Report = _print_report) -> dict[str, Path]:
    """Everything the tests run, built before the first test starts: the default binaries,
    kube-scheduler of every pinned minor, the oldest minor's control plane, Prometheus."""
    binaries = ensure_binaries(report=report)
    built = {name: binaries.path(name) for name in ALL_BINARIES}
    for minor in kubernetes_minors():
        names = MINOR_CONTROL_PLANE if minor == oldest_minor() else ("kube-scheduler",)
        for name, path in ensure_minor_binaries(minor, names, report).items():
            built[f"{name}@{minor}"] = path
    built.update(ensure_monitoring_binaries(report))
    return built


def ensure_monitoring_binaries(report: Report = _print_report) -> dict[str, Path]:
    """prometheus and promtool, built on first use: their paths by name."""
    bin_dir = monitoring_bin_dir()
    steps = monitoring_steps()
    _build([step for step in steps if not _is_current(bin_dir, step)], bin_dir, report)
    return {name: bin_dir / name for step in steps for name in step.outputs}


# The Prometheus Operator release whose CRDs the chart's ServiceMonitor, PodMonitor and
# PrometheusRule are checked against (tests/integration/test_metrics.py).
PROMETHEUS_OPERATOR = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
PROMETHEUS_OPERATOR_CRDS = ("servicemonitors", "podmonitors", "prometheusrules")


def prometheus_operator_crds() -> list[Path]:
    """The CRD files, from the Go module cache (`go mod download`, checked against go.sum's
    database like every module here): not copied into the repository."""
    answer = subprocess.run(
        ["go", "mod", "download", "-json", PROMETHEUS_OPERATOR],
        cwd=HACK_DIR,
        env={**_go_environment(), "GOFLAGS": "-modcacherw"},
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    folder = Path(json.loads(answer.stdout)["Dir"]) / "example" / "prometheus-operator-crd"
    return [folder / f"monitoring.coreos.com_{name}.yaml" for name in PROMETHEUS_OPERATOR_CRDS]


@contextlib.contextmanager
def exclusive(lock_file: Path, what: str, report: Report) -> Iterator[None]:
    """Hold `lock_file` exclusively (saying so when another process has it first): `what` is
    what the others do meanwhile, e.g. "a build into /path"."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with lock_file.open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            report(f"waiting for {what}")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _build(
    steps: list[BuildStep],
    bin_dir: Path,
    report: Report,
    combine: Callable[[list[BuildStep]], list[BuildStep]] = lambda pending: pending,
) -> None:
    """Build the steps that are not current. `combine` may merge them into fewer `go build`s;
    a merged step names the steps it stands for in `parts`, and stamps each of them."""
    if all(_is_current(bin_dir, step) for step in steps):
        return
    if shutil.which("go") is None:
        raise RuntimeError("Go is needed to build the local binaries: install Go 1.26+")
    # One build at a time per bin folder: two would write the same files.
    with exclusive(bin_dir / ".build.lock", f"another build into {bin_dir}", report):
        # Another process may have built some while this one waited.
        builds = combine([step for step in steps if not _is_current(bin_dir, step)])
        started = time.monotonic()
        for index, step in enumerate(builds, start=1):
            label = f"[{index}/{len(builds)}] {step.name} {step.version}"
            report(f"{label}: building {', '.join(step.outputs)} into {bin_dir}")
            step_started = time.monotonic()
            _run_go_build(step, bin_dir, label, report)
            if step.name == "kwok":
                _write_kwok_stages(step.module_dir, bin_dir)
            for part in step.parts or (step,):
                _stamp_path(bin_dir, part).write_text(part.fingerprint() + "\n")
            report(f"{label}: done in {_format_elapsed(time.monotonic() - step_started)}")
        if builds:
            report(f"cold build finished in {_format_elapsed(time.monotonic() - started)}")
