"""`make bench-refusals`'s own logic: the pod creates read from the API server's metrics, the
refusing webhook's answers and counts, and the results table."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bench.refusals import DEFAULT_CASES, create_backoff_ceiling, main, parse
from bench.refusals_report import PodPosts, markdown, pod_posts
from bench.refusing import (
    REFUSAL_MESSAGE,
    RefusingWebhook,
    ReviewCounts,
    refusal,
    webhook_configuration,
)
from kubeherd.defaults import MAX_CREATE_BACKOFF


def request_total(code: str, *, dry_run: str = "", subresource: str = "", **labels: str) -> str:
    fields = {
        "code": code,
        "component": "apiserver",
        "dry_run": dry_run,
        "group": "",
        "resource": "pods",
        "scope": "resource",
        "subresource": subresource,
        "verb": "POST",
        "version": "v1",
        **labels,
    }
    text = ",".join(f'{key}="{value}"' for key, value in sorted(fields.items()))
    return "apiserver_request_total{" + text + "}"


METRICS = "\n".join(
    [
        "# HELP apiserver_request_total [STABLE] Counter of apiserver requests",
        "# TYPE apiserver_request_total counter",
        request_total("201") + " 5",
        request_total("403") + " 7",
        request_total("422") + " 2",
        request_total("409") + " 4",
        request_total("403", dry_run="All") + " 3",
        request_total("201", dry_run="All") + " 1",
        # The scheduler's bindings are POSTs to a subresource of pods, not pod creates.
        request_total("201", subresource="binding") + " 200",
        request_total("403", resource="configmaps") + " 11",
        request_total("200", verb="GET") + " 90",
        'apiserver_request_total_other{code="403",resource="pods",verb="POST"} 50',
    ]
)


def test_pod_creates_are_read_from_the_api_servers_request_counts() -> None:
    assert pod_posts(METRICS) == PodPosts(created=5, refused=9, dry_runs=4)


def test_the_creates_between_two_reads_are_their_difference() -> None:
    later = METRICS.replace(request_total("403") + " 7", request_total("403") + " 10")
    assert pod_posts(later) - pod_posts(METRICS) == PodPosts(created=0, refused=3, dry_runs=0)


def test_metrics_without_pod_creates_count_none() -> None:
    assert pod_posts("# nothing here\nprocess_cpu_seconds_total 12.5\n") == PodPosts()


def review(uid: str, *, dry_run: bool | None) -> dict[str, Any]:
    request: dict[str, Any] = {"uid": uid, "operation": "CREATE", "object": {"kind": "Pod"}}
    if dry_run is not None:
        request["dryRun"] = dry_run
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def test_the_webhook_refuses_with_403_and_answers_the_reviews_uid() -> None:
    answer = refusal(review("abc-123", dry_run=False), "not here")
    assert answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == "abc-123"
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"] == {
        "code": 403,
        "reason": "Forbidden",
        "message": "not here",
    }


def test_reviews_are_counted_apart_for_dry_runs_and_real_creates() -> None:
    counts = ReviewCounts()
    for dry_run in (True, False, None, True, False):
        counts = counts.counted(review("uid", dry_run=dry_run))
    # A review without dryRun is of a real create.
    assert counts == ReviewCounts(dry_run=2, real=3)
    assert counts - ReviewCounts(dry_run=1, real=1) == ReviewCounts(dry_run=1, real=2)


def test_the_webhook_configuration_asks_about_pod_creates_in_one_namespace_only() -> None:
    configuration = webhook_configuration("refuse", "refusals-webhook", "https://x/v", b"PEM")
    (webhook,) = configuration["webhooks"]
    assert webhook["clientConfig"] == {"url": "https://x/v", "caBundle": "UEVN"}
    assert webhook["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "refusals-webhook"}
    }
    assert webhook["rules"][0]["operations"] == ["CREATE"]
    assert webhook["rules"][0]["resources"] == ["pods"]
    # Dry runs reach a webhook only when it declares no side effects.
    assert (webhook["sideEffects"], webhook["failurePolicy"]) == ("None", "Fail")
    assert webhook["admissionReviewVersions"] == ["v1"]


def test_the_webhook_serves_https_under_its_own_ca_and_counts_what_it_refused(
    tmp_path: Path,
) -> None:
    async def exchange() -> tuple[list[dict[str, Any]], ReviewCounts, bytes]:
        webhook = RefusingWebhook(tmp_path)
        await webhook.start()
        try:
            trusted = ssl.create_default_context(cadata=webhook.ca_pem.decode())
            async with aiohttp.ClientSession() as session:
                answers = []
                for index, dry_run in enumerate((True, False, False)):
                    async with session.post(
                        webhook.url, json=review(f"uid-{index}", dry_run=dry_run), ssl=trusted
                    ) as response:
                        answers.append(await response.json())
            return answers, webhook.counts, webhook.ca_pem
        finally:
            await webhook.stop()

    answers, counts, ca_pem = asyncio.run(exchange())
    assert [a["response"]["uid"] for a in answers] == ["uid-0", "uid-1", "uid-2"]
    assert all(a["response"]["allowed"] is False for a in answers)
    assert answers[0]["response"]["status"]["message"] == REFUSAL_MESSAGE
    assert counts == ReviewCounts(dry_run=1, real=2)
    configuration = webhook_configuration("refuse", "ns", "https://x/v", ca_pem)
    assert base64.b64decode(configuration["webhooks"][0]["clientConfig"]["caBundle"]) == ca_pem


def document(*, completed: bool = True) -> dict[str, Any]:
    case = {
        "case": "quota",
        "description": "ResourceQuota of 0 pods",
        "pods": 0,
        "first_refusal_seconds": 1.34,
        "refused_first_pass": 1,
        "refused_in_window": 6,
        "dry_runs_in_window": 3,
        "webhook_reviews": None,
    }
    webhook = {
        **case,
        "case": "webhook",
        "description": "validating admission webhook",
        "first_refusal_seconds": None,
        "refused_first_pass": 2,
        "refused_in_window": 7,
        "webhook_reviews": {"dry_run": 4, "real": 7},
    }
    return {
        "meta": {
            "nodes": 200,
            "window_seconds": 30.0,
            "kubeherd_commit": "abc1234",
            "started": "2026-11-27 10:00 UTC",
            "max_create_backoff": 60.0,
            "max_first_window": 16,
            "operator_arguments": ["--webhook-listen=127.0.0.1:1"],
            "completed": completed,
        },
        "cases": [case, webhook],
    }


def test_the_table_has_a_row_of_figures_per_case() -> None:
    table = markdown(document())
    assert "(200 nodes, 30 s)" in table
    assert "--max-create-backoff 60 s" in table
    rows = [line for line in table.splitlines() if line.startswith("| ResourceQuota")]
    assert rows == ["| ResourceQuota of 0 pods | 0 | 1 | 6 | 1.3 s | 3 | — |"]
    assert "| validating admission webhook | 0 | 2 | 7 | — | 3 | 4 / 7 |" in table
    assert "did not complete" not in table


def test_the_table_of_an_unfinished_run_says_so() -> None:
    assert "did not complete" in markdown(document(completed=False))


def test_the_create_backoff_is_the_operators_default_unless_a_flag_sets_it() -> None:
    assert create_backoff_ceiling(()) == MAX_CREATE_BACKOFF
    assert create_backoff_ceiling(("--verbose", "--max-create-backoff=4")) == 4.0


def test_the_cases_default_to_quotas_and_the_webhook_and_unknown_ones_are_refused() -> None:
    assert parse([]).cases == DEFAULT_CASES
    assert parse(["--cases", "policy, quota"]).cases == ("policy", "quota")
    with pytest.raises(SystemExit):
        parse(["--cases", "quota,firewall"])


def test_a_results_file_renders_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "results.json"
    results.write_text(json.dumps(document()))
    assert main(["--render", str(results)]) == 0
    assert capsys.readouterr().out == markdown(document())
