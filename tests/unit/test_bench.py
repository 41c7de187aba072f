"""The benchmarks' pure parts: statistics, per-client request counts, the report."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import pytest

from bench.__main__ import run as run_benchmarks
from bench.clients import (
    NATIVE_DAEMONSET,
    WRITE_VERBS,
    dispatched_by_schema,
    flow_schemas,
    kubeherd_client,
    requests_between,
)
from bench.harness import Options
from bench.limit import probe_record, with_probe
from bench.profile import (
    IDLE_LAYER,
    KOPF_LAYER,
    KUBEHERD_LAYER,
    NETWORK_LAYER,
    folded_summary,
    layer_shares,
)
from bench.report import markdown, median_run, plot, summarize
from bench.stats import delays, growth_exponent, median, percentile, rollout
from bench.workload import custom_daemonset, native_daemonset, pinned_pod
from kubeherd.daemonset.core.pods import target_node


def test_percentile_is_a_measured_value_by_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile([3.0, 1.0, 2.0], 0.99) == 3.0
    with pytest.raises(ValueError, match="no values"):
        percentile([], 0.5)


def test_median_of_odd_and_even_counts() -> None:
    assert median([5.0, 1.0, 3.0]) == 3.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5


def test_a_rollout_is_measured_from_its_start_and_must_have_finished() -> None:
    result = rollout(100.0, [101.0, 100.5, 102.0], [103.0, 101.5, 104.0])
    assert result.pods == 3
    assert result.all_created == 2.0
    assert result.all_running == 4.0
    assert result.created_at == (0.5, 1.0, 2.0)
    assert result.create_rate == 1.5
    with pytest.raises(ValueError, match="never seen Running"):
        rollout(0.0, [1.0, 2.0], [3.0, None])


def test_delays_pair_up_keys_present_on_both_sides() -> None:
    assert delays({"a": 1.0, "b": 2.0, "c": 3.0}, {"a": 1.5, "b": 4.0}) == [0.5, 2.0]


def test_growth_exponent_tells_linear_from_quadratic() -> None:
    assert growth_exponent([100, 1000, 5000], [1.0, 10.0, 50.0]) == pytest.approx(1.0)
    assert growth_exponent([100, 1000], [1.0, 100.0]) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="differ"):
        growth_exponent([100, 100], [1.0, 2.0])


DISPATCHED = "apiserver_flowcontrol_dispatched_requests_total"
METRICS = "\n".join(
    [
        f"# TYPE {DISPATCHED} counter",
        f'{DISPATCHED}{{flow_schema="bench-kubeherd-reads",priority_level="workload-low"}} 120',
        f'{DISPATCHED}{{flow_schema="bench-kubeherd-writes",priority_level="workload-low"}} 1007',
        f'{DISPATCHED}{{flow_schema="global-default",priority_level="global-default"}} 3',
        'apiserver_flowcontrol_current_inqueue_requests{flow_schema="bench-kubeherd-writes"} 9',
        'apiserver_request_total{code="201",verb="POST"} 5000',
    ]
)


def test_dispatched_requests_are_read_per_flow_schema() -> None:
    assert dispatched_by_schema(METRICS) == {
        "bench-kubeherd-reads": 120.0,
        "bench-kubeherd-writes": 1007.0,
        "global-default": 3.0,
    }


def test_requests_between_two_scrapes_count_one_clients_growth() -> None:
    client = kubeherd_client("kubeherd-system", "kubeherd")
    before = {"bench-kubeherd-writes": 1007.0, "bench-kubeherd-reads": 120.0}
    after = {"bench-kubeherd-writes": 1007.0, "bench-kubeherd-reads": 124.0}
    counted = requests_between(client, before, after)
    assert (counted.writes, counted.reads) == (0, 4)
    # A client never seen has made no requests, not an error.
    assert requests_between(NATIVE_DAEMONSET, before, after).writes == 0


def test_flow_schemas_match_writes_first_and_keep_the_clients_priority_level() -> None:
    writes, reads = flow_schemas(kubeherd_client("kubeherd-system", "kubeherd"), 10)
    assert writes["spec"]["matchingPrecedence"] < reads["spec"]["matchingPrecedence"]
    assert writes["spec"]["rules"][0]["resourceRules"][0]["verbs"] == list(WRITE_VERBS)
    assert reads["spec"]["rules"][0]["resourceRules"][0]["verbs"] == ["*"]
    for schema in (writes, reads):
        assert schema["spec"]["priorityLevelConfiguration"] == {"name": "workload-low"}
        subject = schema["spec"]["rules"][0]["subjects"][0]["serviceAccount"]
        assert subject == {"name": "kubeherd", "namespace": "kubeherd-system"}


def test_both_controllers_get_the_same_pod_template() -> None:
    ours, native = custom_daemonset("w"), native_daemonset("w")
    assert ours["spec"] == native["spec"]
    assert (ours["kind"], native["kind"]) == ("CustomDaemonSet", "DaemonSet")
    pod = pinned_pod("w", "worker-7")
    assert target_node(pod) == "worker-7"
    assert pod["spec"]["containers"] == ours["spec"]["template"]["spec"]["containers"]


def run(controller: str, nodes: int, number: int, created: float, running: float) -> dict[str, Any]:
    steps = [created * (i + 1) / nodes for i in range(nodes)]
    return {
        "controller": controller,
        "nodes": nodes,
        "run": number,
        "pods": nodes,
        "all_created": created,
        "all_running": running,
        "created_at": steps,
        "running_at": [min(running, t + running - created) for t in steps],
    }


def probes() -> dict[str, Any]:
    """B3's probes, one before each kubeherd run at 10 nodes: 10, 5 and 4 pods/s, while
    kubeherd's runs made 5, 2.5 and 3.3 pods/s."""
    limit: dict[str, Any] = {}
    for number, seconds in ((1, 1.0), (2, 2.0), (3, 2.5)):
        limit = with_probe(limit, 32, probe_record(10, seconds, number))
    return limit


def results() -> dict[str, Any]:
    return {
        "meta": {
            "started": "2026-11-23 10:00 UTC",
            "kubeherd_commit": "abc1234",
            "machine": "2 cores",
            "versions": "kubernetes v1.37.2",
            "operator_arguments": [],
            "kubeherd_settings": "defaults",
            "native_settings": "defaults",
            "workload": "pause",
            "runs": 3,
            "growth_runs": 1,
            "plot": "results/x.png",
        },
        "rollouts": [
            run("kubeherd", 10, 1, 2.0, 3.0),
            run("kubeherd", 10, 2, 4.0, 5.0),
            run("kubeherd", 10, 3, 3.0, 4.0),
            run("native", 10, 1, 10.0, 10.0),
            run("native", 10, 2, 8.0, 8.0),
            run("native", 10, 3, 9.0, 9.0),
            run("kubeherd", 100, 1, 30.0, 31.0),
            run("native", 100, 1, 90.0, 90.0),
        ],
        "join": {
            "nodes": 5,
            "existing_nodes": 10,
            "kubeherd": {"p50": 0.2, "p99": 0.4, "max": 0.4, "delays": []},
            "native": {"p50": 0.8, "p99": 1.5, "max": 1.5, "delays": []},
        },
        "limit": probes(),
        "cost": {
            "daemonsets": 10,
            "nodes": 10,
            "pods": 100,
            "rollout_seconds": 12.0,
            "peak_rss_mib": 300.0,
            "peak_rss_after_start_mib": 100.0,
            "cpu_seconds_start": 1.0,
            "cpu_seconds_rollout": 5.0,
            "cpu_seconds_idle": 0.2,
            "idle_seconds": 300.0,
            "idle_requests": {
                "kubeherd": {"writes": 0, "reads": 2},
                "native": {"writes": 0, "reads": 0},
            },
            "rollout_requests": {"writes": 120, "reads": 3},
            "restart": {
                "seconds_to_first_passes": 12.5,
                "nothing_to_do": 10,
                "requests": {"writes": 10, "reads": 14},
                "peak_rss_mib": 150.0,
                "cpu_seconds": 4.0,
            },
            "metrics": {"scrapes": 20, "failed": 0, "last_bytes": 40960, "last_series": 300},
        },
    }


def test_the_summary_takes_medians_and_states_the_goals_figures() -> None:
    summary = summarize(results(), 10)
    assert summary["rollouts"]["10"]["kubeherd"]["all_created"] == 3.0
    assert summary["rollouts"]["10"]["native"]["all_created"] == 9.0
    assert summary["rollout_ratio"] == pytest.approx(3.0 / 9.0)
    assert summary["kubeherd_rate"] == pytest.approx(10 / 3.0)
    # Pair by pair: 50 %, 50 %, 83 %; the medians' ratio would say 67 %.
    assert summary["limit_percent"] == pytest.approx(50.0)
    assert summary["limit_percent_spread"] == pytest.approx([50.0, 100 * (10 / 3.0) / 4.0])
    assert [pair["run"] for pair in summary["limit_pairs"]] == [1, 2, 3]
    # 10 -> 100 nodes: 3 s -> 30 s is linear, 9 s -> 90 s too.
    assert summary["growth_exponent"]["kubeherd"] == pytest.approx(1.0)
    assert summary["growth_exponent"]["native"] == pytest.approx(1.0)
    assert median_run(results(), "kubeherd", 10)["run"] == 3


def test_the_markdown_shows_each_benchmark_and_which_goals_were_missed() -> None:
    document = results()
    text = markdown(document, summarize(document, 10))
    assert "| 10 | kubeherd | 3 | 3.0 s | 4.0 s |" in text
    assert "| 100 | native DaemonSet | 1 | 90.0 s | 90.0 s |" in text
    assert "**0.33** to all pods created (goal 0.05: missed)" in text
    assert "p99 400 ms (goal 1000 ms: met)" in text
    assert "kubeherd 1.00, native DaemonSet 1.00 (goal for kubeherd 1.05: met)" in text
    assert "10 pods created by a client that does nothing else, 32 requests at a time: " in text
    assert "2.0 s, **5 pods/s** (median of 3 probes, from 4 to 10)." in text
    assert "median **50 %** over 3 pairs, from 50 to 83 % (goal 90 %: missed)." in text
    assert "| 3 | 4 pods/s | 3 pods/s | 83 % |" in text
    assert (
        "peak RSS 256 MiB or less: missed; 60 MiB or less after start-up: missed; "
        "1.0 KiB or less per pod: missed; no writes while idle: met; every first pass within "
        "30 s of a restart: met." in text
    )
    assert "| restarted with every pod in place: first pass over all 10 | 12.5 s |" in text
    assert "| restarted: CustomDaemonSets with nothing to do | 10 of 10 |" in text
    # (300 - 100) MiB over 100 pods; 5 CPU s over 100 pods.
    assert "| 2048.0 KiB |" in text
    assert "| CPU per 1000 pods rolled out | 50.00 s |" in text
    assert "| requests while idle, kubeherd: writes / reads | 0 / 2 |" in text
    assert "| 20 scrapes, the last 300 series in 40 KiB |" in text
    assert "![Rollout progress at 10 nodes](results/x.png)" in text


def test_results_made_before_probes_were_paired_read_as_they_did() -> None:
    document = {
        **results(),
        "limit": {"pods": 10, "concurrency": 32, "seconds": 2.0, "rate": 5.0},
    }
    summary = summarize(document, 10)
    assert summary["limit_percent"] == pytest.approx(100 * (10 / 3.0) / 5.0)
    assert "limit_percent_spread" not in summary
    text = markdown(document, summary)
    assert "2.0 s, **5 pods/s**." in text
    assert "3 pods/s, **67 %** of it (goal 90 %: missed)." in text


def test_a_probe_paired_with_no_kubeherd_run_counts_for_no_share() -> None:
    document = results()
    document["limit"] = with_probe(probes(), 32, probe_record(10, 1.0, 9))
    assert len(summarize(document, 10)["limit_pairs"]) == 3


def test_a_run_of_b4_alone_shows_no_empty_rollout_table() -> None:
    document = {**results(), "rollouts": [], "limit": {}, "join": {}}
    text = markdown(document, summarize(document, 10))
    assert "### B1" not in text
    assert "### B4 cost" in text


def tenant_results(restart_peak_mib: float) -> dict[str, Any]:
    tenant = {
        "foreign_pods": 20000,
        "daemonsets": 201,
        "template_kib": 200,
        "updates": 150,
        "history_limit": 100,
        "revisions_kept": 101,
        "peak_rss_after_start_mib": 72.0,
        "peak_rss_foreign_mib": 75.0,
        "peak_rss_daemonsets_mib": 200.0,
        "peak_rss_updates_mib": 210.0,
        "restart": {"seconds_to_first_passes": 6.0, "peak_rss_mib": restart_peak_mib},
    }
    return {**results(), "rollouts": [], "limit": {}, "join": {}, "cost": {}, "tenant": tenant}


def test_b6_shows_each_peak_and_whether_the_worst_stayed_within_the_charts_limit() -> None:
    within = markdown(tenant_results(220.0), summarize(tenant_results(220.0), 10))
    over = markdown(tenant_results(300.0), summarize(tenant_results(300.0), 10))

    assert "### B6 one tenant's worst" in within
    assert "200 CustomDaemonSets with 200 KiB templates" in within
    assert "| and the updates | 210 MiB |" in within
    assert "(first passes in 6.0 s) | 220 MiB |" in within
    assert "Goal: 256 MiB or less (the chart's limit): met." in within
    assert "Goal: 256 MiB or less (the chart's limit): missed." in over


def test_b6_runs_only_when_named() -> None:
    bench = RecordingBench()

    asyncio.run(run_benchmarks(cast(Any, bench), Options(nodes=100), lambda: None))
    asyncio.run(
        run_benchmarks(cast(Any, bench), Options(nodes=100, only=frozenset({"B6"})), lambda: None)
    )

    assert bench.steps.count("B6 on 100") == 1


def test_the_plot_is_a_png(tmp_path: Path) -> None:
    path = tmp_path / "rollout.png"
    plot(results(), 10, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 10_000


def test_the_profile_counts_each_function_once_per_stack_without_the_event_loop() -> None:
    folded = "\n".join(
        [
            "<module> (kubeherd/__main__.py:3);run_forever (asyncio/base_events.py:600);"
            "_run (asyncio/events.py:80);reconcile (kubeherd/controller.py:10);"
            "summarize (kubeherd/status.py:5);summarize (kubeherd/status.py:9) 3",
            "<module> (kubeherd/__main__.py:3);run_forever (asyncio/base_events.py:600);"
            "_run (asyncio/events.py:80);loads (json/__init__.py:346) 1",
            "a line py-spy did not write",
        ]
    )

    samples, top = folded_summary(folded)

    assert samples == 4
    assert top == [
        (75.0, "reconcile (controller.py)"),
        (75.0, "summarize (status.py)"),
        (25.0, "loads (__init__.py)"),
    ]


def test_profile_layers_count_a_sample_for_kubeherd_when_its_code_is_on_the_stack() -> None:
    loop = "<module> (kubeherd/cli.py:251);main (kubeherd/cli.py:246);_run (asyncio/events.py:80)"
    folded = "\n".join(
        [
            f"{loop};worker (kopf/queueing.py:306);pod_event (kubeherd/handlers.py:9) 2",
            f"{loop};worker (kopf/queueing.py:306);loads (json/__init__.py:346) 5",
            f"{loop};SSLProtocol.buffer_updated (asyncio/sslproto.py:433) 1",
            f"{loop};EpollSelector.select (selectors.py:468) 2",
        ]
    )

    assert layer_shares(folded) == [
        (50.0, KOPF_LAYER),
        (20.0, IDLE_LAYER),
        (20.0, KUBEHERD_LAYER),
        (10.0, NETWORK_LAYER),
    ]


class RecordingBench:
    """Stands in for bench.scenarios.Bench: records the steps `run` takes, and the nodes."""

    def __init__(self) -> None:
        self.steps: list[str] = []
        self.nodes = 100  # what set-up leaves: the cluster grows only when asked

    async def set_up(self) -> None:
        self.steps.append("set_up")

    async def grow_to(self, size: int) -> None:
        self.nodes = max(self.nodes, size)
        self.steps.append(f"grow_to {size}")

    async def rollouts(self, size: int, runs: int) -> None:
        self.steps.append(f"B1 on {self.nodes}")

    async def limit(self) -> None:
        self.steps.append(f"B3 on {self.nodes}")

    async def cost(self) -> None:
        self.steps.append(f"B4 on {self.nodes}")

    async def join(self) -> None:
        self.steps.append(f"B2 on {self.nodes}")

    async def tenant(self) -> None:
        self.steps.append(f"B6 on {self.nodes}")


def test_with_b1_the_probes_come_with_its_runs_not_after_them() -> None:
    bench = RecordingBench()
    options = Options(nodes=3000, only=frozenset({"B1", "B3"}))

    asyncio.run(run_benchmarks(cast(Any, bench), options, lambda: None))

    assert [step for step in bench.steps if step.startswith("B")] == ["B1 on 3000"]


@pytest.mark.parametrize("only", [{"B4"}, {"B3"}, {"B2"}, {"B3", "B4"}])
def test_every_benchmark_at_nodes_runs_on_that_many_nodes(only: set[str]) -> None:
    bench = RecordingBench()
    options = Options(nodes=3000, only=frozenset(only))

    asyncio.run(run_benchmarks(cast(Any, bench), options, lambda: None))

    ran = [step for step in bench.steps if step.startswith("B")]
    assert ran
    assert all(step.endswith(" on 3000") for step in ran)
