"""The Debian packages a real node and the image builds need, installed when missing.

Everything else of the real node is built from Go modules (binaries.py); these come from the
distribution because they are system tools (iptables, runc) or build tools (buildah,
debootstrap) that Debian keeps patched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

Report = Callable[[str], None]

# The command each package provides, by which we tell whether it is installed.
REAL_NODE_PACKAGES: Mapping[str, str] = {
    "runc": "runc",  # the OCI runtime containerd's shim starts containers with
    "iptables": "iptables",  # kube-proxy, kubelet and the network guards (nft backend)
    "nft": "nftables",  # to see and check what kube-proxy and the guards leave in nftables
    "conntrack": "conntrack",  # kube-proxy clears stale UDP entries with it
    "socat": "socat",  # forwards the bridge gateway to the API server's loopback port
}
IMAGE_PACKAGES: Mapping[str, str] = {
    "buildah": "buildah",  # builds images without a daemon
    "debootstrap": "debootstrap",  # the Python base image of the operator image
    "busybox": "busybox-static",  # the test image's shell and httpd
    "gcc": "gcc",  # the pause binary
}


class HostPackageError(RuntimeError):
    pass


def _print_report(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def missing_packages(wanted: Mapping[str, str]) -> list[str]:
    """The packages whose command is not on PATH (busybox-static counts only as a static file)."""
    missing = []
    for command, package in wanted.items():
        found = shutil.which(command)
        if command == "busybox":
            found = found if Path("/bin/busybox").is_file() else None
        if found is None:
            missing.append(package)
    return sorted(set(missing))


def ensure_packages(wanted: Mapping[str, str], report: Report = _print_report) -> None:
    """Install what is missing with apt-get, or say plainly why that cannot be done here."""
    missing = missing_packages(wanted)
    if not missing:
        return
    if os.geteuid() != 0:
        raise HostPackageError(
            f"missing Debian packages {', '.join(missing)}; installing them needs root "
            f"(sudo apt-get install {' '.join(missing)})"
        )
    if shutil.which("apt-get") is None:
        raise HostPackageError(
            f"missing packages {', '.join(missing)} and no apt-get: the real node is set up "
            "for Debian (12) only; install the equivalents by hand"
        )
    report(f"installing Debian packages: {', '.join(missing)}")
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
    ):
        result = subprocess.run(command, env=environment, capture_output=True, text=True)
        if result.returncode != 0:
            raise HostPackageError(
                f"{' '.join(command)} failed (exit {result.returncode}):\n{result.stderr[-2000:]}"
            )
