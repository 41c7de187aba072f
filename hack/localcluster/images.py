"""Container images for the local cluster's real node, built with buildah: no Docker, no registry.

Each image ends up as an OCI archive that `ctr -n k8s.io images import FILE` loads:

- pause (PAUSE_IMAGE): our hack/images/pause.c, compiled static, FROM scratch; the sandbox image.
- testbox (TESTBOX_IMAGE): Debian's busybox-static and applet links, FROM scratch; for test pods
  (`httpd -f -p 8080 -h /www` answers real HTTP probes: /www holds index.html and healthz).
- scheduler (scheduler_image(minor)): the kube-scheduler binary of the cluster's Kubernetes minor,
  FROM scratch, named exactly as a SchedulerProfile's Deployment asks for it by default on a
  cluster of that minor, so no registry is needed. One per minor, each built when a cluster or a
  test of that minor asks for it (`--kubernetes-version`): a real node at the newest minor
  loads only the newest's.
- scheduler-plugin (SCHEDULER_PLUGIN_IMAGE): kube-scheduler of the newest pinned minor with
  kubeherd's out-of-tree plugin (hack/schedplugin), built here with Go, FROM scratch: a custom
  image, which kubeherd judges by running it.
- operator (OPERATOR_IMAGE): ./Dockerfile, unchanged, as users build it, on a Python base image
  made here with debootstrap (PYTHON_BASE_IMAGE) instead of python:3.11-slim from Docker Hub.

Everything stays in a cache folder outside the repository (~/.cache/kubeherd/images): buildah's
storage (vfs driver, the one that needs no kernel overlay support) and run root, its temporary
files, the archives and the build logs. Each image is keyed by a fingerprint of its inputs: the
archive's name carries it, so a warm run only hashes files, and a changed input rebuilds that
image only (a code change: the operator image, about a minute; the base is kept).

`python -m localcluster.images [--only NAME] [--kubernetes-version 1.34]` builds and prints
`reference archive` lines.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from localcluster.binaries import (
    HACK_DIR,
    Binaries,
    Report,
    _format_elapsed,
    _go_environment,
    _print_report,
    default_bin_dir,
    ensure_binaries,
    ensure_kube_scheduler,
    envtest_overrides,
    exclusive,
    kubernetes_module_dir,
    kubernetes_version,
    kubernetes_version_ldflags,
    pinned_minor,
    required_version,
)
from localcluster.hostpackages import IMAGE_PACKAGES, ensure_packages
from localcluster.mounts import mounts_under, unmount_all_under
from localcluster.realnode import real_node_supported

REPO_DIR = HACK_DIR.parent
PAUSE_SOURCE = HACK_DIR / "images" / "pause.c"

PAUSE_IMAGE = "localhost/kubeherd/pause:dev"
TESTBOX_IMAGE = "localhost/kubeherd/testbox:dev"
OPERATOR_IMAGE = "localhost/kubeherd/kubeherd:dev"
PYTHON_BASE_IMAGE = "localhost/kubeherd/python-base:bookworm"
# What operator/kubeherd/scheduler/core/images.py renders when a SchedulerProfile names no image
# (tests/unit/test_images.py holds the two together).
SCHEDULER_REPOSITORY = "registry.k8s.io/kube-scheduler"

SCHEDULER_PLUGIN_IMAGE = "localhost/kubeherd/kube-scheduler-plugin:dev"
SCHEDULER_PLUGIN_SOURCE = HACK_DIR / "schedplugin"

# The names `--only` takes, in build order: the quick ones first.
IMAGE_NAMES = ("pause", "testbox", "scheduler", "scheduler-plugin", "operator")

# Scratch images have no shell profile: without PATH, a bare command name such as the
# Deployment's `kube-scheduler` would depend on the runtime's default.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

PAUSE_CFLAGS = ("-static", "-O2", "-s", "-Wall", "-Wextra", "-Werror")

BUSYBOX = Path("/bin/busybox")
# What the test pods call; checked against `busybox --list` before the image is built.
TESTBOX_APPLETS = (
    *("sh", "ash", "[", "test", "true", "false", "echo", "printf", "env", "sleep", "timeout"),
    *("cat", "ls", "mkdir", "rmdir", "touch", "rm", "cp", "mv", "ln", "chmod", "stat", "find"),
    *("grep", "sed", "awk", "head", "tail", "wc", "tr", "cut", "sort", "uniq", "tee", "xargs"),
    *("seq", "expr", "basename", "dirname", "readlink", "mktemp", "date", "hostname", "id"),
    *("whoami", "uname", "ps", "kill", "pidof", "top", "free", "uptime", "nproc", "df", "du"),
    *("httpd", "wget", "nc", "nslookup", "ping", "ip", "netstat", "vi", "md5sum", "sha256sum"),
)
TESTBOX_FILES = {
    "www/index.html": "kubeherd testbox\n",
    "www/healthz": "ok\n",
    # Numeric users work without these; names make `id` and `ps` readable.
    "etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
    "etc/group": "root:x:0:\nnogroup:x:65534:\n",
}

SCHEDULER_PATH = "/usr/local/bin/kube-scheduler"
# The build tags of the kubernetes build (binaries.py): the same tags share Go's build cache, so
# the plugin's build compiles its own package and links.
SCHEDULER_PLUGIN_TAGS = ("selinux", "notest", "grpcnotrace")

DEBIAN_SUITE = "bookworm"
DEBOOTSTRAP_VARIANT = "minbase"
PYTHON_BASE_PACKAGES = ("python3", "python3-venv", "python3-pip", "ca-certificates")
DEFAULT_DEBIAN_MIRROR = "http://deb.debian.org/debian"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# The Dockerfile runs `python -m venv` and `pip install`; Debian has pip but no `python`.
PYTHON_BASE_LINKS = {"usr/local/bin/python": "/usr/bin/python3"}
# apt's package caches and lists (about 100 MB) serve no purpose in an image; device nodes
# in /dev come from debootstrap and are replaced by the runtime's /dev anyway.
PYTHON_BASE_EMPTIED = ("var/cache/apt", "var/lib/apt/lists", "dev")

# The build context's files the Dockerfile copies or reads; operator/ is walked.
OPERATOR_CONTEXT_FILES = ("Dockerfile", ".dockerignore", "pyproject.toml", "uv.lock", "README.md")
# What .dockerignore keeps out of the context under operator/, so it must not count either.
OPERATOR_IGNORED_DIRS = frozenset({"__pycache__"})
# How each command this module runs gets installed on Debian.
APT_PACKAGES = {
    "buildah": "buildah",
    "gcc": "gcc",
    "debootstrap": "debootstrap",
}

HEARTBEAT_SECONDS = 20


class ImageBuildError(RuntimeError):
    """An image could not be built; the message names the cause (and the log, if any)."""


@dataclass(frozen=True)
class ImageArchive:
    """An image in an OCI archive, for `ctr -n k8s.io images import archive`."""

    reference: str
    archive: Path


def scheduler_image(minor: str | None = None) -> str:
    """The image a SchedulerProfile runs by default on a cluster of `minor` (default: the
    newest), whose /version reports the release pinned in hack/k8s/<minor>/go.mod."""
    return f"{SCHEDULER_REPOSITORY}:{kubernetes_version(minor)}"


def scheduler_archive_name(minor: str) -> str:
    """The scheduler image's archive name: one per minor, so no minor's replaces another's."""
    return f"scheduler-{minor}"


def scheduler_binaries(minor: str | None, report: Report = _print_report) -> Binaries:
    """The binaries a scheduler image of `minor` is built from: only that minor's kube-scheduler
    (built on first use), not its whole control plane."""
    if minor is None:
        return ensure_binaries(report=report)
    return Binaries(
        bin_dir=default_bin_dir(),
        overrides={"kube-scheduler": ensure_kube_scheduler(minor, report)},
        minor=minor,
    )


def default_images_dir() -> Path:
    cache_home = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache_home / "kubeherd" / "images"


# --- Fingerprints (pure) ---------------------------------------------------------------------


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fingerprint(recipe: object, files: Mapping[str, Path]) -> str:
    """A short hash of how an image is made (`recipe`, whose repr must be stable: tuples and
    strings) and of the content of every input file, keyed by a name that is not the host path
    (so moving the cache or the checkout does not rebuild)."""
    digest = hashlib.sha256(repr(recipe).encode())
    for name in sorted(files):
        path = files[name]
        if not path.is_file():
            raise ImageBuildError(f"missing input {path}")
        digest.update(f"\0{name}\0{file_digest(path)}".encode())
    return digest.hexdigest()[:16]


def operator_inputs(repo: Path) -> dict[str, Path]:
    """Every file of the build context that ./Dockerfile uses, by path relative to `repo`."""
    files = {name: repo / name for name in OPERATOR_CONTEXT_FILES if (repo / name).is_file()}
    for folder, subfolders, names in os.walk(repo / "operator"):
        subfolders[:] = sorted(name for name in subfolders if name not in OPERATOR_IGNORED_DIRS)
        for name in names:
            path = Path(folder) / name
            files[path.relative_to(repo).as_posix()] = path
    return files


def fingerprint_pause(source: Path = PAUSE_SOURCE) -> str:
    # The compiler's version is left out: a new gcc builds the same behaviour.
    return fingerprint(("pause", PAUSE_IMAGE, PAUSE_CFLAGS, "/pause"), {"pause.c": source})


def fingerprint_testbox(busybox: Path = BUSYBOX) -> str:
    recipe = ("testbox", TESTBOX_IMAGE, TESTBOX_APPLETS, sorted(TESTBOX_FILES.items()), "sh")
    return fingerprint(recipe, {"busybox": busybox})


def fingerprint_scheduler(binary: Path, reference: str) -> str:
    return fingerprint(("scheduler", reference, SCHEDULER_PATH), {"kube-scheduler": binary})


def scheduler_plugin_inputs(
    source: Path = SCHEDULER_PLUGIN_SOURCE, module_dir: Path | None = None
) -> dict[str, Path]:
    """What the plugin's kube-scheduler is built from: its Go files (not its tests) and the
    pinned minor's go.mod and go.sum, whose requirements it is built with."""
    module_dir = module_dir or kubernetes_module_dir()
    files = {f"k8s/{name}": module_dir / name for name in ("go.mod", "go.sum")}
    for path in sorted(source.glob("*.go")):
        if not path.name.endswith("_test.go"):
            files[f"schedplugin/{path.name}"] = path
    return files


def fingerprint_scheduler_plugin(
    source: Path = SCHEDULER_PLUGIN_SOURCE, module_dir: Path | None = None
) -> str:
    recipe = ("scheduler-plugin", SCHEDULER_PLUGIN_IMAGE, SCHEDULER_PATH, SCHEDULER_PLUGIN_TAGS)
    return fingerprint(recipe, scheduler_plugin_inputs(source, module_dir))


def fingerprint_python_base(mirror: str, ca_bundle: Path = HOST_CA_BUNDLE) -> str:
    recipe = (
        "python-base",
        PYTHON_BASE_IMAGE,
        DEBIAN_SUITE,
        DEBOOTSTRAP_VARIANT,
        PYTHON_BASE_PACKAGES,
        mirror,
        sorted(PYTHON_BASE_LINKS.items()),
        PYTHON_BASE_EMPTIED,
    )
    return fingerprint(recipe, {"ca-certificates.crt": ca_bundle})


def fingerprint_operator(repo: Path, base_fingerprint: str) -> str:
    # The base's fingerprint is part of the operator's: a new base rebuilds the operator too.
    recipe = ("operator", OPERATOR_IMAGE, PYTHON_BASE_IMAGE, base_fingerprint)
    return fingerprint(recipe, operator_inputs(repo))


def archive_path(cache: Path, name: str, image_fingerprint: str) -> Path:
    return cache / "archives" / f"{name}-{image_fingerprint}.tar"


def stale_archives(archive: Path, name: str) -> list[Path]:
    """The archives of earlier fingerprints of the image `name`, beside `archive`; not those of
    images whose name merely starts the same (scheduler-1.34, scheduler-1.37)."""
    pattern = re.compile(rf"{re.escape(name)}-[0-9a-f]{{16}}\.tar")
    return [
        path
        for path in archive.parent.glob(f"{name}-*.tar")
        if path != archive and pattern.fullmatch(path.name)
    ]


# --- Host inspection ---------------------------------------------------------------------------


def debian_mirror(apt_dir: Path = Path("/etc/apt")) -> str:
    """The Debian archive this machine's apt uses for the suite (one-line and deb822 sources),
    so debootstrap goes where apt is known to work; KUBEHERD_DEBIAN_MIRROR overrides it."""
    explicit = os.environ.get("KUBEHERD_DEBIAN_MIRROR")
    if explicit:
        return explicit
    candidates: list[Path] = []
    if (apt_dir / "sources.list").is_file():
        candidates.append(apt_dir / "sources.list")
    if (apt_dir / "sources.list.d").is_dir():
        candidates += sorted((apt_dir / "sources.list.d").iterdir())
    for path in candidates:
        if path.suffix == ".sources":
            entries = _deb822_entries(path.read_text())
        elif path.name == "sources.list" or path.suffix == ".list":
            entries = _one_line_entries(path.read_text())
        else:
            continue
        for uri, suites in entries:
            if DEBIAN_SUITE in suites:
                return uri.rstrip("/")
    return DEFAULT_DEBIAN_MIRROR


def _one_line_entries(text: str) -> list[tuple[str, list[str]]]:
    entries = []
    for line in text.splitlines():
        # `deb [arch=amd64 signed-by=...] URI SUITE COMPONENT...`
        line = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0])
        fields = line.split()
        if len(fields) >= 3 and fields[0] == "deb":
            entries.append((fields[1], [fields[2]]))
    return entries


def _deb822_entries(text: str) -> list[tuple[str, list[str]]]:
    entries = []
    for paragraph in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in paragraph.splitlines():
            if line.startswith("#") or ":" not in line:
                continue
            key, value = line.split(":", 1)
            fields[key.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled") == "no":
            continue
        suites = fields.get("suites", "").split()
        entries += [(uri, suites) for uri in fields.get("uris", "").split()]
    return entries


def is_static_elf(path: Path) -> bool:
    """Whether `path` is an ELF executable without a program interpreter (PT_INTERP): the only
    kind that runs in a FROM scratch image."""
    with path.open("rb") as stream:
        header = stream.read(64)
        if len(header) < 52 or header[:4] != b"\x7fELF":
            return False
        is_64 = header[4] == 2
        order = "<" if header[5] == 1 else ">"
        if is_64:
            (table,) = struct.unpack_from(order + "Q", header, 0x20)
            entry_size, entries = struct.unpack_from(order + "HH", header, 0x36)
        else:
            (table,) = struct.unpack_from(order + "I", header, 0x1C)
            entry_size, entries = struct.unpack_from(order + "HH", header, 0x2A)
        stream.seek(table)
        program_headers = stream.read(entry_size * entries)
    pt_interp = 3
    return all(
        struct.unpack_from(order + "I", program_headers, index * entry_size)[0] != pt_interp
        for index in range(entries)
    )


def _require_command(command: str) -> None:
    if shutil.which(command) is None:
        package = APT_PACKAGES.get(command, command)
        raise ImageBuildError(
            f"building the images needs `{command}`, which is not on PATH: "
            f"install it with `apt-get install {package}`"
        )


def _require_static(path: Path, what: str, remedy: str) -> None:
    if not path.is_file():
        raise ImageBuildError(f"{what} {path} is missing: {remedy}")
    if not is_static_elf(path):
        raise ImageBuildError(
            f"{what} {path} is not a static binary, a scratch image needs one: {remedy}"
        )


# --- Mounts --------------------------------------------------------------------------------------


def _unmount_all_under(folder: Path) -> None:
    """buildah (vfs, chroot isolation) and debootstrap (/proc, /sys, maybe /dev binds) mount
    inside their roots; an interrupted build can leave them behind."""
    left = unmount_all_under(folder)
    if left:
        raise ImageBuildError(f"could not unmount {', '.join(left)}: unmount them by hand")


def _remove_tree(folder: Path) -> None:
    _unmount_all_under(folder)
    if folder.exists():
        shutil.rmtree(folder)


# --- Running commands ----------------------------------------------------------------------------


def _run_logged(
    command: Sequence[str],
    *,
    log: Path,
    label: str,
    report: Report,
    progress: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> None:
    """Run a long command with its output in `log`, reporting every HEARTBEAT_SECONDS the last
    output line that matches `progress` (buildah's STEP lines, debootstrap's I: lines)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    last = ""
    done = threading.Event()

    def heartbeat() -> None:
        while not done.wait(HEARTBEAT_SECONDS):
            elapsed = _format_elapsed(time.monotonic() - started)
            report(f"{label} still building, {elapsed} elapsed" + (f": {last}" if last else ""))

    threading.Thread(target=heartbeat, daemon=True).start()
    try:
        with log.open("w") as sink:
            process = subprocess.Popen(
                command,
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                errors="replace",
            )
            assert process.stdout is not None
            for line in process.stdout:
                sink.write(line)
                if re.match(progress, line):
                    last = line.strip()[:100]
            returncode = process.wait()
    finally:
        done.set()
    if returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise ImageBuildError(f"{command[0]} failed (exit {returncode}), log {log}:\n{tail}")


class _Buildah:
    """buildah with its whole state (storage, run root, temporary files) in the cache folder."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache
        self.tmp = cache / "tmp"

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        # Large temporary files (layer diffs, archives being written) default to /var/tmp.
        env["TMPDIR"] = str(self.tmp)
        env["BUILDAH_ISOLATION"] = "chroot"
        return env

    def command(self, *args: str) -> list[str]:
        return [
            "buildah",
            "--storage-driver=vfs",
            f"--root={self.cache / 'storage'}",
            f"--runroot={self.cache / 'run'}",
            *args,
        ]

    def __call__(self, *args: str) -> str:
        self.tmp.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            self.command(*args), env=self.env, capture_output=True, text=True, errors="replace"
        )
        if result.returncode != 0:
            raise ImageBuildError(
                f"buildah {' '.join(args)} failed (exit {result.returncode}):\n"
                f"{result.stderr.strip()}"
            )
        return result.stdout.strip()

    def succeeds(self, *args: str) -> bool:
        return (
            subprocess.run(self.command(*args), env=self.env, capture_output=True).returncode == 0
        )

    def from_scratch(
        self,
        reference: str,
        copies: Sequence[tuple[Path, str]],
        config: Sequence[str],
    ) -> None:
        """FROM scratch, COPY each (source, destination), set the config, commit."""
        container = self("from", "--quiet", "scratch")
        try:
            for source, destination in copies:
                self("copy", "--quiet", container, str(source), destination)
            self("config", *config, container)
            self("commit", "--quiet", "--rm", container, reference)
        except BaseException:
            self.succeeds("rm", container)
            raise

    def push_archive(self, reference: str, archive: Path) -> None:
        """Write the image to an OCI archive, atomically: a partial file never looks cached."""
        archive.parent.mkdir(parents=True, exist_ok=True)
        partial = archive.with_name(archive.name + ".partial")
        partial.unlink(missing_ok=True)
        self("push", "--quiet", reference, f"oci-archive:{partial}:{reference}")
        partial.rename(archive)


# --- The images -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Image:
    # The archive's name; `kind`, the entry of IMAGE_NAMES that builds it, when it differs.
    name: str
    reference: str
    fingerprint: str
    kind: str = ""

    @property
    def recipe(self) -> str:
        return self.kind or self.name


class _Builder:
    def __init__(self, cache: Path, binaries: Binaries, repo: Path, report: Report) -> None:
        self.cache = cache
        self.binaries = binaries
        self.repo = repo
        self.report = report
        self.buildah = _Buildah(cache)
        self.work = cache / "work"
        self.logs = cache / "logs"

    def build(self, image: _Image, label: str) -> None:
        workdir = self.work / image.name
        _remove_tree(workdir)
        workdir.mkdir(parents=True)
        try:
            if image.recipe == "pause":
                self.pause(workdir)
            elif image.recipe == "testbox":
                self.testbox(workdir)
            elif image.recipe == "scheduler":
                self.scheduler(image.reference)
            elif image.recipe == "scheduler-plugin":
                self.scheduler_plugin(workdir, label)
            else:
                self.operator(label)
        finally:
            _remove_tree(workdir)

    def pause(self, workdir: Path) -> None:
        binary = workdir / "pause"
        result = subprocess.run(
            ["gcc", *PAUSE_CFLAGS, "-o", str(binary), str(PAUSE_SOURCE)],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise ImageBuildError(
                f"gcc could not build {PAUSE_SOURCE} (a static build needs libc6-dev):\n"
                f"{result.stderr.strip()}"
            )
        self.buildah.from_scratch(PAUSE_IMAGE, [(binary, "/pause")], ["--entrypoint", '["/pause"]'])

    def testbox(self, workdir: Path) -> None:
        _require_static(BUSYBOX, "busybox", "install it with `apt-get install busybox-static`")
        listed = subprocess.run(
            [str(BUSYBOX), "--list"], capture_output=True, text=True
        ).stdout.split()
        missing = sorted(set(TESTBOX_APPLETS) - set(listed))
        if missing:
            raise ImageBuildError(f"{BUSYBOX} has no applet {', '.join(missing)}")
        rootfs = workdir / "rootfs"
        (rootfs / "bin").mkdir(parents=True)
        shutil.copy2(BUSYBOX, rootfs / "bin" / "busybox")
        for applet in TESTBOX_APPLETS:
            (rootfs / "bin" / applet).symlink_to("busybox")
        for relative, content in TESTBOX_FILES.items():
            (rootfs / relative).parent.mkdir(parents=True, exist_ok=True)
            (rootfs / relative).write_text(content)
        (rootfs / "tmp").mkdir()
        (rootfs / "tmp").chmod(0o1777)
        self.buildah.from_scratch(
            TESTBOX_IMAGE,
            [(rootfs, "/")],
            ["--env", f"PATH={DEFAULT_PATH}", "--cmd", '["sh"]', "--workingdir", "/"],
        )

    def scheduler(self, reference: str) -> None:
        binary = self.binaries.path("kube-scheduler")
        _require_static(binary, "kube-scheduler", "build it with `make bins`")
        self.buildah.from_scratch(
            reference,
            [(binary, SCHEDULER_PATH)],
            # The Deployment's `command: [kube-scheduler, --config=...]` replaces the entrypoint
            # and finds the binary on PATH; the entrypoint serves `ctr run` and `buildah run`.
            ["--env", f"PATH={DEFAULT_PATH}", "--entrypoint", f'["{SCHEDULER_PATH}"]'],
        )

    def scheduler_plugin(self, workdir: Path, label: str) -> None:
        binary = build_scheduler_plugin(workdir / "kube-scheduler", self.logs, label, self.report)
        self.buildah.from_scratch(
            SCHEDULER_PLUGIN_IMAGE,
            [(binary, SCHEDULER_PATH)],
            ["--env", f"PATH={DEFAULT_PATH}", "--entrypoint", f'["{SCHEDULER_PATH}"]'],
        )

    def operator(self, label: str) -> None:
        self.ensure_python_base(label)
        self.report(f"{label}: buildah bud -f Dockerfile (pip downloads from PyPI)")
        _run_logged(
            self.buildah.command(
                "bud",
                "--isolation=chroot",
                # The base exists only here; the default policy would ask a `localhost` registry.
                "--pull=never",
                f"--build-arg=PYTHON_IMAGE={PYTHON_BASE_IMAGE}",
                "--file=Dockerfile",
                f"--tag={OPERATOR_IMAGE}",
                str(self.repo),
            ),
            cwd=self.repo,
            env=self.buildah.env,
            log=self.logs / "operator.log",
            label=label,
            report=self.report,
            progress=r"(\[\d+/\d+\] )?STEP \d+",
        )

    def ensure_python_base(self, label: str) -> None:
        mirror = debian_mirror()
        wanted = fingerprint_python_base(mirror)
        stamp = self.cache / "stamps" / "python-base"
        if (
            stamp.is_file()
            and stamp.read_text().strip() == wanted
            and self.buildah.succeeds("inspect", "--type=image", PYTHON_BASE_IMAGE)
        ):
            self.report(f"{label}: base {PYTHON_BASE_IMAGE} cached")
            return
        _require_command("debootstrap")
        if os.geteuid() != 0:
            raise ImageBuildError("debootstrap needs root to build the Python base image")
        self.report(
            f"{label}: building the base {PYTHON_BASE_IMAGE}: debootstrap {DEBIAN_SUITE} "
            f"from {mirror} (about 90 s)"
        )
        started = time.monotonic()
        workdir = self.work / "python-base"
        _remove_tree(workdir)
        rootfs = workdir / "rootfs"
        try:
            _run_logged(
                [
                    "debootstrap",
                    f"--variant={DEBOOTSTRAP_VARIANT}",
                    f"--include={','.join(PYTHON_BASE_PACKAGES)}",
                    DEBIAN_SUITE,
                    str(rootfs),
                    mirror,
                ],
                log=self.logs / "python-base.log",
                label=label,
                report=self.report,
                progress=r"I: ",
            )
            # debootstrap unmounts what it mounted, unless it was interrupted.
            _unmount_all_under(rootfs)
            prepare_python_base(rootfs)
            self._commit_rootfs(rootfs, PYTHON_BASE_IMAGE)
        finally:
            _remove_tree(workdir)
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(wanted + "\n")
        self.report(
            f"{label}: base {PYTHON_BASE_IMAGE} done in "
            f"{_format_elapsed(time.monotonic() - started)}"
        )

    def _commit_rootfs(self, rootfs: Path, reference: str) -> None:
        # `buildah copy` would make every file root's (/etc/shadow's group, setgid tools): copy
        # into the mounted container with cp -a instead, which keeps owners, modes and links.
        container = self.buildah("from", "--quiet", "scratch")
        try:
            mountpoint = self.buildah("mount", container)
            try:
                copied = subprocess.run(
                    ["cp", "-a", f"{rootfs}/.", mountpoint], capture_output=True, text=True
                )
                if copied.returncode != 0:
                    raise ImageBuildError(f"copying {rootfs} failed: {copied.stderr.strip()}")
            finally:
                self.buildah("umount", container)
            self.buildah(
                "config",
                "--env",
                f"PATH={DEFAULT_PATH}",
                "--env",
                "LANG=C.UTF-8",
                "--cmd",
                '["python3"]',
                container,
            )
            self.buildah("commit", "--quiet", "--rm", container, reference)
        except BaseException:
            self.buildah.succeeds("rm", container)
            raise


def build_scheduler_plugin(target: Path, logs: Path, label: str, report: Report) -> Path:
    """`go build` of hack/schedplugin with the newest pinned minor's requirements (its go.mod
    via -modfile, read-only, no toolchain download, static), reporting as kube-* are built."""
    if shutil.which("go") is None:
        raise ImageBuildError("the scheduler-plugin image needs Go to build: install Go 1.26+")
    module_dir = kubernetes_module_dir()
    version = required_version(module_dir, "k8s.io/kubernetes")
    report(f"{label}: go build of {SCHEDULER_PLUGIN_SOURCE.name} against Kubernetes {version}")
    _run_logged(
        [
            "go",
            "build",
            "-v",
            f"-modfile={module_dir / 'go.mod'}",
            "-trimpath",
            f"-tags={','.join(SCHEDULER_PLUGIN_TAGS)}",
            "-ldflags=" + " ".join(("-s", "-w", *kubernetes_version_ldflags(version))),
            "-o",
            str(target),
            ".",
        ],
        cwd=SCHEDULER_PLUGIN_SOURCE,
        env=_go_environment(),
        log=logs / "scheduler-plugin.log",
        label=label,
        report=report,
        progress=r"[\w.\-/~+]+$",
    )
    _require_static(target, "the plugin's kube-scheduler", "check the build log")
    return target


def prepare_python_base(rootfs: Path, ca_bundle: Path = HOST_CA_BUNDLE) -> None:
    """Turn a debootstrap tree into what ./Dockerfile expects of python:3.11-slim."""
    # PEP 668: Debian's marker makes pip refuse system-wide installs (`pip install uv`).
    for marker in rootfs.glob("usr/lib/python3*/EXTERNALLY-MANAGED"):
        marker.unlink()
    for relative in PYTHON_BASE_EMPTIED:
        folder = rootfs / relative
        for child in folder.iterdir() if folder.is_dir() else ():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    for relative, target in PYTHON_BASE_LINKS.items():
        link = rootfs / relative
        if not link.exists() and not link.is_symlink():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(target)
    # The build's RUN steps reach PyPI through this machine's TLS path, which may need the
    # machine's certificate authorities; Debian's pip reads this bundle. The images then trust
    # what this machine trusts, which is fine for a local development image.
    shutil.copyfile(ca_bundle, rootfs / "etc/ssl/certs/ca-certificates.crt")


def _images(names: Sequence[str], binaries: Binaries, repo: Path) -> list[_Image]:
    images = []
    for name in names:
        if name == "pause":
            images.append(_Image(name, PAUSE_IMAGE, fingerprint_pause()))
        elif name == "testbox":
            _require_static(BUSYBOX, "busybox", "install it with `apt-get install busybox-static`")
            images.append(_Image(name, TESTBOX_IMAGE, fingerprint_testbox()))
        elif name == "scheduler":
            binary = binaries.path("kube-scheduler")
            _require_static(binary, "kube-scheduler", "build it with `make bins`")
            reference = scheduler_image(binaries.minor)
            images.append(
                _Image(
                    scheduler_archive_name(binaries.minor),
                    reference,
                    fingerprint_scheduler(binary, reference),
                    kind=name,
                )
            )
        elif name == "scheduler-plugin":
            images.append(_Image(name, SCHEDULER_PLUGIN_IMAGE, fingerprint_scheduler_plugin()))
        else:
            base = fingerprint_python_base(debian_mirror())
            images.append(_Image(name, OPERATOR_IMAGE, fingerprint_operator(repo, base)))
    return images


def select_images(only: Iterable[str] | None) -> list[str]:
    """The image names to build, in build order; None means all of them."""
    if only is None:
        return list(IMAGE_NAMES)
    wanted = set(only)
    unknown = sorted(wanted - set(IMAGE_NAMES))
    if unknown:
        raise ImageBuildError(
            f"unknown image {', '.join(unknown)}: choose from {', '.join(IMAGE_NAMES)}"
        )
    return [name for name in IMAGE_NAMES if name in wanted]


def _exclusive(cache: Path, report: Report) -> contextlib.AbstractContextManager[None]:
    """One build at a time per cache: buildah's storage, the work folders and the archives'
    names are shared by every process that builds."""
    return exclusive(cache / ".lock", f"another image build in {cache}", report)


def _elapsed(seconds: float) -> str:
    # Most images take a second or two, where binaries.py's whole seconds would say "0s".
    return f"{seconds:.1f}s" if seconds < 10 else _format_elapsed(seconds)


def _size(path: Path) -> str:
    return f"{path.stat().st_size / 1e6:.1f} MB"


def ensure_images(
    binaries: Binaries,
    report: Report = _print_report,
    *,
    only: Iterable[str] | None = None,
    cache_dir: Path | None = None,
    repo: Path = REPO_DIR,
) -> list[ImageArchive]:
    """Return an OCI archive of each image (all, or those named in `only`), building whatever
    is missing or out of date, and only that."""
    cache = cache_dir or default_images_dir()
    names = select_images(only)
    if "testbox" in names:
        # The testbox image's fingerprint covers its busybox binary, which must be there first.
        ensure_packages({"busybox": IMAGE_PACKAGES["busybox"]}, report)
    images = _images(names, binaries, repo)
    archives = [
        ImageArchive(image.reference, archive_path(cache, image.name, image.fingerprint))
        for image in images
    ]
    pending = [
        (image, archive)
        for image, archive in zip(images, archives, strict=True)
        if not archive.archive.is_file()
    ]
    for image, archive in zip(images, archives, strict=True):
        if archive.archive.is_file():
            report(f"image {image.name} {image.reference}: cached ({_size(archive.archive)})")
    if not pending:
        if mounts_under(cache):
            # An interrupted build's, found by a run with nothing to build: still cleaned up.
            with _exclusive(cache, report):
                _unmount_all_under(cache)
        return archives
    # Installed with apt when missing (as root on Debian), else a message saying what to install.
    ensure_packages(IMAGE_PACKAGES, report)
    _require_command("buildah")
    if any(image.recipe == "pause" for image, _ in pending):
        _require_command("gcc")
    started = time.monotonic()
    builder = _Builder(cache, binaries, repo, report)
    with _exclusive(cache, report):
        # Leftovers of an interrupted build: its mounts, its work folders, its containers.
        _unmount_all_under(cache)
        _remove_tree(builder.work)
        builder.buildah("rm", "--all")
        try:
            for index, (image, archive) in enumerate(pending, start=1):
                label = f"[{index}/{len(pending)}] image {image.name}"
                if archive.archive.is_file():
                    # Another process built it while this one waited for the lock.
                    report(f"{label} {image.reference}: cached ({_size(archive.archive)})")
                    continue
                report(f"{label}: building {image.reference}")
                image_started = time.monotonic()
                builder.build(image, label)
                builder.buildah.push_archive(image.reference, archive.archive)
                # Archives of earlier fingerprints are stale for good.
                for stale in stale_archives(archive.archive, image.name):
                    stale.unlink()
                report(
                    f"{label}: done in {_elapsed(time.monotonic() - image_started)}, "
                    f"{_size(archive.archive)} archive"
                )
        finally:
            # A failed build leaves its working containers, and the images the new ones
            # replaced are left untagged: vfs keeps a full copy of the root for each.
            builder.buildah.succeeds("rm", "--all")
            builder.buildah.succeeds("rmi", "--prune")
            _unmount_all_under(cache)
    report(f"images built in {_elapsed(time.monotonic() - started)}")
    return archives


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster.images", description=__doc__)
    parser.add_argument(
        "--only",
        action="append",
        choices=IMAGE_NAMES,
        help="build this image only (repeatable; default: all)",
    )
    parser.add_argument(
        "--kubernetes-version",
        metavar="VERSION",
        help="the scheduler image's Kubernetes minor (1.34) or pinned release (v1.34.4) "
        "(default: the newest)",
    )
    parser.add_argument(
        "--if-real-node",
        action="store_true",
        help="build only on a machine that can run the real node (else say why not, exit 0)",
    )
    options = parser.parse_args(argv)
    reason = real_node_supported() if options.if_real_node else None
    if reason:
        print(f"no images built: {reason}", file=sys.stderr)
        return 0
    try:
        names = select_images(options.only)
        minor = pinned_minor(options.kubernetes_version) if options.kubernetes_version else None
        # Only the scheduler image needs the Go binaries; `make image` must not build them.
        binaries = (
            scheduler_binaries(minor)
            if "scheduler" in names
            else Binaries(bin_dir=default_bin_dir(), overrides=envtest_overrides())
        )
        for image in ensure_images(binaries, only=names):
            print(f"{image.reference} {image.archive}")
    except (RuntimeError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
