"""How long kubeherd takes to list its daemon pods, streamed or a page at a time.

Starts a local control plane with kwok nodes, creates `--pods` daemon pods bound to those nodes
(kwok marks them Running and Ready, so their bodies are as large as real ones), then lists them
with kubeherd's own client and reflector, as the operator does when it starts: as a streaming
list (a watch that starts with every object) and a page at a time, alternately, `--runs` times
each. Reports the seconds to a complete store and the microseconds per pod; the local cluster
is stopped at the end, or at Ctrl-C or SIGTERM.

    make bench-listing LISTING_ARGS="--pods 30000 --runs 3"
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path

from bench.api import Api, Json, wait_for
from bench.harness import bounded
from bench.provenance import REPO
from bench.stopping import Stopper, StopSignalError
from kubeherd.daemonset.core.pods import OWNER_LABEL
from kubeherd.daemonset.shell.watches import DaemonPod
from kubeherd.kube.client import Kube
from kubeherd.kube.limits import WriteLimits
from kubeherd.kube.reflector import Change, Reflector
from localcluster.binaries import ensure_binaries
from localcluster.cluster import LocalCluster
from localcluster.nodes import worker_name

NAMESPACE = "listing"
OWNERS = 30
PROGRESS_EVERY = 5000


def daemon_pod(index: int, nodes: int) -> Json:
    owner = f"agent-{index % OWNERS}"
    node = worker_name(1 + index // OWNERS % nodes)
    return {
        "metadata": {
            "name": f"{owner}-{index:06d}",
            "labels": {OWNER_LABEL: owner, "kubeherd.io/revision": "6d4f8b7c9a"},
        },
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "agent",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                }
            ],
        },
    }


async def create_pods(api: Api, count: int, nodes: int) -> None:
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    created = 0
    started = time.monotonic()

    async def create(index: int) -> None:
        nonlocal created
        await api.create(path, daemon_pod(index, nodes), allow=(409,))
        created += 1
        if created % PROGRESS_EVERY == 0:
            print(f"  {created} pods created in {time.monotonic() - started:.0f} s", flush=True)

    await bounded(64, (create(index) for index in range(count)))


async def any_pod_not_running(api: Api) -> bool:
    answer = await api.get(
        f"/api/v1/namespaces/{NAMESPACE}/pods", fieldSelector="status.phase!=Running", limit="1"
    )
    return bool(answer.get("items"))


async def list_once(streamed: bool) -> tuple[float, int]:
    """Seconds until a fresh reflector's store holds every daemon pod, and how many."""
    kube = Kube.connect(WriteLimits())
    changes = 0

    def counted(_change: Change[DaemonPod]) -> None:
        nonlocal changes
        changes += 1

    reflector: Reflector[DaemonPod] = Reflector(
        kube,
        "/api/v1/pods",
        lambda body: DaemonPod.watched(body, lambda _key: None),
        counted,
        label_selector=OWNER_LABEL,
        what="daemon pods",
    )
    reflector.streams_listings = streamed
    started = time.monotonic()
    task = asyncio.get_running_loop().create_task(reflector.run())
    try:
        await reflector.listed.wait()
        seconds = time.monotonic() - started
        if reflector.streams_listings != streamed:
            raise RuntimeError("the API server refused the streaming list")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await kube.close()
    return seconds, len(reflector.store)


async def measure(cluster: LocalCluster, pods: int, nodes: int, runs: int) -> None:
    ports = cluster.ports()
    assert ports is not None
    api = Api(f"https://127.0.0.1:{ports.apiserver}", cluster.pki)
    try:
        await api.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}}, allow=(409,))

        async def has_service_account() -> bool:
            answer = await api.request(
                "GET", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default", allow=(404,)
            )
            return bool(answer["code"] == 200)

        await wait_for(has_service_account, timeout=60, what="the namespace's ServiceAccount")
        print(f"creating {pods} daemon pods on {nodes} kwok nodes", flush=True)
        await create_pods(api, pods, nodes)

        async def all_running() -> bool:
            return not await any_pod_not_running(api)

        await wait_for(all_running, timeout=max(300, pods / 20), what="every pod Running")
        seconds: dict[bool, list[float]] = {True: [], False: []}
        for run in range(runs):
            for streamed in (True, False):
                taken, listed = await list_once(streamed)
                if listed != pods:
                    raise RuntimeError(f"listed {listed} pods of {pods}")
                seconds[streamed].append(taken)
                how = "streamed" if streamed else "in pages"
                print(f"  run {run + 1}: {how}: {taken:.2f} s", flush=True)
        for streamed in (True, False):
            median = statistics.median(seconds[streamed])
            how = "streaming list" if streamed else "pages of 500"
            print(
                f"{how}: median {median:.2f} s for {pods} pods "
                f"({median / pods * 1e6:.0f} µs per pod), runs {seconds[streamed]}"
            )
    finally:
        await api.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.listing", description=__doc__)
    parser.add_argument("--pods", type=int, default=30000, help="daemon pods (default 30000)")
    parser.add_argument("--nodes", type=int, default=1000, help="kwok nodes (default 1000)")
    parser.add_argument("--runs", type=int, default=3, help="listings of each kind (default 3)")
    parser.add_argument("--dir", type=Path, default=REPO / ".cluster" / "bench-listing")
    arguments = parser.parse_args(argv)
    stopper = Stopper()
    stopper.install()
    cluster = LocalCluster(arguments.dir, ensure_binaries(), nodes=arguments.nodes + 1)
    try:
        print(f"starting a fresh local cluster in {cluster.folder}", flush=True)
        cluster.down(quiet=True)
        cluster.up()
        os.environ["KUBECONFIG"] = str(cluster.kubeconfig)
        asyncio.run(stopper.run(measure(cluster, arguments.pods, arguments.nodes, arguments.runs)))
    except (StopSignalError, KeyboardInterrupt):
        print("stopped: stopping the local cluster", flush=True)
        return stopper.exit_status
    finally:
        stopper.cleaning_up()
        cluster.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
