"""`python -m bench`: kubeherd against the native DaemonSet controller on a local control plane
with kwok nodes (`make bench`). It prints its progress, writes the results as JSON and a plot
under bench/results/, and appends a section to docs/benchmarks.md."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.api import ApiError
from bench.harness import Options
from bench.profile import layer_shares
from bench.provenance import REPO, commit
from bench.report import markdown, plot, publish, report, summarize
from bench.scenarios import Bench
from bench.stopping import Stopper, StopSignalError
from bench.workload import pod_template
from kubeherd.kube.limits import WriteLimits
from localcluster.binaries import build_steps, ensure_binaries, versions_key
from localcluster.cluster import DELETE_COLLECTION_WORKERS, KWOK_NODE_GRACE, LocalCluster
from localcluster.stages import KWOK_DEFAULT_POD_WORKERS

ALL = ("B1", "B2", "B3", "B4", "B5", "B6")
# kube-scheduler's own client rate when it is given none: QPS, burst.
SCHEDULER_DEFAULT_CLIENT = (50.0, 100)


def parse(argv: list[str] | None) -> tuple[Options, argparse.Namespace]:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000, help="N for B1-B4 (default 1000)")
    parser.add_argument("--runs", type=int, default=3, help="B1 runs per controller at N")
    parser.add_argument(
        "--growth",
        default="1000,2000,5000",
        help="B5 sizes, comma-separated (default 1000,2000,5000)",
    )
    parser.add_argument("--growth-runs", type=int, default=1, help="B1 runs at the other sizes")
    parser.add_argument("--join", type=int, default=100, help="B2: nodes to add (default 100)")
    parser.add_argument("--daemonsets", type=int, default=10, help="B4: CustomDaemonSets")
    parser.add_argument("--idle", type=float, default=300, help="B4: idle seconds (default 300)")
    parser.add_argument("--probe-concurrency", type=int, default=32, help="B3: requests at once")
    parser.add_argument("--tenant-daemonsets", type=int, default=200, help="B6: CustomDaemonSets")
    parser.add_argument("--tenant-kib", type=int, default=200, help="B6: KiB per template")
    parser.add_argument("--tenant-updates", type=int, default=150, help="B6: updates of one")
    parser.add_argument(
        "--tenant-history", type=int, default=100, help="B6: its revisionHistoryLimit"
    )
    parser.add_argument("--foreign-pods", type=int, default=20000, help="B6: labelled pods")
    parser.add_argument(
        "--only",
        default=",".join(ALL[:5]),
        help="which benchmarks (default B1-B5; B6, one tenant's worst, only when named)",
    )
    parser.add_argument(
        "--operator-arg",
        action="append",
        default=[],
        help="an extra `kubeherd run` flag, e.g. --operator-arg=--qps=100 (repeatable)",
    )
    parser.add_argument(
        "--scheduler-qps",
        type=float,
        help="the local cluster's kube-scheduler client QPS, its burst twice that (default: its "
        "own, QPS 50 and burst 100, about 50 bindings/s; earlier results used those)",
    )
    parser.add_argument(
        "--kwok-pod-workers",
        type=int,
        default=0,
        help=f"how many pods kwok turns Running at once (default: {KWOK_DEFAULT_POD_WORKERS})",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="record kubeherd with py-spy during its first rollout at N nodes",
    )
    parser.add_argument("--dir", type=Path, default=REPO / ".cluster" / "bench")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    parser.add_argument("--docs", type=Path, default=REPO / "docs" / "benchmarks.md")
    parser.add_argument("--no-docs", action="store_true", help="do not append to the docs")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    parser.add_argument(
        "--render",
        type=Path,
        metavar="RESULTS_JSON",
        help="run nothing: render an earlier run's results as markdown again (and append them "
        "to the docs unless --no-docs)",
    )
    arguments = parser.parse_args(argv)
    only = frozenset(part.strip().upper() for part in arguments.only.split(",") if part.strip())
    if unknown := only - set(ALL):
        parser.error(f"unknown benchmarks: {', '.join(sorted(unknown))}")
    options = Options(
        nodes=arguments.nodes,
        runs=arguments.runs,
        growth=tuple(int(size) for size in arguments.growth.split(",") if size.strip()),
        growth_runs=arguments.growth_runs,
        join=arguments.join,
        daemonsets=arguments.daemonsets,
        idle_seconds=arguments.idle,
        probe_concurrency=arguments.probe_concurrency,
        operator_arguments=tuple(arguments.operator_arg),
        only=only,
        tenant_daemonsets=arguments.tenant_daemonsets,
        tenant_kib=arguments.tenant_kib,
        tenant_updates=arguments.tenant_updates,
        tenant_history=arguments.tenant_history,
        foreign_pods=arguments.foreign_pods,
        scheduler_qps=arguments.scheduler_qps,
        kwok_pod_workers=arguments.kwok_pod_workers,
    )
    return options, arguments


def machine() -> str:
    model = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    memory_kib = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal")
    )
    return (
        f"{os.cpu_count()} cores of {model}, {memory_kib / 1024 / 1024:.0f} GiB, "
        f"Linux {platform.release()}, Python {platform.python_version()}"
    )


def _plain(value: Any) -> Any:
    """An option's value as JSON can hold it."""
    if isinstance(value, frozenset):
        return sorted(value)
    if isinstance(value, Path):
        return str(value)
    return value


def meta(options: Options, started: datetime.datetime, kubeherd_commit: str) -> dict[str, Any]:
    limits = WriteLimits()
    return {
        "started": started.strftime("%Y-%m-%d %H:%M UTC"),
        "kubeherd_commit": kubeherd_commit,
        "machine": machine(),
        "versions": versions_key(build_steps()).replace("_", ", ").replace("-v", " v"),
        "operator_arguments": list(options.operator_arguments),
        "kubeherd_settings": f"defaults: --qps={limits.qps:g} --burst={limits.burst} "
        f"--max-concurrent-writes={limits.max_concurrent}",
        "native_settings": "kube-controller-manager defaults: --kube-api-qps=20 "
        "--kube-api-burst=30, --concurrent-daemonset-syncs=2, its own ServiceAccount",
        "workload": "one pause container requesting 10m CPU and 16Mi, tolerating every taint "
        "(as kube-proxy and CNI agents do), so every node is eligible; "
        "kube-scheduler binds the pods and kwok marks them Running",
        "local_cluster": local_cluster_settings(options.scheduler_qps, options.kwok_pod_workers),
        "template": pod_template("<name>"),
        "runs": options.runs,
        "growth_runs": options.growth_runs,
        "options": {key: _plain(value) for key, value in asdict(options).items()},
        "plot": None,
    }


def scheduler_client(qps: float | None) -> tuple[float, int] | None:
    """kube-scheduler's client (QPS, burst) for --scheduler-qps, with its default's ratio."""
    return None if qps is None else (qps, max(1, round(2 * qps)))


def local_cluster_settings(scheduler_qps: float | None, kwok_pod_workers: int) -> dict[str, Any]:
    client = scheduler_client(scheduler_qps)
    qps, burst = client if client is not None else SCHEDULER_DEFAULT_CLIENT
    return {
        "scheduler_qps": qps,
        "scheduler_burst": burst,
        "scheduler_client": "default" if client is None else "--scheduler-qps",
        # kwok's client has no rate limiter: it needs no such option.
        "kwok_client": "unlimited",
        "kwok_pod_workers": kwok_pod_workers or f"default ({KWOK_DEFAULT_POD_WORKERS})",
        "node_monitor_grace_period": KWOK_NODE_GRACE,
        "delete_collection_workers": DELETE_COLLECTION_WORKERS,
    }


async def run(bench: Bench, options: Options, save: Any) -> None:
    sizes = sorted(set(options.growth if "B5" in options.only else ()) | {options.nodes})
    await bench.set_up()
    for size in sizes:
        try:
            if size == options.nodes:
                # Every benchmark at --nodes runs on that many nodes, whichever run first.
                await bench.grow_to(size)
                if options.only & {"B1", "B5"}:
                    await bench.rollouts(size, options.runs)
                    save()
                if "B3" in options.only and not options.only & {"B1", "B5"}:
                    # Else each of kubeherd's runs at --nodes came right after a probe.
                    await bench.limit()
                    save()
                if "B4" in options.only:
                    await bench.cost()
                    save()
                if "B2" in options.only:
                    await bench.grow_to(size)
                    await bench.join()
                    save()
                if "B6" in options.only:
                    await bench.tenant()
                    save()
            else:
                await bench.rollouts(size, options.growth_runs)
                save()
        except (TimeoutError, ApiError) as error:
            if size <= options.nodes:
                raise
            # The largest size is the one a small machine may not hold: keep what was measured.
            report(f"B5 at {size} nodes did not finish: {error}")
            bench.results.rollouts = [r for r in bench.results.rollouts if r["nodes"] != size]
            save()
            break


def main(argv: list[str] | None = None) -> int:
    options, arguments = parse(argv)
    if arguments.render is not None:
        render(arguments)
        return 0
    started = time.monotonic()
    started_at = datetime.datetime.now(datetime.UTC)
    started_from = commit()
    stamp = started_at.strftime("%Y%m%d-%H%M%S")
    arguments.results.mkdir(parents=True, exist_ok=True)
    json_path = arguments.results / f"{stamp}.json"
    if arguments.profile:
        options.profile = arguments.results / f"{stamp}-kubeherd-profile.folded"
    stopper = Stopper()
    stopper.install()
    binaries = ensure_binaries()
    cluster = LocalCluster(
        arguments.dir,
        binaries,
        nodes=min((*options.growth, options.nodes)),
        scheduler_client=scheduler_client(options.scheduler_qps),
        node_monitor_grace=KWOK_NODE_GRACE,
        kwok_pod_workers=options.kwok_pod_workers,
    )
    bench = Bench(options, cluster, binaries, report)

    def save() -> None:
        document = {"meta": meta(options, started_at, started_from), **asdict(bench.results)}
        json_path.write_text(json.dumps(document, indent=1) + "\n")

    try:
        report(f"starting a fresh local cluster in {cluster.folder}")
        cluster.down(quiet=True)
        cluster.up()
        asyncio.run(stopper.run(_run_and_tear_down(bench, options, save)))
    except (StopSignalError, KeyboardInterrupt):
        stopper.cleaning_up()
        _stop_everything(bench, cluster, keep=arguments.keep, quiet=True)
        name = stopper.received.name if stopper.received is not None else "Ctrl-C"
        kept = f", the cluster in {cluster.folder} kept (--keep)" if arguments.keep else ""
        stopped = "kubeherd stopped" if arguments.keep else "kubeherd and the cluster stopped"
        report(f"bench stopped by {name}: {stopped}{kept}")
        return stopper.exit_status if stopper.received is not None else 130
    except BaseException:
        stopper.cleaning_up()
        _stop_everything(bench, cluster, keep=arguments.keep, quiet=False)
        raise
    stopper.cleaning_up()
    _stop_everything(bench, cluster, keep=arguments.keep, quiet=False)
    document = json.loads(json_path.read_text())
    summary = summarize(document, options.nodes)
    has_both = all(
        controller in summary["rollouts"].get(str(options.nodes), {})
        for controller in ("kubeherd", "native")
    )
    if has_both:
        plot_path = arguments.results / f"{stamp}-rollout-{options.nodes}.png"
        plot(document, options.nodes, plot_path)
        document["meta"]["plot"] = os.path.relpath(plot_path, arguments.docs.parent)
    document["summary"] = summary
    json_path.write_text(json.dumps(document, indent=1) + "\n")
    publish(markdown(document, summary), arguments)
    report(f"results in {json_path}; {time.monotonic() - started:.0f}s in all")
    return 0


def _stop_everything(bench: Bench, cluster: LocalCluster, *, keep: bool, quiet: bool) -> None:
    """The operator, whose start may have been under way in a thread when the loop was
    cancelled, and the cluster unless it is kept."""
    try:
        if (operator := getattr(bench, "operator", None)) is not None:
            operator.stop()
    finally:
        if not keep:
            cluster.down(quiet=quiet)


def render(arguments: argparse.Namespace) -> None:
    """The markdown of a results file, with what later versions of the report add to it."""
    document = json.loads(arguments.render.read_text())
    profile = document.get("profile") or {}
    folded = Path(profile.get("folded", ""))
    if profile and "layers" not in profile and folded.is_file():
        profile["layers"] = layer_shares(folded.read_text())
    nodes = int(document["meta"]["options"]["nodes"])
    publish(markdown(document, document.get("summary") or summarize(document, nodes)), arguments)


async def _run_and_tear_down(bench: Bench, options: Options, save: Any) -> None:
    try:
        await run(bench, options, save)
    finally:
        # What was measured before a failure stays in the results (`--render` shows it).
        save()
        await bench.tear_down()


if __name__ == "__main__":
    sys.exit(main())
