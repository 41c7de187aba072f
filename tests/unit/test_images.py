"""The image builder's pure parts: fingerprints, names, host inspection. No buildah runs here."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from kubeherd.scheduler.core.images import scheduler_image as rendered_scheduler_image
from localcluster.binaries import (
    kubernetes_minors,
    kubernetes_module_dir,
    kubernetes_version,
    kubernetes_version_ldflags,
    required_version,
)
from localcluster.images import (
    DEFAULT_DEBIAN_MIRROR,
    IMAGE_NAMES,
    OPERATOR_IMAGE,
    PAUSE_IMAGE,
    TESTBOX_APPLETS,
    TESTBOX_IMAGE,
    ImageBuildError,
    archive_path,
    debian_mirror,
    fingerprint,
    fingerprint_operator,
    fingerprint_pause,
    fingerprint_python_base,
    fingerprint_scheduler,
    fingerprint_testbox,
    is_static_elf,
    operator_inputs,
    prepare_python_base,
    scheduler_archive_name,
    scheduler_image,
    select_images,
    stale_archives,
)
from localcluster.mounts import mounts_under

BASE = "0123456789abcdef"


def make_repo(root: Path) -> Path:
    """The files of a checkout that the operator image is built from, and some that it is not."""
    for name, content in {
        "Dockerfile": "FROM ${PYTHON_IMAGE}\n",
        ".dockerignore": "**/__pycache__\n",
        "pyproject.toml": "[project]\nname = 'kubeherd'\n",
        "uv.lock": "version = 1\n",
        "README.md": "# kubeherd\n",
        "operator/kubeherd/__init__.py": "",
        "operator/kubeherd/cli.py": "def main() -> None: ...\n",
        "tests/unit/test_something.py": "",
        "docs/reference.md": "",
    }.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return root


def test_the_scheduler_image_is_what_a_scheduler_profile_renders_on_this_cluster() -> None:
    version = required_version(kubernetes_module_dir(), "k8s.io/kubernetes")
    # The built API server reports the pinned version as its gitVersion, which the operator
    # reads from /version and renders the default image with.
    assert f"-X k8s.io/component-base/version.gitVersion={version}" in kubernetes_version_ldflags(
        version
    )

    assert scheduler_image() == rendered_scheduler_image({}, version)
    assert scheduler_image() == f"registry.k8s.io/kube-scheduler:{version}"


@pytest.mark.parametrize("minor", kubernetes_minors())
def test_each_minors_scheduler_image_is_what_a_profile_renders_on_a_cluster_of_it(
    minor: str,
) -> None:
    version = kubernetes_version(minor)

    assert scheduler_image(minor) == rendered_scheduler_image({}, version)
    assert scheduler_image(minor).startswith(f"registry.k8s.io/kube-scheduler:v{minor}.")


def test_each_minors_scheduler_image_has_an_archive_of_its_own(tmp_path: Path) -> None:
    names = {scheduler_archive_name(minor) for minor in kubernetes_minors()}
    assert len(names) == len(kubernetes_minors())
    old_134 = archive_path(tmp_path, "scheduler-1.34", "0123456789abcdef")
    new_134 = archive_path(tmp_path, "scheduler-1.34", "fedcba9876543210")
    other_minor = archive_path(tmp_path, "scheduler-1.37", "0123456789abcdef")
    plugin_image = archive_path(tmp_path, "scheduler-1.34-plugin", "0123456789abcdef")
    for archive in (old_134, new_134, other_minor, plugin_image):
        archive.parent.mkdir(parents=True, exist_ok=True)
        archive.write_text("")

    assert stale_archives(new_134, "scheduler-1.34") == [old_134]
    assert stale_archives(other_minor, "scheduler-1.37") == []


def test_the_local_images_have_distinct_names_no_registry_serves() -> None:
    names = [PAUSE_IMAGE, TESTBOX_IMAGE, OPERATOR_IMAGE]

    assert len(set(names)) == 3
    assert all(name.startswith("localhost/kubeherd/") for name in names)


def test_the_operator_fingerprint_follows_the_build_context_content_only(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo")
    before = fingerprint_operator(repo, BASE)

    (repo / "tests/unit/test_something.py").write_text("changed\n")
    (repo / "docs/reference.md").write_text("changed\n")
    (repo / "operator/kubeherd/__pycache__").mkdir()
    (repo / "operator/kubeherd/__pycache__/cli.cpython-311.pyc").write_bytes(b"\0")
    # Content, not timestamps: a rewrite with the same bytes keeps the image.
    (repo / "operator/kubeherd/cli.py").write_text("def main() -> None: ...\n")
    assert fingerprint_operator(repo, BASE) == before

    (repo / "operator/kubeherd/cli.py").write_text("def main() -> None: pass\n")
    changed = fingerprint_operator(repo, BASE)
    assert changed != before

    (repo / "operator/kubeherd/cli.py").write_text("def main() -> None: ...\n")
    assert fingerprint_operator(repo, BASE) == before


@pytest.mark.parametrize(
    "name", ["Dockerfile", ".dockerignore", "pyproject.toml", "uv.lock", "README.md"]
)
def test_every_file_the_dockerfile_reads_changes_the_operator_fingerprint(
    tmp_path: Path, name: str
) -> None:
    repo = make_repo(tmp_path)
    before = fingerprint_operator(repo, BASE)

    with (repo / name).open("a") as stream:
        stream.write("\n# edited\n")

    assert fingerprint_operator(repo, BASE) != before


def test_a_new_module_or_a_new_base_changes_the_operator_fingerprint(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    before = fingerprint_operator(repo, BASE)

    assert fingerprint_operator(repo, "fedcba9876543210") != before
    (repo / "operator/kubeherd/new.py").write_text("")
    assert fingerprint_operator(repo, BASE) != before


def test_the_operator_inputs_are_keyed_by_repository_path(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "one")
    inputs = operator_inputs(repo)

    assert sorted(inputs) == [
        ".dockerignore",
        "Dockerfile",
        "README.md",
        "operator/kubeherd/__init__.py",
        "operator/kubeherd/cli.py",
        "pyproject.toml",
        "uv.lock",
    ]
    # Another checkout of the same content builds the same image.
    copy = tmp_path / "two"
    shutil.copytree(repo, copy)
    assert fingerprint_operator(copy, BASE) == fingerprint_operator(repo, BASE)


def test_pause_and_testbox_fingerprints_follow_their_input_files(tmp_path: Path) -> None:
    source = tmp_path / "pause.c"
    source.write_text("int main(void) { return 0; }\n")
    busybox = tmp_path / "busybox"
    busybox.write_bytes(b"\x7fELF one")
    pause_before, testbox_before = fingerprint_pause(source), fingerprint_testbox(busybox)

    assert fingerprint_pause(source) == pause_before
    source.write_text("int main(void) { return 1; }\n")
    busybox.write_bytes(b"\x7fELF two")

    assert fingerprint_pause(source) != pause_before
    assert fingerprint_testbox(busybox) != testbox_before
    # Different recipes over the same bytes are different images.
    assert fingerprint_pause(busybox) != fingerprint_testbox(busybox)


def test_the_scheduler_fingerprint_follows_the_binary_and_the_name(tmp_path: Path) -> None:
    binary = tmp_path / "kube-scheduler"
    binary.write_bytes(b"v1")
    before = fingerprint_scheduler(binary, "registry.k8s.io/kube-scheduler:v1.37.2")

    assert fingerprint_scheduler(binary, "registry.k8s.io/kube-scheduler:v1.37.3") != before
    binary.write_bytes(b"v2")
    assert fingerprint_scheduler(binary, "registry.k8s.io/kube-scheduler:v1.37.2") != before


def test_the_python_base_fingerprint_follows_mirror_and_certificates(tmp_path: Path) -> None:
    bundle = tmp_path / "ca-certificates.crt"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    before = fingerprint_python_base("http://deb.debian.org/debian", bundle)

    assert fingerprint_python_base("http://deb.debian.org/debian", bundle) == before
    assert fingerprint_python_base("http://mirror.example/debian", bundle) != before
    bundle.write_text("-----BEGIN CERTIFICATE-----\nanother\n")
    assert fingerprint_python_base("http://deb.debian.org/debian", bundle) != before


def test_a_missing_input_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ImageBuildError, match=r"missing input .*absent"):
        fingerprint(("recipe",), {"absent": tmp_path / "absent"})


def test_archives_are_named_after_image_and_fingerprint(tmp_path: Path) -> None:
    assert archive_path(tmp_path, "pause", BASE) == tmp_path / "archives" / f"pause-{BASE}.tar"


def test_images_are_selected_in_build_order() -> None:
    assert select_images(None) == list(IMAGE_NAMES)
    assert select_images(["operator", "pause"]) == ["pause", "operator"]
    with pytest.raises(ImageBuildError, match="unknown image kubelet"):
        select_images(["kubelet"])


def test_the_testbox_links_what_test_pods_run() -> None:
    for applet in ("sh", "httpd", "sleep", "wget", "nc", "grep", "kill", "test", "env"):
        assert applet in TESTBOX_APPLETS
    assert len(set(TESTBOX_APPLETS)) == len(TESTBOX_APPLETS)


def test_the_mirror_comes_from_apt_sources_of_both_formats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBEHERD_DEBIAN_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d/cloud-sdk.list").write_text(
        "deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main\n"
    )
    (tmp_path / "sources.list.d/debian.sources").write_text(
        "Types: deb\n# a comment\nURIs: http://mirror.example/debian/\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n\n"
        "Types: deb\nURIs: http://mirror.example/debian-security\n"
        "Suites: bookworm-security\nComponents: main\n"
    )
    assert debian_mirror(tmp_path) == "http://mirror.example/debian"

    (tmp_path / "sources.list").write_text(
        "# deb http://commented.example/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://one-line.example/debian bookworm main\n"
    )
    assert debian_mirror(tmp_path) == "http://one-line.example/debian"

    monkeypatch.setenv("KUBEHERD_DEBIAN_MIRROR", "http://explicit.example/debian")
    assert debian_mirror(tmp_path) == "http://explicit.example/debian"
    monkeypatch.delenv("KUBEHERD_DEBIAN_MIRROR")
    assert debian_mirror(tmp_path / "nothing") == DEFAULT_DEBIAN_MIRROR


def elf64(*program_header_types: int) -> bytes:
    """A little-endian ELF64 header and program headers of the given types, nothing else."""
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", header, 0x20, 64)
    struct.pack_into("<HH", header, 0x36, 56, len(program_header_types))
    tables = b"".join(struct.pack("<I", kind) + bytes(52) for kind in program_header_types)
    return bytes(header) + tables


def test_only_an_elf_without_an_interpreter_counts_as_static(tmp_path: Path) -> None:
    pt_load, pt_interp, pt_dynamic = 1, 3, 2
    static, dynamic, script = tmp_path / "static", tmp_path / "dynamic", tmp_path / "script"
    static.write_bytes(elf64(pt_load, pt_load))
    dynamic.write_bytes(elf64(pt_load, pt_interp, pt_dynamic))
    script.write_text("#!/bin/sh\nexit 0\n" + " " * 64)

    assert is_static_elf(static)
    assert not is_static_elf(dynamic)
    assert not is_static_elf(script)


def test_mounts_under_a_folder_come_deepest_first() -> None:
    mounts = (
        "proc /proc proc rw 0 0\n"
        "proc /cache/images/work/root/proc proc rw 0 0\n"
        "udev /cache/images/work/root/dev/pts devpts rw 0 0\n"
        "udev /cache/images/work/root/dev devtmpfs rw 0 0\n"
        "tmpfs /cache/images2 tmpfs rw 0 0\n"
        "tmpfs /cache/images/with\\040space tmpfs rw 0 0\n"
    )

    found = mounts_under(Path("/cache/images"), mounts)

    assert found[0] == "/cache/images/work/root/dev/pts"
    assert sorted(found) == [
        "/cache/images/with space",
        "/cache/images/work/root/dev",
        "/cache/images/work/root/dev/pts",
        "/cache/images/work/root/proc",
    ]


def test_the_python_base_gets_what_the_dockerfile_expects(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    for relative in (
        "usr/lib/python3.11/EXTERNALLY-MANAGED",
        "var/cache/apt/archives/python3_3.11.deb",
        "var/cache/apt/pkgcache.bin",
        "var/lib/apt/lists/deb.debian.org_debian_dists_bookworm_InRelease",
        "etc/ssl/certs/ca-certificates.crt",
        "usr/bin/python3",
    ):
        (rootfs / relative).parent.mkdir(parents=True, exist_ok=True)
        (rootfs / relative).write_text("debian\n")
    (rootfs / "dev").mkdir()
    bundle = tmp_path / "host-bundle.crt"
    bundle.write_text("host certificates\n")

    prepare_python_base(rootfs, bundle)

    assert not (rootfs / "usr/lib/python3.11/EXTERNALLY-MANAGED").exists()
    assert list((rootfs / "var/cache/apt").iterdir()) == []
    assert list((rootfs / "var/lib/apt/lists").iterdir()) == []
    assert (rootfs / "etc/ssl/certs/ca-certificates.crt").read_text() == "host certificates\n"
    assert (rootfs / "usr/local/bin/python").readlink() == Path("/usr/bin/python3")
