"""Mounts under a folder, and taking them all off: shared by the image builds (buildah and
debootstrap mount inside their roots) and the real node (kubelet, containers, network
namespaces). Nothing may stay mounted: a later `rm -rf` of the folder would descend into it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path


def _unescape_mount_path(field: str) -> str:
    # /proc/self/mounts writes space, tab, newline and backslash as octal escapes.
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


def mounts_under(folder: Path, mounts_text: str | None = None) -> list[str]:
    """Mount points at or below `folder`, deepest first (the order to unmount them in)."""
    if mounts_text is None:
        mounts_text = Path("/proc/self/mounts").read_text()
    prefix = str(folder.resolve())
    found = []
    for line in mounts_text.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        target = _unescape_mount_path(fields[1])
        if target == prefix or target.startswith(prefix + "/"):
            found.append(target)
    # A path mounted over twice is listed twice: each umount takes off the topmost one.
    return sorted(found, key=lambda target: target.count("/"), reverse=True)


def unmount_all_under(folder: Path) -> list[str]:
    """Take off every mount under `folder`; what could not be taken off (usually nothing)."""
    # A few rounds: a failed umount of a parent may succeed once its children are gone.
    for _ in range(5):
        targets = mounts_under(folder)
        if not targets:
            return []
        for target in targets:
            if subprocess.run(["umount", target], capture_output=True).returncode != 0:
                # Busy (a process still inside): detach it now, the kernel frees it when idle.
                subprocess.run(["umount", "--lazy", target], capture_output=True)
    return mounts_under(folder)
