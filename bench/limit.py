"""B3, the API server's limit: how fast a client that does nothing else creates the pods, and
kubeherd's create rate as a share of it. The bare client (the probe) runs on the same cluster
right before each of kubeherd's B1 runs at --nodes, and the share is taken pair by pair: the
machine's own pace, shared with other work, varies between runs far more than the share does.

Pure: plain data in, plain data out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.stats import median

KUBEHERD = "kubeherd"


def probe_record(pods: int, seconds: float, run: int | None = None) -> dict[str, Any]:
    """One probe: `pods` created in `seconds`; `run`: the kubeherd B1 run it was paired with."""
    record: dict[str, Any] = {"pods": pods, "seconds": seconds, "rate": pods / seconds}
    if run is not None:
        record["run"] = run
    return record


def with_probe(
    limit: Mapping[str, Any], concurrency: int, probe: Mapping[str, Any]
) -> dict[str, Any]:
    """B3's results with one more probe: every probe, and their medians."""
    probes = [*(limit.get("probes") or ()), dict(probe)]
    return {
        "pods": probe["pods"],
        "concurrency": concurrency,
        "seconds": median([p["seconds"] for p in probes]),
        "rate": median([p["rate"] for p in probes]),
        "probes": probes,
    }


def paired_shares(results: Mapping[str, Any], nodes: int) -> list[dict[str, float]]:
    """Per probe paired with a kubeherd run at `nodes`: both rates and kubeherd's share (%)."""
    kubeherd_runs = {
        run["run"]: run
        for run in results.get("rollouts", [])
        if run["controller"] == KUBEHERD and run["nodes"] == nodes
    }
    pairs = []
    for probe in (results.get("limit") or {}).get("probes") or ():
        ours = kubeherd_runs.get(probe.get("run"))
        if ours is None or probe["pods"] != ours["pods"]:
            continue
        rate = ours["pods"] / ours["all_created"]
        pairs.append(
            {
                "run": probe["run"],
                "probe_rate": probe["rate"],
                "kubeherd_rate": rate,
                "percent": 100 * rate / probe["rate"],
            }
        )
    return pairs


def limit_summary(
    results: Mapping[str, Any], nodes: int, kubeherd_rate: float | None
) -> dict[str, Any]:
    """The share as the goal states it: the median over the pairs, with its spread; for
    results without pairs (made before probes were paired), the median kubeherd rate over the
    one probe's."""
    limit = results.get("limit") or {}
    pairs = paired_shares(results, nodes)
    if pairs:
        percents = [pair["percent"] for pair in pairs]
        return {
            "limit_percent": median(percents),
            "limit_percent_spread": [min(percents), max(percents)],
            "limit_pairs": pairs,
        }
    if limit and kubeherd_rate is not None:
        return {"limit_percent": 100 * kubeherd_rate / limit["rate"]}
    return {}


def limit_lines(
    results: Mapping[str, Any], summary: Mapping[str, Any], goal_percent: float
) -> list[str]:
    """B3's section of the markdown."""
    limit = results.get("limit") or {}
    if not limit:
        return []
    probes = limit.get("probes") or [limit]
    rates = [probe["rate"] for probe in probes]
    lines = [
        "",
        "### B3 the API server's limit",
        "",
        f"{limit['pods']} pods created by a client that does nothing else, "
        f"{limit['concurrency']} requests at a time: {limit['seconds']:.1f} s, "
        f"**{limit['rate']:.0f} pods/s**"
        + (
            f" (median of {len(probes)} probes, from {min(rates):.0f} to {max(rates):.0f})."
            if len(probes) > 1
            else "."
        ),
    ]
    if "limit_percent" not in summary:
        return lines
    percent = summary["limit_percent"]
    verdict = f"(goal {goal_percent:.0f} %: {'met' if percent >= goal_percent else 'missed'})"
    pairs = summary.get("limit_pairs") or []
    if not pairs:
        lines.append(
            f"kubeherd's rollout at {summary['nodes']} nodes: "
            f"{summary['kubeherd_rate']:.0f} pods/s, **{percent:.0f} %** of it {verdict}."
        )
        return lines
    low, high = summary["limit_percent_spread"]
    lines += [
        f"Each probe ran right before one of kubeherd's rollouts at {summary['nodes']} nodes; "
        f"kubeherd's create rate as a share of that probe's: median **{percent:.0f} %** "
        f"over {len(pairs)} pairs, from {low:.0f} to {high:.0f} % {verdict}.",
        "",
        "| run | probe | kubeherd | share |",
        "|---:|---:|---:|---:|",
    ]
    for pair in pairs:
        lines.append(
            f"| {pair['run']} | {pair['probe_rate']:.0f} pods/s | "
            f"{pair['kubeherd_rate']:.0f} pods/s | {pair['percent']:.0f} % |"
        )
    return lines
