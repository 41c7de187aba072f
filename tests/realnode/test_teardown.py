"""`make cluster-down` after a real-node cluster leaves the machine as it was: no process,
mount, interface, iptables or nftables rule, cgroup, path or changed sysctl of the node; and
every component exits on SIGTERM, none needs the SIGKILL that `down` falls back to. And when
a run is killed before its `down` (a timeout, a lost session), the next real-node `up` anywhere
on the machine undoes what it left instead of refusing to start.

It runs last among the real-node tests (pytest takes the files in name order): it takes the
session's real-node cluster down.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import pytest

from localcluster.cluster import LocalCluster
from localcluster.realnode import BRIDGE, bridge_exists, machine_snapshot
from tests.helpers import REPO, eventually
from tests.realnode.conftest import RealCluster

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]


def test_cluster_down_leaves_nothing_of_the_real_node_behind(real_cluster: RealCluster) -> None:
    during = machine_snapshot()
    # The node did change the machine, so the comparison below can fail.
    assert during["interfaces"] != real_cluster.machine_before["interfaces"]
    assert during["processes"] != real_cluster.machine_before["processes"]

    stopped = make("cluster-down", real_cluster.cluster.folder)

    assert "did not exit" not in stopped.stderr, stopped.stderr
    assert_machine_as_before(real_cluster.machine_before)


def test_a_real_node_left_by_a_killed_run_is_undone_by_the_next_up(
    real_cluster: RealCluster,
) -> None:
    real_cluster.cluster.down(quiet=True)  # one real node per machine
    before = machine_snapshot()
    abandoned = (REPO / ".cluster" / "pytest-abandoned").resolve()
    after_it = (REPO / ".cluster" / "pytest-after-abandoned").resolve()
    try:
        make("cluster-up", abandoned)
        kill_every_process_of(abandoned)
        assert bridge_exists(), "the killed run left its bridge: the case below"

        started = make("cluster-up", after_it)

        assert f"undoing the real node a stopped run left in {abandoned}" in started.stderr
        assert not (abandoned / "node" / "changes.json").exists()
        stopped = make("cluster-down", after_it)
        assert "did not exit" not in stopped.stderr, stopped.stderr
        assert not bridge_exists(), f"{BRIDGE} outlived both clusters"
        assert_machine_as_before(before)
    finally:
        for folder in (after_it, abandoned):
            LocalCluster(folder).down(quiet=True)


def make(target: str, folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", target],
        cwd=REPO,
        env={**os.environ, "KUBEHERD_CLUSTER_DIR": str(folder), "NODES": "1", "REAL_NODE": "1"},
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )


def kill_every_process_of(folder: Path) -> None:
    """What a lost session does to a cluster: SIGKILL to each of its processes and the shims
    and containers it started, so that nothing of its own `down` runs."""
    killed: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            command = (entry / "cmdline").read_bytes().decode(errors="replace")
            cwd = str((entry / "cwd").readlink())
            if str(folder) in command or cwd.startswith(str(folder)):
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
    assert killed, f"no process of the cluster in {folder}"
    eventually(
        lambda: not LocalCluster(folder).running_components() or None,
        timeout=10,
        what="every process of the killed cluster gone",
    )


def assert_machine_as_before(before: dict[str, object]) -> None:
    after = machine_snapshot()
    for aspect, value in before.items():
        assert after[aspect] == value, f"{aspect} differ after cluster-down"
