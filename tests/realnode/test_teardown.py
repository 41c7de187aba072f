"""`make cluster-down` after a real-node cluster leaves the machine as it was: no process,
mount, interface, iptables or nftables rule, cgroup, path or changed sysctl of the node.

It runs last among the real-node tests (pytest takes the files in name order): it takes the
session's real-node cluster down.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from localcluster.realnode import machine_snapshot
from tests.helpers import REPO
from tests.realnode.conftest import RealCluster

pytestmark = [pytest.mark.cluster, pytest.mark.real_node]


def test_cluster_down_leaves_nothing_of_the_real_node_behind(real_cluster: RealCluster) -> None:
    during = machine_snapshot()
    # The node did change the machine, so the comparison below can fail.
    assert during["interfaces"] != real_cluster.machine_before["interfaces"]
    assert during["processes"] != real_cluster.machine_before["processes"]

    subprocess.run(
        ["make", "--no-print-directory", "cluster-down"],
        cwd=REPO,
        env={**os.environ, "KUBEHERD_CLUSTER_DIR": str(real_cluster.cluster.folder)},
        check=True,
        capture_output=True,
        timeout=300,
    )

    after = machine_snapshot()
    for aspect, before in real_cluster.machine_before.items():
        assert after[aspect] == before, f"{aspect} differ after cluster-down"
