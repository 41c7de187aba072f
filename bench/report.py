"""Results into words and pictures: the summary figures, a markdown section for
docs/benchmarks.md, and a plot of rollout progress. `summarize` and `markdown` are pure."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.idle import describe
from bench.limit import limit_lines, limit_summary
from bench.stats import growth_exponent, median

KUBEHERD, NATIVE = "kubeherd", "native"
NAMES = {KUBEHERD: "kubeherd", NATIVE: "native DaemonSet"}
# The goals, for tuning: what the summary compares against.
GOALS = {
    # Issue 33's (issue 19 asked 0.2): at 1000 and at 5000 nodes.
    "rollout_ratio": 0.05,
    "join_p99_seconds": 1.0,
    # Issue 33's: at 1000 and at 5000 nodes.
    "limit_percent": 90.0,
    "growth_exponent": 1.05,
    # Issue 33's: 5000 nodes x 30 CustomDaemonSets (150,000 pods) within the chart's 256Mi.
    "peak_rss_mib": 256.0,
    "idle_writes": 0,
    # Issue 33's: after start-up, and per watched daemon pod.
    "start_rss_mib": 60.0,
    "kib_per_pod": 1.0,
    # A restarted operator has had a first pass over every CustomDaemonSet within this.
    "restart_seconds": 30.0,
    # B6: the chart's memory limit (256Mi), whatever one tenant creates.
    "tenant_rss_mib": 256.0,
}


def kib_per_pod(cost: Mapping[str, Any]) -> float:
    """What each watched daemon pod costs in memory: the growth of the peak from start-up to
    the end of the rollout, spread over the pods."""
    growth_mib = float(cost["peak_rss_mib"]) - float(cost["peak_rss_after_start_mib"])
    return 1024 * growth_mib / max(1, int(cost["pods"]))


def _runs(results: Mapping[str, Any], controller: str, nodes: int) -> list[Mapping[str, Any]]:
    return [
        run
        for run in results.get("rollouts", [])
        if run["controller"] == controller and run["nodes"] == nodes
    ]


def median_run(results: Mapping[str, Any], controller: str, nodes: int) -> Mapping[str, Any]:
    """The run whose time to all pods created is the median one (the lower of two middles)."""
    runs = sorted(_runs(results, controller, nodes), key=lambda run: run["all_created"])
    if not runs:
        raise ValueError(f"no {controller} rollout at {nodes} nodes")
    return runs[(len(runs) - 1) // 2]


def summarize(results: Mapping[str, Any], nodes: int) -> dict[str, Any]:
    """Medians per size and controller, and the figures the goals are stated in."""
    sizes = sorted({run["nodes"] for run in results.get("rollouts", [])})
    rollouts: dict[str, dict[str, dict[str, float]]] = {}
    for size in sizes:
        rollouts[str(size)] = {}
        for controller in (KUBEHERD, NATIVE):
            runs = _runs(results, controller, size)
            if runs:
                rollouts[str(size)][controller] = {
                    "runs": len(runs),
                    "all_created": median([run["all_created"] for run in runs]),
                    "all_running": median([run["all_running"] for run in runs]),
                    "pods": runs[0]["pods"],
                }
    summary: dict[str, Any] = {"nodes": nodes, "rollouts": rollouts}
    at_n = rollouts.get(str(nodes), {})
    if KUBEHERD in at_n and NATIVE in at_n:
        ours, theirs = at_n[KUBEHERD], at_n[NATIVE]
        summary["rollout_ratio"] = ours["all_created"] / theirs["all_created"]
        summary["running_ratio"] = ours["all_running"] / theirs["all_running"]
        summary["kubeherd_rate"] = ours["pods"] / ours["all_created"]
    summary.update(limit_summary(results, nodes, summary.get("kubeherd_rate")))
    growth: dict[str, float] = {}
    for controller in (KUBEHERD, NATIVE):
        points = [(int(size), r[controller]) for size, r in rollouts.items() if controller in r]
        if len(points) >= 2:
            growth[controller] = growth_exponent(
                [size for size, _ in points], [r["all_created"] for _, r in points]
            )
    summary["growth_exponent"] = growth
    return summary


def _seconds(value: float) -> str:
    return f"{value:.1f} s"


def _goal(met: bool) -> str:
    return "met" if met else "missed"


def _local_cluster_line(meta: Mapping[str, Any]) -> list[str]:
    """The local cluster's settings that bear on the pace of a large benchmark (results made
    before they were recorded ran kube-scheduler with its default client rate)."""
    cluster = meta.get("local_cluster")
    if not cluster:
        return []
    source = "its default" if cluster["scheduler_client"] == "default" else "--scheduler-qps"
    return [
        f"- Local cluster: kube-scheduler client QPS {cluster['scheduler_qps']:g}, burst "
        f"{cluster['scheduler_burst']} ({source}); kwok's client not rate-limited; "
        f"kube-apiserver --delete-collection-workers={cluster['delete_collection_workers']}"
        + (
            f"; kube-controller-manager --node-monitor-grace-period={grace}"
            if (grace := cluster.get("node_monitor_grace_period"))
            else ""
        )
    ]


def markdown(results: Mapping[str, Any], summary: Mapping[str, Any]) -> str:
    """A section for docs/benchmarks.md: the setting, then one table per benchmark."""
    meta = results["meta"]
    nodes = summary["nodes"]
    lines = [
        f"## {meta['started']} — {meta['kubeherd_commit']}",
        "",
        f"- Machine: {meta['machine']}",
        f"- Versions: {meta['versions']}",
        f"- kubeherd: `{' '.join(['kubeherd run', *meta['operator_arguments']])}`"
        + f" ({meta['kubeherd_settings']})",
        f"- Native controller: {meta['native_settings']}",
        f"- Workload: {meta['workload']}",
        *_local_cluster_line(meta),
        f"- Runs: {meta['runs']} per controller at {nodes} nodes, "
        f"{meta['growth_runs']} at the other sizes; times are medians.",
        "",
    ]
    if summary["rollouts"]:
        lines += [
            "### B1 rollout and B5 growth",
            "",
            "| nodes | controller | runs | all pods created | all pods Running |",
            "|---:|---|---:|---:|---:|",
        ]
    for size, by_controller in summary["rollouts"].items():
        for controller, figures in by_controller.items():
            lines.append(
                f"| {size} | {NAMES[controller]} | {figures['runs']} | "
                f"{_seconds(figures['all_created'])} | {_seconds(figures['all_running'])} |"
            )
    if summary["rollouts"]:
        lines.append("")
    if "rollout_ratio" in summary:
        ratio = summary["rollout_ratio"]
        lines.append(
            f"Ratio kubeherd / native at {nodes} nodes: **{ratio:.2f}** to all pods created "
            f"(goal {GOALS['rollout_ratio']}: {_goal(ratio <= GOALS['rollout_ratio'])}), "
            f"{summary['running_ratio']:.2f} to all Running."
        )
    growth = summary.get("growth_exponent") or {}
    if growth:
        exponents = ", ".join(f"{NAMES[c]} {e:.2f}" for c, e in growth.items())
        verdict = ""
        if KUBEHERD in growth:
            met = growth[KUBEHERD] <= GOALS["growth_exponent"]
            verdict = f" (goal for kubeherd {GOALS['growth_exponent']}: {_goal(met)})"
        lines.append(
            f"Growth of the time to all pods created, as the exponent k in time ∝ nodes^k "
            f"(1 is linear): {exponents}{verdict}."
        )
    join = results.get("join") or {}
    if join:
        lines += [
            "",
            f"### B2 node join: {join['nodes']} nodes added to {join['existing_nodes']}",
            "",
            "| controller | node created → pod created, p50 | p99 | max |",
            "|---|---:|---:|---:|",
        ]
        for controller in (KUBEHERD, NATIVE):
            figures = join[controller]
            lines.append(
                f"| {NAMES[controller]} | {figures['p50'] * 1000:.0f} ms | "
                f"{figures['p99'] * 1000:.0f} ms | {figures['max'] * 1000:.0f} ms |"
            )
        p99 = join[KUBEHERD]["p99"]
        lines.append("")
        lines.append(
            f"kubeherd p99 {p99 * 1000:.0f} ms "
            f"(goal {GOALS['join_p99_seconds'] * 1000:.0f} ms: "
            f"{_goal(p99 <= GOALS['join_p99_seconds'])})."
        )
    lines += limit_lines(results, summary, GOALS["limit_percent"])
    cost = results.get("cost") or {}
    if cost:
        idle = cost["idle_requests"]
        pods = max(1, cost["pods"])
        lines += [
            "",
            f"### B4 cost: {cost['daemonsets']} CustomDaemonSets on {cost['nodes']} nodes "
            f"({cost['pods']} pods)",
            "",
            "| measure | value |",
            "|---|---:|",
            f"| peak RSS (VmHWM) | {cost['peak_rss_mib']:.0f} MiB |",
            f"| peak RSS after start-up, before any CustomDaemonSet "
            f"| {cost['peak_rss_after_start_mib']:.0f} MiB |",
            f"| CPU to start (initial listing) | {cost['cpu_seconds_start']:.1f} s |",
            f"| CPU for the rollout ({_seconds(cost['rollout_seconds'])}) "
            f"| {cost['cpu_seconds_rollout']:.1f} s |",
            f"| CPU while idle ({cost['idle_seconds']:.0f} s) | {cost['cpu_seconds_idle']:.1f} s |",
            f"| memory per daemon pod (peak after the rollout less after start-up, per pod) "
            f"| {kib_per_pod(cost):.1f} KiB |",
            f"| CPU per 1000 pods rolled out | {1000 * cost['cpu_seconds_rollout'] / pods:.2f} s |",
        ]
        rollout_requests = cost["rollout_requests"]
        lines.append(
            f"| requests for the rollout, kubeherd: writes / reads "
            f"| {rollout_requests['writes']} / {rollout_requests['reads']} |"
        )
        for label, name in ((KUBEHERD, "kubeherd"), (NATIVE, "native DaemonSet controller")):
            requests = idle[label]
            lines.append(
                f"| requests while idle, {name}: writes / reads "
                f"| {requests['writes']} / {requests['reads']} |"
            )
        if "idle_writes" in cost:
            lines += [
                f"| idle window began once every status was done and unchanged, after "
                f"| {_seconds(cost['settle_seconds'])}"
                + (
                    f" ({cost['not_ready_pods_at_idle']} pods not Ready, so counted)"
                    if cost.get("not_ready_pods_at_idle")
                    else ""
                )
                + " |",
                f"| kubeherd's writes while idle, by the audit log "
                f"| {describe(cost['idle_writes'])} |",
            ]
        restart = cost.get("restart")
        if restart:
            lines += [
                f"| restarted with every pod in place: first pass over all "
                f"{cost['daemonsets']} | {restart['seconds_to_first_passes']:.1f} s |",
                *(
                    [
                        f"| restarted: /readyz answered (nodes and pods listed) after "
                        f"| {restart['seconds_to_ready']:.1f} s |"
                    ]
                    if "seconds_to_ready" in restart
                    else []
                ),
                f"| restarted: CustomDaemonSets with nothing to do "
                f"| {restart['nothing_to_do']} of {cost['daemonsets']} |",
                f"| restarted: requests in its first passes and 10 s after, writes / reads "
                f"| {restart['requests']['writes']} / {restart['requests']['reads']} |",
                f"| restarted: peak RSS | {restart['peak_rss_mib']:.0f} MiB |",
            ]
        metrics = cost.get("metrics")
        if metrics:
            served = (
                f"{metrics['scrapes']} scrapes, the last {metrics['last_series']} series in "
                f"{metrics['last_bytes'] / 1024:.0f} KiB"
                if metrics["scrapes"]
                else "not served"
            )
            lines.append(f"| /metrics, read every 15 s through the rollout and idle | {served} |")
        if "cleanup_seconds" in cost:
            lines.append(
                f"| cleanup: every pod and CustomDaemonSet deleted | "
                f"{_seconds(cost['cleanup_seconds'])} |"
            )
        rss_met = cost["peak_rss_mib"] <= GOALS["peak_rss_mib"]
        start_met = cost["peak_rss_after_start_mib"] <= GOALS["start_rss_mib"]
        per_pod_met = kib_per_pod(cost) <= GOALS["kib_per_pod"]
        writes_met = idle[KUBEHERD]["writes"] == GOALS["idle_writes"]
        lines += [
            "",
            f"Goals: peak RSS {GOALS['peak_rss_mib']:.0f} MiB or less: {_goal(rss_met)}; "
            f"{GOALS['start_rss_mib']:.0f} MiB or less after start-up: {_goal(start_met)}; "
            f"{GOALS['kib_per_pod']:.1f} KiB or less per pod: {_goal(per_pod_met)}; "
            f"no writes while idle: {_goal(writes_met)}"
            + (
                f"; every first pass within {GOALS['restart_seconds']:.0f} s of a restart: "
                f"{_goal(restart['seconds_to_first_passes'] <= GOALS['restart_seconds'])}."
                if restart
                else "."
            ),
        ]
    lines += _tenant_lines(results.get("tenant") or {})
    profile = results.get("profile") or {}
    if profile:
        lines += [
            "",
            f"### Where kubeherd's CPU goes (py-spy, {profile['samples']} samples, rollout to "
            f"{profile['nodes']} nodes)",
            "",
            "| share of the samples | spent in |",
            "|---:|---|",
            *(f"| {share:.1f} % | {layer} |" for share, layer in profile.get("layers", ())),
            "",
            "| share, callees included | function |",
            "|---:|---|",
            *(f"| {share:.1f} % | `{function}` |" for share, function in profile["top"][:15]),
        ]
    if meta.get("plot"):
        lines += ["", f"![Rollout progress at {nodes} nodes]({meta['plot']})"]
    return "\n".join(lines) + "\n"


def _tenant_lines(tenant: Mapping[str, Any]) -> list[str]:
    if not tenant:
        return []
    restart = tenant["restart"]
    peak = max(
        tenant["peak_rss_updates_mib"], tenant["peak_rss_daemonsets_mib"], restart["peak_rss_mib"]
    )
    return [
        "",
        "### B6 one tenant's worst",
        "",
        f"{tenant['foreign_pods']} pods carrying `kubeherd.io/customdaemonset` in a namespace "
        f"without CustomDaemonSets; {tenant['daemonsets'] - 1} CustomDaemonSets with "
        f"{tenant['template_kib']} KiB templates matching no node; one more updated "
        f"{tenant['updates']} times at revisionHistoryLimit {tenant['history_limit']} "
        f"({tenant['revisions_kept']} ControllerRevisions left).",
        "",
        "| kubeherd's peak RSS (VmHWM) | value |",
        "|---|---:|",
        f"| after start-up | {tenant['peak_rss_after_start_mib']:.0f} MiB |",
        f"| with the foreign pods | {tenant['peak_rss_foreign_mib']:.0f} MiB |",
        f"| and the CustomDaemonSets | {tenant['peak_rss_daemonsets_mib']:.0f} MiB |",
        f"| and the updates | {tenant['peak_rss_updates_mib']:.0f} MiB |",
        f"| restarted with all of it in place "
        f"(first passes in {restart['seconds_to_first_passes']:.1f} s) "
        f"| {restart['peak_rss_mib']:.0f} MiB |",
        "",
        f"Goal: {GOALS['tenant_rss_mib']:.0f} MiB or less (the chart's limit): "
        f"{_goal(peak <= GOALS['tenant_rss_mib'])}.",
    ]


def plot(results: Mapping[str, Any], nodes: int, path: Path) -> None:
    """Pods created (solid) and Running (dashed) against seconds, for the median run of each
    controller at `nodes` nodes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4.5), dpi=110)
    for controller, colour in ((KUBEHERD, "tab:blue"), (NATIVE, "tab:orange")):
        run = median_run(results, controller, nodes)
        for key, style, what in (("created_at", "-", "created"), ("running_at", "--", "Running")):
            times = [0.0, *run[key]]
            counts = list(range(len(times)))
            axes.step(
                times,
                counts,
                where="post",
                linestyle=style,
                color=colour,
                label=f"{NAMES[controller]}: pods {what}",
            )
    axes.set_xlabel("seconds since the DaemonSet was created")
    axes.set_ylabel("pods")
    axes.set_title(f"Rollout to {nodes} nodes (median run of each)")
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)


def report(message: str) -> None:
    """Progress, as it happens (the benchmarks run for minutes)."""
    print(message, flush=True)


def publish(section: str, arguments: argparse.Namespace) -> None:
    """Print a results section and, unless --no-docs, append it to the docs page."""
    print("\n" + section)
    if not arguments.no_docs:
        with arguments.docs.open("a") as docs:
            docs.write("\n" + section)
        report(f"appended to {arguments.docs}")
