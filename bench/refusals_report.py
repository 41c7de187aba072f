"""`make bench-refusals`'s pure parts: the pod creates counted in the API server's own metrics,
and the results as a markdown table."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.clients import samples

REQUESTS = "apiserver_request_total"
# How a quota (403 Forbidden), an admission policy or webhook (403), or a pod the API server
# finds invalid (422) is refused.
REFUSED_CODES = frozenset({"403", "422"})


@dataclass(frozen=True)
class PodPosts:
    """Pod creates the API server has answered so far: the real ones it created, the real ones
    it refused, and the dry runs, whatever their answer."""

    created: int = 0
    refused: int = 0
    dry_runs: int = 0

    def __sub__(self, earlier: PodPosts) -> PodPosts:
        return PodPosts(
            self.created - earlier.created,
            self.refused - earlier.refused,
            self.dry_runs - earlier.dry_runs,
        )


def pod_posts(metrics: str) -> PodPosts:
    """The pod creates (POST to pods, not to a subresource) in kube-apiserver's /metrics text."""
    created = refused = dry_runs = 0
    for labels, value in samples(metrics, REQUESTS):
        if (labels.get("resource"), labels.get("subresource"), labels.get("verb")) != (
            "pods",
            "",
            "POST",
        ):
            continue
        count = round(value)
        if labels.get("dry_run"):
            dry_runs += count
        elif labels.get("code") == "201":
            created += count
        elif labels.get("code") in REFUSED_CODES:
            refused += count
    return PodPosts(created, refused, dry_runs)


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} s"


def _reviews(case: Mapping[str, Any]) -> str:
    reviews = case.get("webhook_reviews")
    if not reviews:
        return "—"
    return f"{reviews['dry_run']} / {reviews['real']}"


def markdown(document: Mapping[str, Any]) -> str:
    meta = document["meta"]
    window = meta["window_seconds"]
    arguments = " ".join(meta["operator_arguments"]) or "none"
    lines = [
        f"### What a refused first batch costs ({meta['nodes']} nodes, {window:g} s)",
        "",
        f"kubeherd {meta['kubeherd_commit']}, started {meta['started']}; --max-create-backoff "
        f"{meta['max_create_backoff']:g} s, first window at most {meta['max_first_window']}; "
        f"operator flags: {arguments}.",
        "",
        "| refused by | pods created | refused, first pass | refused in window "
        "| first refusal after | template dry runs | webhook reviews (dry run / real) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for case in document["cases"]:
        lines.append(
            f"| {case['description']} | {case['pods']} | {case['refused_first_pass']} "
            f"| {case['refused_in_window']} | {_seconds(case['first_refusal_seconds'])} "
            f"| {case['dry_runs_in_window']} | {_reviews(case)} |"
        )
    if not meta.get("completed"):
        lines += ["", "The run did not complete: these are the cases it measured."]
    return "\n".join(lines) + "\n"
