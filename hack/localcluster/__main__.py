"""`python -m localcluster build|test-tools|monitoring-tools|up|down|status`: the commands behind
the Makefile targets."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from localcluster.binaries import (
    ALL_BINARIES,
    Binaries,
    ensure_binaries,
    ensure_monitoring_binaries,
    ensure_test_binaries,
    pinned_minor,
)
from localcluster.cluster import ClusterError, LocalCluster
from localcluster.images import PAUSE_IMAGE, ensure_images
from localcluster.realnode import RealNodeError, real_node_supported

DEFAULT_FOLDER = Path(__file__).resolve().parent.parent.parent / ".cluster"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster", description=__doc__)
    parser.add_argument(
        "command",
        choices=("build", "test-tools", "monitoring-tools", "up", "down", "status"),
        help="build: build or find the binaries; test-tools: every binary the tests run; "
        "monitoring-tools: prometheus and promtool; up: start (idempotent); down: stop; "
        "status: what runs",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path(os.environ.get("KUBEHERD_CLUSTER_DIR", DEFAULT_FOLDER)),
        help="the cluster's folder (default: .cluster, or $KUBEHERD_CLUSTER_DIR)",
    )
    parser.add_argument(
        "--nodes",
        type=int,
        default=int(os.environ.get("NODES", "3")),
        help="fake nodes, the first a tainted control-plane node (default: $NODES or 3)",
    )
    parser.add_argument(
        "--real-node",
        action=argparse.BooleanOptionalAction,
        default=os.environ.get("REAL_NODE", "") not in ("", "0"),
        help="add a real node (kubelet, containerd, kube-proxy; needs root) with the images "
        "built here (default: $REAL_NODE)",
    )
    parser.add_argument(
        "--kubernetes-version",
        metavar="VERSION",
        help="the control plane's Kubernetes minor (1.34) or pinned release (v1.34.4), one of "
        "those pinned under hack/k8s (default: the newest)",
    )
    options = parser.parse_args(argv)

    try:
        minor = pinned_minor(options.kubernetes_version) if options.kubernetes_version else None
        if options.command == "build":
            started = time.monotonic()
            binaries = ensure_binaries(minor=minor, real_node=options.real_node)
            for name in ALL_BINARIES:
                print(f"{name:<24} {binaries.path(name)}")
            print(f"binaries ready in {time.monotonic() - started:.1f}s", file=sys.stderr)
            return 0
        if options.command == "test-tools":
            started = time.monotonic()
            for name, path in ensure_test_binaries().items():
                print(f"{name:<32} {path}")
            print(f"test binaries ready in {time.monotonic() - started:.1f}s", file=sys.stderr)
            return 0
        if options.command == "monitoring-tools":
            for name, path in ensure_monitoring_binaries().items():
                print(f"{name:<24} {path}")
            return 0
        if options.command == "down":
            # Stopping needs no binaries: it works even after the cache was removed.
            LocalCluster(options.dir).down()
            return 0
        if options.command == "up":
            binaries = ensure_binaries(minor=minor, real_node=options.real_node)
            if options.real_node:
                cluster = real_node_cluster(options.dir, binaries, nodes=options.nodes)
            else:
                cluster = LocalCluster(options.dir, binaries, nodes=options.nodes)
            cluster.up()
            return 0
        # Like stopping, looking needs no binaries.
        cluster = LocalCluster(options.dir)
        running = cluster.running_components()
        for component, pid in running.items():
            print(f"{component:<24} pid {pid}")
        if not running:
            print("no cluster running")
        return 0 if cluster.is_up() else 1
    except (ClusterError, RuntimeError, TimeoutError) as error:
        # RuntimeError covers RealNodeError, HostPackageError and ImageBuildError.
        print(f"error: {error}", file=sys.stderr)
        return 1


def real_node_cluster(folder: Path, binaries: Binaries, *, nodes: int) -> LocalCluster:
    """A cluster with the real node, its images built (or found in the cache) first."""
    reason = real_node_supported()
    if reason:
        raise RealNodeError(f"REAL_NODE=1: {reason}")
    archives = tuple(image.archive for image in ensure_images(binaries))
    return LocalCluster(
        folder,
        binaries,
        nodes=nodes,
        real_node=True,
        image_archives=archives,
        pause_image=PAUSE_IMAGE,
    )


if __name__ == "__main__":
    sys.exit(main())
